package purgatory_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tierlog/tierlog/timingwheel"
	"github.com/tierlog/tierlog/timingwheel/purgatory"
)

// op is an Operation that counts its calls and reports misuse: methods
// running at once, CanComplete after completion, a second completion.
type op struct {
	ready     atomic.Bool
	checks    atomic.Int32
	completed atomic.Int32
	expired   atomic.Int32
	inside    atomic.Int32
	errs      chan<- error
	// readyOnCheck makes CanComplete return true from that call on (1-based).
	readyOnCheck int32
}

func (o *op) enter(what string) {
	if o.inside.Add(1) != 1 {
		o.errs <- fmt.Errorf("%s ran while another method of the operation ran", what)
	}
	if o.completed.Load()+o.expired.Load() != 0 {
		o.errs <- fmt.Errorf("%s ran after the operation completed", what)
	}
}

func (o *op) CanComplete() bool {
	o.enter("CanComplete")
	defer o.inside.Add(-1)
	n := o.checks.Add(1)
	return o.ready.Load() || (o.readyOnCheck > 0 && n >= o.readyOnCheck)
}

func (o *op) OnComplete() {
	o.enter("OnComplete")
	defer o.inside.Add(-1)
	o.completed.Add(1)
}

func (o *op) OnExpiration() {
	o.enter("OnExpiration")
	defer o.inside.Add(-1)
	o.expired.Add(1)
}

type fakeClock struct{ ns atomic.Int64 }

func (c *fakeClock) Now() time.Time      { return time.Unix(0, c.ns.Load()) }
func (c *fakeClock) Add(d time.Duration) { c.ns.Add(int64(d)) }

type fixture struct {
	t     *testing.T
	clock *fakeClock
	timer *timingwheel.Manual
	p     *purgatory.Purgatory[string]
	errs  chan error
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	f := &fixture{t: t, clock: &fakeClock{}, errs: make(chan error, 100)}
	f.clock.ns.Store(time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	var err error
	if f.timer, err = timingwheel.NewManual(timingwheel.Options{Clock: f.clock}); err != nil {
		t.Fatal(err)
	}
	if f.p, err = purgatory.New[string](f.timer.Timer, purgatory.Options{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		f.p.Close()
		f.timer.Close()
		f.noErrors()
	})
	return f
}

func (f *fixture) newOp() *op { return &op{errs: f.errs} }

func (f *fixture) noErrors() {
	f.t.Helper()
	for {
		select {
		case err := <-f.errs:
			f.t.Error(err)
		default:
			return
		}
	}
}

func (f *fixture) watch(o *op, timeout time.Duration, keys ...string) bool {
	f.t.Helper()
	done, err := f.p.TryCompleteElseWatch(o, f.clock.Now().Add(timeout), keys...)
	if err != nil {
		f.t.Fatal(err)
	}
	return done
}

func (f *fixture) stats(want purgatory.Stats) {
	f.t.Helper()
	if got := f.p.Stats(); got != want {
		f.t.Fatalf("Stats = %+v, want %+v", got, want)
	}
}

func (f *fixture) advance(d time.Duration) int {
	f.clock.Add(d)
	return f.timer.Advance()
}

func (o *op) outcome() string {
	return fmt.Sprintf("completed %d expired %d", o.completed.Load(), o.expired.Load())
}

func TestCompletesAtOnce(t *testing.T) {
	f := newFixture(t)
	o := f.newOp()
	o.ready.Store(true)
	if !f.watch(o, time.Second, "p0") {
		t.Fatal("a ready operation was parked")
	}
	if o.outcome() != "completed 1 expired 0" {
		t.Fatal(o.outcome())
	}
	f.stats(purgatory.Stats{Completed: 1})
	if f.timer.Pending() != 0 {
		t.Fatal("a completed operation left a timer task")
	}
}

// A state change between the first check and the watch is not missed:
// the check after the watch completes the operation.
func TestCheckAfterWatch(t *testing.T) {
	f := newFixture(t)
	o := f.newOp()
	o.readyOnCheck = 2
	if !f.watch(o, time.Second, "p0", "p1") {
		t.Fatal("the second check did not complete the operation")
	}
	f.stats(purgatory.Stats{Completed: 1})
	if f.timer.Pending() != 0 {
		t.Fatal("a completed operation left a timer task")
	}
}

func TestCompleteByCheck(t *testing.T) {
	f := newFixture(t)
	o := f.newOp()
	if f.watch(o, 500*time.Millisecond, "p0") {
		t.Fatal("completed before it was ready")
	}
	f.stats(purgatory.Stats{Pending: 1, Keys: 1, Watches: 1})
	if n := f.p.CheckAndComplete("p1"); n != 0 || o.checks.Load() != 2 {
		t.Fatalf("CheckAndComplete of another key = %d, checks %d", n, o.checks.Load())
	}
	if n := f.p.CheckAndComplete("p0"); n != 0 {
		t.Fatalf("CheckAndComplete of an unready operation = %d", n)
	}
	o.ready.Store(true)
	if n := f.p.CheckAndComplete("p0"); n != 1 {
		t.Fatalf("CheckAndComplete = %d", n)
	}
	f.stats(purgatory.Stats{Completed: 1})
	if f.timer.Pending() != 0 {
		t.Fatal("the completed operation's timer task was not cancelled")
	}
	f.advance(time.Second)
	if n := f.p.CheckAndComplete("p0"); n != 0 || o.outcome() != "completed 1 expired 0" {
		t.Fatalf("after the deadline: CheckAndComplete = %d, %s", n, o.outcome())
	}
}

func TestExpiry(t *testing.T) {
	f := newFixture(t)
	o, past := f.newOp(), f.newOp()
	f.watch(o, 500*time.Millisecond, "p0")
	f.watch(past, -time.Second, "p1")
	f.stats(purgatory.Stats{Pending: 2, Keys: 2, Watches: 2})
	if n := f.advance(0); n != 1 || past.outcome() != "completed 0 expired 1" {
		t.Fatalf("a deadline already passed: fired %d, %s", n, past.outcome())
	}
	if n := f.advance(499 * time.Millisecond); n != 0 {
		t.Fatalf("fired %d before the deadline", n)
	}
	if n := f.advance(time.Millisecond); n != 1 || o.outcome() != "completed 0 expired 1" {
		t.Fatalf("at the deadline: fired %d, %s", n, o.outcome())
	}
	f.stats(purgatory.Stats{Expired: 2})
	o.ready.Store(true)
	if n := f.p.CheckAndComplete("p0"); n != 0 {
		t.Fatalf("CheckAndComplete after expiry = %d", n)
	}
}

// An operation watched under several keys completes through any of them
// and leaves every list; a key given twice is watched twice.
func TestSeveralKeys(t *testing.T) {
	f := newFixture(t)
	a, b, twice := f.newOp(), f.newOp(), f.newOp()
	f.watch(a, time.Second, "p0", "p1", "p2")
	f.watch(b, time.Second, "p1")
	f.watch(twice, time.Second, "p3", "p3")
	f.stats(purgatory.Stats{Pending: 3, Keys: 4, Watches: 6})
	a.ready.Store(true)
	if n := f.p.CheckAndComplete("p2"); n != 1 {
		t.Fatalf("CheckAndComplete(p2) = %d", n)
	}
	f.stats(purgatory.Stats{Pending: 2, Keys: 2, Watches: 3, Completed: 1})
	twice.ready.Store(true)
	if n := f.p.CheckAndComplete("p3"); n != 1 {
		t.Fatalf("CheckAndComplete(p3) = %d", n)
	}
	f.stats(purgatory.Stats{Pending: 1, Keys: 1, Watches: 1, Completed: 2})
	if n := f.p.CheckAndComplete("p0"); n != 0 || a.completed.Load() != 1 {
		t.Fatalf("CheckAndComplete(p0) = %d after a completed", n)
	}
	f.advance(time.Second)
	f.stats(purgatory.Stats{Completed: 2, Expired: 1})
	if b.outcome() != "completed 0 expired 1" {
		t.Fatal(b.outcome())
	}
}

func TestCloseExpiresPending(t *testing.T) {
	f := newFixture(t)
	ops := make([]*op, 100)
	for i := range ops {
		ops[i] = f.newOp()
		f.watch(ops[i], time.Duration(i+1)*time.Second, fmt.Sprint("p", i%7), fmt.Sprint("p", i%5))
	}
	ops[3].ready.Store(true)
	f.p.CheckAndComplete("p3")
	f.p.Close()
	for i, o := range ops {
		want := "completed 0 expired 1"
		if i == 3 { // the only ready one: completed before Close
			want = "completed 1 expired 0"
		}
		if o.outcome() != want {
			t.Fatalf("op %d: %s, want %s", i, o.outcome(), want)
		}
	}
	f.stats(purgatory.Stats{Completed: 1, Expired: 99})
	if f.timer.Pending() != 0 {
		t.Fatalf("%d timer tasks left after Close", f.timer.Pending())
	}
	if _, err := f.p.TryCompleteElseWatch(f.newOp(), f.clock.Now(), "p0"); !errors.Is(err, purgatory.ErrClosed) {
		t.Fatalf("TryCompleteElseWatch after Close: %v", err)
	}
	if n := f.p.CheckAndComplete("p0"); n != 0 {
		t.Fatalf("CheckAndComplete after Close = %d", n)
	}
	f.p.Close()
}

func TestErrors(t *testing.T) {
	f := newFixture(t)
	if _, err := f.p.TryCompleteElseWatch(f.newOp(), f.clock.Now()); !errors.Is(err, purgatory.ErrNoKeys) {
		t.Fatalf("no keys: %v", err)
	}
	for _, n := range []int{-1, 1<<16 + 1} {
		if _, err := purgatory.New[int](f.timer.Timer, purgatory.Options{Shards: n}); !errors.Is(err, purgatory.ErrInvalidOptions) {
			t.Fatalf("Shards %d: %v", n, err)
		}
	}
	// The timer closed under the purgatory: the operation is not parked.
	f.timer.Close()
	o := f.newOp()
	if _, err := f.p.TryCompleteElseWatch(o, f.clock.Now().Add(time.Second), "p0"); !errors.Is(err, timingwheel.ErrClosed) {
		t.Fatalf("with the timer closed: %v", err)
	}
	f.stats(purgatory.Stats{})
	f.p.Close()
	if o.outcome() != "completed 0 expired 0" {
		t.Fatalf("an operation refused by TryCompleteElseWatch ran: %s", o.outcome())
	}
}

// Checks from many goroutines race the expiry on the timer's goroutine:
// every operation completes exactly once, its methods never overlap, and
// nothing stays on a watch list.
func TestExactlyOnceUnderConcurrency(t *testing.T) {
	for _, driven := range []bool{false, true} {
		t.Run(fmt.Sprintf("driver=%v", driven), func(t *testing.T) {
			exactlyOnce(t, driven)
		})
	}
}

func exactlyOnce(t *testing.T, driven bool) {
	errs := make(chan error, 100)
	clock := &fakeClock{}
	clock.ns.Store(time.Now().UnixNano())
	var timer *timingwheel.Timer
	var advance func()
	if driven {
		tm, err := timingwheel.New(context.Background(), timingwheel.Options{Tick: 100 * time.Microsecond})
		if err != nil {
			t.Fatal(err)
		}
		timer, advance = tm, func() { time.Sleep(50 * time.Microsecond) }
	} else {
		tm, err := timingwheel.NewManual(timingwheel.Options{Tick: 100 * time.Microsecond, Clock: clock})
		if err != nil {
			t.Fatal(err)
		}
		timer, advance = tm.Timer, func() { clock.Add(50 * time.Microsecond); tm.Advance() }
	}
	defer timer.Close()
	p, err := purgatory.New[int](timer, purgatory.Options{Shards: 4})
	if err != nil {
		t.Fatal(err)
	}
	const nOps, nKeys, checkers = 4000, 16, 3
	ops := make([]*op, nOps)
	for i := range ops {
		ops[i] = &op{errs: errs}
	}
	var wg sync.WaitGroup
	var watched atomic.Int32
	wg.Go(func() { // parks operations with deadlines up to 5ms ahead
		rng := rand.New(rand.NewPCG(1, 1))
		for _, o := range ops {
			keys := []int{rng.IntN(nKeys)}
			for range rng.IntN(3) {
				keys = append(keys, rng.IntN(nKeys))
			}
			if _, err := p.TryCompleteElseWatch(o, timer.Now().Add(time.Duration(rng.Int64N(int64(5*time.Millisecond)))), keys...); err != nil {
				errs <- err
			}
			watched.Add(1)
		}
	})
	stop := make(chan struct{})
	for c := range checkers { // make random operations ready and check random keys
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(c+2), 2))
			for {
				select {
				case <-stop:
					return
				default:
				}
				if n := int(watched.Load()); n > 0 {
					ops[rng.IntN(n)].ready.Store(true)
				}
				p.CheckAndComplete(rng.IntN(nKeys))
			}
		})
	}
	deadline := time.Now().Add(20 * time.Second)
	for watched.Load() < nOps || p.Stats().Pending > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("stuck: %+v", p.Stats())
		}
		advance()
	}
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	var completed, expired int32
	for i, o := range ops {
		c, e := o.completed.Load(), o.expired.Load()
		if c+e != 1 {
			t.Fatalf("op %d: %s", i, o.outcome())
		}
		completed += c
		expired += e
	}
	s := p.Stats()
	if s.Pending != 0 || s.Keys != 0 || s.Watches != 0 || s.Completed != uint64(completed) || s.Expired != uint64(expired) {
		t.Fatalf("Stats %+v; ops completed %d expired %d", s, completed, expired)
	}
	t.Logf("%d completed by a check, %d expired", completed, expired)
	if completed == 0 || expired == 0 {
		t.Fatal("the run did not exercise both ways to complete")
	}
	p.Close()
}

// Memory is bounded by the live operations: once 100,000 operations on
// 1,000 keys have completed or expired, the purgatory holds nothing.
func TestMemoryBounded(t *testing.T) {
	f := newFixture(t)
	before := heapAlloc()
	const n, keys = 100_000, 1_000
	ops := make([]*op, n)
	for i := range ops {
		ops[i] = f.newOp()
	}
	opsBytes := heapAlloc() - before
	for i, o := range ops {
		f.watch(o, time.Duration(1+i%1000)*time.Millisecond, fmt.Sprint("topic-", i%keys))
	}
	per := float64(heapAlloc()-before-opsBytes) / n
	t.Logf("%.0f bytes per pending operation (one key each, timer task included)", per)
	if per > 400 {
		t.Fatalf("%.0f bytes per pending operation", per)
	}
	f.stats(purgatory.Stats{Pending: n, Keys: keys, Watches: n})
	for i, o := range ops {
		if i%2 == 0 {
			o.ready.Store(true)
		}
	}
	for k := range keys / 2 {
		f.p.CheckAndComplete(fmt.Sprint("topic-", k))
	}
	f.advance(time.Second)
	f.stats(purgatory.Stats{Completed: n / 4, Expired: n - n/4})
	if f.timer.Pending() != 0 {
		t.Fatalf("%d timer tasks left", f.timer.Pending())
	}
	if left := heapAlloc() - before - opsBytes; left > 1<<20 {
		t.Fatalf("%d bytes still held once every operation finished", left)
	}
	runtime.KeepAlive(ops)
}

func heapAlloc() int64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}
