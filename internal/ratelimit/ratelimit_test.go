package ratelimit

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestRateLimiter: 3,000 bytes at 10,000 bytes a second, after the
// one-second burst is spent, take about 0.3 s; a nil Limiter does not
// limit; a cancelled context ends a wait.
func TestRateLimiter(t *testing.T) {
	r := New(10_000)
	if err := r.Wait(context.Background(), 10_000); err != nil { // the burst
		t.Fatal(err)
	}
	start := time.Now()
	for range 30 {
		if err := r.Wait(context.Background(), 100); err != nil {
			t.Fatal(err)
		}
	}
	if d := time.Since(start); d < 250*time.Millisecond {
		t.Fatalf("3,000 bytes at 10,000 B/s went in %v, want about 300ms", d)
	}
	if New(0) != nil {
		t.Fatal("a zero rate must mean no limiter")
	}
	var none *Limiter
	if err := none.Wait(context.Background(), 1<<40); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := New(1).Wait(ctx, 10_000); err == nil {
		t.Fatal("wait ignored a cancelled context")
	}
	// More than the burst: taken a burst at a time.
	r = New(1_000_000)
	if err := r.Wait(context.Background(), 2_500_000); err != nil {
		t.Fatal(err)
	}
}

// TestWaitPastTheDeadline: bytes that cannot go before the context's
// deadline end the wait with the context's error when the deadline
// comes, as Wait says, not with the token bucket's early refusal (which
// names no context error: a caller could not tell it from a failure).
func TestWaitPastTheDeadline(t *testing.T) {
	r := New(1_000)
	if err := r.Wait(context.Background(), 1_000); err != nil { // the burst
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err := r.Wait(ctx, 1_000) // a second's worth
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("wait past the deadline: %v; want context.DeadlineExceeded", err)
	}
	if ctx.Err() == nil {
		t.Fatal("the wait ended before the deadline")
	}
}
