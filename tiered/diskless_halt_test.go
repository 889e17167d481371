package tiered_test

import (
	"bytes"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/objstore"
	"github.com/tierlog/tierlog/objstore/mem"
	"github.com/tierlog/tierlog/testing/faultstore"
	"github.com/tierlog/tierlog/wal"
)

// TestDisklessWriterHaltsAndIsReplaced: the WAL writer finds its next
// number taken (a void another claimer put) and cannot read what holds it
// (access denied, once). The writer halts: the append in the object it
// could not settle is not acknowledged (Flush fails with a storage
// error). The partition's next append moves it to a new writer with a
// claim, and it goes on: what was acknowledged before reads back byte for
// byte, the failed append is gone, and the new append follows at the
// durable end. The Backend counts the halted writer.
func TestDisklessWriterHaltsAndIsReplaced(t *testing.T) {
	fs := faultstore.Wrap(mem.New(), 1)
	store := objstore.New(fs, "mem", objstore.Options{})
	b := openDisklessBackend(t, filepath.Join(t.TempDir(), "b"), store)
	p := openDiskless(t, b, 1)
	for range 3 {
		if _, err := appendOne(t, p, 10, "a"); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Flush(); err != nil {
		t.Fatal(err)
	}
	acked := batchesFrom(t, p, 0)
	durable := p.Offsets().LogEnd

	// Void the number the writer puts next: the highest it has put
	// (objects of marks alone keep coming) plus one, taken create-only;
	// the writer's first read of it is refused.
	l := wal.NewLayout("tl")
	planted := ""
	for try := 0; planted == "" && try < 100; try++ {
		var id wal.WriterID
		var top uint64
		for _, k := range walKeys(t, store) {
			w, seq, err := l.Parse(k)
			if err != nil {
				t.Fatal(err)
			}
			if seq > top {
				id, top = w, seq
			}
		}
		key := l.Key(id, top+1)
		void, err := wal.EncodeFence(wal.Footer{Writer: id, Sequence: top + 1, Fence: true})
		if err != nil {
			t.Fatal(err)
		}
		fs.Add(faultstore.Rule{Op: objstore.OpHead, Match: func(_ objstore.Op, k string) bool { return k == key }, Nth: 1, Fault: faultstore.Permanent})
		_, err = store.Put(ctx, key, bytes.NewReader(void), int64(len(void)), objstore.PutOptions{IfNoneMatch: true})
		switch {
		case err == nil:
			planted = key
		case !errors.Is(err, objstore.ErrPreconditionFailed):
			t.Fatal(err)
		}
	}
	if planted == "" {
		t.Fatal("the writer kept taking the next number")
	}

	if _, err := appendOne(t, p, 10, "x"); err != nil {
		t.Fatalf("the append before the halt is seen: %v", err)
	}
	if err := p.Flush(); !errors.Is(err, backend.ErrStorage) {
		t.Fatalf("Flush with the writer's number unreadable: %v, want a storage error", err)
	}
	if got := p.Offsets().HighWatermark; got != durable {
		t.Fatalf("high watermark %d after the halt, want the durable end %d", got, durable)
	}

	// The next append moves the partition to a new writer.
	var last int64
	var err error
	for range 50 {
		if last, err = appendOne(t, p, 10, "b"); err == nil {
			break
		}
		if !errors.Is(err, backend.ErrStorage) {
			t.Fatalf("an append after the halt: %v, want a retryable storage error", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("appends never resumed after the halt: %v", err)
	}
	if err := p.Flush(); err != nil {
		t.Fatalf("Flush on the new writer: %v", err)
	}
	if last != durable+9 {
		t.Fatalf("the append after the halt ends at %d, want %d (right after the durable end)", last, durable+9)
	}
	got := batchesFrom(t, p, 0)
	want := map[int64][]byte{}
	for off, b := range acked {
		want[off] = b
	}
	if got[last] == nil || !bytes.Contains(got[last], []byte("bbbb")) {
		t.Fatalf("no batch of the new append at %d after the halt", last)
	}
	want[last] = got[last]
	checkBatches(t, "after the halt", got, want)
	if n := b.Metrics().WALWritersHalted.Load(); n != 1 {
		t.Fatalf("WALWritersHalted = %d, want 1", n)
	}

	// A new leader elsewhere reads the same log from the bucket.
	nb := openDisklessBackend(t, filepath.Join(t.TempDir(), "nb"), store)
	q := openDiskless(t, nb, 2)
	if err := q.Ready(ctx); err != nil {
		t.Fatal(err)
	}
	checkBatches(t, "the next leader", batchesFrom(t, q, 0), want)
}

// TestDisklessWriterHaltsOnADamagedObject: the object at the writer's
// next number is damaged. The writer halts, nothing it had not
// acknowledged is, and the partition answers a storage error that names
// the object (a claim must read through it) instead of a wrong log.
func TestDisklessWriterHaltsOnADamagedObject(t *testing.T) {
	store := objstore.New(mem.New(), "mem", objstore.Options{})
	b := openDisklessBackend(t, filepath.Join(t.TempDir(), "b"), store)
	p := openDiskless(t, b, 1)
	if _, err := appendOne(t, p, 10, "a"); err != nil {
		t.Fatal(err)
	}
	if err := p.Flush(); err != nil {
		t.Fatal(err)
	}
	durable := p.Offsets().LogEnd
	l := wal.NewLayout("tl")
	for try := 0; ; try++ {
		var id wal.WriterID
		var top uint64
		for _, k := range walKeys(t, store) {
			if w, seq, err := l.Parse(k); err == nil && seq > top {
				id, top = w, seq
			}
		}
		junk := bytes.Repeat([]byte("not a WAL object "), 8)
		_, err := store.Put(ctx, l.Key(id, top+1), bytes.NewReader(junk), int64(len(junk)), objstore.PutOptions{IfNoneMatch: true})
		if err == nil {
			break
		}
		if !errors.Is(err, objstore.ErrPreconditionFailed) || try > 100 {
			t.Fatal(err)
		}
	}
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
