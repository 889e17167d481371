package compaction

import (
	"context"
	"fmt"
	"math"
	"sort"

	"github.com/tierlog/tierlog/local"
	"github.com/tierlog/tierlog/record"
)

// Transactions, as Kafka's cleaner treats them (LogCleaner's
// CleanedTransactionMetadata):
//
//   - data of an aborted transaction is removed whatever its keys, and
//     never mapped (an aborted write must not hide a committed one);
//   - data of a committed transaction is cleaned like any other;
//   - an ABORT marker stays while a batch of its transaction is still in
//     the log; a COMMIT marker stays while a batch of its transaction was
//     traversed in the round; a marker that may go (its transaction's data
//     is gone) is given a delete horizon like a tombstone and removed in
//     the first round after it;
//   - nothing at or after the first offset of a transaction still open
//     (the last stable offset) is cleaned.
//
// Kafka finds aborted transactions in each segment's .txnindex. tierlog's
// local log writes none, so a round finds them itself: one pass over the
// batch headers of the closed segments from the log start (control
// batches are read whole: a marker's type is its record's key).

// abortedTxn is an aborted transaction: producer pid's batches in
// [first, last], where last is the offset of its ABORT marker.
type abortedTxn struct {
	pid, first, last int64
}

// txnScan is what scanTransactions found.
type txnScan struct {
	aborted   []abortedTxn // by first offset
	firstOpen int64        // first offset of the earliest open transaction, MaxInt64 if none
}

// scanTransactions reads the headers of segs (consecutive closed
// segments from the log start) up to end.
func scanTransactions(ctx context.Context, l *local.Log, segs []local.SegmentInfo, end int64) (txnScan, error) {
	out := txnScan{firstOpen: math.MaxInt64}
	open := map[int64]int64{} // producer id -> first offset of its open transaction
	var buf []byte
	var it record.Iterator
	for _, s := range segs {
		if s.BaseOffset >= end {
			break
		}
		r, err := l.OpenSegment(s.BaseOffset)
		if err != nil {
			return out, err
		}
		sc := record.NewScanner(r, 0, r.Size(), record.ScanOptions{HeadersOnly: true})
		for sc.Next() {
			if err := ctx.Err(); err != nil {
				r.Close()
				return out, fmt.Errorf("compaction: %w", err)
			}
			e := sc.Entry()
			if e.Magic != 2 || e.BaseOffset >= end {
				continue
			}
			b := e.Batch()
			if !b.IsTransactional() || b.NumRecords() == 0 {
				continue // an emptied batch (kept to end a group) belongs to no transaction
			}
			pid := b.ProducerID()
			if !b.IsControl() {
				if _, ok := open[pid]; !ok {
					open[pid] = e.BaseOffset
				}
				continue
			}
			if int64(cap(buf)) < e.Size {
				buf = make([]byte, e.Size)
			}
			buf = buf[:e.Size]
			if _, err := r.ReadAt(buf, e.Position); err != nil {
				r.Close()
				return out, fmt.Errorf("compaction: read %s at %d: %w", r.Path(), e.Position, err)
			}
			t, err := markerType(&it, buf)
			if err != nil {
				r.Close()
				return out, fmt.Errorf("compaction: %s batch at position %d: %w", r.Path(), e.Position, err)
			}
			first, wasOpen := open[pid]
			switch t {
			case record.ControlAbort:
				if wasOpen {
					out.aborted = append(out.aborted, abortedTxn{pid: pid, first: first, last: e.BaseOffset})
				}
				delete(open, pid)
			case record.ControlCommit:
				delete(open, pid)
			}
		}
		err = sc.Err()
		r.Close()
		if err != nil {
			return out, fmt.Errorf("compaction: scan %s: %w", r.Path(), err)
		}
	}
	for _, first := range open {
		out.firstOpen = min(out.firstOpen, first)
	}
	sort.Slice(out.aborted, func(i, j int) bool { return out.aborted[i].first < out.aborted[j].first })
	return out, nil
}

// markerType returns the type of a control batch's first record
// (ControlUnknown for an empty batch: one the cleaner emptied).
func markerType(it *record.Iterator, data []byte) (record.ControlType, error) {
	if err := it.Reset(record.Batch(data)); err != nil {
		return record.ControlUnknown, err
	}
	if !it.Next() {
		return record.ControlUnknown, it.Err()
	}
	return record.ParseControlKey(it.Record().Key)
}

// abortedIndex answers whether a producer's batch lies in an aborted
// transaction, for the map pass.
type abortedIndex map[int64][]abortedTxn // by producer, by first offset

func newAbortedIndex(txns []abortedTxn) abortedIndex {
	ix := abortedIndex{}
	for _, t := range txns {
		ix[t.pid] = append(ix[t.pid], t)
	}
	return ix
}

func (ix abortedIndex) contains(pid, offset int64) bool {
	ts := ix[pid]
	i := sort.Search(len(ts), func(i int) bool { return ts[i].first > offset }) - 1
	return i >= 0 && offset <= ts[i].last
}

// txnTracker follows transactions through a recopy, batch by batch in
// offset order (Kafka's CleanedTransactionMetadata).
type txnTracker struct {
	aborted   []abortedTxn // not yet reached, by first offset
	ongoing   map[int64]*ongoingAbort
	committed map[int64]bool // producers with a committed-transaction batch traversed since their last marker
	it        record.Iterator
}

type ongoingAbort struct {
	seenBatch bool
}

func newTxnTracker(aborted []abortedTxn) *txnTracker {
	return &txnTracker{aborted: aborted, ongoing: map[int64]*ongoingAbort{}, committed: map[int64]bool{}}
}

// reach makes the aborted transactions that begin at or before offset
// ongoing.
func (t *txnTracker) reach(offset int64) {
	for len(t.aborted) > 0 && t.aborted[0].first <= offset {
		t.ongoing[t.aborted[0].pid] = &ongoingAbort{}
		t.aborted = t.aborted[1:]
	}
}

// dataBatch reports whether a transactional data batch is aborted data,
// to be removed. An emptied batch (kept only to end a group) counts for
// no transaction, or its marker would stay for good.
func (t *txnTracker) dataBatch(b record.Batch) bool {
	t.reach(b.LastOffset())
	if b.NumRecords() == 0 {
		return false
	}
	if a, ok := t.ongoing[b.ProducerID()]; ok {
		a.seenBatch = true
		return true
	}
	t.committed[b.ProducerID()] = true
	return false
}

// marker reports whether a control batch may go (once its delete horizon
// has passed).
func (t *txnTracker) marker(b record.Batch) (bool, error) {
	t.reach(b.LastOffset())
	typ, err := markerType(&t.it, b)
	if err != nil {
		return false, err
	}
	pid := b.ProducerID()
	switch typ {
	case record.ControlAbort:
		a, ok := t.ongoing[pid]
		delete(t.ongoing, pid)
		return !ok || !a.seenBatch, nil
	case record.ControlCommit:
		seen := t.committed[pid]
		delete(t.committed, pid)
		return !seen, nil
	default:
		return false, nil // an emptied marker, or another control type: keep
	}
}
