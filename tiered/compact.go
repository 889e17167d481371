package tiered

import (
	"bufio"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/compaction"
	"github.com/tierlog/tierlog/local"
	"github.com/tierlog/tierlog/manifest"
	"github.com/tierlog/tierlog/objstore"
	"github.com/tierlog/tierlog/producerstate"
	"github.com/tierlog/tierlog/record"
)

// The bucket's cleaner: a compacted tiered partition (cleanup.policy
// compact with remote.storage.enable) is cleaned in the bucket, not on
// disk.
//
// Each closed segment has one owner at a time. While a local copy exists
// it is the bucket's exact copy (local retention deletes it only after
// showing that, bucketHoldsLocked), so neither tier rewrites it: the
// local cleaner leaves tiered logs alone (compaction.Clean refuses them),
// and this cleaner rewrites only segments wholly below the leader's
// local log start, the bucket's alone there. A replica that still holds a
// copy of a segment it rewrote (a follower, or this log after another
// led for a while) deletes it by local retention once it shows the
// bucket's copy to be a cleaning of its own (bucketCleanedLocked). A
// round:
//
//  1. maps the latest offset of every key in the dirty section, from the
//     bucket's checkpoint (Manifest.CleanedTo) to the last stable offset
//     (whole closed segments, min.compaction.lag.ms honoured), reading
//     the segments the bucket alone holds from it and the others from
//     disk; aborted transactions (from every .txnindex) are never mapped;
//  2. recopies the bucket's own segments below the mapped end, in groups
//     of consecutive segments up to segment.bytes (small ones merge),
//     with compaction.Filter: Kafka's rules for what stays, every
//     transaction marker kept;
//  3. uploads each changed group as a new segment (its indexes built by
//     Kafka's rule; its .txnindex the replaced ones'; its producer
//     snapshot and epochs the last replaced one's, which end where it
//     ends) and swaps it in by a conditional commit that names the
//     segments it replaces by id; the last commit records the new
//     checkpoint.
//
// A diskless partition (diskless.enable) is cleaned the same way. Its
// consolidated segments leave the disk by local retention and are then
// the bucket's own; its WAL extents hold only what lies past the
// manifest's segments, which no round touches, and every commit carries
// the manifest's WAL record forward (commitLocked). The mapped end never
// passes the last stable offset, below the high watermark, which a
// diskless partition holds below what the bucket holds: no record a
// failed WAL upload later truncates is ever mapped to supersede another.
//
// The replaced objects stay for readers holding the old view, and for a
// restore of a backup that names them; gc removes them once no kept
// backup does and its grace has passed. A round that fails, a crash and a
// commit that loses its condition leave the manifest as it was and the
// new objects to their intents (abandoned, or gc).

// CompactOptions tune one round of the bucket's cleaner.
type CompactOptions struct {
	// MemoryBytes is the offset map's budget (default
	// compaction.DefaultMemoryBytes); Map, when set, is used instead.
	MemoryBytes int
	Map         *compaction.OffsetMap
	// Force runs the round whatever the dirty ratio (otherwise a round
	// runs when the dirty share of the bucket's own segments exceeds
	// min.cleanable.dirty.ratio).
	Force bool
	// DryRun computes what the round would rewrite, reading everything
	// it would read, and writes nothing.
	DryRun bool
	// Throttle, when set, is called with the bytes read and written
	// after each batch; it may sleep to hold the cleaner's own I/O
	// budget, and its error stops the round.
	Throttle func(ctx context.Context, n int) error
	// ScratchDir holds the segments a round downloads and writes (default
	// os.TempDir()); StageBytes is how much cleaned output it stages
	// before uploading and committing it (default 64 MiB; a commit holds
	// the partition's lock while it uploads that much, plus at most one
	// group of segment.bytes).
	ScratchDir string
	StageBytes int64
}

// CompactStats describe a round of the bucket's cleaner.
type CompactStats struct {
	compaction.Stats         // of the recopy (BytesRead, BytesWritten: .log bytes)
	DirtyRatio       float64 // the dirty share of the bucket's own segments
	// DirtyBytes and CleanBytes are the .log bytes of the bucket's own
	// segments at and above the checkpoint, and below it; LocalBytes the
	// local segments' (the tier the bucket's cleaner does not clean).
	DirtyBytes, CleanBytes, LocalBytes int64
	Ran                                bool  // false: the ratio was below min.cleanable.dirty.ratio
	MapBytesRead                       int64 // bytes read to build the map
	Checkpoint                         int64 // the cleaner checkpoint committed (the next round's first dirty offset)
	SegmentsReplaced                   int   // bucket segments the new ones replace (in a dry run: would)
	Merged                             int   // new segments that replace more than one
	// Gets and Puts are the requests the round made of the bucket (in a
	// dry run: would make), the manifest's own aside; Commits the
	// manifest commits.
	Gets, Puts int
	Commits    int
}

// Add adds o, a later round, to s, as compaction.Stats.Add does; the
// checkpoint is o's.
func (s *CompactStats) Add(o CompactStats) {
	s.Stats.Add(o.Stats)
	s.Checkpoint = o.Checkpoint
	s.SegmentsReplaced += o.SegmentsReplaced
	s.Merged += o.Merged
	s.MapBytesRead += o.MapBytesRead
	s.Gets += o.Gets
	s.Puts += o.Puts
	s.Commits += o.Commits
}

// errCompactConflict is a round's commit finding segments it replaces
// gone or changed (retention, another writer): nothing was swapped.
var errCompactConflict = fmt.Errorf("%w: the manifest no longer names the segments the round cleaned", objstore.ErrRetryable)

// CompactRemote runs one round of the bucket's cleaner (see the notes at
// the top of compact.go) on a leader of a compacted partition; a dry run
// on any replica, a read-only one too. The partition keeps serving and
// uploading meanwhile: its lock is held only to upload and commit the
// cleaned segments. A dry run counts in no metric.
func (p *Partition) CompactRemote(ctx context.Context, o CompactOptions) (CompactStats, error) {
	start := time.Now()
	st := CompactStats{}
	if err := p.checkOpen(); err != nil {
		return st, err
	}
	cfg := p.local.Config()
	if !cfg.Compact() {
		return st, fmt.Errorf("%w: %s is not compacted (cleanup.policy=%s)", backend.ErrInvalidConfig, p.local.Dir(), strings.Join(cfg.CleanupPolicy, ","))
	}
	if p.role.Load() != roleLeader && !o.DryRun { // a dry run writes nothing: any replica may report
		return st, p.notLeader()
	}
	p.compactMu.Lock()
	defer p.compactMu.Unlock()
	if !o.DryRun {
		p.metrics.CompactRunning.Add(1)
		defer p.metrics.CompactRunning.Add(-1)
	}
	ctx, cancel := p.withClose(ctx)
	defer cancel()
	if err := p.attach(ctx); err != nil {
		return st, err
	}
	r := &compactRound{p: p, o: o, st: &st, now: p.opts.Now(), cfg: cfg}
	err := r.run(ctx)
	st.Duration = time.Since(start)
	if st.Ran && !o.DryRun {
		p.metrics.CompactRounds.Add(1)
		p.metrics.CompactBytesRewritten.Add(st.BytesWritten)
		p.metrics.CompactSegmentsReplaced.Add(int64(st.SegmentsReplaced))
		p.metrics.CompactMerges.Add(int64(st.Merged))
	}
	if err != nil && !o.DryRun {
		p.metrics.CompactErrors.Add(1)
	}
	return st, err
}

// DirtyState is what a compacted tiered partition's last pass of the
// bucket's cleaner found (whether a round ran or not): the dirty share of
// the bucket's own segments, their dirty and clean .log bytes, and the
// local segments' bytes.
type DirtyState struct {
	Ratio                    float64
	BucketDirty, BucketClean int64
	Local                    int64
}

// Dirty returns what the last pass of the bucket's cleaner over p found;
// false when none has run (the partition is not compacted, or does not
// lead).
func (p *Partition) Dirty() (DirtyState, bool) {
	if d := p.dirty.Load(); d != nil {
		return *d, true
	}
	return DirtyState{}, false
}

// compactRound is one round's state.
type compactRound struct {
	p   *Partition
	o   CompactOptions
	st  *CompactStats
	now time.Time
	cfg backend.Config

	m          *manifest.Manifest // the manifest the round planned from
	own        []manifest.Segment // m's segments wholly below the local log start
	localStart int64
	filter     *compaction.Filter
	staged     []cleanedSegment
	stagedSize int64
}

// cleanedSegment is a group's cleaned copy, in a scratch file.
type cleanedSegment struct {
	seg      manifest.Segment   // its manifest entry (sizes and CRCs set)
	replaces []manifest.Segment // the bucket segments it replaces, in order
	file     *os.File           // its .log bytes
	objects  map[string][]byte  // its other objects, by suffix
}

// dirtySeg is a segment of the dirty section: in the bucket (remote) or
// on disk.
type dirtySeg struct {
	base, next, size int64
	remote           *manifest.Segment
}

func (r *compactRound) run(ctx context.Context) error {
	p := r.p
	if !r.o.DryRun {
		// The bucket claimed for this epoch first: a new leader's
		// manifest is the one it followed, which the last leader's
		// uploads and rounds may have moved past (the commit would find
		// its segments gone). A dry run writes nothing, a claim neither.
		_, done, err := p.beginLeaderChange(ctx)
		if err != nil {
			return err
		}
		done()
	}
	// The local .txnindex files first (every local segment's), then the
	// local offsets, then the manifest: local retention deletes only what a committed manifest
	// names, so a segment deleted meanwhile (an ABORT marker in it) is in
	// the manifest read after, below the local start read before it, whose
	// .txnindex abortedTxns reads from the bucket; and no offset is in
	// neither tier.
	localAborted, err := p.segs.AbortedTxns(0, math.MaxInt64) // from the first local segment
	if err != nil {
		return fmt.Errorf("tiered: %w", err)
	}
	offs := p.local.Offsets()
	sv := p.man.Load()
	if sv.head.LastOffset() < 0 || sv.head.Deleted() {
		return nil
	}
	m, err := p.whole(ctx, sv.head)
	if err != nil {
		return err
	}
	r.m = m
	r.localStart = offs.LogStart
	for _, s := range m.Segments {
		if s.LastOffset >= r.localStart {
			break
		}
		r.own = append(r.own, s)
	}
	// The bucket's own segments end here: what lies past it has a local
	// copy, which must stay the bucket's exact copy. The checkpoint never
	// passes it: the segments past it are not cleaned.
	limit := min(r.localStart, m.Segments[len(m.Segments)-1].LastOffset+1)
	if len(r.own) < len(m.Segments) {
		limit = min(limit, m.Segments[len(r.own)].BaseOffset)
	}
	firstDirty := max(m.CleanedTo, m.LogStartOffset, m.Segments[0].BaseOffset)
	r.st.FirstDirty, r.st.End, r.st.Checkpoint = firstDirty, firstDirty, m.CleanedTo
	dirty, err := r.dirtySection(firstDirty, offs.LastStableOffset)
	if err != nil {
		return err
	}
	// The dirty share of the bucket's own segments (one holding the
	// checkpoint counts as dirty): a round pays for reading all of them,
	// so it runs when enough of them is new.
	var clean, dirt int64
	for _, s := range r.own {
		if s.LastOffset < firstDirty {
			clean += s.Size
		} else {
			dirt += s.Size
		}
	}
	if clean+dirt > 0 {
		r.st.DirtyRatio = float64(dirt) / float64(clean+dirt)
	}
	r.st.DirtyBytes, r.st.CleanBytes = dirt, clean
	for _, si := range p.local.SegmentInfos() {
		r.st.LocalBytes += si.Size
	}
	if !r.o.DryRun {
		p.dirty.Store(&DirtyState{Ratio: r.st.DirtyRatio, BucketDirty: dirt, BucketClean: clean, Local: r.st.LocalBytes})
	}
	if len(dirty) == 0 || dirt == 0 || (!r.o.Force && r.st.DirtyRatio <= r.cfg.MinCleanableDirtyRatio) {
		return nil
	}
	r.st.Ran = true
	aborted, err := r.abortedTxns(ctx, localAborted)
	if err != nil {
		return err
	}
	mp := r.o.Map
	if mp == nil {
		mem := r.o.MemoryBytes
		if mem == 0 {
			mem = compaction.DefaultMemoryBytes
		}
		if mp, err = compaction.NewOffsetMap(mem); err != nil {
			return err
		}
	}
	r.st.MapBytes = mp.MemoryBytes()
	end, err := r.buildMap(ctx, dirty, firstDirty, mp, aborted)
	if err != nil {
		return err
	}
	r.st.Keys, r.st.End = mp.Len(), end
	checkpoint := min(end, limit)
	if checkpoint <= firstDirty {
		return nil
	}
	lastOf := map[int64]int64{}
	for _, pr := range p.local.Producers() {
		if off := pr.LastOffset(); off >= 0 {
			lastOf[pr.ProducerID] = off
		}
	}
	r.filter = compaction.NewFilter(compaction.FilterOptions{Map: mp, End: end, Now: r.now,
		DeleteRetentionMs: r.cfg.DeleteRetentionMs, Aborted: aborted, LastOfProducer: lastOf})
	defer r.dropStaged()
	for _, g := range r.groups(checkpoint) {
		if err := r.cleanGroup(ctx, g); err != nil {
			return err
		}
		if r.stagedSize >= r.stageBytes() {
			if err := r.commit(ctx, -1); err != nil {
				return err
			}
		}
	}
	r.st.Checkpoint = checkpoint
	return r.commit(ctx, checkpoint)
}

func (r *compactRound) stageBytes() int64 {
	if r.o.StageBytes > 0 {
		return r.o.StageBytes
	}
	return 64 << 20
}

// dirtySection lists the closed segments holding offsets in [firstDirty,
// upTo), in order, up to the first holding a record younger than
// min.compaction.lag.ms: the bucket's own from the manifest, the rest
// from disk.
func (r *compactRound) dirtySection(firstDirty, upTo int64) ([]dirtySeg, error) {
	lag := r.cfg.MinCompactionLagMs
	young := func(ts int64) bool { return lag > 0 && ts > r.now.UnixMilli()-lag }
	var out []dirtySeg
	for i := range r.own {
		s := &r.own[i]
		if s.LastOffset < firstDirty {
			continue
		}
		if s.LastOffset >= upTo || young(s.MaxTimestamp) {
			return out, nil
		}
		out = append(out, dirtySeg{base: s.BaseOffset, next: s.LastOffset + 1, size: s.Size, remote: s})
	}
	for _, si := range r.p.local.SegmentInfos() {
		if si.Active || si.NextOffset > upTo {
			break
		}
		if si.NextOffset <= max(firstDirty, r.localStart) {
			continue
		}
		if lag > 0 {
			ts, err := r.p.segs.LargestTimestamp(si.BaseOffset)
			if err != nil {
				return nil, fmt.Errorf("tiered: %w", err)
			}
			if young(ts) {
				break
			}
		}
		out = append(out, dirtySeg{base: si.BaseOffset, next: si.NextOffset, size: si.Size})
	}
	return out, nil
}

// abortedTxns collects the aborted transactions a round may meet: from
// the .txnindex of every bucket segment that begins below the local log
// start and has one (the one the local start lies in among them), and
// local, every local segment's (the active one's too) read before the
// local start and the manifest were: a transaction whose data the bucket
// alone holds may have its ABORT marker anywhere after it.
func (r *compactRound) abortedTxns(ctx context.Context, local []producerstate.AbortedTxn) (compaction.Aborted, error) {
	var out compaction.Aborted
	for _, s := range r.m.Segments {
		if s.BaseOffset >= r.localStart {
			break
		}
		if s.TxnIndexSize == 0 {
			continue
		}
		data, err := r.p.remoteIndex(ctx, s, manifest.TxnIndexSuffix)
		if err != nil {
			return nil, err
		}
		r.st.Gets++
		txns, err := producerstate.DecodeTxnIndex(data)
		if err != nil {
			return nil, fmt.Errorf("%w: tiered: %s: %w", backend.ErrCorruptRecord, r.p.layout().Segment(s, manifest.TxnIndexSuffix), err)
		}
		out = append(out, txns...)
	}
	return append(out, local...), nil
}

// buildMap maps the dirty section and returns one past the last offset
// mapped.
func (r *compactRound) buildMap(ctx context.Context, dirty []dirtySeg, firstDirty int64, m *compaction.OffsetMap, aborted compaction.Aborted) (int64, error) {
	mb := compaction.NewMapBuilder(m, firstDirty, aborted)
	for _, d := range dirty {
		full := false
		err := r.scan(ctx, d, func(e *record.Entry) error {
			r.st.MapBytesRead += e.Size
			f, err := mb.Add(e)
			if f {
				full = true
				return errStopScan
			}
			if err == nil && r.o.Throttle != nil {
				err = r.o.Throttle(ctx, int(e.Size))
			}
			return err
		})
		if err != nil {
			return mb.End(), err
		}
		if full {
			break
		}
		mb.SegmentDone(d.next)
	}
	return mb.Finish(), nil
}

// errStopScan ends a scan early, without an error.
var errStopScan = errors.New("tiered: stop scanning")

// scan validates and visits the batches of a segment of the dirty section
// or of the bucket, in order.
func (r *compactRound) scan(ctx context.Context, d dirtySeg, fn func(e *record.Entry) error) error {
	var src io.ReaderAt
	var size int64
	name := ""
	if d.remote != nil {
		f, err := r.download(ctx, *d.remote)
		if err != nil {
			return err
		}
		defer closeScratch(f)
		src, size, name = f, d.remote.Size, r.p.layout().Segment(*d.remote, manifest.LogSuffix)
	} else {
		h, err := r.p.segs.OpenSegment(d.base)
		if err != nil {
			return fmt.Errorf("tiered: %w", err)
		}
		defer h.Close()
		src, size, name = h, h.Size(), h.Path()
	}
	order := local.NewSegmentOrder(d.base, d.next-1, false)
	sc := record.NewScanner(src, 0, size, record.ScanOptions{Validate: true, BufferSize: 1 << 20})
	for sc.Next() {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("tiered: compact: %w", err)
		}
		e := sc.Entry()
		if err := order.Check(e); err != nil {
			return fmt.Errorf("%w: tiered: compact: %s: %w", backend.ErrCorruptRecord, name, err)
		}
		if err := fn(e); err != nil {
			if err == errStopScan {
				return nil
			}
			return fmt.Errorf("tiered: compact: %s position %d: %w", name, e.Position, err)
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("%w: tiered: compact: %s: %w", backend.ErrCorruptRecord, name, err)
	}
	return nil
}

// download copies a bucket segment's .log into a scratch file.
func (r *compactRound) download(ctx context.Context, s manifest.Segment) (*os.File, error) {
	r.st.Gets++
	return r.p.downloadSegment(ctx, s, r.o.ScratchDir)
}

// downloadSegment copies a bucket segment's .log into a scratch file in
// dir (os.TempDir() when empty), checking its size and CRC-32C against
// the manifest's. The caller removes it (closeScratch).
func (p *Partition) downloadSegment(ctx context.Context, s manifest.Segment, dir string) (*os.File, error) {
	key := p.layout().Segment(s, manifest.LogSuffix)
	f, err := os.CreateTemp(dir, "tierlog-segment-*.log")
	if err != nil {
		return nil, fmt.Errorf("tiered: %w", err)
	}
	body, _, err := p.store.Get(ctx, key, 0, s.Size)
	if err != nil {
		closeScratch(f)
		return nil, storageError(ctx, fmt.Errorf("tiered: read %s: %w", key, err))
	}
	defer body.Close()
	h := crc32.New(castagnoli)
	n, err := io.Copy(io.MultiWriter(f, h), body)
	if err == nil && (n != s.Size || h.Sum32() != s.LogCRC) {
		err = fmt.Errorf("%w: tiered: %s holds %d bytes of CRC-32C %08x; the manifest says %d bytes of %08x",
			backend.ErrCorruptRecord, key, n, h.Sum32(), s.Size, s.LogCRC)
	}
	if err != nil {
		closeScratch(f)
		return nil, storageError(ctx, err)
	}
	return f, nil
}

// closeScratch closes and removes a scratch file.
func closeScratch(f *os.File) {
	f.Close()
	os.Remove(f.Name())
}

// groups splits the bucket's own segments that begin below end (the
// checkpoint: the one holding it too, as Kafka cleans every segment below
// the map's end) into runs of consecutive segments to clean into one
// each: summed sizes within segment.bytes, an offset span a 32-bit
// relative offset can index.
func (r *compactRound) groups(end int64) [][]manifest.Segment {
	var out [][]manifest.Segment
	var cur []manifest.Segment
	var size int64
	for _, s := range r.own {
		if s.BaseOffset >= end {
			break
		}
		if len(cur) > 0 && (size+s.Size > r.cfg.SegmentBytes || s.LastOffset-cur[0].BaseOffset > math.MaxInt32) {
			out = append(out, cur)
			cur, size = nil, 0
		}
		cur = append(cur, s)
		size += s.Size
	}
	if len(cur) > 0 {
		out = append(out, cur)
	}
	return out
}

// cleanGroup cleans g into a scratch file, and stages it when it differs
// from what it replaces: a record removed, or segments merged. A copy
// that keeps nothing ends with an empty batch in place of the group's
// last (a manifest segment holds a batch), so that no segment is left
// uncleaned below the checkpoint.
func (r *compactRound) cleanGroup(ctx context.Context, g []manifest.Segment) error {
	f, err := os.CreateTemp(r.o.ScratchDir, "tierlog-cleaned-*.log")
	if err != nil {
		return fmt.Errorf("tiered: compact: %w", err)
	}
	keep := false
	defer func() {
		if !keep {
			closeScratch(f)
		}
	}()
	out := manifest.Segment{BaseOffset: g[0].BaseOffset, LastOffset: g[len(g)-1].LastOffset, MaxTimestamp: -1,
		UploadTimeMs: r.now.UnixMilli()}
	w := bufio.NewWriterSize(f, 1<<20)
	ix := newIndexBuilder(out.BaseOffset, r.cfg.IndexIntervalBytes)
	var pos int64
	crc := uint32(0)
	var lastEntry record.Entry // the group's last batch (its header)
	write := func(data []byte, e *record.Entry) error {
		last, maxTs := e.LastOffset, e.MaxTimestamp
		if e.Magic == 2 {
			b := record.Batch(data)
			last, maxTs = b.LastOffset(), b.MaxTimestamp()
			out.Records += int64(b.NumRecords())
			out.LeaderEpoch = max(out.LeaderEpoch, b.PartitionLeaderEpoch())
		} else {
			out.Records++
		}
		out.MaxTimestamp = max(out.MaxTimestamp, maxTs)
		ix.add(pos, int64(len(data)), last, maxTs)
		crc = crc32.Update(crc, castagnoli, data)
		pos += int64(len(data))
		_, err := w.Write(data)
		return err
	}
	for _, s := range g {
		err := r.scan(ctx, dirtySeg{base: s.BaseOffset, next: s.LastOffset + 1, size: s.Size, remote: &s}, func(e *record.Entry) error {
			lastEntry = *e
			lastEntry.Data = append(lastEntry.Data[:0:0], e.Data[:min(len(e.Data), record.BatchHeaderSize)]...)
			data, err := r.filter.Batch(e, &r.st.Stats)
			if err == nil && data != nil {
				err = write(data, e)
			}
			if err == nil && r.o.Throttle != nil {
				err = r.o.Throttle(ctx, int(e.Size)+len(data))
			}
			return err
		})
		if err != nil {
			return err
		}
	}
	r.st.SegmentsRead += len(g)
	if pos == 0 {
		if lastEntry.Data == nil {
			return fmt.Errorf("%w: tiered: compact: the bucket segments %d..%d hold no batch", backend.ErrCorruptRecord, g[0].BaseOffset, g[len(g)-1].LastOffset)
		}
		if err := write(r.filter.Empty(&lastEntry), &lastEntry); err != nil {
			return err
		}
	}
	if len(g) == 1 && pos == g[0].Size && crc == g[0].LogCRC {
		return nil // unchanged
	}
	if err := w.Flush(); err != nil {
		return fmt.Errorf("tiered: compact: %w", err)
	}
	idx, tidx := ix.finish()
	out.Size, out.LogCRC = pos, crc
	out.IndexSize, out.IndexCRC = int64(len(idx)), crc32.Checksum(idx, castagnoli)
	out.TimeIndexSize, out.TimeIndexCRC = int64(len(tidx)), crc32.Checksum(tidx, castagnoli)
	objects := map[string][]byte{manifest.IndexSuffix: idx, manifest.TimeIndexSuffix: tidx}
	var txn []byte
	epochsKnown := true
	for _, s := range g {
		// A segment of a version 1 manifest knows only its highest
		// epoch: so does the cleaned one then.
		epochsKnown = epochsKnown && len(s.Epochs) > 0
		out.Epochs = appendEpochs(out.Epochs, s.Epochs)
		if s.TxnIndexSize > 0 {
			data, err := r.p.remoteIndex(ctx, s, manifest.TxnIndexSuffix)
			if err != nil {
				return err
			}
			r.st.Gets++
			txn = append(txn, data...)
		}
	}
	if !epochsKnown {
		out.Epochs = nil
	}
	if len(out.Epochs) > 0 {
		out.Epochs[0].StartOffset = out.BaseOffset
	}
	objects[manifest.TxnIndexSuffix] = txn
	out.TxnIndexSize, out.TxnIndexCRC = int64(len(txn)), crc32.Checksum(txn, castagnoli)
	// The producer snapshot and epochs at the last replaced segment's end
	// are the new one's: it ends there, and cleaning changes neither.
	last := g[len(g)-1]
	for _, suf := range []string{manifest.SnapshotSuffix, manifest.EpochsSuffix} {
		size, _ := last.Object(suf)
		var data []byte
		if size > 0 {
			if data, err = r.p.remoteIndex(ctx, last, suf); err != nil {
				return err
			}
			r.st.Gets++
		}
		objects[suf] = data
	}
	out.SnapshotSize, out.SnapshotCRC = last.SnapshotSize, last.SnapshotCRC
	out.EpochsSize, out.EpochsCRC = last.EpochsSize, last.EpochsCRC
	if _, err := rand.Read(out.ID[:]); err != nil {
		return err
	}
	r.st.SegmentsWritten++
	r.st.BytesWritten += pos
	r.st.Puts += len(out.Objects())
	r.st.SegmentsReplaced += len(g)
	if len(g) > 1 {
		r.st.Merged++
	}
	keep = true
	r.staged = append(r.staged, cleanedSegment{seg: out, replaces: g, file: f, objects: objects})
	r.stagedSize += pos
	return nil
}

// appendEpochs appends a segment's epochs to those of the segments before
// it, skipping an epoch the last one already names.
func appendEpochs(acc, epochs []manifest.EpochStart) []manifest.EpochStart {
	for _, e := range epochs {
		if n := len(acc); n > 0 && e.Epoch <= acc[n-1].Epoch {
			continue
		}
		acc = append(acc, e)
	}
	return acc
}

// dropStaged removes the scratch files of what was not committed.
func (r *compactRound) dropStaged() {
	for _, c := range r.staged {
		closeScratch(c.file)
	}
	r.staged, r.stagedSize = nil, 0
}

// commit uploads the staged segments and swaps them into the manifest by
// one conditional commit, with the cleaner checkpoint set to checkpoint
// (-1: left as it is). The partition's lock is held throughout, so the
// commit builds on the generation its intent names (gc's rule) and no
// upload or retention runs between them.
func (r *compactRound) commit(ctx context.Context, checkpoint int64) error {
	defer r.dropStaged()
	if len(r.staged) == 0 && checkpoint <= r.m.CleanedTo {
		return nil
	}
	if r.o.DryRun {
		if len(r.staged) > 0 {
			r.st.Puts++ // the intent
		}
		r.st.Commits++
		return nil
	}
	p := r.p
	ctx, done, err := p.beginLeaderChange(ctx)
	if err != nil {
		return err
	}
	defer done()
	sv := p.man.Load()
	m, err := p.whole(ctx, sv.head)
	if err != nil {
		return err
	}
	next := *m
	next.Segments, err = swapSegments(m.Segments, r.staged)
	if err != nil {
		return err
	}
	if checkpoint > next.CleanedTo {
		next.CleanedTo = checkpoint
	}
	var in *intent
	if len(r.staged) > 0 {
		segs := make([]manifest.Segment, len(r.staged))
		for i, c := range r.staged {
			segs[i] = c.seg
		}
		if in, err = p.writeIntent(ctx, sv.head.Generation(), segs); err != nil {
			return err
		}
		r.st.Puts++
		for _, c := range r.staged {
			if err := r.upload(ctx, c); err != nil {
				p.abandonLocked(in, segs)
				return err
			}
		}
	}
	commit := func(ctx context.Context) error { return p.commitLocked(ctx, sv, m, &next) }
	if in != nil {
		err = p.commitInWindowLocked(ctx, in, commit)
	} else {
		err = commit(ctx)
	}
	if err != nil {
		return err
	}
	r.st.Commits++
	for _, c := range r.staged {
		p.opts.Logger.Info("cleaned segments in the bucket", "base", c.seg.BaseOffset, "last", c.seg.LastOffset,
			"replaced", len(c.replaces), "bytes", c.seg.Size)
	}
	if in != nil {
		p.removeIntent(ctx, in)
	}
	return nil
}

// upload puts a cleaned segment's objects under its new keys.
func (r *compactRound) upload(ctx context.Context, c cleanedSegment) error {
	p := r.p
	return p.putObjects(ctx, c.seg, io.NewSectionReader(c.file, 0, c.seg.Size), c.objects)
}

// swapSegments returns segs with each cleaned segment in place of the
// ones it replaces, which must be there, the same uploads, one after
// the other (errCompactConflict otherwise).
func swapSegments(segs []manifest.Segment, cleaned []cleanedSegment) ([]manifest.Segment, error) {
	out := make([]manifest.Segment, 0, len(segs))
	at := 0
	for _, c := range cleaned {
		first := c.replaces[0]
		i := sort.Search(len(segs), func(i int) bool { return segs[i].BaseOffset >= first.BaseOffset })
		if i < at || i+len(c.replaces) > len(segs) {
			return nil, errCompactConflict
		}
		for j, s := range c.replaces {
			if segs[i+j].BaseOffset != s.BaseOffset || segs[i+j].ID != s.ID {
				return nil, errCompactConflict
			}
		}
		out = append(out, segs[at:i]...)
		out = append(out, c.seg)
		at = i + len(c.replaces)
	}
	return append(out, segs[at:]...), nil
}
