package stats

import (
	"sync"
	"testing"
	"time"
)

func TestBucketBounds(t *testing.T) {
	for _, c := range []struct {
		d    time.Duration
		want int
	}{
		{0, 0}, {time.Nanosecond, 0}, {time.Microsecond, 0},
		{time.Microsecond + 1, 1}, {2 * time.Microsecond, 1},
		{3 * time.Microsecond, 2}, {4 * time.Microsecond, 2}, {5 * time.Microsecond, 3},
		{time.Millisecond, 10}, // 1000 µs <= 1024 µs
		{1 << 25 * time.Microsecond, 25},
		{1<<25*time.Microsecond + 1, Buckets},
		{time.Hour, Buckets},
		{-time.Second, 0},
	} {
		if got := bucketOf(c.d); got != c.want {
			t.Errorf("bucketOf(%v) = %d, want %d", c.d, got, c.want)
		}
		// The bucket's bound holds d, and the one below does not.
		if b := bucketOf(c.d); b < Buckets && c.d > 0 {
			if float64(c.d)/1e9 > UpperBound(b) {
				t.Errorf("%v above bucket %d's bound %g s", c.d, b, UpperBound(b))
			}
			if b > 0 && float64(c.d)/1e9 <= UpperBound(b-1) {
				t.Errorf("%v fits bucket %d, got %d", c.d, b-1, b)
			}
		}
	}
}

func TestHistogramConcurrent(t *testing.T) {
	var h Histogram
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 1000 {
				h.Observe(time.Duration(g*1000+i) * time.Microsecond)
			}
		})
	}
	wg.Wait()
	s := h.Snapshot()
	if s.Count != 4000 {
		t.Fatalf("count %d, want 4000", s.Count)
	}
	var want time.Duration
	for i := range 4000 {
		want += time.Duration(i) * time.Microsecond
	}
	if s.Sum != want {
		t.Fatalf("sum %v, want %v", s.Sum, want)
	}
	// The median of 0..3999 µs is ~2000 µs: its bucket's bound is 2048 µs.
	if q := s.Quantile(0.5); q != 2048*time.Microsecond {
		t.Fatalf("p50 %v, want 2.048ms", q)
	}
	var m HistogramSnapshot
	m.Merge(s)
	m.Merge(s)
	if m.Count != 8000 || m.Sum != 2*want {
		t.Fatalf("merged %d %v", m.Count, m.Sum)
	}
	if (HistogramSnapshot{}).Quantile(0.99) != 0 {
		t.Fatal("quantile of an empty histogram")
	}
}

func BenchmarkObserve(b *testing.B) {
	var h Histogram
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			h.Observe(1500 * time.Nanosecond)
		}
	})
}
