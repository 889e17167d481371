package producerstate_test

import (
	"bytes"
	"testing"

	"github.com/tierlog/tierlog/producerstate"
	"github.com/tierlog/tierlog/record"
)

func newState(t testing.TB, cfg producerstate.Config) *producerstate.State {
	t.Helper()
	s, err := producerstate.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// noVerify is Kafka's defaults without transaction verification.
func noVerify() producerstate.Config {
	c := producerstate.DefaultConfig()
	c.TransactionVerification = false
	return c
}

// spec describes a data batch: producer, epoch, first sequence, record
// count, transactional, timestamp.
type spec struct {
	pid   int64
	epoch int16
	seq   int32
	n     int
	txn   bool
	ts    int64
}

func buildBatch(t testing.TB, b *record.Builder, base int64, s spec) []byte {
	t.Helper()
	h := record.NewBatchHeader()
	h.BaseOffset = base
	h.ProducerID, h.ProducerEpoch, h.BaseSequence, h.Transactional = s.pid, s.epoch, s.seq, s.txn
	b.Reset(h)
	n := s.n
	if n == 0 {
		n = 1
	}
	for i := 0; i < n; i++ {
		b.Append(s.ts, nil, []byte("v"), nil)
	}
	out, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Clone(out)
}

// mspec describes a transaction marker.
type mspec struct {
	pid    int64
	epoch  int16
	coord  int32
	commit bool
	ts     int64
}

func buildMarker(t testing.TB, b *record.Builder, base int64, m mspec) []byte {
	t.Helper()
	out, err := b.BuildEndTxnMarker(record.EndTxnMarker{
		BaseOffset: base, ProducerID: m.pid, ProducerEpoch: m.epoch,
		CoordinatorEpoch: m.coord, Commit: m.commit, Timestamp: m.ts,
	})
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Clone(out)
}

// tlog drives a State the way the contract in the package doc says a log
// does, keeping only offsets (no bytes) and the aborted transactions it
// would have appended to .txnindex files.
type tlog struct {
	t       testing.TB
	s       *producerstate.State
	plan    producerstate.Plan
	b       record.Builder
	end     int64 // log end offset
	hw      int64
	aborted []producerstate.AbortedTxn
	written [][]byte // every batch written, in order
}

func newLog(t testing.TB, cfg producerstate.Config) *tlog {
	return &tlog{t: t, s: newState(t, cfg)}
}

// outcome is what an append returned.
type outcome struct {
	dup         bool
	first, last int64 // appended offsets, or the original's for a duplicate
	err         error
	completed   []producerstate.CompletedTxn
}

// appendRaw prepares, writes and applies batches already built at l.end.
func (l *tlog) appendRaw(opts producerstate.Options, batches ...[]byte) outcome {
	l.t.Helper()
	var all []byte
	for _, b := range batches {
		all = append(all, b...)
	}
	if err := l.s.Prepare(&l.plan, all, opts); err != nil {
		return outcome{err: err}
	}
	if l.plan.Duplicate {
		if err := l.s.Apply(&l.plan); err == nil {
			l.t.Fatal("Apply accepted a duplicate plan")
		}
		o := l.plan.Original
		return outcome{dup: true, first: o.FirstOffset(), last: o.LastOffset}
	}
	first := l.end
	l.written = append(l.written, batches...)
	if err := l.s.Apply(&l.plan); err != nil {
		l.t.Fatalf("Apply: %v", err)
	}
	l.end = l.plan.NextOffset()
	out := outcome{first: first, last: l.end - 1, completed: append([]producerstate.CompletedTxn(nil), l.plan.Completed...)}
	for _, c := range l.plan.Completed {
		if c.Aborted {
			l.aborted = append(l.aborted, c.AbortedTxn())
		}
	}
	return out
}

// produce appends data batches built from specs at the log end.
func (l *tlog) produce(opts producerstate.Options, specs ...spec) outcome {
	l.t.Helper()
	var batches [][]byte
	off := l.end
	for _, s := range specs {
		b := buildBatch(l.t, &l.b, off, s)
		batches = append(batches, b)
		off = record.Batch(b).NextOffset()
	}
	return l.appendRaw(opts, batches...)
}

// mark appends one marker at the log end.
func (l *tlog) mark(origin producerstate.Origin, m mspec) outcome {
	l.t.Helper()
	return l.appendRaw(producerstate.Options{Origin: origin}, buildMarker(l.t, &l.b, l.end, m))
}

func (l *tlog) setHW(hw int64) {
	l.hw = hw
	l.s.SetHighWatermark(hw)
}

func client() producerstate.Options { return producerstate.Options{Origin: producerstate.OriginClient} }
func follower() producerstate.Options {
	return producerstate.Options{Origin: producerstate.OriginReplication}
}
func coordinator() producerstate.Options {
	return producerstate.Options{Origin: producerstate.OriginCoordinator}
}
