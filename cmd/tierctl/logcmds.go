package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/local"
	"github.com/tierlog/tierlog/record"
	"github.com/tierlog/tierlog/tiered"
)

// parseConfigFlags turns repeated --config key=value flags into a Config.
func parseConfigFlags(kvs []string) (backend.Config, error) {
	m := map[string]string{}
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return backend.Config{}, usagef("--config %q: want key=value", kv)
		}
		m[strings.TrimSpace(k)] = strings.TrimSpace(v)
	}
	c, err := backend.ParseConfig(m)
	if err != nil {
		return c, usageError{err}
	}
	return c, nil
}

type produceOptions struct {
	partition  string
	topic      string // deprecated spelling: --topic T --partition N
	count      int
	recordSize int
	batchSize  int
	keySpace   int
	codec      string
	configs    []string
	json       bool
}

func newProduceCmd() *cobra.Command {
	var o produceOptions
	cmd := &cobra.Command{
		Use:   "produce LOGDIR --partition TOPIC-PARTITION --count N [--record-size B]",
		Short: "Append generated records to a partition as its leader would",
		Long: `produce appends --count records of --record-size value bytes to
<LOGDIR>/<topic>-<partition>, batching them as Kafka's producer does: a
batch closes when the next record would not fit in --batch-size bytes. Each
record's timestamp is the wall clock when it is added. It writes through the
local backend as the leader of a single-replica partition, so the high
watermark follows the log end, and closes the log dir cleanly.

The partition is named as everywhere in tierctl, by its directory's name:
--partition orders-0. The old spelling --topic orders --partition 0 (a
number) still works, with a warning. LOGDIR is the log directory: one
that holds segment files (a partition directory) is refused.`,
		Example: `  tierctl produce /tmp/logs --partition orders-0 --count 50000 --record-size 200
  tierctl produce /tmp/logs --partition users-0 --count 1000000 --record-size 100 \
      --key-space 10000 --codec zstd --config segment.bytes=1048576`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runProduce(cmd.Context(), cmd, args[0], o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.partition, "partition", "", "the partition, as TOPIC-PARTITION (its directory name), e.g. orders-0 (required)")
	f.StringVar(&o.topic, "topic", "", "topic name, with a numeric --partition (default 0)")
	f.MarkHidden("topic") // the old spelling; see producePartition
	f.IntVar(&o.count, "count", 0, "records to produce (required)")
	f.IntVar(&o.recordSize, "record-size", 100, "value bytes per record")
	f.IntVar(&o.batchSize, "batch-size", 16384, "close a batch when the next record would not fit in this many bytes")
	f.IntVar(&o.keySpace, "key-space", 0, "draw keys from this many distinct keys (0: null keys)")
	f.StringVar(&o.codec, "codec", "none", "compression: none, gzip, snappy, lz4 or zstd")
	f.StringArrayVar(&o.configs, "config", nil, "topic config key=value (repeatable), e.g. segment.bytes=1048576")
	f.BoolVar(&o.json, "json", false, "print the summary as JSON")
	return cmd
}

func runProduce(ctx context.Context, cmd *cobra.Command, logDir string, o produceOptions) error {
	if ctx == nil {
		ctx = context.Background()
	}
	tp, err := producePartition(o.partition, o.topic)
	if err != nil {
		return err
	}
	if err := notAPartitionDir(logDir); err != nil {
		return err
	}
	if o.topic != "" {
		fmt.Fprintf(cmd.ErrOrStderr(), "tierctl: --topic is deprecated: name the partition as --partition %s\n", tp)
	}
	switch {
	case o.count <= 0:
		return usagef("--count %d: want at least 1 record", o.count)
	case o.recordSize < 0:
		return usagef("--record-size %d: want >= 0 bytes", o.recordSize)
	case o.batchSize <= record.BatchHeaderSize:
		return usagef("--batch-size %d: want more than a batch header's %d bytes", o.batchSize, record.BatchHeaderSize)
	case o.keySpace < 0:
		return usagef("--key-space %d: want >= 0 keys (0: null keys)", o.keySpace)
	}
	codec, err := record.ParseCodec(o.codec)
	if err != nil {
		return usageError{err}
	}
	cfg, err := parseConfigFlags(o.configs)
	if err != nil {
		return err
	}
	b, err := local.OpenBackend(logDir, local.BackendOptions{Logger: loggerFrom(ctx)})
	if err != nil {
		return err
	}
	defer b.Close()
	l, err := b.OpenLog(ctx, tp.Topic, tp.Partition, cfg)
	if err != nil {
		return err
	}
	bar := newProgress(cmd, int64(o.count), "produce", false)
	st, err := produceRecords(ctx, l, o.count, o.batchSize, codec, randomRecords(o.recordSize, o.keySpace), bar)
	if err != nil {
		return err
	}
	bar.Finish()
	first, batches, bytesOut, elapsed := st.first, st.batches, st.bytes, st.elapsed
	offs := l.Offsets()
	segs := len(l.SegmentInfos())
	if err := b.Close(); err != nil {
		return err
	}
	w := cmd.OutOrStdout()
	if o.json {
		writeJSON(w, map[string]any{
			"partitionDir": l.Dir(), "records": o.count, "batches": batches, "bytes": bytesOut,
			"firstOffset": first, "lastOffset": offs.LogEnd - 1, "segments": segs,
			"seconds": elapsed.Seconds(), "mbPerSecond": float64(bytesOut) / 1e6 / elapsed.Seconds(),
		})
		return nil
	}
	fmt.Fprintf(w, "produced %d records in %d batches (%d bytes) to %s\n", o.count, batches, bytesOut, l.Dir())
	fmt.Fprintf(w, "offsets %d..%d, %d segment(s), %v (%.1f MB/s)\n", first, offs.LogEnd-1, segs,
		elapsed.Round(time.Millisecond), float64(bytesOut)/1e6/elapsed.Seconds())
	return nil
}

// producePartition reads produce's partition: --partition TOPIC-PARTITION,
// or the deprecated --topic T with --partition N (a number, default 0). The
// two cannot be confused: a TOPIC-PARTITION has a '-', a number has none,
// and --topic says which spelling is meant.
func producePartition(partition, topic string) (local.TopicPartition, error) {
	if topic == "" {
		if partition == "" {
			return local.TopicPartition{}, usagef("--partition is required: the partition as TOPIC-PARTITION, e.g. orders-0")
		}
		tp, err := local.ParsePartitionDirName(partition)
		if err != nil {
			if _, nerr := strconv.ParseUint(partition, 10, 31); nerr == nil {
				return tp, usagef("--partition %s: want TOPIC-PARTITION, e.g. orders-%s (a partition number goes with the old --topic)", partition, partition)
			}
			return tp, usagef("--partition %q: want TOPIC-PARTITION, e.g. orders-0: %w", partition, err)
		}
		return tp, nil
	}
	n := int64(0)
	if partition != "" {
		var err error
		if n, err = strconv.ParseInt(partition, 10, 32); err != nil {
			return local.TopicPartition{}, usagef("--topic %s with --partition %q: give --partition TOPIC-PARTITION alone (with --topic, --partition is a number)", topic, partition)
		}
	}
	if _, err := local.PartitionDirName(topic, int32(n)); err != nil {
		return local.TopicPartition{}, usagef("--topic %q --partition %d: %w", topic, n, err)
	}
	return local.TopicPartition{Topic: topic, Partition: int32(n)}, nil
}

type produceStats struct {
	first   int64
	batches int
	bytes   int64 // on disk
	raw     int64 // uncompressed batch bytes
	elapsed time.Duration
}

// recordGen fills the key (nil for none) and value of record i, reusing
// the buffers it is given.
type recordGen func(i int, key, value []byte) (k, v []byte)

// randomRecords generates values of size random letters and keys from a
// key space (none when keySpace is 0), as a load generator would.
func randomRecords(size, keySpace int) recordGen {
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))
	const letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
	return func(_ int, key, value []byte) ([]byte, []byte) {
		value = value[:0]
		for j := 0; j < size; j++ {
			value = append(value, letters[rng.IntN(len(letters))])
		}
		if keySpace == 0 {
			return nil, value
		}
		return fmt.Appendf(key[:0], "key-%d", rng.IntN(keySpace)), value
	}
}

// produceRecords appends count generated records to l as its leader,
// closing a batch when the next record would not fit in batchSize bytes,
// and moves the high watermark along.
func produceRecords(ctx context.Context, l *local.Log, count, batchSize int, codec record.Codec, gen recordGen, bar *progress) (produceStats, error) {
	start := time.Now()
	st := produceStats{first: l.Offsets().LogEnd}
	var key, value []byte
	var bl record.Builder
	h := record.NewBatchHeader()
	h.Codec = codec
	for produced := 0; produced < count; {
		bl.Reset(h)
		for produced < count {
			key, value = gen(produced, key, value)
			ts := time.Now().UnixMilli()
			if bl.NumRecords() > 0 && bl.SizeWith(ts, key, value, nil) > batchSize {
				break // this record opens the next batch
			}
			bl.Append(ts, key, value, nil)
			produced++
		}
		st.raw += int64(bl.Size())
		batch, err := bl.Build()
		if err != nil {
			return st, err
		}
		if _, err := l.Append(ctx, batch, backend.AppendOptions{AssignOffsets: true}); err != nil {
			return st, err
		}
		if err := l.SetHighWatermark(l.Offsets().LogEnd); err != nil {
			return st, err
		}
		st.batches++
		st.bytes += int64(len(batch))
		bar.Add(int64(bl.NumRecords()))
	}
	st.elapsed = time.Since(start)
	return st, nil
}

// openPartitionReadOnly opens a partition directory without changing it,
// with the partition's log start and high watermark from its log
// directory's checkpoints (log-start-offset-checkpoint,
// replication-offset-checkpoint, cleaner-offset-checkpoint) when they name
// it, as a broker opens it:
// records below a log start that DeleteRecords or retention moved are
// not served, and a log start below the first local segment marks the
// partition as offloaded (local.Segments.RemoteLogStart). An unreadable
// checkpoint counts as empty, with a warning, as it does for a broker.
// A directory whose name is not <topic>-<partition> is opened without
// checkpoints.
func openPartitionReadOnly(ctx context.Context, dir string, cfg backend.Config) (*local.Log, error) {
	opts := local.Options{Config: cfg, ReadOnly: true, LogStartOffset: -1, HighWatermark: -1}
	clean := filepath.Clean(dir)
	if tp, err := local.ParsePartitionDirName(filepath.Base(clean)); err == nil {
		logDir := filepath.Dir(clean)
		for _, c := range []struct {
			name string
			into *int64
		}{{local.LogStartCheckpoint, &opts.LogStartOffset}, {local.ReplicationCheckpoint, &opts.HighWatermark}} {
			m, err := local.ReadOffsetCheckpoint(filepath.Join(logDir, c.name))
			if err != nil {
				loggerFrom(ctx).Warn("checkpoint unreadable; treating it as empty", "file", filepath.Join(logDir, c.name), "err", err)
				continue
			}
			if v, ok := m[tp]; ok {
				*c.into = v
			}
		}
		// A partition the cleaner has cleaned may have segments that end
		// before the next one (local.Options.Cleaned).
		if m, err := local.ReadOffsetCheckpoint(filepath.Join(logDir, local.CleanerCheckpoint)); err != nil {
			loggerFrom(ctx).Warn("checkpoint unreadable; treating it as empty", "file", filepath.Join(logDir, local.CleanerCheckpoint), "err", err)
		} else {
			_, opts.Cleaned = m[tp]
		}
	}
	l, err := local.Open(dir, opts)
	if err != nil {
		if errors.Is(err, backend.ErrNotFound) {
			return nil, usageError{err}
		}
		return nil, err
	}
	return l, nil
}

type consumeOptions struct {
	from  offsetValue
	count int64
	json  bool
	quiet bool
	store string
}

func newConsumeCmd() *cobra.Command {
	o := consumeOptions{from: offsetValue{unit: "offset"}}
	cmd := &cobra.Command{
		Use:   "consume PARTITION_DIR [--from OFFSET] [--count N]",
		Short: "Print records of a partition: offset, timestamp, key, value",
		Long: `consume reads records from a partition directory (tierlog's or Kafka's)
without changing it, starting at --from (default: the log start) for --count
records (default: to the end). Keys and values print as text when printable,
else as base64. Control records (transaction markers) are skipped.

The log start and high watermark come from the log directory's
checkpoints, as a broker reads them. With --store, offsets below the local
files are read from the bucket; a partition whose log-start checkpoint
says it was offloaded but that has no manifest in the bucket is an error
(exit 2), not a partition that starts at its local files.`,
		Example: `  tierctl consume /tmp/logs/orders-0 --from 25000 --count 3
  tierctl consume /var/kafka/orders-0 --json | jq .value
  tierctl consume /tmp/logs/orders-0 --quiet`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runConsume(cmd, args[0], o)
		},
	}
	f := cmd.Flags()
	f.Var(&o.from, "from", "first offset, >= 0 (default: the log start)")
	f.Int64Var(&o.count, "count", 0, "records to print (0: all)")
	f.BoolVar(&o.json, "json", false, "print one JSON object per record")
	f.BoolVar(&o.quiet, "quiet", false, "print only the number of records")
	f.StringVar(&o.store, "store", "", "bucket URL: read offloaded offsets from it too")
	return cmd
}

func runConsume(cmd *cobra.Command, dir string, o consumeOptions) error {
	if o.count < 0 {
		return usagef("--count %d: want >= 0 records (0: all)", o.count)
	}
	var l backend.Partition
	if o.store != "" {
		p, _, store, err := openTiered(cmd.Context(), dir, o.store)
		if err != nil {
			return err
		}
		defer store.Close()
		l = p
	} else {
		ll, err := openPartitionReadOnly(cmd.Context(), dir, backend.Config{})
		if err != nil {
			return err
		}
		defer ll.Close()
		if o.from.set {
			if err := inBucketError(dir, ll, o.from.v); err != nil {
				return err
			}
		} else {
			noteInBucket(cmd, dir, ll, "reads them; this starts at the first local offset")
		}
		l = ll
	}
	defer l.Close()
	offs := l.Offsets()
	off := offs.LogStart
	if o.from.set {
		off = o.from.v
	}
	if off < offs.LogStart || off > offs.LogEnd {
		return usageError{&backend.OffsetOutOfRangeError{Offset: off, LogStart: offs.LogStart, LogEnd: offs.LogEnd}}
	}
	from := off // a read returns the whole batch holding it: skip what comes before
	w := bufio.NewWriterSize(cmd.OutOrStdout(), 64<<10)
	defer w.Flush()
	var it record.Iterator
	var n int64
	ctx := cmd.Context()
	for off < offs.LogEnd && (o.count <= 0 || n < o.count) {
		recs, err := l.Read(ctx, off, backend.ReadOptions{MaxBytes: 1 << 20, MinOneBatch: true})
		if err != nil {
			return err
		}
		var buf strings.Builder
		_, err = recs.WriteTo(&buf)
		recs.Close()
		if err != nil {
			return err
		}
		data := []byte(buf.String())
		if len(data) == 0 {
			break
		}
		sc := record.NewScanner(strings.NewReader(buf.String()), 0, int64(len(data)), record.ScanOptions{Validate: true, Ordered: true})
		for sc.Next() && (o.count <= 0 || n < o.count) {
			e := sc.Entry()
			off = e.LastOffset + 1
			if e.Magic == 2 && e.Batch().IsControl() {
				continue
			}
			if err := it.Reset(e.Data); err != nil {
				return fmt.Errorf("batch at offset %d: %w", e.LastOffset, err)
			}
			for it.Next() && (o.count <= 0 || n < o.count) {
				r := it.Record()
				if r.Offset < from {
					continue
				}
				n++
				switch {
				case o.quiet:
				case o.json:
					writeJSON(w, map[string]any{"offset": r.Offset, "timestamp": r.Timestamp, "key": printable(r.Key), "value": printable(r.Value)})
				default:
					fmt.Fprintf(w, "offset: %d timestamp: %d key: %s value: %s\n", r.Offset, r.Timestamp, printableOrNull(r.Key), printableOrNull(r.Value))
				}
			}
			if err := it.Err(); err != nil {
				return fmt.Errorf("batch at offset %d: %w", e.LastOffset, err)
			}
		}
		if err := sc.Err(); err != nil {
			return fmt.Errorf("%s: %w", dir, err)
		}
	}
	if o.quiet {
		fmt.Fprintln(w, n)
	}
	return nil
}

type lookupOptions struct {
	offset    offsetValue
	timestamp offsetValue
	json      bool
	store     string
}

func newLookupCmd() *cobra.Command {
	o := lookupOptions{offset: offsetValue{unit: "offset"}, timestamp: offsetValue{unit: "ms"}}
	cmd := &cobra.Command{
		Use:   "lookup PARTITION_DIR (--offset N | --timestamp T)",
		Short: "Show the two-step lookup of an offset or a timestamp",
		Long: `lookup shows how tierlog (and Kafka) finds an offset: step 1 is a binary
search over the segments' base offsets, step 2 a binary search of that
segment's sparse offset index, then a forward scan of batch headers to the
batch that holds the offset. With --timestamp it first finds the earliest
offset whose record timestamp is >= T, through the time indexes.
The directory is opened read-only, with its log directory's checkpoints.
With --store, an offset below the local files is looked up in the bucket
(manifest, then remote index); a partition that was offloaded but has no
manifest there is an error (exit 2).`,
		Example: `  tierctl lookup /tmp/logs/orders-0 --offset 25000
  tierctl lookup /tmp/logs/orders-0 --timestamp 1788026072512 --json`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			byOffset, byTs := o.offset.set, o.timestamp.set
			if byOffset == byTs {
				return usagef("give exactly one of --offset and --timestamp")
			}
			return runLookup(cmd, args[0], o, byTs)
		},
	}
	cmd.Flags().Var(&o.offset, "offset", "offset to find (>= 0)")
	cmd.Flags().Var(&o.timestamp, "timestamp", "find the first offset with a timestamp >= this (ms since the epoch, >= 0)")
	cmd.Flags().BoolVar(&o.json, "json", false, "print the result as JSON")
	cmd.Flags().StringVar(&o.store, "store", "", "bucket URL: look offloaded offsets up in it (manifest, then remote index)")
	return cmd
}

func runLookup(cmd *cobra.Command, dir string, o lookupOptions, byTs bool) error {
	var l backend.Partition
	var tp *tiered.Partition
	var loc *local.Log
	if o.store != "" {
		p, ll, store, err := openTiered(cmd.Context(), dir, o.store)
		if err != nil {
			return err
		}
		defer store.Close()
		l, tp, loc = p, p, ll
	} else {
		ll, err := openPartitionReadOnly(cmd.Context(), dir, backend.Config{})
		if err != nil {
			return err
		}
		defer ll.Close()
		if byTs {
			noteInBucket(cmd, dir, ll, "searches them too")
		} else if err := inBucketError(dir, ll, o.offset.v); err != nil {
			return err
		}
		l, loc = ll, ll
	}
	defer l.Close()
	w := cmd.OutOrStdout()
	target := o.offset.v
	var foundTs int64
	if byTs {
		off, ts, found, err := l.OffsetForTimestamp(cmd.Context(), o.timestamp.v)
		if err != nil {
			return err
		}
		if !found {
			if o.json {
				writeJSON(w, map[string]any{"timestamp": o.timestamp.v, "found": false})
			} else {
				fmt.Fprintf(w, "no record has a timestamp >= %d\n", o.timestamp.v)
			}
			return nil
		}
		target, foundTs = off, ts
	}
	if tp != nil && target < loc.Offsets().LogStart {
		return printRemoteLookup(cmd, tp, target, o, byTs, foundTs)
	}
	r, err := loc.Lookup(target)
	if err != nil {
		if errors.Is(err, backend.ErrOffsetOutOfRange) {
			return usageError{err}
		}
		return err
	}
	if o.json {
		m := map[string]any{
			"offset": target, "segments": r.Segments, "segmentIndex": r.SegmentIndex, "segment": r.SegmentPath,
			"indexEntries": r.IndexEntries, "indexSlot": r.IndexSlot, "indexOffset": r.IndexOffset, "indexPosition": r.IndexPosition,
			"scanPosition": r.ScanPosition, "batchesScanned": r.BatchesScanned, "bytesScanned": r.BytesScanned,
			"batch": map[string]any{"baseOffset": r.BaseOffset, "lastOffset": r.LastOffset, "position": r.BatchPosition, "size": r.BatchSize, "maxTimestamp": r.MaxTimestamp},
		}
		if byTs {
			m["timestamp"], m["recordTimestamp"], m["found"] = o.timestamp.v, foundTs, true
		}
		writeJSON(w, m)
		return nil
	}
	if byTs {
		fmt.Fprintf(w, "timestamp %d: first record at or after it is offset %d (timestamp %d), via the time indexes\n", o.timestamp.v, target, foundTs)
	}
	fmt.Fprintf(w, "offset %d in %s\n", target, dir)
	fmt.Fprintf(w, "step 1: binary search over %d segment base offsets -> segment %d: %s\n", r.Segments, r.SegmentIndex, filepath.Base(r.SegmentPath))
	if r.IndexSlot < 0 {
		fmt.Fprintf(w, "step 2: binary search over %d offset index entries -> none <= %d: start of the segment (position 0)\n", r.IndexEntries, target)
	} else {
		fmt.Fprintf(w, "step 2: binary search over %d offset index entries -> entry %d: offset %d at position %d\n", r.IndexEntries, r.IndexSlot, r.IndexOffset, r.IndexPosition)
	}
	from := ""
	if r.IndexSlot >= 0 && r.ScanPosition != int64(r.IndexPosition) {
		from = fmt.Sprintf(" from position %d, entry %d's: its batch begins at or before %d", r.ScanPosition, r.IndexSlot+1, target)
	}
	fmt.Fprintf(w, "scan:   %d batch header(s), %d bytes%s\n", r.BatchesScanned, r.BytesScanned, from)
	fmt.Fprintf(w, "found:  batch %d..%d at position %d, %d bytes, max timestamp %d\n", r.BaseOffset, r.LastOffset, r.BatchPosition, r.BatchSize, r.MaxTimestamp)
	return nil
}

// printRemoteLookup shows the two steps of a lookup in the bucket.
func printRemoteLookup(cmd *cobra.Command, p *tiered.Partition, target int64, o lookupOptions, byTs bool, foundTs int64) error {
	r, err := p.LookupRemote(cmd.Context(), target)
	if err != nil {
		if errors.Is(err, backend.ErrOffsetOutOfRange) {
			return usageError{err}
		}
		return err
	}
	w := cmd.OutOrStdout()
	if o.json {
		m := map[string]any{"offset": target, "tier": "remote", "segments": r.Segments, "segmentIndex": r.SegmentIndex, "object": r.Object,
			"indexEntries": r.IndexEntries, "indexSlot": r.IndexSlot, "indexOffset": r.IndexOffset, "indexPosition": r.IndexPosition,
			"batchesScanned": r.BatchesScanned,
			"batch":          map[string]any{"baseOffset": r.BaseOffset, "lastOffset": r.LastOffset, "position": r.BatchPosition, "size": r.BatchSize}}
		if byTs {
			m["timestamp"], m["recordTimestamp"], m["found"] = o.timestamp.v, foundTs, true
		}
		writeJSON(w, m)
		return nil
	}
	if byTs {
		fmt.Fprintf(w, "timestamp %d: first record at or after it is offset %d (timestamp %d)\n", o.timestamp.v, target, foundTs)
	}
	fmt.Fprintf(w, "offset %d is offloaded (below the local log start)\n", target)
	fmt.Fprintf(w, "step 1: binary search over %d segments in the manifest -> segment %d: %s\n", r.Segments, r.SegmentIndex, r.Object)
	if r.IndexSlot < 0 {
		fmt.Fprintf(w, "step 2: binary search over %d remote offset index entries -> none <= %d: start of the segment\n", r.IndexEntries, target)
	} else {
		fmt.Fprintf(w, "step 2: binary search over %d remote offset index entries -> entry %d: offset %d at position %d\n", r.IndexEntries, r.IndexSlot, r.IndexOffset, r.IndexPosition)
	}
	fmt.Fprintf(w, "scan:   %d batch header(s) in one ranged GET\n", r.BatchesScanned)
	fmt.Fprintf(w, "found:  batch %d..%d at position %d, %d bytes\n", r.BaseOffset, r.LastOffset, r.BatchPosition, r.BatchSize)
	return nil
}
