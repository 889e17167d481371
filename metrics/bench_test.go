package metrics_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/local"
	"github.com/tierlog/tierlog/metrics"
)

// BenchmarkScrapeLocal10000Partitions: one Gather of the local collector
// over a backend with 10,000 open partitions.
func BenchmarkScrapeLocal10000Partitions(b *testing.B) {
	logs, err := local.OpenBackend(b.TempDir(), local.BackendOptions{})
	if err != nil {
		b.Fatal(err)
	}
	defer logs.Close()
	for p := range int32(10_000) {
		if _, err := logs.OpenLog(ctx, "t", p, backend.DefaultConfig()); err != nil {
			b.Fatal(err)
		}
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(metrics.NewLocal(logs))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := reg.Gather(); err != nil {
			b.Fatal(err)
		}
	}
}
