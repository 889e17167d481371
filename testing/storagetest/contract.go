package storagetest

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/record"
)

// The broker's half of the contract: leader epochs over the whole
// partition, ListOffsets' special times, the change notification, and
// follower reads of offloaded offsets.

// testLeaderEpochs: EndOffsetForEpoch answers for every epoch the
// partition holds records of, also once old segments left the local disk
// (a tiered partition's bucket keeps their epochs).
func testLeaderEpochs(t *testing.T, h Harness) {
	p := h.Open(t, Config(t, "segment.bytes", "2048"))
	defer p.Close()
	rng := rand.New(rand.NewPCG(41, 41))
	var m model
	starts := map[int32]int64{}
	for _, epoch := range []int32{1, 2, 4} {
		if err := p.BecomeLeader(ctx, epoch); err != nil {
			t.Fatal(err)
		}
		starts[epoch] = p.Offsets().LogEnd
		appendEpoch(t, p, &m, rng, 15, epoch)
	}
	commitAll(t, p) // a tiered partition offloads, keeping only the active segment
	end := p.Offsets().LogEnd
	for _, c := range []struct {
		ask, epoch int32
		end        int64
		found      bool
	}{{0, -1, -1, false}, {1, 1, starts[2], true}, {2, 2, starts[4], true}, {3, 2, starts[4], true}, {4, 4, end, true}, {9, 4, end, true}} {
		e, off, found, err := p.EndOffsetForEpoch(ctx, c.ask)
		if err != nil || found != c.found || (found && (e != c.epoch || off != c.end)) {
			t.Fatalf("EndOffsetForEpoch(%d) = %d, %d, %v, %v; want %d, %d, %v (offsets %+v)", c.ask, e, off, found, err, c.epoch, c.end, c.found, p.Offsets())
		}
	}
}

// testBecomeLeader: a new leader's epoch starts at the log end before its
// first append (OffsetsForLeaderEpoch answers for it), the previous epoch
// ends there, and an older epoch than one seen is refused as fenced.
func testBecomeLeader(t *testing.T, h Harness) {
	p := h.Open(t, Config(t, "segment.bytes", "2048"))
	defer p.Close()
	var m model
	rng := rand.New(rand.NewPCG(43, 43))
	if err := p.BecomeLeader(ctx, 3); err != nil {
		t.Fatal(err)
	}
	appendEpoch(t, p, &m, rng, 10, 3)
	commitAll(t, p)
	leo := p.Offsets().LogEnd
	if err := p.BecomeLeader(ctx, 5); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		ask, epoch int32
		end        int64
	}{{3, 3, leo}, {4, 3, leo}, {5, 5, leo}, {6, 5, leo}} {
		if e, end, found, err := p.EndOffsetForEpoch(ctx, c.ask); err != nil || !found || e != c.epoch || end != c.end {
			t.Fatalf("before epoch 5's first append, EndOffsetForEpoch(%d) = %d, %d, %v, %v; want %d, %d", c.ask, e, end, found, err, c.epoch, c.end)
		}
	}
	if err := p.BecomeLeader(ctx, 4); !errors.Is(err, backend.ErrFenced) {
		t.Fatalf("BecomeLeader with an older epoch: %v, want ErrFenced", err)
	}
	if err := p.BecomeFollower(ctx, 6); err != nil {
		t.Fatal(err)
	}
	if err := p.BecomeLeader(ctx, 7); err != nil {
		t.Fatal(err)
	}
	appendEpoch(t, p, &m, rng, 3, 7)
	// Epoch 5 never got a record: as in Kafka, epoch 7 replaced it, and
	// asking for 5 finds 3, ending where 7 began.
	if e, end, found, _ := p.EndOffsetForEpoch(ctx, 5); !found || e != 3 || end != leo {
		t.Fatalf("after epoch 7's appends, EndOffsetForEpoch(5) = %d, %d, %v; want 3, %d", e, end, found, leo)
	}
}

// testLeaderAppendEpoch: a leader append is stamped with the epoch the
// partition leads at (LeaderEpoch 0 stands for it); any other epoch, or a
// leader append to a follower, is ErrWrongLeaderEpoch and appends nothing,
// so the batches and the epoch cache agree and the next BecomeLeader is
// not fenced by an epoch nobody led at. A follower's append keeps its
// batches' epochs.
func testLeaderAppendEpoch(t *testing.T, h Harness) {
	p := h.Open(t, Config(t))
	defer p.Close()
	var b record.Builder
	batch := func(base int64, epoch int32) []byte {
		hd := record.NewBatchHeader()
		hd.BaseOffset, hd.PartitionLeaderEpoch = base, epoch
		b.Reset(hd)
		b.Append(1_700_000_000_000, []byte("k"), []byte("v"), nil)
		out, err := b.Build()
		if err != nil {
			t.Fatal(err)
		}
		return append([]byte(nil), out...)
	}
	stamped := func(what string, epoch int32, want int32) {
		t.Helper()
		info, err := p.Append(ctx, batch(0, 0), backend.AppendOptions{AssignOffsets: true, LeaderEpoch: epoch})
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if got := storedBatches(t, p, info.FirstOffset)[0].PartitionLeaderEpoch(); got != want {
			t.Fatalf("%s: stored with leader epoch %d, want %d", what, got, want)
		}
	}
	wrong := func(what string, epoch int32) {
		t.Helper()
		before := p.Offsets().LogEnd
		_, err := p.Append(ctx, batch(0, 0), backend.AppendOptions{AssignOffsets: true, LeaderEpoch: epoch})
		if !errors.Is(err, backend.ErrWrongLeaderEpoch) {
			t.Fatalf("%s: %v; want ErrWrongLeaderEpoch", what, err)
		}
		if o := p.Offsets(); o.LogEnd != before {
			t.Fatalf("%s: refused, but the log end moved from %d to %d", what, before, o.LogEnd)
		}
	}
	if err := p.BecomeLeader(ctx, 2); err != nil {
		t.Fatal(err)
	}
	stamped("an append at the epoch led at", 2, 2)
	stamped("an append with epoch 0", 0, 2)
	wrong("an append at an older epoch than the one led at", 1)
	wrong("an append at a newer epoch than the one led at", 9)
	if e, end, found, err := p.EndOffsetForEpoch(ctx, 9); err != nil || !found || e != 2 || end != 2 {
		t.Fatalf("after the refused appends, EndOffsetForEpoch(9) = %d, %d, %v, %v; want epoch 2 ending at the log end 2", e, end, found, err)
	}
	if err := p.BecomeLeader(ctx, 3); err != nil {
		t.Fatalf("BecomeLeader(3) after an append was refused at epoch 9: %v", err)
	}
	wrong("an append at the previous epoch", 2)
	stamped("an append at the new epoch", 3, 3)
	if e, end, found, err := p.EndOffsetForEpoch(ctx, 2); err != nil || !found || e != 2 || end != 2 {
		t.Fatalf("EndOffsetForEpoch(2) = %d, %d, %v, %v; want epoch 2 ending at 2, where epoch 3 began", e, end, found, err)
	}
	if err := p.BecomeFollower(ctx, 4); err != nil {
		t.Fatal(err)
	}
	wrong("a leader append to a follower", 4)
	leo := p.Offsets().LogEnd
	if _, err := p.Append(ctx, batch(leo, 4), backend.AppendOptions{}); err != nil {
		t.Fatalf("a follower's append at epoch 4: %v", err)
	}
	if got := storedBatches(t, p, leo)[0].PartitionLeaderEpoch(); got != 4 {
		t.Fatalf("a follower's batch stored with leader epoch %d, want its own 4", got)
	}
}

// testReadsAtTheLocalStart: readers of offsets the partition holds, most
// at its local log start, race appends whose high watermark moves each
// step (a tiered harness offloads there, and local retention raises the
// local start under the readers): no read of an offset between LogStart
// and LogEnd may fail, and none is out of range. It runs long enough to
// have caught a tiered read that checked the local start, then read the
// local log after retention moved it (failing within 0.2 s).
func testReadsAtTheLocalStart(t *testing.T, h Harness) {
	p := h.Open(t, Config(t, "segment.bytes", "2048", "file.delete.delay.ms", "0", "retention.ms", "-1"))
	defer p.Close()
	duration := 2 * time.Second
	if testing.Short() {
		duration = 500 * time.Millisecond
	}
	stop := make(chan struct{})
	errs := make(chan error, 4)
	var reads atomic.Int64
	var wg sync.WaitGroup
	for g := range 3 {
		wg.Add(1)
		go func(seed uint64) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, seed))
			for {
				select {
				case <-stop:
					return
				default:
				}
				o := p.Offsets()
				if o.LogEnd == o.LogStart {
					continue
				}
				off := o.LocalLogStart + rng.Int64N(3)
				if rng.IntN(4) == 0 || off >= o.LogEnd {
					off = o.LogStart + rng.Int64N(o.LogEnd-o.LogStart)
				}
				r, err := p.Read(ctx, off, backend.ReadOptions{MaxBytes: 512, MinOneBatch: true})
				reads.Add(1)
				if err != nil {
					errs <- fmt.Errorf("read of %d (the partition holds %d..%d): %w", off, o.LogStart, o.LogEnd-1, err)
					return
				}
				r.Close()
			}
		}(uint64(g + 1))
	}
	deadline := time.Now().Add(duration)
	rounds := 0
	var b record.Builder
	for time.Now().Before(deadline) && len(errs) == 0 {
		for range 4 {
			b.Reset(record.NewBatchHeader())
			b.Append(time.Now().UnixMilli(), []byte("k"), make([]byte, 300), nil)
			batch, _ := b.Build()
			if _, err := p.Append(ctx, append([]byte(nil), batch...), backend.AppendOptions{AssignOffsets: true, LeaderEpoch: 1}); err != nil {
				t.Fatal(err)
			}
		}
		if err := p.SetHighWatermark(p.Offsets().LogEnd); err != nil {
			t.Fatal(err)
		}
		rounds++
	}
	close(stop)
	wg.Wait()
	close(errs)
	t.Logf("%d reads during %d high watermark moves; local log start %d", reads.Load(), rounds, p.Offsets().LocalLogStart)
	for err := range errs {
		t.Fatal(err)
	}
}

// appendEpoch appends n batches as the leader of epoch.
func appendEpoch(t *testing.T, p backend.Partition, m *model, rng *rand.Rand, n int, epoch int32) {
	t.Helper()
	var b record.Builder
	for range n {
		b.Reset(record.NewBatchHeader())
		for range 1 + rng.IntN(5) {
			b.Append(time.Now().UnixMilli(), []byte("k"), make([]byte, 50+rng.IntN(100)), nil)
		}
		data, err := b.Build()
		if err != nil {
			t.Fatal(err)
		}
		info, err := p.Append(ctx, append([]byte(nil), data...), backend.AppendOptions{AssignOffsets: true, LeaderEpoch: epoch})
		if err != nil {
			t.Fatal(err)
		}
		for o := info.FirstOffset; o <= info.LastOffset; o++ {
			m.recs = append(m.recs, rec{offset: o})
		}
	}
}

// testListOffsetsSpecial: Kafka's special ListOffsets times.
func testListOffsetsSpecial(t *testing.T, h Harness) {
	p := h.Open(t, Config(t, "segment.bytes", "2048"))
	defer p.Close()
	var m model
	appendBatches(t, p, &m, rand.New(rand.NewPCG(42, 42)), 40, 5, record.None)
	commitAll(t, p)
	o := p.Offsets()
	maxTs, maxOff := int64(-1), int64(-1)
	for _, r := range m.recs {
		if r.ts > maxTs {
			maxTs, maxOff = r.ts, r.offset
		}
	}
	check := func(ts, wantOff int64, wantFound bool) {
		t.Helper()
		off, _, found, err := p.OffsetForTimestamp(ctx, ts)
		if err != nil || found != wantFound || (found && off != wantOff) {
			t.Fatalf("OffsetForTimestamp(%d) = %d, %v, %v; want %d, %v (offsets %+v)", ts, off, found, err, wantOff, wantFound, o)
		}
	}
	check(backend.LatestTimestamp, o.HighWatermark, true)
	check(backend.EarliestTimestamp, o.LogStart, true)
	check(backend.EarliestLocalTimestamp, o.LocalLogStart, true)
	check(backend.MaxTimestamp, maxOff, true)
	if o.LocalLogStart > o.LogStart {
		check(backend.LatestTieredTimestamp, o.LocalLogStart-1, true)
	} else {
		check(backend.LatestTieredTimestamp, -1, false)
	}
}

// testChanged: Changed fires on an append, on a high watermark move and on
// Close, and not before.
func testChanged(t *testing.T, h Harness) {
	p := h.Open(t, Config(t))
	var m model
	rng := rand.New(rand.NewPCG(43, 43))
	fired := func(ch <-chan struct{}) bool {
		select {
		case <-ch:
			return true
		case <-time.After(2 * time.Second):
			return false
		}
	}
	ch := p.Changed()
	select {
	case <-ch:
		t.Fatal("Changed fired with nothing changed")
	default:
	}
	appendBatches(t, p, &m, rng, 1, 3, record.None)
	if !fired(ch) {
		t.Fatal("an append did not fire Changed")
	}
	ch = p.Changed()
	if err := p.SetHighWatermark(p.Offsets().LogEnd); err != nil {
		t.Fatal(err)
	}
	if !fired(ch) {
		t.Fatal("a high watermark move did not fire Changed")
	}
	// Setting the same high watermark again moves nothing: a broker that
	// sets it after every fetch must not spin on Changed.
	ch = p.Changed()
	if err := p.SetHighWatermark(p.Offsets().HighWatermark); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ch:
		t.Fatal("Changed fired for a high watermark set to its own value")
	case <-time.After(50 * time.Millisecond):
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if !fired(ch) {
		t.Fatal("Close did not fire Changed")
	}
	if !fired(p.Changed()) {
		t.Fatal("Changed after Close does not fire at once")
	}
}

// testReplicaRead: a follower's read of an offset the partition holds
// only in its bucket is OFFSET_MOVED_TO_TIERED_STORAGE; a consumer's is
// served.
func testReplicaRead(t *testing.T, h Harness) {
	p := h.Open(t, Config(t, "segment.bytes", "2048"))
	defer p.Close()
	var m model
	appendBatches(t, p, &m, rand.New(rand.NewPCG(44, 44)), 30, 5, record.None)
	commitAll(t, p)
	o := p.Offsets()
	r, err := p.Read(ctx, o.LocalLogStart, backend.ReadOptions{Replica: true})
	if err != nil {
		t.Fatalf("a follower's read of the local log start: %v", err)
	}
	r.Close()
	if o.LocalLogStart == o.LogStart {
		return // nothing offloaded: nothing else to check
	}
	var moved *backend.OffsetMovedToTieredStorageError
	if _, err := p.Read(ctx, o.LogStart, backend.ReadOptions{Replica: true}); !errors.As(err, &moved) || moved.LocalLogStart != o.LocalLogStart {
		t.Fatalf("a follower's read of offloaded offset %d: %v; want an OffsetMovedToTieredStorageError", o.LogStart, err)
	}
	r, err = p.Read(ctx, o.LogStart, backend.ReadOptions{})
	if err != nil || r.Len() == 0 {
		t.Fatalf("a consumer's read of offloaded offset %d: %v", o.LogStart, err)
	}
	r.Close()
}
