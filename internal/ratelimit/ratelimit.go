// Package ratelimit paces byte streams (uploads, the cleaner's I/O) to a
// rate in bytes a second, with golang.org/x/time/rate's token bucket: one
// second of burst. It adds what byte streams need on top: a nil Limiter
// that does not limit, and waits for more bytes than the burst.
package ratelimit

import (
	"context"

	"golang.org/x/time/rate"
)

// Limiter is a token bucket of bytes. A nil *Limiter does not limit. It is
// safe for concurrent use; several streams sharing one share its rate.
type Limiter struct{ lim *rate.Limiter }

// New returns a Limiter of bytesPerSecond with a one-second burst, or nil
// (no limit) when it is not positive.
func New(bytesPerSecond int64) *Limiter {
	if bytesPerSecond <= 0 {
		return nil
	}
	burst := int(min(bytesPerSecond, 1<<30))
	return &Limiter{lim: rate.NewLimiter(rate.Limit(bytesPerSecond), burst)}
}

// Wait blocks until n bytes may go, or ctx is done (its error then). n may
// exceed the burst: the bytes are taken a burst at a time.
//
// The token bucket refuses at once bytes that cannot go before ctx's
// deadline, with an error of its own; Wait waits for the deadline
// instead and returns ctx's error, so that a caller tells a stream its
// deadline stopped from one that failed (an offload group's upload cut
// at half the commit window is the first).
func (r *Limiter) Wait(ctx context.Context, n int) error {
	if r == nil {
		return nil
	}
	for n > 0 {
		k := min(n, r.lim.Burst())
		if err := r.lim.WaitN(ctx, k); err != nil {
			if _, ok := ctx.Deadline(); ok && ctx.Err() == nil {
				<-ctx.Done() // refused for the deadline, which now comes
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return err
		}
		n -= k
	}
	return nil
}

// Burst is the most bytes one Wait takes at once: a stream writing
// through the Limiter writes at most this much per Wait.
func (r *Limiter) Burst() int {
	if r == nil {
		return 1 << 30
	}
	return r.lim.Burst()
}
