package tiered_test

import (
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/local"
	"github.com/tierlog/tierlog/objstore"
	"github.com/tierlog/tierlog/objstore/mem"
	"github.com/tierlog/tierlog/tiered"
)

// TestReplicaAllSegmentsExpired: the origin's retention removed
// every segment (its manifest names none, its log start is past the
// replica's local log end). The replica's offsets must stay ordered
// (LogStart <= HighWatermark <= LogEnd) and a read at its log start must
// not be out of range of the range it itself advertises.
func TestReplicaAllSegmentsExpired(t *testing.T) {
	inner := mem.New()
	originStore := objstore.New(inner, "mem://origin", objstore.Options{})
	ro := &noWrites{Driver: inner}
	replicaStore := objstore.New(ro, "mem://origin-replica", objstore.Options{})
	c := cfg(t, "segment.bytes", "262144", "local.retention.ms", "0", "file.delete.delay.ms", "0", "retention.ms", "-1")
	origin := open(t, filepath.Join(t.TempDir(), "orders-0"), originStore, 1, c)
	defer origin.Close()
	produce(t, origin, 5_000)
	if _, err := origin.Offload(ctx); err != nil {
		t.Fatal(err)
	}
	end := origin.Manifest().Segments[len(origin.Manifest().Segments)-1].LastOffset + 1
	if err := origin.DeleteRecordsBefore(ctx, end); err != nil {
		t.Fatal(err)
	}
	if n, err := origin.ApplyRetention(ctx); err != nil || n == 0 {
		t.Fatalf("origin retention: %d %v", n, err)
	}
	if m := origin.Manifest(); len(m.Segments) != 0 || m.LogStartOffset != end {
		t.Fatalf("origin manifest: %d segments, log start %d", len(m.Segments), m.LogStartOffset)
	}

	l, err := local.Open(filepath.Join(t.TempDir(), "orders-0"), local.Options{Config: cfg(t), LogStartOffset: -1, HighWatermark: -1})
	if err != nil {
		t.Fatal(err)
	}
	replica, err := tiered.Open(ctx, l, tiered.Options{Store: replicaStore, Prefix: "tl/orders-0", ReadReplica: true})
	if err != nil {
		t.Fatal(err)
	}
	defer replica.Close()
	o := replica.Offsets()
	t.Logf("replica offsets: %+v", o)
	if o.LogStart > o.HighWatermark || o.HighWatermark > o.LogEnd {
		t.Errorf("the replica's offsets are out of order: log start %d, high watermark %d, log end %d (the origin's log start is %d)",
			o.LogStart, o.HighWatermark, o.LogEnd, end)
	}
	_, err = replica.Read(ctx, o.LogStart, backend.ReadOptions{MaxBytes: 1 << 20, MinOneBatch: true})
	var oor *backend.OffsetOutOfRangeError
	if errors.As(err, &oor) {
		t.Errorf("a read at the replica's own log start %d: %v", o.LogStart, err)
	}
	ro.check(t)
}

// TestReviewReplicaBackendLocalTurnedTiered: a replica Backend's local
// topic (its own records) turned tiered becomes a read replica whose
// local log still holds the replica's own records: they are served as if
// they were the origin's.
// TestReplicaBackendRefusesLocalRecords: a replica Backend's partition
// that holds records of its own (a local topic turned tiered) is not
// opened as a replica: it would serve them for the origin's.
func TestReplicaBackendRefusesLocalRecords(t *testing.T) {
	inner := mem.New()
	ro := &noWrites{Driver: inner}
	b, err := tiered.OpenBackend(t.TempDir(), tiered.BackendOptions{Store: objstore.New(ro, "mem://origin-replica", objstore.Options{}), Prefix: "tl",
		ReadReplica: true, Manager: tiered.ManagerConfig{TaskInterval: 20 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	lp, err := b.Open(ctx, "orders", 0, cfg(t))
	if err != nil {
		t.Fatal(err)
	}
	produceValue(t, lp, 100, "r") // the replica's own records
	if _, err := b.Open(ctx, "orders", 0, cfg(t, "remote.storage.enable", "true")); !errors.Is(err, backend.ErrInvalidConfig) {
		t.Fatalf("a local topic with records turned into a read replica: %v", err)
	}
	ro.check(t)
}

func TestReplicaBackendAnswersAtOpen(t *testing.T) {
	inner := mem.New()
	originStore := objstore.New(inner, "mem://origin", objstore.Options{})
	c := cfg(t, "segment.bytes", "262144", "local.retention.ms", "0", "file.delete.delay.ms", "0", "retention.ms", "-1")
	origin := open(t, filepath.Join(t.TempDir(), "orders-0"), originStore, 1, c)
	defer origin.Close()
	produce(t, origin, 3_000)
	if _, err := origin.Offload(ctx); err != nil {
		t.Fatal(err)
	}
	b, err := tiered.OpenBackend(t.TempDir(), tiered.BackendOptions{Store: objstore.New(&noWrites{Driver: inner}, "mem://origin-replica", objstore.Options{}), Prefix: "tl",
		ReadReplica: true, Manager: tiered.ManagerConfig{TaskInterval: time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	bp, err := b.Open(ctx, "orders", 0, cfg(t, "remote.storage.enable", "true"))
	if err != nil {
		t.Fatal(err)
	}
	end := origin.Manifest().Segments[len(origin.Manifest().Segments)-1].LastOffset + 1
	o := bp.Offsets()
	latest, _, _, _ := bp.OffsetForTimestamp(ctx, backend.LatestTimestamp)
	e, off, ok, err := bp.EndOffsetForEpoch(ctx, 1)
	t.Logf("before the first step: offsets %+v, latest %d, EndOffsetForEpoch(1) = %d %d %v %v; the bucket ends at %d", o, latest, e, off, ok, err, end)
	if o.HighWatermark != end || latest != end {
		t.Errorf("an open replica partition answers high watermark %d, latest %d; the bucket ends at %d", o.HighWatermark, latest, end)
	}
}
