package local_test

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/local"
	"github.com/tierlog/tierlog/record"
)

// TestBecomeLeaderRecordsEpochStart: a new leader's epoch starts at the log
// end at once, so OffsetsForLeaderEpoch answers for it before the epoch's
// first append (Kafka's maybeAssignEpochStartOffset); an older epoch
// changes nothing.
func TestBecomeLeaderRecordsEpochStart(t *testing.T) {
	l := openLog(t, filepath.Join(t.TempDir(), "orders-0"), cfg(t), false)
	defer l.Close()
	if _, err := l.Append(ctx, batchOf(5, 1, "a"), backend.AppendOptions{AssignOffsets: true, LeaderEpoch: 3}); err != nil {
		t.Fatal(err)
	}
	if err := l.BecomeLeader(ctx, 5); err != nil {
		t.Fatal(err)
	}
	if e, end, found, err := l.EndOffsetForEpoch(ctx, 4); err != nil || !found || e != 3 || end != 5 {
		t.Fatalf("EndOffsetForEpoch(4) = %d, %d, %v, %v; want epoch 3 ending at 5", e, end, found, err)
	}
	if e, end, found, _ := l.EndOffsetForEpoch(ctx, 5); !found || e != 5 || end != 5 {
		t.Fatalf("EndOffsetForEpoch(5) = %d, %d, %v; want 5, 5", e, end, found)
	}
	if err := l.BecomeLeader(ctx, 2); !errors.Is(err, backend.ErrFenced) || len(l.LeaderEpochs()) != 2 {
		t.Fatalf("an older epoch: %v, %v", err, l.LeaderEpochs())
	}
	if err := l.BecomeLeader(ctx, 5); err != nil {
		t.Fatalf("the same epoch again: %v", err)
	}
	if err := l.BecomeFollower(ctx, 6); err != nil {
		t.Fatal(err)
	}
}

// untouched records the file at path; the function it returns fails the
// test, saying what rewrote it, unless the file is still that one (the
// same inode) with the same bytes.
func untouched(t *testing.T, path string) func(what string) {
	t.Helper()
	before, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	content, _ := os.ReadFile(path)
	return func(what string) {
		t.Helper()
		after, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if got, _ := os.ReadFile(path); !os.SameFile(before, after) || string(got) != string(content) {
			t.Fatalf("%s rewrote %s: %q, was %q", what, filepath.Base(path), got, content)
		}
	}
}

// TestBecomeLeaderWritesNothing: becoming leader changes no file (the
// epoch's entry, at the log end, is one a reopen would drop); the epoch's
// first append writes the checkpoint before its batch, and a reopen then
// has the epoch where it began.
func TestBecomeLeaderWritesNothing(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "orders-0")
	l := openLog(t, dir, cfg(t), false)
	if _, err := l.Append(ctx, batchOf(5, 1, "a"), backend.AppendOptions{AssignOffsets: true, LeaderEpoch: 3}); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, local.LeaderEpochCheckpoint)
	kept := untouched(t, path)
	if err := l.BecomeLeader(ctx, 5); err != nil {
		t.Fatal(err)
	}
	kept("BecomeLeader")
	if e, end, found, _ := l.EndOffsetForEpoch(ctx, 5); !found || e != 5 || end != 5 {
		t.Fatalf("EndOffsetForEpoch(5) = %d, %d, %v; want 5, 5 before the epoch's first append", e, end, found)
	}
	if _, err := l.Append(ctx, batchOf(5, 1, "b"), backend.AppendOptions{AssignOffsets: true, LeaderEpoch: 5}); err != nil {
		t.Fatal(err)
	}
	want := []local.EpochEntry{{Epoch: 3, StartOffset: 0}, {Epoch: 5, StartOffset: 5}}
	if data, err := os.ReadFile(path); err != nil || string(data) != string(local.FormatLeaderEpochs(want)) {
		t.Fatalf("%s after the epoch's first append: %q, %v; want %v", local.LeaderEpochCheckpoint, data, err, want)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = openLog(t, dir, cfg(t), false)
	defer l.Close()
	if got := l.LeaderEpochs(); !slices.Equal(got, want) {
		t.Fatalf("epochs after reopen %v, want %v", got, want)
	}
}

// TestStartAt: a follower's log emptied and started at an offset, with the
// producers of a snapshot: duplicates of their last batches are found,
// the old segments are gone, reads start there; a damaged snapshot is
// refused before anything changes.
func TestStartAt(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "orders-0")
	src := openLog(t, filepath.Join(t.TempDir(), "src"), cfg(t), false)
	defer src.Close()
	dup := idemBatch(7, 0, 4)
	if _, err := src.Append(ctx, append([]byte(nil), dup...), backend.AppendOptions{AssignOffsets: true}); err != nil {
		t.Fatal(err)
	}
	if err := src.Roll(); err != nil { // writes the snapshot at 4
		t.Fatal(err)
	}
	snap, err := os.ReadFile(filepath.Join(src.Dir(), "00000000000000000004.snapshot"))
	if err != nil {
		t.Fatal(err)
	}

	l := openLog(t, dir, cfg(t, "segment.bytes", "1024"), false)
	defer l.Close()
	for range 10 {
		if _, err := l.Append(ctx, batchOf(5, 1, "old"), backend.AppendOptions{AssignOffsets: true}); err != nil {
			t.Fatal(err)
		}
	}
	before := len(l.SegmentInfos())
	if err := l.Segments().StartAt(ctx, 100, snap[:len(snap)-3]); err == nil || len(l.SegmentInfos()) != before {
		t.Fatalf("a damaged snapshot: %v, %d segments of %d", err, len(l.SegmentInfos()), before)
	}
	if err := l.Segments().StartAt(ctx, 100, snap); err != nil {
		t.Fatal(err)
	}
	o := l.Offsets()
	if o.LogStart != 100 || o.LogEnd != 100 || len(l.SegmentInfos()) != 1 {
		t.Fatalf("after StartAt(100): %+v, %d segments", o, len(l.SegmentInfos()))
	}
	if ps := l.Producers(); len(ps) != 1 || ps[0].ProducerID != 7 {
		t.Fatalf("producers after StartAt: %+v", ps)
	}
	if _, err := l.Read(ctx, 50, backend.ReadOptions{}); !errors.Is(err, backend.ErrOffsetOutOfRange) {
		t.Fatalf("read below the new start: %v", err)
	}
	// The follower replicates on from 100; the producer's next batch follows
	// its sequence.
	next := idemBatch(7, 4, 2)
	record.Batch(next).SetBaseOffset(100)
	if _, err := l.Append(ctx, next, backend.AppendOptions{}); err != nil {
		t.Fatal(err)
	}
	l.SetHighWatermark(102)
	if err := l.BecomeLeader(ctx, 1); err != nil {
		t.Fatal(err)
	}
	info, err := l.Append(ctx, idemBatch(7, 4, 2), backend.AppendOptions{AssignOffsets: true, LeaderEpoch: 1})
	if err != nil || !info.Duplicate || info.FirstOffset != 100 {
		t.Fatalf("a retry of the batch at 100: %+v, %v", info, err)
	}
}

// TestSpanAfter: the first segment holding an offset past the given one,
// by binary search.
func TestSpanAfter(t *testing.T) {
	l := openLog(t, filepath.Join(t.TempDir(), "orders-0"), cfg(t, "segment.bytes", "1024"), false)
	defer l.Close()
	for range 10 {
		if _, err := l.Append(ctx, batchOf(5, 1, "x"), backend.AppendOptions{AssignOffsets: true}); err != nil {
			t.Fatal(err)
		}
	}
	infos := l.SegmentInfos()
	for off := int64(-1); off <= l.Offsets().LogEnd; off++ {
		var want *local.SegmentInfo
		for i := range infos {
			if infos[i].NextOffset-1 > off && infos[i].NextOffset > infos[i].BaseOffset {
				want = &infos[i]
				break
			}
		}
		got, ok := l.Segments().SpanAfter(off)
		if ok != (want != nil) || (ok && (got.BaseOffset != want.BaseOffset || got.NextOffset != want.NextOffset || got.Active != want.Active)) {
			t.Fatalf("SpanAfter(%d) = %+v, %v; want %+v", off, got, ok, want)
		}
	}
}

// TestLeaderAppendEpochWithoutRole: a log told neither BecomeLeader nor
// BecomeFollower since it opened stamps the caller's epoch, its latest
// epoch for 0, and refuses an epoch older than its latest (the batches
// and the epoch cache would disagree); BecomeLeader after a reopen makes
// the epoch it leads at the only one.
func TestLeaderAppendEpochWithoutRole(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "orders-0")
	l := openLog(t, dir, cfg(t), false)
	for _, epoch := range []int32{3, 0} {
		if _, err := l.Append(ctx, batchOf(2, 1, "a"), backend.AppendOptions{AssignOffsets: true, LeaderEpoch: epoch}); err != nil {
			t.Fatalf("an append at epoch %d: %v", epoch, err)
		}
	}
	if _, err := l.Append(ctx, batchOf(2, 1, "b"), backend.AppendOptions{AssignOffsets: true, LeaderEpoch: 2}); !errors.Is(err, backend.ErrWrongLeaderEpoch) {
		t.Fatalf("an append at epoch 2 after epoch 3: %v; want ErrWrongLeaderEpoch", err)
	}
	if got := l.LeaderEpochs(); len(got) != 1 || got[0] != (local.EpochEntry{Epoch: 3, StartOffset: 0}) || l.Offsets().LogEnd != 4 {
		t.Fatalf("epochs %v, log end %d; want epoch 3 from 0 only, log end 4", got, l.Offsets().LogEnd)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = openLog(t, dir, cfg(t), false)
	defer l.Close()
	if err := l.BecomeLeader(ctx, 4); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Append(ctx, batchOf(2, 1, "c"), backend.AppendOptions{AssignOffsets: true, LeaderEpoch: 5}); !errors.Is(err, backend.ErrWrongLeaderEpoch) {
		t.Fatalf("an append at epoch 5 leading at 4: %v; want ErrWrongLeaderEpoch", err)
	}
	if _, err := l.Append(ctx, batchOf(2, 1, "c"), backend.AppendOptions{AssignOffsets: true}); err != nil {
		t.Fatal(err)
	}
	if got := l.LeaderEpochs(); len(got) != 2 || got[1] != (local.EpochEntry{Epoch: 4, StartOffset: 4}) {
		t.Fatalf("epochs %v; want epoch 4 from 4 last", got)
	}
}

// TestIdleReopenKeepsEpochCheckpoint: a log whose last epoch began at
// its end and got no record (a leader that stopped before its first
// append) reopens without rewriting leader-epoch-checkpoint (no write,
// no fsync per idle partition at a broker's restart), and answers as if
// the empty epoch were gone (Kafka's truncateFromEnd); the next append
// writes the file first, so the dropped entry never comes back once the
// log end passes its offset, even when the append changes no epoch.
func TestIdleReopenKeepsEpochCheckpoint(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "orders-0")
	l := openLog(t, dir, cfg(t), false)
	if _, err := l.Append(ctx, batchOf(5, 1, "a"), backend.AppendOptions{AssignOffsets: true, LeaderEpoch: 3}); err != nil {
		t.Fatal(err)
	}
	if err := l.BecomeLeader(ctx, 5); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	kept := untouched(t, filepath.Join(dir, local.LeaderEpochCheckpoint))
	want := []local.EpochEntry{{Epoch: 3, StartOffset: 0}}
	for range 2 {
		l = openLog(t, dir, cfg(t), false)
		if got := l.LeaderEpochs(); !slices.Equal(got, want) {
			t.Fatalf("epochs after reopen %v, want %v (the empty epoch 5 dropped)", got, want)
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		kept("the open")
	}
	// An append at epoch 3, past offset 5 where the dropped entry began:
	// no epoch changes, but the file is written before the batch.
	l = openLog(t, dir, cfg(t), false)
	if _, err := l.Append(ctx, batchOf(5, 1, "b"), backend.AppendOptions{AssignOffsets: true, LeaderEpoch: 3}); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = openLog(t, dir, cfg(t), false)
	defer l.Close()
	if got := l.LeaderEpochs(); !slices.Equal(got, want) || l.Offsets().LogEnd != 10 {
		t.Fatalf("epochs %v at log end %d after an append past the dropped entry, want %v at 10", got, l.Offsets().LogEnd, want)
	}
}
