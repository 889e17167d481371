package tiered_test

import (
	"bytes"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/local"
	"github.com/tierlog/tierlog/objstore"
	"github.com/tierlog/tierlog/objstore/mem"
	"github.com/tierlog/tierlog/testing/objstoretest"
	"github.com/tierlog/tierlog/tiered"
)

// offloadedOrigin is the origin partition of the replica tests, on store:
// n records in 256 KiB segments, every closed one offloaded and gone from
// its disk, kept for good (retention.ms -1). Closed with the test.
func offloadedOrigin(t *testing.T, store *objstore.Store, n int) *tiered.Partition {
	t.Helper()
	c := cfg(t, "segment.bytes", "262144", "local.retention.ms", "0", "file.delete.delay.ms", "0", "retention.ms", "-1")
	origin := open(t, filepath.Join(t.TempDir(), "orders-0"), store, 1, c)
	t.Cleanup(func() { origin.Close() })
	produce(t, origin, n)
	if _, err := origin.Offload(ctx); err != nil {
		t.Fatal(err)
	}
	return origin
}

// openReplica opens a read replica of tl/orders-0 on store, over a new
// empty log directory.
func openReplica(t *testing.T, store *objstore.Store) *tiered.Partition {
	t.Helper()
	l, err := local.Open(filepath.Join(t.TempDir(), "orders-0"), local.Options{Config: cfg(t), LogStartOffset: -1, HighWatermark: -1})
	if err != nil {
		t.Fatal(err)
	}
	p, err := tiered.Open(ctx, l, tiered.Options{Store: store, Prefix: "tl/orders-0", ReadReplica: true})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// openReplicaBackend opens a replica Backend of the bucket under "tl"
// through drv, stepping every interval, and its partition orders-0.
func openReplicaBackend(t *testing.T, drv objstore.Driver, interval time.Duration) (*tiered.Backend, backend.Partition) {
	t.Helper()
	b, err := tiered.OpenBackend(t.TempDir(), tiered.BackendOptions{Store: objstore.New(drv, "mem://origin-replica", objstore.Options{}), Prefix: "tl",
		ReadReplica: true, Manager: tiered.ManagerConfig{TaskInterval: interval}})
	if err != nil {
		t.Fatal(err)
	}
	bp, err := b.Open(ctx, "orders", 0, cfg(t, "remote.storage.enable", "true"))
	if err != nil {
		b.Close()
		t.Fatal(err)
	}
	return b, bp
}

// sameBatches checks that the replica serves exactly the origin's batches
// from its log start to its high watermark.
func sameBatches(t *testing.T, replica, origin backend.Partition) {
	t.Helper()
	ro, oo := replica.Offsets(), origin.Offsets()
	if ro.LogStart != oo.LogStart {
		t.Fatalf("the replica starts at %d, the origin at %d", ro.LogStart, oo.LogStart)
	}
	want := batchesFrom(t, origin, oo.LogStart)
	got := batchesFrom(t, replica, ro.LogStart)
	n := 0
	for last, b := range want {
		if last >= ro.HighWatermark {
			continue
		}
		n++
		if !bytes.Equal(got[last], b) {
			t.Fatalf("the batch ending at %d differs on the replica", last)
		}
	}
	if n != len(got) || n == 0 {
		t.Fatalf("the replica serves %d batches, the origin %d below the replica's high watermark %d", len(got), n, ro.HighWatermark)
	}
}

// TestReadReplica: a partition opened as a read replica of another
// partition's bucket serves the origin's offloaded records from the
// bucket alone, byte for byte, with its log start, timestamps and epochs;
// follows new commits with ReplicaStep; refuses writes; answers out of
// range (never another record) once the origin's retention deleted what
// it was reading; and writes nothing to the bucket.
func TestReadReplica(t *testing.T) {
	inner := mem.New()
	originStore := objstore.New(inner, "mem://origin", objstore.Options{})
	ro := &objstoretest.ReadOnly{Driver: inner}
	replicaStore := objstore.New(ro, "mem://origin-replica", objstore.Options{})
	origin := offloadedOrigin(t, originStore, 5_000)

	replica := openReplica(t, replicaStore)
	defer replica.Close()
	end := manifestOf(t, origin).Segments[len(manifestOf(t, origin).Segments)-1].LastOffset + 1
	if o := replica.Offsets(); o.HighWatermark != end || o.LogEnd != end || o.LastStableOffset != end {
		t.Fatalf("the replica's offsets %+v; the bucket ends at %d", o, end)
	}
	sameBatches(t, replica, origin)
	for _, ts := range []int64{0, 1_700_000_000_000 + 500, 1_700_000_000_000 + 4000} {
		wo, _, wok, werr := origin.OffsetForTimestamp(ctx, ts)
		go_, _, gok, gerr := replica.OffsetForTimestamp(ctx, ts)
		if werr != nil || gerr != nil || wok != gok || (wok && wo < end && wo != go_) {
			t.Fatalf("timestamp %d: origin %d %v %v, replica %d %v %v", ts, wo, wok, werr, go_, gok, gerr)
		}
	}
	if e, off, ok, err := replica.EndOffsetForEpoch(ctx, 1); err != nil || !ok || e != 1 || off != end {
		t.Fatalf("EndOffsetForEpoch(1) on the replica: %d %d %v %v, want 1 %d", e, off, ok, err, end)
	}

	// The origin goes on: the replica follows at its next step.
	produce(t, origin, 5_000)
	if _, err := origin.Offload(ctx); err != nil {
		t.Fatal(err)
	}
	if err := replica.ReplicaStep(ctx); err != nil {
		t.Fatal(err)
	}
	end2 := manifestOf(t, origin).Segments[len(manifestOf(t, origin).Segments)-1].LastOffset + 1
	if end2 <= end || replica.Offsets().HighWatermark != end2 {
		t.Fatalf("after a step the replica's high watermark is %d; the bucket ends at %d (was %d)", replica.Offsets().HighWatermark, end2, end)
	}
	sameBatches(t, replica, origin)

	// Writes are refused.
	if _, err := replica.Append(ctx, []byte{0}, backend.AppendOptions{AssignOffsets: true}); !errors.Is(err, tiered.ErrReadReplica) || !errors.Is(err, backend.ErrNotLeader) {
		t.Fatalf("an append to the replica: %v", err)
	}
	if err := replica.BecomeLeader(ctx, 5); !errors.Is(err, tiered.ErrReadReplica) {
		t.Fatalf("BecomeLeader on the replica: %v", err)
	}
	if err := replica.DeleteRecordsBefore(ctx, 10); !errors.Is(err, tiered.ErrReadReplica) {
		t.Fatalf("DeleteRecordsBefore on the replica: %v", err)
	}

	// The origin's retention deletes the first segments, which a
	// replica's manifest still names: a read there that finds them gone
	// is out of range. (This replica's caches hold none of them; the one
	// above may answer from its cache, the records they were, until its
	// next step.)
	cold := openReplica(t, replicaStore)
	defer cold.Close()
	coldTs := openReplica(t, replicaStore) // for a ListOffsets by time
	defer coldTs.Close()
	cut := manifestOf(t, origin).Segments[2].BaseOffset
	if err := origin.DeleteRecordsBefore(ctx, cut); err != nil {
		t.Fatal(err)
	}
	if n, err := origin.ApplyRetention(ctx); err != nil || n == 0 {
		t.Fatalf("origin retention: %d %v", n, err)
	}
	if cold.Offsets().LogStart != 0 {
		t.Fatal("the replica moved before its step")
	}
	_, err := cold.Read(ctx, 0, backend.ReadOptions{MaxBytes: 1 << 20, MinOneBatch: true})
	var oor *backend.OffsetOutOfRangeError
	if !errors.As(err, &oor) || oor.LogStart != cut {
		t.Fatalf("a replica's read of a segment the origin's retention deleted: %v; want out of range from %d", err, cut)
	}
	sameBatches(t, cold, origin)
	// A timestamp lookup that finds a time index gone steps too: the
	// answer is the newer manifest's.
	if off, _, ok, err := coldTs.OffsetForTimestamp(ctx, 1_700_000_000_000); err != nil || !ok || off != cut {
		t.Fatalf("a replica's timestamp lookup in a segment the origin's retention deleted: %d %v %v; want %d", off, ok, err, cut)
	}
	if err := replica.ReplicaStep(ctx); err != nil {
		t.Fatal(err)
	}
	sameBatches(t, replica, origin)
	replica.Close() // closing writes nothing to the bucket either
	cold.Close()
	coldTs.Close()
	ro.Check(t)
}

// TestReadReplicaBackend: a Backend opened as a read replica serves a
// topic's partition from the bucket, steps it from its service, refuses
// a diskless topic, and its Delete removes only its own files.
func TestReadReplicaBackend(t *testing.T) {
	inner := mem.New()
	originStore := objstore.New(inner, "mem://origin", objstore.Options{})
	origin := offloadedOrigin(t, originStore, 5_000)
	ro := &objstoretest.ReadOnly{Driver: inner}
	b, bp := openReplicaBackend(t, ro, 20*time.Millisecond)
	defer b.Close()
	end := manifestOf(t, origin).Segments[len(manifestOf(t, origin).Segments)-1].LastOffset + 1
	eventually(t, 10*time.Second, "the replica reaches the bucket's end", func() bool { return bp.Offsets().HighWatermark == end })
	sameBatches(t, bp, origin)
	produce(t, origin, 3_000)
	if _, err := origin.Offload(ctx); err != nil {
		t.Fatal(err)
	}
	end = manifestOf(t, origin).Segments[len(manifestOf(t, origin).Segments)-1].LastOffset + 1
	eventually(t, 10*time.Second, "the replica reaches the bucket's end", func() bool { return bp.Offsets().HighWatermark == end })
	sameBatches(t, bp, origin)
	// A diskless topic is served as a replica too (replica_wal.go): it
	// has no WAL writer of its own and takes no write.
	dp, err := b.Open(ctx, "fast", 0, cfg(t, "diskless.enable", "true"))
	if err != nil {
		t.Fatalf("a diskless topic on a read replica: %v", err)
	}
	if p, ok := dp.(*tiered.Partition); !ok || !p.ReadReplica() || p.Diskless() {
		t.Fatalf("a diskless topic on a read replica opened as %T", dp)
	}
	if _, err := appendOne(t, dp, 1, "x"); !errors.Is(err, tiered.ErrReadReplica) {
		t.Fatalf("an append to a diskless topic's read replica: %v", err)
	}
	// A local topic (remote.storage.enable off, as __consumer_offsets) is
	// the replica's own, and takes writes.
	lp, err := b.Open(ctx, "own", 0, cfg(t))
	if err != nil {
		t.Fatal(err)
	}
	produce(t, lp, 10)
	if err := b.Delete(ctx, "orders", 0); err != nil {
		t.Fatal(err)
	}
	if _, err := originStore.Head(ctx, "tl/orders-0/manifest"); err != nil {
		t.Fatalf("the origin's manifest after the replica's Delete: %v", err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	ro.Check(t)
}

// BenchmarkReplicaSequential consumes all of an offloaded partition (about
// 31 MiB, S3) in 256 KiB reads with 1 MiB read-ahead, cold, from the
// origin and from a read replica of it over the same bucket: issue 27
// wants the replica's fetch throughput beside the origin's.
func BenchmarkReplicaSequential(b *testing.B) {
	for _, side := range []string{"origin", "replica"} {
		b.Run(side, func(b *testing.B) {
			var total int64
			for b.Loop() {
				b.StopTimer()
				origin, store := offloaded(b, 64<<20, 1<<20)
				p := origin
				if side == "replica" {
					l, err := local.Open(filepath.Join(b.TempDir(), "orders-0"), local.Options{Config: cfg(b), LogStartOffset: -1, HighWatermark: -1})
					if err != nil {
						b.Fatal(err)
					}
					if p, err = tiered.Open(ctx, l, tiered.Options{Store: store, Prefix: "orders-0", ReadReplica: true,
						ChunkCacheBytes: 64 << 20, PrefetchBytes: 1 << 20}); err != nil {
						b.Fatal(err)
					}
				}
				end := origin.Offsets().LocalLogStart
				b.StartTimer()
				total += readSequentially(b, p, end)
				b.StopTimer()
				if p != origin {
					p.Close()
				}
				b.StartTimer()
			}
			b.SetBytes(total / int64(b.N))
		})
	}
}

// TestReadReplicaOfDiskless: a read replica of a diskless origin serves
// the origin's segments, byte for byte, up to their end (the records past
// them, in WAL objects, are not final until the origin commits them), and
// writes nothing to the bucket. (It failed at open: a diskless manifest
// refused on a partition without diskless.enable.)
func TestReadReplicaOfDiskless(t *testing.T) {
	inner := mem.New()
	store := objstore.New(inner, "mem://diskless-origin", objstore.Options{})
	ro := &objstoretest.ReadOnly{Driver: inner}
	b := openDisklessBackend(t, filepath.Join(t.TempDir(), "a"), store)
	origin := openDiskless(t, b, 1)
	produceDiskless := func(n int) int64 {
		t.Helper()
		for i := range n {
			if _, err := appendOne(t, origin, 5, string(rune('a'+i%26))); err != nil {
				t.Fatal(err)
			}
		}
		if err := origin.Flush(); err != nil {
			t.Fatal(err)
		}
		return origin.Offsets().LogEnd
	}
	replica := openReplica(t, objstore.New(ro, "mem://diskless-replica", objstore.Options{}))
	defer replica.Close()
	follows := func(end int64) {
		t.Helper()
		eventually(t, 10*time.Second, fmt.Sprintf("the replica never reached the origin's acknowledged end %d", end), func() bool {
			if err := replica.ReplicaStep(ctx); err != nil {
				t.Fatal(err)
			}
			return replica.Offsets().HighWatermark == end
		})
		if o := replica.Offsets(); o.LogEnd != end || o.LastStableOffset != end {
			t.Fatalf("the replica's offsets %+v; want its log end at the origin's %d", o, end)
		}
		sameBatches(t, replica, origin)
	}
	// The WAL alone: no segment in the bucket yet.
	end := produceDiskless(20)
	if h := origin.Head(); h.LastOffset() >= 0 {
		t.Fatalf("the origin uploaded segments up to %d already: the test needs a tail in the WAL alone", h.LastOffset())
	}
	follows(end)
	// Segments and a tail.
	produceDiskless(120)
	eventually(t, 10*time.Second, "the origin uploaded no segment", func() bool { return origin.Head().LastOffset() >= 0 })
	end = produceDiskless(7)
	if origin.Head().LastOffset()+1 >= end {
		t.Fatalf("the bucket's segments reach the origin's end %d: the test needs a tail", end)
	}
	follows(end)
	ro.Check(t)
}
