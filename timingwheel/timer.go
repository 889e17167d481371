package timingwheel

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"
)

// Errors a Timer returns, matched with errors.Is.
var (
	// ErrClosed: the timer was closed, by Close or by the end of the
	// context given to New; nothing can be scheduled on it any more.
	ErrClosed = errors.New("timingwheel: closed")
	// ErrNilFunc: Schedule or AfterFunc was given a nil callback.
	ErrNilFunc = errors.New("timingwheel: nil callback")
	// ErrInvalidOptions: an Options field is out of range; the error names it.
	ErrInvalidOptions = errors.New("timingwheel: invalid options")
)

// Defaults and limits of Options; the defaults are Kafka's (SystemTimer).
const (
	DefaultTick      = time.Millisecond
	DefaultWheelSize = 20
	// MinTick is the finest tick: below it a driver would spend its time
	// waking up rather than firing tasks.
	MinTick      = time.Microsecond
	MaxWheelSize = 1 << 16
)

// A Clock tells a Timer the time. Now MUST be safe to call from several
// goroutines at once. Times it returns are compared with the deadlines
// given to Schedule and Reset (with time.Time.Sub, so a monotonic reading
// is used when both have one).
type Clock interface {
	Now() time.Time
}

// ClockFunc adapts a function to a Clock; tests use it to drive a Manual
// timer with a time they set.
type ClockFunc func() time.Time

// Now calls f.
func (f ClockFunc) Now() time.Time { return f() }

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

// Options configure a Timer. The zero value is Kafka's: 1 ms ticks, 20
// buckets a wheel, the system clock.
type Options struct {
	// Tick is the resolution: a task fires no earlier than its deadline and
	// no later than one tick after it (when the driver is not starved).
	// 0 means DefaultTick; otherwise at least MinTick.
	Tick time.Duration
	// WheelSize is the number of buckets in each wheel; the wheel above
	// covers WheelSize times the span of the one below. 0 means
	// DefaultWheelSize; otherwise 2 to MaxWheelSize.
	WheelSize int
	// Clock tells the time; nil means the system clock. With New, the
	// driver sleeps in real time for the gap the Clock reports, so the
	// Clock MUST advance at the pace of real time; a test that moves time
	// by hand uses NewManual.
	Clock Clock
}

// Validate reports the first field out of range, wrapping
// ErrInvalidOptions. Zero fields are valid: they take the defaults.
func (o Options) Validate() error {
	if o.Tick != 0 && o.Tick < MinTick {
		return fmt.Errorf("%w: Tick %v is below %v", ErrInvalidOptions, o.Tick, MinTick)
	}
	if o.WheelSize != 0 && (o.WheelSize < 2 || o.WheelSize > MaxWheelSize) {
		return fmt.Errorf("%w: WheelSize %d is not in [2, %d]", ErrInvalidOptions, o.WheelSize, MaxWheelSize)
	}
	return nil
}

func (o Options) withDefaults() Options {
	if o.Tick == 0 {
		o.Tick = DefaultTick
	}
	if o.WheelSize == 0 {
		o.WheelSize = DefaultWheelSize
	}
	if o.Clock == nil {
		o.Clock = systemClock{}
	}
	return o
}

// A Timer runs callbacks at deadlines, on one goroutine, in O(1) per
// insert (O(number of wheels), a handful) and O(1) per cancel.
//
// Concurrency: every method MAY be called from any goroutine, including
// from a task's callback, except Close (and Manual.Advance), which MUST
// NOT be called from a callback: they wait for the running callback to
// return, so a callback calling them waits for itself forever.
// Callbacks run one at a time, on the driver goroutine (New) or on the
// goroutine calling Advance (NewManual), never on the goroutine that
// scheduled them; each MUST return quickly, since the next deadline waits
// for it: hand heavy work to another goroutine (see the package example).
type Timer struct {
	tick   time.Duration
	size   int64     // buckets a wheel
	clock  Clock     // immutable
	origin time.Time // tick 0: the clock's time when the timer was made
	manual bool

	wake chan struct{} // New: capacity 1; a task due before the driver's wake-up, or Close
	done chan struct{} // New: closed when the driver has returned

	// advanceMu is held by Manual.Advance while it fires, and by Close on a
	// manual timer, so that Close waits for a running callback. Lock order:
	// advanceMu before mu.
	advanceMu sync.Mutex

	// mu guards the fields below and the list fields (next, prev, bucket,
	// expiration) of every Task of this timer.
	mu      sync.Mutex
	closed  bool
	levels  []*wheel  // levels[0] has the finest buckets (one tick each)
	heap    []*bucket // the buckets in use, a min-heap on expiration
	ready   bucket    // tasks due, fired in order by the driver or Advance
	pending int       // tasks in a bucket or in ready
	// sleepUntil is the expiration the driver sleeps until (math.MaxInt64:
	// no bucket in use); math.MinInt64 while the driver is awake, and
	// always for a manual timer. A task due before it wakes the driver.
	sleepUntil int64
}

// wheel is one level: wheelSize buckets of unit ticks each, covering
// [current, current+interval) (interval = unit*wheelSize).
type wheel struct {
	unit     int64 // ticks a bucket spans: wheelSize^level
	interval int64 // ticks the wheel spans; math.MaxInt64 if that overflows
	current  int64 // the start of the current bucket, a multiple of unit
	buckets  []bucket
}

// noExpiration marks a bucket that is not in the heap.
const noExpiration = -1

// bucket is an intrusive doubly linked list of tasks; a task knows its
// bucket, so it leaves in O(1).
type bucket struct {
	head, tail *Task
	expiration int64 // the tick it is due at, or noExpiration
}

// A Task is a callback scheduled on a Timer. Its methods MAY be called from
// any goroutine, including from its own callback.
//
// A Task is pending from Schedule (or Reset) until it fires, is cancelled,
// or its timer closes. Each time it is pending it fires at most once.
type Task struct {
	timer *Timer
	fn    func()

	// Guarded by timer.mu. bucket is nil when the task is not pending.
	next, prev *Task
	bucket     *bucket
	expiration int64 // the tick it is due at: its deadline rounded up to a tick
}

// New makes a Timer and starts its driver goroutine, which fires tasks
// until Close is called or ctx is done (then the timer is closed as by
// Close).
func New(ctx context.Context, opts Options) (*Timer, error) {
	t, err := newTimer(opts)
	if err != nil {
		return nil, err
	}
	t.wake = make(chan struct{}, 1)
	t.done = make(chan struct{})
	go t.drive(ctx)
	return t, nil
}

// A Manual is a Timer without a driver goroutine: its tasks fire only
// inside Advance, on the goroutine that calls it. Tests drive one with a
// Clock they set; a program MAY also poll one from a loop of its own. Pass
// the embedded *Timer to whatever needs a Timer.
type Manual struct {
	*Timer
}

// NewManual makes a Manual timer.
func NewManual(opts Options) (*Manual, error) {
	t, err := newTimer(opts)
	if err != nil {
		return nil, err
	}
	t.manual = true
	return &Manual{t}, nil
}

func newTimer(opts Options) (*Timer, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	opts = opts.withDefaults()
	t := &Timer{
		tick:       opts.Tick,
		size:       int64(opts.WheelSize),
		clock:      opts.Clock,
		sleepUntil: math.MinInt64,
	}
	t.origin = t.clock.Now()
	t.ready.expiration = noExpiration
	t.levels = []*wheel{t.newWheel(1, 0)}
	return t, nil
}

func (t *Timer) newWheel(unit, now int64) *wheel {
	w := &wheel{unit: unit, interval: math.MaxInt64, current: now - now%unit, buckets: make([]bucket, t.size)}
	if unit <= math.MaxInt64/t.size {
		w.interval = unit * t.size
	}
	for i := range w.buckets {
		w.buckets[i].expiration = noExpiration
	}
	return w
}

// Now is the timer's Clock's time: deadlines for Schedule and Reset are
// compared with it.
func (t *Timer) Now() time.Time { return t.clock.Now() }

// Tick is the timer's resolution.
func (t *Timer) Tick() time.Duration { return t.tick }

// Schedule arranges for fn to run once, no earlier than deadline and no
// later than one tick after it (when the driver is not starved): at the
// first tick at or after deadline. A task whose tick has passed fires at
// the driver's next step, never on the caller's goroutine. It returns
// ErrClosed after Close and ErrNilFunc for a nil fn.
func (t *Timer) Schedule(deadline time.Time, fn func()) (*Task, error) {
	if fn == nil {
		return nil, ErrNilFunc
	}
	k := &Task{timer: t, fn: fn, expiration: t.deadlineTick(deadline)}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil, ErrClosed
	}
	t.pending++
	t.addLocked(k)
	return k, nil
}

// AfterFunc is Schedule(t.Now().Add(d), fn).
func (t *Timer) AfterFunc(d time.Duration, fn func()) (*Task, error) {
	return t.Schedule(t.clock.Now().Add(d), fn)
}

// Pending is the number of tasks scheduled that have not fired (or started
// firing), been cancelled, or been dropped by Close.
func (t *Timer) Pending() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.pending
}

// Close stops the timer. When Close returns, no callback is running and
// none will start: tasks still pending are dropped (they never fire,
// Cancel on them returns false, Pending reports 0), and Schedule and Reset
// return ErrClosed. Close waits for a callback that is running to return,
// so it MUST NOT be called from a callback. Close MAY be called more than
// once.
func (t *Timer) Close() {
	if t.manual {
		t.advanceMu.Lock()
		defer t.advanceMu.Unlock()
	}
	t.mu.Lock()
	t.closeLocked()
	t.mu.Unlock()
	if !t.manual {
		select {
		case t.wake <- struct{}{}:
		default:
		}
		<-t.done
	}
}

// closeLocked drops every pending task. Tasks keep pointers into the
// buckets, so the buckets are only unreferenced here, not cleared: that
// would cost a walk of every task.
// REQUIRES: t.mu held.
func (t *Timer) closeLocked() {
	if t.closed {
		return
	}
	t.closed = true
	t.levels, t.heap, t.ready = nil, nil, bucket{expiration: noExpiration}
	t.pending = 0
}

// Cancel stops the task. It reports whether this call stopped it from
// firing: false when it already fired or its callback has started, was
// cancelled, or its timer was closed. When Cancel returns true, the
// callback does not run (until a later Reset). O(1).
func (k *Task) Cancel() bool {
	t := k.timer
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed || k.bucket == nil {
		return false
	}
	k.bucket.remove(k)
	t.pending--
	return true
}

// Reset makes the task pending again with a new deadline, whether it is
// pending (then it no longer fires at the old one), has fired, or was
// cancelled; it MAY be called from the task's own callback, to make a
// periodic task without an allocation. It returns ErrClosed after Close.
func (k *Task) Reset(deadline time.Time) error {
	t := k.timer
	e := t.deadlineTick(deadline)
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return ErrClosed
	}
	if k.bucket != nil {
		k.bucket.remove(k)
	} else {
		t.pending++
	}
	k.expiration = e
	t.addLocked(k)
	return nil
}

// deadlineTick is the first tick at or after deadline. Ticks count from
// the timer's origin; a deadline at or before it is tick 0, due at once.
func (t *Timer) deadlineTick(deadline time.Time) int64 {
	d := deadline.Sub(t.origin) // saturates, never overflows
	if d <= 0 {
		return 0
	}
	e := int64(d / t.tick)
	if d%t.tick != 0 {
		e++
	}
	return e
}

// nowTick is the last tick at or before the clock's time.
func (t *Timer) nowTick() int64 {
	d := t.clock.Now().Sub(t.origin)
	if d <= 0 {
		return 0
	}
	return int64(d / t.tick)
}

// tickTime is the time of tick e, saturated.
func (t *Timer) tickTime(e int64) time.Time {
	if e > math.MaxInt64/int64(t.tick) {
		return t.origin.Add(math.MaxInt64)
	}
	return t.origin.Add(time.Duration(e) * t.tick)
}

// addLocked puts a task that is in no bucket into the finest wheel whose
// span covers its expiration, creating overflow wheels as needed, or into
// the ready list if it is due.
// REQUIRES: t.mu held, !t.closed.
func (t *Timer) addLocked(k *Task) {
	e := k.expiration
	if e <= t.levels[0].current {
		t.ready.pushBack(k)
		t.wakeLocked(-1)
		return
	}
	for i := 0; ; i++ {
		if i == len(t.levels) {
			below := t.levels[i-1]
			t.levels = append(t.levels, t.newWheel(below.interval, below.current))
		}
		w := t.levels[i]
		// e > levels[0].current >= w.current, so the difference is positive.
		if e-w.current >= w.interval {
			continue
		}
		v := e / w.unit
		b := &w.buckets[v%t.size]
		b.pushBack(k)
		if exp := v * w.unit; b.expiration != exp {
			if b.expiration != noExpiration {
				// The clock moved past a bucket before it was flushed.
				panic(fmt.Sprintf("timingwheel: bucket of level %d due at %d reused for %d", i, b.expiration, exp))
			}
			b.expiration = exp
			t.heapPushLocked(b)
			t.wakeLocked(exp)
		}
		return
	}
}

// wakeLocked wakes the driver if it sleeps past exp.
// REQUIRES: t.mu held.
func (t *Timer) wakeLocked(exp int64) {
	if exp < t.sleepUntil {
		t.sleepUntil = math.MinInt64
		select {
		case t.wake <- struct{}{}:
		default:
		}
	}
}

// advanceLocked moves the clock to now one due bucket at a time, earliest
// first, as Kafka does: each bucket's tasks go down to a finer wheel or,
// when due, to the ready list. Then every bucket left is due after now, so
// the clock can move to now without skipping one.
// REQUIRES: t.mu held, !t.closed.
func (t *Timer) advanceLocked(now int64) {
	for len(t.heap) > 0 && t.heap[0].expiration <= now {
		b := t.heapPopLocked()
		t.advanceClockLocked(b.expiration)
		k := b.head
		b.head, b.tail, b.expiration = nil, nil, noExpiration
		for k != nil {
			next := k.next
			k.next, k.prev, k.bucket = nil, nil, nil
			t.addLocked(k)
			k = next
		}
	}
	t.advanceClockLocked(now)
}

// REQUIRES: t.mu held.
func (t *Timer) advanceClockLocked(now int64) {
	for _, w := range t.levels {
		if now < w.current+w.unit {
			return // the wheels above move in multiples of this one's unit
		}
		w.current = now - now%w.unit
	}
}

// fireReadyLocked runs the ready tasks in order, releasing t.mu around
// each callback, until none is left or the timer closes.
// REQUIRES: t.mu held; it is held again on return.
func (t *Timer) fireReadyLocked() int {
	n := 0
	for !t.closed && t.ready.head != nil {
		k := t.ready.head
		t.ready.remove(k)
		t.pending--
		t.mu.Unlock()
		k.fn()
		n++
		t.mu.Lock()
	}
	return n
}

// Advance fires, on the calling goroutine, every task due at the Clock's
// time, earliest first, and returns how many it fired. Tasks their
// callbacks schedule fire in the same call if they are due. Calls to
// Advance run one at a time; Advance MUST NOT be called from a callback.
// After Close it fires nothing.
func (m *Manual) Advance() int {
	t := m.Timer
	t.advanceMu.Lock()
	defer t.advanceMu.Unlock()
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return 0
	}
	t.advanceLocked(t.nowTick())
	n := t.fireReadyLocked()
	t.mu.Unlock()
	return n
}

// drive is the driver goroutine: it fires what is due, then sleeps until
// the earliest bucket's expiration, an earlier task, Close, or ctx's end.
func (t *Timer) drive(ctx context.Context) {
	defer close(t.done)
	sleep := time.NewTimer(time.Hour)
	sleep.Stop()
	// No deferred unlock: a callback that panics runs with t.mu released.
	t.mu.Lock()
	for !t.closed {
		t.advanceLocked(t.nowTick())
		t.fireReadyLocked()
		if t.closed {
			break
		}
		next := int64(math.MaxInt64)
		if len(t.heap) > 0 {
			next = t.heap[0].expiration
		}
		var wait <-chan time.Time
		if next != math.MaxInt64 {
			d := t.tickTime(next).Sub(t.clock.Now())
			if d <= 0 {
				continue
			}
			sleep.Reset(d)
			wait = sleep.C
		}
		t.sleepUntil = next
		t.mu.Unlock()
		select {
		case <-ctx.Done():
		case <-t.wake:
		case <-wait:
		}
		sleep.Stop()
		t.mu.Lock()
		t.sleepUntil = math.MinInt64
		if ctx.Err() != nil {
			t.closeLocked()
		}
	}
	t.mu.Unlock()
}

func (b *bucket) pushBack(k *Task) {
	k.bucket = b
	k.prev, k.next = b.tail, nil
	if b.tail != nil {
		b.tail.next = k
	} else {
		b.head = k
	}
	b.tail = k
}

func (b *bucket) remove(k *Task) {
	if k.prev != nil {
		k.prev.next = k.next
	} else {
		b.head = k.next
	}
	if k.next != nil {
		k.next.prev = k.prev
	} else {
		b.tail = k.prev
	}
	k.next, k.prev, k.bucket = nil, nil, nil
}

// heapPushLocked and heapPopLocked keep t.heap a binary min-heap on
// expiration. A bucket is in it at most once: exactly while its
// expiration is set.
// REQUIRES: t.mu held.
func (t *Timer) heapPushLocked(b *bucket) {
	h := append(t.heap, b)
	i := len(h) - 1
	for i > 0 {
		p := (i - 1) / 2
		if h[p].expiration <= b.expiration {
			break
		}
		h[i] = h[p]
		i = p
	}
	h[i] = b
	t.heap = h
}

// REQUIRES: t.mu held, len(t.heap) > 0.
func (t *Timer) heapPopLocked() *bucket {
	h := t.heap
	top := h[0]
	last := h[len(h)-1]
	h[len(h)-1] = nil
	h = h[:len(h)-1]
	if n := len(h); n > 0 {
		i := 0
		for {
			c := 2*i + 1
			if c >= n {
				break
			}
			if c+1 < n && h[c+1].expiration < h[c].expiration {
				c++
			}
			if last.expiration <= h[c].expiration {
				break
			}
			h[i] = h[c]
			i = c
		}
		h[i] = last
	}
	t.heap = h
	return top
}
