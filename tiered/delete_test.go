package tiered_test

// Deleting a tiered partition, and creating one of the same name again:
// nothing of the new partition is removed by the old deletion, and nothing
// of the old partition comes back into the new one.

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/manifest"
	"github.com/tierlog/tierlog/objstore"
	"github.com/tierlog/tierlog/objstore/mem"
	"github.com/tierlog/tierlog/testing/faultstore"
	"github.com/tierlog/tierlog/tiered"
)

// openUploaded opens orders-0 on b as a tiered leader at epoch, produces n
// records and waits until every closed segment is committed.
func openUploaded(t *testing.T, b *tiered.Backend, epoch int32, n int, kv ...string) *tiered.Partition {
	t.Helper()
	if len(kv) == 0 {
		kv = tieredCfg
	}
	p, err := b.Open(ctx, "orders", 0, cfg(t, kv...))
	if err != nil {
		t.Fatal(err)
	}
	tp := p.(*tiered.Partition)
	if err := tp.BecomeLeader(ctx, epoch); err != nil {
		t.Fatal(err)
	}
	produce(t, p, n)
	eventually(t, 10*time.Second, "nothing uploaded", func() bool {
		k, _ := tp.CopyLag()
		m := manifestOf(t, tp)
		return k == 0 && m.Generation > 0 && !m.Deleted && len(m.Segments) > 0
	})
	return tp
}

// missingObjects lists the objects m names under tl/orders-0 that the
// bucket (a Driver or a Store) lacks.
func missingObjects(t *testing.T, bucket interface {
	Head(context.Context, string) (objstore.ObjectInfo, error)
}, m *manifest.Manifest) []string {
	t.Helper()
	var missing []string
	for _, s := range m.Segments {
		for _, suf := range s.Objects() {
			key := "tl/orders-0/" + s.Name(suf)
			if _, err := bucket.Head(ctx, key); err != nil {
				missing = append(missing, key)
			}
		}
	}
	return missing
}

// TestDeleteDoesNotRemoveRecreatedPartitionsObjects: Delete removes the
// objects under the prefix (removeObjects) after it committed the deleted
// manifest, holding no lock. A partition of the same name created again
// meanwhile (here on the same Backend; equally on another broker) claims
// from the deleted manifest, uploads and commits: the old deletion must
// not remove what the new manifest names.
func TestDeleteDoesNotRemoveRecreatedPartitionsObjects(t *testing.T) {
	bucket := mem.New()
	drv := faultstore.Wrap(bucket, 0)
	store := objstore.New(drv, "mem://review-delete-race", objstore.Options{MaxAttempts: 1})
	b := openTieredBackend(t, t.TempDir(), store, tiered.BackendOptions{})
	openUploaded(t, b, 1, 2000)

	// The next List (Delete's, of the prefix) waits for release.
	entered, release := make(chan struct{}), make(chan struct{})
	drv.Add(faultstore.Rule{Op: objstore.OpList, Nth: 1, Fault: faultstore.Hook, Hook: func(objstore.Op, string) {
		close(entered)
		<-release
	}})
	errc := make(chan error, 1)
	go func() { errc <- b.Delete(ctx, "orders", 0) }()
	select {
	case <-entered:
	case err := <-errc:
		t.Fatalf("Delete returned before listing the prefix: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("Delete never listed the prefix")
	}

	// The topic is re-created while the old deletion is between its
	// deleted-manifest commit and its object removal.
	p2 := openUploaded(t, b, 1, 2000)
	if missing := missingObjects(t, bucket, manifestOf(t, p2)); len(missing) != 0 {
		t.Fatalf("before the old Delete finishes, the new partition already lacks %v", missing)
	}
	close(release)
	if err := <-errc; err != nil {
		t.Logf("old Delete: %v", err)
	}
	if missing := missingObjects(t, bucket, manifestOf(t, p2)); len(missing) != 0 {
		t.Fatalf("the old partition's Delete removed %d objects the re-created partition's committed manifest (generation %d) names, e.g. %s: data loss",
			len(missing), p2.Head().Generation(), missing[0])
	}
}

// TestDeleteRetryFinishesObjectRemoval: a Delete whose object removal
// fails says a later Delete finishes; the later one, finding the manifest
// deleted and the local directory gone, removes the objects (no partition
// leads the prefix, so no service gc would).
func TestDeleteRetryFinishesObjectRemoval(t *testing.T) {
	bucket := mem.New()
	drv := faultstore.Wrap(bucket, 0)
	store := objstore.New(drv, "mem://review-delete-retry", objstore.Options{MaxAttempts: 1})
	b := openTieredBackend(t, t.TempDir(), store, tiered.BackendOptions{})
	openUploaded(t, b, 1, 2000)

	failDeletes := drv.Add(faultstore.Rule{Op: objstore.OpDelete, Every: 1, Fault: faultstore.FailBefore})
	err := b.Delete(ctx, "orders", 0)
	if err == nil {
		t.Fatal("Delete succeeded with every object delete failing")
	}
	t.Logf("first Delete (object removal fails): %v", err)
	failDeletes.Remove()

	err2 := b.Delete(ctx, "orders", 0)
	t.Logf("second Delete: %v", err2)
	objs, _, _ := bucket.List(ctx, "tl/orders-0/", "", 100000)
	if len(objs) != 1 {
		t.Fatalf("after a retried Delete (err %v), %d objects remain under the deleted partition's prefix (want its deleted manifest only): the later Delete did not finish", err2, len(objs))
	}
	if err2 != nil && !errors.Is(err2, backend.ErrNotFound) {
		t.Fatalf("second Delete: %v", err2)
	}
}

// TestStaleWriterCannotClaimRecreatedPartition: a writer that knew the
// partition before its deletion must not bring it back. Once a new
// partition of the same name has claimed (at the new partition's epoch 1),
// the stale writer at epoch 5 finds a live manifest of an older epoch; it
// is fenced (the manifest was born after the generation it knew), or
// refuses the manifest as another partition's (its lineage is the new
// incarnation's), and commits nothing of the deleted partition's records.
func TestStaleWriterCannotClaimRecreatedPartition(t *testing.T) {
	drv := mem.New()
	store := objstore.New(drv, "mem://review-stale", objstore.Options{MaxAttempts: 1})
	b := openTieredBackend(t, t.TempDir(), store, tiered.BackendOptions{})
	openUploaded(t, b, 1, 2000)

	// A writer from before the deletion (another broker, epoch 5), which
	// read the live manifest.
	stale := open(t, t.TempDir()+"/orders-0", objstore.New(drv, "mem://review-stale-2", objstore.Options{}), 5, cfg(t, "segment.bytes", "65536"))
	defer stale.Close()

	if err := b.Delete(ctx, "orders", 0); err != nil {
		t.Fatal(err)
	}
	p2 := openUploaded(t, b, 1, 1000)
	gen := p2.Head().Generation()

	produce(t, stale, 4000) // the old incarnation's records, past the new one's end
	_, err := stale.Offload(ctx)
	m, rerr := tiered.ReadManifest(ctx, store, "tl/orders-0")
	if rerr != nil {
		t.Fatal(rerr)
	}
	if !(errors.Is(err, backend.ErrFenced) || errors.Is(err, backend.ErrManifestRolledBack)) || m.WriterEpoch != 1 || m.Generation != gen {
		t.Fatalf("a writer from before the deletion (epoch 5) offloaded into the re-created partition: err %v; the manifest is now generation %d (was %d) by epoch %d with %d segments (last offset %d; the new partition has %d records)",
			err, m.Generation, gen, m.WriterEpoch, len(m.Segments), m.Segments[len(m.Segments)-1].LastOffset, p2.Offsets().LogEnd)
	}
}

// TestRestartAfterDeletionDoesNotResurrect: another broker's Delete has
// committed the deleted manifest and removed the objects (the state a
// crash of this broker between the deleted manifest and its local delete
// leaves too), while this broker's local directory still holds the
// partition. Opening and leading it must not publish the deleted records
// again: the claim over the deleted manifest is refused, naming the local
// directory.
func TestRestartAfterDeletionDoesNotResurrect(t *testing.T) {
	keep := []string{"segment.bytes", "65536", "retention.ms", "-1", "file.delete.delay.ms", "0", "remote.storage.enable", "true"}
	store := objstore.New(mem.New(), "mem://review-restart", objstore.Options{MaxAttempts: 1})
	dir := t.TempDir()
	b := openTieredBackend(t, dir, store, tiered.BackendOptions{})
	openUploaded(t, b, 1, 2000, keep...)
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}

	other := openTieredBackend(t, t.TempDir(), store, tiered.BackendOptions{})
	if err := other.Delete(ctx, "orders", 0); err != nil {
		t.Fatal(err)
	}
	if m, err := tiered.ReadManifest(ctx, store, "tl/orders-0"); err != nil || !m.Deleted {
		t.Fatalf("manifest after delete: %+v %v", m, err)
	}

	b = openTieredBackend(t, dir, store, tiered.BackendOptions{})
	p, err := b.Open(ctx, "orders", 0, cfg(t, keep...))
	if err != nil {
		t.Fatal(err)
	}
	tp := p.(*tiered.Partition)
	if err := tp.BecomeLeader(ctx, 2); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the claim over the deleted manifest was not refused", func() bool { return tp.Fenced() != nil })
	if err := tp.Fenced(); !errors.Is(err, backend.ErrFenced) || !strings.Contains(err.Error(), "deleted") || !strings.Contains(err.Error(), dir) {
		t.Fatalf("fenced with %v; want ErrFenced saying the partition was deleted and naming %s", err, dir)
	}
	m, err := tiered.ReadManifest(ctx, store, "tl/orders-0")
	if err != nil {
		t.Fatal(err)
	}
	if !m.Deleted || len(m.Segments) > 0 {
		t.Fatalf("the deleted partition came back: manifest generation %d, deleted=%v, %d segments (offsets %d..%d) re-uploaded from the old local log; fenced=%v",
			m.Generation, m.Deleted, len(m.Segments), m.LogStartOffset, func() int64 {
				if len(m.Segments) == 0 {
					return -1
				}
				return m.Segments[len(m.Segments)-1].LastOffset
			}(), tp.Fenced())
	}
}

// TestRecreatedPartitionKeepsItsOwnStart: a partition created anew under
// a deleted one's name, before its leader claims the bucket, reads the
// deleted manifest, whose log start is where the deleted partition's
// records ended. Neither its offsets nor a follower's step take that log
// start for its own: the new records stay, readable from offset 0.
func TestRecreatedPartitionKeepsItsOwnStart(t *testing.T) {
	store := objstore.New(mem.New(), "mem://recreated-start", objstore.Options{})
	b := openTieredBackend(t, t.TempDir(), store, tiered.BackendOptions{})
	openUploaded(t, b, 1, 2000)
	if err := b.Delete(ctx, "orders", 0); err != nil {
		t.Fatal(err)
	}
	if m, err := tiered.ReadManifest(ctx, store, "tl/orders-0"); err != nil || !m.Deleted || m.LogStartOffset == 0 {
		t.Fatalf("the deleted manifest: %+v, %v; want deleted, with the old partition's end as its log start", m, err)
	}
	p, err := b.Open(ctx, "orders", 0, cfg(t, tieredCfg...))
	if err != nil {
		t.Fatal(err)
	}
	tp := p.(*tiered.Partition)
	if err := tp.BecomeFollower(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if err := tp.Attach(ctx); err != nil {
		t.Fatal(err)
	}
	produce(t, p, 300)
	if err := p.SetHighWatermark(p.Offsets().LogEnd); err != nil {
		t.Fatal(err)
	}
	if o := p.Offsets(); o.LogStart != 0 || o.LogEnd != 300 {
		t.Fatalf("offsets of the new partition: %+v; want it to start at 0 and end at 300", o)
	}
	if err := tp.FollowerStep(ctx); err != nil {
		t.Fatal(err)
	}
	if o := p.Offsets(); o.LogStart != 0 || o.LocalLogStart != 0 {
		t.Fatalf("after a follower step: %+v; the new records must stay from 0", o)
	}
	if got := batchesFrom(t, p, 0); len(got) == 0 {
		t.Fatal("nothing reads back from offset 0")
	}
}
