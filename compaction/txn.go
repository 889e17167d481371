package compaction

import (
	"context"
	"fmt"
	"sort"

	"github.com/tierlog/tierlog/local"
	"github.com/tierlog/tierlog/producerstate"
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
// Aborted transactions come from each segment's .txnindex, as Kafka's
// cleaner reads them; the last stable offset bounds the round.

// abortedTxn is an aborted transaction: producer pid's batches in
// [first, last], where last is the offset of its ABORT marker.
type abortedTxn struct {
	pid, first, last int64
}

// txnScan is what scanTransactions found.
type txnScan struct {
	aborted   []abortedTxn // by first offset
	firstOpen int64        // the last stable offset: nothing at or after it is decided
	// byMarker holds the .txnindex entries by their ABORT marker's offset:
	// a cleaned segment that keeps a marker lists its entry again.
	byMarker map[int64]producerstate.AbortedTxn
}

// scanTransactions collects the aborted transactions overlapping the log
// from its start to end, from the segments' .txnindex files.
func scanTransactions(ctx context.Context, l *local.Log, end int64) (txnScan, error) {
	out := txnScan{firstOpen: l.Offsets().LastStableOffset, byMarker: map[int64]producerstate.AbortedTxn{}}
	if err := ctx.Err(); err != nil {
		return out, fmt.Errorf("compaction: %w", err)
	}
	found, err := l.Segments().AbortedTxns(l.Offsets().LogStart, end)
	if err != nil {
		return out, fmt.Errorf("compaction: %w", err)
	}
	for _, a := range found {
		out.aborted = append(out.aborted, abortedTxn{pid: a.ProducerID, first: a.FirstOffset, last: a.LastOffset})
		out.byMarker[a.LastOffset] = a
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
