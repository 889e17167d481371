package compaction

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/local"
	"github.com/tierlog/tierlog/record"
)

// DefaultMemoryBytes is the offset map's default budget, Kafka's
// log.cleaner.dedupe.buffer.size.
const DefaultMemoryBytes = 128 << 20

// Options tune one cleaning round.
type Options struct {
	// MemoryBytes is the offset map's budget (default DefaultMemoryBytes).
	// A dirty section with more keys than fit is cleaned in several rounds.
	MemoryBytes int
	// Map, when set, is used (cleared first) instead of allocating one of
	// MemoryBytes: a background cleaner reuses one map across rounds.
	Map *OffsetMap
	// Now is the clock for tombstone horizons and min.compaction.lag.ms
	// (default time.Now).
	Now func() time.Time
	// DryRun computes what a round would remove without writing anything.
	DryRun bool
	// Throttle, when set, is called with the bytes read and written after
	// each batch; it may sleep to hold an I/O rate, and its error (the
	// context's, typically) stops the round.
	Throttle func(ctx context.Context, n int) error
	// WriteBufferBytes is how much of a cleaned file is buffered before a
	// write (default 1 MiB).
	WriteBufferBytes int
}

// Stats describe one cleaning round.
type Stats struct {
	FirstDirty int64 // where the dirty section began
	// End is one past the last offset the round mapped: the next round's
	// first dirty offset (the cleaner checkpoint). End == FirstDirty means
	// there was nothing to clean.
	End int64

	SegmentsRead    int // segments recopied
	SegmentsWritten int // segments they became
	BytesRead       int64
	BytesWritten    int64 // in a dry run: what would have been written
	RecordsRead     int64
	RecordsRemoved  int64 // superseded, keyless or expired tombstones
	TombstonesKept  int64
	AbortedRemoved  int64 // records of aborted transactions removed
	MarkersRemoved  int64 // transaction markers removed past their horizon
	Keys            int   // distinct keys mapped in the dirty section
	MapBytes        int   // the offset map's memory
	Duration        time.Duration
}

// Add adds the counts of o, a later round, to s: s keeps its first dirty
// offset and takes o's end, its tombstones kept and the larger key count.
func (s *Stats) Add(o Stats) {
	s.End = o.End
	s.SegmentsRead += o.SegmentsRead
	s.SegmentsWritten += o.SegmentsWritten
	s.BytesRead += o.BytesRead
	s.BytesWritten += o.BytesWritten
	s.RecordsRead += o.RecordsRead
	s.RecordsRemoved += o.RecordsRemoved
	s.TombstonesKept = o.TombstonesKept
	s.AbortedRemoved += o.AbortedRemoved
	s.MarkersRemoved += o.MarkersRemoved
	s.Keys = max(s.Keys, o.Keys)
	s.MapBytes = max(s.MapBytes, o.MapBytes)
	s.Duration += o.Duration
}

// Ratio is the bytes written per byte read (1 when nothing was read).
func (s Stats) Ratio() float64 {
	if s.BytesRead == 0 {
		return 1
	}
	return float64(s.BytesWritten) / float64(s.BytesRead)
}

// Clean runs one cleaning round over l, a log with cleanup.policy compact:
// it maps the latest offset of every key in the dirty section [firstDirty,
// first uncleanable offset), then recopies the closed segments up to the
// mapped end, keeping a record only when it is the latest for its key
// (keyless records go; a tombstone stays until its delete horizon, which
// the first round that keeps it sets to now + delete.retention.ms), and
// replaces them crash-safely through local.Log.ReplaceSegments. Offsets,
// producer fields and codecs are preserved.
//
// Transactions follow Kafka's rules (see txn.go): aborted data is
// removed and never mapped, committed data is cleaned like any other, and
// markers go once their transaction's data has gone and their delete
// horizon has passed.
//
// The first uncleanable offset is the least of the high watermark, the
// first offset of a transaction still open (the last stable offset), the
// active segment's base and, with min.compaction.lag.ms, the first segment
// holding records younger than the lag; only whole closed segments are
// cleaned. A firstDirty outside the log (no checkpoint: pass -1) starts
// at the log start.
//
// A tiered log (remote.storage.enable) is refused with
// backend.ErrInvalidConfig: its closed segments are copies of the
// bucket's, which package tiered cleans (tiered.Partition.CompactRemote);
// a local rewrite would leave the two copies different.
func Clean(ctx context.Context, l *local.Log, firstDirty int64, opts Options) (Stats, error) {
	if l.Config().RemoteStorageEnable {
		return Stats{}, fmt.Errorf("%w: %s is tiered: its segments are cleaned in the bucket, not on disk", backend.ErrInvalidConfig, l.Dir())
	}
	start := time.Now()
	if opts.Now == nil {
		opts.Now = time.Now
	}
	st := Stats{}
	cleaning := l.Segments().BeginCleaning() // before anything is read
	segs := closedSegments(l)
	firstDirty = firstDirtyOf(l, firstDirty)
	st.FirstDirty, st.End = firstDirty, firstDirty
	dirty, err := DirtySegments(l, segs, firstDirty, opts.Now())
	if err != nil {
		return st, err
	}
	var txns txnScan
	if len(dirty) > 0 {
		if txns, err = scanTransactions(ctx, l, dirty[len(dirty)-1].NextOffset); err != nil {
			return st, err
		}
		for len(dirty) > 0 && dirty[len(dirty)-1].NextOffset > txns.firstOpen {
			dirty = dirty[:len(dirty)-1] // at or after the last stable offset
		}
	}
	if len(dirty) == 0 {
		st.Duration = time.Since(start)
		return st, nil
	}

	m := opts.Map
	if m == nil {
		mem := opts.MemoryBytes
		if mem == 0 {
			mem = DefaultMemoryBytes
		}
		if m, err = NewOffsetMap(mem); err != nil {
			return st, err
		}
	} else {
		m.Clear()
	}
	st.MapBytes = m.MemoryBytes()
	end, err := buildMap(ctx, l, dirty, firstDirty, m, newAbortedIndex(txns.aborted), opts.Throttle)
	if err != nil {
		return st, err
	}
	st.Keys = m.Len()
	st.End = end
	if end <= firstDirty {
		st.Duration = time.Since(start)
		return st, nil
	}

	c := cleaner{l: l, m: m, end: end, cleaning: cleaning, now: opts.Now().UnixMilli(),
		deleteRetentionMs: l.Config().DeleteRetentionMs, dryRun: opts.DryRun, throttle: opts.Throttle,
		txn: newTxnTracker(txns.aborted), bufferBytes: opts.WriteBufferBytes, lastOfProducer: map[int64]int64{},
		abortsByMarker: txns.byMarker}
	for _, pr := range l.Producers() {
		if off := pr.LastOffset(); off >= 0 {
			c.lastOfProducer[pr.ProducerID] = off
		}
	}
	if c.bufferBytes <= 0 {
		c.bufferBytes = 1 << 20
	}
	groups, err := groupSegments(segs, end, l.Config().SegmentBytes, l.Config().SegmentIndexBytes, func(s local.SegmentInfo) (int64, int64, error) {
		return l.Segments().IndexSizes(s.BaseOffset)
	})
	if err != nil {
		return st, err
	}
	if err := c.cleanGroups(ctx, groups, &st); err != nil {
		return st, err
	}
	st.Duration = time.Since(start)
	return st, nil
}

// firstDirtyOf is where a round starts given a cleaner checkpoint: the log
// start when the checkpoint is missing (any value below it) or outside the
// log, as Kafka resets it.
func firstDirtyOf(l *local.Log, checkpoint int64) int64 {
	offs := l.Offsets()
	if checkpoint < offs.LogStart || checkpoint > offs.LogEnd {
		return offs.LogStart
	}
	return checkpoint
}

// closedSegments lists every segment of l but the active one.
func closedSegments(l *local.Log) []local.SegmentInfo {
	segs := l.SegmentInfos()
	return segs[:len(segs)-1]
}

// DirtySegments returns the closed segments of l (segs) holding offsets in
// [firstDirty, first uncleanable offset): those wholly below the high
// watermark and, with min.compaction.lag.ms, below the first segment
// holding a record younger than the lag.
func DirtySegments(l *local.Log, segs []local.SegmentInfo, firstDirty int64, now time.Time) ([]local.SegmentInfo, error) {
	var out []local.SegmentInfo
	hw, lag := l.Offsets().HighWatermark, l.Config().MinCompactionLagMs
	for _, s := range segs {
		if s.NextOffset <= firstDirty {
			continue
		}
		if s.NextOffset > hw {
			break
		}
		if lag > 0 {
			ts, err := l.Segments().LargestTimestamp(s.BaseOffset)
			if err != nil {
				return nil, err
			}
			if ts > now.UnixMilli()-lag {
				break
			}
		}
		out = append(out, s)
	}
	return out, nil
}

// DirtyRatio is Kafka's cleanable ratio: the dirty segments' bytes over
// those of every closed segment up to the last dirty one (the clean
// section plus the cleanable one); 0 when there are none.
func DirtyRatio(segs []local.SegmentInfo, dirty []local.SegmentInfo) float64 {
	if len(dirty) == 0 {
		return 0
	}
	var total, d int64
	last := dirty[len(dirty)-1].BaseOffset
	for _, s := range segs {
		if s.BaseOffset > last {
			break
		}
		total += s.Size
	}
	for _, s := range dirty {
		d += s.Size
	}
	if total == 0 {
		return 0
	}
	return float64(d) / float64(total)
}

// buildMap maps every keyed record at or above firstDirty in the dirty
// segments, but those of control batches and aborted transactions, and
// returns one past the last offset mapped. A full map ends the section at
// the last whole batch that fit.
func buildMap(ctx context.Context, l *local.Log, dirty []local.SegmentInfo, firstDirty int64, m *OffsetMap,
	aborted abortedIndex, throttle func(context.Context, int) error) (int64, error) {
	mb := &MapBuilder{m: m, firstDirty: firstDirty, end: firstDirty, aborted: aborted}
	for _, s := range dirty {
		stopped, err := scanSegment(ctx, l, s.BaseOffset, throttle, func(e *record.Entry) (int, error) {
			full, err := mb.Add(e)
			if full {
				return 0, errStop
			}
			return 0, err
		})
		if err != nil {
			return mb.End(), err
		}
		if stopped {
			break
		}
		mb.SegmentDone(s.NextOffset) // the segment is wholly mapped (Kafka: nextSegmentBase-1)
	}
	return mb.Finish(), nil
}

// errStop ends scanSegment early, without an error.
var errStop = errors.New("compaction: stop scanning")

// scanSegment validates and visits every batch of the closed segment whose
// base offset is base. fn returns the bytes it wrote, which with the
// batch's own size go through throttle; errStop ends the scan (stopped is
// then true); other errors of fn and of the scan are wrapped with the file
// and position.
func scanSegment(ctx context.Context, l *local.Log, base int64, throttle func(context.Context, int) error,
	fn func(e *record.Entry) (int, error)) (stopped bool, err error) {
	r, err := l.Segments().OpenSegment(base)
	if err != nil {
		return false, err
	}
	defer r.Close()
	// Ordered: offsets rise strictly from batch to batch, whatever the
	// distance a damaged base offset moved; and every batch lies within
	// the segment's range. The cleaner never rewrites damage.
	sc := record.NewScanner(r, 0, r.Size(), record.ScanOptions{Validate: true, Ordered: true, BufferSize: 1 << 20})
	for sc.Next() {
		if err := ctx.Err(); err != nil {
			return false, fmt.Errorf("compaction: %w", err)
		}
		e := sc.Entry()
		first := e.BaseOffset
		if first < 0 && e.Magic < 2 {
			first = e.LastOffset // a legacy compressed wrapper names only its last
		}
		if first < r.BaseOffset() || e.LastOffset >= r.NextOffset() {
			return false, fmt.Errorf("%w: compaction: %s position %d: a batch of offsets %d..%d in a segment of offsets %d..%d",
				backend.ErrCorruptRecord, r.Path(), e.Position, e.BaseOffset, e.LastOffset, r.BaseOffset(), r.NextOffset()-1)
		}
		n, err := fn(e)
		if err == errStop {
			return true, nil
		}
		if err != nil {
			return false, fmt.Errorf("compaction: %s batch at position %d: %w", r.Path(), e.Position, err)
		}
		if throttle != nil {
			if err := throttle(ctx, int(e.Size)+n); err != nil {
				return false, err
			}
		}
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, record.ErrOffsetOrder) {
			return false, fmt.Errorf("%w: compaction: scan %s: %w", backend.ErrCorruptRecord, r.Path(), err)
		}
		return false, fmt.Errorf("compaction: scan %s: %w", r.Path(), err)
	}
	return false, nil
}

// groupSegments groups the closed segments below end into runs to recopy
// into one segment each, as Kafka's groupSegmentsBySize: consecutive,
// summed size within segmentBytes, each index's summed size within
// maxIndexBytes, and an offset span that fits the index's 32-bit
// relative offsets. Empty segments join the run they are in.
func groupSegments(segs []local.SegmentInfo, end, segmentBytes, maxIndexBytes int64,
	indexSizes func(local.SegmentInfo) (int64, int64, error)) ([][]local.SegmentInfo, error) {
	var groups [][]local.SegmentInfo
	var cur []local.SegmentInfo
	var size, idx, tidx int64
	flush := func() {
		if len(cur) > 0 {
			groups = append(groups, cur)
		}
		cur, size, idx, tidx = nil, 0, 0, 0
	}
	for _, s := range segs {
		if s.BaseOffset >= end {
			break
		}
		i, ti, err := indexSizes(s)
		if err != nil {
			return nil, err
		}
		if len(cur) > 0 && (size+s.Size > segmentBytes || idx+i > maxIndexBytes || tidx+ti > maxIndexBytes ||
			s.NextOffset-1-cur[0].BaseOffset > math.MaxInt32) {
			flush()
		}
		cur = append(cur, s)
		size, idx, tidx = size+s.Size, idx+i, tidx+ti
	}
	flush()
	return groups, nil
}
