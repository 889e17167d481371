package timingwheel

import (
	"fmt"
	"testing"
	"time"
)

// checkInvariants walks the whole structure: the heap is a heap of
// exactly the buckets whose expiration is set, every non-empty bucket is
// in it, every task's links and bucket pointer agree, each task lies in
// its bucket's span, and the tasks add up to Pending.
func (t *Timer) checkInvariants() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil
	}
	inHeap := map[*bucket]int{}
	for i, b := range t.heap {
		inHeap[b]++
		if b.expiration == noExpiration {
			return fmt.Errorf("heap[%d] has no expiration", i)
		}
		if i > 0 && t.heap[(i-1)/2].expiration > b.expiration {
			return fmt.Errorf("heap[%d] expires before its parent", i)
		}
	}
	walk := func(b *bucket, what string) (int, error) {
		n := 0
		var prev *Task
		for k := b.head; k != nil; k = k.next {
			if k.bucket != b || k.prev != prev {
				return 0, fmt.Errorf("%s: task %d links broken", what, n)
			}
			prev = k
			n++
		}
		if b.tail != prev {
			return 0, fmt.Errorf("%s: tail is not the last task", what)
		}
		return n, nil
	}
	total, err := walk(&t.ready, "ready")
	if err != nil {
		return err
	}
	for k := t.ready.head; k != nil; k = k.next {
		if k.expiration > t.levels[0].current {
			return fmt.Errorf("ready task due at %d, clock at %d", k.expiration, t.levels[0].current)
		}
	}
	for l, w := range t.levels {
		if w.current%w.unit != 0 || (l > 0 && w.current > t.levels[l-1].current) {
			return fmt.Errorf("level %d: current %d unit %d", l, w.current, w.unit)
		}
		for i := range w.buckets {
			b := &w.buckets[i]
			n, err := walk(b, fmt.Sprintf("level %d bucket %d", l, i))
			if err != nil {
				return err
			}
			total += n
			if (b.expiration != noExpiration) != (inHeap[b] == 1) || inHeap[b] > 1 {
				return fmt.Errorf("level %d bucket %d: expiration %d, %d times in the heap", l, i, b.expiration, inHeap[b])
			}
			if n > 0 && b.expiration == noExpiration {
				return fmt.Errorf("level %d bucket %d: %d tasks, not in the heap", l, i, n)
			}
			for k := b.head; k != nil; k = k.next {
				if k.expiration < b.expiration || k.expiration >= b.expiration+w.unit {
					return fmt.Errorf("level %d bucket %d due %d holds a task due %d", l, i, b.expiration, k.expiration)
				}
			}
		}
	}
	if total != t.pending {
		return fmt.Errorf("%d tasks in the buckets, pending %d", total, t.pending)
	}
	return nil
}

// Overflow wheels are made on first need, one for each factor of
// WheelSize a deadline reaches past the finest wheel.
func TestOverflowWheelsLazy(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	m, err := NewManual(Options{Clock: ClockFunc(func() time.Time { return now })})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	levels := func() int { m.mu.Lock(); defer m.mu.Unlock(); return len(m.levels) }
	for _, tc := range []struct {
		d      time.Duration
		levels int
	}{
		{19 * time.Millisecond, 1},
		{20 * time.Millisecond, 2},
		{399 * time.Millisecond, 2},
		{time.Hour, 6},                // 20^5 ms = 53 min < 1h < 20^6 ms
		{365 * 24 * time.Hour, 9},     // 20^8 ms = 296 days < 1 year
		{365 * 24 * time.Hour / 2, 9}, // no new wheel for a nearer deadline
	} {
		if _, err := m.AfterFunc(tc.d, func() {}); err != nil {
			t.Fatal(err)
		}
		if got := levels(); got != tc.levels {
			t.Fatalf("after a task %v ahead: %d wheels, want %d", tc.d, got, tc.levels)
		}
	}
}
