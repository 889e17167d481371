package tiered_test

import (
	"bytes"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/objstore"
	"github.com/tierlog/tierlog/objstore/mem"
	"github.com/tierlog/tierlog/testing/faultstore"
	"github.com/tierlog/tierlog/tiered"
	"github.com/tierlog/tierlog/wal"
)

// haltingBackend is a diskless Backend whose WAL writer puts an object
// only when flushed: no object of marks alone takes a number between a
// test's Flush and its next append (the budget of PUTs refills once an
// hour).
func haltingBackend(t *testing.T, dir string, store *objstore.Store) *tiered.Backend {
	t.Helper()
	m := fastManager
	m.DisklessCommitInterval = time.Hour
	return openTieredBackend(t, dir, store, tiered.BackendOptions{Manager: m})
}

// plantAtNext puts body create-only at the number the Backend's writer
// puts next (the highest it has put, plus one), and returns its key. Call
// it after a Flush, with nothing appended since.
func plantAtNext(t *testing.T, store *objstore.Store, p *tiered.Partition, body func(wal.WriterID, uint64) []byte) string {
	t.Helper()
	w := tiered.WALWriterOf(p)
	seq := w.NextSequence()
	key := w.Layout().Key(w.ID(), seq)
	b := body(w.ID(), seq)
	if _, err := store.Put(ctx, key, bytes.NewReader(b), int64(len(b)), objstore.PutOptions{IfNoneMatch: true}); err != nil {
		t.Fatalf("plant %s: %v", key, err)
	}
	return key
}

// voidAt is a void another claimer could have put at seq.
func voidAt(t *testing.T) func(wal.WriterID, uint64) []byte {
	return func(id wal.WriterID, seq uint64) []byte {
		b, err := wal.EncodeFence(wal.Footer{Writer: id, Sequence: seq, Fence: true})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
}

// haltOnce makes the writer of p halt at its next number: a void there
// whose first read is refused. An append goes into that object, and is
// not acknowledged.
func haltOnce(t *testing.T, fs *faultstore.Driver, store *objstore.Store, p *tiered.Partition) {
	t.Helper()
	w := tiered.WALWriterOf(p)
	key := w.Layout().Key(w.ID(), w.NextSequence())
	fs.Add(faultstore.Rule{Op: objstore.OpHead, Match: func(_ objstore.Op, k string) bool { return k == key }, Nth: 1, Fault: faultstore.Permanent})
	plantAtNext(t, store, p, voidAt(t))
	hw := p.Offsets().HighWatermark
	if _, err := appendOne(t, p, 10, "x"); err != nil {
		t.Fatalf("the append before the halt is seen: %v", err)
	}
	if err := p.Flush(); !errors.Is(err, backend.ErrStorage) {
		t.Fatalf("Flush with the writer's number unreadable: %v, want a storage error", err)
	}
	if err := w.Halted(); !errors.Is(err, wal.ErrHalted) {
		t.Fatalf("the writer's Halted() = %v", err)
	}
	if got := p.Offsets().HighWatermark; got != hw {
		t.Fatalf("high watermark %d after the halt, want %d", got, hw)
	}
}

// disklessWithBatches opens a diskless partition at epoch 1 and
// acknowledges three batches.
func disklessWithBatches(t *testing.T, b *tiered.Backend) *tiered.Partition {
	t.Helper()
	p := openDiskless(t, b, 1)
	for range 3 {
		if _, err := appendOne(t, p, 10, "a"); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Flush(); err != nil {
		t.Fatal(err)
	}
	return p
}

// haltingPartition is a diskless partition with three acknowledged
// batches, on a haltingBackend over a store with faults the test adds.
func haltingPartition(t *testing.T) (*faultstore.Driver, *objstore.Store, *tiered.Backend, *tiered.Partition) {
	t.Helper()
	fs := faultstore.Wrap(mem.New(), 1)
	store := objstore.New(fs, "mem", objstore.Options{})
	b := haltingBackend(t, filepath.Join(t.TempDir(), "b"), store)
	return fs, store, b, disklessWithBatches(t, b)
}

// checkNextLeader checks that a new leader on another Backend, claiming
// the partition from the bucket, reads want.
func checkNextLeader(t *testing.T, store *objstore.Store, want map[int64][]byte) {
	t.Helper()
	nb := openDisklessBackend(t, filepath.Join(t.TempDir(), "nb"), store)
	q := openDiskless(t, nb, 2)
	if err := q.Ready(ctx); err != nil {
		t.Fatal(err)
	}
	checkBatches(t, "the next leader", batchesFrom(t, q, 0), want)
}

// TestDisklessWriterHaltsAndIsReplaced: the WAL writer finds its next
// number taken (a void another claimer put) and cannot read what holds it
// (access denied, once). The writer halts: the append in the object it
// could not settle is not acknowledged. The partition's next append
// moves it to a new writer with a claim, and it goes on: what was
// acknowledged before reads back byte for byte, the failed append is
// gone, and the new append follows at the durable end. The Backend counts
// the halted writer; a new leader elsewhere reads the same log.
func TestDisklessWriterHaltsAndIsReplaced(t *testing.T) {
	fs, store, b, p := haltingPartition(t)
	want := batchesFrom(t, p, 0)
	durable := p.Offsets().LogEnd
	old := tiered.WALWriterOf(p)
	haltOnce(t, fs, store, p)

	last, err := appendOne(t, p, 10, "b")
	if err != nil {
		t.Fatalf("the append after the halt: %v", err)
	}
	if err := p.Flush(); err != nil {
		t.Fatalf("Flush on the new writer: %v", err)
	}
	if tiered.WALWriterOf(p) == old {
		t.Fatal("the partition still appends through the halted writer")
	}
	if last != durable+9 {
		t.Fatalf("the append after the halt ends at %d, want %d (right after the durable end)", last, durable+9)
	}
	got := batchesFrom(t, p, 0)
	if !bytes.Contains(got[last], []byte("bbbb")) {
		t.Fatalf("no batch of the new append at %d after the halt", last)
	}
	want[last] = got[last]
	checkBatches(t, "after the halt", got, want)
	if n := b.Metrics().WALWritersHalted.Load(); n != 1 {
		t.Fatalf("WALWritersHalted = %d, want 1", n)
	}

	checkNextLeader(t, store, want)
}

// TestDisklessAppendWaitsForTheNewWritersClaim: an append that checked
// the partition's claim before its writer halted reaches the log only
// after another goroutine moved the partition to a new writer, while that
// writer's claim is still reading the bucket. It is refused (a retryable
// storage error): had it gone into the new writer's objects, the claim,
// which rebuilds the log from the bucket and names the writer above
// them, would have left out an acknowledged append.
func TestDisklessAppendWaitsForTheNewWritersClaim(t *testing.T) {
	fs, store, _, p := haltingPartition(t)
	want := batchesFrom(t, p, 0)
	haltOnce(t, fs, store, p)
	old := tiered.WALWriterOf(p)

	// Hold the claim's first read of the manifest: it runs after the
	// partition moved to the new writer.
	entered, release := make(chan struct{}, 1), make(chan struct{})
	fs.Add(faultstore.Rule{Nth: 1, Fault: faultstore.Hook, Before: faultstore.Hold(release, entered),
		Match: func(op objstore.Op, k string) bool { return op != objstore.OpPut && strings.HasSuffix(k, "/manifest") }})
	claimed := make(chan error, 1)
	go func() { _, err := appendOne(t, p, 10, "r"); claimed <- err }()
	<-entered
	if tiered.WALWriterOf(p) == old {
		t.Fatal("the partition did not move to a new writer before its claim")
	}
	// The late append: its check of the claim saw epoch 1, claimed.
	tiered.SetClaimed(p, 1)
	_, err := appendOne(t, p, 10, "y")
	tiered.SetClaimed(p, -1)
	if !errors.Is(err, backend.ErrStorage) {
		t.Fatalf("an append between the move and the claim: %v, want a retryable storage error", err)
	}
	close(release)
	if err := <-claimed; err != nil {
		t.Fatalf("the append that claims: %v", err)
	}
	if err := p.Flush(); err != nil {
		t.Fatal(err)
	}
	got := batchesFrom(t, p, 0)
	if len(got) != len(want)+1 {
		t.Fatalf("%d batches, want the %d acknowledged before the halt and the claiming append's", len(got), len(want))
	}
	for off, b := range got {
		if want[off] == nil {
			if !bytes.Contains(b, []byte("rrrr")) {
				t.Fatalf("the batch ending at %d is not the claiming append's", off)
			}
			want[off] = b
		}
	}
	checkBatches(t, "after the claim", got, want)
	checkNextLeader(t, store, want)
}

// TestDisklessNoWriterAfterClose: once the Backend closes, a halted
// writer is not replaced (a claim racing Close would start one that
// nothing closes).
func TestDisklessNoWriterAfterClose(t *testing.T) {
	fs, store, b, p := haltingPartition(t)
	haltOnce(t, fs, store, p)
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := appendOne(t, p, 10, "b"); err == nil {
		t.Fatal("an append after Close succeeded")
	}
	if w, err := tiered.StartWALWriter(b); !errors.Is(err, backend.ErrClosed) {
		t.Fatalf("a WAL writer after Close: %v, %v; want backend.ErrClosed", w, err)
	}
	if n := b.Metrics().WALWritersHalted.Load(); n != 0 {
		t.Fatalf("a writer was started after Close (WALWritersHalted = %d)", n)
	}
}

// TestDisklessWriterHaltsOnADamagedObject: the object at the writer's
// next number is damaged. The writer halts, nothing it had not
// acknowledged is, and the partition answers a storage error that names
// the object (a claim must read through it) instead of a wrong log.
func TestDisklessWriterHaltsOnADamagedObject(t *testing.T) {
	store := objstore.New(mem.New(), "mem", objstore.Options{})
	b := haltingBackend(t, filepath.Join(t.TempDir(), "b"), store)
	p := disklessWithBatches(t, b)
	durable := p.Offsets().LogEnd
	plantAtNext(t, store, p, func(wal.WriterID, uint64) []byte { return bytes.Repeat([]byte("not a WAL object "), 8) })
	if _, err := appendOne(t, p, 10, "x"); err != nil {
		t.Fatal(err)
	}
	if err := p.Flush(); !errors.Is(err, backend.ErrStorage) {
		t.Fatalf("Flush: %v, want a storage error", err)
	}
	_, err := appendOne(t, p, 10, "b")
	if !errors.Is(err, backend.ErrStorage) || !errors.Is(err, wal.ErrCorrupt) {
		t.Fatalf("an append after the halt: %v, want a storage error naming the damaged object", err)
	}
	if hw := p.Offsets().HighWatermark; hw != durable {
		t.Fatalf("high watermark %d, want the durable end %d", hw, durable)
	}
}
