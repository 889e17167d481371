package producerstate_test

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"reflect"
	"strconv"
	"testing"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/producerstate"
)

// The model: Kafka's producer rules written as plainly as possible, with
// none of the package's structure (no plans, no sorted slices, no ring),
// for one single-batch append at a time.

const modelRetain = 5 // batches a producer's duplicates are looked for in

type mBatch struct {
	firstSeq, lastSeq int32
	first, last       int64
	ts                int64
}

type mProducer struct {
	epoch    int16 // -1: none
	batches  []mBatch
	coord    int32 // -1: none
	txnFirst int64 // -1: no open transaction
	lastTs   int64
}

type mTxn struct{ pid, first, last int64 }

type model struct {
	producers map[int64]*mProducer
	open      []mTxn // open transactions (last unused)
	unrepl    []mTxn // completed, marker not below the high watermark
	aborted   []producerstate.AbortedTxn
	end       int64
}

// mResult is what the model says an append does.
type mResult struct {
	err  error // a backend sentinel, or nil
	dup  *mBatch
	done *producerstate.CompletedTxn
}

func nextSeq(s int32) int32 {
	if s == math.MaxInt32 {
		return 0
	}
	return s + 1
}

func addSeq(s int32, n int) int32 {
	for i := 0; i < n; i++ {
		s = nextSeq(s)
	}
	return s
}

func (m *model) producer(pid int64) *mProducer {
	if p := m.producers[pid]; p != nil {
		return p
	}
	return &mProducer{epoch: -1, coord: -1, txnFirst: -1, lastTs: -1}
}

// data is a client's data batch of n records.
func (m *model) data(pid int64, epoch int16, seq int32, n int, txn bool, ts int64) mResult {
	p := m.producer(pid)
	last := addSeq(seq, n-1)
	if p.epoch == epoch {
		for i := range p.batches {
			if b := p.batches[i]; b.firstSeq == seq && b.lastSeq == last {
				return mResult{dup: &b}
			}
		}
	}
	if epoch < p.epoch {
		return mResult{err: backend.ErrInvalidProducerEpoch}
	}
	switch {
	case p.epoch == -1: // unknown producer: any sequence
	case epoch != p.epoch:
		if seq != 0 {
			return mResult{err: backend.ErrOutOfOrderSequence}
		}
	default:
		want := int32(0)
		if len(p.batches) > 0 {
			want = nextSeq(p.batches[len(p.batches)-1].lastSeq)
		}
		if seq != want {
			return mResult{err: backend.ErrOutOfOrderSequence}
		}
	}
	if p.txnFirst >= 0 && !txn {
		return mResult{err: backend.ErrInvalidTxnState}
	}
	// Accepted: commit.
	first := m.end
	m.end += int64(n)
	if p.epoch != epoch {
		p.epoch, p.batches = epoch, nil
	}
	p.batches = append(p.batches, mBatch{firstSeq: seq, lastSeq: last, first: first, last: m.end - 1, ts: ts})
	if len(p.batches) > modelRetain {
		p.batches = p.batches[1:]
	}
	p.lastTs = ts
	if txn && p.txnFirst < 0 {
		p.txnFirst = first
		m.open = append(m.open, mTxn{pid: pid, first: first})
	}
	m.producers[pid] = p
	return mResult{}
}

// marker is a coordinator's COMMIT or ABORT.
func (m *model) marker(pid int64, epoch int16, coord int32, commit bool, ts int64) mResult {
	p := m.producer(pid)
	if epoch < p.epoch {
		return mResult{err: backend.ErrInvalidProducerEpoch}
	}
	if p.coord > coord {
		return mResult{err: backend.ErrTransactionCoordinatorFenced}
	}
	off := m.end
	m.end++
	var res mResult
	if p.txnFirst >= 0 {
		lso := off + 1
		for _, t := range m.open { // the oldest other producer's open transaction
			if t.pid != pid && t.first < lso {
				lso = t.first
			}
		}
		c := producerstate.CompletedTxn{ProducerID: pid, FirstOffset: p.txnFirst, LastOffset: off, Aborted: !commit, LastStableOffset: lso}
		res.done = &c
		if c.Aborted {
			m.aborted = append(m.aborted, c.AbortedTxn())
		}
		var still []mTxn
		for _, t := range m.open {
			if t.pid != pid {
				still = append(still, t)
			}
		}
		m.open = still
		m.unrepl = append(m.unrepl, mTxn{pid: pid, first: p.txnFirst, last: off})
	}
	if p.epoch != epoch {
		p.epoch, p.batches = epoch, nil
	}
	p.coord, p.txnFirst, p.lastTs = coord, -1, ts
	m.producers[pid] = p
	return res
}

func (m *model) setHW(hw int64) {
	var keep []mTxn
	for _, t := range m.unrepl {
		if t.last >= hw {
			keep = append(keep, t)
		}
	}
	m.unrepl = keep
}

func (m *model) firstUnstable() (int64, bool) {
	first, ok := int64(math.MaxInt64), false
	for _, t := range append(append([]mTxn(nil), m.open...), m.unrepl...) {
		if t.first < first {
			first, ok = t.first, true
		}
	}
	return first, ok
}

// reload is what a snapshot and a load keep: each producer's last batch,
// timestamped with the producer's last timestamp; no completed
// transactions waiting for the high watermark.
func (m *model) reload() {
	for _, p := range m.producers {
		if n := len(p.batches); n > 0 {
			last := p.batches[n-1]
			last.ts = p.lastTs
			p.batches = []mBatch{last}
		}
	}
	m.unrepl = nil
}

func (m *model) expire(now, after int64) {
	for pid, p := range m.producers {
		if p.txnFirst < 0 && now-p.lastTs >= after {
			delete(m.producers, pid)
		}
	}
}

// ---- the random client and coordinator ----

type genProducer struct {
	pid     int64
	txnal   bool
	epoch   int16
	next    int32  // next sequence to send
	sent    []spec // batches of this epoch accepted, oldest first
	coord   int32
	openTxn bool
}

// TestModel drives the State through random interleavings of idempotent
// and transactional producers (retries of recent and older batches,
// gaps, epoch bumps, zombie epochs and coordinators, commits, aborts,
// high watermark moves, expiry, snapshot and reload in the middle) and
// checks it after every step against the model. PRODUCERSTATE_SEED and
// PRODUCERSTATE_STEPS replay one run.
func TestModel(t *testing.T) {
	seeds := []uint64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}
	steps := 3000
	if testing.Short() {
		seeds, steps = seeds[:3], 1000
	}
	if s := os.Getenv("PRODUCERSTATE_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		seeds = []uint64{v}
	}
	if s := os.Getenv("PRODUCERSTATE_STEPS"); s != "" {
		steps, _ = strconv.Atoi(s)
	}
	for _, seed := range seeds {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			t.Logf("seed %d (replay with PRODUCERSTATE_SEED=%d)", seed, seed)
			runModel(t, seed, steps)
		})
	}
}

func runModel(t *testing.T, seed uint64, steps int) {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	const expiry = 20000
	cfg := noVerify()
	cfg.ProducerIDExpirationMs = expiry
	l := newLog(t, cfg)
	m := &model{producers: map[int64]*mProducer{}}
	var gens []*genProducer
	for i := 0; i < 4; i++ {
		g := &genProducer{pid: int64(i + 1)}
		if i == 3 {
			g.next = math.MaxInt32 - 20 // this one wraps
		}
		gens = append(gens, g)
	}
	for i := 0; i < 3; i++ {
		gens = append(gens, &genProducer{pid: int64(100 + i), txnal: true})
	}
	now := int64(1_000_000)
	counts := map[string]int{}
	refusals := map[error]int{}
	for step := 0; step < steps; step++ {
		now += rng.Int64N(200)
		g := gens[rng.IntN(len(gens))]
		var (
			what     string
			got      outcome
			want     mResult
			appended bool // the step was an append
		)
		sendData := func(s spec) {
			appended = true
			s.ts = now
			got = l.produce(client(), s)
			want = m.data(s.pid, s.epoch, s.seq, max(s.n, 1), s.txn, s.ts)
			if want.err == nil && want.dup == nil {
				if s.epoch != g.epoch {
					g.epoch, g.sent = s.epoch, nil
				}
				g.sent = append(g.sent, s)
				g.next = addSeq(s.seq, max(s.n, 1))
				if s.txn {
					g.openTxn = true
				}
			}
		}
		r := rng.IntN(100)
		switch {
		case r < 35: // the next batch
			what = "next"
			sendData(spec{pid: g.pid, epoch: g.epoch, seq: g.next, n: 1 + rng.IntN(4), txn: g.txnal})
		case r < 50 && len(g.sent) > 0: // a retry of one of the last 7
			k := 1 + rng.IntN(min(7, len(g.sent)))
			what = fmt.Sprint("retry -", k)
			sendData(g.sent[len(g.sent)-k])
		case r < 54: // a gap
			what = "gap"
			sendData(spec{pid: g.pid, epoch: g.epoch, seq: addSeq(g.next, 1+rng.IntN(3)), txn: g.txnal})
		case r < 58 && g.epoch > 0: // a zombie epoch
			what = "old epoch"
			sendData(spec{pid: g.pid, epoch: g.epoch - 1, seq: g.next, txn: g.txnal})
		case r < 63 && !g.openTxn: // an epoch bump, usually from 0
			seq := int32(0)
			if rng.IntN(4) == 0 {
				seq = int32(rng.IntN(5))
			}
			what = "bump"
			sendData(spec{pid: g.pid, epoch: g.epoch + 1, seq: seq, txn: g.txnal})
		case r < 66 && g.txnal && g.openTxn: // non-transactional data in a transaction
			what = "non-txn in txn"
			sendData(spec{pid: g.pid, epoch: g.epoch, seq: g.next})
		case r < 80 && g.txnal: // the coordinator ends the transaction
			coord := g.coord
			switch rng.IntN(8) {
			case 0:
				coord-- // a zombie coordinator
			case 1:
				coord++ // a new coordinator
			}
			epoch := g.epoch
			if rng.IntN(10) == 0 && epoch > 0 {
				epoch--
			}
			commit := rng.IntN(2) == 0
			what = fmt.Sprintf("marker commit=%v coord=%d epoch=%d", commit, coord, epoch)
			appended = true
			got = l.mark(producerstate.OriginCoordinator, mspec{pid: g.pid, epoch: epoch, coord: coord, commit: commit, ts: now})
			want = m.marker(g.pid, epoch, coord, commit, now)
			if want.err == nil {
				g.openTxn = false
				g.coord = coord
				if epoch != g.epoch {
					g.epoch, g.sent = epoch, nil
				}
			}
		case r < 82 && g.txnal: // a client tries to write a marker
			what = "client marker"
			appended = true
			got = l.mark(producerstate.OriginClient, mspec{pid: g.pid, epoch: g.epoch, coord: g.coord, commit: true, ts: now})
			want = mResult{err: backend.ErrInvalidRecord}
		case r < 90: // the high watermark moves
			hw := l.hw + rng.Int64N(l.end-l.hw+1)
			what = fmt.Sprint("hw ", hw)
			l.setHW(hw)
			m.setHW(hw)
		case r < 93: // expiry
			what = "expire"
			l.s.RemoveExpiredProducers(now)
			m.expire(now, expiry)
		case r < 96: // snapshot and reload into a new State
			what = "reload"
			data, off := l.s.Snapshot(nil)
			s := newState(t, cfg)
			if err := s.Load(data, off, now); err != nil {
				t.Fatalf("seed %d step %d: load: %v", seed, step, err)
			}
			l.s, l.plan = s, producerstate.Plan{}
			m.reload()
		default:
			what = "nothing"
		}
		switch {
		case !appended:
			counts["other"]++
		case want.err != nil:
			counts["refused"]++
			refusals[want.err]++
		case want.dup != nil:
			counts["duplicate"]++
		default:
			counts["appended"]++
		}
		checkStep(t, seed, step, what, l, m, got, want)
	}
	t.Logf("seed %d: %d appended, %d duplicates, %d refused, %d other steps; %d aborted transactions",
		seed, counts["appended"], counts["duplicate"], counts["refused"], counts["other"], len(m.aborted))
	for err, n := range refusals {
		t.Logf("  %5d refused with %v", n, err)
	}
}

func checkStep(t *testing.T, seed uint64, step int, what string, l *tlog, m *model, got outcome, want mResult) {
	t.Helper()
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf("seed %d step %d (%s): %s", seed, step, what, fmt.Sprintf(format, args...))
	}
	switch {
	case want.err != nil:
		if !errors.Is(got.err, want.err) {
			fail("err %v, model says %v", got.err, want.err)
		}
	case got.err != nil:
		fail("err %v, model accepts", got.err)
	case want.dup != nil:
		if !got.dup || got.first != want.dup.first || got.last != want.dup.last || l.plan.Original.Timestamp != want.dup.ts {
			fail("got %+v (ts %d), model says duplicate of %+v", got, l.plan.Original.Timestamp, *want.dup)
		}
	case got.dup:
		fail("duplicate of [%d, %d], model says append", got.first, got.last)
	}
	if want.done != nil && (len(got.completed) != 1 || got.completed[0] != *want.done) {
		fail("completed %+v, model says %+v", got.completed, *want.done)
	}
	if want.done == nil && len(got.completed) != 0 {
		fail("completed %+v, model says none", got.completed)
	}
	if l.end != m.end || l.s.EndOffset() != m.end {
		fail("log end %d / state end %d, model %d", l.end, l.s.EndOffset(), m.end)
	}
	gf, gok := l.s.FirstUnstableOffset()
	wf, wok := m.firstUnstable()
	if gok != wok || (gok && gf != wf) {
		fail("first unstable offset %d %v, model %d %v", gf, gok, wf, wok)
	}
	if !sameTxns(l.aborted, m.aborted) {
		fail("aborted %+v, model %+v", l.aborted, m.aborted)
	}
	ps := l.s.Producers()
	if len(ps) != len(m.producers) {
		fail("%d producers, model %d", len(ps), len(m.producers))
	}
	for _, p := range ps {
		mp := m.producers[p.ProducerID]
		if mp == nil {
			fail("producer %d unknown to the model", p.ProducerID)
		}
		var batches []producerstate.BatchMetadata
		for _, b := range mp.batches {
			batches = append(batches, producerstate.BatchMetadata{LastSeq: b.lastSeq, OffsetDelta: int32(b.last - b.first), LastOffset: b.last, Timestamp: b.ts})
		}
		wantP := producerstate.ProducerInfo{ProducerID: p.ProducerID, Epoch: mp.epoch, CoordinatorEpoch: mp.coord,
			LastTimestamp: mp.lastTs, CurrentTxnFirstOffset: mp.txnFirst, Batches: batches}
		if len(p.Batches) == 0 {
			p.Batches = nil
		}
		if !reflect.DeepEqual(p, wantP) {
			fail("producer\n got %+v\nmodel %+v", p, wantP)
		}
		for _, b := range mp.batches {
			if bm := (producerstate.BatchMetadata{LastSeq: b.lastSeq, OffsetDelta: int32(b.last - b.first)}); bm.FirstSeq() != b.firstSeq {
				fail("first sequence %d, model %d", bm.FirstSeq(), b.firstSeq)
			}
		}
	}
}
