package tiered_test

import (
	"bytes"
	"errors"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/tierlog/tierlog/local"
	"github.com/tierlog/tierlog/manifest"
	"github.com/tierlog/tierlog/objstore"
	"github.com/tierlog/tierlog/objstore/mem"
	"github.com/tierlog/tierlog/testing/faultstore"
	"github.com/tierlog/tierlog/tiered"
)

// backups lists the manifest backups under tl/orders-0 by generation.
func backups(t *testing.T, store *objstore.Store) []uint64 {
	t.Helper()
	var gens []uint64
	for k := range objectKeys(t, store) {
		if o, err := manifest.NewLayout("tl/orders-0").Parse(k); err == nil && o.Kind == manifest.KindManifestBackup {
			gens = append(gens, o.Generation)
		}
	}
	return gens
}

// TestManifestBackupKeepsTwo: every commit backs its generation up, and
// the partition keeps the last two, byte for byte the manifest they
// were.
func TestManifestBackupKeepsTwo(t *testing.T) {
	store := objstore.New(mem.New(), "mem://backups", objstore.Options{})
	b := openTieredBackend(t, t.TempDir(), store, tiered.BackendOptions{})
	tp := openUploaded(t, b, 1, 2000)
	produce(t, tp, 6000)
	eventually(t, 20*time.Second, "more commits", func() bool { return tp.Head().Generation() >= 4 })
	if err := b.Close(); err != nil { // no commit after this: the bucket holds still
		t.Fatal(err)
	}
	gen := tp.Head().Generation()
	got := backups(t, store)
	if len(got) != 2 {
		t.Fatalf("backups of generations %v at generation %d, want the last two", got, gen)
	}
	for _, g := range got {
		if g != gen && g != gen-1 {
			t.Fatalf("backups of generations %v at generation %d, want %d and %d", got, gen, gen-1, gen)
		}
	}
	if !bytes.Equal(objectBytes(t, store, manifest.NewLayout("tl/orders-0").Backup(gen)), objectBytes(t, store, rollbackManifest)) {
		t.Fatal("the newest backup is not the manifest's bytes")
	}
}

// TestLostManifestIsRestored: a bucket that lost the manifest (as a MinIO
// cluster did when a client went away in the middle of its PUT) gets it
// back from its newest backup when the partition opens: the partition
// reads every record, in the bucket and on disk, and counts the restore.
// Without a backup at or above the recorded generation it is refused
// retryably, as before, deleting nothing; a read-only open restores
// nothing.
func TestLostManifestIsRestored(t *testing.T) {
	store := objstore.New(mem.New(), "mem://lost", objstore.Options{})
	dir := t.TempDir()
	b := openTieredBackend(t, dir, store, tiered.BackendOptions{})
	tp := openUploaded(t, b, 1, 2000)
	produce(t, tp, 6000)
	eventually(t, 20*time.Second, "the records were not offloaded and their local copies removed", func() bool {
		k, _ := tp.CopyLag()
		return k == 0 && tp.Offsets().LocalLogStart > 0
	})
	want := batchesFrom(t, tp, 0)
	if err := b.Close(); err != nil { // no commit after this: the bucket holds still
		t.Fatal(err)
	}
	gen, manifestBytes := tp.Head().Generation(), objectBytes(t, store, rollbackManifest)
	lose := func() {
		t.Helper()
		if err := store.Delete(ctx, rollbackManifest); err != nil {
			t.Fatal(err)
		}
	}

	// Read-only: refused, nothing written.
	lose()
	l, err := local.Open(filepath.Join(dir, "orders-0"), local.Options{Config: cfg(t, tieredCfg...), ReadOnly: true, LogStartOffset: 0, HighWatermark: -1})
	if err != nil {
		t.Fatal(err)
	}
	if ro, err := tiered.Open(ctx, l, tiered.Options{Store: store, Prefix: "tl/orders-0"}); err == nil {
		ro.Close()
		t.Fatal("a read-only open took a bucket without its manifest")
	}
	l.Close()
	if _, err := store.Head(ctx, rollbackManifest); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("a read-only open wrote the manifest: %v", err)
	}

	// The leader restores it.
	b = openTieredBackend(t, dir, store, tiered.BackendOptions{})
	p, err := b.Open(ctx, "orders", 0, cfg(t, tieredCfg...))
	if err != nil {
		t.Fatal(err)
	}
	tp = p.(*tiered.Partition)
	if err := tp.BecomeLeader(ctx, 2); err != nil {
		t.Fatal(err)
	}
	if err := tp.Attach(ctx); err != nil {
		t.Fatalf("attach to a bucket whose manifest is lost but backed up: %v", err)
	}
	if n := b.Metrics().ManifestsRestored.Load(); n != 1 {
		t.Fatalf("ManifestsRestored = %d, want 1", n)
	}
	if tp.Offsets().LogStart != 0 {
		t.Fatalf("log start %d after the restore, want 0", tp.Offsets().LogStart)
	}
	got := batchesFrom(t, tp, 0)
	if len(got) != len(want) {
		t.Fatalf("%d batches read after the restore, want %d", len(got), len(want))
	}
	for off, bt := range want {
		if !bytes.Equal(got[off], bt) {
			t.Fatalf("the batch at %d differs after the restore", off)
		}
	}
	// The manifest in the bucket, read once and judged by its own
	// generation: the backend's service may commit again meanwhile.
	raw := objectBytes(t, store, rollbackManifest)
	restored, err := manifest.DecodeHead(raw)
	if err != nil {
		t.Fatalf("the manifest after the restore: %v", err)
	}
	if g := restored.Generation(); g < gen {
		t.Fatalf("generation %d after the restore, below the lost one's %d", g, gen)
	} else if g == gen && !bytes.Equal(raw, manifestBytes) {
		t.Fatal("the restored manifest is not the backup's bytes")
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}

	// No backup new enough: refused, retryably, and nothing is deleted.
	lose()
	for _, g := range backups(t, store) {
		if err := store.Delete(ctx, manifest.NewLayout("tl/orders-0").Backup(g)); err != nil {
			t.Fatal(err)
		}
	}
	objects := objectKeys(t, store)
	b = openTieredBackend(t, dir, store, tiered.BackendOptions{})
	defer b.Close()
	p, err = b.Open(ctx, "orders", 0, cfg(t, tieredCfg...))
	if err == nil {
		err = p.(*tiered.Partition).Attach(ctx)
	}
	if !errors.Is(err, objstore.ErrRetryable) {
		t.Fatalf("attach without the manifest or a backup: %v; want a retryable refusal", err)
	}
	if l := lost(objects, objectKeys(t, store)); len(l) > 0 {
		t.Fatalf("the bucket lost %d objects: %v", len(l), l)
	}
}

// TestGCRemovesStaleBackups: a backup older than the last two (its
// delete failed) is gc's garbage, whatever its age; the last two stay.
func TestGCRemovesStaleBackups(t *testing.T) {
	store := objstore.New(mem.New(), "mem://stale-backups", objstore.Options{})
	b := openTieredBackend(t, t.TempDir(), store, tiered.BackendOptions{})
	tp := openUploaded(t, b, 1, 2000)
	produce(t, tp, 6000)
	eventually(t, 20*time.Second, "more commits", func() bool { return tp.Head().Generation() >= 4 })
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	stale := manifest.NewLayout("tl/orders-0").Backup(1)
	data := objectBytes(t, store, rollbackManifest)
	if _, err := store.Put(ctx, stale, bytes.NewReader(data), int64(len(data)), objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	kept := backups(t, store)
	removed, err := tiered.GC(ctx, store, "tl/orders-0", tiered.GCOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(removed) != 1 || removed[0] != stale {
		t.Fatalf("gc removed %v, want only the stale backup %s", removed, stale)
	}
	if got := backups(t, store); len(got) != len(kept)-1 {
		t.Fatalf("backups %v after gc, want the last two of %v", got, kept)
	}
}

// TestFollowerRestoresNothing: a follower whose bucket lost the manifest
// is refused retryably and writes nothing: only a leader restores.
func TestFollowerRestoresNothing(t *testing.T) {
	store := objstore.New(mem.New(), "mem://follower-lost", objstore.Options{})
	dir := t.TempDir()
	b := openTieredBackend(t, dir, store, tiered.BackendOptions{})
	openUploaded(t, b, 1, 2000)
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if err := store.Delete(ctx, rollbackManifest); err != nil {
		t.Fatal(err)
	}
	b = openTieredBackend(t, dir, store, tiered.BackendOptions{})
	defer b.Close()
	p, err := b.Open(ctx, "orders", 0, cfg(t, tieredCfg...))
	if err != nil {
		t.Fatal(err)
	}
	tp := p.(*tiered.Partition)
	if err := tp.BecomeFollower(ctx, 2); err != nil {
		t.Fatal(err)
	}
	if err := tp.Attach(ctx); !errors.Is(err, objstore.ErrRetryable) {
		t.Fatalf("a follower's attach without the manifest: %v; want a retryable refusal", err)
	}
	if _, err := store.Head(ctx, rollbackManifest); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("a follower wrote the manifest: %v", err)
	}
	if n := b.Metrics().ManifestsRestored.Load(); n != 0 {
		t.Fatalf("ManifestsRestored = %d on a follower", n)
	}
}

// TestNothingDeletedWithoutABackup: while the manifest's backups cannot be
// written, the commits go on (uploads land) but nothing is deleted on
// their strength: local copies stay, so the newest backup never trails a
// deletion. Once the backups can be written the next change writes the
// due one and local retention goes on.
func TestNothingDeletedWithoutABackup(t *testing.T) {
	fs := faultstore.Wrap(mem.New(), 1, faultstore.Rule{Op: objstore.OpPut, KeyContains: "/manifest.", Probability: 1, Fault: faultstore.Permanent})
	store := objstore.New(fs, "mem://no-backups", objstore.Options{})
	b := openTieredBackend(t, t.TempDir(), store, tiered.BackendOptions{})
	tp := openUploaded(t, b, 1, 2000)
	produce(t, tp, 4000)
	eventually(t, 20*time.Second, "more commits", func() bool {
		k, _ := tp.CopyLag()
		return k == 0 && tp.Head().Generation() >= 2
	})
	_, _ = tp.Offload(ctx)
	if o := tp.Offsets(); o.LocalLogStart != 0 {
		t.Fatalf("local retention removed offsets below %d while no backup could be written", o.LocalLogStart)
	}
	if n := b.Metrics().ManifestBackupErrors.Load(); n == 0 {
		t.Fatal("no backup error counted")
	}
	if got := backups(t, store); len(got) != 0 {
		t.Fatalf("backups %v written through a store that refuses them", got)
	}
	fs.SetEnabled(false)
	eventually(t, 20*time.Second, "local retention after the backups came back", func() bool {
		_, _ = tp.Offload(ctx)
		return tp.Offsets().LocalLogStart > 0
	})
	gen := tp.Head().Generation()
	if got := backups(t, store); !slices.Contains(got, gen) {
		t.Fatalf("backups %v, want one of generation %d", got, gen)
	}
}

// TestGCRefusesALostManifestWithBackups: gc, even with NoManifestOK,
// removes nothing from a prefix whose manifest is gone while its backup
// is there (a restore brings back what it names); with RemovePastEnd it
// removes backups above the manifest's generation (a newer bucket given
// up for an accepted older one).
func TestGCRefusesALostManifestWithBackups(t *testing.T) {
	store := objstore.New(mem.New(), "mem://gc-lost", objstore.Options{})
	b := openTieredBackend(t, t.TempDir(), store, tiered.BackendOptions{})
	tp := openUploaded(t, b, 1, 2000)
	produce(t, tp, 6000)
	eventually(t, 20*time.Second, "more commits", func() bool { return tp.Head().Generation() >= 4 })
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	manifestBytes := objectBytes(t, store, rollbackManifest)
	if err := store.Delete(ctx, rollbackManifest); err != nil {
		t.Fatal(err)
	}
	objects := objectKeys(t, store)
	if _, err := tiered.GC(ctx, store, "tl/orders-0", tiered.GCOptions{NoManifestOK: true}); !errors.Is(err, tiered.ErrNoManifest) {
		t.Fatalf("gc of a prefix that lost its manifest but holds its backup: %v; want ErrNoManifest", err)
	}
	if l := lost(objects, objectKeys(t, store)); len(l) > 0 {
		t.Fatalf("gc removed %v", l)
	}
	// Put back an older manifest (generation 2), as an accepted rollback
	// leaves the bucket: RemovePastEnd removes the newer backups.
	m, err := manifest.Decode(manifestBytes)
	if err != nil {
		t.Fatal(err)
	}
	m.Generation = 2
	data, err := m.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Put(ctx, rollbackManifest, bytes.NewReader(data), int64(len(data)), objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := tiered.GC(ctx, store, "tl/orders-0", tiered.GCOptions{RemovePastEnd: true}); err != nil {
		t.Fatal(err)
	}
	for _, g := range backups(t, store) {
		if g > 2 {
			t.Fatalf("backups %v after gc with RemovePastEnd over generation 2", backups(t, store))
		}
	}
}
