package compaction

import (
	"bufio"
	"context"
	"fmt"
	"math"
	"slices"

	"github.com/tierlog/tierlog/local"
	"github.com/tierlog/tierlog/producerstate"
	"github.com/tierlog/tierlog/record"
)

// This file is a round's second pass: recopying the closed segments below
// the mapped end, group by group, each into one cleaned file that
// local.Replacement swaps in.

// cleaner is one round's recopy: its map, clock and transaction state,
// and the group being written.
type cleaner struct {
	l                 *local.Log
	cleaning          *local.Cleaning // begun before the round read anything
	bufferBytes       int
	m                 *OffsetMap
	end               int64
	now               int64
	deleteRetentionMs int64
	dryRun            bool
	throttle          func(context.Context, int) error
	txn               *txnTracker // across the round's groups, in offset order
	// lastOfProducer is, per producer with state, the last offset of its
	// last batch: that batch stays (emptied if need be), so its sequence
	// survives a reload and a retry of it is still found a duplicate.
	lastOfProducer map[int64]int64
	abortsByMarker map[int64]producerstate.AbortedTxn // the round's .txnindex entries
	repl           *local.Replacement                 // the group being written
	// aborted, when txn is nil (a Filter), tells aborted data apart;
	// markers are then all kept.
	aborted abortedIndex

	b    record.Builder
	it   record.Iterator
	kept []uint8  // decide's decision on each record of the batch
	gets keyBatch // decide's keys to look up
}

// cleanGroups cleans the round's groups in order. Segments that keep
// nothing at the end of a group go in front of the next one (carry); those
// left after the last group, or that the next group's offset span cannot
// take, are emptied one by one.
func (c *cleaner) cleanGroups(ctx context.Context, groups [][]local.SegmentInfo, st *Stats) error {
	var carry []local.SegmentInfo
	var err error
	for _, g := range groups {
		if len(carry) > 0 && g[len(g)-1].NextOffset-1-carry[0].BaseOffset > math.MaxInt32 {
			if err := c.emptySegments(carry, st); err != nil {
				return err
			}
			carry = nil
		}
		if carry, err = c.cleanGroup(ctx, carry, g, st); err != nil {
			return err
		}
	}
	return c.emptySegments(carry, st)
}

// cleanGroup recopies one group into <base>.log.cleaned and swaps it in,
// with carry, the segments before it that kept nothing, in front. A
// cleaned file must hold batches of the last segment it replaces (see
// local.Replacement.Commit), so the group's own segments that keep
// nothing at its end are not replaced with it: they are returned, to go
// in front of the next group (or, after the last, to be emptied one by
// one).
func (c *cleaner) cleanGroup(ctx context.Context, carry, g []local.SegmentInfo, st *Stats) (rest []local.SegmentInfo, err error) {
	segs := append(slices.Clip(carry), g...)
	bases := make([]int64, len(segs))
	for i, s := range segs {
		bases[i] = s.BaseOffset
	}
	var r *local.Replacement
	var w *bufio.Writer
	if !c.dryRun {
		if r, err = c.cleaning.NewReplacement(bases); err != nil {
			return nil, fmt.Errorf("compaction: %w", err)
		}
		c.repl = r
		defer func() { c.repl = nil }()
		defer r.Abort() // removes the file unless Commit took it
		w = bufio.NewWriterSize(r, c.bufferBytes)
	}
	var written int64
	write := func(p []byte) error {
		written += int64(len(p))
		if w == nil {
			return nil
		}
		_, err := w.Write(p)
		return err
	}
	keep := 0 // segments the file replaces: up to the last that kept a batch
	for i, s := range g {
		before := written
		if err := c.copySegment(ctx, s, write, st); err != nil {
			return nil, err
		}
		if written > before {
			keep = len(carry) + i + 1
		}
	}
	st.SegmentsRead += len(g)
	if keep == 0 {
		return segs, nil // nothing kept: Abort removes the empty file
	}
	st.SegmentsWritten++
	st.BytesWritten += written
	if c.dryRun {
		return segs[keep:], nil
	}
	if err := w.Flush(); err != nil {
		return nil, fmt.Errorf("compaction: write %s: %w", r.Path(), err)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("compaction: %w", err)
	}
	if err := r.Shorten(keep); err != nil {
		return nil, err
	}
	if err := r.Commit(); err != nil {
		return nil, err
	}
	return segs[keep:], nil
}

// emptySegments replaces each of segs that is not empty yet with an empty
// segment, one at a time (an empty cleaned file may replace one segment
// only): the clean kept nothing of them, and no later group of the round
// could take them.
func (c *cleaner) emptySegments(segs []local.SegmentInfo, st *Stats) error {
	for _, s := range segs {
		if s.Size == 0 {
			continue
		}
		st.SegmentsWritten++
		if c.dryRun {
			continue
		}
		r, err := c.cleaning.NewReplacement([]int64{s.BaseOffset})
		if err != nil {
			return fmt.Errorf("compaction: %w", err)
		}
		if err := r.Commit(); err != nil {
			return err
		}
	}
	return nil
}

// copySegment writes the batches of s to keep.
func (c *cleaner) copySegment(ctx context.Context, s local.SegmentInfo, write func([]byte) error, st *Stats) error {
	_, err := scanSegment(ctx, c.l, s.BaseOffset, c.throttle, func(e *record.Entry) (int, error) {
		st.BytesRead += e.Size
		out, err := c.filter(e, st)
		if err != nil {
			return 0, err
		}
		if out != nil {
			if err := write(out); err != nil {
				return 0, err
			}
		}
		return len(out), nil
	})
	return err
}

// filter returns what to write for one entry: the entry itself, a
// rewritten batch, an empty batch, or nil to drop it.
func (c *cleaner) filter(e *record.Entry, st *Stats) ([]byte, error) {
	if e.Magic != 2 {
		return e.Data, nil // legacy message sets are copied as they are
	}
	b := e.Batch()
	if b.BaseOffset() >= c.end {
		st.RecordsRead += int64(b.NumRecords())
		if b.IsControl() {
			return e.Data, c.keptMarker(b) // copied as it is: its .txnindex entry too
		}
		return e.Data, nil
	}
	if b.IsControl() {
		if c.txn == nil {
			st.RecordsRead += int64(b.NumRecords())
			return e.Data, nil
		}
		return c.filterMarker(b, st)
	}
	if b.IsTransactional() && c.abortedData(b) {
		st.RecordsRead += int64(b.NumRecords())
		st.RecordsRemoved += int64(b.NumRecords())
		st.AbortedRemoved += int64(b.NumRecords())
		return c.emptyOrNil(b), nil
	}
	horizon, hasHorizon := b.DeleteHorizon()
	if err := c.decide(e.Data, hasHorizon, horizon); err != nil {
		return nil, err
	}
	kept, removed, tombstones := 0, 0, 0
	for _, d := range c.kept {
		switch d {
		case keptValue:
			kept++
		case keptTombstone:
			kept++
			tombstones++
		default:
			removed++
		}
	}
	st.RecordsRead += int64(kept + removed)
	st.RecordsRemoved += int64(removed)
	st.TombstonesKept += int64(tombstones)
	if kept == 0 {
		return c.emptyOrNil(b), nil
	}
	setHorizon := tombstones > 0 && !hasHorizon
	if removed == 0 && !setHorizon {
		return e.Data, nil
	}
	if setHorizon {
		hasHorizon, horizon = true, c.now+c.deleteRetentionMs
	}
	return c.rebuild(b, hasHorizon, horizon, func(i int) bool { return c.kept[i] != removedRecord })
}

// abortedData reports whether b, a transactional data batch, is data of
// an aborted transaction.
func (c *cleaner) abortedData(b record.Batch) bool {
	if c.txn == nil {
		return b.NumRecords() > 0 && c.aborted.contains(b.ProducerID(), b.BaseOffset())
	}
	return c.txn.dataBatch(b)
}

// header returns b's header for a rebuilt batch: offsets, epoch, codec,
// timestamp type, producer fields and transaction flags kept.
func header(b record.Batch, hasHorizon bool, horizon int64) record.BatchHeader {
	return record.BatchHeader{
		BaseOffset: b.BaseOffset(), PartitionLeaderEpoch: b.PartitionLeaderEpoch(), Codec: b.Codec(),
		TimestampType: b.TimestampType(), Transactional: b.IsTransactional(), Control: b.IsControl(),
		ProducerID: b.ProducerID(), ProducerEpoch: b.ProducerEpoch(), BaseSequence: b.BaseSequence(),
		DeleteHorizon: horizon, HasDeleteHorizon: hasHorizon,
	}
}

// emptyOrNil drops b, a batch that keeps no record, or, when it must stay
// (the last data batch of a producer with an id that still has state,
// Kafka's RETAIN_EMPTY), returns its header with no records.
func (c *cleaner) emptyOrNil(b record.Batch) []byte {
	last, ok := c.lastOfProducer[b.ProducerID()]
	if !ok || b.ProducerID() < 0 || last != b.LastOffset() || b.IsControl() {
		return nil
	}
	horizon, hasHorizon := b.DeleteHorizon()
	c.b.Reset(header(b, hasHorizon, horizon))
	return c.b.BuildEmpty(b.LastOffsetDelta(), b.MaxTimestamp())
}

// rebuild writes b again with the records keep accepts (by their index in
// the batch) and the given delete horizon, at their original offsets.
func (c *cleaner) rebuild(b record.Batch, hasHorizon bool, horizon int64, keep func(i int) bool) ([]byte, error) {
	c.b.Reset(header(b, hasHorizon, horizon))
	if err := c.it.Reset(b); err != nil {
		return nil, err
	}
	for i := 0; c.it.Next(); i++ {
		r := c.it.Record()
		if !keep(i) {
			continue
		}
		if err := c.b.AppendAt(int32(r.Offset-b.BaseOffset()), r.Timestamp, r.Key, r.Value, r.Headers); err != nil {
			return nil, err
		}
	}
	if err := c.it.Err(); err != nil {
		return nil, err
	}
	c.b.SetLastOffsetDelta(b.LastOffsetDelta())
	out, err := c.b.Build()
	if err != nil {
		return nil, err
	}
	if b.TimestampType() == record.LogAppendTime {
		out.SetLogAppendTime(b.MaxTimestamp())
	}
	return out, nil
}

// filterMarker returns what to write for a control batch: itself while
// its transaction's data is in the log; once it may go, itself with a
// delete horizon, and after that horizon nothing.
func (c *cleaner) filterMarker(b record.Batch, st *Stats) ([]byte, error) {
	st.RecordsRead += int64(b.NumRecords())
	discardable, err := c.txn.marker(b)
	if err != nil {
		return nil, err
	}
	if !discardable {
		return b, c.keptMarker(b)
	}
	horizon, hasHorizon := b.DeleteHorizon()
	switch {
	case hasHorizon && c.now >= horizon:
		st.RecordsRemoved += int64(b.NumRecords())
		st.MarkersRemoved++
		return c.emptyOrNil(b), nil
	case hasHorizon:
		return b, c.keptMarker(b)
	default:
		if err := c.keptMarker(b); err != nil {
			return nil, err
		}
		return c.rebuild(b, true, c.now+c.deleteRetentionMs, func(int) bool { return true })
	}
}

// keptMarker notes a marker the cleaned file keeps: an ABORT marker's
// transaction goes to the cleaned segment's .txnindex, as Kafka's cleaner
// writes it (read_committed consumers still need it).
func (c *cleaner) keptMarker(b record.Batch) error {
	if c.repl == nil {
		return nil
	}
	if a, ok := c.abortsByMarker[b.BaseOffset()]; ok && a.ProducerID == b.ProducerID() {
		return c.repl.AddAborted(a)
	}
	return nil
}

// filter's decisions on a record.
const (
	removedRecord = iota
	keptValue
	keptTombstone
)

// decide sets c.kept to the decision on each record of the data batch
// data: Kafka's shouldRetainRecord, once a record, against the delete
// horizon the batch was read with, as Kafka's filterTo (a tombstone kept
// keeps its place in the rebuilt batch even when the horizon this round
// sets has already passed, with delete.retention.ms=0; the next round
// removes it). Keys are looked up batchKeys at a time, their slots
// loaded together first.
func (c *cleaner) decide(data []byte, hasHorizon bool, horizon int64) error {
	if err := c.it.Reset(data); err != nil {
		return err
	}
	c.kept, c.gets.n = c.kept[:0], 0
	for c.it.Next() {
		r := c.it.Record()
		d := uint8(keptValue)
		if r.Value == nil {
			d = keptTombstone
		}
		switch {
		case r.Offset >= c.end:
			c.kept = append(c.kept, d)
		case r.Key == nil:
			c.kept = append(c.kept, removedRecord)
		default:
			c.kept = append(c.kept, d) // until its key is looked up
			if c.gets.add(r.Key, r.Offset, len(c.kept)-1) {
				c.lookUp(hasHorizon, horizon)
			}
		}
	}
	if err := c.it.Err(); err != nil {
		return err
	}
	c.lookUp(hasHorizon, horizon)
	return nil
}

// lookUp decides the records queued in c.gets, and empties it: a record
// goes if a later one has its key, and a tombstone also once its delete
// horizon has passed.
func (c *cleaner) lookUp(hasHorizon bool, horizon int64) {
	b := &c.gets
	c.m.touch(b)
	for i := range b.n {
		at := b.at[i]
		if latest, ok := c.m.get(b.h[i]); ok && b.off[i] < latest {
			c.kept[at] = removedRecord
		} else if c.kept[at] == keptTombstone && hasHorizon && c.now >= horizon {
			c.kept[at] = removedRecord
		}
	}
	b.n = 0
}
