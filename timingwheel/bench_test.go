package timingwheel_test

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/tierlog/tierlog/timingwheel"
)

// The benchmarks put the wheel beside Go's runtime timers (time.AfterFunc,
// one goroutine per firing) and beside a scheduler on container/heap with
// one driver goroutine (heapSched, below), at 1,000, 100,000 and 1,000,000
// pending tasks. Each reports bytes per pending task (B/pending), measured
// while it filled the scheduler.

var pendingSizes = []int{1_000, 100_000, 1_000_000}

// scheduler is what the benchmarks drive; handles are *timingwheel.Task,
// *time.Timer or *heapItem.
type scheduler struct {
	name     string
	schedule func(d time.Duration, fn func()) any
	cancel   func(h any) bool
	reset    func(h any, d time.Duration)
	close    func()
}

var schedulerNames = []string{"wheel", "afterfunc", "heap"}

// schedulers makes the three schedulers, in the order of schedulerNames.
func schedulers(b *testing.B) []func() scheduler {
	return []func() scheduler{
		func() scheduler {
			tm, err := timingwheel.New(context.Background(), timingwheel.Options{})
			if err != nil {
				b.Fatal(err)
			}
			return scheduler{
				name: "wheel",
				schedule: func(d time.Duration, fn func()) any {
					k, err := tm.AfterFunc(d, fn)
					if err != nil && !errors.Is(err, timingwheel.ErrClosed) { // closed: a callback racing close()
						panic(err)
					}
					return k
				},
				cancel: func(h any) bool { return h.(*timingwheel.Task).Cancel() },
				reset: func(h any, d time.Duration) {
					if err := h.(*timingwheel.Task).Reset(time.Now().Add(d)); err != nil {
						b.Fatal(err)
					}
				},
				close: tm.Close,
			}
		},
		func() scheduler {
			return scheduler{
				name:     "afterfunc",
				schedule: func(d time.Duration, fn func()) any { return time.AfterFunc(d, fn) },
				cancel:   func(h any) bool { return h.(*time.Timer).Stop() },
				reset:    func(h any, d time.Duration) { h.(*time.Timer).Reset(d) },
				close:    func() {},
			}
		},
		func() scheduler {
			s := newHeapSched()
			return scheduler{
				name:     "heap",
				schedule: func(d time.Duration, fn func()) any { return s.schedule(time.Now().Add(d), fn) },
				cancel:   func(h any) bool { return s.cancel(h.(*heapItem)) },
				reset:    func(h any, d time.Duration) { s.reset(h.(*heapItem), time.Now().Add(d)) },
				close:    s.close,
			}
		},
	}
}

// delays is a table of random delays in [lo, hi), so that the timed loops
// draw no random numbers.
func delays(lo, hi time.Duration) []time.Duration {
	rng := rand.New(rand.NewPCG(7, 7))
	out := make([]time.Duration, 1<<16)
	for i := range out {
		out[i] = lo + time.Duration(rng.Int64N(int64(hi-lo)))
	}
	return out
}

// fill schedules n tasks an hour or two ahead and returns their handles
// and the heap bytes each costs.
func fill(s scheduler, n int) ([]any, float64) {
	fn := func() {}
	ds := delays(time.Hour, 2*time.Hour)
	hs := make([]any, n)
	before := heapBytes()
	for i := range hs {
		hs[i] = s.schedule(ds[i%len(ds)], fn)
	}
	per := float64(heapBytes()-before) / float64(n)
	runtime.KeepAlive(ds) // else the collection above frees it, and per is short by its size
	return hs, per
}

func heapBytes() int64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}

// BenchmarkScheduleCancel: one task scheduled (1 ms to 1 h ahead) and
// cancelled, with n others pending: a request parked in the purgatory that
// completes before its timeout.
func BenchmarkScheduleCancel(b *testing.B) {
	benchEach(b, func(b *testing.B, s scheduler, n int) {
		hs, per := fill(s, n)
		ds := delays(time.Millisecond, time.Hour)
		fn := func() {}
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			if !s.cancel(s.schedule(ds[i&(len(ds)-1)], fn)) {
				b.Fatal("cancel failed")
			}
			i++
		}
		b.StopTimer()
		b.ReportMetric(per, "B/pending") // after the loop: b.Loop's start clears metrics
		for _, h := range hs {
			s.cancel(h)
		}
	})
}

// benchEach runs body for each pending size and scheduler, closing the
// scheduler after it.
func benchEach(b *testing.B, body func(b *testing.B, s scheduler, n int)) {
	for _, n := range pendingSizes {
		for j, mk := range schedulers(b) {
			b.Run(fmt.Sprintf("pending=%d/%s", n, schedulerNames[j]), func(b *testing.B) {
				s := mk()
				defer s.close()
				body(b, s, n)
			})
		}
	}
}

// BenchmarkReset: one pending task moved to a new deadline (1 ms to 1 h
// ahead), with n pending: a partition rescheduling its next segment roll.
func BenchmarkReset(b *testing.B) {
	benchEach(b, func(b *testing.B, s scheduler, n int) {
		hs, _ := fill(s, n)
		ds := delays(time.Millisecond, time.Hour)
		rng := rand.New(rand.NewPCG(3, 3))
		idx := make([]int, 1<<16)
		for i := range idx {
			idx[i] = rng.IntN(n)
		}
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			s.reset(hs[idx[i&(len(idx)-1)]], ds[i&(len(ds)-1)])
			i++
		}
		b.StopTimer()
		for _, h := range hs {
			s.cancel(h)
		}
	})
}

// BenchmarkScheduleFire: tasks fire and each firing schedules a new one at
// a random delay, keeping n pending, in real time; the delays are spread
// over n×2µs, so the tasks fall due at 500,000 a second, more than one
// core keeps up with for some of them. ns/op is wall time a firing (2,000
// while a scheduler keeps up), cpu-ns/op the process's CPU time a firing
// (user+system, its GC included): the cost.
func BenchmarkScheduleFire(b *testing.B) {
	benchEach(b, func(b *testing.B, s scheduler, n int) {
		ds := delays(0, time.Duration(n)*2*time.Microsecond)
		var fired, next atomic.Int64
		var counting, stop atomic.Bool
		var once sync.Once
		done := make(chan struct{})
		target := int64(b.N)
		var fn func()
		fn = func() {
			if stop.Load() {
				return
			}
			if counting.Load() && fired.Add(1) >= target {
				once.Do(func() { close(done) })
			}
			s.schedule(ds[next.Add(1)&(1<<16-1)], fn)
		}
		for i := range n {
			s.schedule(ds[i&(len(ds)-1)], fn)
		}
		b.ReportAllocs()
		b.ResetTimer()
		cpu0 := cpuTime()
		counting.Store(true)
		<-done
		cpu := cpuTime() - cpu0
		b.StopTimer()
		stop.Store(true)
		b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
		s.close()
		if s.name == "afterfunc" { // let the last timers run out
			time.Sleep(time.Duration(n) * 2 * time.Microsecond)
		}
	})
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		panic(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// heapSched is the baseline: a binary heap (container/heap) of tasks under
// a mutex, and one driver goroutine that sleeps until the earliest
// deadline, as the wheel's driver does, but O(log n) per insert and
// cancel.
type heapSched struct {
	mu     sync.Mutex
	items  heapItems
	closed bool
	wake   chan struct{}
	done   chan struct{}
}

type heapItem struct {
	when  int64 // UnixNano
	fn    func()
	index int // in items, -1 when not pending
}

type heapItems []*heapItem

func (h heapItems) Len() int           { return len(h) }
func (h heapItems) Less(i, j int) bool { return h[i].when < h[j].when }
func (h heapItems) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *heapItems) Push(x any) { it := x.(*heapItem); it.index = len(*h); *h = append(*h, it) }
func (h *heapItems) Pop() any {
	old := *h
	it := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	it.index = -1
	return it
}

func newHeapSched() *heapSched {
	s := &heapSched{wake: make(chan struct{}, 1), done: make(chan struct{})}
	go s.drive()
	return s
}

func (s *heapSched) schedule(when time.Time, fn func()) *heapItem {
	it := &heapItem{when: when.UnixNano(), fn: fn}
	s.mu.Lock()
	heap.Push(&s.items, it)
	first := it.index == 0
	s.mu.Unlock()
	if first {
		s.poke()
	}
	return it
}

func (s *heapSched) cancel(it *heapItem) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if it.index < 0 {
		return false
	}
	heap.Remove(&s.items, it.index)
	return true
}

func (s *heapSched) reset(it *heapItem, when time.Time) {
	s.mu.Lock()
	it.when = when.UnixNano()
	if it.index >= 0 {
		heap.Fix(&s.items, it.index)
	} else {
		heap.Push(&s.items, it)
	}
	first := it.index == 0
	s.mu.Unlock()
	if first {
		s.poke()
	}
}

func (s *heapSched) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (s *heapSched) close() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.poke()
	<-s.done
}

func (s *heapSched) drive() {
	defer close(s.done)
	sleep := time.NewTimer(time.Hour)
	for {
		s.mu.Lock()
		now := time.Now().UnixNano()
		for !s.closed && len(s.items) > 0 && s.items[0].when <= now {
			it := heap.Pop(&s.items).(*heapItem)
			s.mu.Unlock()
			it.fn()
			s.mu.Lock()
		}
		if s.closed {
			s.mu.Unlock()
			return
		}
		var wait <-chan time.Time
		if len(s.items) > 0 {
			sleep.Reset(time.Duration(s.items[0].when - now))
			wait = sleep.C
		}
		s.mu.Unlock()
		select {
		case <-s.wake:
		case <-wait:
		}
		sleep.Stop()
	}
}
