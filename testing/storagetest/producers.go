package storagetest

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/record"
)

// The producer-state battery: idempotent producers (duplicates, sequences,
// epochs), transactions (the last stable offset, read_committed reads and
// their aborted transactions), across rolls, a clean reopen, a truncation
// and retention.

// producer builds an idempotent (and, with txn, transactional) producer's
// batches, timestamped now (a producer idle for producer.id.expiration.ms
// by its timestamps is expired when the state is loaded).
type producer struct {
	id    int64
	epoch int16
	seq   int32
	txn   bool
	b     record.Builder
}

// batch builds the producer's next batch of n records (not appended).
func (pr *producer) batch(n int, tag string) []byte {
	h := record.NewBatchHeader()
	h.ProducerID, h.ProducerEpoch, h.BaseSequence, h.Transactional = pr.id, pr.epoch, pr.seq, pr.txn
	pr.b.Reset(h)
	for i := range n {
		pr.b.Append(time.Now().UnixMilli(), []byte(fmt.Sprintf("%s-k%d", tag, i)), []byte(fmt.Sprintf("%s-%d-%d", tag, pr.id, i)), nil)
	}
	out, err := pr.b.Build()
	if err != nil {
		panic(err)
	}
	pr.seq += int32(n)
	return append([]byte(nil), out...)
}

// marker builds a COMMIT or ABORT marker for the producer's transaction.
func (pr *producer) marker(commit bool) []byte {
	out, err := pr.b.BuildEndTxnMarker(record.EndTxnMarker{ProducerID: pr.id, ProducerEpoch: pr.epoch, CoordinatorEpoch: 1, Commit: commit, Timestamp: time.Now().UnixMilli()})
	if err != nil {
		panic(err)
	}
	return append([]byte(nil), out...)
}

func leader(t *testing.T, p backend.Partition, data []byte, coordinator bool) (backend.AppendInfo, error) {
	t.Helper()
	return p.Append(ctx, append([]byte(nil), data...), backend.AppendOptions{AssignOffsets: true, LeaderEpoch: 1, Coordinator: coordinator})
}

func mustAppend(t *testing.T, p backend.Partition, data []byte, coordinator bool) backend.AppendInfo {
	t.Helper()
	info, err := leader(t, p, data, coordinator)
	if err != nil {
		t.Fatalf("append: %v", err)
	}
	return info
}

// testIdempotentProducers: a retry of any of a producer's last five
// batches is a duplicate answered with the original offsets and nothing
// written, across rolls and a clean reopen; a gap in sequence, an older
// epoch, and a new epoch not starting at 0 are refused with the typed
// errors, writing nothing.
func testIdempotentProducers(t *testing.T, h Harness) {
	c := Config(t, "segment.bytes", "1024")
	p := h.Open(t, c)
	pr := &producer{id: 1000}
	type sent struct {
		data        []byte
		first, last int64
	}
	var log []sent
	for i := range 12 {
		data := pr.batch(1+i%3, "i")
		info := mustAppend(t, p, data, false)
		if info.Duplicate {
			t.Fatalf("batch %d is a duplicate", i)
		}
		log = append(log, sent{data, info.FirstOffset, info.LastOffset})
	}
	check := func(what string) {
		t.Helper()
		end := p.Offsets().LogEnd
		for _, s := range log[len(log)-5:] {
			info, err := leader(t, p, s.data, false)
			if err != nil || !info.Duplicate || info.FirstOffset != s.first || info.LastOffset != s.last {
				t.Fatalf("%s: retry of the batch at %d..%d: %+v, %v; want a duplicate with its offsets", what, s.first, s.last, info, err)
			}
		}
		if p.Offsets().LogEnd != end {
			t.Fatalf("%s: duplicates moved the log end from %d to %d", what, end, p.Offsets().LogEnd)
		}
		if _, err := leader(t, p, log[len(log)-6].data, false); !errors.Is(err, backend.ErrOutOfOrderSequence) {
			t.Fatalf("%s: retry of the sixth-last batch: %v; want ErrOutOfOrderSequence (Kafka's answer)", what, err)
		}
	}
	check("live")
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	p = h.Open(t, c)
	defer p.Close()
	// After a reload only the last batch is known (Kafka's snapshots keep
	// one per producer).
	end := p.Offsets().LogEnd
	last := log[len(log)-1]
	if info, err := leader(t, p, last.data, false); err != nil || !info.Duplicate || info.FirstOffset != last.first {
		t.Fatalf("after reopen, retry of the last batch: %+v, %v", info, err)
	}
	gap := *pr
	gap.seq += 3
	before := p.Offsets()
	if _, err := leader(t, p, gap.batch(1, "gap"), false); !errors.Is(err, backend.ErrOutOfOrderSequence) {
		t.Fatalf("a gap in sequence: %v; want ErrOutOfOrderSequence", err)
	}
	bumped := *pr
	bumped.epoch++
	if _, err := leader(t, p, bumped.batch(1, "e"), false); !errors.Is(err, backend.ErrOutOfOrderSequence) {
		t.Fatalf("a new epoch not starting at sequence 0: %v; want ErrOutOfOrderSequence", err)
	}
	if p.Offsets() != before || p.Offsets().LogEnd != end {
		t.Fatal("a refused append changed the offsets")
	}
	bumped.seq = 0
	mustAppend(t, p, bumped.batch(2, "e"), false)
	stale := *pr // the old epoch, after the bump
	if _, err := leader(t, p, stale.batch(1, "s"), false); !errors.Is(err, backend.ErrInvalidProducerEpoch) {
		t.Fatalf("an older epoch: %v; want ErrInvalidProducerEpoch", err)
	}
	// A truncation forgets the batches it removes: the producer continues
	// from the last batch kept.
	commitAll(t, p)
	keep := p.Offsets().LogEnd
	mustAppend(t, p, bumped.batch(1, "t"), false)
	if err := p.TruncateTo(keep); err != nil {
		t.Fatal(err)
	}
	bumped.seq--
	if info := mustAppend(t, p, bumped.batch(1, "t2"), false); info.Duplicate || info.FirstOffset != keep {
		t.Fatalf("after truncation the producer's next batch: %+v", info)
	}
	// Retention keeps producers (Kafka since KIP-360).
	commitAll(t, p)
	if err := p.DeleteRecordsBefore(ctx, p.Offsets().LogEnd); err != nil {
		t.Fatal(err)
	}
	retry := bumped
	retry.seq--
	if info, err := leader(t, p, retry.batch(1, "t2"), false); err != nil || !info.Duplicate {
		t.Fatalf("after retention removed its records, retry of the producer's last batch: %+v, %v", info, err)
	}
}

// txnRead reads from offset with isolation to the bound and returns the
// offsets of the data records read and the aborted transactions reported.
func txnRead(t *testing.T, p backend.Partition, offset int64, iso backend.Isolation) ([]int64, []backend.AbortedTxn) {
	t.Helper()
	var offs []int64
	var aborted []backend.AbortedTxn
	var it record.Iterator
	for {
		r, err := p.Read(ctx, offset, backend.ReadOptions{Isolation: iso, MaxBytes: 1024, MinOneBatch: true})
		if err != nil {
			t.Fatalf("read %d: %v", offset, err)
		}
		if a, ok := r.(backend.Aborted); ok {
			aborted = append(aborted, a.AbortedTransactions()...)
		} else if iso == backend.ReadCommitted {
			t.Fatal("a read_committed Records does not implement backend.Aborted")
		}
		var buf bytes.Buffer
		r.WriteTo(&buf)
		r.Close()
		if buf.Len() == 0 {
			break
		}
		sc := record.NewScanner(bytes.NewReader(buf.Bytes()), 0, int64(buf.Len()), record.ScanOptions{Validate: true})
		for sc.Next() {
			e := sc.Entry()
			if !e.Batch().IsControl() {
				it.Reset(e.Data)
				for it.Next() {
					offs = append(offs, it.Record().Offset)
				}
			}
			offset = e.LastOffset + 1
		}
	}
	slices.SortFunc(aborted, func(a, b backend.AbortedTxn) int { return int(a.FirstOffset - b.FirstOffset) })
	return offs, slices.Compact(aborted)
}

// testTransactions: transactional producers open transactions the last
// stable offset waits for; COMMIT and ABORT markers (from the coordinator
// only) close them; read_committed stops at the last stable offset and
// reports the aborted transactions it overlaps, across rolls and a clean
// reopen.
func testTransactions(t *testing.T, h Harness) {
	c := Config(t, "segment.bytes", "2048")
	p := h.Open(t, c)
	a := &producer{id: 2000, txn: true}
	b := &producer{id: 3000, txn: true}
	plain := &producer{id: 4000}
	var committed, abortedOffs, plainOffs []int64
	add := func(pr *producer, n int, into *[]int64) backend.AppendInfo {
		info := mustAppend(t, p, pr.batch(n, "x"), false)
		for o := info.FirstOffset; o <= info.LastOffset; o++ {
			*into = append(*into, o)
		}
		return info
	}
	var aPending, bPending []int64
	aFirst := add(a, 3, &aPending).FirstOffset
	bFirst := add(b, 2, &bPending).FirstOffset
	add(plain, 2, &plainOffs)
	add(a, 4, &aPending)
	commitAll(t, p)
	if o := p.Offsets(); o.LastStableOffset != aFirst {
		t.Fatalf("with transactions open the last stable offset is %d, want the first open one's %d", o.LastStableOffset, aFirst)
	}
	// A client may not write markers.
	if _, err := leader(t, p, a.marker(true), false); !errors.Is(err, backend.ErrInvalidRecord) {
		t.Fatalf("a client's COMMIT marker: %v; want ErrInvalidRecord", err)
	}
	got, _ := txnRead(t, p, 0, backend.ReadCommitted)
	if len(got) != 0 {
		t.Fatalf("read_committed returned %v below an open transaction at %d", got, aFirst)
	}
	mustAppend(t, p, a.marker(true), true)
	committed = append(committed, aPending...)
	commitAll(t, p)
	if o := p.Offsets(); o.LastStableOffset != bFirst {
		t.Fatalf("after A's commit the last stable offset is %d, want B's first %d", o.LastStableOffset, bFirst)
	}
	add(b, 3, &bPending)
	mustAppend(t, p, b.marker(false), true)
	abortedOffs = append(abortedOffs, bPending...)
	add(plain, 2, &plainOffs)
	// A second transaction of A, committed after a roll or two.
	aPending = nil
	for range 6 {
		add(a, 3, &aPending)
	}
	mustAppend(t, p, a.marker(true), true)
	committed = append(committed, aPending...)
	commitAll(t, p)
	if o := p.Offsets(); o.LastStableOffset != o.HighWatermark || o.HighWatermark != o.LogEnd {
		t.Fatalf("with every transaction decided: %+v; want the last stable offset at the high watermark", o)
	}
	checkReads := func(what string) {
		t.Helper()
		want := append(append(slices.Clone(committed), abortedOffs...), plainOffs...)
		slices.Sort(want)
		if got, _ := txnRead(t, p, 0, backend.ReadHighWatermark); !slices.Equal(got, want) {
			t.Fatalf("%s: read_uncommitted got %v, want %v", what, got, want)
		}
		got, aborted := txnRead(t, p, 0, backend.ReadCommitted)
		if !slices.Equal(got, want) {
			t.Fatalf("%s: read_committed returned offsets %v, want every data record %v (the consumer filters)", what, got, want)
		}
		wantAborted := []backend.AbortedTxn{{ProducerID: b.id, FirstOffset: bFirst}}
		if !slices.Equal(aborted, wantAborted) {
			t.Fatalf("%s: read_committed reported aborted transactions %v, want %v", what, aborted, wantAborted)
		}
		// A read that starts after B's marker reports nothing.
		if _, aborted := txnRead(t, p, committed[len(committed)-1], backend.ReadCommitted); len(aborted) != 0 {
			t.Fatalf("%s: a read past B's abort reports %v", what, aborted)
		}
	}
	checkReads("live")
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	p = h.Open(t, c)
	defer p.Close()
	commitAll(t, p) // the broker sets the high watermark again
	checkReads("after a clean reopen")
	// An open transaction survives the reopen and still holds the last
	// stable offset.
	open := add(a, 2, new([]int64))
	commitAll(t, p)
	if o := p.Offsets(); o.LastStableOffset != open.FirstOffset {
		t.Fatalf("a transaction opened after reopen: last stable offset %d, want %d", o.LastStableOffset, open.FirstOffset)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	p = h.Open(t, c)
	defer p.Close()
	commitAll(t, p)
	if o := p.Offsets(); o.LastStableOffset != open.FirstOffset {
		t.Fatalf("after a reopen the open transaction's last stable offset is %d, want %d", o.LastStableOffset, open.FirstOffset)
	}
}
