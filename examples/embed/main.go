// Command embed shows how a broker embeds tierlog: open a log directory,
// append as a partition's leader, move the high watermark, serve a fetch,
// offload old segments to a bucket, read them back, export metrics to
// Prometheus, and shut down cleanly.
//
//	go run ./examples/embed            # uses a temporary directory
//	go run ./examples/embed -dir /tmp/x
package main

import (
	"bufio"
	"bytes"
	"context"
	"flag"
	"fmt"
	"log"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/local"
	"github.com/tierlog/tierlog/metrics"
	"github.com/tierlog/tierlog/objstore"
	"github.com/tierlog/tierlog/objstore/storeurl"
	"github.com/tierlog/tierlog/record"
	"github.com/tierlog/tierlog/tiered"
)

func main() {
	dir := flag.String("dir", "", "working directory (default: a temporary one, removed at the end)")
	flag.Parse()
	if err := run(*dir); err != nil {
		log.Fatal(err)
	}
}

func run(dir string) error {
	ctx := context.Background()
	if dir == "" {
		tmp, err := os.MkdirTemp("", "tierlog-embed-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(tmp)
		dir = tmp
	}

	// 1. The broker's log directory: partitions open on first use.
	// Structured logs (log/slog) go wherever the broker's do.
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	logs, err := local.OpenBackend(filepath.Join(dir, "logs"), local.BackendOptions{Logger: logger})
	if err != nil {
		return err
	}
	defer logs.Close() // flushes, writes checkpoints and the clean-shutdown marker

	// Topic config comes as the map a broker already has, with Kafka's names.
	cfg, err := backend.ParseConfig(map[string]string{
		"segment.bytes":      "65536",
		"local.retention.ms": "0", // keep only what must stay local once offloaded
	})
	if err != nil {
		return err
	}
	l, err := logs.OpenLog(ctx, "payments", 0, cfg)
	if err != nil {
		return err
	}

	// 2. A bucket, and the partition as a tiered one over the local log.
	store, err := storeurl.Open(ctx, "file://"+filepath.Join(dir, "bucket")+"?create=true", objstore.Options{})
	if err != nil {
		return err
	}
	defer store.Close()
	// Tiered partitions share one set of counters, as a Backend's logs do.
	tieredMetrics := new(tiered.Metrics)
	p, err := tiered.Open(ctx, l, tiered.Options{Store: store, Prefix: "payments-0", LeaderEpoch: 1,
		Metrics: tieredMetrics, Logger: logger})
	if err != nil {
		return err
	}

	// 3. Produce requests carry record batches; as leader we append them.
	var b record.Builder
	for i := 0; i < 200; i++ {
		b.Reset(record.NewBatchHeader())
		for j := 0; j < 10; j++ {
			b.Append(int64(1_700_000_000_000+i), []byte(fmt.Sprintf("account-%d", j)), []byte(fmt.Sprintf("payment %d.%d", i, j)), nil)
		}
		batch, err := b.Build()
		if err != nil {
			return err
		}
		info, err := p.Append(ctx, batch, backend.AppendOptions{AssignOffsets: true, LeaderEpoch: 1})
		if err != nil {
			return err
		}
		// Once the followers have it, the broker moves the high watermark.
		if err := p.SetHighWatermark(info.LastOffset + 1); err != nil {
			return err
		}
	}

	// 4. Old segments go to the bucket (a broker runs this periodically).
	n, err := p.Offload(ctx)
	if err != nil {
		return err
	}
	o := p.Offsets()
	fmt.Printf("offloaded %d segments; log start %d, local log start %d, high watermark %d, log end %d\n",
		n, o.LogStart, o.LocalLogStart, o.HighWatermark, o.LogEnd)

	// 5. A fetch of an old offset: served from the bucket, same API.
	recs, err := p.Read(ctx, 5, backend.ReadOptions{MaxBytes: 1 << 20, MinOneBatch: true, Isolation: backend.ReadHighWatermark})
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	if _, err := recs.WriteTo(&buf); err != nil { // a socket in a broker: sendfile for local data
		return err
	}
	recs.Close()
	var it record.Iterator
	first, err := record.Parse(buf.Bytes())
	if err != nil {
		return err
	}
	if err := it.Reset(first); err != nil {
		return err
	}
	for it.Next() {
		if r := it.Record(); r.Offset == 5 {
			fmt.Printf("offset 5: key %s value %q\n", r.Key, r.Value)
		}
	}
	if err := it.Err(); err != nil {
		return err
	}
	// ListOffsets by time spans both tiers too.
	off, _, found, err := p.OffsetForTimestamp(ctx, 1_700_000_000_100)
	if err != nil {
		return err
	}
	if !found {
		return fmt.Errorf("no record at or after timestamp 1700000000100")
	}
	fmt.Printf("first offset at or after timestamp 1700000000100: %d\n", off)

	// 6. Metrics: register the collectors and serve them on /metrics.
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		metrics.NewLocal(logs),
		metrics.NewTiered(tieredMetrics, func() []*tiered.Partition { return []*tiered.Partition{p} }),
		metrics.NewStore(store),
	)
	return scrape(reg)
}

// scrape serves reg on a loopback port, as a broker would, fetches
// /metrics once, and prints a few of the series.
func scrape(reg *prometheus.Registry) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	defer srv.Close()
	resp, err := http.Get("http://" + ln.Addr().String() + "/metrics")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET /metrics: %s", resp.Status)
	}
	sc := bufio.NewScanner(resp.Body)
	shown := 0
	for sc.Scan() {
		line := sc.Text()
		for _, name := range []string{"tierlog_local_append_records_total ", "tierlog_segments{", "tierlog_tiered_segments_uploaded_total ",
			"tierlog_tiered_copy_lag_bytes ", `tierlog_objstore_requests_total{op="put"}`} {
			if strings.HasPrefix(line, name) {
				fmt.Println("metric:", line)
				shown++
			}
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	if shown < 6 {
		return fmt.Errorf("/metrics showed %d of the 6 series looked for", shown)
	}
	return nil
}
