package wal_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/tierlog/tierlog/objstore"
	"github.com/tierlog/tierlog/testing/faultstore"
	"github.com/tierlog/tierlog/wal"
)

// The model test of the protocol: two writers over one bucket whose puts
// are slow, lose their answers after landing, or fail; partitions whose
// leadership moves back and forth between the writers (Fence, then Tail)
// while the old leader keeps appending as a zombie until it is told it is
// fenced. Every append carries its partition, offset and a nonce, so the
// partition's log read back from the bucket can be held against every
// acknowledgement. It checks, for every seed:
//
//   - every acknowledged append is in the partition's final log, with its
//     bytes, exactly once, and the log's offsets run 0, 1, 2, ... with no
//     hole and no duplicate;
//   - nothing is in the log that was not acknowledged (no append is
//     durable whose Ack failed);
//   - an old leader's appends never become durable at or past the fence
//     that claimed the partition from it, and fail with ErrFenced;
//   - a partition's acknowledgements from one leadership are a prefix of
//     its appends: none succeeds after an earlier one failed.
//
// On odd seeds a writer's reads of what holds a taken number are refused
// now and then (access denied): the writer halts (ErrHalted), its
// leaderships stop, and the next claim of each of its partitions fences
// it and leads on a new writer in its place, as a Backend does.
func TestFencingModel(t *testing.T) {
	seeds := 12
	if testing.Short() {
		seeds = 4
	}
	for seed := range uint64(seeds) {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			t.Parallel()
			runModel(t, seed)
		})
	}
}

const modelPartitions = 3

// unit is one append: 16 bytes naming its partition, offset and nonce.
func unit(p int32, off int64, nonce uint32) []byte {
	b := binary.BigEndian.AppendUint32(nil, uint32(p))
	b = binary.BigEndian.AppendUint64(b, uint64(off))
	return binary.BigEndian.AppendUint32(b, nonce)
}

// record is where a partition's data beyond what has been adopted lies:
// the manifest's part of the protocol.
type record struct {
	writer int         // index of the writer that leads it
	w      *wal.Writer // that writer (the index may hold a new one since)
	after  uint64      // its objects above this number may hold the partition
	epoch  int32
}

type model struct {
	t       *testing.T
	rng     *rand.Rand
	store   *objstore.Store
	writers [2]*wal.Writer
	// wstores and wopts make a writer in place of one that halted;
	// halts counts them.
	wstores [2]*objstore.Store
	wopts   [2]wal.Options
	halts   int

	mu sync.Mutex
	// acked[p][offset] is the nonce of the acknowledged append at offset
	// (the last one: a truncated offset may be appended again).
	acked [modelPartitions]map[int64]uint32
	// landedFailed[p] holds the nonces of appends that failed in a way
	// that leaves their bytes in the bucket (their object landed, but an
	// earlier failure, a Reset or a fence failed them): a later read may
	// find them where nothing was acknowledged since.
	landedFailed [modelPartitions]map[uint32]bool
	// log[p] is the partition's adopted log: units read back at claims.
	log [modelPartitions][][]byte
	rec [modelPartitions]record
	// leaders[p] is the leadership producing now; older ones are zombies.
	// all[p] holds every leadership of p not yet stopped.
	leaders [modelPartitions]*leadership
	all     [modelPartitions][]*leadership
	nonce   uint32
	err     error
}

// leadership is one writer leading one partition from one offset: its
// producer appends until it is fenced or stopped.
type leadership struct {
	p      int32
	w      int
	wr     *wal.Writer
	next   int64
	stop   chan struct{}
	done   chan struct{}
	fenced bool
	// fencedAt is the number of the fence that claimed the partition
	// from this leadership (0: none yet). Guarded by model.mu.
	fencedAt uint64
}

func (m *model) fail(format string, args ...any) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.err == nil {
		m.err = fmt.Errorf(format, args...)
	}
}

func runModel(t *testing.T, seed uint64) {
	s, d := memStore(t)
	// The bucket's faults, drawn from the seed: latency, answers lost
	// after landing, puts failed before landing.
	d.Add(faultstore.Rule{Op: objstore.OpPut, Probability: 0.5, Fault: faultstore.Latency, Latency: time.Millisecond})
	// A slow put now and then: the objects after it land first.
	d.Add(faultstore.Rule{Op: objstore.OpPut, Probability: 0.1, Fault: faultstore.Latency, Latency: 6 * time.Millisecond})
	d.Add(faultstore.Rule{Op: objstore.OpPut, Probability: 0.08, Fault: faultstore.FailAfter})
	d.Add(faultstore.Rule{Op: objstore.OpPut, Probability: 0.08, Fault: faultstore.FailBefore})
	d.Add(faultstore.Rule{Op: objstore.OpList, Probability: 0.3, Fault: faultstore.Latency, Latency: time.Millisecond})
	m := &model{t: t, rng: rand.New(rand.NewPCG(seed, 99)), store: s}
	for i := range m.writers {
		// From one object in flight to the most (by seed): puts land
		// out of number order, and a claim meets numbers still in flight.
		m.wopts[i] = wal.Options{Root: "model", CommitInterval: time.Millisecond, BufferMaxBytes: 256, SettleBackoff: time.Millisecond,
			InFlight: 1 + int(seed)%wal.MaxInFlight}
		m.wstores[i] = s
		if seed%2 == 1 {
			// The writer's own reads of what holds a taken number are
			// refused now and then: it halts.
			m.wstores[i], _ = memStoreOver(t, d, faultstore.Rule{Op: objstore.OpHead, Probability: 0.3, Fault: faultstore.Permanent})
		}
		m.writers[i] = newWriter(t, m.wstores[i], m.wopts[i])
	}
	for p := range modelPartitions {
		m.acked[p] = map[int64]uint32{}
		m.landedFailed[p] = map[uint32]bool{}
		m.rec[p] = record{writer: p % 2, w: m.writers[p%2], after: 0, epoch: 1}
		m.lead(int32(p), p%2, 0)
	}
	ctx := context.Background()
	for range 16 {
		time.Sleep(time.Duration(m.rng.IntN(4)) * time.Millisecond)
		p := int32(m.rng.IntN(modelPartitions))
		if m.rng.IntN(4) == 0 {
			m.loseClaim(ctx, p)
			continue
		}
		m.claim(ctx, p, 1-m.rec[p].writer)
	}
	// Stop every producer, then claim each partition once more so its
	// whole log is adopted, and judge.
	for p := range modelPartitions {
		m.claim(ctx, int32(p), m.rec[p].writer)
	}
	for p := range int32(modelPartitions) {
		m.stopOn(p, 0)
		m.stopOn(p, 1)
	}
	for p := range modelPartitions {
		m.claim(ctx, int32(p), -1)
	}
	if m.err != nil {
		t.Fatalf("seed %d: %v", seed, m.err)
	}
	for p := range int32(modelPartitions) {
		m.judge(p)
	}
	t.Logf("seed %d: %d writer(s) halted and were replaced", seed, m.halts)
}

// writer is the writer at index i, a new one in place of one that
// halted. Only the model's own goroutine calls it.
func (m *model) writer(i int) *wal.Writer {
	if m.writers[i].Halted() != nil {
		m.writers[i] = newWriter(m.t, m.wstores[i], m.wopts[i])
		m.halts++
	}
	return m.writers[i]
}

// lead starts writer w leading p from offset next.
func (m *model) lead(p int32, w int, next int64) {
	l := &leadership{p: p, w: w, wr: m.writers[w], next: next, stop: make(chan struct{}), done: make(chan struct{})}
	m.leaders[p] = l
	m.all[p] = append(m.all[p], l)
	go m.produce(l)
}

// stopOn ends every leadership of p on writer w and waits for it.
func (m *model) stopOn(p int32, w int) {
	m.mu.Lock()
	var stop []*leadership
	keep := m.all[p][:0]
	for _, l := range m.all[p] {
		if l.w == w {
			stop = append(stop, l)
		} else {
			keep = append(keep, l)
		}
	}
	m.all[p] = keep
	m.mu.Unlock()
	for _, l := range stop {
		close(l.stop)
		<-l.done
	}
}

// produce appends to l's partition through its writer, a window of
// appends at a time, waiting for their acks: on a failure it truncates to
// the last acknowledged offset and resets; on a fence it stops.
func (m *model) produce(l *leadership) {
	defer close(l.done)
	w := l.wr
	tp := wal.TopicPartition{Topic: "t", Partition: l.p}
	ctx := context.Background()
	for {
		select {
		case <-l.stop:
			return
		default:
		}
		type sent struct {
			off   int64
			nonce uint32
			ack   *wal.Ack
		}
		var window []sent
		var appendErr error
		for range 1 + int(l.p) {
			m.mu.Lock()
			m.nonce++
			n := m.nonce
			m.mu.Unlock()
			a, err := w.Append(ctx, tp, unit(l.p, l.next, n), l.next, l.next)
			if err != nil {
				appendErr = err
				break
			}
			window = append(window, sent{l.next, n, a})
			l.next++
		}
		failed := false
		durableEnd := l.next - int64(len(window))
		for _, s := range window {
			err := s.ack.Err()
			switch {
			case err == nil && failed:
				m.fail("%s: the append at %d became durable after an earlier one failed", tp, s.off)
			case err == nil:
				loc := s.ack.Location()
				m.mu.Lock()
				if l.fencedAt > 0 && loc.Sequence >= l.fencedAt && m.err == nil {
					m.err = fmt.Errorf("%s: writer %d acknowledged offset %d at number %d, at or past its fence at %d", tp, l.w, s.off, loc.Sequence, l.fencedAt)
				}
				m.acked[l.p][s.off] = s.nonce
				m.mu.Unlock()
				durableEnd = s.off + 1
			default:
				failed = true
				if errors.Is(err, wal.ErrFenced) {
					l.fenced = true
				}
				if errors.Is(err, wal.ErrHalted) {
					l.fenced = true // the next claim moves the partition to a new writer
				}
				if errors.Is(err, wal.ErrFenced) || errors.Is(err, wal.ErrPartitionFailed) || errors.Is(err, wal.ErrHalted) {
					m.mu.Lock()
					m.landedFailed[l.p][s.nonce] = true
					m.mu.Unlock()
				}
			}
		}
		if appendErr != nil {
			failed = true
			if errors.Is(appendErr, wal.ErrFenced) || errors.Is(appendErr, wal.ErrHalted) {
				l.fenced = true
			}
		}
		if l.fenced {
			return
		}
		if failed {
			// Truncate back to the durable end; nothing above it was
			// acknowledged.
			l.next = durableEnd
			w.Reset(tp)
		}
	}
}

// claim moves p to writer to (-1: only read, to judge): fence the
// current writer, read p's tail below the fence, adopt it, and start the
// new leadership after it.
func (m *model) claim(ctx context.Context, p int32, to int) {
	m.mu.Lock()
	r := m.rec[p]
	m.mu.Unlock()
	from := r.w
	tp := wal.TopicPartition{Topic: "t", Partition: p}
	var f uint64
	var err error
	for range 50 { // the bucket's faults make a fence fail now and then
		if f, err = wal.Fence(ctx, m.store, from.Layout(), from.ID(), r.after, r.epoch+1, []wal.TopicPartition{tp}); err == nil {
			break
		}
	}
	if err != nil {
		m.fail("fence %s: %v", tp, err)
		return
	}
	var tails map[wal.TopicPartition][]wal.Located
	for range 50 {
		if tails, err = wal.Tail(ctx, m.store, from.Layout(), from.ID(), r.after, f, r.epoch, tp); err == nil {
			break
		}
	}
	if err != nil {
		m.fail("tail %s: %v", tp, err)
		return
	}
	units, ok := m.units(tails[tp], p)
	if !ok {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.leaders[p].fencedAt = f
	m.log[p] = append(m.log[p], units...)
	if to < 0 {
		return
	}
	next := int64(len(m.log[p]))
	w := m.writer(to)
	// A Backend leads a partition through one Partition: its old
	// leaderships of p (a zombie fenced earlier, or the one just fenced
	// when it claims p back from itself) end before it leads again.
	m.mu.Unlock()
	m.stopOn(p, to)
	m.mu.Lock()
	// The new leadership's epoch: above the fence's, as a Backend's
	// claim of a partition from its own writer leads past the fence it
	// left (a claim from another writer leads at the fence's epoch).
	epoch := r.epoch + 1
	if to == r.writer {
		epoch++
	}
	w.Reset(tp) // the log was rebuilt from the bucket
	w.Lead(tp, epoch)
	m.rec[p] = record{writer: to, w: w, after: w.NextSequence() - 1, epoch: epoch}
	m.lead(p, to, next)
}

// loseClaim is a claim of p that never commits (its broker died after the
// fence): it fences p's writer at the next epoch and goes no further. The
// writer then leads p again at a higher epoch on the same record, as a
// Backend does whose manifest still names its own writer: it cuts p back
// to what was acknowledged (Reset) and appends from there, past the
// claim's fences; the objects between hold appends that landed but were
// failed, which later claims must not take over the ones appended again.
func (m *model) loseClaim(ctx context.Context, p int32) {
	m.mu.Lock()
	r := m.rec[p]
	m.mu.Unlock()
	w := r.w
	if w.Halted() != nil || w != m.writers[r.writer] {
		// Its writer halted: a Backend claims the partition for a new
		// one, whose record is not its own.
		m.claim(ctx, p, r.writer)
		return
	}
	tp := wal.TopicPartition{Topic: "t", Partition: p}
	var err error
	for range 50 {
		if _, err = wal.Fence(ctx, m.store, w.Layout(), w.ID(), r.after, r.epoch+1, []wal.TopicPartition{tp}); err == nil {
			break
		}
	}
	if err != nil {
		m.fail("fence %s: %v", tp, err)
		return
	}
	m.stopOn(p, r.writer)
	// Leading again on its own record (as a Backend's claim of its own
	// writer's record does): the record stays, the writer leads at a
	// higher epoch, and the partition is cut back to what was
	// acknowledged (Reset) and appended from there.
	m.mu.Lock()
	defer m.mu.Unlock()
	end := int64(len(m.log[p]))
	for off := range m.acked[p] {
		end = max(end, off+1)
	}
	w.Reset(tp)
	w.Lead(tp, r.epoch+2)
	m.rec[p] = record{writer: r.writer, w: w, after: r.after, epoch: r.epoch + 2}
	m.lead(p, r.writer, end)
}

// units reads p's log past what was adopted from a tail's extents.
func (m *model) units(tail []wal.Located, p int32) ([][]byte, bool) {
	m.mu.Lock()
	next := int64(len(m.log[p]))
	m.mu.Unlock()
	var units [][]byte
	for _, loc := range wal.Chain(next, tail) {
		b, err := wal.ReadExtent(context.Background(), m.store, loc.Key, loc.Extent)
		if err != nil {
			m.fail("read %s: %v", loc.Key, err)
			return nil, false
		}
		if int64(len(b)) != 16*(loc.Extent.LastOffset-loc.Extent.FirstOffset+1) {
			m.fail("%s: extent %+v holds %d bytes", loc.Key, loc.Extent, len(b))
			return nil, false
		}
		for i := 0; i < len(b); i += 16 {
			if off := loc.Extent.FirstOffset + int64(i/16); off >= loc.From && off <= loc.To {
				units = append(units, b[i:i+16])
			}
		}
	}
	return units, true
}

// judge holds p's adopted log against its acknowledgements.
func (m *model) judge(p int32) {
	t := m.t
	seen := map[int64]bool{}
	for i, u := range m.log[p] {
		gp, off, nonce := int32(binary.BigEndian.Uint32(u)), int64(binary.BigEndian.Uint64(u[4:])), binary.BigEndian.Uint32(u[12:])
		if gp != p || off != int64(i) {
			t.Fatalf("partition %d: log entry %d is partition %d offset %d: a hole, a duplicate or a stray", p, i, gp, off)
		}
		want, ok := m.acked[p][off]
		if !ok && m.landedFailed[p][nonce] {
			// Never acknowledged at this offset, failed with its bytes in
			// the bucket: a read may find them (as a produce that timed
			// out may have been written).
			seen[off] = true
			continue
		}
		if !ok || want != nonce {
			t.Fatalf("partition %d offset %d: the log holds nonce %d, the acknowledged append had %d (acknowledged: %v)", p, off, nonce, want, ok)
		}
		seen[off] = true
	}
	for off := range m.acked[p] {
		if !seen[off] {
			t.Fatalf("partition %d: acknowledged offset %d is not in the log (log of %d)", p, off, len(m.log[p]))
		}
	}
	if len(m.log[p]) == 0 {
		t.Fatalf("partition %d: nothing was acknowledged; the model tested nothing", p)
	}
}
