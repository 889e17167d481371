package tiered_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/tierlog/tierlog/local"
	"github.com/tierlog/tierlog/manifest"
	"github.com/tierlog/tierlog/objstore"
	"github.com/tierlog/tierlog/objstore/mem"
	"github.com/tierlog/tierlog/testing/faultstore"
	"github.com/tierlog/tierlog/tiered"
)

// TestGCKeepsThePartsOfACommitInFlight: a writer with a commit window
// of 3h (allowed; intents carry their window, so gc honours it for
// segment objects) bounds its head's PUT at 2h55m after its new part's
// put. gc judges an unnamed part by its grace alone (default and floor
// 1h): 61 minutes into a slow head PUT, gc removes the part, then the
// head lands naming it, and the committed manifest is corrupt.
func TestGCKeepsThePartsOfACommitInFlight(t *testing.T) {
	fs := faultstore.Wrap(mem.New(), 1)
	store := objstore.New(fs, "mem://window", objstore.Options{})
	l, err := local.Open(filepath.Join(t.TempDir(), "orders-0"), local.Options{Config: cfg(t), LogStartOffset: -1, HighWatermark: -1})
	if err != nil {
		t.Fatal(err)
	}
	p, err := tiered.Open(ctx, l, tiered.Options{Store: store, Prefix: "tl/orders-0", LeaderEpoch: 1, CommitWindow: 3 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ts := time.Now().UnixMilli()
	if err := tiered.CommitSegments(ctx, p, synthSegments(0, 16, ts)); err != nil { // the head holds them: no part
		t.Fatal(err)
	}
	release, blocked := make(chan struct{}), make(chan struct{})
	h := fs.Add(faultstore.Rule{Op: objstore.OpPut, KeySuffix: "/manifest", Nth: 1, Fault: faultstore.Hook,
		Before: func(ctx context.Context, c faultstore.Call) error { close(blocked); <-release; return nil }})
	done := make(chan error, 1)
	go func() { done <- tiered.CommitSegments(ctx, p, synthSegments(16*100, 1, ts)) }() // 17: a tier 0 part
	<-blocked
	h.Remove()
	// gc while the head's PUT is in flight, 61 minutes after the part's
	// put (well inside the writer's 2h55m bound).
	gone, err := tiered.GC(ctx, store, "tl/orders-0", tiered.GCOptions{Now: func() time.Time { return time.Now().Add(61 * time.Minute) }})
	t.Logf("gc removed %v (%v)", gone, err)
	close(release)
	if err := <-done; err != nil {
		t.Fatalf("the commit: %v", err)
	}
	if _, err := tiered.ReadManifest(ctx, store, "tl/orders-0"); err != nil {
		t.Fatalf("the committed manifest does not read: %v (corrupt: %v)", err, errors.Is(err, manifest.ErrCorrupt))
	}
}

// TestForcedGCKeepsThePartsOfACommitInFlight: before version 3 a
// forced short grace (documented as safe when no writer of an older
// tierlog uploads) could not remove what a current writer's commit in
// flight names: its intent protects it. A new part has no intent: gc
// with Grace 1m and Force removes it 2 minutes into the head's PUT.
func TestForcedGCKeepsThePartsOfACommitInFlight(t *testing.T) {
	fs := faultstore.Wrap(mem.New(), 1)
	store := objstore.New(fs, "mem://force", objstore.Options{})
	p := open(t, filepath.Join(t.TempDir(), "orders-0"), store, 1, cfg(t))
	defer p.Close()
	ts := time.Now().UnixMilli()
	if err := tiered.CommitSegments(ctx, p, synthSegments(0, 16, ts)); err != nil {
		t.Fatal(err)
	}
	release, blocked := make(chan struct{}), make(chan struct{})
	h := fs.Add(faultstore.Rule{Op: objstore.OpPut, KeySuffix: "/manifest", Nth: 1, Fault: faultstore.Hook,
		Before: func(ctx context.Context, c faultstore.Call) error { close(blocked); <-release; return nil }})
	done := make(chan error, 1)
	go func() { done <- tiered.CommitSegments(ctx, p, synthSegments(16*100, 1, ts)) }()
	<-blocked
	h.Remove()
	gone, err := tiered.GC(ctx, store, "tl/orders-0", tiered.GCOptions{Grace: time.Minute, Force: true,
		Now: func() time.Time { return time.Now().Add(2 * time.Minute) }})
	t.Logf("gc removed %v (%v)", gone, err)
	close(release)
	if err := <-done; err != nil {
		t.Fatalf("the commit: %v", err)
	}
	if _, err := tiered.ReadManifest(ctx, store, "tl/orders-0"); err != nil {
		t.Fatalf("the committed manifest does not read: %v", err)
	}
}

// TestPartsCommitUsesTheOptionsClock: putPartsLocked makes an
// absolute context deadline from Options.Now (the injectable clock), while
// the context runs on the real clock. A clock 2h behind (a test's or a
// broker's simulated time) makes every commit that writes a part fail
// with the deadline already passed; one ahead stretches the bound past
// what gc allows. commitInWindowLocked uses a duration (end.Sub(now)),
// which does not have this problem.
func TestPartsCommitUsesTheOptionsClock(t *testing.T) {
	store := objstore.New(mem.New(), "mem://clock", objstore.Options{})
	l, err := local.Open(filepath.Join(t.TempDir(), "orders-0"), local.Options{Config: cfg(t), LogStartOffset: -1, HighWatermark: -1})
	if err != nil {
		t.Fatal(err)
	}
	p, err := tiered.Open(ctx, l, tiered.Options{Store: store, Prefix: "tl/orders-0", LeaderEpoch: 1,
		Now: func() time.Time { return time.Now().Add(-2 * time.Hour) }})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := tiered.CommitSegments(ctx, p, synthSegments(0, 17, time.Now().UnixMilli())); err != nil {
		t.Fatalf("a commit of 17 segments (one part) with the clock 2h behind: %v", err)
	}
}

// TestDeleteWithALostPart: a partition whose manifest names a part the
// bucket lost is still deleted: the deletion reads the head alone.
func TestDeleteWithALostPart(t *testing.T) {
	store := objstore.New(mem.New(), "mem://delete-lost-part", objstore.Options{})
	b, err := tiered.OpenBackend(t.TempDir(), tiered.BackendOptions{Store: store, Prefix: "tl"})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	bp, err := b.Open(ctx, "orders", 0, cfg(t, "remote.storage.enable", "true"))
	if err != nil {
		t.Fatal(err)
	}
	p := bp.(*tiered.Partition)
	if err := p.BecomeLeader(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if err := tiered.CommitSegments(ctx, p, synthSegments(0, 40, time.Now().UnixMilli())); err != nil {
		t.Fatal(err)
	}
	part := manifestOf(t, p).Parts[0]
	if err := store.Delete(ctx, "tl/orders-0/"+part.Name()); err != nil {
		t.Fatal(err)
	}
	if err := b.Delete(ctx, "orders", 0); err != nil {
		t.Fatalf("delete a partition whose part the bucket lost: %v", err)
	}
	m, err := tiered.ReadManifest(ctx, store, "tl/orders-0")
	if err != nil || !m.Deleted {
		t.Fatalf("after the delete: %+v %v", m, err)
	}
}
