// Command embed is the walk of docs/embedding.md as a program: open a log
// directory as a tiered Backend over a bucket, open a partition and lead
// it, build record batches and append them, let the Backend's service
// upload the closed segments, read an old offset back (from the bucket)
// and decode the batches, answer ListOffsets by time, export metrics to
// Prometheus, and shut down cleanly. The page's walk is this file's code,
// region for region (`// walk:` markers); TestPageIsTheExample holds them
// equal.
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
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if dir == "" {
		tmp, err := os.MkdirTemp("", "tierlog-embed-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(tmp)
		dir = tmp
	}
	bucketURL := "file://" + filepath.Join(dir, "bucket") + "?create=true"
	logDir := filepath.Join(dir, "logs")
	// The broker's own properties (server.properties), as it has them.
	brokerProps := map[string]string{
		"node.id":                             "1",
		"log.dirs":                            logDir,
		"remote.log.storage.system.enable":    "true",
		"remote.log.manager.task.interval.ms": "100",
	}

	// walk:open
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	store, err := storeurl.Open(ctx, bucketURL, objstore.Options{})
	if err != nil {
		return err
	}
	defer store.Close()
	mgr, err := tiered.ParseManagerConfig(brokerProps) // remote.log.manager.*; Kafka's defaults
	if err != nil {
		return err
	}
	logs, err := tiered.OpenBackend(logDir, tiered.BackendOptions{
		Store: store, Prefix: "tierlog", // objects under tierlog/<topic>-<partition>/
		Manager: mgr,
		Local:   local.BackendOptions{Logger: logger, BackgroundInterval: 30 * time.Second},
		Logger:  logger,
	})
	if err != nil {
		return err
	}
	defer logs.Close() // stops the service, flushes, writes checkpoints and the clean-shutdown marker
	// walk:end

	// walk:partition
	cfg, err := backend.ParseConfig(map[string]string{ // the topic's config, Kafka's names
		"remote.storage.enable": "true",
		"segment.bytes":         "65536", // small segments, so that some close and upload
		"local.retention.ms":    "0",     // keep only what must stay local once uploaded
	})
	if err != nil {
		return err
	}
	p, err := logs.Open(ctx, "payments", 0, cfg)
	if err != nil {
		return err
	}
	if err := p.BecomeLeader(ctx, 1); err != nil { // nothing uploads until the broker says it leads
		return err
	}
	// walk:end

	// walk:append
	var b record.Builder
	for i := range 200 {
		b.Reset(record.NewBatchHeader()) // a producer's batch: base offset 0, no producer id
		for j := range 10 {
			key := fmt.Appendf(nil, "account-%d", j)
			value := fmt.Appendf(nil, "payment %d.%d", i, j)
			b.Append(int64(1_700_000_000_000+i), key, value, nil)
		}
		batch, err := b.Build()
		if err != nil {
			return err
		}
		info, err := p.Append(ctx, batch, backend.AppendOptions{AssignOffsets: true, LeaderEpoch: 1})
		if err != nil {
			return err
		}
		// Once the followers have it (here: at once), the broker moves the
		// high watermark; segments below it may upload.
		if err := p.SetHighWatermark(info.LastOffset + 1); err != nil {
			return err
		}
	}
	// walk:end

	// walk:wait
	o, err := backend.WaitTieredEnd(ctx, p, 5) // until the bucket holds offset 5 (Changed, then Offsets)
	if err != nil {
		return err
	}
	fmt.Printf("the bucket holds offsets %d..%d of %d..%d\n", o.LogStart, o.TieredEnd-1, o.LogStart, o.LogEnd-1)
	// walk:end

	// walk:read
	recs, err := p.Read(ctx, 5, backend.ReadOptions{MaxBytes: 1 << 20, MinOneBatch: true, Isolation: backend.ReadHighWatermark})
	if err != nil {
		return err // *backend.OffsetOutOfRangeError carries LogStart and LogEnd
	}
	var buf bytes.Buffer
	if _, err := recs.WriteTo(&buf); err != nil { // a socket in a broker: sendfile for local data
		recs.Close()
		return err
	}
	next := recs.(backend.OffsetRange).NextOffset() // where the next fetch starts
	recs.Close()
	// walk:end

	// walk:decode
	var it record.Iterator
	for data := buf.Bytes(); len(data) > 0; {
		batch, err := record.Parse(data) // the first batch in data, sized by its length field
		if err != nil {
			return err
		}
		if err := it.Reset(batch); err != nil {
			return err
		}
		for it.Next() {
			if r := it.Record(); r.Offset == 5 {
				fmt.Printf("offset 5: key %s value %q (batch %d..%d)\n", r.Key, r.Value, batch.BaseOffset(), batch.LastOffset())
			}
		}
		if err := it.Err(); err != nil {
			return err
		}
		data = data[batch.Size():] // step to the next batch
	}
	fmt.Printf("read %d bytes; the next fetch starts at offset %d\n", buf.Len(), next)
	// walk:end

	// walk:timestamp
	off, ts, found, err := p.OffsetForTimestamp(ctx, 1_700_000_000_100) // ListOffsets by time, over both tiers
	if err != nil {
		return err
	}
	if !found {
		return fmt.Errorf("no record at or after timestamp 1700000000100")
	}
	fmt.Printf("first offset at or after timestamp 1700000000100: %d (timestamp %d)\n", off, ts)
	// walk:end

	// walk:metrics
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		metrics.NewLocal(logs.Local()),
		metrics.NewTieredBackend(logs, metrics.BackendOptions{}),
		metrics.NewStore(store),
	)
	// walk:end
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
	want := []string{"tierlog_local_append_records_total ", "tierlog_segments{", "tierlog_tiered_segments_uploaded_total ",
		`tierlog_objstore_requests_total{op="put"}`}
	seen := map[string]bool{}
	for sc.Scan() {
		line := sc.Text()
		for _, name := range want {
			if strings.HasPrefix(line, name) {
				fmt.Println("metric:", line)
				seen[name] = true
			}
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	if len(seen) < len(want) {
		return fmt.Errorf("/metrics showed %d of the %d series looked for", len(seen), len(want))
	}
	return nil
}
