package ratelimit

import (
	"context"
	"testing"
	"time"
)

// TestRateLimiter drives the token bucket with a fake clock: 5,000 bytes
// at 1,000 bytes a second, after a one-second burst, take four seconds.
func TestRateLimiter(t *testing.T) {
	r := New(1000)
	clock := time.Unix(0, 0)
	r.last = clock
	r.now = func() time.Time { return clock }
	var slept time.Duration
	r.sleep = func(_ context.Context, d time.Duration) error {
		slept += d
		clock = clock.Add(d)
		return nil
	}
	for i := 0; i < 50; i++ {
		if err := r.Wait(context.Background(), 100); err != nil {
			t.Fatal(err)
		}
	}
	if slept < 3900*time.Millisecond || slept > 4100*time.Millisecond {
		t.Fatalf("slept %v for 5,000 bytes at 1,000 B/s with a 1,000-byte burst, want about 4s", slept)
	}
	if New(0) != nil {
		t.Fatal("a zero rate must mean no limiter")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r.sleep = New(1).sleep
	r.tokens = 0
	if err := r.Wait(ctx, 10_000); err == nil {
		t.Fatal("wait ignored a cancelled context")
	}
}
