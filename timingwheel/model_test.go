package timingwheel

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"
)

// seedEnv replays one seed of TestModel: TIMINGWHEEL_SEED=123 go test -run TestModel ./timingwheel
const seedEnv = "TIMINGWHEEL_SEED"

// seedsEnv sets how many seeds TestModel runs (150, or 20 with -short or -race).
const seedsEnv = "TIMINGWHEEL_SEEDS"

// TestModel runs random schedules, cancels, resets (also from callbacks)
// and clock moves against a plain model on a Manual timer, for many
// seeds. After each Advance the tasks that fired must be exactly those
// whose deadline, rounded up to a tick, is at or before the clock: so no
// task fires before its deadline or more than a tick after it, a task
// fires once per schedule, and a cancelled task never fires. Deadlines
// reach 30 days with ticks down to 1µs, so tasks cascade down many
// overflow wheels.
func TestModel(t *testing.T) {
	var seeds []uint64
	if s := os.Getenv(seedEnv); s != "" {
		seed, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("%s=%q: %v", seedEnv, s, err)
		}
		seeds = []uint64{seed}
	} else {
		base := uint64(time.Now().UnixNano())
		n := 150
		if testing.Short() || raceEnabled {
			n = 20
		}
		if s := os.Getenv(seedsEnv); s != "" {
			var err error
			if n, err = strconv.Atoi(s); err != nil {
				t.Fatalf("%s=%q: %v", seedsEnv, s, err)
			}
		}
		t.Logf("seeds %d to %d; replay one with %s=<seed>", base, base+uint64(n)-1, seedEnv)
		for i := range n {
			seeds = append(seeds, base+uint64(i))
		}
	}
	for _, seed := range seeds {
		if !t.Run(fmt.Sprint(seed), func(t *testing.T) { runModel(t, seed, 2000) }) {
			t.Fatalf("seed %d failed; replay with %s=%d go test -run TestModel ./timingwheel", seed, seedEnv, seed)
		}
	}
}

type modelTask struct {
	id       int
	k        *Task
	deadline time.Time
	pending  bool
	due      time.Time // deadline rounded up to a tick: when it must fire
}

type model struct {
	t      *testing.T
	seed   uint64
	rng    *rand.Rand
	tm     *Manual
	tick   time.Duration
	size   int
	origin time.Time
	now    time.Time
	tasks  []*modelTask
	// fired lists the ids fired by the Advance under way, in order.
	fired []int
	// extra lists the ids scheduled due by callbacks during that Advance.
	extra []int
	// draining: callbacks schedule nothing.
	draining bool
}

func runModel(t *testing.T, seed uint64, ops int) {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	ticks := []time.Duration{time.Millisecond, time.Millisecond, time.Microsecond, 10 * time.Millisecond, time.Second, 3*time.Millisecond + 7}
	sizes := []int{2, 3, 4, 5, 8, 20, 20, 64}
	m := &model{t: t, seed: seed, rng: rng, tick: ticks[rng.IntN(len(ticks))], size: sizes[rng.IntN(len(sizes))]}
	// A base time off any tick boundary, without a monotonic reading.
	m.now = time.Unix(1_700_000_000+rng.Int64N(1e8), rng.Int64N(1e9))
	m.origin = m.now
	tm, err := NewManual(Options{Tick: m.tick, WheelSize: m.size, Clock: ClockFunc(func() time.Time { return m.now })})
	if err != nil {
		t.Fatal(err)
	}
	defer tm.Close()
	m.tm = tm
	t.Logf("tick %v, wheel size %d", m.tick, m.size)

	for op := 0; op < ops; op++ {
		switch r := rng.IntN(100); {
		case r < 30:
			m.schedule(m.randomDeadline())
		case r < 40:
			m.cancel()
		case r < 50:
			m.reset()
		default:
			m.advance(m.randomStep())
		}
		m.check()
		if t.Failed() {
			t.Fatalf("after op %d", op)
		}
	}
	// Everything still pending fires by the latest deadline.
	m.draining = true
	last := m.now
	for _, mt := range m.tasks {
		if mt.pending && mt.due.After(last) {
			last = mt.due
		}
	}
	m.advance(last.Sub(m.now))
	m.check()
	if n := m.tm.Pending(); n != 0 {
		t.Fatalf("%d tasks still pending after the last deadline", n)
	}
}

// roundUp is the model's rule: the first tick at or after the deadline.
func (m *model) roundUp(deadline time.Time) time.Time {
	d := deadline.Sub(m.origin)
	if d <= 0 {
		return m.origin
	}
	n := d / m.tick
	if d%m.tick != 0 {
		n++
	}
	return m.origin.Add(n * m.tick)
}

func (m *model) randomDeadline() time.Time {
	tick := m.tick
	var d time.Duration
	switch r := m.rng.IntN(100); {
	case r < 10: // already due
		d = -time.Duration(m.rng.Int64N(int64(3 * tick)))
	case r < 40: // within a few ticks
		d = time.Duration(m.rng.Int64N(int64(5 * tick)))
	case r < 70: // within a few wheels
		span := tick
		for range 1 + m.rng.IntN(4) {
			span *= time.Duration(m.size)
		}
		d = time.Duration(m.rng.Int64N(int64(span)))
	case r < 85: // hours
		d = time.Duration(m.rng.Int64N(int64(48 * time.Hour)))
	default: // days
		d = time.Duration(m.rng.Int64N(int64(30 * 24 * time.Hour)))
	}
	return m.now.Add(d)
}

func (m *model) randomStep() time.Duration {
	tick := m.tick
	switch r := m.rng.IntN(100); {
	case r < 30:
		return time.Duration(m.rng.Int64N(int64(2 * tick)))
	case r < 55:
		span := tick
		for range 1 + m.rng.IntN(3) {
			span *= time.Duration(m.size)
		}
		return time.Duration(m.rng.Int64N(int64(span)))
	case r < 85: // to a pending task's firing tick, or a nanosecond before it
		var next []*modelTask
		for _, mt := range m.tasks {
			if mt.pending && mt.due.After(m.now) {
				next = append(next, mt)
			}
		}
		if len(next) == 0 {
			return tick
		}
		mt := next[m.rng.IntN(len(next))]
		if r < 70 { // the earliest one
			for _, o := range next {
				if o.due.Before(mt.due) {
					mt = o
				}
			}
		}
		d := mt.due.Sub(m.now)
		if m.rng.IntN(2) == 0 {
			d--
		}
		return d
	default:
		return time.Duration(m.rng.Int64N(int64(3 * 24 * time.Hour)))
	}
}

func (m *model) schedule(deadline time.Time) *modelTask {
	mt := &modelTask{id: len(m.tasks), deadline: deadline, due: m.roundUp(deadline), pending: true}
	m.tasks = append(m.tasks, mt)
	k, err := m.tm.Schedule(deadline, func() { m.fire(mt) })
	if err != nil {
		m.t.Fatalf("schedule: %v", err)
	}
	mt.k = k
	return mt
}

func (m *model) pick() *modelTask {
	if len(m.tasks) == 0 {
		return nil
	}
	return m.tasks[m.rng.IntN(len(m.tasks))]
}

func (m *model) cancel() {
	mt := m.pick()
	if mt == nil {
		return
	}
	if got := mt.k.Cancel(); got != mt.pending {
		m.t.Errorf("task %d: Cancel = %v, model says pending = %v", mt.id, got, mt.pending)
	}
	mt.pending = false
}

func (m *model) reset() {
	mt := m.pick()
	if mt == nil {
		return
	}
	m.resetTo(mt, m.randomDeadline())
}

func (m *model) resetTo(mt *modelTask, deadline time.Time) {
	if err := mt.k.Reset(deadline); err != nil {
		m.t.Fatalf("reset: %v", err)
	}
	mt.deadline, mt.due, mt.pending = deadline, m.roundUp(deadline), true
}

// fire is every task's callback.
func (m *model) fire(mt *modelTask) {
	if !mt.pending {
		m.t.Errorf("task %d fired but was not pending (cancelled, or fired already)", mt.id)
	}
	if m.now.Before(mt.deadline) {
		m.t.Errorf("task %d fired at %v, before its deadline %v", mt.id, m.now, mt.deadline)
	}
	mt.pending = false
	m.fired = append(m.fired, mt.id)
	if m.draining {
		return
	}
	switch m.rng.IntN(10) {
	case 0: // reset itself past this Advance, as a periodic task does
		m.resetTo(mt, m.now.Add(m.tick+time.Duration(m.rng.Int64N(int64(50*m.tick)))))
	case 1: // schedule a task due (rounded up) at the latest now: it fires in this Advance
		m.extra = append(m.extra, m.schedule(m.now.Add(-m.tick-time.Duration(m.rng.Int64N(int64(m.tick))))).id)
	}
}

func (m *model) advance(d time.Duration) {
	m.now = m.now.Add(d)
	want := map[int]bool{}
	for _, mt := range m.tasks {
		if mt.pending && !mt.due.After(m.now) {
			want[mt.id] = true
		}
	}
	m.fired, m.extra = m.fired[:0], m.extra[:0]
	// A bucket that never leaves the heap loops Advance forever: fail fast,
	// with the seed, rather than at the test binary's timeout.
	watchdog := time.AfterFunc(20*time.Second, func() {
		panic(fmt.Sprintf("Advance to %v did not return in 20s; replay with %s=%d", m.now.Sub(m.origin), seedEnv, m.seed))
	})
	n := m.tm.Advance()
	watchdog.Stop()
	for _, id := range m.extra {
		want[id] = true
	}
	if n != len(m.fired) {
		m.t.Errorf("Advance = %d, %d callbacks ran", n, len(m.fired))
	}
	got := map[int]bool{}
	for _, id := range m.fired {
		if got[id] {
			m.t.Errorf("task %d fired twice in one Advance", id)
		}
		got[id] = true
	}
	for id := range want {
		if !got[id] {
			mt := m.tasks[id]
			m.t.Errorf("task %d (deadline %v, due %v) did not fire by %v", id, mt.deadline.Sub(m.origin), mt.due.Sub(m.origin), m.now.Sub(m.origin))
		}
	}
	for id := range got {
		if !want[id] {
			m.t.Errorf("task %d fired at %v, not due", id, m.now.Sub(m.origin))
		}
	}
	// No pending task is left more than a tick past its deadline.
	for _, mt := range m.tasks {
		if mt.pending && !mt.deadline.Add(m.tick).After(m.now) {
			m.t.Errorf("task %d pending at %v, a tick past its deadline %v", mt.id, m.now.Sub(m.origin), mt.deadline.Sub(m.origin))
		}
	}
}

func (m *model) check() {
	pending := 0
	for _, mt := range m.tasks {
		if mt.pending {
			pending++
		}
	}
	if got := m.tm.Pending(); got != pending {
		m.t.Errorf("Pending = %d, model %d", got, pending)
	}
	if err := m.tm.Timer.checkInvariants(); err != nil {
		m.t.Error(err)
	}
}
