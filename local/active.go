package local

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"time"

	"github.com/tierlog/tierlog/index"
	"github.com/tierlog/tierlog/record"
	"github.com/tierlog/tierlog/vfs"
)

// activeSegment is the log's last segment as its writer sees it: a
// read-write descriptor of its own (readers never share it), the index
// rule's state over the segment's writable indexes, and the segment.ms
// roll clock. Everything here is the writer's: REQUIRES Log.mu held for
// every method. Readers reach the same segment through f, whose size the
// writer moves only after the bytes are written.
type activeSegment struct {
	f    *segFile
	w    vfs.File
	txnw vfs.File // the .txnindex, once the segment has one
	ix   *index.Indexer
	// rollingBasedTs is the first batch's max timestamp (the segment.ms
	// clock); -1 when unknown or empty.
	rollingBasedTs int64
	created        time.Time
	jitterMs       int64
}

func (o *segmentOptions) path(base int64, suffix string) string {
	return o.dir + string(os.PathSeparator) + FileName(base, suffix)
}

// createActive makes a new empty segment at base, removing stale files of
// the same name first (as Kafka's roll does).
func createActive(opts *segmentOptions, base int64, now time.Time, jitterMs int64) (a *activeSegment, err error) {
	for _, suf := range []string{LogSuffix, IndexSuffix, TimeIndexSuffix, TxnIndexSuffix} {
		p := opts.path(base, suf)
		if err := opts.fs.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("local: remove stale %s: %w", p, err)
		}
	}
	f := newSegFile(opts, base, 0, now)
	w, err := opts.fs.OpenFile(f.logPath, os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("local: create segment %s: %w", f.logPath, err)
	}
	defer func() {
		if err != nil {
			w.Close()
			opts.fs.Remove(f.logPath)
		}
	}()
	oi, ti, err := newIndexes(opts, base, 0, true)
	if err != nil {
		return nil, err
	}
	f.publishIndexesLocked(oi, ti) // f is not shared yet
	f.maxTs, f.offsetOfMaxTs = -1, -1
	ix := index.NewIndexer(oi, ti, opts.intervalBytes)
	return &activeSegment{f: f, w: w, ix: ix, rollingBasedTs: -1, created: now, jitterMs: jitterMs}, nil
}

// activate makes a loaded last segment writable (the first write after a
// clean open): its own read-write descriptor, and writable indexes
// expanded to segment.index.bytes that replace the read-only ones readers
// may hold (those retire, and close with the segment).
func activate(f *segFile, jitterMs int64) (a *activeSegment, err error) {
	maxTs, offsetOfMaxTs, err := f.largestTimestamp()
	if err != nil {
		return nil, err
	}
	opts := f.opts
	w, err := opts.fs.OpenFile(f.logPath, os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("local: open %s: %w", f.logPath, err)
	}
	defer func() {
		if err != nil {
			w.Close()
		}
	}()
	oi, err := index.OpenOffsetIndex(opts.fs, f.path(IndexSuffix), f.base, opts.maxIndexBytes)
	if err != nil {
		return nil, err
	}
	ti, err := index.OpenTimeIndex(opts.fs, f.path(TimeIndexSuffix), f.base, opts.maxIndexBytes)
	if err != nil {
		oi.Close()
		return nil, err
	}
	if maxTs < 0 {
		maxTs, offsetOfMaxTs = -1, -1
	}
	f.mu.Lock()
	f.publishIndexesLocked(oi, ti)
	f.checkedIndex = true
	f.maxTs, f.offsetOfMaxTs = maxTs, offsetOfMaxTs
	f.mu.Unlock()
	ix := index.NewIndexer(oi, ti, opts.intervalBytes)
	ix.Restore(0, maxTs, offsetOfMaxTs)
	a = &activeSegment{f: f, w: w, ix: ix, rollingBasedTs: -1, created: f.mtime, jitterMs: jitterMs}
	a.loadRollingTs()
	return a, nil
}

// loadRollingTs reads the first batch's max timestamp, the segment.ms
// clock.
func (a *activeSegment) loadRollingTs() {
	a.rollingBasedTs = -1
	if a.f.size.Load() >= record.BatchHeaderSize {
		hdr := make([]byte, record.BatchHeaderSize)
		if _, err := a.w.ReadAt(hdr, 0); err == nil && record.Batch(hdr).Magic() == 2 {
			a.rollingBasedTs = record.Batch(hdr).MaxTimestamp()
		}
	}
}

// batchMeta is what an append needs to know about one of its batches.
type batchMeta struct {
	position   int64 // within the appended bytes
	size       int64
	lastOffset int64
	maxTs      int64
}

// append writes batches (validated, offsets final) at the end of the
// segment and indexes each by Kafka's rule. It is all or nothing: index
// slots are backed before a byte is written, and a failed write is cut
// back. undone is false when even that failed: the file may then hold a
// partial append, and the log must stop writing until it is reopened.
func (a *activeSegment) append(data []byte, batches []batchMeta) (undone bool, err error) {
	pos := a.f.size.Load()
	if err := a.ix.Reserve(len(batches)); err != nil {
		return true, fmt.Errorf("local: reserve index space for %s: %w", a.f.logPath, err)
	}
	if _, err := a.w.WriteAt(data, pos); err != nil {
		if terr := a.w.Truncate(pos); terr != nil {
			return false, fmt.Errorf("local: append to %s failed (%w) and cutting it back to %d bytes failed: %w", a.f.logPath, err, pos, terr)
		}
		return true, fmt.Errorf("local: append to %s: %w", a.f.logPath, err)
	}
	if pos == 0 {
		a.rollingBasedTs = batches[0].maxTs
	}
	for i, b := range batches {
		if err := a.ix.Append(b.position+pos, b.size, b.lastOffset, b.maxTs, b.lastOffset); err != nil {
			// Slots were reserved: this is a bug. Undo the entries of this
			// append and its bytes, so nothing of it remains.
			first := b.lastOffset
			if i > 0 {
				first = batches[0].lastOffset
			}
			ierr := fmt.Errorf("local: index %s: %w", a.f.path(IndexSuffix), err)
			if uerr := errors.Join(a.ix.Offsets.TruncateTo(first), a.ix.Times.TruncateTo(first), a.w.Truncate(pos)); uerr != nil {
				return false, errors.Join(ierr, uerr)
			}
			return true, ierr
		}
	}
	a.publishMaxTimestamp()
	a.f.size.Store(pos + int64(len(data)))
	return true, nil
}

// publishMaxTimestamp lets readers see the segment's largest timestamp so
// far (timestamp searches skip segments by it).
func (a *activeSegment) publishMaxTimestamp() {
	ts, off := a.ix.MaxTimestamp()
	a.f.mu.Lock()
	a.f.maxTs, a.f.offsetOfMaxTs = ts, off
	a.f.mu.Unlock()
}

// shouldRoll applies Kafka's LogSegment.shouldRoll before an append of
// size bytes whose largest timestamp is maxTs and last offset lastOffset.
func (a *activeSegment) shouldRoll(segmentBytes, segmentMs, size, maxTs, lastOffset int64, now time.Time) (bool, string) {
	cur := a.f.size.Load()
	if cur > segmentBytes-size {
		return true, "segment.bytes"
	}
	if cur > 0 {
		var waited int64
		if a.rollingBasedTs >= 0 && maxTs >= 0 {
			waited = maxTs - a.rollingBasedTs
		} else {
			waited = now.Sub(a.created).Milliseconds()
		}
		if waited > segmentMs-a.jitterMs {
			return true, "segment.ms"
		}
	}
	if a.ix.Offsets.IsFull() || a.ix.Times.IsFull() {
		return true, "full index"
	}
	if lastOffset-a.f.base < 0 || lastOffset-a.f.base > math.MaxInt32 {
		return true, "relative offset overflow"
	}
	return false, ""
}

// seal is Kafka's onBecomeInactiveSegment: the final time index entry,
// both indexes trimmed, and the segment marked sealed (its files never
// change again) with next as the base of the segment after it. The
// writer's descriptor stays open for the caller to sync and close.
func (a *activeSegment) seal(next int64) error {
	ts, off := a.ix.MaxTimestamp()
	errs := []error{a.ix.Roll(), a.ix.Offsets.TrimToValidSize(), a.ix.Times.TrimToValidSize()}
	f := a.f
	f.mu.Lock()
	f.sealed, f.next = true, next
	f.maxTs, f.offsetOfMaxTs = ts, off
	f.mu.Unlock()
	return errors.Join(errs...)
}

// sync makes the segment's bytes durable: the .log (and .txnindex)
// always; the indexes only when withIndexes. A Flush of the active
// segment leaves them out: recovery rebuilds the indexes of the segment
// holding the offset before the recovery point and of every later one
// (Log.recover), and a flush's recovery point is the log end, whose
// previous offset the active segment holds (see Log.flushLocked). The
// roll's flush of a sealed segment includes them, and so does a flush
// that finds the segment sealed since.
func (a *activeSegment) sync(withIndexes bool) error {
	if err := a.w.Sync(); err != nil {
		return fmt.Errorf("local: fsync %s: %w", a.f.logPath, err)
	}
	if a.txnw != nil {
		if err := a.txnw.Sync(); err != nil {
			return fmt.Errorf("local: fsync %s: %w", a.f.path(TxnIndexSuffix), err)
		}
	}
	if !withIndexes {
		return nil
	}
	return errors.Join(flushIndex(a.ix.Offsets), flushIndex(a.ix.Times))
}

// flushIndex makes an index durable; one renamed away meanwhile (its
// segment deleted by retention) needs nothing.
func flushIndex(x interface{ Flush() error }) error {
	if err := x.Flush(); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// truncateInPlace removes the batches from c on (truncationCut) from the
// file and the index entries that point at them. The caller holds the
// segment exclusively (segFile.tryExclusive): no reader has its bytes. It
// returns the new next offset (the base offset of the first removed batch,
// or the offset truncated to when the cut falls between batches).
func (a *activeSegment) truncateInPlace(c cut) (int64, error) {
	if !c.found {
		return c.end, nil // nothing at or above the offset here
	}
	f, p := a.f, c.at
	if err := errors.Join(a.ix.Offsets.TruncateTo(c.end), a.ix.Times.TruncateTo(c.end)); err != nil {
		return 0, err
	}
	f.size.Store(p.pos)
	if err := a.w.Truncate(p.pos); err != nil {
		return 0, fmt.Errorf("local: truncate %s to %d: %w", f.logPath, p.pos, err)
	}
	// Restart the index rule and the largest timestamp from what is left,
	// as a reloaded Kafka segment would.
	ts, off := int64(-1), int64(-1)
	start := int64(0)
	if last := a.ix.Times.LastEntry(); last.Timestamp >= 0 {
		ts, off = last.Timestamp, last.Offset
		start = int64(a.ix.Offsets.Lookup(off).Position)
	}
	// The time index's last entry covers the batches up to its offset;
	// those after it (an index interval at most) may hold a larger
	// timestamp. Without it the segment's largest timestamp is too small
	// and OffsetForTimestamp skips records (TestCrashPowerLoss found it).
	if err := f.walkHeaders(start, p.pos, -1, func(e *record.Entry) bool {
		if e.MaxTimestamp > ts {
			ts, off = e.MaxTimestamp, e.LastOffset
		}
		return true
	}); err != nil {
		return 0, err
	}
	a.ix = index.NewIndexer(a.ix.Offsets, a.ix.Times, f.opts.intervalBytes)
	a.ix.Restore(0, ts, off)
	a.publishMaxTimestamp()
	if p.pos == 0 {
		a.rollingBasedTs = -1
	}
	return c.end, nil
}

// close closes the writer's side at the log's Close: the final time index
// entry and trimmed indexes (as Kafka's close), made durable since the
// open after a clean shutdown trusts them (a flush does not sync them),
// and the descriptors. The segment's files (the reader side) close with
// its last reference.
func (a *activeSegment) close() error {
	errs := []error{a.ix.Roll(), a.ix.Offsets.TrimToValidSize(), a.ix.Times.TrimToValidSize()}
	if err := errors.Join(errs...); err == nil {
		errs = append(errs, flushIndex(a.ix.Offsets), flushIndex(a.ix.Times))
	}
	errs = append(errs, a.closeFiles())
	return errors.Join(errs...)
}

// closeFiles closes the writer's descriptors.
func (a *activeSegment) closeFiles() error {
	var errs []error
	if err := a.w.Close(); err != nil {
		errs = append(errs, fmt.Errorf("local: close %s: %w", a.f.logPath, err))
	}
	if a.txnw != nil {
		if err := a.txnw.Close(); err != nil {
			errs = append(errs, fmt.Errorf("local: close %s: %w", a.f.path(TxnIndexSuffix), err))
		}
		a.txnw = nil
	}
	return errors.Join(errs...)
}
