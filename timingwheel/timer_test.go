package timingwheel_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tierlog/tierlog/timingwheel"
)

// fakeClock is a Clock a test moves by hand; safe for concurrent use.
type fakeClock struct{ ns atomic.Int64 }

func newFakeClock() *fakeClock {
	c := &fakeClock{}
	c.ns.Store(time.Date(2026, 3, 1, 12, 0, 0, 123456789, time.UTC).UnixNano())
	return c
}
func (c *fakeClock) Now() time.Time            { return time.Unix(0, c.ns.Load()) }
func (c *fakeClock) Add(d time.Duration)       { c.ns.Add(int64(d)) }
func (c *fakeClock) opts() timingwheel.Options { return timingwheel.Options{Clock: c} }

func newManual(t *testing.T, opts timingwheel.Options) *timingwheel.Manual {
	t.Helper()
	m, err := timingwheel.NewManual(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	return m
}

func newDriven(t *testing.T, ctx context.Context, opts timingwheel.Options) *timingwheel.Timer {
	t.Helper()
	tm, err := timingwheel.New(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tm.Close)
	return tm
}

func TestOptionsValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts timingwheel.Options
		ok   bool
	}{
		{"zero is Kafka's defaults", timingwheel.Options{}, true},
		{"1µs tick", timingwheel.Options{Tick: time.Microsecond}, true},
		{"tick below 1µs", timingwheel.Options{Tick: time.Nanosecond}, false},
		{"negative tick", timingwheel.Options{Tick: -time.Millisecond}, false},
		{"wheel of 2", timingwheel.Options{WheelSize: 2}, true},
		{"wheel of 1", timingwheel.Options{WheelSize: 1}, false},
		{"negative wheel", timingwheel.Options{WheelSize: -20}, false},
		{"wheel too large", timingwheel.Options{WheelSize: timingwheel.MaxWheelSize + 1}, false},
	} {
		err := tc.opts.Validate()
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, timingwheel.ErrInvalidOptions)) {
			t.Errorf("%s: Validate = %v", tc.name, err)
		}
		if _, err := timingwheel.NewManual(tc.opts); (err == nil) != tc.ok {
			t.Errorf("%s: NewManual = %v", tc.name, err)
		}
	}
}

func TestScheduleErrors(t *testing.T) {
	c := newFakeClock()
	m := newManual(t, c.opts())
	if _, err := m.Schedule(c.Now(), nil); !errors.Is(err, timingwheel.ErrNilFunc) {
		t.Fatalf("nil fn: %v", err)
	}
	k, err := m.AfterFunc(time.Second, func() { t.Error("fired after Close") })
	if err != nil {
		t.Fatal(err)
	}
	m.Close()
	m.Close() // a second Close is a no-op
	if _, err := m.AfterFunc(time.Second, func() {}); !errors.Is(err, timingwheel.ErrClosed) {
		t.Fatalf("Schedule after Close: %v", err)
	}
	if err := k.Reset(c.Now()); !errors.Is(err, timingwheel.ErrClosed) {
		t.Fatalf("Reset after Close: %v", err)
	}
	if k.Cancel() {
		t.Fatal("Cancel after Close stopped a task")
	}
	if n := m.Pending(); n != 0 {
		t.Fatalf("Pending after Close = %d", n)
	}
	c.Add(time.Hour)
	if n := m.Advance(); n != 0 {
		t.Fatalf("Advance after Close fired %d", n)
	}
}

// A Cancel from a callback stops a task due in the same step, and a task
// reset from its own callback fires again at its new deadline.
func TestCancelAndResetFromCallbacks(t *testing.T) {
	c := newFakeClock()
	m := newManual(t, c.opts())
	var order []string
	var b, p *timingwheel.Task
	_, err := m.AfterFunc(time.Millisecond, func() {
		order = append(order, "a")
		if !b.Cancel() {
			t.Error("b was due but not fired: Cancel should stop it")
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	b, _ = m.AfterFunc(time.Millisecond, func() { order = append(order, "b") })
	runs := 0
	p, _ = m.AfterFunc(10*time.Millisecond, func() {
		runs++
		order = append(order, "p")
		if runs < 3 {
			if err := p.Reset(c.Now().Add(10 * time.Millisecond)); err != nil {
				t.Error(err)
			}
		}
	})
	for range 40 {
		c.Add(time.Millisecond)
		m.Advance()
	}
	if got := fmtList(order); got != "a p p p" {
		t.Fatalf("fired %q, want a p p p", got)
	}
	if n := m.Pending(); n != 0 {
		t.Fatalf("Pending = %d", n)
	}
}

func fmtList(s []string) string {
	out := ""
	for i, x := range s {
		if i > 0 {
			out += " "
		}
		out += x
	}
	return out
}

// Far deadlines with a 1 ms tick cascade down every overflow wheel and
// fire on their tick, not a tick early and not a tick late; deadlines past
// time.Duration's range are accepted and cancelled like any other.
func TestFarDeadlines(t *testing.T) {
	c := newFakeClock()
	m := newManual(t, c.opts())
	origin := c.Now() // tick 0
	start := origin
	var fired []time.Duration
	for _, d := range []time.Duration{
		time.Hour + 7*time.Microsecond, 24*time.Hour + 1, 7 * 24 * time.Hour, 30*24*time.Hour + 999*time.Microsecond, 365 * 24 * time.Hour,
	} {
		if _, err := m.Schedule(start.Add(d), func() { fired = append(fired, d) }); err != nil {
			t.Fatal(err)
		}
		// The task is due at the first tick at or after its deadline.
		due := start.Add(d)
		// Step just before the deadline, then onto it, then onto its tick.
		c.ns.Store(due.UnixNano() - 1)
		if m.Advance() != 0 || len(fired) != 0 {
			t.Fatalf("%v: fired before its deadline", d)
		}
		c.ns.Store(due.UnixNano())
		m.Advance()
		tickAligned := due.Sub(origin)%time.Millisecond == 0
		if tickAligned != (len(fired) == 1) {
			t.Fatalf("%v: fired %v at its deadline (on a tick: %v)", d, fired, tickAligned)
		}
		c.ns.Store(due.Add(time.Millisecond).UnixNano())
		m.Advance()
		if len(fired) != 1 {
			t.Fatalf("%v: not fired a tick after its deadline", d)
		}
		fired = fired[:0]
		start = c.Now()
	}
	far, err := m.Schedule(time.Unix(1<<62, 0), func() { t.Error("fired") })
	if err != nil {
		t.Fatal(err)
	}
	c.Add(100 * 365 * 24 * time.Hour)
	m.Advance()
	if !far.Cancel() {
		t.Fatal("a deadline past time.Duration's range did not stay pending")
	}
}

// The driver fires tasks never before their deadlines, and wakes from a
// long sleep for a task due earlier (else the tasks would wait an hour:
// go test's -timeout catches that). How late past the tick they fire is
// the machine's pace, logged, not asserted; TestModel checks "within a
// tick" on a fake clock.
func TestDriverFiresOnTime(t *testing.T) {
	tm := newDriven(t, context.Background(), timingwheel.Options{})
	// Asleep until an hour from now...
	if _, err := tm.AfterFunc(time.Hour, func() { t.Error("fired an hour early") }); err != nil {
		t.Fatal(err)
	}
	type fire struct{ deadline, at time.Time }
	fires := make(chan fire, 64)
	start := time.Now()
	for i := range 20 {
		deadline := start.Add(time.Duration(5+3*i) * time.Millisecond)
		if _, err := tm.Schedule(deadline, func() { fires <- fire{deadline, time.Now()} }); err != nil {
			t.Fatal(err)
		}
	}
	var latest time.Duration
	for range 20 {
		f := <-fires
		if f.at.Before(f.deadline) {
			t.Errorf("fired %v before its deadline", f.deadline.Sub(f.at))
		}
		latest = max(latest, f.at.Sub(f.deadline))
	}
	t.Logf("20 tasks fired at most %v past their deadlines (tick %v)", latest, tm.Tick())
	if n := tm.Pending(); n != 1 {
		t.Fatalf("Pending = %d, want the hour-long task", n)
	}
}

// Close waits for a running callback, and no pending task fires after it
// returns.
func TestCloseStopsEverything(t *testing.T) {
	tm, err := timingwheel.New(context.Background(), timingwheel.Options{})
	if err != nil {
		t.Fatal(err)
	}
	running, release := make(chan struct{}), make(chan struct{})
	if _, err := tm.AfterFunc(0, func() { close(running); <-release }); err != nil {
		t.Fatal(err)
	}
	var late atomic.Int32
	for i := range 100 {
		if _, err := tm.AfterFunc(time.Duration(i)*100*time.Microsecond, func() { late.Add(1) }); err != nil {
			t.Fatal(err)
		}
	}
	<-running
	closed := make(chan struct{})
	go func() { tm.Close(); close(closed) }()
	select {
	case <-closed:
		t.Fatal("Close returned while a callback ran")
	case <-time.After(20 * time.Millisecond):
	}
	close(release)
	<-closed
	if n := late.Load(); n != 0 {
		t.Fatalf("%d tasks fired while the driver was blocked (they should queue behind the callback)", n)
	}
	time.Sleep(30 * time.Millisecond)
	if n := late.Load(); n != 0 {
		t.Fatalf("%d tasks fired after Close returned", n)
	}
	if _, err := tm.AfterFunc(0, func() {}); !errors.Is(err, timingwheel.ErrClosed) {
		t.Fatalf("Schedule after Close: %v", err)
	}
}

// The end of New's context closes the timer.
func TestContextEndCloses(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	tm := newDriven(t, ctx, timingwheel.Options{})
	if _, err := tm.AfterFunc(50*time.Millisecond, func() { t.Error("fired after the context ended") }); err != nil {
		t.Fatal(err)
	}
	cancel()
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, err := tm.AfterFunc(time.Hour, func() {})
		if errors.Is(err, timingwheel.ErrClosed) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the timer is still open 5s after its context ended")
		}
		time.Sleep(time.Millisecond)
	}
	time.Sleep(80 * time.Millisecond)
}

// Many goroutines schedule, cancel and reset against the running driver:
// each task fires exactly once unless Cancel returned true, and then never.
func TestConcurrentUse(t *testing.T) {
	tm := newDriven(t, context.Background(), timingwheel.Options{Tick: 100 * time.Microsecond})
	const workers, each = 4, 1000
	type rec struct {
		fired     atomic.Int32
		cancelled bool
	}
	recs := make([][]rec, workers)
	var wg sync.WaitGroup
	for w := range workers {
		recs[w] = make([]rec, each)
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			for i := range each {
				r := &recs[w][i]
				action := rng.IntN(4)
				d := time.Duration(rng.Int64N(int64(5 * time.Millisecond)))
				if action == 1 {
					d = time.Hour // still pending when it is reset below
				}
				k, err := tm.AfterFunc(d, func() { r.fired.Add(1) })
				if err != nil {
					t.Error(err)
					return
				}
				switch action {
				case 0:
					r.cancelled = k.Cancel()
				case 1: // moved while pending, twice: fires once, at the last deadline
					if err := k.Reset(time.Now().Add(2 * time.Hour)); err != nil {
						t.Error(err)
					}
					if err := k.Reset(time.Now().Add(time.Millisecond)); err != nil {
						t.Error(err)
					}
				}
			}
		})
	}
	wg.Wait()
	deadline := time.Now().Add(10 * time.Second)
	for tm.Pending() > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d tasks still pending", tm.Pending())
		}
		time.Sleep(time.Millisecond)
	}
	tm.Close() // waits for the last callback
	for w := range recs {
		for i := range recs[w] {
			r := &recs[w][i]
			want := int32(1)
			if r.cancelled {
				want = 0
			}
			if got := r.fired.Load(); got != want {
				t.Fatalf("task %d/%d: fired %d times (Cancel returned %v)", w, i, got, r.cancelled)
			}
		}
	}
}

// A pending task costs one Task: 48 bytes, plus its callback's captures
// (none here).
func TestMemoryPerPendingTask(t *testing.T) {
	c := newFakeClock()
	m := newManual(t, c.opts())
	fn := func() {}
	const n = 100_000
	before := heapAlloc()
	tasks := make([]*timingwheel.Task, 0, n)
	sliceBytes := heapAlloc() - before
	rng := rand.New(rand.NewPCG(1, 2))
	for range n {
		k, err := m.AfterFunc(time.Duration(rng.Int64N(int64(7*24*time.Hour))), fn)
		if err != nil {
			t.Fatal(err)
		}
		tasks = append(tasks, k)
	}
	per := float64(heapAlloc()-before-sliceBytes) / n
	t.Logf("%.1f bytes per pending task", per)
	if per > 64 {
		t.Fatalf("%.1f bytes per pending task, want at most 64", per)
	}
	for _, k := range tasks {
		if !k.Cancel() {
			t.Fatal("Cancel of a pending task returned false")
		}
	}
	if m.Pending() != 0 {
		t.Fatal("tasks left after cancelling them all")
	}
	runtime.KeepAlive(tasks)
}

func heapAlloc() int64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}
