package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/tierlog/tierlog/index"
	"github.com/tierlog/tierlog/local"
	"github.com/tierlog/tierlog/record"
)

type demoOptions struct {
	keep    bool
	dir     string
	records int
}

func newDemoCmd() *cobra.Command {
	var o demoOptions
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run tierlog end to end on a temporary directory and explain each step",
		Long: `demo runs the most complete pipeline tierlog has, with no setup:

  1. build Kafka record batches as a producer would (16 KiB batches of keyed
     records, in every codec: none, gzip, snappy, lz4, zstd) plus a
     transaction COMMIT marker;
  2. append them to a Kafka segment with Kafka's sparse-index rule
     (index.interval.bytes=4096), preallocated mmap'd indexes trimmed on roll;
  3. dump the segment as kafka-dump-log would, look an offset up through the
     offset index, and verify every CRC and index entry.

It removes its files when done unless --keep is given.`,
		Example: `  tierctl demo
  tierctl demo --keep --dir /tmp/tierlog-demo`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runDemo(cmd.OutOrStdout(), o)
		},
	}
	cmd.Flags().BoolVar(&o.keep, "keep", false, "keep the files and print where they are")
	cmd.Flags().StringVar(&o.dir, "dir", "", "directory to work in (default: a new temporary directory)")
	cmd.Flags().IntVar(&o.records, "records", 50_000, "records to produce")
	return cmd
}

func runDemo(out io.Writer, o demoOptions) (err error) {
	if o.records < 1 {
		return usagef("--records must be at least 1")
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
	dir := filepath.Join(root, "demo-0")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	w := bufio.NewWriter(out)
	defer w.Flush()

	fmt.Fprintf(w, "tierlog demo: %d records into a Kafka-format segment\n\n", o.records)
	fmt.Fprintln(w, "1. Producing batches (16 KiB, keys from 1,000, 100-byte values)")
	seg, err := writeDemoSegment(dir, o.records)
	if err != nil {
		return err
	}
	for _, c := range seg.codecs {
		fmt.Fprintf(w, "   %-6s %5d records in %3d batches: %8d bytes of records -> %8d on disk (%.2fx)\n",
			c.codec, c.records, c.batches, c.raw, c.disk, float64(c.raw)/float64(max(c.disk, 1)))
	}
	fmt.Fprintf(w, "   + 1 transaction COMMIT marker (a control batch)\n\n")

	fmt.Fprintln(w, "2. Segment written with Kafka's index rule (index.interval.bytes=4096)")
	for _, p := range []string{seg.log, seg.index, seg.timeindex} {
		st, err := os.Stat(p)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "   %-32s %9d bytes\n", filepath.Base(p), st.Size())
	}
	fmt.Fprintf(w, "   (the indexes were preallocated to 10 MiB, mmap'd, then trimmed to %d and %d entries)\n\n",
		seg.indexEntries, seg.timeEntries)

	fmt.Fprintln(w, "3. tierctl dump (first lines of each file)")
	for _, p := range []string{seg.log, seg.index, seg.timeindex} {
		var buf bytes.Buffer
		bw := bufio.NewWriter(&buf)
		if _, err := dumpFile(bw, p, dumpOptions{}, false); err != nil {
			return err
		}
		bw.Flush()
		lines := strings.Split(strings.TrimRight(buf.String(), "\n"), "\n")
		for i, l := range lines {
			if i == 4 {
				fmt.Fprintf(w, "   … %d more lines\n", len(lines)-4)
				break
			}
			fmt.Fprintf(w, "   %s\n", shorten(l, 150))
		}
	}
	fmt.Fprintln(w)

	target := int64(o.records / 2)
	fmt.Fprintf(w, "4. Looking up offset %d through the sparse offset index\n", target)
	oi, err := index.OpenOffsetIndexReadOnly(seg.index, 0)
	if err != nil {
		return err
	}
	entry, slot, n := oi.LookupSlot(target)
	oi.Close()
	fmt.Fprintf(w, "   binary search over %d index entries -> slot %d: offset %d at position %d\n", n, slot, entry.Offset, entry.Position)
	found, scanned, err := scanTo(seg.log, int64(entry.Position), target)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "   forward scan of %d batch headers (%d bytes) -> batch %d..%d at position %d\n\n",
		scanned.batches, scanned.bytes, found.BaseOffset, found.LastOffset, found.Position)

	fmt.Fprintln(w, "5. tierctl verify", dir)
	reports, err := verifyPath(dir)
	if err != nil {
		return err
	}
	bad := 0
	for _, r := range reports {
		var buf bytes.Buffer
		bw := bufio.NewWriter(&buf)
		r.print(bw)
		bw.Flush()
		for _, l := range strings.Split(strings.TrimRight(buf.String(), "\n"), "\n") {
			fmt.Fprintf(w, "   %s\n", l)
		}
		if len(r.Problems) > 0 {
			bad++
		}
	}
	fmt.Fprintln(w)
	elapsed := time.Since(start)
	fmt.Fprintf(w, "Done in %v: %d records, %d bytes, %d problems.\n", elapsed.Round(time.Millisecond), o.records+1, seg.size, bad)
	if o.keep {
		fmt.Fprintf(w, "Files kept in %s (try: tierctl dump --print-data %s | head)\n", dir, seg.log)
	}
	if bad > 0 {
		w.Flush()
		return errProblems
	}
	return nil
}

type codecStats struct {
	codec            record.Codec
	records, batches int
	raw, disk        int64
}

type demoSegment struct {
	log, index, timeindex     string
	codecs                    []codecStats
	indexEntries, timeEntries int
	size                      int64
}

// writeDemoSegment appends producer-shaped batches, one codec after another,
// to segment 0 of dir, indexing each append with Kafka's rule.
func writeDemoSegment(dir string, records int) (seg demoSegment, err error) {
	seg.log = filepath.Join(dir, local.FileName(0, local.LogSuffix))
	seg.index = filepath.Join(dir, local.FileName(0, local.IndexSuffix))
	seg.timeindex = filepath.Join(dir, local.FileName(0, local.TimeIndexSuffix))
	f, err := os.OpenFile(seg.log, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return seg, err
	}
	defer func() {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}()
	oi, err := index.OpenOffsetIndex(seg.index, 0, 10<<20)
	if err != nil {
		return seg, err
	}
	defer oi.Close()
	ti, err := index.OpenTimeIndex(seg.timeindex, 0, 10<<20)
	if err != nil {
		return seg, err
	}
	defer ti.Close()
	ix := index.NewIndexer(oi, ti, 4096)

	rng := rand.New(rand.NewPCG(1, 2))
	var b record.Builder
	codecs := []record.Codec{record.None, record.GZIP, record.Snappy, record.LZ4, record.ZSTD}
	next, pos := int64(0), int64(0)
	ts := time.Now().UnixMilli()
	value := make([]byte, 100)
	appendBatch := func(batch record.Batch) error {
		if _, err := f.Write(batch); err != nil {
			return err
		}
		if err := ix.Append(pos, int64(len(batch)), batch.LastOffset(), batch.MaxTimestamp(), batch.LastOffset()); err != nil {
			return err
		}
		pos += int64(len(batch))
		next = batch.NextOffset()
		return nil
	}
	for ci, c := range codecs {
		st := codecStats{codec: c}
		share := records / len(codecs)
		if ci == len(codecs)-1 {
			share = records - int(next)
		}
		for st.records < share {
			h := record.NewBatchHeader()
			h.BaseOffset = next
			h.Codec = c
			h.PartitionLeaderEpoch = 0
			b.Reset(h)
			for st.records < share {
				key := fmt.Appendf(nil, "customer-%04d", rng.IntN(1000))
				value = fmt.Appendf(value[:0], "order %08d for %s: ", next+int64(b.NumRecords()), key)
				for len(value) < 100 {
					value = append(value, 'x')
				}
				if b.NumRecords() > 0 && b.SizeWith(ts, key, value, nil) > 16384 {
					break
				}
				b.Append(ts, key, value, nil)
				st.records++
				ts++
			}
			st.raw += int64(b.Size())
			batch, err := b.Build()
			if err != nil {
				return seg, err
			}
			st.disk += int64(len(batch))
			st.batches++
			if err := appendBatch(batch); err != nil {
				return seg, err
			}
		}
		seg.codecs = append(seg.codecs, st)
	}
	marker, err := b.BuildEndTxnMarker(record.EndTxnMarker{BaseOffset: next, PartitionLeaderEpoch: 0, ProducerID: 1000, ProducerEpoch: 0, CoordinatorEpoch: 1, Commit: true, Timestamp: ts})
	if err != nil {
		return seg, err
	}
	if err := appendBatch(marker); err != nil {
		return seg, err
	}
	// Roll: the final time index entry, then trim both indexes.
	if err := ix.Roll(); err != nil {
		return seg, err
	}
	seg.indexEntries, seg.timeEntries = oi.Entries(), ti.Entries()
	seg.size = pos
	if err := f.Sync(); err != nil {
		return seg, err
	}
	if err := oi.Close(); err != nil {
		return seg, err
	}
	return seg, ti.Close()
}

type scanCount struct {
	batches int
	bytes   int64
}

// scanTo walks batch headers from pos to the first batch whose last offset
// is >= target, the second step of a lookup.
func scanTo(logPath string, pos, target int64) (record.Entry, scanCount, error) {
	f, err := os.Open(logPath)
	if err != nil {
		return record.Entry{}, scanCount{}, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return record.Entry{}, scanCount{}, err
	}
	s := record.NewScanner(f, pos, st.Size(), record.ScanOptions{HeadersOnly: true, BufferSize: 4096})
	var c scanCount
	for s.Next() {
		e := s.Entry()
		c.batches++
		c.bytes = e.Position + record.BatchHeaderSize - pos
		if e.LastOffset >= target {
			return *e, c, nil
		}
	}
	if s.Err() != nil {
		return record.Entry{}, c, s.Err()
	}
	return record.Entry{}, c, fmt.Errorf("offset %d is past the end of %s", target, logPath)
}

// shorten keeps the head and tail of a long line, where kafka-dump-log's
// batch lines carry the offsets and the position, size, codec and crc.
func shorten(s string, n int) string {
	if len(s) <= n {
		return s
	}
	head := n / 3
	return s[:head] + " … " + s[len(s)-(n-head-3):]
}
