package compaction

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/local"
	"github.com/tierlog/tierlog/record"
)

// BenchmarkClean measures a full cleaning round in MB/s of input: a log of
// 100-byte values in producer-sized (16 KiB) batches, keys drawn from one
// tenth as many distinct keys as records. The log is 64 MiB by default;
// TIERLOG_CLEAN_BENCH_MB=1024 gives the 1 GiB, 10M-record, 1M-key case:
//
//	TIERLOG_CLEAN_BENCH_MB=1024 go test ./compaction -run '^$' -bench Clean -benchtime 1x
func BenchmarkClean(b *testing.B) {
	mb := 64
	if v := os.Getenv("TIERLOG_CLEAN_BENCH_MB"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			b.Fatalf("TIERLOG_CLEAN_BENCH_MB=%q: want a positive number of MiB", v)
		}
		mb = n
	}
	records := mb << 20 / 107 // ~107 bytes per record on disk with its key
	keys := records / 10
	tmpl := filepath.Join(b.TempDir(), "template")
	l := benchLog(b, tmpl)
	var bl record.Builder
	rng := rand.New(rand.NewPCG(1, 2))
	value := make([]byte, 100)
	now := time.Now().UnixMilli()
	for written := 0; written < records; {
		bl.Reset(record.NewBatchHeader())
		for bl.Size() < 16<<10-200 && written < records {
			key := fmt.Appendf(nil, "key-%08d", rng.IntN(keys))
			bl.Append(now, key, value, nil)
			written++
		}
		batch, err := bl.Build()
		if err != nil {
			b.Fatal(err)
		}
		info, err := l.Append(context.Background(), batch, backend.AppendOptions{AssignOffsets: true})
		if err != nil {
			b.Fatal(err)
		}
		if err := l.SetHighWatermark(info.LastOffset + 1); err != nil {
			b.Fatal(err)
		}
	}
	if err := l.Roll(); err != nil {
		b.Fatal(err)
	}
	if err := l.Close(); err != nil {
		b.Fatal(err)
	}
	m, err := NewOffsetMap(DefaultMemoryBytes)
	if err != nil {
		b.Fatal(err)
	}
	var st Stats
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		dir := filepath.Join(b.TempDir(), strconv.Itoa(i))
		if err := os.CopyFS(dir, os.DirFS(tmpl)); err != nil {
			b.Fatal(err)
		}
		l := benchLog(b, dir)
		b.StartTimer()
		st, err = Clean(context.Background(), l, -1, Options{Map: m})
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		b.SetBytes(st.BytesRead)
		l.Close()
		os.RemoveAll(dir)
		b.StartTimer()
	}
	b.ReportMetric(float64(st.Keys), "keys")
	b.ReportMetric(float64(st.RecordsRead), "records")
	b.ReportMetric(st.Ratio(), "out/in")
}

func benchLog(b *testing.B, dir string) *local.Log {
	b.Helper()
	cfg, err := backend.ParseConfig(map[string]string{"cleanup.policy": "compact", "file.delete.delay.ms": "0"})
	if err != nil {
		b.Fatal(err)
	}
	l, err := local.Open(dir, local.Options{Config: cfg, CleanShutdown: true, HighWatermark: 1 << 62, LogStartOffset: -1})
	if err != nil {
		b.Fatal(err)
	}
	return l
}
