package metrics_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/compaction"
	"github.com/tierlog/tierlog/local"
	"github.com/tierlog/tierlog/metrics"
	"github.com/tierlog/tierlog/objstore"
	"github.com/tierlog/tierlog/objstore/mem"
	"github.com/tierlog/tierlog/record"
	"github.com/tierlog/tierlog/testing/faultstore"
	"github.com/tierlog/tierlog/tiered"
)

var ctx = context.Background()

func config(t *testing.T, kv map[string]string) backend.Config {
	t.Helper()
	c, err := backend.ParseConfig(kv)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// produce appends n batches of 20 keyed 100-byte records.
func produce(t *testing.T, p backend.Partition, n int) {
	t.Helper()
	var b record.Builder
	for i := range n {
		b.Reset(record.NewBatchHeader())
		for j := range 20 {
			b.Append(int64(1_700_000_000_000+i), fmt.Appendf(nil, "k%d", j%5), bytes.Repeat([]byte("v"), 100), nil)
		}
		batch, _ := b.Build()
		if _, err := p.Append(ctx, append([]byte(nil), batch...), backend.AppendOptions{AssignOffsets: true, LeaderEpoch: 1}); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.SetHighWatermark(p.Offsets().LogEnd); err != nil {
		t.Fatal(err)
	}
}

// TestCollectors drives a backend with a tiered partition, a compacted one
// and a cleaner, registers every collector in one registry (as a broker
// would), and checks the exported values against what happened.
func TestCollectors(t *testing.T) {
	dir := t.TempDir()
	logs, err := local.OpenBackend(filepath.Join(dir, "logs"), local.BackendOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer logs.Close()
	store := objstore.New(mem.New(), "mem://m", objstore.Options{})
	tm := new(tiered.Metrics)

	l, err := logs.OpenLog(ctx, "orders", 0, config(t, map[string]string{"segment.bytes": "16384"}))
	if err != nil {
		t.Fatal(err)
	}
	tp, err := tiered.Open(ctx, l, tiered.Options{Store: store, Prefix: "orders-0", LeaderEpoch: 1, Metrics: tm})
	if err != nil {
		t.Fatal(err)
	}
	produce(t, tp, 50)
	lagSegs, lagBytes := tp.CopyLag()
	uploaded, err := tp.Offload(ctx)
	if err != nil || uploaded == 0 || uploaded != lagSegs {
		t.Fatalf("offload: %d segments (lag was %d), %v", uploaded, lagSegs, err)
	}
	if n, _ := tp.CopyLag(); n != 0 {
		t.Fatalf("copy lag %d after offload", n)
	}
	if _, err := tp.Read(ctx, 0, backend.ReadOptions{MaxBytes: 4096}); err != nil {
		t.Fatal(err)
	}

	users, err := logs.OpenLog(ctx, "users", 0, config(t, map[string]string{"segment.bytes": "8192", "cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.01"}))
	if err != nil {
		t.Fatal(err)
	}
	produce(t, users, 30)
	if err := users.Roll(); err != nil {
		t.Fatal(err)
	}
	cleaner, err := compaction.NewCleaner(logs, compaction.CleanerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ran, err := cleaner.RunOnce(ctx); !ran || err != nil {
		t.Fatalf("cleaner ran %v: %v", ran, err)
	}

	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(
		metrics.NewLocal(logs),
		metrics.NewTiered(tm, func() []*tiered.Partition { return []*tiered.Partition{tp} }),
		metrics.NewStore(store),
		metrics.NewCleaner(cleaner),
	)
	if problems, err := testutil.GatherAndLint(reg); err != nil || len(problems) > 0 {
		t.Fatalf("lint: %v %v", problems, err)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	value := func(name string, labels ...string) float64 {
		t.Helper()
		for _, f := range families {
			if f.GetName() != name {
				continue
			}
		metric:
			for _, m := range f.GetMetric() {
				for i := 0; i+1 < len(labels); i += 2 {
					found := false
					for _, lp := range m.GetLabel() {
						found = found || (lp.GetName() == labels[i] && lp.GetValue() == labels[i+1])
					}
					if !found {
						continue metric
					}
				}
				switch {
				case m.Counter != nil:
					return m.Counter.GetValue()
				case m.Gauge != nil:
					return m.Gauge.GetValue()
				case m.Histogram != nil:
					return float64(m.Histogram.GetSampleCount())
				}
			}
		}
		t.Fatalf("no sample %s %v", name, labels)
		return 0
	}
	want := func(name string, v float64, labels ...string) {
		t.Helper()
		if got := value(name, labels...); got != v {
			t.Errorf("%s%v = %g, want %g", name, labels, got, v)
		}
	}
	lm := logs.Metrics()
	want("tierlog_local_appends_total", 80)
	want("tierlog_local_append_records_total", 1600)
	want("tierlog_local_append_bytes_total", float64(lm.AppendBytes.Load()))
	want("tierlog_local_append_duration_seconds", 80)
	want("tierlog_local_partitions", 2)
	localSegs, localBytes := 0, int64(0)
	for _, l := range logs.Logs() {
		n, b := l.Size()
		localSegs += n
		localBytes += b
	}
	want("tierlog_segments", float64(localSegs), "tier", "local")
	want("tierlog_segment_bytes", float64(localBytes), "tier", "local")
	remoteSegs, remoteBytes := tp.RemoteSize()
	want("tierlog_segments", float64(remoteSegs), "tier", "remote")
	want("tierlog_segment_bytes", float64(remoteBytes), "tier", "remote")
	if remoteBytes < lagBytes || remoteSegs != uploaded {
		t.Errorf("remote %d segments / %d B after uploading %d segments / %d B", remoteSegs, remoteBytes, uploaded, lagBytes)
	}
	want("tierlog_tiered_segments_uploaded_total", float64(uploaded))
	want("tierlog_tiered_upload_duration_seconds", float64(uploaded))
	want("tierlog_tiered_copy_lag_segments", 0)
	want("tierlog_tiered_fenced_partitions", 0)
	want("tierlog_tiered_partitions", 1)
	want("tierlog_objstore_requests_total", float64(store.Stats().Requests[objstore.OpPut]), "op", "put")
	want("tierlog_objstore_requests_total", 0, "op", "abort_uploads")
	want("tierlog_objstore_bytes_total", float64(store.Stats().BytesOut), "direction", "out")
	cs := cleaner.Stats()
	want("tierlog_cleaner_rounds_total", 1)
	want("tierlog_cleaner_records_removed_total", float64(cs.Removed))
	want("tierlog_cleaner_last_round_keys", 5)
	if cs.Removed == 0 {
		t.Error("the cleaner removed nothing")
	}

	// The exposition format over HTTP, as Prometheus scrapes it.
	rec := httptest.NewRecorder()
	promhttp.HandlerFor(reg, promhttp.HandlerOpts{}).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body := rec.Body.String()
	for _, s := range []string{`tierlog_segments{tier="remote"}`, `tierlog_local_append_duration_seconds_bucket{le="1e-06"}`,
		`tierlog_tiered_cache_hit_ratio{cache="index"}`, "# TYPE tierlog_local_read_duration_seconds histogram"} {
		if !strings.Contains(body, s) {
			t.Errorf("/metrics lacks %s", s)
		}
	}
	if strings.Contains(body, "mem://m") {
		t.Error("/metrics names the store's URL")
	}
}

// TestTieredBackendCollector: a tiered.Backend's collector reports its
// reader pool, cache bytes and, opted in, each led partition's copy lag
// (here held up by a bucket that refuses writes), and passes the linter.
func TestTieredBackendCollector(t *testing.T) {
	drv := faultstore.Wrap(mem.New(), 1, faultstore.Rule{Op: objstore.OpPut, Every: 1, Fault: faultstore.Permanent})
	store := objstore.New(drv, "mem://refusing", objstore.Options{})
	b, err := tiered.OpenBackend(t.TempDir(), tiered.BackendOptions{Store: store,
		Manager: tiered.ManagerConfig{TaskInterval: time.Hour, RetryBackoff: time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	p, err := b.Open(ctx, "orders", 3, config(t, map[string]string{"segment.bytes": "16384", "remote.storage.enable": "true"}))
	if err != nil {
		t.Fatal(err)
	}
	produce(t, p, 50)
	if err := p.BecomeLeader(ctx, 1); err != nil {
		t.Fatal(err)
	}
	segs, bytes := p.(*tiered.Partition).CopyLag()
	if segs == 0 {
		t.Fatal("no copy lag")
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(metrics.NewTieredBackend(b, metrics.BackendOptions{PerPartition: true}))
	if problems, err := testutil.GatherAndLint(reg); err != nil || len(problems) > 0 {
		t.Fatalf("lint: %v %v", problems, err)
	}
	for name, want := range map[string]float64{
		`tierlog_tiered_partition_copy_lag_segments{partition="3",topic="orders"}`: float64(segs),
		`tierlog_tiered_partition_copy_lag_bytes{partition="3",topic="orders"}`:    float64(bytes),
		`tierlog_tiered_copy_lag_segments`:                                         float64(segs),
		`tierlog_tiered_remote_reads_in_flight`:                                    0,
		`tierlog_tiered_remote_reads_rejected_total`:                               0,
	} {
		got, err := testutil.GatherAndCount(reg, strings.SplitN(name, "{", 2)[0])
		if err != nil || got != 1 {
			t.Fatalf("%s: %d series, %v", name, got, err)
		}
		rec := httptest.NewRecorder()
		promhttp.HandlerFor(reg, promhttp.HandlerOpts{}).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		if line := fmt.Sprintf("%s %g\n", name, want); !strings.Contains(rec.Body.String(), line) {
			t.Errorf("/metrics lacks %q:\n%s", line, rec.Body.String())
		}
	}
}
