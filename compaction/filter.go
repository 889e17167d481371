package compaction

import (
	"fmt"
	"sort"
	"time"

	"github.com/tierlog/tierlog/producerstate"
	"github.com/tierlog/tierlog/record"
)

// This file is the cleaner's two passes for a copy of a log that is not a
// local.Log: segments in a bucket, read by whoever holds them (package
// tiered). A MapBuilder is the first pass (buildMap's, batch by batch), a
// Filter the second (a round's recopy, batch by batch); the caller reads
// the batches, in offset order, and writes what the Filter keeps.

// Aborted is the aborted transactions a round knows of, from the
// .txnindex of every segment it reads (in any order).
type Aborted []producerstate.AbortedTxn

// index sorts the transactions for lookups.
func (a Aborted) index() abortedIndex {
	txns := make([]abortedTxn, len(a))
	for i, t := range a {
		txns[i] = abortedTxn{pid: t.ProducerID, first: t.FirstOffset, last: t.LastOffset}
	}
	sort.Slice(txns, func(i, j int) bool { return txns[i].first < txns[j].first })
	return newAbortedIndex(txns)
}

// MapBuilder maps the latest offset of every key in a dirty section, batch
// by batch, as a round's first pass: records of control batches and of
// aborted transactions are never mapped.
type MapBuilder struct {
	m          *OffsetMap
	firstDirty int64
	end        int64
	aborted    abortedIndex
	it         record.Iterator
	puts       keyBatch
}

// NewMapBuilder returns a builder filling m (cleared first) from
// firstDirty on; aborted are the transactions aborted in the section.
func NewMapBuilder(m *OffsetMap, firstDirty int64, aborted Aborted) *MapBuilder {
	m.Clear()
	return &MapBuilder{m: m, firstDirty: firstDirty, end: firstDirty, aborted: aborted.index()}
}

// Add maps the keyed records of e at or above the first dirty offset. It
// returns full, and maps nothing, when the map cannot take the whole
// batch: the section ends before it (ErrMapFull when not even its first
// batch fits).
func (mb *MapBuilder) Add(e *record.Entry) (full bool, err error) {
	if e.LastOffset < mb.firstDirty {
		return false, nil
	}
	if b := e.Batch(); e.Magic == 2 && !b.IsControl() && !(b.IsTransactional() && mb.aborted.contains(b.ProducerID(), e.BaseOffset)) {
		m := mb.m
		if m.Len()+int(b.NumRecords()) > m.Capacity() {
			if mb.end == mb.firstDirty {
				return false, fmt.Errorf("%w: it holds %d keys, the batch at offset %d has %d records; raise the cleaner's memory",
					ErrMapFull, m.Capacity(), e.BaseOffset, b.NumRecords())
			}
			return true, nil
		}
		if err := mb.it.Reset(e.Data); err != nil {
			return false, err
		}
		for mb.it.Next() {
			if rec := mb.it.Record(); rec.Key != nil && rec.Offset >= mb.firstDirty {
				if mb.puts.add(rec.Key, rec.Offset, 0) {
					if err := m.putBatch(&mb.puts); err != nil {
						return false, err // cannot happen: capacity checked above
					}
				}
			}
		}
		if err := mb.it.Err(); err != nil {
			return false, err
		}
		if err := m.putBatch(&mb.puts); err != nil {
			return false, err
		}
	}
	mb.end = e.LastOffset + 1
	return false, nil
}

// SegmentDone says a segment was mapped whole: the section reaches the
// next segment's base, next (past any offsets its last batches lost).
func (mb *MapBuilder) SegmentDone(next int64) { mb.end = max(mb.end, next) }

// End is one past the last offset mapped: the end of the section a
// Filter may clean against the map.
func (mb *MapBuilder) End() int64 { return mb.end }

// Finish records the section's end in the map and returns it.
func (mb *MapBuilder) Finish() int64 {
	mb.m.SetLatestOffset(mb.end - 1)
	return mb.end
}

// FilterOptions are a Filter's inputs.
type FilterOptions struct {
	Map               *OffsetMap // built over the dirty section by a MapBuilder
	End               int64      // the MapBuilder's End
	Now               time.Time  // the clock for delete horizons
	DeleteRetentionMs int64
	Aborted           Aborted // the aborted transactions of the batches filtered
	// LastOfProducer is, per producer with state, the last offset of its
	// last batch: that batch stays (emptied if need be), as Kafka's
	// cleaner keeps it.
	LastOfProducer map[int64]int64
}

// Filter decides what a cleaned copy of a segment keeps, batch by batch,
// by the rules of a round's recopy (Clean): the latest record of each key
// at its original offset, tombstones until their delete horizon, aborted
// data removed. Unlike a round over a local log, it keeps every
// transaction marker (and so every .txnindex entry): whether a marker may
// go depends on every batch of the log before it, and a Filter may see
// only part of the log.
type Filter struct{ c cleaner }

// NewFilter returns a Filter.
func NewFilter(o FilterOptions) *Filter {
	f := &Filter{c: cleaner{m: o.Map, end: o.End, now: o.Now.UnixMilli(), deleteRetentionMs: o.DeleteRetentionMs,
		lastOfProducer: o.LastOfProducer, aborted: o.Aborted.index()}}
	if f.c.lastOfProducer == nil {
		f.c.lastOfProducer = map[int64]int64{}
	}
	return f
}

// Batch returns what to write for e: e's own bytes, a rebuilt batch (at
// the same offsets), an empty batch, or nil to drop it. The bytes are
// valid until the next call. st counts the bytes and records read and
// the records removed; what is written, the caller counts.
func (f *Filter) Batch(e *record.Entry, st *Stats) ([]byte, error) {
	st.BytesRead += e.Size
	out, err := f.c.filter(e, st)
	if err != nil {
		return nil, fmt.Errorf("compaction: batch at offset %d: %w", e.BaseOffset, err)
	}
	return out, nil
}

// Empty returns a batch of no records in place of e, the last batch of
// a copy that keeps nothing: e's offsets (so the copy still ends where e
// did), its leader epoch and largest timestamp, no producer and no
// transaction. A copy that must hold a batch (a segment in a bucket)
// ends with it; no record comes back with it. Valid until the next call.
func (f *Filter) Empty(e *record.Entry) []byte {
	h := record.NewBatchHeader()
	h.BaseOffset = e.BaseOffset
	first := e.BaseOffset
	if e.Magic == 2 {
		h.PartitionLeaderEpoch = e.Batch().PartitionLeaderEpoch()
	} else if first < 0 {
		first = e.LastOffset // a legacy compressed wrapper names only its last
	}
	h.BaseOffset = first
	f.c.b.Reset(h)
	return f.c.b.BuildEmpty(int32(e.LastOffset-first), e.MaxTimestamp)
}
