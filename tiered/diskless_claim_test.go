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
	"github.com/tierlog/tierlog/record"
	"github.com/tierlog/tierlog/tiered"
)

// disklessPair opens two quiet Backends over one bucket with a
// compacted diskless partition each.
func disklessPair(t *testing.T, kv ...string) (parts [2]*tiered.Partition) {
	store := objstore.New(mem.New(), "mem://diskless-pair", objstore.Options{})
	c := cfg(t, append([]string{"cleanup.policy", "compact", "diskless.enable", "true", "segment.bytes", "1500", "local.retention.ms", "0",
		"delete.retention.ms", "86400000", "file.delete.delay.ms", "0"}, kv...)...)
	quiet := fastManager
	quiet.TaskInterval = time.Hour
	quiet.DisklessCommitInterval = 5 * time.Millisecond
	for i := range parts {
		b := openTieredBackend(t, filepath.Join(t.TempDir(), "b"), store, tiered.BackendOptions{Manager: quiet})
		p, err := b.Open(ctx, "users", 0, c)
		if err != nil {
			t.Fatal(err)
		}
		parts[i] = p.(*tiered.Partition)
	}
	return parts
}

func appendKeyed(t *testing.T, p *tiered.Partition, epoch int32, pid int64, key, value string) int64 {
	t.Helper()
	h := record.NewBatchHeader()
	if pid >= 0 {
		h.ProducerID, h.ProducerEpoch, h.BaseSequence, h.Transactional = pid, 0, 0, true
	}
	var b record.Builder
	b.Reset(h)
	b.Append(time.Now().UnixMilli(), []byte(key), []byte(value), nil)
	data, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	info, err := p.Append(ctx, append([]byte(nil), data...), backend.AppendOptions{AssignOffsets: true, LeaderEpoch: epoch})
	if err != nil {
		t.Fatal(err)
	}
	return info.FirstOffset
}

func appendAbort(t *testing.T, p *tiered.Partition, epoch int32, pid int64) int64 {
	t.Helper()
	var b record.Builder
	m, err := b.BuildEndTxnMarker(record.EndTxnMarker{ProducerID: pid, CoordinatorEpoch: 1, Commit: false, Timestamp: time.Now().UnixMilli()})
	if err != nil {
		t.Fatal(err)
	}
	info, err := p.Append(ctx, append([]byte(nil), m...), backend.AppendOptions{AssignOffsets: true, LeaderEpoch: epoch, Coordinator: true})
	if err != nil {
		t.Fatal(err)
	}
	return info.FirstOffset
}

func settleDiskless(t *testing.T, p *tiered.Partition) {
	t.Helper()
	if err := p.SetHighWatermark(p.Offsets().LogEnd); err != nil {
		t.Fatal(err)
	}
	if err := p.Flush(); err != nil {
		t.Fatal(err)
	}
}

// TestDisklessClaimKeepsAnOpenTransaction: an aborted transaction whose
// data a leader consolidated and whose ABORT marker lies past the
// bucket's segments when another Backend claims. The claim starts the new
// leader's log at the segments' end with the producer state of the last
// segment of the manifest it claims over (it took the manifest it had
// followed, older, and so none): the marker appended from the WAL ends
// the open transaction and is indexed, the bucket's cleaner removes the
// aborted record, and the key's committed value stays. (Before, the
// abort was indexed nowhere, and the cleaner took the aborted record for
// the key's latest and removed the committed one.)
func TestDisklessClaimKeepsAnOpenTransaction(t *testing.T) {
	parts := disklessPair(t)
	x, y := parts[0], parts[1]
	if err := x.BecomeLeader(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if err := y.BecomeFollower(ctx, 1); err != nil {
		t.Fatal(err)
	}
	v1 := appendKeyed(t, x, 1, -1, "k", "committed") // offset 0: k's latest value
	ab := appendKeyed(t, x, 1, 7, "k", "aborted")    // offset 1: transactional data
	if err := x.Roll(); err != nil {                 // the data's segment closes before the marker
		t.Fatal(err)
	}
	marker := appendAbort(t, x, 1, 7) // offset 2: ABORT
	settleDiskless(t, x)
	if _, err := x.Offload(ctx); err != nil { // consolidates 0..1
		t.Fatal(err)
	}
	if got := x.Head().LastOffset(); got != ab {
		t.Fatalf("the bucket ends at %d, want %d", got, ab)
	}
	// Leadership moves to y's Backend: its claim starts the log at 2 and
	// appends the marker from the WAL.
	if err := x.BecomeFollower(ctx, 2); err != nil {
		t.Fatal(err)
	}
	if err := y.BecomeLeader(ctx, 2); err != nil {
		t.Fatal(err)
	}
	appendKeyed(t, y, 2, -1, "other", "x") // offset 3
	settleDiskless(t, y)
	if err := y.Roll(); err != nil {
		t.Fatal(err)
	}
	if _, err := y.Offload(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := y.ApplyRetention(ctx); err != nil {
		t.Fatal(err)
	}
	st, err := y.CompactRemote(ctx, tiered.CompactOptions{Force: true, ScratchDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	got, _ := readAllRecords(t, y)
	if _, ok := got[v1]; !ok {
		t.Fatalf("k's latest committed value (offset %d) is gone; the aborted record at %d is served: %v (marker at %d, round %+v)", v1, ab, got[ab], marker, st)
	}
	if _, ok := got[ab]; ok || st.AbortedRemoved != 1 {
		t.Fatalf("the aborted record at %d: served %v; the round removed %d aborted records, want 1", ab, ok, st.AbortedRemoved)
	}
}

// TestDisklessClaimKeepsTheTailsEpochs: a claim that rebuilds a new
// leader's log from the WAL keeps the tail's records at the epoch they
// were written at: the leader's epoch begins at the rebuilt log's end.
// (Before, BecomeLeader began the epoch before the tail was appended, the
// consolidated segment named the new epoch, and once the bucket's cleaner
// rewrote it the Backend that wrote the records, leading again, could
// never show its copy to be the bucket's: its local retention, and every
// Offload, failed from then on.)
func TestDisklessClaimKeepsTheTailsEpochs(t *testing.T) {
	parts := disklessPair(t)
	x, y := parts[0], parts[1]
	if err := x.BecomeLeader(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if err := y.BecomeFollower(ctx, 1); err != nil {
		t.Fatal(err)
	}
	for i := range 12 {
		appendKeyed(t, x, 1, -1, []string{"a", "b", "c"}[i%3], "v") // superseded values: the cleaner rewrites
	}
	settleDiskless(t, x)
	if err := x.BecomeFollower(ctx, 2); err != nil {
		t.Fatal(err)
	}
	if err := y.BecomeLeader(ctx, 2); err != nil { // rebuilds 0..11 from the WAL
		t.Fatal(err)
	}
	if es, err := y.LeaderEpochs(ctx); err != nil || len(es) != 2 || es[0] != (local.EpochEntry{Epoch: 1, StartOffset: 0}) || es[1] != (local.EpochEntry{Epoch: 2, StartOffset: 12}) {
		t.Fatalf("y's leader epochs after its claim: %+v (%v); want epoch 1 from 0 (the tail's) and 2 from 12", es, err)
	}
	if err := y.Roll(); err != nil {
		t.Fatal(err)
	}
	if _, err := y.Offload(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := y.ApplyRetention(ctx); err != nil {
		t.Fatal(err)
	}
	st, err := y.CompactRemote(ctx, tiered.CompactOptions{Force: true, ScratchDir: t.TempDir()})
	if err != nil || st.SegmentsReplaced == 0 {
		t.Fatalf("the round: %+v, %v", st, err)
	}
	if err := y.BecomeFollower(ctx, 3); err != nil {
		t.Fatal(err)
	}
	if err := x.BecomeLeader(ctx, 3); err != nil { // keeps its own copy of 0..11
		t.Fatal(err)
	}
	if err := x.Roll(); err != nil {
		t.Fatal(err)
	}
	if _, err := x.Offload(ctx); err != nil { // local retention runs with the upload pass
		t.Fatalf("x's local retention of its copy of a segment the bucket's cleaner rewrote: %v (local log %+v)", err, x.Offsets())
	}
	if o := x.Offsets(); o.LocalLogStart != o.TieredEnd {
		t.Fatalf("x's local log still starts at %d, the bucket ends at %d", o.LocalLogStart, o.TieredEnd)
	}
}

// TestFollowerNeverClaimsTheNewEpoch: a leader's change that passed its
// role check just before BecomeFollower must not claim the bucket at the
// new leader's epoch (the new epoch is stored with the follower's role
// first): it fails as not the leader, and the manifest keeps the epoch of
// the last leader that claimed it. (Before, it claimed at the new epoch and
// fenced the real leader until the next election.)
func TestFollowerNeverClaimsTheNewEpoch(t *testing.T) {
	store := objstore.New(mem.New(), "mem://racing-follower", objstore.Options{})
	p := open(t, filepath.Join(t.TempDir(), "orders-0"), store, 1, cfg(t, "remote.storage.enable", "true"))
	defer p.Close()
	produce(t, p, 100)
	if _, err := p.Offload(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.BecomeFollower(ctx, 2); err != nil {
		t.Fatal(err)
	}
	if err := tiered.ClaimAfterRoleCheck(ctx, p); !errors.Is(err, tiered.ErrNotLeader) {
		t.Fatalf("a change racing BecomeFollower claimed: %v, want ErrNotLeader", err)
	}
	if e := manifestOf(t, p).WriterEpoch; e != 1 {
		t.Fatalf("the manifest names writer epoch %d, want 1: a follower claimed the new leader's epoch", e)
	}
}
