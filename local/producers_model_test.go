package local_test

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/local"
	"github.com/tierlog/tierlog/record"
)

// TestProducerStateModel drives a log with random interleavings of
// idempotent and transactional producers (new batches, retries, epoch
// bumps, commits, aborts) and of rolls, truncations, clean reopens and
// crashes (a copy of the open directory: what a SIGKILL leaves), and
// checks after every step against a plain model of Kafka's rules: what is
// appended and what is a duplicate, the last stable offset, the aborted
// transactions a read_committed read reports, and the records a
// read_committed consumer keeps.
func TestProducerStateModel(t *testing.T) {
	seeds := 6
	if testing.Short() {
		seeds = 2
	}
	base := uint64(time.Now().UnixNano())
	if s := os.Getenv("TIERLOG_MODEL_SEED"); s != "" {
		base, _ = strconv.ParseUint(s, 10, 64)
		seeds = 1
	}
	for i := range seeds {
		seed := base + uint64(i)
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			t.Logf("seed %d (TIERLOG_MODEL_SEED replays it)", seed)
			runProducerModel(t, seed, 400)
		})
	}
}

// mBatch is a producer batch the model knows was appended.
type mBatch struct {
	seq, n      int32
	epoch       int16
	first, last int64
	data        []byte
}

type mProducer struct {
	id       int64
	epoch    int16
	seq      int32
	txn      bool
	batches  []mBatch // the last five
	all      []mBatch // every batch still in the log, for its sequence after a truncation
	reloaded bool     // the state was loaded since: only the last batch is known
	open     []int64  // offsets of the open transaction's records
}

type mRecord struct {
	offset  int64
	pid     int64
	aborted bool
	open    bool
}

type producerModel struct {
	t         *testing.T
	rng       *rand.Rand
	dir       string
	c         backend.Config
	l         *local.Log
	producers []*mProducer
	recs      []mRecord
	aborted   []backend.AbortedTxn
	lastMark  int64 // the newest marker's offset: truncations stay above it
	b         record.Builder
	reopen    int
}

func runProducerModel(t *testing.T, seed uint64, steps int) {
	m := &producerModel{t: t, rng: rand.New(rand.NewPCG(seed, 7)), dir: filepath.Join(t.TempDir(), "m-0"),
		c: cfg(t, "segment.bytes", "3000", "file.delete.delay.ms", "0")}
	m.l = openLog(t, m.dir, m.c, false)
	defer func() { m.l.Close() }()
	for i := range 4 {
		m.producers = append(m.producers, &mProducer{id: int64(100 + i), txn: i >= 2})
	}
	for step := range steps {
		what := m.step()
		m.check(fmt.Sprintf("step %d (%s)", step, what))
	}
}

func (m *producerModel) leo() int64 { return m.l.Offsets().LogEnd }

func (m *producerModel) batch(p *mProducer, n int) []byte {
	h := record.NewBatchHeader()
	h.ProducerID, h.ProducerEpoch, h.BaseSequence, h.Transactional = p.id, p.epoch, p.seq, p.txn
	m.b.Reset(h)
	for j := range n {
		m.b.Append(time.Now().UnixMilli(), []byte("k"), fmt.Appendf(nil, "%d-%d-%d", p.id, p.seq, j), nil)
	}
	out, _ := m.b.Build()
	return append([]byte(nil), out...)
}

func (m *producerModel) appendNew(p *mProducer) {
	n := 1 + m.rng.IntN(3)
	data := m.batch(p, n)
	info, err := m.l.Append(ctx, append([]byte(nil), data...), backend.AppendOptions{AssignOffsets: true})
	if err != nil || info.Duplicate {
		m.t.Fatalf("a new batch of producer %d: %+v, %v", p.id, info, err)
	}
	b := mBatch{seq: p.seq, n: int32(n), epoch: p.epoch, first: info.FirstOffset, last: info.LastOffset, data: data}
	p.batches = append(p.batches, b)
	p.all = append(p.all, b)
	if len(p.batches) > 5 {
		p.batches = p.batches[1:]
	}
	p.seq += int32(n)
	for o := info.FirstOffset; o <= info.LastOffset; o++ {
		m.recs = append(m.recs, mRecord{offset: o, pid: p.id, open: p.txn})
		if p.txn {
			p.open = append(p.open, o)
		}
	}
	m.commit()
}

// commit moves the high watermark to the log end, as a broker does.
func (m *producerModel) commit() {
	if err := m.l.SetHighWatermark(m.leo()); err != nil {
		m.t.Fatal(err)
	}
}

func (m *producerModel) retry(p *mProducer) {
	if len(p.batches) == 0 {
		return
	}
	i := m.rng.IntN(len(p.batches))
	b := p.batches[i]
	end := m.leo()
	info, err := m.l.Append(ctx, append([]byte(nil), b.data...), backend.AppendOptions{AssignOffsets: true})
	if m.leo() != end {
		m.t.Fatalf("a retry of producer %d's batch at %d was appended again", p.id, b.first)
	}
	last := i == len(p.batches)-1
	switch {
	case err == nil && info.Duplicate && info.FirstOffset == b.first && info.LastOffset == b.last:
	case errors.Is(err, backend.ErrOutOfOrderSequence) && p.reloaded && !last:
		// Only the last batch is known after a reload (Kafka's snapshot).
	default:
		m.t.Fatalf("a retry of producer %d's batch %d of %d (offsets %d..%d): %+v, %v; want a duplicate", p.id, i+1, len(p.batches), b.first, b.last, info, err)
	}
}

func (m *producerModel) marker(p *mProducer, commit bool) {
	data, _ := m.b.BuildEndTxnMarker(record.EndTxnMarker{ProducerID: p.id, ProducerEpoch: p.epoch, Commit: commit, Timestamp: time.Now().UnixMilli()})
	info, err := m.l.Append(ctx, append([]byte(nil), data...), backend.AppendOptions{AssignOffsets: true, Coordinator: true})
	if err != nil {
		m.t.Fatalf("a marker of producer %d: %v", p.id, err)
	}
	if len(p.open) > 0 && !commit {
		m.aborted = append(m.aborted, backend.AbortedTxn{ProducerID: p.id, FirstOffset: p.open[0]})
	}
	for i := range m.recs {
		if m.recs[i].pid == p.id && m.recs[i].open {
			m.recs[i].open, m.recs[i].aborted = false, !commit
		}
	}
	p.open = nil
	m.lastMark = info.LastOffset
	m.commit()
}

func (m *producerModel) step() string {
	p := m.producers[m.rng.IntN(len(m.producers))]
	switch n := m.rng.IntN(100); {
	case n < 45:
		m.appendNew(p)
		return fmt.Sprintf("append by %d", p.id)
	case n < 60:
		m.retry(p)
		return fmt.Sprintf("retry by %d", p.id)
	case n < 70 && p.txn && len(p.open) > 0:
		commit := m.rng.IntN(2) == 0
		m.marker(p, commit)
		return fmt.Sprintf("marker of %d (commit %v)", p.id, commit)
	case n < 73 && len(p.open) == 0:
		p.epoch, p.seq, p.batches = p.epoch+1, 0, nil
		return fmt.Sprintf("epoch bump of %d", p.id)
	case n < 80:
		if err := m.l.Roll(); err != nil {
			m.t.Fatal(err)
		}
		return "roll"
	case n < 85:
		m.truncate()
		return "truncate"
	case n < 92:
		m.reopenLog(false)
		return "clean reopen"
	default:
		m.reopenLog(true)
		return "crash"
	}
}

// truncate removes the records after a batch boundary above the last
// decided transaction marker, as a follower whose log diverged does; the
// producers' batches that went are forgotten.
func (m *producerModel) truncate() {
	if len(m.recs) == 0 {
		return
	}
	// Cut at the start of some producer's newest batch.
	var cands []int64
	for _, p := range m.producers {
		if n := len(p.batches); n > 0 {
			cands = append(cands, p.batches[n-1].first)
		}
	}
	if len(cands) == 0 {
		return
	}
	cut := cands[m.rng.IntN(len(cands))]
	if cut <= m.lastMark {
		return // never below a marker: the model would have to undo a decision
	}
	if err := m.l.TruncateTo(cut); err != nil {
		m.t.Fatal(err)
	}
	end := m.leo()
	m.recs = slices.DeleteFunc(m.recs, func(r mRecord) bool { return r.offset >= end })
	for _, p := range m.producers {
		p.batches = slices.DeleteFunc(p.batches, func(b mBatch) bool { return b.first >= end })
		p.all = slices.DeleteFunc(p.all, func(b mBatch) bool { return b.first >= end })
		p.open = slices.DeleteFunc(p.open, func(o int64) bool { return o >= end })
		if n := len(p.all); n > 0 && p.all[n-1].epoch == p.epoch {
			p.seq = p.all[n-1].seq + p.all[n-1].n
		} else {
			p.seq = 0 // a new epoch (or a new producer) starts at 0
		}
		p.reloaded = true
	}
	m.commit()
}

// reopenLog closes and opens the log, or (crash) opens a copy of its open
// directory, as a SIGKILL leaves it.
func (m *producerModel) reopenLog(crash bool) {
	if crash {
		m.reopen++
		dst := filepath.Join(filepath.Dir(m.dir), fmt.Sprintf("m-%d", m.reopen))
		if err := os.CopyFS(dst, os.DirFS(m.dir)); err != nil {
			m.t.Fatal(err)
		}
		m.l.Close()
		m.dir = dst
	} else if err := m.l.Close(); err != nil {
		m.t.Fatal(err)
	}
	m.l = openLog(m.t, m.dir, m.c, !crash)
	for _, p := range m.producers {
		p.reloaded = true
	}
	m.commit()
}

// check compares the log with the model: the last stable offset, and what
// a read_committed read from the log start returns and reports.
func (m *producerModel) check(what string) {
	o := m.l.Offsets()
	lso := o.HighWatermark
	for _, r := range m.recs {
		if r.open {
			lso = min(lso, r.offset)
			break
		}
	}
	if o.LastStableOffset != lso {
		m.t.Fatalf("%s: last stable offset %d, the model's %d", what, o.LastStableOffset, lso)
	}
	var got []int64
	var aborted []backend.AbortedTxn
	var it record.Iterator
	for off := o.LogStart; off < lso; {
		r, err := m.l.Read(ctx, off, backend.ReadOptions{Isolation: backend.ReadCommitted, MaxBytes: 4096, MinOneBatch: true})
		if err != nil {
			m.t.Fatalf("%s: read %d: %v", what, off, err)
		}
		aborted = append(aborted, r.(backend.Aborted).AbortedTransactions()...)
		var buf bytes.Buffer
		r.WriteTo(&buf)
		r.Close()
		if buf.Len() == 0 {
			break
		}
		for data := buf.Bytes(); len(data) > 0; {
			b, _ := record.Parse(data)
			if !b.IsControl() {
				it.Reset(b)
				for it.Next() {
					got = append(got, it.Record().Offset)
				}
			}
			off, data = b.NextOffset(), data[b.Size():]
		}
	}
	slices.SortFunc(aborted, func(a, b backend.AbortedTxn) int { return int(a.FirstOffset - b.FirstOffset) })
	aborted = slices.Compact(aborted)
	// A read_committed consumer drops the records of the aborted
	// transactions reported.
	var kept []int64
	for _, off := range got {
		drop := false
		for _, r := range m.recs {
			if r.offset == off {
				for _, a := range aborted {
					if a.ProducerID == r.pid && off >= a.FirstOffset {
						drop = r.aborted
					}
				}
			}
		}
		if !drop {
			kept = append(kept, off)
		}
	}
	var want []int64
	var wantAborted []backend.AbortedTxn
	for _, r := range m.recs {
		if r.offset < lso && !r.aborted {
			want = append(want, r.offset)
		}
	}
	for _, a := range m.aborted {
		if a.FirstOffset < lso && a.FirstOffset < m.leo() {
			wantAborted = append(wantAborted, a)
		}
	}
	slices.SortFunc(wantAborted, func(a, b backend.AbortedTxn) int { return int(a.FirstOffset - b.FirstOffset) })
	if !slices.Equal(kept, want) {
		m.t.Fatalf("%s: a read_committed consumer keeps %v, the model %v", what, kept, want)
	}
	if !slices.Equal(aborted, wantAborted) {
		m.t.Fatalf("%s: read_committed reported aborted transactions %v, the model %v", what, aborted, wantAborted)
	}
}
