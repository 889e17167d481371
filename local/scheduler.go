package local

import (
	"context"
	"math"
	"sync"
	"time"

	"github.com/tierlog/tierlog/timingwheel"
)

// The scheduler of a Backend's (or a lone log's) deadlines: a timing
// wheel whose tasks only queue work, and the small pool of goroutines
// that does it. What each deadline is lives in deadlines.go.

// work is one queue entry: a log's (or a Backend's) timed work. The
// scheduler queues it at most once and runs it on one goroutine at a time.
type work struct {
	run func(due dueKind) // runs on a pool goroutine

	// Guarded by scheduler.mu.
	due     dueKind // what is due: set by queue, taken by the run
	queued  bool    // in scheduler.queue
	running bool
	stopped bool // never runs again (its log or Backend closed)
}

// scheduler is a timing wheel whose callbacks queue work, and the bounded
// pool of goroutines that does it. A Backend has one for all its logs; a
// log opened on its own makes one on first need.
type scheduler struct {
	timer    *timingwheel.Timer
	ownTimer bool // made here: closed by close
	workers  int

	mu      sync.Mutex // guards the fields below and every work's queue state
	jobDone sync.Cond  // on mu: broadcast when a run ends or the queue empties
	queue   []*work
	live    int   // worker goroutines alive (at most workers)
	busy    int   // runs in progress
	runs    int64 // runs done (tests)
}

// newScheduler schedules on timer, or, when it is nil, on a timing wheel
// of its own (timingwheel.New) reading the clock now.
func newScheduler(timer *timingwheel.Timer, now func() time.Time, workers int) (*scheduler, error) {
	s := &scheduler{timer: timer, workers: workers}
	s.jobDone.L = &s.mu
	if timer == nil {
		t, err := timingwheel.New(context.Background(), timingwheel.Options{Clock: timingwheel.ClockFunc(now)})
		if err != nil {
			return nil, err
		}
		s.timer, s.ownTimer = t, true
	}
	return s, nil
}

// close closes the timer if the scheduler made it. Every work MUST have
// been stopped: no run is in progress or queued after it.
func (s *scheduler) close() {
	if s.ownTimer {
		s.timer.Close()
	}
}

// queue marks due on w and queues it unless it is queued or running
// already (a running work is queued again when its run ends). Quick: the
// wheel's callbacks call it.
func (s *scheduler) enqueue(w *work, due dueKind) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if w.stopped {
		return
	}
	w.due |= due
	if w.queued || w.running {
		return
	}
	w.queued = true
	s.queue = append(s.queue, w)
	if s.live < s.workers {
		s.live++
		go s.worker()
	}
}

// worker runs queued work until the queue is empty, then exits: an idle
// scheduler has no goroutine of its own besides its timer's.
func (s *scheduler) worker() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for len(s.queue) > 0 {
		w := s.queue[0]
		s.queue[0] = nil
		s.queue = s.queue[1:]
		w.queued = false
		if w.stopped || w.due == 0 {
			continue
		}
		due := w.due
		w.due, w.running = 0, true
		s.busy++
		s.mu.Unlock()
		w.run(due)
		s.mu.Lock()
		s.busy--
		s.runs++
		w.running = false
		if w.due != 0 && !w.stopped {
			w.queued = true
			s.queue = append(s.queue, w)
		}
		s.jobDone.Broadcast()
	}
	s.queue = nil // drop the backing array a burst grew
	s.live--
	s.jobDone.Broadcast()
}

// stop makes w never run again and waits for a run in progress to end. It
// MUST NOT be called from w's own run.
func (s *scheduler) stop(w *work) {
	s.mu.Lock()
	defer s.mu.Unlock()
	w.stopped, w.due = true, 0 // a queued w is skipped by the worker
	for w.running {
		s.jobDone.Wait()
	}
}

// idle waits until nothing is queued or running (tests).
func (s *scheduler) idle() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for len(s.queue) > 0 || s.busy > 0 {
		s.jobDone.Wait()
	}
}

// arm makes *k (a task made on first use, whose callback queues due on
// w) due at the wall-clock time at, as now (the log's clock)
// sees it: the wheel waits at-now from its own Now, so a step of the wall
// clock between two arms never makes a task fire early in a loop (a task
// that fires early finds nothing due and arms again). ErrClosed (the
// scheduler's timer closed under a closing Backend) leaves it unarmed.
func (s *scheduler) arm(k **timingwheel.Task, at, now time.Time, w *work, due dueKind) {
	deadline := s.timer.Now().Add(at.Sub(now))
	if *k != nil {
		_ = (*k).Reset(deadline)
		return
	}
	*k, _ = s.timer.Schedule(deadline, func() { s.enqueue(w, due) })
}

// cancel cancels a task, if there is one.
func cancelTask(k *timingwheel.Task) {
	if k != nil {
		k.Cancel()
	}
}

// msAfter is t plus ms milliseconds; ok is false when that is beyond what
// a time.Duration holds (a deadline that never comes).
func msAfter(t time.Time, ms int64) (time.Time, bool) {
	if ms < 0 || ms > math.MaxInt64/int64(time.Millisecond) {
		return time.Time{}, false
	}
	return t.Add(time.Duration(ms) * time.Millisecond), true
}
