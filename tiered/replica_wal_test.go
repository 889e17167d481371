package tiered_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/objstore"
	"github.com/tierlog/tierlog/objstore/mem"
	"github.com/tierlog/tierlog/record"
	"github.com/tierlog/tierlog/testing/faultstore"
	"github.com/tierlog/tierlog/testing/objstoretest"
	"github.com/tierlog/tierlog/tiered"
)

// TestReadReplicaOfDisklessServesOnlyFinalRecords: two Backends lead a
// diskless partition in turn, each producing while it leads, over a
// bucket that fails WAL puts (before they land, and after: the answer
// lost), so objects land whose appends the writer then fails and appends
// again, and claims fence writers mid-flight. A read replica steps all
// along. Every record it ever serves is the one the origin's log holds at
// that offset at the end (it never serves a record the origin replaced or
// never acknowledged), what it served never changes, it writes nothing,
// and once the origin stops it reaches the origin's end.
func TestReadReplicaOfDisklessServesOnlyFinalRecords(t *testing.T) {
	for seed := range uint64(2) {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) { replicaOfDisklessRun(t, seed) })
	}
}

func replicaOfDisklessRun(t *testing.T, seed uint64) {
	inner := mem.New()
	faulty := faultstore.Wrap(inner, seed)
	before := faulty.Add(faultstore.Rule{Op: objstore.OpPut, KeyContains: "/_wal/", Probability: 0.12, Fault: faultstore.FailBefore})
	after := faulty.Add(faultstore.Rule{Op: objstore.OpPut, KeyContains: "/_wal/", Probability: 0.08, Fault: faultstore.FailAfter})
	// Slow puts: objects in flight when a claim fences their writer.
	faulty.Add(faultstore.Rule{Op: objstore.OpPut, KeyContains: "/_wal/", Probability: 1, Fault: faultstore.Latency, Latency: 2 * time.Millisecond})
	store := objstore.New(faulty, "mem://replica-of-diskless", objstore.Options{MaxAttempts: 1, Timeout: 5 * time.Second})
	defer store.Close()
	var backends [2]*tiered.Backend
	var parts [2]*tiered.Partition
	for i := range backends {
		backends[i] = openDisklessBackend(t, filepath.Join(t.TempDir(), fmt.Sprint(i)), store)
		p, err := backends[i].Open(ctx, "orders", 0, cfg(t, append(slices.Clone(disklessCfg), "segment.bytes", "2048")...))
		if err != nil {
			t.Fatal(err)
		}
		parts[i] = p.(*tiered.Partition)
	}
	ro := &objstoretest.ReadOnly{Driver: inner}
	replica := openReplica(t, objstore.New(ro, "mem://replica-of-diskless-r", objstore.Options{}))
	defer replica.Close()

	// The replica steps all along, recording what it serves.
	served := map[int64][]byte{} // by a batch's last offset
	var servedMu sync.Mutex
	var steps, tails, withSegments atomic.Int64
	check := func() {
		t.Helper()
		if err := replica.ReplicaStep(ctx); err != nil {
			return // the origin's gc or a claim moved on: the next step reads anew
		}
		steps.Add(1)
		o := replica.Offsets()
		got := batchesFrom(t, replica, o.LogStart)
		servedMu.Lock()
		defer servedMu.Unlock()
		for last, b := range got {
			if prev, ok := served[last]; ok && !bytes.Equal(prev, b) {
				t.Errorf("the replica served two batches ending at %d", last)
			}
			served[last] = b
		}
		if o.HighWatermark > replica.Head().LastOffset()+1 {
			tails.Add(1)
		}
		if replica.Head().LastOffset() >= 0 {
			withSegments.Add(1)
		}
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
				check()
			}
		}
	})

	// Each leader produces until it is fenced or its successor's
	// successor takes over: an old leader's objects in flight land above
	// the fence of the claim that replaced it.
	var n atomic.Int64
	appendNext := func(p *tiered.Partition) error {
		v := n.Add(1)
		var b record.Builder
		b.Reset(record.NewBatchHeader())
		b.Append(1_700_000_000_000+v, nil, fmt.Appendf(nil, "v%06d", v), nil)
		batch, _ := b.Build()
		if _, err := p.Append(ctx, batch, backend.AppendOptions{AssignOffsets: true}); err != nil {
			return err
		}
		p.SetHighWatermark(p.Offsets().LogEnd)
		if v%7 == 0 {
			p.Flush() // failures are the test's: the next append truncates
		}
		return nil
	}
	var producers sync.WaitGroup
	var stops []chan struct{}
	for move := range 6 {
		leader := parts[move%2]
		if err := leader.BecomeLeader(ctx, int32(move+1)); err != nil && !errors.Is(err, backend.ErrStorage) {
			t.Fatal(err)
		}
		if move > 1 {
			close(stops[move-2])
		}
		stopProducing := make(chan struct{})
		stops = append(stops, stopProducing)
		producers.Go(func() {
			for {
				select {
				case <-stopProducing:
					return
				default:
				}
				if err := appendNext(leader); errors.Is(err, backend.ErrFenced) {
					return
				}
			}
		})
		time.Sleep(60 * time.Millisecond)
	}
	close(stops[4])
	close(stops[5])
	producers.Wait()
	// The origin stops with its last append acknowledged (the bucket no
	// longer fails), and the replica reaches its end.
	before.Remove()
	after.Remove()
	last := parts[1]
	eventually(t, 10*time.Second, "the last leader's appends never settled", func() bool {
		// An append after a failure truncates to the durable end first.
		return appendNext(last) == nil && last.Flush() == nil
	})
	end := last.Offsets().LogEnd
	eventually(t, 10*time.Second, fmt.Sprintf("the replica never reached the origin's end %d", end), func() bool {
		return replica.Offsets().HighWatermark == end
	})
	close(stop)
	wg.Wait()
	check()

	want := batchesFrom(t, last, last.Offsets().LogStart)
	servedMu.Lock()
	defer servedMu.Unlock()
	for off, b := range served {
		if !bytes.Equal(want[off], b) {
			t.Fatalf("the replica served a batch ending at %d that the origin's log does not hold there", off)
		}
	}
	if len(served) != len(want) {
		t.Fatalf("the replica served %d batches, the origin holds %d", len(served), len(want))
	}
	ro.Check(t)
	if withSegments.Load() == 0 || tails.Load() == 0 {
		t.Fatalf("the replica stepped %d times with segments in the bucket, %d past them: the test tested little", withSegments.Load(), tails.Load())
	}
	t.Logf("%d appends tried, %d batches in the log; the replica stepped %d times, %d with segments, %d past them", n.Load(), len(want), steps.Load(), withSegments.Load(), tails.Load())
}

// TestReadReplicaOfDisklessSkipsAFencedTail: the case a replica that
// served its writer's objects as they land would get wrong. A claim by
// another Backend fences the leader's writer at a number whose object
// held only another partition's appends, so the partition's next object,
// in flight above the fence, lands continuing its log: its appends fail
// (the fence claims them), the claim never commits, and the old leader
// leads again at a higher epoch, cutting its log back and appending
// other records at those offsets. The replica never serves the failed
// records; it serves what the origin's log holds at the end.
func TestReadReplicaOfDisklessSkipsAFencedTail(t *testing.T) {
	inner := mem.New()
	faultA, faultB := faultstore.Wrap(inner, 1), faultstore.Wrap(inner, 2)
	storeA := objstore.New(faultA, "mem://fenced-tail", objstore.Options{})
	storeB := objstore.New(faultB, "mem://fenced-tail", objstore.Options{MaxAttempts: 1})
	a := openDisklessBackend(t, filepath.Join(t.TempDir(), "a"), storeA)
	b := openDisklessBackend(t, filepath.Join(t.TempDir(), "b"), storeB)
	openOn := func(be *tiered.Backend, partition int32) *tiered.Partition {
		p, err := be.Open(ctx, "orders", partition, cfg(t, disklessCfg...))
		if err != nil {
			t.Fatal(err)
		}
		return p.(*tiered.Partition)
	}
	p0, p1 := openOn(a, 0), openOn(a, 1)
	for _, p := range []*tiered.Partition{p0, p1} {
		if err := p.BecomeLeader(ctx, 1); err != nil {
			t.Fatal(err)
		}
	}
	put := func(p *tiered.Partition, v string) error {
		var bb record.Builder
		bb.Reset(record.NewBatchHeader())
		bb.Append(1_700_000_000_000, nil, []byte(v), nil)
		batch, _ := bb.Build()
		_, err := p.Append(ctx, batch, backend.AppendOptions{AssignOffsets: true})
		p.SetHighWatermark(p.Offsets().LogEnd)
		return err
	}
	for i := range 3 {
		if err := put(p0, fmt.Sprint("acked-", i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := p0.Flush(); err != nil {
		t.Fatal(err)
	}
	replica := openReplica(t, objstore.New(&objstoretest.ReadOnly{Driver: inner}, "mem://fenced-tail-r", objstore.Options{}))
	defer replica.Close()
	served := map[int64][]byte{}
	step := func() {
		t.Helper()
		if err := replica.ReplicaStep(ctx); err != nil {
			t.Fatal(err)
		}
		for last, bt := range batchesFrom(t, replica, replica.Offsets().LogStart) {
			served[last] = bt
		}
	}
	eventually(t, 10*time.Second, "the replica never served the acknowledged appends", func() bool {
		step()
		return replica.Offsets().HighWatermark == 3
	})

	// Hold A's WAL puts: orders-1's append takes number n, orders-0's n+1.
	release := make(chan struct{})
	releaseOnce := sync.OnceFunc(func() { close(release) })
	defer releaseOnce()
	faultA.Add(faultstore.Rule{Op: objstore.OpPut, KeyContains: "/_wal/", Every: 1, Fault: faultstore.Hook, Before: func(ctx context.Context, c faultstore.Call) error {
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}})
	if err := put(p1, "other partition"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond) // sealed and numbered
	if err := put(p0, "failed-3"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	// B claims orders-0 at epoch 2: its fence takes number n; its
	// manifest commit fails.
	faultB.Add(faultstore.Rule{Op: objstore.OpPut, KeySuffix: "manifest", Every: 1, Fault: faultstore.FailBefore})
	bp := openOn(b, 0)
	if err := bp.BecomeLeader(ctx, 2); err != nil {
		t.Fatal(err)
	}
	step()
	if e := replica.Head().WriterEpoch(); e != 1 {
		t.Fatalf("the manifest is at epoch %d: B's claim committed; the test needs it to fail", e)
	}
	releaseOnce()
	if err := p0.Flush(); err == nil {
		t.Fatal("orders-0's append above the fence settled durable")
	}
	if err := bp.BecomeFollower(ctx, 3); err != nil {
		t.Fatal(err)
	}
	for range 5 {
		step() // the failed append has landed above the fence by now
	}
	if hw := replica.Offsets().HighWatermark; hw != 3 {
		t.Fatalf("the replica's high watermark is %d past the fence: only 3 was acknowledged", hw)
	}
	// A leads again at epoch 3 and appends other records at the offsets
	// the failed append held.
	if err := p0.BecomeLeader(ctx, 3); err != nil {
		t.Fatal(err)
	}
	if err := put(p0, "final-3"); err != nil {
		t.Fatal(err)
	}
	if err := put(p0, "final-4"); err != nil {
		t.Fatal(err)
	}
	if err := p0.Flush(); err != nil {
		t.Fatal(err)
	}
	end := p0.Offsets().LogEnd
	eventually(t, 10*time.Second, fmt.Sprintf("the replica never reached the origin's end %d", end), func() bool {
		step()
		return replica.Offsets().HighWatermark == end
	})
	want := batchesFrom(t, p0, 0)
	for last, bt := range served {
		if !bytes.Equal(want[last], bt) {
			t.Fatalf("the replica served a batch ending at %d that the origin's log does not hold there", last)
		}
	}
}

// TestReadReplicaOfDisklessReopens: a replica Backend whose local log
// holds a diskless partition's tail (records it read from the origin's
// WAL) opens its directory again after a restart, serves the same
// records, and follows on; a directory with records of its own is still
// refused.
func TestReadReplicaOfDisklessReopens(t *testing.T) {
	inner := mem.New()
	store := objstore.New(inner, "mem://diskless-reopen", objstore.Options{})
	origin := openDiskless(t, openDisklessBackend(t, filepath.Join(t.TempDir(), "a"), store), 1)
	produceN := func(n int) int64 {
		t.Helper()
		for i := range n {
			if _, err := appendOne(t, origin, 3, string(rune('a'+i%26))); err != nil {
				t.Fatal(err)
			}
		}
		if err := origin.Flush(); err != nil {
			t.Fatal(err)
		}
		return origin.Offsets().LogEnd
	}
	dir := t.TempDir()
	ro := &objstoretest.ReadOnly{Driver: inner}
	openAt := func() (*tiered.Backend, backend.Partition) {
		t.Helper()
		b, err := tiered.OpenBackend(dir, tiered.BackendOptions{Store: objstore.New(ro, "mem://diskless-reopen-r", objstore.Options{}), Prefix: "tl",
			ReadReplica: true, Manager: tiered.ManagerConfig{TaskInterval: 10 * time.Millisecond}})
		if err != nil {
			t.Fatal(err)
		}
		p, err := b.Open(ctx, "orders", 0, cfg(t, disklessCfg...))
		if err != nil {
			b.Close()
			t.Fatal(err)
		}
		return b, p
	}
	end := produceN(10)
	b, p := openAt()
	eventually(t, 10*time.Second, "the replica never reached the origin's end", func() bool { return p.Offsets().HighWatermark == end })
	if o := p.Offsets(); o.LogEnd <= o.LogStart {
		t.Fatalf("the replica's local log holds nothing (%+v): the test needs a tail in it", o)
	}
	sameBatches(t, p, origin)
	b.Close()

	// Never a partition's own: a Backend that is not a replica refuses
	// the directory, as a local topic of the replica's does.
	own := openDisklessBackend(t, dir, objstore.New(mem.New(), "mem://other", objstore.Options{}))
	if _, err := own.Open(ctx, "orders", 0, cfg(t, disklessCfg...)); !errors.Is(err, backend.ErrInvalidConfig) {
		t.Fatalf("a Backend that is not a replica opened a replica's directory: %v", err)
	}
	own.Close()
	rb, err := tiered.OpenBackend(dir, tiered.BackendOptions{Store: objstore.New(ro, "mem://diskless-reopen-r", objstore.Options{}), Prefix: "tl", ReadReplica: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rb.Open(ctx, "orders", 0, cfg(t)); !errors.Is(err, backend.ErrInvalidConfig) || !strings.Contains(err.Error(), tiered.ReplicaMarker) {
		t.Fatalf("a replica opened its replica's directory as a local topic: %v", err)
	}
	rb.Close()

	end = produceN(10)
	b, p = openAt()
	eventually(t, 10*time.Second, "the reopened replica never reached the origin's end", func() bool { return p.Offsets().HighWatermark == end })
	sameBatches(t, p, origin)
	b.Close()
	ro.Check(t)

	// Records of its own: refused as before.
	if err := os.Remove(filepath.Join(dir, "orders-0", tiered.ReplicaMarker)); err != nil {
		t.Fatal(err)
	}
	rb, err = tiered.OpenBackend(dir, tiered.BackendOptions{Store: objstore.New(ro, "mem://diskless-reopen-r", objstore.Options{}), Prefix: "tl", ReadReplica: true})
	if err != nil {
		t.Fatal(err)
	}
	defer rb.Close()
	if _, err := rb.Open(ctx, "orders", 0, cfg(t, disklessCfg...)); !errors.Is(err, backend.ErrInvalidConfig) {
		t.Fatalf("a replica over a directory with records and no marker: %v, want ErrInvalidConfig", err)
	}
}

// TestReadReplicaOfDisklessAfterWALGC: WAL gc removes a void (a fence
// its writer has passed) between the manifest's number and the writer's
// newest objects. A replica that starts afterwards reads past the removed
// number (below the writer's newest four: settled, gone for good) and
// serves the records above it. (Found in review: it stopped there, for
// good.)
func TestReadReplicaOfDisklessAfterWALGC(t *testing.T) {
	o := newVoidingOrigin(t, "mem://walgc-gap")
	o.produce(3)
	o.voidOne()
	end := o.p.Offsets().LogEnd
	for _, w := range o.gc() {
		t.Logf("gc removed %s: %s", w.Key[strings.LastIndex(w.Key, "/")+1:], w.Why)
	}
	replica := openReplica(t, objstore.New(&objstoretest.ReadOnly{Driver: o.inner}, "mem://walgc-gap-r", objstore.Options{}))
	defer replica.Close()
	var serr error
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if serr = replica.ReplicaStep(ctx); serr == nil && replica.Offsets().HighWatermark == end {
			return
		}
	}
	t.Fatalf("after 5s the replica's high watermark is %d (last step: %v), the origin's acknowledged end %d", replica.Offsets().HighWatermark, serr, end)
}

// voidingOrigin is a diskless origin over a bucket that fails one WAL put
// when asked (its writer voids the number), so that WAL gc removes numbers
// a replica meets.
type voidingOrigin struct {
	t      *testing.T
	inner  *mem.Driver
	faulty *faultstore.Driver
	store  *objstore.Store
	p      *tiered.Partition
}

func newVoidingOrigin(t *testing.T, name string) *voidingOrigin {
	inner := mem.New()
	faulty := faultstore.Wrap(inner, 1)
	store := objstore.New(faulty, name, objstore.Options{MaxAttempts: 1})
	p := openDiskless(t, openDisklessBackend(t, filepath.Join(t.TempDir(), "a"), store), 1)
	return &voidingOrigin{t: t, inner: inner, faulty: faulty, store: store, p: p}
}

// produce appends n one-record batches, each acknowledged.
func (o *voidingOrigin) produce(n int) {
	o.t.Helper()
	for range n {
		eventually(o.t, 10*time.Second, "an append never settled", func() bool {
			_, err := appendOne(o.t, o.p, 1, "x")
			return err == nil && o.p.Flush() == nil
		})
	}
}

// voidOne fails one WAL put before it lands (the writer voids its number),
// then produces ten more records: the writer goes well past the void.
func (o *voidingOrigin) voidOne() {
	o.t.Helper()
	rule := o.faulty.Add(faultstore.Rule{Op: objstore.OpPut, KeyContains: "/_wal/", Nth: 1, Fault: faultstore.FailBefore})
	appendOne(o.t, o.p, 1, "x")
	o.p.Flush()
	rule.Remove()
	o.produce(10)
}

// gc runs WAL gc as an hour later and returns what it removed (at least
// one object).
func (o *voidingOrigin) gc() []tiered.WALObject {
	o.t.Helper()
	later := func() time.Time { return time.Now().Add(time.Hour) }
	objs, err := tiered.GCWAL(ctx, o.store, "tl", tiered.WALGCOptions{Grace: time.Nanosecond, Force: true, Now: later})
	if err != nil {
		o.t.Fatal(err)
	}
	var removed []tiered.WALObject
	for _, w := range objs {
		if w.Remove {
			removed = append(removed, w)
		}
	}
	if len(removed) == 0 {
		o.t.Fatal("gc removed nothing: the test needs the void gone")
	}
	return removed
}
