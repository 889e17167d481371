package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"math/rand/v2"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/compaction"
	"github.com/tierlog/tierlog/local"
	"github.com/tierlog/tierlog/manifest"
	"github.com/tierlog/tierlog/objstore"
	"github.com/tierlog/tierlog/objstore/storeurl"
	"github.com/tierlog/tierlog/record"
	"github.com/tierlog/tierlog/tiered"
)

type demoOptions struct {
	keep    bool
	dir     string
	records int
	store   string
	json    bool
	broker  string
}

// demoSummary is what the demo measured; --json prints it instead of the
// step-by-step text.
type demoSummary struct {
	Records           int              `json:"records"`
	ProduceMBps       float64          `json:"produceMBps"`
	LocalSegments     int              `json:"localSegments"`
	RemoteSegments    int              `json:"remoteSegments"`
	BytesUploaded     int64            `json:"bytesUploaded"`
	UploadMBps        float64          `json:"uploadMBps"`
	Requests          map[string]int64 `json:"requests"`
	Lookups           []demoLookup     `json:"lookups"`
	ReadLocalMBps     float64          `json:"readLocalMBps"`
	ReadTieredMBps    float64          `json:"readTieredMBps"`
	RecordsRead       int64            `json:"recordsReadThroughBothTiers"`
	FilesVerified     int              `json:"filesVerified"`
	FilesWithProblems int              `json:"filesWithProblems"`
	BrokerRecords     int              `json:"brokerRecords"`
	BrokerProduceMBps float64          `json:"brokerProduceMBps"`
	BrokerConsumeMBps float64          `json:"brokerConsumeMBps"`
	// BrokerSkipped says why step 10 did not run ("" when it did).
	BrokerSkipped string  `json:"brokerSkipped,omitempty"`
	Seconds       float64 `json:"seconds"`
	KeptIn        string  `json:"keptIn,omitempty"`
}

type demoLookup struct {
	Offset       int64 `json:"offset"`
	Segment      int   `json:"segment"`
	IndexEntry   int   `json:"indexEntry"` // -1: none at or below the offset
	BytesScanned int64 `json:"bytesScanned"`
	BatchBase    int64 `json:"batchBaseOffset"`
	BatchLast    int64 `json:"batchLastOffset"`
}

func newDemoCmd() *cobra.Command {
	var o demoOptions
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run tierlog end to end on a temporary directory and explain each step",
		Long: `demo runs the most complete pipeline tierlog has, with no setup:

  1. produce 50,000 records into a Kafka-format partition with 1 MiB
     segments, as a leader would (producer-sized batches);
  2. show the partition directory: trimmed and preallocated indexes;
  3. look offsets up with the two-step lookup;
  4. read every offset back from the local log;
  5. offload the closed segments to a bucket (a file:// bucket in the demo
     directory, or --store URL) and keep only the active segment locally;
  6. read every offset back through both tiers;
  7. compact a cleanup.policy=compact topic: the latest record per key;
  8. compare the codecs on the same records;
  9. verify every CRC, offset and index entry of the log directory;
 10. with --broker PATH, run the reference broker (examples/broker, built
     with go build -o PATH ./examples/broker) as its own process on the
     same bucket, and produce and consume through it with a Kafka client
     (franz-go's kgo) over loopback, as users use tierlog: a tiered topic
     whose closed segments are read back from the bucket. tierctl does not
     link the broker: without --broker, or with a mem:// bucket the
     broker's process cannot see, this step is skipped and says so.
     make demo builds the broker and passes --broker.

It removes its files when done unless --keep is given.`,
		Example: `  tierctl demo
  go build -o /tmp/broker ./examples/broker && tierctl demo --broker /tmp/broker
  tierctl demo --keep --dir /tmp/tierlog-demo`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runDemo(cmd.Context(), cmd.OutOrStdout(), o)
		},
	}
	cmd.Flags().BoolVar(&o.keep, "keep", false, "keep the files and print where they are")
	cmd.Flags().StringVar(&o.dir, "dir", "", "directory to work in (default: a new temporary directory)")
	cmd.Flags().IntVar(&o.records, "records", 50_000, "records to produce")
	cmd.Flags().StringVar(&o.store, "store", "", "bucket URL to offload to (default: a file:// bucket in the demo directory; mem://name keeps it in this process, so not with --keep)")
	cmd.Flags().BoolVar(&o.json, "json", false, "print only the measured summary, as JSON")
	cmd.Flags().StringVar(&o.broker, "broker", "", "the reference broker's binary (go build -o PATH ./examples/broker), for step 10 (default: step 10 is skipped)")
	return cmd
}

func runDemo(ctx context.Context, out io.Writer, o demoOptions) (err error) {
	if o.records < 1 {
		return usagef("--records %d: want at least 1 record", o.records)
	}
	if o.keep {
		// The kept partition has only its active segment locally: the
		// rest would vanish with an in-memory bucket.
		if err := refuseMemStore(o.store, "with --keep, the kept orders-0 would lose its offloaded segments when the bucket vanishes as demo exits (or drop --keep)"); err != nil {
			return err
		}
	}
	if o.broker != "" {
		if o.broker, err = lookBroker(o.broker); err != nil {
			return err
		}
	}
	start := time.Now()
	root := o.dir
	if root == "" {
		root, err = os.MkdirTemp("", "tierlog-demo-")
		if err != nil {
			return err
		}
	} else if err := os.MkdirAll(root, 0o755); err != nil {
		return err
	}
	if !o.keep {
		defer os.RemoveAll(root)
	}
	sum := demoSummary{Records: o.records, Requests: map[string]int64{}}
	if o.json {
		jsonOut := out
		defer func() {
			if err == nil || errors.Is(err, errProblems) {
				writeJSON(jsonOut, sum)
			}
		}()
		out = io.Discard
	}
	w := bufio.NewWriter(out)
	defer w.Flush()
	logDir := filepath.Join(root, "logs")
	b, err := local.OpenBackend(logDir, local.BackendOptions{RemoteStorage: true})
	if err != nil {
		return err
	}
	defer b.Close()
	cfg, err := backend.ParseConfig(map[string]string{"segment.bytes": "1048576", "file.delete.delay.ms": "0",
		"remote.storage.enable": "true", "local.retention.ms": "0"})
	if err != nil {
		return err
	}
	l, err := b.OpenLog(ctx, "orders", 0, cfg)
	if err != nil {
		return err
	}

	fmt.Fprintf(w, "tierlog demo: a Kafka-compatible partition log, end to end\n\n")
	fmt.Fprintf(w, "1. Producing %d records (200-byte values, keys from 1,000) to orders-0, segment.bytes=1 MiB\n", o.records)
	st, err := produceRecords(ctx, l, o.records, 16384, record.None, randomRecords(200, 1000), nil)
	if err != nil {
		return err
	}
	segs := l.SegmentInfos()
	sum.ProduceMBps = float64(st.bytes) / 1e6 / st.elapsed.Seconds()
	fmt.Fprintf(w, "   %d batches, %.1f MB in %v (%.0f MB/s); %d segments\n\n", st.batches, float64(st.bytes)/1e6,
		st.elapsed.Round(time.Millisecond), float64(st.bytes)/1e6/st.elapsed.Seconds(), len(segs))

	fmt.Fprintf(w, "2. The partition directory, in Kafka's layout (%s)\n", l.Dir())
	for i, sg := range segs {
		if i == 2 && len(segs) > 4 {
			fmt.Fprintf(w, "   … %d more segments\n", len(segs)-3)
			continue
		}
		if i > 2 && i < len(segs)-1 {
			continue
		}
		idx, _ := os.Stat(strings.TrimSuffix(sg.Path, ".log") + ".index")
		tidx, _ := os.Stat(strings.TrimSuffix(sg.Path, ".log") + ".timeindex")
		state := "closed, indexes trimmed"
		if sg.Active {
			state = "active, indexes preallocated to 10 MiB and mmap'd"
		}
		fmt.Fprintf(w, "   %s %8d B   .index %8d B   .timeindex %8d B   (%s)\n", filepath.Base(sg.Path), sg.Size, size64(idx), size64(tidx), state)
	}
	fmt.Fprintln(w)

	fmt.Fprintln(w, "3. Two-step lookups (segment by base offset, then its sparse offset index)")
	for _, off := range []int64{0, int64(o.records) / 2, int64(o.records) * 49 / 50} {
		r, err := l.Lookup(off)
		if err != nil {
			return err
		}
		entry := "no entry <= it: segment start"
		if r.IndexSlot >= 0 {
			entry = fmt.Sprintf("entry %d of %d (offset %d, position %d)", r.IndexSlot, r.IndexEntries, r.IndexOffset, r.IndexPosition)
		}
		sum.Lookups = append(sum.Lookups, demoLookup{Offset: off, Segment: r.SegmentIndex, IndexEntry: r.IndexSlot,
			BytesScanned: r.BytesScanned, BatchBase: r.BaseOffset, BatchLast: r.LastOffset})
		fmt.Fprintf(w, "   offset %-6d -> segment %d of %d, %s, scanned %d header(s) / %d B -> batch %d..%d\n",
			off, r.SegmentIndex, r.Segments, entry, r.BatchesScanned, r.BytesScanned, r.BaseOffset, r.LastOffset)
	}
	fmt.Fprintln(w)

	fmt.Fprintln(w, "4. Reading every offset back (whole batches from the batch holding the offset)")
	readStart := time.Now()
	got, reads, readBytes, err := readEveryRecord(ctx, l, 0)
	if err != nil {
		return err
	}
	el := time.Since(readStart)
	sum.ReadLocalMBps = float64(readBytes) / 1e6 / el.Seconds()
	fmt.Fprintf(w, "   %d of %d records at their offsets, in %d reads of up to 1 MiB (%.0f MB/s)\n", got, o.records, reads, float64(readBytes)/1e6/el.Seconds())
	if got != int64(o.records) {
		return fmt.Errorf("demo: read back %d records, produced %d", got, o.records)
	}
	fmt.Fprintln(w)

	storeURL := o.store
	if storeURL == "" {
		storeURL = "file://" + filepath.Join(root, "bucket") + "?create=true"
	}
	fmt.Fprintf(w, "5. Offloading closed segments to %s (local.retention.ms=0)\n", storeurl.Redact(storeURL))
	store, err := storeurl.Open(ctx, storeURL, storeOptionsFrom(ctx))
	if err != nil {
		return err
	}
	defer store.Close()
	tp, err := tiered.Open(ctx, l, tiered.Options{Store: store, Prefix: "demo/orders-0", LeaderEpoch: 0})
	if err != nil {
		return err
	}
	offStart := time.Now()
	uploaded, err := tp.Offload(ctx)
	if err != nil {
		return err
	}
	offEl := time.Since(offStart)
	m, stats := tp.Manifest(), store.Stats()
	sum.BytesUploaded = tp.Metrics().BytesUploaded.Load()
	sum.UploadMBps = float64(m.Size()) / 1e6 / offEl.Seconds()
	fmt.Fprintf(w, "   %d segments (%.1f MB) uploaded in %v (%.0f MB/s): %d PUTs; manifest generation %d\n",
		uploaded, float64(m.Size())/1e6, offEl.Round(time.Millisecond), float64(m.Size())/1e6/offEl.Seconds(), stats.Requests[objstore.OpPut], m.Generation)
	if len(m.Segments) == 0 {
		fmt.Fprintf(w, "   nothing to offload: every record is still in the active segment\n\n")
	} else {
		fmt.Fprintf(w, "   tiers: %d segments in the bucket (offsets %d..%d), %d local (from offset %d)\n\n",
			len(m.Segments), m.Segments[0].BaseOffset, m.Segments[len(m.Segments)-1].LastOffset, len(l.SegmentInfos()), tp.Offsets().LocalLogStart)
	}

	fmt.Fprintln(w, "6. Reading every offset back through both tiers")
	getsBefore := store.Stats().Requests[objstore.OpGet]
	readStart = time.Now()
	got, reads, readBytes, err = readEveryRecord(ctx, tp, 0)
	if err != nil {
		return err
	}
	el = time.Since(readStart)
	sum.ReadTieredMBps, sum.RecordsRead = float64(readBytes)/1e6/el.Seconds(), got
	sum.RemoteSegments, sum.LocalSegments = len(m.Segments), len(l.SegmentInfos())
	for op, n := range store.Stats().Requests {
		sum.Requests[string(op)] = n
	}
	fmt.Fprintf(w, "   %d of %d records at their offsets, in %d reads (%.0f MB/s); %d GETs from the bucket\n",
		got, o.records, reads, float64(readBytes)/1e6/el.Seconds(), store.Stats().Requests[objstore.OpGet]-getsBefore)
	if got != int64(o.records) {
		return fmt.Errorf("demo: read back %d records through both tiers, produced %d", got, o.records)
	}
	probe := int64(o.records) / 4
	if i, ok := m.Find(probe); ok {
		seg := m.Segments[i]
		fmt.Fprintf(w, "   remote lookup of offset %d: manifest binary search over %d segments -> %s, then its remote offset index\n\n",
			probe, len(m.Segments), seg.Name(".log"))
	}

	if err := demoCompaction(ctx, w, b, o.records); err != nil {
		return err
	}

	fmt.Fprintln(w, "8. The same records in every codec (a topic each, 10,000 records)")
	for _, c := range []record.Codec{record.None, record.GZIP, record.Snappy, record.LZ4, record.ZSTD} {
		cl, err := b.OpenLog(ctx, "codec-"+c.String(), 0, backend.DefaultConfig())
		if err != nil {
			return err
		}
		cst, err := produceRecords(ctx, cl, 10_000, 16384, c, orderRecords(), nil)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "   %-6s %8d bytes on disk (%5.2fx)\n", c, cst.bytes, float64(cst.raw)/float64(max(cst.bytes, 1)))
	}
	if err := b.Close(); err != nil {
		return err
	}
	fmt.Fprintln(w)

	fmt.Fprintf(w, "9. tierctl verify %s (every CRC, offset and index entry)\n", logDir)
	reports, err := verifyPath(logDir, nil)
	if err != nil {
		return err
	}
	bad := 0
	for _, r := range reports {
		if len(r.Problems) > 0 {
			bad++
			var buf bytes.Buffer
			bw := bufio.NewWriter(&buf)
			r.print(bw)
			bw.Flush()
			fmt.Fprint(w, buf.String())
		}
	}
	fmt.Fprintf(w, "   %d files verified, %d with problems\n\n", len(reports), bad)
	sum.FilesVerified, sum.FilesWithProblems = len(reports), bad
	if err := demoBroker(ctx, w, o.broker, filepath.Join(root, "broker"), storeURL, store, min(o.records, 20_000), &sum); err != nil {
		return err
	}
	sum.Seconds = time.Since(start).Seconds()
	fmt.Fprintf(w, "Summary: %d records; %d segments in the bucket (%.1f MB uploaded at %.0f MB/s), %d local;\n",
		o.records, sum.RemoteSegments, float64(sum.BytesUploaded)/1e6, sum.UploadMBps, sum.LocalSegments)
	fmt.Fprintf(w, "         %d PUTs and %d GETs in all; produce %.0f MB/s, read %.0f MB/s local, %.0f MB/s through both tiers.\n",
		sum.Requests["put"], sum.Requests["get"], sum.ProduceMBps, sum.ReadLocalMBps, sum.ReadTieredMBps)
	fmt.Fprintf(w, "Done in %v.\n", time.Since(start).Round(time.Millisecond))
	if o.keep {
		sum.KeptIn = root
		fmt.Fprintf(w, "Files kept in %s; try: tierctl lookup %s --offset %d\n", root, l.Dir(), int64(o.records)-10)
	}
	if bad > 0 {
		w.Flush()
		return errProblems
	}
	return nil
}

func size64(fi os.FileInfo) int64 {
	if fi == nil {
		return 0
	}
	return fi.Size()
}

// readEveryRecord reads from offset to the log end and checks that every
// offset comes back exactly once, in order.
func readEveryRecord(ctx context.Context, l backend.Partition, from int64) (records int64, reads int, bytesRead int64, err error) {
	next := from
	reads, bytesRead, err = readRecords(ctx, l, from, func(r *record.Record) error {
		if r.Offset != next {
			return fmt.Errorf("demo: offset %d missing (got %d)", next, r.Offset)
		}
		next++
		records++
		return nil
	})
	return records, reads, bytesRead, err
}

// readRecords reads l from offset to its end in reads of up to 1 MiB,
// validating every batch, and calls fn for each record at or after from.
// It advances by batches, so gaps and batches emptied by the cleaner are
// passed over.
func readRecords(ctx context.Context, l backend.Partition, from int64, fn func(r *record.Record) error) (reads int, bytesRead int64, err error) {
	var it record.Iterator
	var buf bytes.Buffer
	for next := from; next < l.Offsets().LogEnd; {
		recs, err := l.Read(ctx, next, backend.ReadOptions{MaxBytes: 1 << 20, MinOneBatch: true})
		if err != nil {
			return reads, bytesRead, err
		}
		buf.Reset()
		n, err := recs.WriteTo(&buf)
		recs.Close()
		if err != nil {
			return reads, bytesRead, err
		}
		if n == 0 {
			return reads, bytesRead, fmt.Errorf("demo: nothing read at offset %d below the log end", next)
		}
		reads++
		bytesRead += n
		sc := record.NewScanner(bytes.NewReader(buf.Bytes()), 0, n, record.ScanOptions{Validate: true})
		for sc.Next() {
			e := sc.Entry()
			if err := it.Reset(e.Data); err != nil {
				return reads, bytesRead, err
			}
			for it.Next() {
				if it.Record().Offset >= next {
					if err := fn(it.Record()); err != nil {
						return reads, bytesRead, err
					}
				}
			}
			if err := it.Err(); err != nil {
				return reads, bytesRead, err
			}
			next = e.LastOffset + 1
		}
		if sc.Err() != nil {
			return reads, bytesRead, sc.Err()
		}
	}
	return reads, bytesRead, nil
}

// orderRecords generates readable order records keyed by customer, the
// kind of text the codecs compress well.
func orderRecords() recordGen {
	rng := rand.New(rand.NewPCG(1, 2))
	return func(i int, key, value []byte) ([]byte, []byte) {
		key = fmt.Appendf(key[:0], "customer-%04d", rng.IntN(1000))
		value = fmt.Appendf(value[:0], "order %08d for %s: ", i, key)
		for len(value) < 100 {
			value = append(value, 'x')
		}
		return key, value
	}
}

// demoCompaction produces records over 1,000 keys into a compacted topic,
// runs the cleaner, and reads the result back.
func demoCompaction(ctx context.Context, w io.Writer, b *local.Backend, records int) error {
	cfg, err := backend.ParseConfig(map[string]string{"cleanup.policy": "compact", "segment.bytes": "262144",
		"file.delete.delay.ms": "0"})
	if err != nil {
		return err
	}
	l, err := b.OpenLog(ctx, "users", 0, cfg)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "7. Compaction: %d records over 1,000 keys into users-0 (cleanup.policy=compact)\n", records)
	if _, err := produceRecords(ctx, l, records, 16384, record.None, randomRecords(200, 1000), nil); err != nil {
		return err
	}
	st, err := compaction.Clean(ctx, l, -1, compaction.Options{MemoryBytes: 8 << 20})
	if err != nil {
		return err
	}
	if st.End == st.FirstDirty {
		fmt.Fprintf(w, "   nothing to clean yet: every record is in the active segment\n\n")
		return nil
	}
	fmt.Fprintf(w, "   cleaned offsets %d..%d: %d segment(s), %.1f MB -> %d segment(s), %.1f MB; kept %d of %d records (%d keys) in %v\n",
		st.FirstDirty, st.End-1, st.SegmentsRead, float64(st.BytesRead)/1e6, st.SegmentsWritten, float64(st.BytesWritten)/1e6,
		st.RecordsRead-st.RecordsRemoved, st.RecordsRead, st.Keys, st.Duration.Round(time.Millisecond))
	got, keys, err := readCompacted(ctx, l, st.End)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "   read back: %d records; below offset %d each of the %d keys once, at its latest offset\n\n", got, st.End, keys)
	return nil
}

// readCompacted reads l to its end and checks that below end no key
// appears twice. It returns the records read and the keys below end.
func readCompacted(ctx context.Context, l backend.Partition, end int64) (records int64, keys int, err error) {
	seen := map[string]bool{}
	_, _, err = readRecords(ctx, l, 0, func(r *record.Record) error {
		records++
		if r.Offset < end {
			if seen[string(r.Key)] {
				return fmt.Errorf("demo: key %s twice in the cleaned log", r.Key)
			}
			seen[string(r.Key)] = true
		}
		return nil
	})
	return records, len(seen), err
}

// demoBrokerPrefix is where, in the demo's bucket, the broker keeps its
// tiered partitions (each under demoBrokerPrefix/<topic>-<partition>/).
const demoBrokerPrefix = "demo/broker"

// demoBrokerConfig is the default topic config the demo's broker gets: a
// tiered topic with small segments, deleted locally once uploaded.
var demoBrokerConfig = map[string]string{"remote.storage.enable": "true", "segment.bytes": "65536",
	"local.retention.ms": "0", "file.delete.delay.ms": "0"}

// demoBroker runs the reference broker at brokerPath as its own process on
// a loopback port, with dir as its data directory and the demo's bucket
// (under demoBrokerPrefix) for its tiered topics, and produces and
// consumes n records through it with kgo, the Kafka client, in this
// process: to a tiered topic whose closed segments leave the disk once
// uploaded, so the consumer reads them back from the bucket. Without a
// broker, or with a mem:// bucket, it says that it skipped the step.
func demoBroker(ctx context.Context, w io.Writer, brokerPath, dir, storeURL string, store *objstore.Store, n int, sum *demoSummary) (err error) {
	fmt.Fprintf(w, "10. A Kafka client through the reference broker (examples/broker) on loopback\n")
	if brokerPath == "" {
		sum.BrokerSkipped = "no --broker"
		fmt.Fprintf(w, "   skipped: no --broker. tierctl does not link the broker; it runs as its own process:\n")
		fmt.Fprintf(w, "   make demo builds it and passes --broker, or: go build -o /tmp/broker ./examples/broker && tierctl demo --broker /tmp/broker\n\n")
		return nil
	}
	if u, perr := url.Parse(storeURL); perr == nil && strings.EqualFold(u.Scheme, "mem") {
		sum.BrokerSkipped = "mem:// bucket"
		fmt.Fprintf(w, "   skipped: the broker runs as its own process, which cannot see this process's mem:// bucket;\n")
		fmt.Fprintf(w, "   run it with a file://, s3:// or minio:// --store (the default is a file:// bucket in the demo directory)\n\n")
		return nil
	}
	brokerURL, err := brokerStoreURL(storeURL)
	if err != nil {
		return err
	}
	args := []string{"--listen", "127.0.0.1:0", "--dir", dir, "--store", brokerURL}
	for _, k := range slices.Sorted(maps.Keys(demoBrokerConfig)) {
		args = append(args, "--config", k+"="+demoBrokerConfig[k])
	}
	b, err := startBroker(ctx, brokerPath, args...)
	if err != nil {
		return err
	}
	defer func() {
		// Stop's error carries the broker's output; else err gets it.
		switch stopErr := b.Stop(); {
		case err == nil:
			err = stopErr
		case stopErr != nil:
			err = fmt.Errorf("%w\n%w", err, stopErr)
		default:
			err = b.withOutput(err)
		}
	}()
	// Every wait below ends when the broker exits.
	ctx = b.Context()
	fmt.Fprintf(w, "   started %s (pid %d): listening on %s, its tiered topics in %s\n", brokerPath, b.cmd.Process.Pid, b.Addr, storeurl.Redact(brokerURL))
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addr), kgo.AllowAutoTopicCreation(), kgo.DefaultProduceTopic("clicks"),
		kgo.ProducerBatchCompression(kgo.Lz4Compression()), kgo.ProducerBatchMaxBytes(32<<10))
	if err != nil {
		return err
	}
	defer cl.Close()
	recs := make([]*kgo.Record, n)
	size := 0
	for i := range recs {
		recs[i] = &kgo.Record{Key: fmt.Appendf(nil, "user-%d", i%500), Value: fmt.Appendf(nil, "click %08d on /products/%d", i, i%977)}
		size += len(recs[i].Key) + len(recs[i].Value)
	}
	t0 := time.Now()
	produceCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := cl.ProduceSync(produceCtx, recs...).FirstErr(); err != nil {
		return fmt.Errorf("demo: produce through the broker: %w", err)
	}
	produced := time.Since(t0)
	// The broker's tiering service uploads each closed segment and
	// deletes its local copy (local.retention.ms=0): wait for it.
	partDir := filepath.Join(dir, "logs", "clicks-0")
	remoteSegs, localStart, err := waitBrokerOffloaded(ctx, store, manifest.PartitionLayout(demoBrokerPrefix, "clicks", 0).Prefix(), partDir)
	if err != nil {
		return err
	}
	t0 = time.Now()
	cons, err := kgo.NewClient(kgo.SeedBrokers(b.Addr), kgo.ConsumeTopics("clicks"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		return err
	}
	defer cons.Close()
	got := 0
	pollCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for got < n {
		fetches := cons.PollFetches(pollCtx)
		if err := fetches.Err0(); err != nil {
			return fmt.Errorf("demo: consume through the broker: %w", err)
		}
		for _, r := range fetches.Records() {
			if r.Offset != int64(got) || string(r.Value) != string(recs[got].Value) {
				return fmt.Errorf("demo: the broker returned offset %d %q, want offset %d %q", r.Offset, r.Value, got, recs[got].Value)
			}
			got++
		}
	}
	consumed := time.Since(t0)
	cons.Close()
	cl.Close()
	sum.BrokerRecords = got
	sum.BrokerProduceMBps = float64(size) / 1e6 / produced.Seconds()
	sum.BrokerConsumeMBps = float64(size) / 1e6 / consumed.Seconds()
	fmt.Fprintf(w, "   kgo (idempotent, lz4) produced %d records in %v (%.0f MB/s) and consumed them back in order in %v (%.0f MB/s)\n",
		n, produced.Round(time.Millisecond), sum.BrokerProduceMBps, consumed.Round(time.Millisecond), sum.BrokerConsumeMBps)
	if remoteSegs > 0 {
		fmt.Fprintf(w, "   clicks is tiered (remote.storage.enable=true, local.retention.ms=0): offsets 0..%d came from %d segment(s) in the bucket, the rest from the active segment\n",
			localStart-1, remoteSegs)
	} else {
		fmt.Fprintf(w, "   clicks is tiered (remote.storage.enable=true, local.retention.ms=0), but no segment of it closed yet: all came from the active segment\n")
	}
	fmt.Fprintf(w, "   through Kafka's wire protocol: Produce appends to a tierlog partition; Fetch sends local segments with sendfile, bucket ranges from ranged GETs\n\n")
	return nil
}

// brokerStoreURL is the URL of the demo's bucket under demoBrokerPrefix,
// for the broker's --store: the prefix appended to the URL's path (a
// file:// directory, or an s3:// or minio:// key prefix), and for file://
// create=true, since the prefix's directory does not exist yet. The demo
// has opened storeURL, so it parses and holds no credentials.
func brokerStoreURL(storeURL string) (string, error) {
	u, err := url.Parse(storeURL)
	if err != nil {
		return "", fmt.Errorf("demo: %s: %w", storeurl.Redact(storeURL), err)
	}
	u.Path, u.RawPath = path.Join(u.Path, demoBrokerPrefix), ""
	if strings.EqualFold(u.Scheme, "file") {
		q := u.Query()
		q.Set("create", "true")
		u.RawQuery = q.Encode()
	}
	return u.String(), nil
}

// waitBrokerOffloaded waits, at most a minute, until the broker's
// partition directory dir holds one segment (the active one) and the
// manifest under prefix in store covers every offset below it: every
// closed segment uploaded and its local copy deleted. It only reads: the
// segment file names in dir and the committed manifest. It returns the
// manifest's segments and the local log start (the active segment's base).
func waitBrokerOffloaded(ctx context.Context, store *objstore.Store, prefix, dir string) (remoteSegs int, localStart int64, err error) {
	wait, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var bases []int64
	var remoteEnd int64
	for {
		bases, err = brokerDirSegments(dir)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return 0, 0, fmt.Errorf("demo: the broker's partition directory: %w", err)
		}
		if len(bases) == 1 {
			m, err := tiered.ReadManifest(wait, store, prefix)
			if err != nil && wait.Err() == nil {
				return 0, 0, fmt.Errorf("demo: the broker's manifest under %s: %w", prefix, err)
			}
			if err == nil {
				remoteEnd = 0
				if len(m.Segments) > 0 {
					remoteEnd = m.Segments[len(m.Segments)-1].LastOffset + 1
				}
				if remoteEnd >= bases[0] {
					return len(m.Segments), bases[0], nil
				}
			}
		}
		select {
		case <-wait.Done():
			if ctx.Err() != nil {
				return 0, 0, fmt.Errorf("demo: waiting for the broker's uploads: %w", ctx.Err())
			}
			return 0, 0, fmt.Errorf("demo: the broker did not upload clicks-0's segments within a minute: %s holds %d segment(s), the bucket's manifest under %s ends at offset %d",
				dir, len(bases), prefix, remoteEnd)
		case <-time.After(20 * time.Millisecond):
		}
	}
}
