package local_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/local"
	"github.com/tierlog/tierlog/record"
)

// writeSegments writes n one-record segments (offsets 0..n-1) into dir as
// a cleanly closed log would leave them, without a Log: a log of 100,000
// segments rolled one at a time takes minutes to build.
func writeSegments(tb testing.TB, dir string, n int) {
	tb.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		tb.Fatal(err)
	}
	var bld record.Builder
	bld.Reset(record.NewBatchHeader())
	bld.Append(1_700_000_000_000, nil, []byte("value"), nil)
	batch, err := bld.Build()
	if err != nil {
		tb.Fatal(err)
	}
	for i := range n {
		rb := record.Batch(append([]byte(nil), batch...))
		rb.SetBaseOffset(int64(i))
		if err := os.WriteFile(filepath.Join(dir, local.FileName(int64(i), local.LogSuffix)), rb, 0o644); err != nil {
			tb.Fatal(err)
		}
		for _, suf := range []string{local.IndexSuffix, local.TimeIndexSuffix} {
			if err := os.WriteFile(filepath.Join(dir, local.FileName(int64(i), suf)), nil, 0o644); err != nil {
				tb.Fatal(err)
			}
		}
	}
}

// BenchmarkOpenSegments opens a cleanly closed log of 10,000 and of
// 100,000 one-record segments; ns/segment should stay flat (issue 27:
// 100,000 took 25 times the time of 10,000).
func BenchmarkOpenSegments(b *testing.B) {
	for _, n := range []int{10_000, 100_000} {
		b.Run(fmt.Sprintf("segments=%d", n), func(b *testing.B) {
			dir := filepath.Join(b.TempDir(), "t-0")
			writeSegments(b, dir, n)
			c := backend.DefaultConfig()
			// Opened and closed once: the close writes what a clean
			// shutdown leaves (the leader-epoch checkpoint, the producer
			// snapshot), so the timed opens scan nothing.
			l, err := local.Open(dir, local.Options{Config: c, CleanShutdown: true, RecoveryPoint: int64(n), LogStartOffset: -1, HighWatermark: int64(n)})
			if err != nil {
				b.Fatal(err)
			}
			if err := l.Close(); err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				l, err := local.Open(dir, local.Options{Config: c, CleanShutdown: true, RecoveryPoint: int64(n), LogStartOffset: -1, HighWatermark: int64(n)})
				if err != nil {
					b.Fatal(err)
				}
				if got := l.Offsets().LogEnd; got != int64(n) {
					b.Fatalf("log end %d, want %d", got, n)
				}
				b.StopTimer()
				l.Close()
				b.StartTimer()
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/segment")
		})
	}
}
