package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/compaction"
	"github.com/tierlog/tierlog/local"
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
	ReplicaRecords    int              `json:"replicaRecords"` // read from a read replica of the broker's bucket
	// BrokerSkipped says why step 10 did not run ("" when it did).
	BrokerSkipped string `json:"brokerSkipped,omitempty"`
	// Step 11: the diskless topic's records, those read back after its
	// log directory was removed, and its WAL objects.
	DisklessRecords     int     `json:"disklessRecords"`
	DisklessRecordsBack int     `json:"disklessRecordsBack"`
	DisklessWALObjects  int     `json:"disklessWALObjects"`
	Seconds             float64 `json:"seconds"`
	KeptIn              string  `json:"keptIn,omitempty"`
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
	d := &demo{ctx: ctx, o: o, start: time.Now(), root: o.dir, sum: demoSummary{Records: o.records, Requests: map[string]int64{}}}
	if d.root == "" {
		d.root, err = os.MkdirTemp("", "tierlog-demo-")
		if err != nil {
			return err
		}
	} else if err := os.MkdirAll(d.root, 0o755); err != nil {
		return err
	}
	if !o.keep {
		defer os.RemoveAll(d.root)
	}
	if o.json {
		jsonOut := out
		defer func() {
			if err == nil || errors.Is(err, errProblems) {
				writeJSON(jsonOut, d.sum)
			}
		}()
		out = io.Discard
	}
	d.w = bufio.NewWriter(out)
	defer d.w.Flush()
	d.logDir = filepath.Join(d.root, "logs")
	if d.b, err = local.OpenBackend(d.logDir, local.BackendOptions{RemoteStorage: true}); err != nil {
		return err
	}
	defer d.b.Close()
	defer func() {
		if d.store != nil { // opened by the offload step
			d.store.Close()
		}
	}()
	cfg, err := backend.ParseConfig(map[string]string{"segment.bytes": "1048576", "file.delete.delay.ms": "0",
		"remote.storage.enable": "true", "local.retention.ms": "0"})
	if err != nil {
		return err
	}
	if d.l, err = d.b.OpenLog(ctx, "orders", 0, cfg); err != nil {
		return err
	}
	fmt.Fprintf(d.w, "tierlog demo: a Kafka-compatible partition log, end to end\n\n")
	for _, step := range []func() error{d.produce, d.lookups, d.readLocal, d.offload, d.readTiered,
		func() error { return demoCompaction(ctx, d.w, d.b, o.records) }, d.codecs, d.verify,
		func() error {
			return demoBroker(ctx, d.w, o.broker, filepath.Join(d.root, "broker"), d.storeURL, d.store, min(o.records, 20_000), &d.sum)
		}, d.diskless} {
		if err := step(); err != nil {
			return err
		}
	}
	return d.summary()
}

// demo is one run of the demo: its options, what each step opened and the
// summary the steps fill in.
type demo struct {
	ctx    context.Context
	o      demoOptions
	w      *bufio.Writer
	start  time.Time
	root   string // the demo directory
	logDir string
	sum    demoSummary

	b        *local.Backend
	l        *local.Log // orders-0
	storeURL string
	store    *objstore.Store
	tp       *tiered.Partition // orders-0, tiered, once offloaded
	bad      int               // files verify found problems in
}

// produce is steps 1 and 2: records into orders-0, and its directory.
func (d *demo) produce() error {
	w := d.w
	fmt.Fprintf(w, "1. Producing %d records (200-byte values, keys from 1,000) to orders-0, segment.bytes=1 MiB\n", d.o.records)
	st, err := produceRecords(d.ctx, d.l, d.o.records, 16384, record.None, randomRecords(200, 1000), nil)
	if err != nil {
		return err
	}
	segs := d.l.SegmentInfos()
	d.sum.ProduceMBps = float64(st.bytes) / 1e6 / st.elapsed.Seconds()
	fmt.Fprintf(w, "   %d batches, %.1f MB in %v (%.0f MB/s); %d segments\n\n", st.batches, float64(st.bytes)/1e6,
		st.elapsed.Round(time.Millisecond), float64(st.bytes)/1e6/st.elapsed.Seconds(), len(segs))

	fmt.Fprintf(w, "2. The partition directory, in Kafka's layout (%s)\n", d.l.Dir())
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
	return nil
}

// lookups is step 3: the two-step lookup of three offsets.
func (d *demo) lookups() error {
	w := d.w
	fmt.Fprintln(w, "3. Two-step lookups (segment by base offset, then its sparse offset index)")
	for _, off := range []int64{0, int64(d.o.records) / 2, int64(d.o.records) * 49 / 50} {
		r, err := d.l.Lookup(off)
		if err != nil {
			return err
		}
		entry := "no entry <= it: segment start"
		if r.IndexSlot >= 0 {
			entry = fmt.Sprintf("entry %d of %d (offset %d, position %d)", r.IndexSlot, r.IndexEntries, r.IndexOffset, r.IndexPosition)
		}
		d.sum.Lookups = append(d.sum.Lookups, demoLookup{Offset: off, Segment: r.SegmentIndex, IndexEntry: r.IndexSlot,
			BytesScanned: r.BytesScanned, BatchBase: r.BaseOffset, BatchLast: r.LastOffset})
		fmt.Fprintf(w, "   offset %-6d -> segment %d of %d, %s, scanned %d header(s) / %d B -> batch %d..%d\n",
			off, r.SegmentIndex, r.Segments, entry, r.BatchesScanned, r.BytesScanned, r.BaseOffset, r.LastOffset)
	}
	fmt.Fprintln(w)
	return nil
}

// readLocal is step 4: every offset back from the local log.
func (d *demo) readLocal() error {
	w := d.w
	fmt.Fprintln(w, "4. Reading every offset back (whole batches from the batch holding the offset)")
	readStart := time.Now()
	got, reads, readBytes, err := readEveryRecord(d.ctx, d.l, 0)
	if err != nil {
		return err
	}
	el := time.Since(readStart)
	d.sum.ReadLocalMBps = float64(readBytes) / 1e6 / el.Seconds()
	fmt.Fprintf(w, "   %d of %d records at their offsets, in %d reads of up to 1 MiB (%.0f MB/s)\n", got, d.o.records, reads, float64(readBytes)/1e6/el.Seconds())
	if got != int64(d.o.records) {
		return fmt.Errorf("demo: read back %d records, produced %d", got, d.o.records)
	}
	fmt.Fprintln(w)
	return nil
}

// offload is step 5: the closed segments of orders-0 to the bucket.
func (d *demo) offload() error {
	w := d.w
	d.storeURL = d.o.store
	if d.storeURL == "" {
		d.storeURL = "file://" + filepath.Join(d.root, "bucket") + "?create=true"
	}
	fmt.Fprintf(w, "5. Offloading closed segments to %s (local.retention.ms=0)\n", storeurl.Redact(d.storeURL))
	// The key file of a sealed bucket joins the URL, which the broker of
	// step 10 is given too.
	raw, err := withKeyFile(d.storeURL, keyFileFrom(d.ctx))
	if err != nil {
		return err
	}
	d.storeURL = raw
	store, err := storeurl.Open(d.ctx, raw, storeOptionsFrom(d.ctx))
	if err != nil {
		return err
	}
	d.store = store
	ps, err := tiered.PartitionStore(d.ctx, store, "demo/orders-0", false) // with seal=topics: the partition's kind
	if err != nil {
		return err
	}
	if d.tp, err = tiered.Open(d.ctx, d.l, tiered.Options{Store: ps, Prefix: "demo/orders-0", LeaderEpoch: 0}); err != nil {
		return err
	}
	offStart := time.Now()
	uploaded, err := d.tp.Offload(d.ctx)
	if err != nil {
		return err
	}
	offEl := time.Since(offStart)
	m, err := d.tp.Manifest(d.ctx)
	if err != nil {
		return err
	}
	stats := store.Stats()
	d.sum.BytesUploaded = d.tp.Metrics().BytesUploaded.Load()
	d.sum.UploadMBps = float64(m.Size()) / 1e6 / offEl.Seconds()
	fmt.Fprintf(w, "   %d segments (%.1f MB) uploaded in %v (%.0f MB/s): %d PUTs; manifest generation %d\n",
		uploaded, float64(m.Size())/1e6, offEl.Round(time.Millisecond), float64(m.Size())/1e6/offEl.Seconds(), stats.Requests[objstore.OpPut], m.Generation)
	if len(m.Segments) == 0 {
		fmt.Fprintf(w, "   nothing to offload: every record is still in the active segment\n\n")
	} else {
		fmt.Fprintf(w, "   tiers: %d segments in the bucket (offsets %d..%d), %d local (from offset %d)\n\n",
			len(m.Segments), m.Segments[0].BaseOffset, m.Segments[len(m.Segments)-1].LastOffset, len(d.l.SegmentInfos()), d.tp.Offsets().LocalLogStart)
	}
	return nil
}

// readTiered is step 6: every offset back through both tiers.
func (d *demo) readTiered() error {
	w := d.w
	m, err := d.tp.Manifest(d.ctx)
	if err != nil {
		return err
	}
	fmt.Fprintln(w, "6. Reading every offset back through both tiers")
	getsBefore := d.store.Stats().Requests[objstore.OpGet]
	readStart := time.Now()
	got, reads, readBytes, err := readEveryRecord(d.ctx, d.tp, 0)
	if err != nil {
		return err
	}
	el := time.Since(readStart)
	d.sum.ReadTieredMBps, d.sum.RecordsRead = float64(readBytes)/1e6/el.Seconds(), got
	d.sum.RemoteSegments, d.sum.LocalSegments = len(m.Segments), len(d.l.SegmentInfos())
	for op, n := range d.store.Stats().Requests {
		d.sum.Requests[string(op)] = n
	}
	fmt.Fprintf(w, "   %d of %d records at their offsets, in %d reads (%.0f MB/s); %d GETs from the bucket\n",
		got, d.o.records, reads, float64(readBytes)/1e6/el.Seconds(), d.store.Stats().Requests[objstore.OpGet]-getsBefore)
	if got != int64(d.o.records) {
		return fmt.Errorf("demo: read back %d records through both tiers, produced %d", got, d.o.records)
	}
	probe := int64(d.o.records) / 4
	if i, ok := m.Find(probe); ok {
		seg := m.Segments[i]
		fmt.Fprintf(w, "   remote lookup of offset %d: manifest binary search over %d segments -> %s, then its remote offset index\n\n",
			probe, len(m.Segments), seg.Name(".log"))
	}
	return nil
}

// codecs is step 8: the same records in every codec; it closes the
// backend for step 9.
func (d *demo) codecs() error {
	w := d.w
	fmt.Fprintln(w, "8. The same records in every codec (a topic each, 10,000 records)")
	for _, c := range []record.Codec{record.None, record.GZIP, record.Snappy, record.LZ4, record.ZSTD} {
		cl, err := d.b.OpenLog(d.ctx, "codec-"+c.String(), 0, backend.DefaultConfig())
		if err != nil {
			return err
		}
		cst, err := produceRecords(d.ctx, cl, 10_000, 16384, c, orderRecords(), nil)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "   %-6s %8d bytes on disk (%5.2fx)\n", c, cst.bytes, float64(cst.raw)/float64(max(cst.bytes, 1)))
	}
	if err := d.b.Close(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	return nil
}

// verify is step 9: tierctl verify over the log directory.
func (d *demo) verify() error {
	w := d.w
	fmt.Fprintf(w, "9. tierctl verify %s (every CRC, offset and index entry)\n", d.logDir)
	reports, err := verifyPath(d.logDir, nil)
	if err != nil {
		return err
	}
	for _, r := range reports {
		if len(r.Problems) > 0 {
			d.bad++
			var buf bytes.Buffer
			bw := bufio.NewWriter(&buf)
			r.print(bw)
			bw.Flush()
			fmt.Fprint(w, buf.String())
		}
	}
	fmt.Fprintf(w, "   %d files verified, %d with problems\n\n", len(reports), d.bad)
	d.sum.FilesVerified, d.sum.FilesWithProblems = len(reports), d.bad
	return nil
}

// summary prints the measured summary; errProblems when verify found any.
func (d *demo) summary() error {
	w, sum := d.w, &d.sum
	sum.Seconds = time.Since(d.start).Seconds()
	fmt.Fprintf(w, "Summary: %d records; %d segments in the bucket (%.1f MB uploaded at %.0f MB/s), %d local;\n",
		d.o.records, sum.RemoteSegments, float64(sum.BytesUploaded)/1e6, sum.UploadMBps, sum.LocalSegments)
	fmt.Fprintf(w, "         %d PUTs and %d GETs in all; produce %.0f MB/s, read %.0f MB/s local, %.0f MB/s through both tiers.\n",
		sum.Requests["put"], sum.Requests["get"], sum.ProduceMBps, sum.ReadLocalMBps, sum.ReadTieredMBps)
	fmt.Fprintf(w, "Done in %v.\n", time.Since(d.start).Round(time.Millisecond))
	if d.o.keep {
		sum.KeptIn = d.root
		fmt.Fprintf(w, "Files kept in %s; try: tierctl lookup %s --offset %d\n", d.root, d.l.Dir(), int64(d.o.records)-10)
	}
	if d.bad > 0 {
		d.w.Flush()
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
