package wal_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tierlog/tierlog/objstore"
	"github.com/tierlog/tierlog/objstore/mem"
	"github.com/tierlog/tierlog/objstore/seal"
	"github.com/tierlog/tierlog/testing/faultstore"
	"github.com/tierlog/tierlog/wal"
)

// sealedOver is a store that seals what it writes to inner.
func sealedOver(t *testing.T, inner objstore.Driver) *objstore.Store {
	t.Helper()
	line, err := seal.NewKey("k1")
	if err != nil {
		t.Fatal(err)
	}
	ring, err := seal.ParseKeyFile("test", strings.NewReader(line+"\nactive k1\n"))
	if err != nil {
		t.Fatal(err)
	}
	d, err := seal.New(inner, ring, seal.Options{ChunkSize: seal.MinChunkSize, ReadPlaintext: true})
	if err != nil {
		t.Fatal(err)
	}
	s := objstore.New(d, "sealed", objstore.Options{})
	t.Cleanup(func() { s.Close() })
	return s
}

// holdPut holds the first put at key until the returned func is called
// (or the put's ctx ends).
func holdPut(d *faultstore.Driver, key string) func() {
	release := make(chan struct{})
	d.Add(faultstore.Rule{Op: objstore.OpPut, Match: func(_ objstore.Op, k string) bool { return k == key }, Nth: 1,
		Fault: faultstore.Hook, Before: faultstore.Hold(release, nil)})
	return sync.OnceFunc(func() { close(release) })
}

// waitLanded waits until the bucket holds key.
func waitLanded(t *testing.T, s *objstore.Store, key string) {
	t.Helper()
	for range 500 {
		if _, err := s.Head(context.Background(), key); err == nil {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("%s did not land", key)
}

// TestHaltOnAFenceItCannotRead: a broker whose store seals fences a
// writer whose store does not, at a number the writer is still putting,
// while the object above it has landed. The writer cannot read the fence:
// it halts, and acknowledges neither the fenced object's appends nor the
// landed one's above it (the fence claims their partitions, and the new
// leader's log ends below it). Close returns at once, and later appends
// are refused with ErrHalted.
func TestHaltOnAFenceItCannotRead(t *testing.T) {
	inner := mem.New()
	s, d := memStoreOver(t, inner)
	w := newWriter(t, s, wal.Options{CommitInterval: time.Hour, InFlight: 2})
	ctx := context.Background()
	a0, _ := w.Append(ctx, tpA, []byte("a0"), 0, 0)
	w.Flush(ctx)
	if err := waitAck(t, a0); err != nil {
		t.Fatal(err)
	}
	release := holdPut(d, w.Layout().Key(w.ID(), 2))
	defer release()
	a1, _ := w.Append(ctx, tpA, []byte("a1"), 1, 1)
	go w.Flush(ctx)
	waitFor(t, func() bool { return w.NextSequence() == 3 })
	a2, _ := w.Append(ctx, tpA, []byte("a2"), 2, 2)
	b0, _ := w.Append(ctx, tpB, []byte("b0"), 0, 0)
	go w.Flush(ctx)
	waitLanded(t, s, w.Layout().Key(w.ID(), 3))

	f, err := wal.Fence(ctx, sealedOver(t, inner), w.Layout(), w.ID(), 1, 7, []wal.TopicPartition{tpA, tpB})
	if err != nil || f != 4 {
		t.Fatalf("Fence = %d, %v; 4 expected, with the gap at 2 fenced", f, err)
	}
	release()
	for name, a := range map[string]*wal.Ack{"a1 (the fenced number)": a1, "a2 (landed above it)": a2, "b0 (landed above it)": b0} {
		if err := waitAck(t, a); !errors.Is(err, wal.ErrHalted) {
			t.Errorf("%s: %v, want ErrHalted", name, err)
		}
	}
	if err := w.Halted(); !errors.Is(err, wal.ErrHalted) {
		t.Fatalf("Halted() = %v", err)
	}
	if _, err := w.Append(ctx, tpB, []byte("b1"), 1, 1); !errors.Is(err, wal.ErrHalted) {
		t.Fatalf("an append after the halt: %v, want ErrHalted", err)
	}
	w.Mark(tpB, 0, 1)
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := w.Close(cctx); err != nil {
		t.Fatalf("Close after the halt: %v", err)
	}
	// The tail the new leader reads ends at the fence; the writer put
	// nothing after it halted.
	if n := w.NextSequence(); n != 4 {
		t.Fatalf("the writer numbered up to %d after it halted", n-1)
	}
}

// TestCloseDeadlineFailsWhatLandedAbove: Close's deadline passes while a
// put is stuck; an object above it landed. Its appends are not
// acknowledged: the stuck number may hold a fence that claims them.
func TestCloseDeadlineFailsWhatLandedAbove(t *testing.T) {
	s, d := memStore(t)
	w, err := wal.NewWriter(s, wal.Options{Root: "root", CommitInterval: time.Hour, InFlight: 2})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	release := holdPut(d, w.Layout().Key(w.ID(), 1))
	defer release()
	a0, _ := w.Append(ctx, tpA, []byte("a0"), 0, 0)
	go w.Flush(ctx)
	waitFor(t, func() bool { return w.NextSequence() == 2 })
	b0, _ := w.Append(ctx, tpB, []byte("b0"), 0, 0)
	go w.Flush(ctx)
	waitLanded(t, s, w.Layout().Key(w.ID(), 2))
	cctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if err := w.Close(cctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Close with a put stuck: %v", err)
	}
	if err := waitAck(t, a0); !errors.Is(err, wal.ErrClosed) {
		t.Errorf("the stuck object's append: %v, want ErrClosed", err)
	}
	if err := waitAck(t, b0); err == nil || !errors.Is(err, wal.ErrClosed) {
		t.Errorf("the append landed above the stuck number: %v, want ErrClosed (not acknowledged)", err)
	}
	if err := w.Halted(); !errors.Is(err, wal.ErrClosed) {
		t.Errorf("Halted() = %v, want ErrClosed", err)
	}
}
