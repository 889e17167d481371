package tiered_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/objstore"
	"github.com/tierlog/tierlog/objstore/mem"
	"github.com/tierlog/tierlog/record"
	"github.com/tierlog/tierlog/testing/faultstore"
	"github.com/tierlog/tierlog/tiered"
	"github.com/tierlog/tierlog/wal"
)

var disklessCfg = []string{"diskless.enable", "true", "segment.bytes", "16384", "local.retention.ms", "0", "file.delete.delay.ms", "0", "retention.ms", "-1"}

func openDisklessBackend(t *testing.T, dir string, store *objstore.Store) *tiered.Backend {
	t.Helper()
	m := fastManager
	m.DisklessCommitInterval = 5 * time.Millisecond
	return openTieredBackend(t, dir, store, tiered.BackendOptions{Manager: m})
}

func openDiskless(t *testing.T, b *tiered.Backend, epoch int32) *tiered.Partition {
	t.Helper()
	p, err := b.Open(ctx, "orders", 0, cfg(t, disklessCfg...))
	if err != nil {
		t.Fatal(err)
	}
	tp, ok := p.(*tiered.Partition)
	if !ok {
		t.Fatalf("a diskless topic opened as %T", p)
	}
	if err := tp.BecomeLeader(ctx, epoch); err != nil {
		t.Fatal(err)
	}
	return tp
}

// appendOne appends one batch of n records as the leader and returns its
// last offset.
func appendOne(t *testing.T, p backend.Partition, n int, letter string) (int64, error) {
	t.Helper()
	var b record.Builder
	b.Reset(record.NewBatchHeader())
	for range n {
		b.Append(1_700_000_000_000, nil, bytes.Repeat([]byte(letter), 100), nil)
	}
	batch, _ := b.Build()
	info, err := p.Append(ctx, append([]byte(nil), batch...), backend.AppendOptions{AssignOffsets: true})
	if err != nil {
		return -1, err
	}
	return info.LastOffset, p.SetHighWatermark(p.Offsets().LogEnd)
}

func walKeys(t *testing.T, store *objstore.Store) []string {
	t.Helper()
	var keys []string
	for k := range objectKeys(t, store) {
		if strings.Contains(k, "/"+wal.Dir+"/") {
			keys = append(keys, k)
		}
	}
	return keys
}

// TestDisklessAcknowledgesOnlyWhatTheBucketHolds: a diskless partition's
// high watermark (what a broker acknowledges, what a consumer reads) stays
// below an append until the WAL object holding it is in the bucket;
// Flush waits for it; the closed segments then consolidate into the
// bucket and the manifest names the writer.
func TestDisklessAcknowledgesOnlyWhatTheBucketHolds(t *testing.T) {
	inner := mem.New()
	d := faultstore.Wrap(inner, 1)
	store := objstore.New(d, "mem://diskless", objstore.Options{})
	b := openDisklessBackend(t, t.TempDir(), store)
	p := openDiskless(t, b, 1)

	release := make(chan struct{})
	hold := d.Add(faultstore.Rule{Op: objstore.OpPut, KeyContains: "/" + wal.Dir + "/", Every: 1, Fault: faultstore.Hook,
		Before: func(ctx context.Context, _ faultstore.Call) error {
			select {
			case <-release:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}})
	last, err := appendOne(t, p, 10, "a")
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(30 * time.Millisecond) // several commit intervals: the object is being put, held
	if o := p.Offsets(); o.HighWatermark != 0 || o.LogEnd != last+1 {
		t.Fatalf("offsets %+v while the WAL object is held: the high watermark must stay at 0", o)
	}
	r, err := p.Read(ctx, 0, backend.ReadOptions{Isolation: backend.ReadHighWatermark})
	if err != nil || r.Len() != 0 {
		t.Fatalf("a consumer's read while the WAL object is held: %d bytes, %v", r.Len(), err)
	}
	r.Close()
	close(release)
	if err := p.Flush(); err != nil {
		t.Fatal(err)
	}
	if o := p.Offsets(); o.HighWatermark != last+1 {
		t.Fatalf("offsets %+v after Flush: the high watermark must reach %d", o, last+1)
	}
	hold.Remove()
	if n := len(walKeys(t, store)); n == 0 {
		t.Fatal("no WAL object in the bucket")
	}

	for i := range 300 {
		if _, err := appendOne(t, p, 10, string(rune('b'+i%20))); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Flush(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "closed segments never consolidated into the bucket", func() bool {
		m := manifestOf(t, p)
		return len(m.Segments) > 0 && m.WAL != nil
	})
	m := manifestOf(t, p)
	if len(m.WAL.Extents) != 0 {
		t.Fatalf("one writer's partition names extents of earlier writers: %+v", m.WAL)
	}
	if m.WAL.After == 0 && m.Segments[len(m.Segments)-1].LastOffset+1 >= p.Offsets().LogEnd {
		t.Fatalf("every offset is in segments, yet the WAL record %+v still starts at the writer's first object", m.WAL)
	}
}

// TestDisklessDeleteTheDiskAndFailover: a broker whose log directory is
// gone (a second Backend on an empty directory, the first one still
// running as a zombie) claims the partition: it fences the first one's WAL
// writer, rebuilds the tail from the bucket, and every acknowledged record
// is there, once, in order; the zombie's appends fail as fenced.
// Leadership then moves back, and again every record is there.
func TestDisklessDeleteTheDiskAndFailover(t *testing.T) {
	store := objstore.New(mem.New(), "mem://diskless-failover", objstore.Options{})
	b1 := openDisklessBackend(t, filepath.Join(t.TempDir(), "a"), store)
	p1 := openDiskless(t, b1, 1)
	for i := range 200 {
		if _, err := appendOne(t, p1, 5, string(rune('a'+i%26))); err != nil {
			t.Fatal(err)
		}
	}
	if err := p1.Flush(); err != nil {
		t.Fatal(err)
	}
	want := batchesFrom(t, p1, 0)
	end := p1.Offsets().LogEnd

	b2 := openDisklessBackend(t, filepath.Join(t.TempDir(), "b"), store)
	p2 := openDiskless(t, b2, 2)
	if err := p2.Flush(); err != nil {
		t.Fatal(err)
	}
	if o := p2.Offsets(); o.LogEnd != end || o.HighWatermark != end {
		t.Fatalf("the new leader's offsets %+v, want log end and high watermark %d", o, end)
	}
	checkBatches(t, "the new leader", batchesFrom(t, p2, 0), want)

	// The zombie: its next append fails as fenced, now or once its
	// object meets the fence.
	_, err := appendOne(t, p1, 5, "z")
	if err == nil {
		err = p1.Flush()
	}
	if !errors.Is(err, backend.ErrFenced) {
		t.Fatalf("the old leader's append after the claim: %v, want ErrFenced", err)
	}

	for i := range 50 {
		if _, err := appendOne(t, p2, 5, string(rune('A'+i%26))); err != nil {
			t.Fatal(err)
		}
	}
	if err := p2.Flush(); err != nil {
		t.Fatal(err)
	}
	want = batchesFrom(t, p2, 0)

	// Back to the first Backend, at a higher epoch.
	if err := p1.BecomeLeader(ctx, 3); err != nil {
		t.Fatal(err)
	}
	if _, err := appendOne(t, p1, 5, "c"); err != nil {
		t.Fatalf("the first Backend leading again: %v", err)
	}
	if err := p1.Flush(); err != nil {
		t.Fatal(err)
	}
	got := batchesFrom(t, p1, 0)
	if len(got) != len(want)+1 {
		t.Fatalf("%d batches after leadership came back, want %d and the new one", len(got), len(want))
	}
	delete(got, p1.Offsets().LogEnd-1)
	checkBatches(t, "the first Backend leading again", got, want)
}

func checkBatches(t *testing.T, what string, got, want map[int64][]byte) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d batches, want %d", what, len(got), len(want))
	}
	for off, b := range want {
		if !bytes.Equal(got[off], b) {
			t.Fatalf("%s: the batch ending at %d differs", what, off)
		}
	}
}

// TestDisklessFailedUploadTruncates: an append whose WAL object could not
// be put (its number voided) is never acknowledged; Flush says so, the
// next append truncates the partition back to its durable end and reuses
// the offsets, and the partition reads back exactly what was acknowledged.
func TestDisklessFailedUploadTruncates(t *testing.T) {
	inner := mem.New()
	d := faultstore.Wrap(inner, 1)
	store := objstore.New(d, "mem://diskless-fail", objstore.Options{MaxAttempts: 1})
	b := openDisklessBackend(t, t.TempDir(), store)
	p := openDiskless(t, b, 1)
	if _, err := appendOne(t, p, 10, "a"); err != nil {
		t.Fatal(err)
	}
	if err := p.Flush(); err != nil {
		t.Fatal(err)
	}
	durable := p.Offsets().LogEnd
	want := batchesFrom(t, p, 0)

	// The next WAL put fails before it lands; the void that follows lands.
	d.Add(faultstore.Rule{Op: objstore.OpPut, KeyContains: "/" + wal.Dir + "/", Nth: 1, Fault: faultstore.FailBefore})
	if _, err := appendOne(t, p, 10, "x"); err != nil {
		t.Fatal(err)
	}
	if err := p.Flush(); !errors.Is(err, backend.ErrStorage) {
		t.Fatalf("Flush after a failed upload: %v, want ErrStorage", err)
	}
	if hw := p.Offsets().HighWatermark; hw != durable {
		t.Fatalf("high watermark %d after a failed upload, want the durable end %d", hw, durable)
	}
	last, err := appendOne(t, p, 10, "b")
	if err != nil {
		t.Fatal(err)
	}
	if first := last - 9; first != durable {
		t.Fatalf("the append after the failure starts at %d, want the durable end %d", first, durable)
	}
	if err := p.Flush(); err != nil {
		t.Fatal(err)
	}
	got := batchesFrom(t, p, 0)
	if len(got) != len(want)+1 {
		t.Fatalf("%d batches, want %d", len(got), len(want)+1)
	}
	for off, b := range got {
		if w, ok := want[off]; ok && !bytes.Equal(w, b) {
			t.Fatalf("the batch ending at %d changed", off)
		}
		if bytes.Contains(b, []byte("xxxxxxxx")) {
			t.Fatal("the failed append's records are in the log")
		}
	}
}

// TestDisklessIsFixedAtCreation: a classic tiered partition opened as
// diskless refuses to claim (its records are durable on its disk only,
// and a claim would cut them off), and a diskless partition's bucket
// opened as classic is refused (its recent records may be only in WAL
// objects); both name the config key's cause.
func TestDisklessIsFixedAtCreation(t *testing.T) {
	store := objstore.New(mem.New(), "mem://fixed", objstore.Options{})
	dir := t.TempDir()
	b := openTieredBackend(t, dir, store, tiered.BackendOptions{})
	openUploaded(t, b, 1, 500)
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	b = openDisklessBackend(t, dir, store)
	p, err := b.Open(ctx, "orders", 0, cfg(t, disklessCfg...))
	if err != nil {
		t.Fatal(err)
	}
	p.(*tiered.Partition).BecomeLeader(ctx, 2)
	if _, err := appendOne(t, p, 1, "x"); !errors.Is(err, backend.ErrInvalidConfig) {
		t.Fatalf("a classic partition opened as diskless appended: %v", err)
	}
	b.Close()

	store2 := objstore.New(mem.New(), "mem://fixed2", objstore.Options{})
	dir2 := t.TempDir()
	b = openDisklessBackend(t, dir2, store2)
	dp := openDiskless(t, b, 1)
	if _, err := appendOne(t, dp, 1, "x"); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	b = openTieredBackend(t, t.TempDir(), store2, tiered.BackendOptions{})
	p, err = b.Open(ctx, "orders", 0, cfg(t, tieredCfg...))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.(*tiered.Partition).Attach(ctx); !errors.Is(err, backend.ErrInvalidConfig) || !strings.Contains(err.Error(), "diskless") {
		t.Fatalf("a diskless partition's bucket opened as classic: %v", err)
	}
}

// TestDisklessWALGC: gc removes the WAL objects whose every extent is in
// the partition's segments, keeps the ones holding the tail, each
// writer's newest wal.MaxInFlight numbers (the fence a claim left among
// them) and an object whose footer is damaged; afterwards a claim on an
// empty directory still reads every record.
func TestDisklessWALGC(t *testing.T) {
	store := objstore.New(mem.New(), "mem://walgc", objstore.Options{})
	b1 := openDisklessBackend(t, filepath.Join(t.TempDir(), "a"), store)
	p1 := openDiskless(t, b1, 1)
	for i := range 300 {
		if _, err := appendOne(t, p1, 5, string(rune('a'+i%26))); err != nil {
			t.Fatal(err)
		}
		if i%50 == 49 {
			if err := p1.Flush(); err != nil { // several WAL objects
				t.Fatal(err)
			}
		}
	}
	if err := p1.Flush(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "nothing consolidated", func() bool { return len(manifestOf(t, p1).Segments) > 2 })
	want := batchesFrom(t, p1, 0)
	later := func() time.Time { return time.Now().Add(time.Hour) }
	objs, err := tiered.GCWAL(ctx, store, "tl", tiered.WALGCOptions{Grace: time.Nanosecond, Force: true, Now: later})
	if err != nil {
		t.Fatal(err)
	}
	// The end gc judged marks by: the bucket's manifest, read after it
	// (it only moves forward; the partition's own view may still be a
	// commit behind the bucket's).
	bm, err := tiered.ReadManifest(ctx, store, "tl/orders-0")
	if err != nil {
		t.Fatal(err)
	}
	segEnd := max(bm.Segments[len(bm.Segments)-1].LastOffset+1, bm.LogStartOffset)
	var removed, kept int
	for _, o := range objs {
		if o.Remove {
			removed++
		} else {
			kept++
			if !strings.Contains(o.Why, "not in its segments yet") && !strings.Contains(o.Why, "newest") && !strings.Contains(o.Why, "read replicas serve the tail by it") {
				t.Errorf("%s kept: %s", o.Key, o.Why)
			}
		}
		// A mark past the segments' end is a read replica's bound on the
		// tail: its object stays.
		if o.Footer != nil && o.Remove {
			for _, m := range o.Footer.Marks {
				if m.End > segEnd {
					t.Errorf("%s removed: it marks %s acknowledged to %d, past the segments' end %d", o.Key, m.TopicPartition, m.End, segEnd)
				}
			}
		}
	}
	if removed == 0 || kept == 0 {
		t.Fatalf("gc removed %d and kept %d WAL objects; want the consolidated ones gone and the tail's kept", removed, kept)
	}
	if n := len(walKeys(t, store)); n != kept {
		t.Fatalf("%d WAL objects left, gc kept %d", n, kept)
	}

	// A claim from an empty directory after the gc: every record.
	checkBatches(t, "a claim after the WAL gc", newLeaderBatches(t, store, 2), want)

	// Each writer's newest numbers stay (the fence the claim left at
	// the first writer's last number among them); a damaged object stays
	// and is reported.
	objs, err = tiered.GCWAL(ctx, store, "tl", tiered.WALGCOptions{Grace: time.Nanosecond, Force: true, Now: later})
	if err != nil {
		t.Fatal(err)
	}
	highest := map[wal.WriterID]uint64{}
	for _, o := range objs {
		highest[o.Writer] = max(highest[o.Writer], o.Sequence)
	}
	for _, o := range objs {
		if o.Sequence+wal.MaxInFlight > highest[o.Writer] && o.Remove {
			t.Errorf("%s removed: one of its writer's newest %d numbers", o.Key, wal.MaxInFlight)
		}
	}
	// The claim's writer put nothing but its marks (the claim's durable
	// end, for read replicas).
	for w := range highest {
		if w == wal.WriterID(manifestOf(t, p1).WAL.Writer) {
			continue
		}
		for _, o := range objs {
			f, _, err := wal.ReadObjectFooter(ctx, store, o.Key)
			if o.Writer == w && (err != nil || f.Fence || len(f.Extents) > 0 || len(f.Marks) == 0) {
				t.Fatalf("the claim's writer put %s: %+v (%v); an object of marks alone expected", o.Key, f, err)
			}
		}
		delete(highest, w)
	}
	if len(highest) != 1 {
		t.Fatalf("objects of %d writers after the claim, want the first writer's only", len(highest))
	}
	for w, seq := range highest {
		// The claim's fence is among them (the first writer may have put
		// its last marks above it: an object of marks alone holds no
		// append a fence must stop).
		fenced := false
		for n := seq; n > 0 && n+wal.MaxInFlight > seq; n-- {
			f, _, err := wal.ReadObjectFooter(ctx, store, wal.NewLayout("tl").Key(w, n))
			if err != nil {
				t.Fatal(err)
			}
			fenced = fenced || (f.Fence && f.Fences(wal.TopicPartition{Topic: "orders", Partition: 0}))
			if !f.Fence && len(f.Extents) > 0 {
				t.Fatalf("the first writer put data at %d, above the claim's fence", n)
			}
			if fenced {
				break
			}
		}
		if !fenced {
			t.Fatal("the claim's fence is not among the first writer's newest numbers")
		}
	}
	// (Below its writer's newest numbers, or gc would not read it.)
	bad := wal.NewLayout("tl").Key(wal.WriterID{9}, 1)
	for _, key := range []string{bad, wal.NewLayout("tl").Key(wal.WriterID{9}, 1+wal.MaxInFlight)} {
		if _, err := store.Put(ctx, key, bytes.NewReader([]byte("not a WAL object at all")), 23, objstore.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	_, err = tiered.GCWAL(ctx, store, "tl", tiered.WALGCOptions{Grace: time.Nanosecond, Force: true, Now: later})
	if !errors.Is(err, tiered.ErrWALDamaged) {
		t.Fatalf("gc over a damaged WAL object: %v, want ErrWALDamaged", err)
	}
	if _, err := store.Head(ctx, bad); err != nil {
		t.Fatalf("the damaged object was removed: %v", err)
	}
	if _, err := tiered.GCWAL(ctx, store, "tl", tiered.WALGCOptions{Grace: time.Minute}); err == nil {
		t.Fatal("a grace below the floor without Force was taken")
	}
}

// TestDisklessFailoverLoop: two Backends on two directories and one
// bucket; leadership of a diskless partition moves back and forth eight
// times while the old leader keeps producing. An append counts as
// acknowledged once a Flush after it returned nil. At the end the last
// leader's log holds every acknowledged batch exactly once, and every
// old leader's appends after the move failed, fenced.
func TestDisklessFailoverLoop(t *testing.T) {
	store := objstore.New(mem.New(), "mem://failover-loop", objstore.Options{})
	backends := [2]*tiered.Backend{
		openDisklessBackend(t, filepath.Join(t.TempDir(), "a"), store),
		openDisklessBackend(t, filepath.Join(t.TempDir(), "b"), store),
	}
	parts := [2]*tiered.Partition{}
	for i, b := range backends {
		p, err := b.Open(ctx, "orders", 0, cfg(t, disklessCfg...))
		if err != nil {
			t.Fatal(err)
		}
		parts[i] = p.(*tiered.Partition)
	}
	var mu sync.Mutex
	acked := map[string]bool{}
	fencedAfterMove := 0
	n := 0
	// produce appends through p until it is fenced, confirming with Flush.
	produce := func(p *tiered.Partition, stop <-chan struct{}, done chan<- struct{}) {
		defer close(done)
		var pending []string
		for {
			select {
			case <-stop:
				return
			default:
			}
			mu.Lock()
			n++
			v := fmt.Sprintf("v%06d", n)
			mu.Unlock()
			var b record.Builder
			b.Reset(record.NewBatchHeader())
			b.Append(1_700_000_000_000, nil, []byte(v), nil)
			batch, _ := b.Build()
			_, err := p.Append(ctx, batch, backend.AppendOptions{AssignOffsets: true})
			if err == nil {
				pending = append(pending, v)
				p.SetHighWatermark(p.Offsets().LogEnd)
				if len(pending) >= 5 {
					err = p.Flush()
				}
			}
			switch {
			case err == nil && len(pending) >= 5:
				mu.Lock()
				for _, v := range pending {
					acked[v] = true
				}
				mu.Unlock()
				pending = pending[:0]
			case errors.Is(err, backend.ErrFenced):
				mu.Lock()
				fencedAfterMove++
				mu.Unlock()
				return
			case err != nil:
				pending = pending[:0] // not acknowledged; a producer would retry
			}
		}
	}
	var stops []chan struct{}
	var dones []chan struct{}
	for move := range 8 {
		leader := parts[move%2]
		if err := leader.BecomeLeader(ctx, int32(move+1)); err != nil {
			t.Fatal(err)
		}
		stop, done := make(chan struct{}), make(chan struct{})
		stops, dones = append(stops, stop), append(dones, done)
		go produce(leader, stop, done)
		time.Sleep(30 * time.Millisecond)
		if move > 0 {
			// The old leader ends once fenced (or when told to stop).
			select {
			case <-dones[move-1]:
			case <-time.After(30 * time.Second):
				t.Fatalf("move %d: the old leader was never fenced", move)
			}
		}
	}
	close(stops[len(stops)-1])
	<-dones[len(dones)-1]
	last := parts[1]
	if err := last.Flush(); err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for _, b := range batchesFrom(t, last, 0) {
		var it record.Iterator
		if err := it.Reset(b); err != nil {
			t.Fatal(err)
		}
		for it.Next() {
			seen[string(it.Record().Value)]++
		}
	}
	for v := range acked {
		if seen[v] != 1 {
			t.Fatalf("acknowledged %s is in the last leader's log %d times", v, seen[v])
		}
	}
	for v, c := range seen {
		if c != 1 {
			t.Fatalf("%s is in the log %d times", v, c)
		}
	}
	if len(acked) == 0 || fencedAfterMove < 7 {
		t.Fatalf("%d acknowledged, %d old leaders fenced: the test tested little", len(acked), fencedAfterMove)
	}
	t.Logf("%d appends acknowledged over 8 moves, all in the last leader's log once; %d old leaders fenced", len(acked), fencedAfterMove)
}

// TestDisklessDeleteRecordsKeptAcrossAClaim: a log start that
// DeleteRecordsBefore moved past the segments' end stays where it was
// when a restarted Backend (a new WAL writer) claims the partition and
// rebuilds its tail from the bucket.
func TestDisklessDeleteRecordsKeptAcrossAClaim(t *testing.T) {
	store := objstore.New(mem.New(), "mem://delete-records", objstore.Options{})
	dir := t.TempDir()
	b := openDisklessBackend(t, dir, store)
	p := openDiskless(t, b, 1)
	for range 20 {
		if _, err := appendOne(t, p, 5, "a"); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := p.DeleteRecordsBefore(ctx, 42); err != nil {
		t.Fatal(err)
	}
	want := p.Offsets()
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	b = openDisklessBackend(t, dir, store)
	p = openDiskless(t, b, 2)
	if _, err := appendOne(t, p, 1, "b"); err != nil {
		t.Fatal(err)
	}
	want.LogEnd++
	if err := p.Flush(); err != nil {
		t.Fatal(err)
	}
	if got := p.Offsets(); got.LogStart != want.LogStart || got.LogEnd != want.LogEnd {
		t.Fatalf("after the claim: offsets %+v, want log start %d and log end %d", got, want.LogStart, want.LogEnd)
	}
	if _, err := p.Read(ctx, 10, backend.ReadOptions{}); err == nil {
		t.Fatal("a deleted offset reads again after the claim")
	}
}

// TestWALGCKeepsFencesAboveAnIdleWriter: claims of five partitions fence
// an idle writer at the five numbers after its last object; gc keeps
// every one of them (the writer may still come back and put at the
// lowest), and once the writer has put past them, removes those outside
// its newest numbers.
func TestWALGCKeepsFencesAboveAnIdleWriter(t *testing.T) {
	store := objstore.New(mem.New(), "mem://walgc-fences", objstore.Options{})
	w, err := wal.NewWriter(store, wal.Options{Root: "tl", CommitInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close(ctx)
	tp := wal.TopicPartition{Topic: "orders", Partition: 0}
	appendAndFlush := func(data string, off int64) {
		t.Helper()
		ack, err := w.Append(ctx, tp, []byte(data), off, off)
		if err != nil {
			t.Fatal(err)
		}
		w.Flush(ctx)
		if err := ack.Err(); err != nil {
			t.Fatal(err)
		}
	}
	appendAndFlush("a", 0) // number 1
	for i := range 5 {
		if _, err := wal.Fence(ctx, store, w.Layout(), w.ID(), 0, 3, []wal.TopicPartition{{Topic: "other", Partition: int32(i)}}); err != nil {
			t.Fatal(err)
		}
	}
	later := func() time.Time { return time.Now().Add(time.Hour) }
	gc := func() map[uint64]bool {
		t.Helper()
		objs, err := tiered.GCWAL(ctx, store, "tl", tiered.WALGCOptions{Grace: time.Nanosecond, Force: true, Now: later})
		if err != nil {
			t.Fatal(err)
		}
		removed := map[uint64]bool{}
		for _, o := range objs {
			if o.Remove {
				removed[o.Sequence] = true
			}
		}
		return removed
	}
	if removed := gc(); len(removed) != 0 {
		t.Fatalf("gc removed numbers %v of an idle writer's fences; every one may still stop it", removed)
	}
	// The writer comes back: its puts meet the fences (which name other
	// partitions) and its object lands past them, at 7.
	appendAndFlush("b", 1)
	if got := w.NextSequence(); got != 8 {
		t.Fatalf("the writer's next number is %d, want 8 (past the fences at 2..6)", got)
	}
	removed := gc()
	for seq := uint64(2); seq <= 3; seq++ {
		if !removed[seq] {
			t.Errorf("the fence at %d, which the writer has passed, was kept", seq)
		}
	}
	for seq := uint64(4); seq <= 7; seq++ {
		if removed[seq] {
			t.Errorf("number %d, among the writer's newest, was removed", seq)
		}
	}
}

// TestDisklessLeadAgainAfterAFailureWhileFollowing: a partition becomes a
// follower while a WAL object holding its appends is in flight, the
// object fails, and this Backend leads the partition again on its own
// record: its log is cut back to the durable end, the next append takes
// the offsets the failed ones had, and a new leader on an empty
// directory reads exactly the acknowledged records. (Before, the failure
// went unreported, the durable end later jumped over the hole, and the
// records appended after it were lost to the next claim.)
func TestDisklessLeadAgainAfterAFailureWhileFollowing(t *testing.T) {
	inner := mem.New()
	d := faultstore.Wrap(inner, 1)
	store := objstore.New(d, "mem://diskless-relead", objstore.Options{})
	b := openDisklessBackend(t, filepath.Join(t.TempDir(), "a"), store)
	p := openDiskless(t, b, 1)
	for i := range 5 {
		if _, err := appendOne(t, p, 2, string(rune('a'+i))); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Flush(); err != nil {
		t.Fatal(err)
	}
	durable := p.Offsets().LogEnd

	release := make(chan struct{})
	held := make(chan struct{}, 1)
	hold := d.Add(faultstore.Rule{Op: objstore.OpPut, KeyContains: "/" + wal.Dir + "/", Nth: 1, Fault: faultstore.Hook,
		Before: func(ctx context.Context, _ faultstore.Call) error {
			held <- struct{}{}
			<-release
			return errors.New("injected: the put fails")
		}})
	if _, err := appendOne(t, p, 2, "x"); err != nil {
		t.Fatal(err)
	}
	<-held // the object holding it is being put
	if err := p.BecomeFollower(ctx, 2); err != nil {
		t.Fatal(err)
	}
	close(release)
	hold.Remove()
	eventually(t, 10*time.Second, "the failed object never settled", func() bool {
		return len(walKeys(t, store)) >= 2 // the data object of 1, and the failed number's void
	})
	if err := p.BecomeLeader(ctx, 3); err != nil {
		t.Fatal(err)
	}
	first, err := appendOne(t, p, 2, "y")
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Flush(); err != nil {
		t.Fatal(err)
	}
	if first != durable+1 {
		t.Fatalf("the append after leading again ends at %d, want %d: the log was not cut back to the durable end %d", first, durable+1, durable)
	}
	want := batchesFrom(t, p, 0)
	if o := p.Offsets(); o.HighWatermark != o.LogEnd {
		t.Fatalf("offsets %+v: the high watermark must reach the log end once flushed", o)
	}

	checkBatches(t, "a new leader after the failure", newLeaderBatches(t, store, 4), want)
}

// TestDisklessReopenOnTheSameBackend: a diskless partition closed and
// opened again on the same Backend (its WAL writer the same, its
// Partition new) makes its log from the bucket on its next claim: every
// acknowledged record is there, the next append follows them, and a new
// leader elsewhere reads the same.
func TestDisklessReopenOnTheSameBackend(t *testing.T) {
	store := objstore.New(mem.New(), "mem://diskless-reopen", objstore.Options{})
	b := openDisklessBackend(t, filepath.Join(t.TempDir(), "a"), store)
	p := openDiskless(t, b, 1)
	for i := range 10 {
		if _, err := appendOne(t, p, 3, string(rune('a'+i))); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Flush(); err != nil {
		t.Fatal(err)
	}
	end := p.Offsets().LogEnd
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	p = openDiskless(t, b, 2)
	last, err := appendOne(t, p, 3, "z")
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Flush(); err != nil {
		t.Fatal(err)
	}
	if last != end+2 {
		t.Fatalf("the append after reopening ends at %d, want %d (after the %d offsets acknowledged before)", last, end+2, end)
	}
	want := batchesFrom(t, p, 0)
	if len(want) != 11 {
		t.Fatalf("%d batches after reopening and one append, want 11", len(want))
	}
	checkBatches(t, "a new leader after the reopen", newLeaderBatches(t, store, 3), want)
}

// TestDisklessReopenAtTheSameEpoch: a partition closed and opened again
// on the same Backend at the same leader epoch (its manifest says that
// epoch, its record this Backend's writer) still claims and makes its log
// from the bucket: its high watermark stays where it was, the next
// appends follow, and a new leader elsewhere reads every acknowledged
// batch. (The claim was skipped: the new Partition's durable end was 0,
// the high watermark fell to 0, and its next appends replaced the
// acknowledged offsets.)
func TestDisklessReopenAtTheSameEpoch(t *testing.T) {
	store := objstore.New(mem.New(), "mem://diskless-same-epoch", objstore.Options{})
	b := openDisklessBackend(t, filepath.Join(t.TempDir(), "a"), store)
	p := openDiskless(t, b, 1)
	acked := appendTen(t, p)
	end := p.Offsets().LogEnd
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	p = openDiskless(t, b, 1)
	for range 3 {
		if _, err := appendOne(t, p, 3, "z"); err != nil {
			t.Fatal(err)
		}
		if err := p.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	if o := p.Offsets(); o.LogEnd != end+9 || o.HighWatermark != o.LogEnd {
		t.Fatalf("offsets %+v after reopening and three appends, want log end and high watermark %d", o, end+9)
	}
	got := newLeaderBatches(t, store, 3)
	checkAcked(t, got, acked)
	if len(got) != len(acked)+3 {
		t.Errorf("the new leader holds %d batches, want %d", len(got), len(acked)+3)
	}
}

// TestDisklessReopenClaimPutFails: a partition opened anew on the same
// Backend at a new epoch rebuilds its log for its claim, whose manifest
// put fails once; the claim made again (at the next append) must not take
// the rebuild for committed: a new leader elsewhere reads every
// acknowledged batch and the new one. (It did: the record's number moved
// past the acknowledged extents, which no longer named them.)
func TestDisklessReopenClaimPutFails(t *testing.T) {
	d := faultstore.Wrap(mem.New(), 1)
	store := objstore.New(d, "mem://diskless-reopen-claim", objstore.Options{MaxAttempts: 1})
	b := openDisklessBackend(t, filepath.Join(t.TempDir(), "a"), store)
	p := openDiskless(t, b, 1)
	acked := appendTen(t, p)
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	fail := d.Add(faultstore.Rule{Op: objstore.OpPut, KeySuffix: "/manifest", Nth: 1, Fault: faultstore.FailBefore})
	p = openDiskless(t, b, 2) // its claim's put fails
	if fail.Fired() != 1 {
		t.Fatalf("the claim's manifest put failed %d times, want 1", fail.Fired())
	}
	if _, err := appendOne(t, p, 3, "z"); err != nil { // claims again
		t.Fatal(err)
	}
	if err := p.Flush(); err != nil {
		t.Fatal(err)
	}
	got := newLeaderBatches(t, store, 3)
	checkAcked(t, got, acked)
	if len(got) != len(acked)+1 {
		t.Errorf("the new leader holds %d batches, want %d", len(got), len(acked)+1)
	}
}

// TestDisklessFollowerTruncatedThenLeadsAgain: a former leader, as a
// follower, has its local log cut below its durable end (as a Kafka
// follower truncates to a new leader's epoch end); no other claim
// committed, and it leads again on its own record: it makes its log from
// the bucket again, so its high watermark never passes what the bucket
// holds and every acknowledged batch stays readable, there and on a new
// leader elsewhere. (It took the shortcut with its old durable end: the
// high watermark passed appends not yet in the bucket, and the next claim
// failed on overlapping extents.) The same after a reopened partition's
// claim landed with its answer lost.
func TestDisklessFollowerTruncatedThenLeadsAgain(t *testing.T) {
	for _, lostClaim := range []bool{false, true} {
		t.Run(fmt.Sprintf("lost-claim-answer=%v", lostClaim), func(t *testing.T) {
			d := faultstore.Wrap(mem.New(), 1)
			store := objstore.New(d, "mem://diskless-follower-cut", objstore.Options{MaxAttempts: 1})
			b := openDisklessBackend(t, filepath.Join(t.TempDir(), "a"), store)
			p := openDiskless(t, b, 1)
			acked := appendTen(t, p)
			epoch := int32(2)
			if lostClaim {
				if err := p.Close(); err != nil {
					t.Fatal(err)
				}
				fail := d.Add(faultstore.Rule{Op: objstore.OpPut, KeySuffix: "/manifest", Nth: 1, Fault: faultstore.FailAfter})
				p = openDiskless(t, b, epoch) // its claim lands, the answer is lost
				if fail.Fired() != 1 {
					t.Fatalf("the claim's put failed %d times, want 1", fail.Fired())
				}
				epoch++
			}
			if err := p.BecomeFollower(ctx, epoch); err != nil {
				t.Fatal(err)
			}
			if err := p.TruncateTo(15); err != nil {
				t.Fatal(err)
			}
			if err := p.BecomeLeader(ctx, epoch+1); err != nil {
				t.Fatal(err)
			}
			if o := p.Offsets(); o.LogEnd != 30 || o.HighWatermark != 30 {
				t.Fatalf("offsets %+v leading again, want log end and high watermark 30 (made from the bucket)", o)
			}
			if _, err := appendOne(t, p, 3, "z"); err != nil {
				t.Fatal(err)
			}
			if err := p.Flush(); err != nil {
				t.Fatal(err)
			}
			got := newLeaderBatches(t, store, epoch+2)
			checkAcked(t, got, acked)
			if len(got) != len(acked)+1 {
				t.Errorf("the new leader holds %d batches, want %d", len(got), len(acked)+1)
			}
		})
	}
}

// TestDisklessCloseWhileAnAppendWaitsForSpace: with the bucket not
// answering, appends fill the writer's buffer and the next one waits for
// space; Close of the partition does not wait for the bucket (it cancels
// that wait).
func TestDisklessCloseWhileAnAppendWaitsForSpace(t *testing.T) {
	d := faultstore.Wrap(mem.New(), 1)
	store := objstore.New(d, "mem://diskless-close-blocked", objstore.Options{MaxAttempts: 1})
	m := fastManager
	m.DisklessCommitInterval = 5 * time.Millisecond
	m.DisklessBufferMaxBytes = 500
	m.DisklessUploadsInFlight = 1
	b := openTieredBackend(t, filepath.Join(t.TempDir(), "a"), store, tiered.BackendOptions{Manager: m})
	p := openDiskless(t, b, 1)
	release := make(chan struct{})
	defer close(release)
	d.Add(faultstore.Rule{Op: objstore.OpPut, KeyContains: "/" + wal.Dir + "/", Every: 1, Fault: faultstore.Hook,
		Before: func(ctx context.Context, _ faultstore.Call) error {
			select {
			case <-release:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}})
	go func() {
		for i := range 10 {
			appendOne(t, p, 3, string(rune('b'+i))) // the later ones wait for space
		}
	}()
	time.Sleep(300 * time.Millisecond)
	closed := make(chan error, 1)
	go func() { closed <- p.Close() }()
	select {
	case <-closed:
	case <-time.After(20 * time.Second):
		t.Fatal("Close waited on an append blocked on the writer's buffer")
	}
}

// TestDisklessLeaderTruncatedWithAnUploadInFlight: a leader's log cut
// (TruncateTo) inside appends whose object is still being put, then
// appended to: the old object's landing does not carry the high watermark
// past the new appends, and a new leader elsewhere can claim and reads the
// batches acknowledged before the cut.
func TestDisklessLeaderTruncatedWithAnUploadInFlight(t *testing.T) {
	d := faultstore.Wrap(mem.New(), 1)
	store := objstore.New(d, "mem://diskless-leader-cut", objstore.Options{MaxAttempts: 1})
	b := openDisklessBackend(t, filepath.Join(t.TempDir(), "a"), store)
	p := openDiskless(t, b, 1)
	if _, err := appendOne(t, p, 3, "a"); err != nil {
		t.Fatal(err)
	}
	if err := p.Flush(); err != nil {
		t.Fatal(err)
	}
	acked := batchesFrom(t, p, 0)
	release := make(chan struct{})
	held := make(chan struct{}, 1)
	d.Add(faultstore.Rule{Op: objstore.OpPut, KeyContains: "/" + wal.Dir + "/", Nth: 1, Fault: faultstore.Hook,
		Before: func(ctx context.Context, _ faultstore.Call) error { held <- struct{}{}; <-release; return nil }})
	appendOne(t, p, 3, "b") // 3..5
	appendOne(t, p, 3, "c") // 6..8
	<-held
	if err := p.TruncateTo(6); err != nil {
		t.Fatal(err)
	}
	appendOne(t, p, 3, "z") // cut back to the durable end first, or at 6
	close(release)
	p.Flush()
	if o := p.Offsets(); o.HighWatermark > o.LogEnd {
		t.Fatalf("offsets %+v: the high watermark past the log end", o)
	}
	got := newLeaderBatches(t, store, 2)
	checkAcked(t, got, acked)
}

// appendTen appends ten batches of three records to p as its leader,
// flushes them into the bucket and returns them by last offset.
func appendTen(t *testing.T, p *tiered.Partition) map[int64][]byte {
	t.Helper()
	for i := range 10 {
		if _, err := appendOne(t, p, 3, string(rune('a'+i))); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Flush(); err != nil {
		t.Fatal(err)
	}
	return batchesFrom(t, p, 0)
}

// newLeaderBatches opens the diskless partition on a new Backend over
// store (a new leader elsewhere, on an empty directory) at epoch, and
// reads every batch it serves.
func newLeaderBatches(t *testing.T, store *objstore.Store, epoch int32) map[int64][]byte {
	t.Helper()
	b := openDisklessBackend(t, filepath.Join(t.TempDir(), "b"), store)
	p := openDiskless(t, b, epoch)
	// Its claim in BecomeLeader may lose to an older leader still
	// committing (three tries): reads answer ErrStorage until a claim
	// lands (TestDisklessUnclaimedLeaderServesNothing).
	waitClaimed(t, p, "the new leader never claimed the partition")
	return batchesFrom(t, p, 0)
}

// waitClaimed waits until a read of p succeeds: a diskless leader serves
// none until its claim lands.
func waitClaimed(t *testing.T, p *tiered.Partition, what string) {
	t.Helper()
	eventually(t, 20*time.Second, what, func() bool {
		r, err := p.Read(ctx, 0, backend.ReadOptions{MaxBytes: 1, MinOneBatch: true})
		if err == nil {
			r.Close()
		}
		return err == nil
	})
}

// checkAcked fails for each acknowledged batch a new leader's log does
// not hold byte for byte.
func checkAcked(t *testing.T, got, acked map[int64][]byte) {
	t.Helper()
	for off, want := range acked {
		if !bytes.Equal(got[off], want) {
			t.Errorf("the acknowledged batch ending at %d is lost or changed on the new leader", off)
		}
	}
}

// TestDisklessUnclaimedLeaderServesNothing: a new leader whose claim
// failed (the bucket refused its manifest) has not made its log's tail
// from the bucket's WAL: it answers reads and lookups with a retryable
// storage error, never from a log that ends short of what the old leader
// acknowledged (a consumer ahead of that end would be sent out of range,
// and reset its offset). Once the bucket takes the claim, the next read
// claims and serves every record.
func TestDisklessUnclaimedLeaderServesNothing(t *testing.T) {
	inner := mem.New()
	store := objstore.New(inner, "mem://unclaimed", objstore.Options{})
	b1 := openDisklessBackend(t, filepath.Join(t.TempDir(), "a"), store)
	p1 := openDiskless(t, b1, 1)
	for i := range 20 {
		if _, err := appendOne(t, p1, 5, string(rune('a'+i%26))); err != nil {
			t.Fatal(err)
		}
	}
	if err := p1.Flush(); err != nil {
		t.Fatal(err)
	}
	want := batchesFrom(t, p1, 0)

	d := faultstore.Wrap(inner, 1)
	refuse := d.Add(faultstore.Rule{Op: objstore.OpPut, KeySuffix: "/manifest", Every: 1, Fault: faultstore.Permanent})
	b2 := openDisklessBackend(t, filepath.Join(t.TempDir(), "b"), objstore.New(d, "mem://unclaimed-2", objstore.Options{}))
	p2 := openDiskless(t, b2, 2) // its claim fails: a warning
	if _, err := p2.Read(ctx, 0, backend.ReadOptions{MaxBytes: 1 << 20}); !errors.Is(err, backend.ErrStorage) {
		t.Fatalf("a read of a leader that has not claimed: %v; want ErrStorage", err)
	}
	if _, _, _, err := p2.OffsetForTimestamp(ctx, 0); !errors.Is(err, backend.ErrStorage) {
		t.Fatalf("a lookup of a leader that has not claimed: %v; want ErrStorage", err)
	}
	// Its epochs and offsets end short of what the bucket holds too: an
	// answer from them would send a consumer back (truncation detected).
	if _, _, _, err := p2.EndOffsetForEpoch(ctx, 1); !errors.Is(err, backend.ErrStorage) {
		t.Fatalf("OffsetsForLeaderEpoch of a leader that has not claimed: %v; want ErrStorage", err)
	}
	if err := p2.Ready(ctx); !errors.Is(err, backend.ErrStorage) {
		t.Fatalf("Ready of a leader that has not claimed: %v; want ErrStorage", err)
	}
	refuse.Remove()
	// A read tries the claim again (at most once a second), as do the
	// Backend's service and the first append.
	waitClaimed(t, p2, "the leader never claimed once the bucket took it")
	checkBatches(t, "the leader once the bucket took its claim", batchesFrom(t, p2, 0), want)
	if err := p2.Ready(ctx); err != nil {
		t.Fatalf("Ready once claimed: %v", err)
	}
}
