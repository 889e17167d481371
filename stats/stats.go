// Package stats holds the lock-free counters and latency histograms that
// tierlog's packages record into and that exporters (package metrics, for
// Prometheus) read. It has no dependencies, so recording costs an atomic add
// and the storage packages stay free of any metrics library.
package stats

import (
	"math/bits"
	"sync/atomic"
	"time"
)

// Buckets is the number of finite histogram buckets. Bucket i counts
// durations of at most 2^i microseconds, so the finite buckets run from
// 1 µs to 2^25 µs (about 33.5 s); longer durations land in +Inf.
const Buckets = 26

// Histogram is a latency histogram with fixed power-of-two bucket bounds.
// The zero value is ready to use; it is safe for concurrent use, and
// Observe takes a few atomic adds and no locks.
type Histogram struct {
	counts [Buckets + 1]atomic.Uint64 // last: above the largest bound
	sumNs  atomic.Int64
}

// Observe records one duration.
func (h *Histogram) Observe(d time.Duration) {
	h.counts[bucketOf(d)].Add(1)
	h.sumNs.Add(int64(d))
}

// Since records the time since start.
func (h *Histogram) Since(start time.Time) { h.Observe(time.Since(start)) }

// bucketOf returns the smallest i with d <= 2^i µs, or Buckets for +Inf.
func bucketOf(d time.Duration) int {
	us := (d + time.Microsecond - 1) / time.Microsecond // round up
	if us <= 1 {
		return 0
	}
	i := bits.Len64(uint64(us - 1)) // ceil(log2(us))
	return min(i, Buckets)
}

// UpperBound returns bucket i's bound in seconds.
func UpperBound(i int) float64 {
	return float64(uint64(1)<<i) / 1e6
}

// HistogramSnapshot is a Histogram's state at one moment.
type HistogramSnapshot struct {
	Count uint64
	Sum   time.Duration
	// Counts[i] counts observations in bucket i alone (not cumulative);
	// Counts[Buckets] those above the largest bound.
	Counts [Buckets + 1]uint64
}

// Snapshot reads the histogram. Concurrent observations may be half
// included (counted in a bucket but not yet in Sum); Count is the sum of
// Counts, so the buckets always agree with it.
func (h *Histogram) Snapshot() HistogramSnapshot {
	var s HistogramSnapshot
	for i := range h.counts {
		s.Counts[i] = h.counts[i].Load()
		s.Count += s.Counts[i]
	}
	s.Sum = time.Duration(h.sumNs.Load())
	return s
}

// Merge adds o's observations to s.
func (s *HistogramSnapshot) Merge(o HistogramSnapshot) {
	s.Count += o.Count
	s.Sum += o.Sum
	for i := range s.Counts {
		s.Counts[i] += o.Counts[i]
	}
}

// Quantile estimates the q-quantile (0 < q <= 1) as the upper bound of the
// bucket that holds it: an overestimate by at most 2x. It returns 0 for an
// empty histogram and +Inf's stand-in, the largest bound, above it.
func (s HistogramSnapshot) Quantile(q float64) time.Duration {
	if s.Count == 0 {
		return 0
	}
	rank := uint64(q*float64(s.Count) + 0.5)
	rank = max(rank, 1)
	var seen uint64
	for i, c := range s.Counts {
		seen += c
		if seen >= rank {
			return time.Duration(uint64(1)<<min(i, Buckets-1)) * time.Microsecond
		}
	}
	return time.Duration(uint64(1)<<(Buckets-1)) * time.Microsecond
}
