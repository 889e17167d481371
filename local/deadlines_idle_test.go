package local_test

import (
	"os"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/local"
)

// TestIdleBackendCPU measures the CPU time (getrusage, user+sys, the
// whole process) an idle Backend spends per minute with 10,000 open
// partitions, each with a few small segments, segment.ms, flush.ms and
// retention.ms set, and nothing appended after setup (a clean restart
// opened them all again). It only reports: run
// it by hand, on this code and on the code before the deadlines moved onto
// the timing wheel (the file uses the public API only), e.g.
//
//	TIERLOG_IDLE_CPU=1 TIERLOG_IDLE_INTERVAL=1s go test ./local -run TestIdleBackendCPU -v -timeout 30m
//
// TIERLOG_IDLE_INTERVAL is BackendOptions.BackgroundInterval (default
// 1s), TIERLOG_IDLE_WINDOW the idle period measured (default 1m),
// TIERLOG_BENCH_PARTITIONS the partition count (default 10,000).
func TestIdleBackendCPU(t *testing.T) {
	if os.Getenv("TIERLOG_IDLE_CPU") == "" {
		t.Skip("set TIERLOG_IDLE_CPU=1 to measure (takes over a minute)")
	}
	interval := envDuration(t, "TIERLOG_IDLE_INTERVAL", time.Second)
	window := envDuration(t, "TIERLOG_IDLE_WINDOW", time.Minute)
	n := benchPartitions()
	dir := t.TempDir()
	c := cfg(t, "segment.bytes", "1000", "segment.index.bytes", "4096", "segment.ms", "3600000",
		"flush.ms", "5000", "retention.ms", "3600000")
	// Setup, each partition closed when written, then a clean restart: an
	// active segment that took appends holds two descriptors, and 10,000
	// of them would pass this machine's limit of 20,000 open files.
	b, err := local.OpenBackend(dir, local.BackendOptions{})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for i := 0; i < n; i++ {
		l, err := b.OpenLog(ctx, "idle", int32(i), c)
		if err != nil {
			t.Fatal(err)
		}
		for range 3 { // about 750 bytes each, a segment each
			if _, err := l.Append(ctx, batchOf(10, time.Now().UnixMilli(), "i"), backend.AppendOptions{AssignOffsets: true}); err != nil {
				t.Fatal(err)
			}
		}
		l.SetHighWatermark(l.Offsets().LogEnd)
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	setup := time.Since(start)
	b, err = local.OpenBackend(dir, local.BackendOptions{BackgroundInterval: interval})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	segments := 0
	for i := 0; i < n; i++ {
		l, err := b.OpenLog(ctx, "idle", int32(i), c)
		if err != nil {
			t.Fatal(err)
		}
		segments += len(l.SegmentInfos())
	}
	// Let the background work see every partition (a sweep runs twice)
	// before the idle period.
	time.Sleep(min(2*interval, 2*time.Minute) + 5*time.Second)
	runtime.GC()
	u0, s0 := rusage(t)
	w0 := time.Now()
	time.Sleep(window)
	u1, s1 := rusage(t)
	wall := time.Since(w0)
	cpu := (u1 - u0) + (s1 - s0)
	perMin := time.Duration(float64(cpu) * float64(time.Minute) / float64(wall))
	t.Logf("%d partitions (%d segments, setup %v), BackgroundInterval %v, idle %v: user %v sys %v; CPU per idle minute %v",
		n, segments, setup.Round(time.Millisecond), interval, wall.Round(time.Millisecond), u1-u0, s1-s0, perMin.Round(time.Millisecond))
}

func rusage(t *testing.T) (user, sys time.Duration) {
	t.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano()), time.Duration(ru.Stime.Nano())
}

func envDuration(t *testing.T, key string, def time.Duration) time.Duration {
	t.Helper()
	v := os.Getenv(key)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		t.Fatalf("%s: %v", key, err)
	}
	return d
}
