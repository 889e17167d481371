package tiered_test

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/local"
	"github.com/tierlog/tierlog/manifest"
	"github.com/tierlog/tierlog/objstore"
	"github.com/tierlog/tierlog/objstore/mem"
	"github.com/tierlog/tierlog/tiered"
)

// TestWrongBucketOfARecreatedPartition: the wrong bucket holds a
// partition of the same name that was deleted and created anew (Born 41)
// above the generation this directory recorded. Its lineage is not this
// partition's: the directory refuses it and commits nothing into it (the
// lineage check once gave way to the deletion's rules there, and the
// directory adopted the other partition's manifest and committed its own
// segments into it).
func TestWrongBucketOfARecreatedPartition(t *testing.T) {
	c := cfg(t, tieredCfg...)
	right := objstore.New(mem.New(), "mem://right", objstore.Options{})
	wrong := objstore.New(mem.New(), "mem://wrong", objstore.Options{})
	dir := filepath.Join(t.TempDir(), "orders-0")
	p := open(t, dir, right, 1, c)
	produce(t, p, 1000)
	if _, err := p.Offload(ctx); err != nil {
		t.Fatal(err)
	}
	mine := manifestOf(t, p)
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	rec, _, _ := local.ReadTierState(dir)

	// The other cluster's orders-0: deleted at generation 40, created anew.
	del, err := (&manifest.Manifest{Generation: 40, WriterEpoch: 1, Deleted: true}).Encode()
	if err != nil {
		t.Fatal(err)
	}
	key := "tl/orders-0/manifest"
	if _, err := wrong.Put(ctx, key, bytes.NewReader(del), int64(len(del)), objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	other := open(t, filepath.Join(t.TempDir(), "orders-0"), wrong, 1, c)
	produce(t, other, 1000)
	if _, err := other.Offload(ctx); err != nil {
		t.Fatal(err)
	}
	theirs := manifestOf(t, other)
	other.Close()
	if theirs.Born <= rec.Generation || theirs.Lineage == mine.Lineage {
		t.Fatalf("setup: theirs born %d lineage %x; recorded generation %d", theirs.Born, theirs.Lineage, rec.Generation)
	}
	before := objectBytes(t, wrong, key)

	err = offloadOver(t, dir, c, wrong, 2, func(p *tiered.Partition) {
		produce(t, p, 1000)
		p.Roll()
	})
	st, _, _ := local.ReadTierState(dir)
	t.Logf("recorded before: gen %d lineage %x; after: gen %d born %d lineage %x; theirs born %d lineage %x",
		rec.Generation, rec.Lineage, st.Generation, st.Born, st.Lineage, theirs.Born, theirs.Lineage)
	if err == nil || !strings.Contains(err.Error(), "another partition's") {
		t.Errorf("a directory of lineage %x over another partition's bucket (lineage %x, born %d): %v; want it refused",
			mine.Lineage, theirs.Lineage, theirs.Born, err)
	}
	if !bytes.Equal(objectBytes(t, wrong, key), before) {
		t.Errorf("the directory committed into the other partition's manifest")
	}
}

// TestWrongBucketWithADeletedPartition: the wrong bucket holds a deleted
// partition of the same name at a higher generation, with no lineage: at
// or past the recorded generation every manifest of this partition carries
// its lineage, so the directory refuses it as another partition's (it
// once adopted it, recorded its generation without a lineage, and then
// refused the right bucket as gone back in time); with the store URL
// fixed, the right bucket opens.
func TestWrongBucketWithADeletedPartition(t *testing.T) {
	c := cfg(t, tieredCfg...)
	right := objstore.New(mem.New(), "mem://right", objstore.Options{})
	wrong := objstore.New(mem.New(), "mem://wrong", objstore.Options{})
	dir := filepath.Join(t.TempDir(), "orders-0")
	p := open(t, dir, right, 1, c)
	produce(t, p, 1000)
	if _, err := p.Offload(ctx); err != nil {
		t.Fatal(err)
	}
	p.Close()
	del, _ := (&manifest.Manifest{Generation: 40, WriterEpoch: 1, Deleted: true}).Encode()
	if _, err := wrong.Put(ctx, "tl/orders-0/manifest", bytes.NewReader(del), int64(len(del)), objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	err := offloadOver(t, dir, c, wrong, 2, nil)
	st, _, _ := local.ReadTierState(dir)
	t.Logf("record after: %+v; err: %v", st, err)
	if err == nil || !strings.Contains(err.Error(), "another partition's") {
		t.Errorf("over another partition's deleted manifest: %v; want it refused as another partition's", err)
	}
	// The store URL fixed: the right bucket must open again.
	err = offloadOver(t, dir, c, right, 3, nil)
	if err != nil {
		t.Errorf("the right bucket after the wrong one was tried: %v", err)
	}
}

// stripLineage rewrites the bucket's manifest and dir's record as a build
// before lineages left them.
func stripLineage(t *testing.T, store *objstore.Store, dirs ...string) {
	t.Helper()
	m, err := manifest.Decode(objectBytes(t, store, "tl/orders-0/manifest"))
	if err != nil {
		t.Fatal(err)
	}
	m.Lineage = [8]byte{}
	data, err := m.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Put(ctx, "tl/orders-0/manifest", bytes.NewReader(data), int64(len(data)), objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, d := range dirs {
		st, ok, err := local.ReadTierState(d)
		if err != nil || !ok {
			t.Fatalf("%s: %v %v", d, ok, err)
		}
		st.Lineage = [8]byte{}
		if err := local.WriteTierState(d, st); err != nil {
			t.Fatal(err)
		}
	}
}

// TestLineageGivenOnUpgrade: a partition written before lineages
// (manifest and both replicas' records without one); the leader's next
// commit gives it one, the follower adopts and records it, and leadership
// moving back and forth is never refused.
func TestLineageGivenOnUpgrade(t *testing.T) {
	c := cfg(t, tieredCfg...)
	store := objstore.New(mem.New(), "mem://upgrade", objstore.Options{})
	adir, bdir := filepath.Join(t.TempDir(), "orders-0"), filepath.Join(t.TempDir(), "orders-0")
	a := open(t, adir, store, 1, c)
	produce(t, a, 1000)
	if _, err := a.Offload(ctx); err != nil {
		t.Fatal(err)
	}
	b := open(t, bdir, store, 0, c)
	if err := b.BecomeFollower(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if err := b.FollowerStep(ctx); err != nil {
		t.Fatal(err)
	}
	a.Close()
	b.Close()
	stripLineage(t, store, adir, bdir)

	a = open(t, adir, store, 2, c)
	produce(t, a, 500)
	a.Roll()
	if _, err := a.Offload(ctx); err != nil {
		t.Fatal(err)
	}
	lin := manifestOf(t, a).Lineage
	if lin == ([8]byte{}) {
		t.Fatal("no lineage given")
	}
	b = open(t, bdir, store, 0, c)
	if err := b.BecomeFollower(ctx, 2); err != nil {
		t.Fatal(err)
	}
	if err := b.FollowerStep(ctx); err != nil {
		t.Fatalf("follower: %v", err)
	}
	if st, _, _ := local.ReadTierState(bdir); st.Lineage != lin {
		t.Fatalf("follower recorded %x, want %x", st.Lineage, lin)
	}
	a.Close()
	if err := b.BecomeLeader(ctx, 3); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Offload(ctx); err != nil {
		t.Fatalf("new leader: %v", err)
	}
	b.Close()
	a = open(t, adir, store, 0, c)
	defer a.Close()
	if err := a.BecomeFollower(ctx, 3); err != nil {
		t.Fatal(err)
	}
	if err := a.FollowerStep(ctx); err != nil {
		t.Fatalf("old leader as follower: %v", err)
	}
}

// TestRollbackAcrossTheUpgradeIsNotForeign: a bucket rolled back to a
// manifest written before lineages (an older generation of this very
// partition) is refused as a bucket gone back in time, not as another
// partition's.
func TestRollbackAcrossTheUpgradeIsNotForeign(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "orders-0")
	c := cfg(t, "segment.bytes", "65536", "retention.ms", "-1")
	l, err := local.Open(dir, local.Options{Config: c, LogStartOffset: -1, HighWatermark: -1})
	if err != nil {
		t.Fatal(err)
	}
	produce(t, l, 100)
	l.Close()
	seg := manifest.Segment{BaseOffset: 0, LastOffset: 49, Size: 1, Records: 50}
	if err := local.WriteTierState(dir, local.TierState{Generation: 10, RemoteEnd: 50, Lineage: [8]byte{1, 2, 3, 4, 5, 6, 7, 8}}); err != nil {
		t.Fatal(err)
	}
	store := objstore.New(mem.New(), "mem://judge", objstore.Options{})
	data, _ := (&manifest.Manifest{Generation: 9, Segments: []manifest.Segment{seg}}).Encode()
	if _, err := store.Put(ctx, "tl/orders-0/manifest", bytes.NewReader(data), int64(len(data)), objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	l, err = local.Open(dir, local.Options{Config: c, ReadOnly: true, LogStartOffset: -1, HighWatermark: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	a, err := tiered.PlanAcceptance(ctx, store, "tl/orders-0", l)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(a.Refusal, "older than generation 10") {
		t.Errorf("refusal %q; want it named a rollback (older than generation 10)", a.Refusal)
	}
}

// offloadOver opens the partition directory dir over store, leading at
// epoch, attaches it, runs before (when set), and offloads; it returns
// the first error, the partition closed.
func offloadOver(t *testing.T, dir string, c backend.Config, store *objstore.Store, epoch int32, before func(*tiered.Partition)) error {
	t.Helper()
	l, err := local.Open(dir, local.Options{Config: c, LogStartOffset: -1, HighWatermark: -1})
	if err != nil {
		t.Fatal(err)
	}
	p, err := tiered.Open(ctx, l, tiered.Options{Store: store, Prefix: "tl/orders-0", LeaderEpoch: epoch})
	if err != nil {
		l.Close()
		return err
	}
	defer p.Close()
	if err := p.Attach(ctx); err != nil {
		return err
	}
	if before != nil {
		before(p)
	}
	_, err = p.Offload(ctx)
	return err
}
