package main

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/tierlog/tierlog/local"
	"github.com/tierlog/tierlog/record"
)

// verify of local files: a path, a partition directory, a .log.

// verifyPath verifies the file, partition directory or log directory at
// path.
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
	order := local.NewSegmentOrder(0, math.MaxInt64, false) // a file not named by its base offset
	if nameErr == nil {
		order = local.LocalSegmentOrder(nameBase)
	}
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
		if err := order.Check(e); err != nil {
			if rep.FirstOffset == nil && nameErr == nil && first < nameBase {
				rep.problemf("first offset %d is below the segment's base offset %d (from its name)", first, nameBase)
			} else {
				rep.problemf("%v", err)
			}
		}
		if rep.FirstOffset == nil {
			rep.FirstOffset = &first
		}
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
