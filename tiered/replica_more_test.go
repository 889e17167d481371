package tiered_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/objstore"
	"github.com/tierlog/tierlog/objstore/mem"
	"github.com/tierlog/tierlog/testing/objstoretest"
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
	ro := &objstoretest.ReadOnly{Driver: inner}
	replicaStore := objstore.New(ro, "mem://origin-replica", objstore.Options{})
	origin := offloadedOrigin(t, originStore, 5_000)
	end := manifestOf(t, origin).Segments[len(manifestOf(t, origin).Segments)-1].LastOffset + 1
	if err := origin.DeleteRecordsBefore(ctx, end); err != nil {
		t.Fatal(err)
	}
	if n, err := origin.ApplyRetention(ctx); err != nil || n == 0 {
		t.Fatalf("origin retention: %d %v", n, err)
	}
	if m := manifestOf(t, origin); len(m.Segments) != 0 || m.LogStartOffset != end {
		t.Fatalf("origin manifest: %d segments, log start %d", len(m.Segments), m.LogStartOffset)
	}

	replica := openReplica(t, replicaStore)
	defer replica.Close()
	o := replica.Offsets()
	t.Logf("replica offsets: %+v", o)
	if o.LogStart > o.HighWatermark || o.HighWatermark > o.LogEnd {
		t.Errorf("the replica's offsets are out of order: log start %d, high watermark %d, log end %d (the origin's log start is %d)",
			o.LogStart, o.HighWatermark, o.LogEnd, end)
	}
	_, err := replica.Read(ctx, o.LogStart, backend.ReadOptions{MaxBytes: 1 << 20, MinOneBatch: true})
	var oor *backend.OffsetOutOfRangeError
	if errors.As(err, &oor) {
		t.Errorf("a read at the replica's own log start %d: %v", o.LogStart, err)
	}
	ro.Check(t)
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
	ro := &objstoretest.ReadOnly{Driver: inner}
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
	ro.Check(t)
}

func TestReplicaBackendAnswersAtOpen(t *testing.T) {
	inner := mem.New()
	originStore := objstore.New(inner, "mem://origin", objstore.Options{})
	origin := offloadedOrigin(t, originStore, 3_000)
	b, bp := openReplicaBackend(t, &objstoretest.ReadOnly{Driver: inner}, time.Hour)
	defer b.Close()
	end := manifestOf(t, origin).Segments[len(manifestOf(t, origin).Segments)-1].LastOffset + 1
	o := bp.Offsets()
	latest, _, _, _ := bp.OffsetForTimestamp(ctx, backend.LatestTimestamp)
	e, off, ok, err := bp.EndOffsetForEpoch(ctx, 1)
	t.Logf("before the first step: offsets %+v, latest %d, EndOffsetForEpoch(1) = %d %d %v %v; the bucket ends at %d", o, latest, e, off, ok, err, end)
	if o.HighWatermark != end || latest != end {
		t.Errorf("an open replica partition answers high watermark %d, latest %d; the bucket ends at %d", o.HighWatermark, latest, end)
	}
}

// TestTimestampLookupBucketErrorIsStorageError: a timestamp lookup that
// the bucket fails (here an index gone that the manifest still names,
// after the step a replica takes) is backend.ErrStorage
// (KAFKA_STORAGE_ERROR, which clients retry), not an unknown error.
func TestTimestampLookupBucketErrorIsStorageError(t *testing.T) {
	store := objstore.New(mem.New(), "mem://ts", objstore.Options{})
	origin := offloadedOrigin(t, store, 20_000)
	var tidx string
	store.List(ctx, "tl/orders-0/", func(o objstore.ObjectInfo) bool {
		if strings.HasSuffix(o.Key, ".timeindex") && tidx == "" {
			tidx = o.Key
		}
		return true
	})
	if err := store.Delete(ctx, tidx); err != nil {
		t.Fatal(err)
	}
	// A replica (caches of its own: the origin's offload cached its
	// indexes) whose newer manifest still names the lost index.
	r := openReplica(t, store)
	defer r.Close()
	if origin.Head().LogStartOffset() != 0 {
		t.Fatal("the origin's log start moved")
	}
	_, _, _, err := r.OffsetForTimestamp(ctx, 1_700_000_000_000)
	if !errors.Is(err, backend.ErrStorage) || !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("a timestamp lookup whose time index the bucket lost: %v; want a storage error", err)
	}
}

// TestReplicaNotYetFollowedAnswersStorageError: a replica Backend opened
// with the bucket unreachable answers reads, timestamp lookups and epoch
// lookups with a retryable storage error (an empty log's out-of-range
// would send a consumer to reset its offset), and the origin's answers
// once the bucket is back, on the first request.
func TestReplicaNotYetFollowedAnswersStorageError(t *testing.T) {
	inner := mem.New()
	origin := offloadedOrigin(t, objstore.New(inner, "mem://origin", objstore.Options{}), 3_000)
	down := &unreachable{Driver: inner}
	down.down.Store(true)
	b, bp := openReplicaBackend(t, down, time.Hour) // no service step during the test
	defer b.Close()
	end := manifestOf(t, origin).Segments[len(manifestOf(t, origin).Segments)-1].LastOffset + 1
	if _, err := bp.Read(ctx, 100, backend.ReadOptions{MaxBytes: 1 << 20, MinOneBatch: true}); !errors.Is(err, backend.ErrStorage) {
		t.Fatalf("a read of a replica that has not followed its bucket: %v; want a storage error", err)
	}
	if _, _, _, err := bp.OffsetForTimestamp(ctx, backend.LatestTimestamp); !errors.Is(err, backend.ErrStorage) {
		t.Fatalf("ListOffsets latest on it: %v; want a storage error", err)
	}
	if _, _, _, err := bp.EndOffsetForEpoch(ctx, 1); !errors.Is(err, backend.ErrStorage) {
		t.Fatalf("OffsetsForLeaderEpoch on it: %v; want a storage error", err)
	}
	down.down.Store(false)
	if latest, _, _, err := bp.OffsetForTimestamp(ctx, backend.LatestTimestamp); err != nil || latest != end {
		t.Fatalf("ListOffsets latest with the bucket back: %d %v; want %d", latest, err, end)
	}
	sameBatches(t, bp, origin)
}

// unreachable is a driver whose every call fails while down is set.
type unreachable struct {
	objstore.Driver
	down atomic.Bool
}

var errUnreachable = fmt.Errorf("%w: test: the bucket is unreachable", objstore.ErrRetryable)

func (d *unreachable) Get(ctx context.Context, key string, off, n int64) (io.ReadCloser, objstore.ObjectInfo, error) {
	if d.down.Load() {
		return nil, objstore.ObjectInfo{}, errUnreachable
	}
	return d.Driver.Get(ctx, key, off, n)
}

func (d *unreachable) Head(ctx context.Context, key string) (objstore.ObjectInfo, error) {
	if d.down.Load() {
		return objstore.ObjectInfo{}, errUnreachable
	}
	return d.Driver.Head(ctx, key)
}
