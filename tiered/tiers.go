package tiered

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/local"
	"github.com/tierlog/tierlog/objstore"
)

// A tier holds a range of a partition's offsets and serves reads of it.
// A partition's tiers are a stack, oldest offsets first (Partition.tiers:
// the bucket, then the local log); in a view each tier serves from its
// start up to the next tier's start, and the last tier up to the log end.
// A read, a timestamp lookup, an aborted-transaction scan and an epoch
// lookup walk the stack from the tier that holds their offset, handing
// on to the next tier where one's offsets end, never back. A third tier
// is one more implementation and one more entry in the stack.
type tier interface {
	// start is the first offset the tier serves in v. A tier whose start
	// is at or past the next one's holds nothing in v.
	start(v view) int64
	// remote says the tier's reads wait on the network: they need the
	// manifest read (attach), take a slot of the remote reader pool,
	// count in the remote read metrics, and are refused to a replica's
	// fetch (Kafka's OFFSET_MOVED_TO_TIERED_STORAGE).
	remote() bool
	// read returns whole batches from the first batch holding an offset
	// at or after offset, below end (the next tier's start); found is
	// false when the tier holds no batch in [offset, end). A read past
	// every tier's end returns no records (found) or an out-of-range
	// error from the last tier. errViewMoved says the tier's own offsets
	// moved past the view.
	read(ctx context.Context, v view, offset, end int64, opts backend.ReadOptions) (recs backend.Records, found bool, err error)
	// aborted appends the aborted transactions that overlap [fetch,
	// upper) from the tier's segments holding offsets from fetch below
	// end; complete says that no later tier can add any (Kafka's
	// collectAbortedTransactions stops there too).
	aborted(ctx context.Context, v view, acc []backend.AbortedTxn, fetch, upper, end int64) (out []backend.AbortedTxn, complete bool, err error)
	// offsetForTimestamp is backend.Partition.OffsetForTimestamp over the
	// tier's offsets below end, for a timestamp ts >= 0 or
	// backend.MaxTimestamp (the first record with the largest timestamp).
	offsetForTimestamp(ctx context.Context, v view, ts, end int64) (offset, timestamp int64, found bool, err error)
	// maxTimestamp is the largest timestamp of the tier's records below
	// end as far as it knows without reading the bucket (ok false: none),
	// so a MAX_TIMESTAMP lookup asks only the tier that holds it; offset
	// is the first record carrying it when the tier found it on the way
	// (-1: offsetForTimestamp finds it).
	maxTimestamp(ctx context.Context, v view, end int64) (ts, offset int64, ok bool, err error)
	// epochs calls add with each leader epoch of the tier's offsets below
	// end and the first offset written in it, oldest first.
	epochs(ctx context.Context, v view, end int64, add func(epoch int32, start int64)) error
}

// errViewMoved says that a tier's offsets moved past the view a read
// was taken from (local retention dropped a segment the view still read
// locally; bucket retention deleted one the view names), or that the
// manifest was read for the first time. Read takes a new view.
var errViewMoved = errors.New("tiered: the tier moved past the read's view")

// viewTries bounds the views one Read takes: a new view follows the
// first read of the manifest (attach), local retention moving past the
// view, or bucket retention deleting a segment the view names. Past it,
// Read fails with a retryable storage error.
const viewTries = 4

// span returns the offsets [start, end) tier i serves in v.
func (p *Partition) span(v view, i int) (start, end int64) {
	start, end = p.tiers[i].start(v), int64(math.MaxInt64)
	if i+1 < len(p.tiers) {
		end = p.tiers[i+1].start(v)
	}
	return start, end
}

// tierOf returns the index of the tier that serves offset in v: the
// newest whose start is at or below it (the oldest tier for an offset
// below every start).
func (p *Partition) tierOf(v view, offset int64) int {
	for i := len(p.tiers) - 1; i > 0; i-- {
		if start, end := p.span(v, i); offset >= start && start < end {
			return i
		}
	}
	return 0
}

// Read serves an offset from the tier of the stack that holds it in one
// view of the partition: the local log from its start, the bucket below
// it (the manifest picks the segment, its cached remote offset index the
// position, then one window from the chunk cache or one ranged GET
// returns whole batches from the one holding the offset). The walk down
// the stack is written out in doc.go.
func (p *Partition) Read(ctx context.Context, offset int64, opts backend.ReadOptions) (backend.Records, error) {
	if err := p.checkOpen(); err != nil {
		return nil, err
	}
	if p.opts.ReadReplica {
		return p.replicaRead(ctx, offset, opts)
	}
	if err := p.disklessReady(ctx); err != nil {
		return nil, err
	}
	return p.readTries(ctx, offset, opts)
}

// readTries is Read: a new view for each try whose view moved.
func (p *Partition) readTries(ctx context.Context, offset int64, opts backend.ReadOptions) (backend.Records, error) {
	for try := 1; ; try++ {
		recs, err := p.readView(ctx, p.view(), offset, opts)
		if !errors.Is(err, errViewMoved) {
			return recs, err
		}
		if try == viewTries {
			// The tiers kept moving under the read: a retryable storage
			// error, never the moved tier's own answer (the local log's
			// out-of-range would send a consumer to reset an offset the
			// partition holds).
			p.metrics.RemoteReadErrors.Add(1)
			return nil, fmt.Errorf("%w: %w: tiered: a read of offset %d: the partition's tiers moved under %d views in a row (the last: %v)",
				backend.ErrStorage, objstore.ErrRetryable, offset, viewTries, err)
		}
	}
}

// ReadWaits implements backend.Tiered: whether the tier that would serve
// a Read of offset now is remote (see tier.remote).
func (p *Partition) ReadWaits(offset int64) bool {
	v := p.view()
	return offset >= v.logStart() && p.tiers[p.tierOf(v, offset)].remote()
}

// readView is Read from the view v.
func (p *Partition) readView(ctx context.Context, v view, offset int64, opts backend.ReadOptions) (backend.Records, error) {
	i := p.tierOf(v, offset)
	t := p.tiers[i]
	if offset < v.logStart() {
		if t.remote() {
			p.metrics.RemoteReadErrors.Add(1)
		}
		return nil, v.outOfRange(offset)
	}
	if !t.remote() {
		return p.readFrom(ctx, v, i, offset, opts)
	}
	if opts.Replica {
		return nil, &backend.OffsetMovedToTieredStorageError{Offset: offset, LocalLogStart: v.local.LogStart}
	}
	if !v.attached {
		// The bucket's offsets are known once its manifest is read; the
		// manifest's log start may be past the checkpoint's.
		if err := p.attach(ctx); err != nil {
			p.metrics.RemoteReadErrors.Add(1)
			return nil, err
		}
		return nil, fmt.Errorf("%w: the manifest was read", errViewMoved)
	}
	release, err := p.opts.Readers.acquire(ctx)
	if err != nil {
		p.metrics.RemoteReadErrors.Add(1)
		return nil, err
	}
	defer release()
	start := time.Now()
	recs, err := p.readFrom(ctx, v, i, offset, opts)
	if err == nil && opts.Isolation == backend.ReadCommitted {
		if mr, ok := recs.(*memRecords); ok {
			mr.aborted, err = p.abortedFor(ctx, v, i, offset, mr.next)
		}
	}
	switch {
	case errors.Is(err, errViewMoved):
	case err != nil:
		err = storageError(ctx, err)
		p.metrics.RemoteReadErrors.Add(1)
	default:
		if _, ok := recs.(*memRecords); ok { // a later tier may have served it
			p.metrics.RemoteReads.Add(1)
			p.metrics.RemoteReadBytes.Add(recs.Len())
			p.metrics.RemoteReadLatency.Since(start)
		}
	}
	return recs, err
}

// readFrom walks the stack from tier i: each tier reads from offset (or
// its start) below the next one's start, and hands on to the next where
// it holds nothing more.
func (p *Partition) readFrom(ctx context.Context, v view, i int, offset int64, opts backend.ReadOptions) (backend.Records, error) {
	for ; i < len(p.tiers); i++ {
		start, end := p.span(v, i)
		if start >= end {
			continue
		}
		recs, found, err := p.tiers[i].read(ctx, v, max(offset, start), end, opts)
		if err != nil || found {
			return recs, err
		}
	}
	return nil, v.outOfRange(offset) // unreachable: the last tier always answers
}

// abortedFor collects the aborted transactions a read_committed read from
// fetch up to upper overlaps, from tier i on down the stack until a tier
// says no later one can add any (Kafka's collectAbortedTransactions over
// both tiers), sorted by first offset.
func (p *Partition) abortedFor(ctx context.Context, v view, i int, fetch, upper int64) ([]backend.AbortedTxn, error) {
	var out []backend.AbortedTxn
	for ; i < len(p.tiers); i++ {
		start, end := p.span(v, i)
		if start >= end {
			continue
		}
		var complete bool
		var err error
		if out, complete, err = p.tiers[i].aborted(ctx, v, out, max(fetch, start), upper, end); err != nil {
			return nil, err
		}
		if complete {
			break
		}
	}
	slices.SortFunc(out, func(a, b backend.AbortedTxn) int { return cmp.Compare(a.FirstOffset, b.FirstOffset) })
	return slices.Compact(out), nil
}

// OffsetForTimestamp answers ListOffsets over the stack, from one view:
// the earliest and latest-tiered offsets from the view itself, the
// largest timestamp from the tier that holds it, and a timestamp from the
// oldest tier holding a record at or after it (the bucket's segments by
// their largest timestamp, then their remote time index; then the local
// log).
func (p *Partition) OffsetForTimestamp(ctx context.Context, ts int64) (int64, int64, bool, error) {
	if err := p.checkOpen(); err != nil {
		return 0, 0, false, err
	}
	if err := p.replicaReady(ctx); err != nil {
		return 0, 0, false, err
	}
	if err := p.disklessReady(ctx); err != nil {
		return 0, 0, false, err
	}
	off, rts, ok, err := p.offsetForTimestamp(ctx, ts)
	if p.opts.ReadReplica && errors.Is(err, objstore.ErrNotFound) {
		// The origin's retention removed an index the replica's manifest
		// still names: a step, then the answer of the newer manifest.
		if serr := p.ReplicaStep(ctx); serr != nil {
			return 0, 0, false, errors.Join(err, serr)
		}
		off, rts, ok, err = p.offsetForTimestamp(ctx, ts)
	}
	return off, rts, ok, err
}

// offsetForTimestamp is OffsetForTimestamp from one view.
func (p *Partition) offsetForTimestamp(ctx context.Context, ts int64) (int64, int64, bool, error) {
	v, err := p.attachedView(ctx) // the bucket's timestamps are in its manifest and indexes
	if err != nil {
		return 0, 0, false, err
	}
	switch ts {
	case backend.EarliestTimestamp:
		return v.logStart(), -1, true, nil
	case backend.LatestTieredTimestamp:
		if last := v.head.LastOffset(); last >= 0 {
			return last, -1, true, nil
		}
		return -1, -1, false, nil
	case backend.MaxTimestamp:
		return p.maxTimestampOffset(ctx, v)
	}
	if ts < 0 {
		return p.local.OffsetForTimestamp(ctx, ts) // latest, earliest-local: the local log's own
	}
	var off, rts int64
	for i := p.tierOf(v, v.logStart()); i < len(p.tiers); i++ {
		start, end := p.span(v, i)
		if start >= end {
			continue
		}
		var found bool
		if off, rts, found, err = p.tiers[i].offsetForTimestamp(ctx, v, ts, end); err != nil || found {
			if err != nil && p.tiers[i].remote() {
				err = storageError(ctx, err) // the bucket's failure: KAFKA_STORAGE_ERROR, which clients retry
			}
			return off, rts, found, err
		}
	}
	return off, rts, false, nil // the newest tier's answer: none
}

// maxTimestampOffset answers MAX_TIMESTAMP over the stack: the first
// record carrying the partition's largest timestamp, asked of the oldest
// tier that holds it.
func (p *Partition) maxTimestampOffset(ctx context.Context, v view) (int64, int64, bool, error) {
	best, bestTs, bestOff := -1, int64(math.MinInt64), int64(-1)
	for i := range p.tiers {
		start, end := p.span(v, i)
		if start >= end {
			continue
		}
		ts, off, ok, err := p.tiers[i].maxTimestamp(ctx, v, end)
		if err != nil {
			if p.tiers[i].remote() {
				err = storageError(ctx, err)
			}
			return 0, 0, false, err
		}
		if ok && (best < 0 || ts > bestTs) {
			best, bestTs, bestOff = i, ts, off
		}
	}
	switch {
	case best < 0:
		best = len(p.tiers) - 1 // none holds a record: the newest tier's answer
	case bestOff >= 0:
		return bestOff, bestTs, true, nil // found on the way: not asked twice
	}
	_, end := p.span(v, best)
	return p.tiers[best].offsetForTimestamp(ctx, v, backend.MaxTimestamp, end)
}

// epochs merges the stack's leader epochs in one view: each epoch once,
// with the first offset written in it, from the oldest tier on.
func (p *Partition) epochs(ctx context.Context, v view) ([]local.EpochEntry, error) {
	var out []local.EpochEntry
	add := func(epoch int32, start int64) {
		if n := len(out); n > 0 && epoch <= out[n-1].Epoch {
			return // an epoch seen already (or older): its first start stands
		}
		out = append(out, local.EpochEntry{Epoch: epoch, StartOffset: start})
	}
	for i := range p.tiers {
		if start, end := p.span(v, i); start < end || i == len(p.tiers)-1 {
			if err := p.tiers[i].epochs(ctx, v, end, add); err != nil {
				if p.tiers[i].remote() {
					err = storageError(ctx, err)
				}
				return nil, err
			}
		}
	}
	return out, nil
}

// localTier is the local log: it serves from its log start to the log
// end, and answers what it holds without the bucket.
type localTier struct{ p *Partition }

func (localTier) start(v view) int64 { return v.local.LogStart }
func (localTier) remote() bool       { return false }

func (t localTier) read(ctx context.Context, v view, offset, _ int64, opts backend.ReadOptions) (backend.Records, bool, error) {
	recs, err := t.p.local.Read(ctx, offset, opts)
	if err == nil {
		return recs, true, nil
	}
	var oor *backend.OffsetOutOfRangeError // on the heap (errors.As): only on this path
	switch {
	case !errors.As(err, &oor):
		return recs, true, err
	case offset > oor.LogEnd:
		// Past the end: say the partition's range, not the local one.
		return nil, true, &backend.OffsetOutOfRangeError{Offset: offset, LogStart: v.logStart(), LogEnd: oor.LogEnd}
	}
	// Local retention raised the local log start under this read: the
	// offset is the bucket's now (never an out-of-range for a reader of
	// a partition that still holds it).
	return nil, true, fmt.Errorf("%w: %w", errViewMoved, err)
}

func (t localTier) aborted(_ context.Context, _ view, acc []backend.AbortedTxn, fetch, upper, _ int64) ([]backend.AbortedTxn, bool, error) {
	more, _, err := t.p.segs.CollectAborted(fetch, upper)
	if err != nil {
		return nil, false, err
	}
	return append(acc, more...), true, nil
}

func (t localTier) offsetForTimestamp(ctx context.Context, _ view, ts, _ int64) (int64, int64, bool, error) {
	return t.p.local.OffsetForTimestamp(ctx, ts)
}

func (t localTier) maxTimestamp(ctx context.Context, _ view, _ int64) (int64, int64, bool, error) {
	off, ts, found, err := t.p.local.OffsetForTimestamp(ctx, backend.MaxTimestamp)
	return ts, off, found, err
}

func (t localTier) epochs(_ context.Context, _ view, _ int64, add func(int32, int64)) error {
	for _, e := range t.p.local.LeaderEpochs() {
		add(e.Epoch, e.StartOffset)
	}
	return nil
}
