package tiered_test

// A bucket that goes back in time (a restored backup, a versioning
// rollback, a failover to a lagging replica) puts an older manifest under
// the partition's key. The partition must refuse it, go offline and delete
// nothing, until an operator accepts the older bucket explicitly.

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/local"
	"github.com/tierlog/tierlog/objstore"
	"github.com/tierlog/tierlog/objstore/mem"
	"github.com/tierlog/tierlog/tiered"
)

const rollbackManifest = "tl/orders-0/manifest"

// objectBytes returns the object under key.
func objectBytes(t *testing.T, store *objstore.Store, key string) []byte {
	t.Helper()
	rc, _, err := store.Get(ctx, key, 0, -1)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	data, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// objectKeys lists the bucket's keys.
func objectKeys(t *testing.T, store *objstore.Store) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	if err := store.List(ctx, "", func(o objstore.ObjectInfo) bool { out[o.Key] = true; return true }); err != nil {
		t.Fatal(err)
	}
	return out
}

// segmentFiles lists a partition directory's .log files, each with its
// size: what holds records. (Producer snapshots come and go with opens
// and closes; indexes are rebuilt from the .log.)
func segmentFiles(t *testing.T, dir string) map[string]bool {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, e := range ents {
		if filepath.Ext(e.Name()) == ".log" {
			info, err := e.Info()
			if err != nil {
				t.Fatal(err)
			}
			out[fmt.Sprintf("%s (%d bytes)", e.Name(), info.Size())] = true
		}
	}
	return out
}

// lost lists the names of before that after lacks.
func lost(before, after map[string]bool) []string {
	var out []string
	for k := range before {
		if !after[k] {
			out = append(out, k)
		}
	}
	return out
}

// rolledBack sets up the rollback: 2,000 records offloaded (the manifest
// copied then), 6,000 more offloaded and their older local segments
// removed by local retention, the Backend closed and the old manifest put
// back. It returns the log directory, the two generations and what the
// bucket and the partition directory hold after the rollback.
type rollback struct {
	dir              string
	oldGen, newGen   uint64
	objects, files   map[string]bool
	oldManifestBytes []byte
}

func rollBack(t *testing.T, store *objstore.Store) rollback {
	t.Helper()
	dir := t.TempDir()
	b := openTieredBackend(t, dir, store, tiered.BackendOptions{})
	tp := openUploaded(t, b, 1, 2000)
	rb := rollback{dir: dir, oldGen: tp.Head().Generation(), oldManifestBytes: objectBytes(t, store, rollbackManifest)}
	oldEnd := manifestOf(t, tp).Segments[len(manifestOf(t, tp).Segments)-1].LastOffset
	produce(t, tp, 6000)
	eventually(t, 20*time.Second, "the second 6,000 records were not offloaded and their local copies removed", func() bool {
		k, _ := tp.CopyLag()
		return k == 0 && tp.Offsets().LocalLogStart > oldEnd+1 && tp.Head().Generation() > rb.oldGen
	})
	rb.newGen = tp.Head().Generation()
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Put(ctx, rollbackManifest, bytes.NewReader(rb.oldManifestBytes), int64(len(rb.oldManifestBytes)), objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	rb.objects = objectKeys(t, store)
	rb.files = segmentFiles(t, filepath.Join(dir, "orders-0"))
	return rb
}

// TestRolledBackManifestIsRefused: after the rollback and a restart, the
// partition leading at a new epoch refuses the older manifest: it goes
// offline with an error naming both generations (KAFKA_STORAGE_ERROR to a
// client), counts it, and no record, object or local file is lost; the
// log start stays 0.
//
// Without a tier-state-checkpoint (a partition directory written before
// it existed) the log-start-offset-checkpoint alone shows the hole: the
// partition begins at 0, below its local log, where the bucket does not
// reach.
func TestRolledBackManifestIsRefused(t *testing.T) {
	t.Run("recorded", func(t *testing.T) { testRolledBack(t, false) })
	t.Run("no record", func(t *testing.T) { testRolledBack(t, true) })
}

func testRolledBack(t *testing.T, dropRecord bool) {
	store := objstore.New(mem.New(), "mem://rollback", objstore.Options{})
	rb := rollBack(t, store)
	rec := filepath.Join(rb.dir, "orders-0", local.TierStateCheckpoint)
	if _, err := os.Stat(rec); err != nil {
		t.Fatalf("no record of the manifest generation: %v", err)
	}
	if dropRecord {
		if err := os.Remove(rec); err != nil {
			t.Fatal(err)
		}
	}

	b := openTieredBackend(t, rb.dir, store, tiered.BackendOptions{})
	p, err := b.Open(ctx, "orders", 0, cfg(t, tieredCfg...))
	if err != nil {
		t.Fatal(err)
	}
	tp := p.(*tiered.Partition)
	if err := tp.BecomeLeader(ctx, 2); err != nil {
		t.Fatal(err)
	}
	// What the service does for a leader, here at once: each is refused
	// or does no harm.
	attachErr := tp.Attach(ctx)
	_, _ = tp.Offload(ctx)
	_, _ = tp.ApplyRetention(ctx)

	if attachErr == nil {
		// Accepting the manifest is only right if every record is still
		// there.
		o := tp.Offsets()
		if o.LogStart != 0 {
			t.Fatalf("the older manifest (generation %d, after %d) was adopted and the log start moved to %d: offsets 0..%d are lost; offsets %+v",
				rb.oldGen, rb.newGen, o.LogStart, o.LogStart-1, o)
		}
		if got := batchesFrom(t, p, 0); len(got) == 0 {
			t.Fatal("nothing reads from offset 0")
		}
	} else {
		msg := attachErr.Error()
		if !errors.Is(attachErr, backend.ErrManifestRolledBack) || !errors.Is(attachErr, backend.ErrStorage) ||
			!strings.Contains(msg, fmt.Sprint(rb.oldGen)) || (!dropRecord && !strings.Contains(msg, fmt.Sprint(rb.newGen))) {
			// (Without a record the partition cannot know the newer
			// generation: the hole is what it names.)
			t.Fatalf("attach: %v; want ErrManifestRolledBack and ErrStorage naming generations %d and %d", attachErr, rb.oldGen, rb.newGen)
		}
		if _, err := p.Read(ctx, 0, backend.ReadOptions{MaxBytes: 1 << 20}); !errors.Is(err, backend.ErrManifestRolledBack) {
			t.Fatalf("read of an offline partition: %v; want ErrManifestRolledBack", err)
		}
		if o := tp.Offsets(); o.LogStart != 0 {
			t.Fatalf("the offline partition's log start moved to %d", o.LogStart)
		}
		if n := b.Metrics().ManifestsRefused.Load(); n != 1 {
			t.Fatalf("ManifestsRefused = %d, want 1", n)
		}
	}
	if l := lost(rb.objects, objectKeys(t, store)); len(l) > 0 {
		t.Fatalf("the bucket lost %d objects after the rollback: %v", len(l), l)
	}
	if l := lost(rb.files, segmentFiles(t, filepath.Join(rb.dir, "orders-0"))); len(l) > 0 {
		t.Fatalf("the partition directory lost %d files after the rollback: %v", len(l), l)
	}
	if attachErr != nil && !bytes.Equal(objectBytes(t, store, rollbackManifest), rb.oldManifestBytes) {
		t.Fatal("the refused manifest was written over")
	}
}

// TestAcceptedRollbackIsTaken: once an operator accepts the older bucket
// (PlanAcceptance's record written while no broker holds the directory),
// the partition takes it at its next open, starting where the accepted
// bucket and its local log hold records, and leads on from there.
func TestAcceptedRollbackIsTaken(t *testing.T) {
	store := objstore.New(mem.New(), "mem://rollback-accepted", objstore.Options{})
	rb := rollBack(t, store)
	dir := filepath.Join(rb.dir, "orders-0")
	l, err := local.Open(dir, local.Options{Config: cfg(t, tieredCfg...), ReadOnly: true, LogStartOffset: 0, HighWatermark: -1})
	if err != nil {
		t.Fatal(err)
	}
	a, err := tiered.PlanAcceptance(ctx, store, "tl/orders-0", l)
	l.Close()
	if err != nil {
		t.Fatal(err)
	}
	if a.Refusal == "" || a.Head.Generation() != rb.oldGen || a.LogStart != 0 || a.NewLogStart <= 0 || a.LostOffsets != a.NewLogStart {
		t.Fatalf("the plan: %+v; want the refusal of generation %d, losing offsets 0..%d", a, rb.oldGen, a.NewLogStart-1)
	}
	if err := local.WriteTierState(dir, a.Accepted); err != nil {
		t.Fatal(err)
	}
	b := openTieredBackend(t, rb.dir, store, tiered.BackendOptions{})
	p, err := b.Open(ctx, "orders", 0, cfg(t, tieredCfg...))
	if err != nil {
		t.Fatal(err)
	}
	tp := p.(*tiered.Partition)
	if err := tp.BecomeLeader(ctx, 2); err != nil {
		t.Fatal(err)
	}
	if err := tp.Attach(ctx); err != nil {
		t.Fatalf("attach after the accept: %v", err)
	}
	if o := tp.Offsets(); o.LogStart != a.NewLogStart {
		t.Fatalf("after the accept: %+v; want the log start %d", o, a.NewLogStart)
	}
	produce(t, p, 1000)
	eventually(t, 20*time.Second, "nothing offloaded after the accept", func() bool {
		k, _ := tp.CopyLag()
		return k == 0 && tp.Head().Generation() > rb.oldGen+1
	})
	readsFrom(t, p, a.NewLogStart)
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	b = openTieredBackend(t, rb.dir, store, tiered.BackendOptions{})
	p, err = b.Open(ctx, "orders", 0, cfg(t, tieredCfg...))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.(*tiered.Partition).Attach(ctx); err != nil {
		t.Fatalf("attach at the restart after the accept: %v", err)
	}
}

// TestRollbackWhileRunning: the bucket goes back in time under a running
// leader. Its next commit loses its condition and, reading the manifest
// back, finds it older than its own: it stops (offline), deleting
// nothing, and its log start stays.
func TestRollbackWhileRunning(t *testing.T) {
	store := objstore.New(mem.New(), "mem://rollback-running", objstore.Options{})
	b := openTieredBackend(t, t.TempDir(), store, tiered.BackendOptions{})
	tp := openUploaded(t, b, 1, 2000)
	old := objectBytes(t, store, rollbackManifest)
	gen := tp.Head().Generation()
	produce(t, tp, 2000)
	eventually(t, 20*time.Second, "the second 2,000 records were not offloaded", func() bool {
		k, _ := tp.CopyLag()
		return k == 0 && tp.Head().Generation() > gen
	})
	if _, err := store.Put(ctx, rollbackManifest, bytes.NewReader(old), int64(len(old)), objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	objects := objectKeys(t, store)
	// Into the local log underneath: the partition goes offline while
	// these are appended, and its own Append then refuses.
	produce(t, tiered.LocalOf(tp), 2000)
	eventually(t, 20*time.Second, "the leader neither stopped nor refused the older manifest", func() bool {
		return tp.Offline() != nil || tp.Fenced() != nil
	})
	if err := tp.Offline(); !errors.Is(err, backend.ErrManifestRolledBack) {
		t.Fatalf("the leader stopped with %v (fenced: %v); want ErrManifestRolledBack", err, tp.Fenced())
	}
	if o := tp.Offsets(); o.LogStart != 0 {
		t.Fatalf("the log start moved to %d", o.LogStart)
	}
	if l := lost(objects, objectKeys(t, store)); len(l) > 0 {
		t.Fatalf("the bucket lost %d objects: %v", len(l), l)
	}
}
