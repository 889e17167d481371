package main

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/spf13/cobra"

	"github.com/tierlog/tierlog/index"
	"github.com/tierlog/tierlog/local"
	"github.com/tierlog/tierlog/objstore/storeurl"
	"github.com/tierlog/tierlog/producerstate"
	"github.com/tierlog/tierlog/record"
	"github.com/tierlog/tierlog/tiered"
)

func newVerifyCmd() *cobra.Command {
	var asJSON, deep bool
	var storeURL string
	var partitions []string
	cmd := &cobra.Command{
		Use:   "verify PATH...",
		Short: "Check segments, indexes and producer state: CRCs, offsets, and index entries against the log",
		Long: `verify checks a segment file, a partition directory (<topic>-<partition>)
or a log directory holding partition directories:

  .log        every batch's CRC (CRC-32C for v2, CRC-32 for magic 0/1), its
              records, offsets strictly increasing, no torn tail
  .index      entries in order, and each entry's offset equal to the last
              offset of the batch that starts at its position
  .timeindex  entries in order, and each entry naming the last offset of a
              batch whose max timestamp is the entry's timestamp
  .snapshot   its CRC-32C and layout; each producer once, its last batch and
              open transaction below the snapshot's offset; that offset
              within the log's (first segment's base to log end)
  .txnindex   Kafka's sanity check (version 0, no entry below the segment's
              base offset, whole entries); markers in increasing order and
              within the segment's offsets, first offsets and last stable
              offsets consistent with them
  directory   all of the above per segment, segments not overlapping, no
              index without its log

With --store it also checks the partitions' objects in the bucket against
their manifests: the partitions given with --partition (one without a
manifest is a problem), else those of the partition directories given,
else every partition with a manifest in the bucket (finding none is an
error, exit 2: the URL is likely wrong). A local partition given (or in a
log directory given) whose log-start-offset-checkpoint says it was
offloaded, but that has no manifest in the bucket, is an error (exit 2)
naming it: the --store URL or its prefix is likely wrong. By default each object must exist with the size the manifest
recorded (one HEAD each); --deep downloads every object, one segment at a
time into a temporary directory, and checks its CRC-32C against the
manifest, every batch CRC, that offsets stay in the manifest's range, the
record count, and every index entry against the log.

It prints one line per file or object and exits 1 when it found any problem.`,
		Example: `  tierctl verify /var/kafka/orders-0
  tierctl verify 00000000000000000000.log
  tierctl verify --json /var/kafka | jq 'select(.problems)'
  tierctl verify --store s3://bucket/tierlog?region=eu-west-1 --partition orders-0 --deep
  tierctl verify /var/lib/tierlog/logs/orders-0 --store file:///var/lib/tierlog/bucket`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 && storeURL == "" {
				return usagef("verify needs a PATH, or --store; see 'tierctl verify --help'")
			}
			if deep && storeURL == "" {
				return usagef("--deep checks objects in a bucket: it needs --store")
			}
			if len(partitions) > 0 && storeURL == "" {
				return usagef("--partition %s names a partition in a bucket: it needs --store", partitions[0])
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			w := bufio.NewWriter(cmd.OutOrStdout())
			defer w.Flush()
			var reports []fileReport
			bar := newProgress(cmd, logBytes(args), "verify", true)
			for _, p := range args {
				rs, err := verifyPath(p, bar)
				if err != nil {
					return err
				}
				reports = append(reports, rs...)
			}
			bar.Finish()
			if storeURL != "" {
				rs, err := verifyBucket(cmd, storeURL, partitions, args, deep)
				if err != nil {
					return err
				}
				reports = append(reports, rs...)
			}
			bad := 0
			for _, r := range reports {
				if len(r.Problems) > 0 {
					bad++
				}
				if asJSON {
					writeJSON(w, r)
					continue
				}
				r.print(w)
			}
			if !asJSON {
				fmt.Fprintf(w, "verified %d file(s): %d with problems\n", len(reports), bad)
			}
			if bad > 0 {
				return errProblems
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object per file")
	cmd.Flags().StringVar(&storeURL, "store", "", "bucket URL: check the partitions' objects there too")
	cmd.Flags().StringArrayVar(&partitions, "partition", nil, "with --store: a partition (TOPIC-PARTITION) to check in the bucket (repeatable)")
	cmd.Flags().BoolVar(&deep, "deep", false, "with --store: download every object and check its CRC-32C, batches and indexes")
	return cmd
}

// verifyBucket runs the remote checks of verify --store. It checks the
// partitions given with --partition (a missing manifest is a problem),
// else the partition directories among paths, else every partition with a
// manifest in the bucket (none at all is an error: the URL is likely
// wrong). A local partition among paths, or in a log directory among
// them, whose checkpoint says it was offloaded while the bucket has no
// manifest for it is an error wrapping tiered.ErrNoManifest.
func verifyBucket(cmd *cobra.Command, storeURL string, partitions, paths []string, deep bool) ([]fileReport, error) {
	ctx := cmd.Context()
	for _, p := range partitions {
		if _, err := local.ParsePartitionDirName(p); err != nil {
			return nil, usagef("--partition: %v", err)
		}
	}
	store, err := openStore(ctx, storeURL)
	if err != nil {
		return nil, err
	}
	defer store.Close()
	explicit := len(partitions) > 0
	prefixes := partitions
	localDirs := map[string]string{} // partition name -> directory among paths
	for _, p := range paths {
		for _, d := range localPartitionDirs(p) {
			name := filepath.Base(filepath.Clean(d))
			if _, dup := localDirs[name]; !dup && !explicit && filepath.Clean(d) == filepath.Clean(p) {
				prefixes = append(prefixes, name)
			}
			localDirs[name] = d
		}
	}
	listed := len(prefixes) == 0
	if listed {
		if prefixes, err = bucketPartitions(ctx, store); err != nil {
			return nil, err
		}
	}
	parts, total := loadManifests(ctx, store, prefixes, deep)
	have := map[string]bool{}
	for _, rp := range parts {
		have[rp.prefix] = rp.err != nil || manifestExists(rp.m)
	}
	var out []fileReport
	names := make([]string, 0, len(localDirs))
	for name := range localDirs {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		// An offloaded local partition without a manifest: the bucket
		// is not the one it went to. One with a manifest it refuses
		// (the bucket went back in time): what the partition would say
		// at its next open. A partition that does not open otherwise is
		// reported by the local checks.
		dir := localDirs[name]
		if explicit && !have[name] {
			continue
		}
		p, _, err := openTieredIn(ctx, dir, store, storeURL)
		var rb *tiered.RollbackError
		switch {
		case errors.Is(err, tiered.ErrNoManifest) && !explicit && !have[name]:
			return nil, err
		case errors.As(err, &rb):
			r := fileReport{Path: dir, Kind: "partition"}
			r.problemf("%v", err)
			out = append(out, r)
		case err == nil:
			p.Close()
		}
	}
	if listed && len(parts) == 0 {
		return nil, errNoPartitions(storeURL)
	}
	for i := range parts {
		parts[i].mustExist = explicit
	}
	tmp, err := os.MkdirTemp("", "tierctl-verify-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	bar := newProgress(cmd, total, "verify "+storeurl.Redact(storeURL), deep)
	for _, rp := range parts {
		rs, err := verifyRemote(ctx, store, rp, deep, tmp, bar)
		if err != nil {
			return nil, err
		}
		out = append(out, rs...)
	}
	bar.Finish()
	return out, nil
}

// localPartitionDirs returns path when it is a partition directory (a
// directory named <topic>-<partition>), else the partition directories in
// it when it is a directory, else nothing.
func localPartitionDirs(path string) []string {
	if st, err := os.Stat(path); err != nil || !st.IsDir() {
		return nil
	}
	if _, err := local.ParsePartitionDirName(filepath.Base(filepath.Clean(path))); err == nil {
		return []string{path}
	}
	ents, err := os.ReadDir(path)
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range ents {
		if _, err := local.ParsePartitionDirName(e.Name()); err == nil && e.IsDir() {
			out = append(out, filepath.Join(path, e.Name()))
		}
	}
	return out
}

// fileReport is what verify found in one file.
type fileReport struct {
	Path        string   `json:"path"`
	Kind        string   `json:"kind"`
	Batches     int      `json:"batches,omitempty"`
	Records     int64    `json:"records,omitempty"`
	FirstOffset *int64   `json:"firstOffset,omitempty"`
	LastOffset  *int64   `json:"lastOffset,omitempty"`
	Bytes       int64    `json:"bytes"`
	Entries     int      `json:"entries,omitempty"`
	Problems    []string `json:"problems,omitempty"`
	Notes       []string `json:"notes,omitempty"`
}

func (r *fileReport) problemf(format string, args ...any) {
	const max = 100
	if len(r.Problems) == max {
		r.Problems = append(r.Problems, "… more problems not listed")
	}
	if len(r.Problems) < max {
		r.Problems = append(r.Problems, fmt.Sprintf(format, args...))
	}
}

func (r *fileReport) print(w *bufio.Writer) {
	status := "ok  "
	if len(r.Problems) > 0 {
		status = "FAIL"
	}
	fmt.Fprintf(w, "%s %s: ", status, r.Path)
	switch r.Kind {
	case "log":
		fmt.Fprintf(w, "%d batches, %d records", r.Batches, r.Records)
		if r.FirstOffset != nil {
			fmt.Fprintf(w, ", offsets %d..%d", *r.FirstOffset, *r.LastOffset)
		}
		fmt.Fprintf(w, ", %d bytes\n", r.Bytes)
	case "object", "manifest":
		fmt.Fprintf(w, "%s, %d bytes\n", r.Kind, r.Bytes)
	default:
		fmt.Fprintf(w, "%d entries, %d bytes\n", r.Entries, r.Bytes)
	}
	for _, p := range r.Problems {
		fmt.Fprintf(w, "     problem: %s\n", p)
	}
	for _, n := range r.Notes {
		fmt.Fprintf(w, "     note: %s\n", n)
	}
}

// batchInfo is what the index checks need to know about each batch.
type batchInfo struct {
	position     int64
	lastOffset   int64
	maxTimestamp int64
}

// logSummary is the result of checking one .log.
type logSummary struct {
	batches []batchInfo
	size    int64
}

func verifyPath(path string, bar *progress) ([]fileReport, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, usageError{err}
	}
	if !st.IsDir() {
		return verifyFile(path, bar)
	}
	ents, err := os.ReadDir(path)
	if err != nil {
		return nil, usageError{err}
	}
	hasSegments, hasDirs := false, false
	var subdirs []string
	for _, e := range ents {
		if e.IsDir() {
			hasDirs = true
			// A log directory also holds directories that are not
			// partitions (remote-log-index-cache, a deleted partition's
			// *-delete): not verified as partitions.
			if _, err := local.ParsePartitionDirName(e.Name()); err == nil {
				subdirs = append(subdirs, filepath.Join(path, e.Name()))
			}
		} else if _, _, err := local.ParseFileName(e.Name()); err == nil {
			hasSegments = true
		}
	}
	if hasSegments || !hasDirs {
		return verifyPartitionDir(path, ents, bar)
	}
	// A log directory: verify each partition directory in it.
	var out []fileReport
	for _, d := range subdirs {
		rs, err := verifyPath(d, bar)
		if err != nil {
			return nil, err
		}
		out = append(out, rs...)
	}
	return out, nil
}

// logBytes sums the sizes of the .log files under paths (for a progress
// bar; unreadable paths count nothing here and fail later).
func logBytes(paths []string) int64 {
	var n int64
	for _, p := range paths {
		filepath.WalkDir(p, func(path string, d os.DirEntry, err error) error {
			if err == nil && !d.IsDir() && strings.HasSuffix(path, local.LogSuffix) {
				if info, err := d.Info(); err == nil {
					n += info.Size()
				}
			}
			return nil
		})
	}
	return n
}

// verifyFile checks one file; a .log brings its sibling indexes along.
func verifyFile(path string, bar *progress) ([]fileReport, error) {
	switch fileKind(path) {
	case "log":
		rep, _ := verifyLog(path, bar)
		return []fileReport{rep}, nil
	case "index", "timeindex", "txnindex":
		logPath := strings.TrimSuffix(path, filepath.Ext(path)) + local.LogSuffix
		var sum *logSummary
		if _, err := os.Stat(logPath); err == nil {
			_, sum = verifyLog(logPath, nil)
		}
		if fileKind(path) == "txnindex" {
			return []fileReport{verifyTxnIndexFile(path, sum)}, nil
		}
		return []fileReport{verifyIndexFile(path, sum)}, nil
	case "snapshot":
		return []fileReport{verifySnapshotFile(path, dirOffsetRange(filepath.Dir(path)))}, nil
	}
	return nil, usagef("%s: not a .log, .index, .timeindex, .snapshot or .txnindex file", path)
}

func verifyPartitionDir(dir string, ents []os.DirEntry, bar *progress) ([]fileReport, error) {
	type seg struct {
		base                  int64
		log, idx, tidx, txn   string
		hasLog, hasIdx, hasTi bool
	}
	segs := map[int64]*seg{}
	var notes, snapshots []string
	for _, e := range ents {
		if e.IsDir() {
			continue
		}
		base, suffix, err := local.ParseFileName(e.Name())
		if err != nil {
			continue // checkpoints, partition.metadata, …
		}
		p := filepath.Join(dir, e.Name())
		if suffix == local.SnapshotSuffix {
			snapshots = append(snapshots, p) // named by an offset, not a segment
			continue
		}
		s := segs[base]
		if s == nil {
			s = &seg{base: base}
			segs[base] = s
		}
		switch suffix {
		case local.LogSuffix:
			s.log, s.hasLog = p, true
		case local.IndexSuffix:
			s.idx, s.hasIdx = p, true
		case local.TimeIndexSuffix:
			s.tidx, s.hasTi = p, true
		case local.TxnIndexSuffix:
			s.txn = p
		default:
			notes = append(notes, fmt.Sprintf("%s is a leftover of an interrupted operation; opening the partition resolves it", e.Name()))
		}
	}
	bases := make([]int64, 0, len(segs))
	for b := range segs {
		bases = append(bases, b)
	}
	sort.Slice(bases, func(i, j int) bool { return bases[i] < bases[j] })
	var out []fileReport
	prevLast, prevPath, prevPos := int64(-1), "", int64(-1)
	var rng *offsetRange
	for _, b := range bases {
		s := segs[b]
		if !s.hasLog {
			for _, p := range []string{s.idx, s.tidx, s.txn} {
				if p != "" {
					r := fileReport{Path: p, Kind: fileKind(p)}
					r.problemf("index file without its %s", local.FileName(b, local.LogSuffix))
					out = append(out, r)
				}
			}
			continue
		}
		rep, sum := verifyLog(s.log, bar)
		if rng == nil {
			rng = &offsetRange{start: b}
		}
		rng.end = b
		if rep.LastOffset != nil {
			rng.end = *rep.LastOffset + 1
		}
		if rep.FirstOffset != nil && prevLast >= 0 && *rep.FirstOffset <= prevLast {
			rep.problemf("first offset %d overlaps %s, whose batch at position %d ends at offset %d", *rep.FirstOffset, filepath.Base(prevPath), prevPos, prevLast)
		}
		if rep.LastOffset != nil {
			prevLast, prevPath, prevPos = *rep.LastOffset, s.log, sum.batches[len(sum.batches)-1].position
		}
		out = append(out, rep)
		if s.hasIdx {
			out = append(out, verifyIndexFile(s.idx, sum))
		}
		if s.hasTi {
			out = append(out, verifyIndexFile(s.tidx, sum))
		}
		if s.txn != "" {
			out = append(out, verifyTxnIndexFile(s.txn, sum))
		}
	}
	sort.Strings(snapshots)
	for _, p := range snapshots {
		out = append(out, verifySnapshotFile(p, rng))
	}
	if len(out) > 0 && len(notes) > 0 {
		out[0].Notes = append(out[0].Notes, notes...)
	}
	if len(out) == 0 {
		r := fileReport{Path: dir, Kind: "directory"}
		r.Notes = append(r.Notes, "no segment files")
		r.Notes = append(r.Notes, notes...)
		out = append(out, r)
	}
	return out, nil
}

// verifyLog checks a .log file batch by batch and returns what the index
// checks need. It reports every bad CRC it can reach; an impossible size or
// magic stops the walk (nothing after it can be framed).
func verifyLog(path string, bar *progress) (fileReport, *logSummary) {
	defer func() {
		if st, err := os.Stat(path); err == nil {
			bar.Add(st.Size())
		}
	}()
	rep := fileReport{Path: path, Kind: "log"}
	f, err := os.Open(path)
	if err != nil {
		rep.problemf("%v", err)
		return rep, nil
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		rep.problemf("%v", err)
		return rep, nil
	}
	rep.Bytes = st.Size()
	nameBase, _, nameErr := local.ParseFileName(filepath.Base(path))
	sum := &logSummary{size: st.Size()}
	s := record.NewScanner(f, 0, st.Size(), record.ScanOptions{})
	var it record.Iterator
	prevLast := int64(-1)
	for s.Next() {
		e := s.Entry()
		rep.Batches++
		crcErr := validateEntry(e)
		if crcErr != nil {
			rep.problemf("%v", record.AtPosition(crcErr, e.Position))
		}
		first := e.BaseOffset
		if first < 0 {
			first = e.LastOffset
		}
		if rep.FirstOffset == nil {
			rep.FirstOffset = &first
			if nameErr == nil && first < nameBase {
				rep.problemf("first offset %d is below the segment's base offset %d (from its name)", first, nameBase)
			}
		}
		if err := e.Follows(prevLast); err != nil {
			rep.problemf("%v", err)
		}
		prevLast = e.LastOffset
		last := e.LastOffset
		rep.LastOffset = &last
		sum.batches = append(sum.batches, batchInfo{position: e.Position, lastOffset: e.LastOffset, maxTimestamp: e.MaxTimestamp})
		if crcErr == nil { // records of a damaged batch are not worth parsing
			rep.Records += checkRecords(&rep, &it, e)
		}
	}
	if err := s.Err(); err != nil {
		var be *record.BatchError
		switch {
		case errors.Is(err, record.ErrTornTail):
			rep.problemf("torn tail: the last %d bytes do not form a whole batch (%v)", st.Size()-s.ValidEnd(), err)
		case errors.As(err, &be):
			rep.problemf("%v; %d bytes after position %d cannot be read as batches", err, st.Size()-s.ValidEnd(), s.ValidEnd())
		default:
			rep.problemf("read: %v", err)
		}
	}
	return rep, sum
}

// checkRecords iterates an entry's records and reports records that do not
// parse, that fall outside the batch's offsets, or that disagree with the
// batch's record count. It returns the number of records.
func checkRecords(rep *fileReport, it *record.Iterator, e *record.Entry) int64 {
	if err := it.Reset(e.Data); err != nil {
		rep.problemf("records of the batch at position %d: %v", e.Position, err)
		return 0
	}
	n := int64(0)
	prev := int64(-1)
	for it.Next() {
		r := it.Record()
		if (e.BaseOffset >= 0 && r.Offset < e.BaseOffset) || r.Offset > e.LastOffset || r.Offset <= prev {
			rep.problemf("batch at position %d: record offset %d is out of order or outside %d..%d", e.Position, r.Offset, e.BaseOffset, e.LastOffset)
		}
		prev = r.Offset
		n++
	}
	if err := it.Err(); err != nil {
		rep.problemf("records of the batch at position %d: %v", e.Position, err)
	}
	if e.Magic == 2 && n != int64(e.Batch().NumRecords()) && it.Err() == nil {
		rep.problemf("batch at position %d: %d records, header says %d", e.Position, n, e.Batch().NumRecords())
	}
	return n
}

// readSegmentFile reads one of a segment's files, named after its base
// offset; ok is false (the report saying why) when it cannot.
func readSegmentFile(path, kind string) (rep fileReport, base int64, data []byte, ok bool) {
	rep = fileReport{Path: path, Kind: kind}
	base, _, err := local.ParseFileName(filepath.Base(path))
	if err != nil {
		rep.problemf("%v", err)
		return rep, 0, nil, false
	}
	if data, err = os.ReadFile(path); err != nil {
		rep.problemf("%v", err)
		return rep, 0, nil, false
	}
	rep.Bytes = int64(len(data))
	return rep, base, data, true
}

// verifyIndexFile checks an index file, against its log when sum is not nil.
func verifyIndexFile(path string, sum *logSummary) fileReport {
	kind := fileKind(path)
	rep, base, data, ok := readSegmentFile(path, kind)
	if !ok {
		return rep
	}
	if sum == nil {
		rep.Notes = append(rep.Notes, "no .log beside it: only the entries' order was checked")
	}
	byPos := map[int64]int{}
	byLast := map[int64]int{}
	if sum != nil {
		for i, b := range sum.batches {
			byPos[b.position] = i
			byLast[b.lastOffset] = i
		}
	}
	switch kind {
	case "index":
		x := index.NewOffsetIndexView(data, base)
		rep.Entries = x.Entries()
		if len(data)%index.OffsetEntrySize != 0 {
			rep.problemf("length %d is not a multiple of %d", len(data), index.OffsetEntrySize)
		}
		if err := x.SanityCheck(); err != nil {
			rep.problemf("%v", err)
		} else if unused := len(data)/index.OffsetEntrySize - x.Entries(); unused > 0 {
			rep.Notes = append(rep.Notes, fmt.Sprintf("%d unused zero slots (not trimmed: an active segment, or an unclean shutdown)", unused))
		}
		for i := 0; sum != nil && i < x.Entries(); i++ {
			e := x.Entry(i)
			j, ok := byPos[int64(e.Position)]
			switch {
			case int64(e.Position) >= sum.size:
				rep.problemf("entry %d (offset %d) points at position %d, past the log's %d bytes", i, e.Offset, e.Position, sum.size)
			case !ok:
				rep.problemf("entry %d (offset %d) points at position %d, which is not the start of a batch", i, e.Offset, e.Position)
			case sum.batches[j].lastOffset != e.Offset:
				rep.problemf("entry %d: offset %d, but the batch at position %d ends at offset %d", i, e.Offset, e.Position, sum.batches[j].lastOffset)
			}
		}
	case "timeindex":
		x := index.NewTimeIndexView(data, base)
		rep.Entries = x.Entries()
		if len(data)%index.TimeEntrySize != 0 {
			rep.problemf("length %d is not a multiple of %d", len(data), index.TimeEntrySize)
		}
		if err := x.SanityCheck(); err != nil {
			rep.problemf("%v", err)
		} else if unused := len(data)/index.TimeEntrySize - x.Entries(); unused > 0 {
			rep.Notes = append(rep.Notes, fmt.Sprintf("%d unused zero slots (not trimmed: an active segment, or an unclean shutdown)", unused))
		}
		for i := 0; sum != nil && i < x.Entries(); i++ {
			e := x.Entry(i)
			j, ok := byLast[e.Offset]
			switch {
			case !ok:
				rep.problemf("entry %d (timestamp %d) names offset %d, which is not the last offset of any batch", i, e.Timestamp, e.Offset)
			case sum.batches[j].maxTimestamp != e.Timestamp:
				rep.problemf("entry %d: timestamp %d, but the batch ending at offset %d has max timestamp %d", i, e.Timestamp, e.Offset, sum.batches[j].maxTimestamp)
			}
		}
	}
	return rep
}

// offsetRange is the offsets a partition directory's log holds: from its
// first segment's base offset to its log end offset (one past the last
// batch of its last segment, or that segment's base when it is empty).
type offsetRange struct {
	start, end int64
}

// dirOffsetRange reads the range of the log in dir from the segment names
// and the batch headers of its last segment; nil when dir has no .log.
func dirOffsetRange(dir string) *offsetRange {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var bases []int64
	for _, e := range ents {
		if base, suffix, err := local.ParseFileName(e.Name()); err == nil && suffix == local.LogSuffix && !e.IsDir() {
			bases = append(bases, base)
		}
	}
	if len(bases) == 0 {
		return nil
	}
	slices.Sort(bases)
	last := bases[len(bases)-1]
	r := &offsetRange{start: bases[0], end: last}
	f, err := os.Open(filepath.Join(dir, local.FileName(last, local.LogSuffix)))
	if err != nil {
		return r
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return r
	}
	s := record.NewScanner(f, 0, st.Size(), record.ScanOptions{HeadersOnly: true})
	for s.Next() {
		r.end = s.Entry().LastOffset + 1
	}
	return r
}

// verifySnapshotFile checks a producer snapshot: that it decodes (version,
// CRC-32C, a count matching its length), that each producer is in it once
// with its last batch and open transaction below the snapshot's offset,
// and, when rng is not nil, that the offset lies in the log's range (Kafka
// deletes a snapshot outside it when it loads the partition).
func verifySnapshotFile(path string, rng *offsetRange) fileReport {
	rep := fileReport{Path: path, Kind: "snapshot"}
	name := filepath.Base(path)
	offset, ok := producerstate.ParseSnapshotFileName(name)
	if !ok {
		rep.problemf("%s is not a snapshot file name (an offset and %s)", name, producerstate.SnapshotSuffix)
		return rep
	}
	data, err := os.ReadFile(path)
	if err != nil {
		rep.problemf("%v", err)
		return rep
	}
	rep.Bytes = int64(len(data))
	entries, err := producerstate.DecodeSnapshot(data)
	if err != nil {
		rep.problemf("%v", err)
		return rep
	}
	rep.Entries = len(entries)
	seen := make(map[int64]int, len(entries))
	for i, e := range entries {
		if j, dup := seen[e.ProducerID]; dup {
			rep.problemf("entry %d: producer %d is also entry %d", i, e.ProducerID, j)
		}
		seen[e.ProducerID] = i
		if e.LastOffset >= 0 {
			if e.LastOffset >= offset {
				rep.problemf("entry %d: producer %d's last batch ends at offset %d, not below the snapshot's offset %d", i, e.ProducerID, e.LastOffset, offset)
			}
			if e.OffsetDelta < 0 || int64(e.OffsetDelta) > e.LastOffset {
				rep.problemf("entry %d: producer %d's last batch has offset delta %d with last offset %d", i, e.ProducerID, e.OffsetDelta, e.LastOffset)
			}
		}
		if t := e.CurrentTxnFirstOffset; t >= 0 {
			if t >= offset {
				rep.problemf("entry %d: producer %d's open transaction starts at offset %d, not below the snapshot's offset %d", i, e.ProducerID, t, offset)
			} else if e.LastOffset >= 0 && t > e.LastOffset {
				rep.problemf("entry %d: producer %d's open transaction starts at offset %d, after its last batch (offset %d)", i, e.ProducerID, t, e.LastOffset)
			}
		}
	}
	switch {
	case rng == nil:
		rep.Notes = append(rep.Notes, "no .log beside it: its offset was not checked against the log")
	case offset < rng.start || offset > rng.end:
		rep.problemf("offset %d (from its name) is outside the log's offsets %d..%d; Kafka deletes such a snapshot when it loads the partition",
			offset, rng.start, rng.end)
	}
	return rep
}

// verifyTxnIndexFile checks a segment's transaction index: Kafka's sanity
// check (whole entries of version 0, none below the segment's base
// offset), markers in strictly increasing order (Kafka's append rule),
// each transaction's first offset at or below its marker's and its last
// stable offset at most one past it, and, against the segment's log when
// sum is not nil, every marker within the segment's offsets.
func verifyTxnIndexFile(path string, sum *logSummary) fileReport {
	rep, base, data, ok := readSegmentFile(path, "txnindex")
	if !ok {
		return rep
	}
	rep.Entries = len(data) / producerstate.TxnIndexEntrySize
	if err := producerstate.SanityCheckTxnIndex(data, base); err != nil {
		rep.problemf("%v", err)
	}
	entries, err := producerstate.DecodeTxnIndex(data)
	if err != nil {
		var fe *producerstate.FormatError
		if errors.As(err, &fe) {
			entries, _ = producerstate.DecodeTxnIndex(data[:fe.Pos-fe.Pos%producerstate.TxnIndexEntrySize])
		}
	}
	segLast := int64(-1)
	if sum != nil {
		segLast = base - 1 // an empty segment holds no offset
		if n := len(sum.batches); n > 0 {
			segLast = sum.batches[n-1].lastOffset
		}
	} else {
		rep.Notes = append(rep.Notes, "no .log beside it: the markers were not checked against the segment")
	}
	prev := int64(-1)
	for i, a := range entries {
		if i > 0 && a.LastOffset <= prev {
			rep.problemf("entry %d: marker offset %d does not follow entry %d's %d", i, a.LastOffset, i-1, prev)
		}
		prev = a.LastOffset
		if a.FirstOffset > a.LastOffset {
			rep.problemf("entry %d: producer %d's transaction starts at offset %d, after its marker at %d", i, a.ProducerID, a.FirstOffset, a.LastOffset)
		}
		if a.LastStableOffset > a.LastOffset+1 {
			rep.problemf("entry %d: last stable offset %d is past the marker at %d", i, a.LastStableOffset, a.LastOffset)
		}
		if sum != nil && a.LastOffset > segLast {
			rep.problemf("entry %d: marker offset %d is past the segment's last offset %d", i, a.LastOffset, segLast)
		}
	}
	return rep
}
