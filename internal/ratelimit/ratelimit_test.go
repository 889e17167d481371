package ratelimit

import (
	"context"
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
