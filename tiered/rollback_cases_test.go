package tiered_test

// The legitimate cases the rollback checks (rollback.go) must let through:
// DeleteRecords past the bucket's end, a restore from the bucket alone, a
// follower that never committed, a partition deleted and created anew.

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/local"
	"github.com/tierlog/tierlog/manifest"
	"github.com/tierlog/tierlog/objstore"
	"github.com/tierlog/tierlog/objstore/mem"
	"github.com/tierlog/tierlog/testing/faultfs"
	"github.com/tierlog/tierlog/tiered"
	"github.com/tierlog/tierlog/vfs"
)

// readsFrom fails unless every offset from..end of p reads back.
func readsFrom(t *testing.T, p backend.Partition, from int64) {
	t.Helper()
	got := batchesFrom(t, p, from)
	end := p.Offsets().LogEnd
	var last int64 = -1
	for l := range got {
		last = max(last, l)
	}
	if last != end-1 {
		t.Fatalf("reads from %d end at %d, want %d", from, last, end-1)
	}
}

// TestDeleteRecordsPastBucketEndSurvivesRestart: DeleteRecordsBefore past
// the bucket's end leaves the local log starting above the bucket, which
// no manifest records. Reopened with a log start checkpoint from before
// it (a crash before the Backend checkpointed), the partition must not
// take that for a hole: its tier-state-checkpoint says why.
func TestDeleteRecordsPastBucketEndSurvivesRestart(t *testing.T) {
	store := objstore.New(mem.New(), "mem://delete-past-end", objstore.Options{})
	dir := filepath.Join(t.TempDir(), "orders-0")
	c := cfg(t, "segment.bytes", "65536", "local.retention.ms", "0", "retention.ms", "-1", "file.delete.delay.ms", "0")
	p := open(t, dir, store, 1, c)
	produce(t, p, 2000)
	if _, err := p.Offload(ctx); err != nil {
		t.Fatal(err)
	}
	bucketEnd := manifestOf(t, p).Segments[len(manifestOf(t, p).Segments)-1].LastOffset + 1
	produce(t, p, 2000) // closed segments the bucket does not hold
	cut := bucketEnd + 1500
	if err := p.DeleteRecordsBefore(ctx, cut); err != nil {
		t.Fatal(err)
	}
	if o := p.Offsets(); o.LogStart != cut {
		t.Fatalf("after DeleteRecordsBefore(%d): %+v", cut, o)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}

	l, err := local.Open(dir, local.Options{Config: c, LogStartOffset: 0, HighWatermark: -1})
	if err != nil {
		t.Fatal(err)
	}
	if ls := l.Offsets().LogStart; ls <= bucketEnd {
		t.Fatalf("the local log starts at %d, within the bucket (end %d): the test proves nothing", ls, bucketEnd)
	}
	p, err = tiered.Open(ctx, l, tiered.Options{Store: store, Prefix: "tl/orders-0", LeaderEpoch: 2})
	if err != nil {
		t.Fatalf("reopen after DeleteRecordsBefore past the bucket's end: %v", err)
	}
	defer p.Close()
	if o := p.Offsets(); o.LogStart > cut {
		t.Fatalf("reopened: %+v; the log start must not pass %d", o, cut)
	}
	readsFrom(t, p, cut)
	if _, err := p.Offload(ctx); err != nil {
		t.Fatalf("offload after the reopen: %v", err)
	}
}

// TestRestoredPartitionAttaches: a partition restored from the bucket
// alone into an empty directory has no record yet; it attaches, serves
// every record, records the generation, and attaches again after a
// restart.
func TestRestoredPartitionAttaches(t *testing.T) {
	store := objstore.New(mem.New(), "mem://restored-attaches", objstore.Options{})
	b := openTieredBackend(t, t.TempDir(), store, tiered.BackendOptions{})
	tp := openUploaded(t, b, 1, 3000)
	gen := tp.Head().Generation()
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	logDir := t.TempDir()
	if _, err := tiered.Restore(ctx, store, "tl/orders-0", filepath.Join(logDir, "orders-0"), tiered.RestoreOptions{}); err != nil {
		t.Fatal(err)
	}
	for round := 0; round < 2; round++ {
		b := openTieredBackend(t, logDir, store, tiered.BackendOptions{})
		p, err := b.Open(ctx, "orders", 0, cfg(t, tieredCfg...))
		if err != nil {
			t.Fatal(err)
		}
		tp := p.(*tiered.Partition)
		if err := tp.BecomeLeader(ctx, int32(2+round)); err != nil {
			t.Fatal(err)
		}
		if err := tp.Attach(ctx); err != nil {
			t.Fatalf("round %d: attach of the restored partition: %v", round, err)
		}
		// New records, so a commit changes the log (a claim alone moves
		// the generation in memory: TestClaimRecordsInMemory).
		produce(t, p, 1000)
		if err := p.SetHighWatermark(p.Offsets().LogEnd); err != nil { // the broker's, once its replicas agree
			t.Fatal(err)
		}
		if _, err := tp.Offload(ctx); err != nil {
			t.Fatalf("round %d: offload: %v", round, err)
		}
		readsFrom(t, p, 0)
		eventually(t, 10*time.Second, fmt.Sprintf("round %d: the record's generation did not pass %d", round, gen), func() bool {
			st, ok, err := local.ReadTierState(filepath.Join(logDir, "orders-0"))
			return err == nil && ok && st.Generation > gen
		})
		gen = tp.Head().Generation()
		if err := b.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestFollowerRecordsWhatItAdopts: a follower never commits; it learns
// the generations by adopting them, records them, and so refuses the
// bucket once it goes back in time, deleting nothing.
func TestFollowerRecordsWhatItAdopts(t *testing.T) {
	store := objstore.New(mem.New(), "mem://follower-records", objstore.Options{})
	lb := openTieredBackend(t, t.TempDir(), store, tiered.BackendOptions{})
	leader := openUploaded(t, lb, 1, 2000)
	old := objectBytes(t, store, rollbackManifest)

	fdir := t.TempDir()
	fb := openTieredBackend(t, fdir, store, tiered.BackendOptions{})
	p, err := fb.Open(ctx, "orders", 0, cfg(t, tieredCfg...))
	if err != nil {
		t.Fatal(err)
	}
	follower := p.(*tiered.Partition)
	if err := follower.BecomeFollower(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if err := follower.FollowerStep(ctx); err != nil {
		t.Fatal(err)
	}
	produce(t, leader, 4000)
	eventually(t, 20*time.Second, "the leader did not offload", func() bool {
		k, _ := leader.CopyLag()
		return k == 0
	})
	if err := follower.FollowerStep(ctx); err != nil {
		t.Fatalf("a follower step over the leader's newer manifest: %v", err)
	}
	gen := leader.Head().Generation()
	st, ok, err := local.ReadTierState(filepath.Join(fdir, "orders-0"))
	if err != nil || !ok || st.Generation != gen {
		t.Fatalf("the follower's record: %+v %v %v; want generation %d", st, ok, err, gen)
	}
	if err := lb.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Put(ctx, rollbackManifest, bytes.NewReader(old), int64(len(old)), objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := follower.FollowerStep(ctx); !errors.Is(err, backend.ErrManifestRolledBack) {
		t.Fatalf("a follower step over the rolled back manifest: %v; want ErrManifestRolledBack", err)
	}
	if err := follower.Offline(); !errors.Is(err, backend.ErrManifestRolledBack) {
		t.Fatalf("the follower is not offline: %v", err)
	}
}

// TestFollowerTickOverAnUnchangedManifest: a follower's step over a
// manifest that has not changed since it adopted it reads no body (one
// HEAD, its ETag the one held).
func TestFollowerTickOverAnUnchangedManifest(t *testing.T) {
	drv := mem.New()
	lstore := objstore.New(drv, "mem://follower-ticks", objstore.Options{})
	lb := openTieredBackend(t, t.TempDir(), lstore, tiered.BackendOptions{})
	openUploaded(t, lb, 1, 2000)
	if err := lb.Close(); err != nil { // no commit while the follower counts
		t.Fatal(err)
	}
	// The follower's own store over the same bucket: its requests only.
	fstore := objstore.New(drv, "mem://follower-ticks", objstore.Options{})
	fb := openTieredBackend(t, t.TempDir(), fstore, tiered.BackendOptions{})
	p, err := fb.Open(ctx, "orders", 0, cfg(t, tieredCfg...))
	if err != nil {
		t.Fatal(err)
	}
	follower := p.(*tiered.Partition)
	if err := follower.BecomeFollower(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if err := follower.FollowerStep(ctx); err != nil {
		t.Fatal(err)
	}
	gets, unchanged := fstore.Stats().Requests[objstore.OpGet], follower.Metrics().ManifestUnchanged.Load()
	for range 3 {
		if err := follower.FollowerStep(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if got := fstore.Stats().Requests[objstore.OpGet] - gets; got != 0 {
		t.Fatalf("%d GETs for three follower steps over an unchanged manifest, want none", got)
	}
	// At least the three steps (the service may tick as well).
	if n := follower.Metrics().ManifestUnchanged.Load() - unchanged; n < 3 {
		t.Fatalf("%d unchanged refreshes counted, want at least 3", n)
	}
	// (A manifest that changed is read and adopted:
	// TestFollowerRecordsWhatItAdopts.)
}

// TestRecreatedPartitionRestarts: a partition deleted and created again
// starts a new record (its directory went with the deletion), and
// restarts over its own manifest, born after the deleted one.
func TestRecreatedPartitionRestarts(t *testing.T) {
	store := objstore.New(mem.New(), "mem://recreated-restarts", objstore.Options{})
	dir := t.TempDir()
	b := openTieredBackend(t, dir, store, tiered.BackendOptions{})
	openUploaded(t, b, 1, 3000)
	if err := b.Delete(ctx, "orders", 0); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "orders-0", local.TierStateCheckpoint)); !os.IsNotExist(err) {
		t.Fatalf("the deleted partition's record is still there: %v", err)
	}
	tp := openUploaded(t, b, 1, 1000)
	if tp.Head().Born() == 0 {
		t.Fatalf("the new partition's manifest %+v was not born after the deletion", manifestOf(t, tp))
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
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
		t.Fatalf("restart of the recreated partition: %v", err)
	}
	if _, err := tp.Offload(ctx); err != nil {
		t.Fatal(err)
	}
	readsFrom(t, p, 0)
}

// TestRecordBehindTheBucketIsFine: a crash between a manifest's commit
// and its record leaves the record a generation (or more) behind the
// bucket; the next open takes the newer manifest.
func TestRecordBehindTheBucketIsFine(t *testing.T) {
	store := objstore.New(mem.New(), "mem://record-behind", objstore.Options{})
	dir := t.TempDir()
	b := openTieredBackend(t, dir, store, tiered.BackendOptions{})
	tp := openUploaded(t, b, 1, 2000)
	first := manifestOf(t, tp)
	behind := local.TierState{Generation: first.Generation, Born: first.Born, RemoteEnd: first.Segments[len(first.Segments)-1].LastOffset + 1}
	produce(t, tp, 2000)
	eventually(t, 20*time.Second, "the second 2,000 records were not offloaded", func() bool {
		k, _ := tp.CopyLag()
		return k == 0 && tp.Head().Generation() > first.Generation
	})
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if err := local.WriteTierState(filepath.Join(dir, "orders-0"), behind); err != nil {
		t.Fatal(err)
	}
	b = openTieredBackend(t, dir, store, tiered.BackendOptions{})
	p, err := b.Open(ctx, "orders", 0, cfg(t, tieredCfg...))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.(*tiered.Partition).Attach(ctx); err != nil {
		t.Fatalf("attach with the record behind the bucket: %v", err)
	}
	readsFrom(t, p, 0)
}

// TestUnrecordedManifestDeletesNothingLocally: when the record of a new
// generation cannot be written (the disk fails), the local log fails and
// local retention deletes nothing on the strength of that generation.
func TestUnrecordedManifestDeletesNothingLocally(t *testing.T) {
	store := objstore.New(mem.New(), "mem://unrecorded", objstore.Options{})
	dir := filepath.Join(t.TempDir(), "orders-0")
	ffs := faultfs.New(vfs.Default)
	c := cfg(t, "segment.bytes", "65536", "local.retention.ms", "0", "retention.ms", "-1", "file.delete.delay.ms", "0")
	l, err := local.Open(dir, local.Options{Config: c, LogStartOffset: -1, HighWatermark: -1, FS: ffs})
	if err != nil {
		t.Fatal(err)
	}
	p, err := tiered.Open(ctx, l, tiered.Options{Store: store, Prefix: "tl/orders-0", LeaderEpoch: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	produce(t, p, 2000)
	before := len(p.LocalSegments())
	ffs.SetHook(faultfs.FailAll(faultfs.OpRename, func(path string) bool {
		return strings.Contains(path, local.TierStateCheckpoint)
	}, syscall.EIO))
	_, err = p.Offload(ctx)
	if err == nil {
		t.Fatal("offload succeeded with its record unwritten")
	}
	if n := len(p.LocalSegments()); n != before || p.Offsets().LocalLogStart != 0 {
		t.Fatalf("local retention deleted %d segments (local start %d) on a manifest whose record failed: %v", before-n, p.Offsets().LocalLogStart, err)
	}
}

// TestJudgeManifest: each rule of the rollback check against a recorded
// state, through PlanAcceptance (which judges as an open does). The local
// log holds offsets 0..999 and starts at 500.
func TestJudgeManifest(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "orders-0")
	c := cfg(t, "segment.bytes", "65536", "retention.ms", "-1")
	l, err := local.Open(dir, local.Options{Config: c, LogStartOffset: -1, HighWatermark: -1})
	if err != nil {
		t.Fatal(err)
	}
	produce(t, l, 1000)
	if err := l.DeleteRecordsBefore(ctx, 500); err != nil {
		t.Fatal(err)
	}
	l.Close()
	seg := func(base, last int64) manifest.Segment {
		return manifest.Segment{BaseOffset: base, LastOffset: last, Size: 1, Records: last - base + 1}
	}
	rec := local.TierState{Generation: 10, RemoteEnd: 600, LogStart: 100}
	for _, tc := range []struct {
		name   string
		rec    local.TierState
		m      manifest.Manifest
		refuse string // "" when the manifest must be taken
	}{
		{"the recorded one", rec, manifest.Manifest{Generation: 10, LogStartOffset: 100, Segments: []manifest.Segment{seg(100, 599)}}, ""},
		{"a newer one", rec, manifest.Manifest{Generation: 12, LogStartOffset: 100, Segments: []manifest.Segment{seg(100, 599), seg(600, 799)}}, ""},
		{"retention moved the log start", rec, manifest.Manifest{Generation: 12, LogStartOffset: 300, Segments: []manifest.Segment{seg(300, 699)}}, ""},
		{"an older generation", rec, manifest.Manifest{Generation: 9, LogStartOffset: 100, Segments: []manifest.Segment{seg(100, 599)}}, "older than generation 10"},
		{"segments lost from the end", rec, manifest.Manifest{Generation: 12, LogStartOffset: 100, Segments: []manifest.Segment{seg(100, 549)}}, "held offsets up to 600"},
		{"the log start moved back", rec, manifest.Manifest{Generation: 12, LogStartOffset: 50, Segments: []manifest.Segment{seg(50, 699)}}, "moves the log start back"},
		{"an older incarnation", local.TierState{Generation: 10, Born: 5, RemoteEnd: 600, LogStart: 100},
			manifest.Manifest{Generation: 12, Born: 0, LogStartOffset: 100, Segments: []manifest.Segment{seg(100, 699)}}, "older than this partition's"},
		{"created anew since", rec, manifest.Manifest{Generation: 14, Born: 11, Segments: []manifest.Segment{seg(0, 10)}}, ""},
		{"a hole below the local log", local.TierState{Generation: 10, RemoteEnd: 300, LogStart: 100},
			manifest.Manifest{Generation: 12, LogStartOffset: 100, Segments: []manifest.Segment{seg(100, 399)}}, "would be in neither"},
		{"DeleteRecords past the bucket's end", local.TierState{Generation: 10, RemoteEnd: 300, LogStart: 500},
			manifest.Manifest{Generation: 10, LogStartOffset: 300, Segments: []manifest.Segment{seg(100, 299)}}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := local.WriteTierState(dir, tc.rec); err != nil {
				t.Fatal(err)
			}
			store := objstore.New(mem.New(), "mem://judge", objstore.Options{})
			data, err := tc.m.Encode()
			if err != nil {
				t.Fatal(err)
			}
			if _, err := store.Put(ctx, rollbackManifest, bytes.NewReader(data), int64(len(data)), objstore.PutOptions{}); err != nil {
				t.Fatal(err)
			}
			l, err := local.Open(dir, local.Options{Config: c, ReadOnly: true, LogStartOffset: 500, HighWatermark: -1})
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			a, err := tiered.PlanAcceptance(ctx, store, "tl/orders-0", l)
			if err != nil {
				t.Fatal(err)
			}
			if (tc.refuse == "") != (a.Refusal == "") || !strings.Contains(a.Refusal, tc.refuse) {
				t.Fatalf("refusal %q, want %q", a.Refusal, tc.refuse)
			}
		})
	}
}

// TestClaimRecordsInMemory: a claim at a new epoch moves the generation
// alone (the same segments and log start), so the partition's record of
// it stays in memory and no file is written (a broker made leader of
// many partitions paid an fsync a partition for it). The file, a
// generation behind the bucket, is still judged fine after a restart, and
// the next commit that changes the log writes it.
func TestClaimRecordsInMemory(t *testing.T) {
	store := objstore.New(mem.New(), "mem://claim-record", objstore.Options{})
	dir := t.TempDir()
	b := openTieredBackend(t, dir, store, tiered.BackendOptions{})
	tp := openUploaded(t, b, 1, 2000)
	pdir := filepath.Join(dir, "orders-0")
	path := filepath.Join(pdir, local.TierStateCheckpoint)
	before, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	rec, _, err := local.ReadTierState(pdir)
	if err != nil {
		t.Fatal(err)
	}
	gen := tp.Head().Generation()
	if rec.Generation != gen {
		t.Fatalf("recorded generation %d, the partition's manifest %d", rec.Generation, gen)
	}
	if err := tp.BecomeLeader(ctx, 2); err != nil {
		t.Fatal(err)
	}
	if _, err := tp.ApplyRetention(ctx); err != nil { // claims first
		t.Fatal(err)
	}
	if h := tp.Head(); h.WriterEpoch() != 2 || h.Generation() != gen+1 {
		t.Fatalf("after the claim: generation %d epoch %d, want %d and 2", h.Generation(), h.WriterEpoch(), gen+1)
	}
	after, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if got, _, _ := local.ReadTierState(pdir); !os.SameFile(before, after) || got != rec {
		t.Fatalf("the claim rewrote %s: %+v, was %+v", local.TierStateCheckpoint, got, rec)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}

	b = openTieredBackend(t, dir, store, tiered.BackendOptions{})
	p, err := b.Open(ctx, "orders", 0, cfg(t, tieredCfg...))
	if err != nil {
		t.Fatal(err)
	}
	tp = p.(*tiered.Partition)
	if err := tp.Attach(ctx); err != nil {
		t.Fatalf("attach with the record a claim behind the bucket: %v", err)
	}
	readsFrom(t, p, 0)
	if err := tp.BecomeLeader(ctx, 3); err != nil {
		t.Fatal(err)
	}
	produce(t, p, 2000)
	eventually(t, 20*time.Second, "the next 2,000 records were not offloaded and recorded", func() bool {
		k, _ := tp.CopyLag()
		got, _, _ := local.ReadTierState(pdir)
		return k == 0 && got.Generation == tp.Head().Generation() && got.RemoteEnd > rec.RemoteEnd
	})
}
