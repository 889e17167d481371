// Package ratelimit paces byte streams (uploads, the cleaner's I/O) to a
// rate in bytes a second.
package ratelimit

import (
	"context"
	"sync"
	"time"
)

// Limiter is a token bucket: at most rate bytes a second, with one second
// of burst. A nil *Limiter does not limit. It is safe for concurrent use.
type Limiter struct {
	mu     sync.Mutex
	rate   float64
	tokens float64
	last   time.Time
	now    func() time.Time
	sleep  func(ctx context.Context, d time.Duration) error
}

// New returns a Limiter of bytesPerSecond, or nil (no limit) when it is
// not positive.
func New(bytesPerSecond int64) *Limiter {
	if bytesPerSecond <= 0 {
		return nil
	}
	return &Limiter{rate: float64(bytesPerSecond), tokens: float64(bytesPerSecond), last: time.Now(), now: time.Now,
		sleep: func(ctx context.Context, d time.Duration) error {
			t := time.NewTimer(d)
			defer t.Stop()
			select {
			case <-t.C:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}}
}

// Wait blocks until n bytes may go, or ctx is done.
func (r *Limiter) Wait(ctx context.Context, n int) error {
	if r == nil {
		return nil
	}
	for {
		r.mu.Lock()
		now := r.now()
		r.tokens = min(r.rate, r.tokens+now.Sub(r.last).Seconds()*r.rate)
		r.last = now
		if r.tokens >= float64(n) || r.tokens >= r.rate {
			r.tokens -= float64(n)
			r.mu.Unlock()
			return nil
		}
		d := time.Duration((float64(n) - r.tokens) / r.rate * float64(time.Second))
		r.mu.Unlock()
		if err := r.sleep(ctx, d); err != nil {
			return err
		}
	}
}
