package producerstate_test

import (
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/producerstate"
	"github.com/tierlog/tierlog/record"
)

// step is one append in a rule scenario, and what it must return.
type step struct {
	opts   producerstate.Options
	data   []spec // data batches, or
	marker *mspec // one marker
	// want: wantErr (a sentinel), or dup with the original's offsets, or
	// appended at [first, last] (first = -1: do not check offsets).
	wantErr     error
	dup         bool
	first, last int64
}

func ok(first, last int64, opts producerstate.Options, data ...spec) step {
	return step{opts: opts, data: data, first: first, last: last}
}
func okAny(opts producerstate.Options, data ...spec) step {
	return step{opts: opts, data: data, first: -1}
}
func dupOf(first, last int64, data ...spec) step {
	return step{opts: client(), data: data, dup: true, first: first, last: last}
}
func fails(err error, opts producerstate.Options, data ...spec) step {
	return step{opts: opts, data: data, wantErr: err}
}
func markOK(o producerstate.Origin, m mspec) step {
	return step{opts: producerstate.Options{Origin: o}, marker: &m, first: -1}
}
func markFails(err error, o producerstate.Origin, m mspec) step {
	return step{opts: producerstate.Options{Origin: o}, marker: &m, wantErr: err}
}

func runSteps(t *testing.T, l *tlog, steps []step) {
	t.Helper()
	for i, st := range steps {
		var got outcome
		if st.marker != nil {
			got = l.mark(st.opts.Origin, *st.marker)
		} else {
			got = l.produce(st.opts, st.data...)
		}
		switch {
		case st.wantErr != nil:
			if !errors.Is(got.err, st.wantErr) {
				t.Fatalf("step %d: err = %v, want %v", i, got.err, st.wantErr)
			}
			var ae *producerstate.AppendError
			if !errors.As(got.err, &ae) {
				t.Fatalf("step %d: %T is not an *AppendError", i, got.err)
			}
		case got.err != nil:
			t.Fatalf("step %d: %v", i, got.err)
		case got.dup != st.dup:
			t.Fatalf("step %d: duplicate = %v, want %v", i, got.dup, st.dup)
		case st.first >= 0 && (got.first != st.first || got.last != st.last):
			t.Fatalf("step %d: offsets [%d, %d], want [%d, %d]", i, got.first, got.last, st.first, st.last)
		}
	}
}

const maxSeq = math.MaxInt32

func TestRules(t *testing.T) {
	p := func(seq int32, n int) spec { return spec{pid: 1, seq: seq, n: n} }
	pe := func(epoch int16, seq int32, n int) spec { return spec{pid: 1, epoch: epoch, seq: seq, n: n} }
	tx := func(epoch int16, seq int32) spec { return spec{pid: 7, epoch: epoch, seq: seq, txn: true} }
	cases := []struct {
		name  string
		steps []step
	}{
		{"in sequence", []step{ok(0, 1, client(), p(0, 2)), ok(2, 4, client(), p(2, 3)), ok(5, 5, client(), p(5, 1))}},
		{"gap is out of order", []step{ok(0, 1, client(), p(0, 2)), fails(backend.ErrOutOfOrderSequence, client(), p(3, 1))}},
		{"overlap that is no retained batch is out of order", []step{
			ok(0, 2, client(), p(0, 3)), fails(backend.ErrOutOfOrderSequence, client(), p(1, 2))}},
		{"older epoch", []step{ok(0, 0, client(), pe(3, 0, 1)), fails(backend.ErrInvalidProducerEpoch, client(), pe(2, 1, 1))}},
		{"older epoch beats a duplicate", []step{
			ok(0, 0, client(), pe(0, 0, 1)), ok(1, 1, client(), pe(1, 0, 1)),
			fails(backend.ErrInvalidProducerEpoch, client(), pe(0, 0, 1))}},
		{"new epoch starts at 0", []step{
			ok(0, 4, client(), pe(0, 0, 5)), ok(5, 5, client(), pe(1, 0, 1)), ok(6, 6, client(), pe(1, 1, 1)),
			fails(backend.ErrOutOfOrderSequence, client(), pe(2, 2, 1))}},
		{"new epoch at another sequence is out of order", []step{
			ok(0, 0, client(), pe(0, 0, 1)), fails(backend.ErrOutOfOrderSequence, client(), pe(1, 1, 1))}},
		{"unknown producer may start anywhere", []step{
			ok(0, 0, client(), p(42, 1)), ok(1, 1, client(), p(43, 1)), fails(backend.ErrOutOfOrderSequence, client(), p(45, 1))}},
		{"unknown producer, any epoch, any sequence", []step{ok(0, 0, client(), pe(9, 1000, 1))}},
		// Kafka checks a new producer's sequences against its (absent)
		// epoch for the whole append: a second batch in the same request
		// is not checked either.
		{"unknown producer: no check within one append", []step{ok(0, 1, client(), p(5, 1), p(100, 1))}},
		{"known producer: checked within one append", []step{
			ok(0, 0, client(), p(0, 1)), fails(backend.ErrOutOfOrderSequence, client(), p(1, 1), p(3, 1))}},
		{"sequence wraps from MaxInt32 to 0", []step{
			ok(0, 1, client(), p(maxSeq-1, 2)), ok(2, 2, client(), p(0, 1)), ok(3, 3, client(), p(1, 1))}},
		{"after MaxInt32 only 0 follows", []step{
			ok(0, 0, client(), p(maxSeq, 1)), fails(backend.ErrOutOfOrderSequence, client(), p(1, 1))}},
		{"a batch spanning the wrap, its retry and its successor", []step{
			ok(0, 2, client(), p(maxSeq-1, 3)), dupOf(0, 2, p(maxSeq-1, 3)), ok(3, 3, client(), p(1, 1))}},
		{"non-idempotent batches skip everything", []step{
			ok(0, 0, client(), spec{pid: -1, epoch: -1, seq: -1}), ok(1, 1, client(), spec{pid: -1, epoch: -1, seq: -1})}},
		{"producer id without a sequence is invalid", []step{fails(backend.ErrInvalidRecord, client(), spec{pid: 1, seq: -1})}},
		{"client control batch refused", []step{
			okAny(client(), tx(0, 0)), markFails(backend.ErrInvalidRecord, producerstate.OriginClient, mspec{pid: 7, coord: 1, commit: true})}},
		{"coordinator marker accepted", []step{
			okAny(client(), tx(0, 0)), markOK(producerstate.OriginCoordinator, mspec{pid: 7, coord: 1, commit: true})}},
		{"zombie coordinator fenced", []step{
			okAny(client(), tx(0, 0)), markOK(producerstate.OriginCoordinator, mspec{pid: 7, coord: 5, commit: true}),
			okAny(client(), tx(0, 1)),
			markFails(backend.ErrTransactionCoordinatorFenced, producerstate.OriginCoordinator, mspec{pid: 7, coord: 4}),
			markOK(producerstate.OriginCoordinator, mspec{pid: 7, coord: 5}),
			markOK(producerstate.OriginCoordinator, mspec{pid: 7, coord: 6})}},
		{"marker with an older producer epoch", []step{
			okAny(client(), tx(3, 0)),
			markFails(backend.ErrInvalidProducerEpoch, producerstate.OriginCoordinator, mspec{pid: 7, epoch: 2, coord: 1})}},
		{"non-transactional batch in an open transaction", []step{
			okAny(client(), tx(0, 0)), fails(backend.ErrInvalidTxnState, client(), spec{pid: 7, seq: 1})}},
		{"non-transactional batch after the commit", []step{
			okAny(client(), tx(0, 0)), markOK(producerstate.OriginCoordinator, mspec{pid: 7, commit: true}),
			okAny(client(), spec{pid: 7, seq: 1})}},
		{"follower appends are not validated", []step{
			ok(0, 0, follower(), pe(5, 0, 1)),
			ok(1, 1, follower(), pe(5, 7, 1)), // gap
			ok(2, 2, follower(), pe(4, 0, 1)), // older epoch
			ok(3, 3, follower(), pe(4, 0, 1)), // a retry is written again
			ok(4, 4, follower(), tx(0, 0)),
			markOK(producerstate.OriginReplication, mspec{pid: 7, coord: 9}),
			ok(6, 6, follower(), tx(0, 1)),
			markOK(producerstate.OriginReplication, mspec{pid: 7, coord: 2}), // zombie coordinator
		}},
		{"follower: non-transactional batch in a transaction still refused", []step{
			okAny(follower(), tx(0, 0)), fails(backend.ErrInvalidTxnState, follower(), spec{pid: 7, seq: 1})}},
		{"coordinator data batches: epochs checked, sequences not", []step{
			okAny(coordinator(), tx(2, 0)), okAny(coordinator(), tx(2, 50)),
			fails(backend.ErrInvalidProducerEpoch, coordinator(), tx(1, 51))}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			runSteps(t, newLog(t, noVerify()), c.steps)
		})
	}
}

// TestDuplicateWindow retries each of a producer's last five batches (a
// duplicate, answered with the original offsets) and the sixth-last
// (Kafka no longer remembers it: OUT_OF_ORDER_SEQUENCE_NUMBER).
func TestDuplicateWindow(t *testing.T) {
	l := newLog(t, noVerify())
	sizes := []int{1, 2, 3, 1, 2, 3}
	var specs []spec
	var offs [][2]int64
	seq := int32(0)
	for _, n := range sizes {
		s := spec{pid: 1, seq: seq, n: n, ts: int64(100 + seq)}
		o := l.produce(client(), s)
		if o.err != nil {
			t.Fatal(o.err)
		}
		specs, offs = append(specs, s), append(offs, [2]int64{o.first, o.last})
		seq += int32(n)
	}
	end := l.end
	for k := 1; k <= 5; k++ {
		o := l.produce(client(), specs[k])
		if o.err != nil || !o.dup || o.first != offs[k][0] || o.last != offs[k][1] {
			t.Fatalf("retry of batch %d: %+v, want duplicate of %v", k, o, offs[k])
		}
		if l.plan.Original.Timestamp != specs[k].ts {
			t.Fatalf("retry of batch %d: timestamp %d", k, l.plan.Original.Timestamp)
		}
	}
	if l.end != end {
		t.Fatal("a duplicate moved the log end")
	}
	o := l.produce(client(), specs[0])
	var ae *producerstate.AppendError
	if !errors.Is(o.err, backend.ErrOutOfOrderSequence) || !errors.As(o.err, &ae) {
		t.Fatalf("retry of the sixth-last batch: %+v", o)
	}
	if ae.ProducerID != 1 || ae.FirstSeq != 0 || ae.LastSeq != 0 || ae.CurrentLastSeq != 11 || ae.Offset != end {
		t.Fatalf("error fields: %+v", ae)
	}
	for _, s := range []string{"producer 1", "sequences 0..0 (current last 11)", "offset 12"} {
		if !strings.Contains(ae.Error(), s) {
			t.Fatalf("%q does not say %q", ae.Error(), s)
		}
	}
	// A duplicate in the second batch of an append: nothing is written.
	o = l.produce(client(), spec{pid: 2, seq: 0}, specs[5])
	if !o.dup || o.first != offs[5][0] || l.s.Len() != 1 {
		t.Fatalf("duplicate second batch: %+v, %d producers", o, l.s.Len())
	}
}

func TestTransactionsAndLSO(t *testing.T) {
	l := newLog(t, noVerify())
	mustOK := func(o outcome) outcome {
		t.Helper()
		if o.err != nil || o.dup {
			t.Fatalf("%+v", o)
		}
		return o
	}
	fuo := func(want int64, wantOK bool) {
		t.Helper()
		got, ok := l.s.FirstUnstableOffset()
		if ok != wantOK || (ok && got != want) {
			t.Fatalf("first unstable offset %d %v, want %d %v", got, ok, want, wantOK)
		}
	}
	fuo(0, false)
	mustOK(l.produce(client(), spec{pid: -1, epoch: -1, seq: -1, n: 10})) // 0..9
	mustOK(l.produce(client(), spec{pid: 1, txn: true, n: 2}))            // 10..11 opens P1
	mustOK(l.produce(client(), spec{pid: 2, txn: true}))                  // 12 opens P2
	mustOK(l.produce(client(), spec{pid: 1, seq: 2, txn: true}))          // 13
	fuo(10, true)
	if got := l.s.OpenTransactions(); len(got) != 2 || got[0].ProducerID != 1 || got[0].FirstOffset != 10 || got[1].FirstOffset != 12 {
		t.Fatalf("open: %+v", got)
	}
	if !l.s.HasOngoingTransaction(1) || l.s.HasOngoingTransaction(3) {
		t.Fatal("HasOngoingTransaction")
	}
	l.setHW(14)
	if lso := l.s.LastStableOffset(l.hw, 0); lso != 10 {
		t.Fatalf("LSO %d", lso)
	}
	// Aborting P1: P2's transaction (first offset 12) is still open, so
	// the .txnindex entry's LSO is 12.
	o := mustOK(l.mark(producerstate.OriginCoordinator, mspec{pid: 1, coord: 3})) // 14
	want := producerstate.CompletedTxn{ProducerID: 1, FirstOffset: 10, LastOffset: 14, Aborted: true, LastStableOffset: 12}
	if len(o.completed) != 1 || o.completed[0] != want {
		t.Fatalf("completed %+v", o.completed)
	}
	// The marker is not below the high watermark yet: P1's transaction
	// still holds the first unstable offset.
	fuo(10, true)
	if u, _ := l.s.FirstUndecidedOffset(); u != 12 {
		t.Fatalf("first undecided %d", u)
	}
	l.setHW(15)
	fuo(12, true)
	if lso := l.s.LastStableOffset(l.hw, 0); lso != 12 {
		t.Fatalf("LSO %d", lso)
	}
	// Committing P2: nothing else open, LSO = marker + 1; no .txnindex entry.
	o = mustOK(l.mark(producerstate.OriginCoordinator, mspec{pid: 2, commit: true})) // 15
	if o.completed[0] != (producerstate.CompletedTxn{ProducerID: 2, FirstOffset: 12, LastOffset: 15, LastStableOffset: 16}) {
		t.Fatalf("completed %+v", o.completed)
	}
	fuo(12, true)
	if lso := l.s.LastStableOffset(15, 0); lso != 12 {
		t.Fatalf("LSO %d", lso)
	}
	l.setHW(16)
	fuo(0, false)
	if lso := l.s.LastStableOffset(16, 0); lso != 16 {
		t.Fatalf("LSO %d", lso)
	}
	if !reflect.DeepEqual(l.aborted, []producerstate.AbortedTxn{{ProducerID: 1, FirstOffset: 10, LastOffset: 14, LastStableOffset: 12}}) {
		t.Fatalf("txnindex %+v", l.aborted)
	}
	// A marker for a producer without an open transaction completes nothing.
	o = mustOK(l.mark(producerstate.OriginCoordinator, mspec{pid: 2, commit: true}))
	if len(o.completed) != 0 {
		t.Fatalf("completed %+v", o.completed)
	}
	// The log start passing an open transaction raises the LSO with it.
	mustOK(l.produce(client(), spec{pid: 3, txn: true})) // 17
	l.setHW(18)
	if lso := l.s.LastStableOffset(18, 0); lso != 17 {
		t.Fatalf("LSO %d", lso)
	}
	if lso := l.s.LastStableOffset(18, 18); lso != 18 {
		t.Fatalf("LSO over the log start %d", lso)
	}
}

// TestLSOWithinOneAppend: a follower append holding a marker and later
// batches that open transactions computes the marker's LSO as Kafka does,
// after every batch of the append is in.
func TestLSOWithinOneAppend(t *testing.T) {
	l := newLog(t, noVerify())
	if o := l.produce(follower(), spec{pid: 1, txn: true}, spec{pid: 2, txn: true}); o.err != nil { // 0, 1
		t.Fatal(o.err)
	}
	var b record.Builder
	batches := [][]byte{
		buildMarker(t, &b, 2, mspec{pid: 1}),                     // abort P1: P2 open at 1
		buildMarker(t, &b, 3, mspec{pid: 2}),                     // abort P2: P3 opens at 4 in this append
		buildBatch(t, &b, 4, spec{pid: 3, txn: true}),            // 4
		buildMarker(t, &b, 5, mspec{pid: 3}),                     // abort P3: nothing else open
		buildBatch(t, &b, 6, spec{pid: 3, seq: 1, txn: true}),    // P3 again (same producer: skipped)
		buildMarker(t, &b, 7, mspec{pid: 1, epoch: 0, coord: 0}), // no open txn for P1
	}
	o := l.appendRaw(follower(), batches...)
	if o.err != nil {
		t.Fatal(o.err)
	}
	want := []producerstate.CompletedTxn{
		{ProducerID: 1, FirstOffset: 0, LastOffset: 2, Aborted: true, LastStableOffset: 1},
		{ProducerID: 2, FirstOffset: 1, LastOffset: 3, Aborted: true, LastStableOffset: 4},
		{ProducerID: 3, FirstOffset: 4, LastOffset: 5, Aborted: true, LastStableOffset: 6},
	}
	if !reflect.DeepEqual(o.completed, want) {
		t.Fatalf("completed\n got %+v\nwant %+v", o.completed, want)
	}
	if u, _ := l.s.FirstUndecidedOffset(); u != 6 {
		t.Fatalf("first undecided %d", u)
	}
}

func TestVerification(t *testing.T) {
	l := newLog(t, producerstate.DefaultConfig())
	tx := func(seq int32) spec { return spec{pid: 5, seq: seq, txn: true} }
	with := func(g producerstate.VerificationGuard) producerstate.Options {
		return producerstate.Options{Origin: producerstate.OriginClient, VerificationGuard: g}
	}
	// Idempotent, non-transactional batches need no verification.
	if o := l.produce(client(), spec{pid: 4}); o.err != nil {
		t.Fatal(o.err)
	}
	if o := l.produce(client(), tx(0)); !errors.Is(o.err, backend.ErrInvalidTxnState) {
		t.Fatalf("unverified: %+v", o)
	}
	g := l.s.StartVerification(5, 0, 0, 1000)
	if g == producerstate.NoGuard || l.s.VerificationGuard(5) != g || l.s.StartVerification(5, 0, 0, 1001) != g {
		t.Fatal("guard")
	}
	if o := l.produce(with(g+1), tx(0)); !errors.Is(o.err, backend.ErrInvalidTxnState) {
		t.Fatalf("wrong guard: %+v", o)
	}
	if o := l.produce(with(g), tx(0)); o.err != nil {
		t.Fatal(o.err)
	}
	// Written: the guard is gone, the transaction open, no guard needed.
	if l.s.VerificationGuard(5) != producerstate.NoGuard || l.s.StartVerification(5, 1, 0, 1002) != producerstate.NoGuard {
		t.Fatal("guard kept")
	}
	if o := l.produce(client(), tx(1)); o.err != nil {
		t.Fatal(o.err)
	}
	if o := l.mark(producerstate.OriginCoordinator, mspec{pid: 5, commit: true}); o.err != nil {
		t.Fatal(o.err)
	}
	// The next transaction needs a new verification; sequences above the
	// lowest seen while verifying are out of order.
	g2 := l.s.StartVerification(5, 4, 0, 2000)
	if g2 == g || g2 == producerstate.NoGuard {
		t.Fatal("second guard")
	}
	if l.s.StartVerification(5, 2, 0, 2001) != g2 {
		t.Fatal("same guard expected")
	}
	if o := l.produce(with(g2), tx(3)); !errors.Is(o.err, backend.ErrOutOfOrderSequence) {
		t.Fatalf("above the lowest sequence: %+v", o)
	}
	if o := l.produce(with(g2), tx(2)); o.err != nil {
		t.Fatal(o.err)
	}
	// Guards expire with producer.id.expiration.ms.
	g3 := l.s.StartVerification(6, 0, 0, 10)
	l.s.RemoveExpiredProducers(10 + l.s.Config().ProducerIDExpirationMs)
	if l.s.VerificationGuard(6) != producerstate.NoGuard || g3 == producerstate.NoGuard {
		t.Fatal("guard did not expire")
	}
	// Followers are not asked for guards.
	if o := l.produce(follower(), spec{pid: 8, txn: true}); o.err != nil {
		t.Fatal(o.err)
	}
}

func TestExpiryAndHungTransactions(t *testing.T) {
	cfg := noVerify()
	cfg.ProducerIDExpirationMs = 1000
	l := newLog(t, cfg)
	for _, s := range []spec{{pid: 1, ts: 100}, {pid: 2, ts: 500}, {pid: 3, txn: true, ts: 100}, {pid: 4, txn: true, ts: 900}} {
		if o := l.produce(client(), s); o.err != nil {
			t.Fatal(o.err)
		}
	}
	if n := l.s.RemoveExpiredProducers(1099); n != 0 {
		t.Fatalf("removed %d", n)
	}
	if n := l.s.RemoveExpiredProducers(1100); n != 1 || l.s.Len() != 3 {
		t.Fatalf("removed %d, left %d", n, l.s.Len())
	}
	if _, ok := l.s.Producer(1); ok {
		t.Fatal("producer 1 kept")
	}
	// Producers with open transactions never expire; they are reported.
	if n := l.s.RemoveExpiredProducers(1 << 40); n != 1 || l.s.Len() != 2 {
		t.Fatalf("removed %d, left %d", n, l.s.Len())
	}
	hung := l.s.HungTransactions(1500, 1000)
	if len(hung) != 1 || hung[0] != (producerstate.OpenTxn{ProducerID: 3, Epoch: 0, FirstOffset: 2, LastTimestamp: 100}) {
		t.Fatalf("hung %+v", hung)
	}
	if len(l.s.HungTransactions(1<<40, 1000)) != 2 {
		t.Fatal("both hung")
	}
	late := int64(100) + cfg.TransactionMaxTimeoutMs + producerstate.LateTransactionBufferMs
	if l.s.HasLateTransaction(late) || !l.s.HasLateTransaction(late+1) {
		t.Fatal("HasLateTransaction")
	}
	if len(l.s.OpenTransactions()) != 2 {
		t.Fatal("nothing is aborted")
	}
}

func TestSnapshotLoadReplay(t *testing.T) {
	l := newLog(t, noVerify())
	steps := []spec{
		{pid: 1, seq: 0, n: 2, ts: 10}, {pid: 1, seq: 2, n: 1, ts: 11}, {pid: 1, seq: 3, n: 3, ts: 12},
		{pid: 2, epoch: 4, seq: 0, txn: true, ts: 13}, {pid: 3, seq: 0, ts: 14},
	}
	for _, s := range steps {
		if o := l.produce(client(), s); o.err != nil {
			t.Fatal(o.err)
		}
	}
	if o := l.mark(producerstate.OriginCoordinator, mspec{pid: 3, epoch: 0, coord: 2, commit: true, ts: 15}); o.err != nil {
		t.Fatal(o.err)
	}
	snap, off := l.s.Snapshot(nil)
	if off != 9 || l.s.EndOffset() != 9 {
		t.Fatalf("snapshot offset %d", off)
	}
	want := []producerstate.SnapshotEntry{
		{ProducerID: 1, Epoch: 0, LastSequence: 5, LastOffset: 5, OffsetDelta: 2, Timestamp: 12, CoordinatorEpoch: -1, CurrentTxnFirstOffset: -1},
		{ProducerID: 2, Epoch: 4, LastSequence: 0, LastOffset: 6, OffsetDelta: 0, Timestamp: 13, CoordinatorEpoch: -1, CurrentTxnFirstOffset: 6},
		// Producer 3's last timestamp is its marker's; Kafka writes it as
		// the batch's timestamp too.
		{ProducerID: 3, Epoch: 0, LastSequence: 0, LastOffset: 7, OffsetDelta: 0, Timestamp: 15, CoordinatorEpoch: 2, CurrentTxnFirstOffset: -1},
	}
	got, err := producerstate.DecodeSnapshot(snap)
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("snapshot %+v %v", got, err)
	}

	s2 := newState(t, noVerify())
	if err := s2.Load(snap, off, 20); err != nil {
		t.Fatal(err)
	}
	if s2.EndOffset() != 9 || s2.Len() != 3 {
		t.Fatal(s2.EndOffset(), s2.Len())
	}
	if again, _ := s2.Snapshot(nil); string(again) != string(snap) {
		t.Fatal("reloaded snapshot differs")
	}
	if u, ok := s2.FirstUndecidedOffset(); !ok || u != 6 {
		t.Fatal("open transaction lost")
	}
	// After a load only the last batch is retained: its retry is a
	// duplicate, a retry of the one before is out of order, as in Kafka.
	l2 := &tlog{t: t, s: s2, end: 9}
	if o := l2.produce(client(), steps[2]); !o.dup || o.first != 3 || o.last != 5 {
		t.Fatalf("retry of the last batch: %+v", o)
	}
	if o := l2.produce(client(), steps[1]); !errors.Is(o.err, backend.ErrOutOfOrderSequence) {
		t.Fatalf("retry of an earlier batch: %+v", o)
	}
	// Expired producers are dropped by Load (not those with a transaction).
	s3 := newState(t, noVerify())
	if err := s3.Load(snap, off, 14+noVerify().ProducerIDExpirationMs); err != nil || s3.Len() != 2 {
		t.Fatal(s3.Len(), err)
	}
	if _, ok := s3.Producer(1); ok {
		t.Fatal("producer 1 kept")
	}

	// Replaying every batch as recovery does gives the same state.
	s4 := newState(t, noVerify())
	s4.Reset(0)
	for _, b := range l.written {
		hdr := record.Batch(b)
		if !hdr.IsControl() {
			hdr = hdr[:record.BatchHeaderSize] // header-only scan
		}
		if _, _, err := s4.Replay(hdr); err != nil {
			t.Fatal(err)
		}
	}
	if !reflect.DeepEqual(s4.Producers(), l.s.Producers()) || s4.EndOffset() != l.s.EndOffset() {
		t.Fatalf("replayed\n%+v\nwant\n%+v", s4.Producers(), l.s.Producers())
	}
}

func TestReplayAbortRebuildsTxnIndex(t *testing.T) {
	l := newLog(t, noVerify())
	l.produce(client(), spec{pid: 1, txn: true})
	l.produce(client(), spec{pid: 2, txn: true})
	l.mark(producerstate.OriginCoordinator, mspec{pid: 1})
	l.mark(producerstate.OriginCoordinator, mspec{pid: 2, commit: true})
	var b record.Builder
	// An emptied control batch (what the cleaner leaves) changes nothing.
	hdr := record.NewBatchHeader()
	hdr.Control, hdr.Transactional, hdr.ProducerID, hdr.ProducerEpoch, hdr.BaseOffset = true, true, 9, 0, 4
	b.Reset(hdr)
	emptyCtl := b.BuildEmpty(0, 5)
	s := newState(t, noVerify())
	var rebuilt []producerstate.AbortedTxn
	for _, w := range append(l.written, []byte(emptyCtl)) {
		c, ok, err := s.Replay(w)
		if err != nil {
			t.Fatal(err)
		}
		if ok && c.Aborted {
			rebuilt = append(rebuilt, c.AbortedTxn())
		}
	}
	if !reflect.DeepEqual(rebuilt, l.aborted) || len(rebuilt) != 1 || rebuilt[0].LastStableOffset != 1 {
		t.Fatalf("rebuilt %+v, appended %+v", rebuilt, l.aborted)
	}
	if s.EndOffset() != 5 {
		t.Fatal(s.EndOffset())
	}
	// Kafka still looks the emptied batch's producer up: it exists, empty.
	if p, ok := s.Producer(9); !ok || p.Epoch != -1 || len(p.Batches) != 0 {
		t.Fatalf("%+v %v", p, ok)
	}
}

func TestStalePlan(t *testing.T) {
	l := newLog(t, noVerify())
	var b record.Builder
	batch := buildBatch(t, &b, 0, spec{pid: 1})
	var p producerstate.Plan
	if err := l.s.Apply(&p); !errors.Is(err, producerstate.ErrStalePlan) {
		t.Fatalf("zero plan: %v", err)
	}
	if err := l.s.Prepare(&p, batch, client()); err != nil {
		t.Fatal(err)
	}
	l.s.RemoveExpiredProducers(0)
	if err := l.s.Apply(&p); !errors.Is(err, producerstate.ErrStalePlan) {
		t.Fatalf("changed state: %v", err)
	}
	if err := l.s.Prepare(&p, batch, client()); err != nil {
		t.Fatal(err)
	}
	other := newState(t, noVerify())
	if err := other.Apply(&p); !errors.Is(err, producerstate.ErrStalePlan) {
		t.Fatalf("other state: %v", err)
	}
	if err := l.s.Apply(&p); err != nil {
		t.Fatal(err)
	}
	if err := l.s.Apply(&p); !errors.Is(err, producerstate.ErrStalePlan) {
		t.Fatalf("applied twice: %v", err)
	}
	// A roll (SetEndOffset and Snapshot) and offset moves between Prepare
	// and Apply keep the plan.
	if err := l.s.Prepare(&p, buildBatch(t, &b, 1, spec{pid: 1, seq: 1}), client()); err != nil {
		t.Fatal(err)
	}
	l.s.SetEndOffset(1)
	l.s.Snapshot(nil)
	l.s.SetHighWatermark(1)
	l.s.OnLogStartIncremented(0)
	if err := l.s.Apply(&p); err != nil {
		t.Fatal(err)
	}
	if l.s.EndOffset() != 2 {
		t.Fatal(l.s.EndOffset())
	}
	// A failed Prepare leaves nothing to apply.
	if err := l.s.Prepare(&p, buildBatch(t, &b, 2, spec{pid: 1, seq: 5}), client()); err == nil {
		t.Fatal("gap accepted")
	}
	if err := l.s.Apply(&p); !errors.Is(err, producerstate.ErrStalePlan) {
		t.Fatalf("failed plan: %v", err)
	}
}

func TestBadInput(t *testing.T) {
	s := newState(t, noVerify())
	var p producerstate.Plan
	for _, in := range [][]byte{make([]byte, 20), {1, 2, 3}} {
		if err := s.Prepare(&p, in, follower()); !errors.Is(err, backend.ErrCorruptRecord) {
			t.Fatalf("%x: %v", in, err)
		}
	}
	// A control batch with a producer id that is not a marker.
	var b record.Builder
	h := record.NewBatchHeader()
	h.Control, h.ProducerID, h.ProducerEpoch = true, 3, 0
	b.Reset(h)
	b.Append(1, record.ControlKey(record.ControlLeaderChange), []byte{0, 0}, nil)
	lc, _ := b.Build()
	if err := s.Prepare(&p, lc, coordinator()); !errors.Is(err, backend.ErrInvalidRecord) {
		t.Fatalf("leader change: %v", err)
	}
	if _, _, err := producerstate.ReadMarker(lc); !errors.Is(err, backend.ErrInvalidRecord) {
		t.Fatalf("ReadMarker: %v", err)
	}
	// A marker whose value is cut short.
	b.Reset(h)
	b.Append(1, record.ControlKey(record.ControlCommit), []byte{0, 0, 0}, nil)
	short, _ := b.Build()
	if err := s.Prepare(&p, short, coordinator()); !errors.Is(err, backend.ErrCorruptRecord) || !errors.Is(err, record.ErrBadRecord) {
		t.Fatalf("short marker: %v", err)
	}
	// Without a producer id a control batch is not the state's business.
	h.ProducerID, h.ProducerEpoch = -1, -1
	b.Reset(h)
	b.Append(1, record.ControlKey(record.ControlLeaderChange), []byte{0, 0}, nil)
	lc, _ = b.Build()
	if err := s.Prepare(&p, lc, coordinator()); err != nil {
		t.Fatal(err)
	}
	if err := producerstate.DefaultConfig().Validate(); err != nil {
		t.Fatal(err)
	}
	bad := producerstate.DefaultConfig()
	bad.ProducerIDExpirationMs = 0
	var ce *backend.ConfigError
	if _, err := producerstate.New(bad); !errors.As(err, &ce) || ce.Key != "producer.id.expiration.ms" {
		t.Fatalf("config: %v", err)
	}
	if err := s.SetConfig(bad); !errors.Is(err, backend.ErrInvalidConfig) {
		t.Fatalf("SetConfig: %v", err)
	}
	bad = producerstate.DefaultConfig()
	bad.ProducerIDExpirationCheckIntervalMs = -1
	if _, err := producerstate.New(bad); !errors.As(err, &ce) || ce.Key != "producer.id.expiration.check.interval.ms" {
		t.Fatalf("config: %v", err)
	}
	if got := producerstate.DefaultConfig().ExpirationCheckIntervalMs(); got != 600000 {
		t.Fatalf("the default check interval is %d ms, want Kafka's 600000", got)
	}
}

func TestReadMarker(t *testing.T) {
	var b record.Builder
	m := buildMarker(t, &b, 10, mspec{pid: 1000, coord: 5, commit: true, ts: 1700000000000})
	got, ok, err := producerstate.ReadMarker(m)
	if err != nil || !ok || got != (producerstate.Marker{Type: record.ControlCommit, CoordinatorEpoch: 5, Timestamp: 1700000000000}) || got.Aborted() {
		t.Fatalf("%+v %v %v", got, ok, err)
	}
	if _, _, err := producerstate.ReadMarker(buildBatch(t, &b, 0, spec{pid: 1})); !errors.Is(err, backend.ErrInvalidRecord) {
		t.Fatalf("data batch: %v", err)
	}
}

func TestOnLogStartIncremented(t *testing.T) {
	l := newLog(t, noVerify())
	l.produce(client(), spec{pid: 1, txn: true})           // 0
	l.mark(producerstate.OriginCoordinator, mspec{pid: 1}) // 1
	l.produce(client(), spec{pid: 2, seq: 0, n: 3})        // 2..4
	if f, ok := l.s.FirstUnstableOffset(); !ok || f != 0 {
		t.Fatal(f, ok)
	}
	l.s.OnLogStartIncremented(2)
	if _, ok := l.s.FirstUnstableOffset(); ok {
		t.Fatal("completed transaction below the log start kept")
	}
	if l.s.Len() != 2 {
		t.Fatal("producers are kept after their records are deleted")
	}
	l.s.OnLogStartIncremented(100)
	if l.s.EndOffset() != 100 {
		t.Fatal(l.s.EndOffset())
	}
}

func TestAppendErrorFields(t *testing.T) {
	l := newLog(t, noVerify())
	l.produce(client(), spec{pid: 7, epoch: 3, txn: true})
	l.mark(producerstate.OriginCoordinator, mspec{pid: 7, epoch: 3, coord: 5, commit: true})
	l.produce(client(), spec{pid: 7, epoch: 3, seq: 1, txn: true})
	var ae *producerstate.AppendError
	o := l.mark(producerstate.OriginCoordinator, mspec{pid: 7, epoch: 3, coord: 4})
	if !errors.As(o.err, &ae) || ae.CoordinatorEpoch != 4 || ae.CurrentCoordinatorEpoch != 5 || ae.Offset != 3 || ae.ProducerID != 7 {
		t.Fatalf("%+v", o.err)
	}
	if msg := ae.Error(); !strings.Contains(msg, "coordinator epoch 4 (current 5)") || !strings.HasPrefix(msg, backend.ErrTransactionCoordinatorFenced.Error()) {
		t.Fatal(msg)
	}
	o = l.produce(client(), spec{pid: 7, epoch: 2, seq: 2, txn: true})
	if !errors.As(o.err, &ae) || ae.Epoch != 2 || ae.CurrentEpoch != 3 || !strings.Contains(ae.Error(), "epoch 2 (current 3)") {
		t.Fatalf("%v", o.err)
	}
}
