package local_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/local"
	"github.com/tierlog/tierlog/record"
)

// writeIndexedSegments writes n segments of batches one-record batches
// (1 KiB values, timestamps rising) into dir as a cleanly closed log
// would leave them, with an offset and a time index entry every four
// batches (Kafka's 4 KiB index.interval.bytes) and the time index's entry
// for the segment's largest timestamp, without a Log.
func writeIndexedSegments(tb testing.TB, dir string, n, batches int) {
	tb.Helper()
	writeIndexedSegmentsOf(tb, dir, n, batches, 1024, 4096)
}

// writeIndexedSegmentsOf is writeIndexedSegments with values of
// valueSize bytes: an index entry at the first batch at least interval
// bytes past the last one.
func writeIndexedSegmentsOf(tb testing.TB, dir string, n, batches, valueSize, interval int) {
	tb.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		tb.Fatal(err)
	}
	var bld record.Builder
	value := bytes.Repeat([]byte("v"), valueSize)
	for i := range n {
		var log, oi, ti []byte
		indexed := 0 // the position of the last index entry
		for j := range batches {
			off := int64(i*batches + j)
			ts := 1_700_000_000_000 + off
			bld.Reset(record.NewBatchHeader())
			bld.Append(ts, nil, value, nil)
			b, err := bld.Build()
			if err != nil {
				tb.Fatal(err)
			}
			b.SetBaseOffset(off)
			if j > 0 && len(log)-indexed >= interval {
				indexed = len(log)
				rel := uint32(off - int64(i*batches))
				oi = binary.BigEndian.AppendUint32(oi, rel)
				oi = binary.BigEndian.AppendUint32(oi, uint32(len(log)))
				ti = binary.BigEndian.AppendUint64(ti, uint64(ts-1))
				ti = binary.BigEndian.AppendUint32(ti, rel-1)
			}
			log = append(log, b...)
		}
		// The entry a roll appends: the segment's largest timestamp.
		last := uint32(batches - 1)
		ti = binary.BigEndian.AppendUint64(ti, uint64(1_700_000_000_000+int64(i*batches)+int64(last)))
		ti = binary.BigEndian.AppendUint32(ti, last)
		base := int64(i * batches)
		for suf, data := range map[string][]byte{local.LogSuffix: log, local.IndexSuffix: oi, local.TimeIndexSuffix: ti} {
			if err := os.WriteFile(filepath.Join(dir, local.FileName(base, suf)), data, 0o644); err != nil {
				tb.Fatal(err)
			}
		}
	}
}

// BenchmarkReadRandomSegments reads the batch at a random offset of a log
// of 10,000 segments (16 batches each, indexed), warm, with every
// segment's files kept open (open files -1) and with the default bound on
// open files (1,024), where most reads reopen a segment: issue 27
// measured a 14x cliff between the two.
func BenchmarkReadRandomSegments(b *testing.B) { benchReadRandom(b, 10_000, 16, 1024, 4096) }

// BenchmarkReadRandomSmallBatches is BenchmarkReadRandomSegments with
// batches of a 40-byte record (110 bytes): 38 batches between two index
// entries, where a read walks 19 headers on average.
func BenchmarkReadRandomSmallBatches(b *testing.B) { benchReadRandom(b, 10_000, 160, 40, 4096) }

// BenchmarkReadRandomMappedIndexes is BenchmarkReadRandomSegments over
// 3,000 segments of 1,100 small batches, each indexed: offset indexes of
// 8.8 KiB, past the size read into memory, so mapped (as a segment of
// 4 MiB or more has at the default index.interval.bytes).
func BenchmarkReadRandomMappedIndexes(b *testing.B) { benchReadRandom(b, 3000, 1100, 40, 1) }

func benchReadRandom(b *testing.B, n, batches, valueSize, interval int) {
	end := int64(n * batches)
	dir := filepath.Join(b.TempDir(), "t-0")
	writeIndexedSegmentsOf(b, dir, n, batches, valueSize, interval)
	for _, bound := range []int{-1, 4096, local.DefaultMaxOpenSegmentFiles} {
		b.Run(fmt.Sprintf("open-files=%d", bound), func(b *testing.B) {
			c := backend.DefaultConfig()
			l, err := local.Open(dir, local.Options{Config: c, CleanShutdown: true, RecoveryPoint: end, LogStartOffset: -1, HighWatermark: end, MaxOpenSegmentFiles: bound})
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			rng := rand.New(rand.NewPCG(5, 6))
			var buf bytes.Buffer
			read := func() {
				r, err := l.Read(ctx, rng.Int64N(end), backend.ReadOptions{MaxBytes: 1, MinOneBatch: true})
				if err != nil {
					b.Fatal(err)
				}
				buf.Reset()
				if _, err := r.WriteTo(&buf); err != nil {
					b.Fatal(err)
				}
				r.Close()
			}
			for range 3 * n { // every segment's indexes checked once
				read()
			}
			b.ResetTimer()
			for b.Loop() {
				read()
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "reads/s")
		})
	}
}

// BenchmarkOffsetForTimestamp looks up a random timestamp in a log of
// 10,000 segments (16 batches each, timestamps rising), warm: every
// segment's largest timestamp known. Kafka walks the segments for each
// lookup; issue 27 asked for a binary search.
func BenchmarkOffsetForTimestamp(b *testing.B) {
	const n, batches = 10_000, 16
	const end = n * batches
	dir := filepath.Join(b.TempDir(), "t-0")
	writeIndexedSegments(b, dir, n, batches)
	l, err := local.Open(dir, local.Options{Config: backend.DefaultConfig(), CleanShutdown: true, RecoveryPoint: end, LogStartOffset: -1, HighWatermark: end, MaxOpenSegmentFiles: -1})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	rng := rand.New(rand.NewPCG(7, 8))
	lookup := func() {
		ts := 1_700_000_000_000 + rng.Int64N(end)
		off, _, found, err := l.OffsetForTimestamp(ctx, ts)
		if err != nil || !found || off != ts-1_700_000_000_000 {
			b.Fatalf("OffsetForTimestamp(%d) = %d, %v, %v", ts, off, found, err)
		}
	}
	for range 3 * n {
		lookup()
	}
	b.ResetTimer()
	for b.Loop() {
		lookup()
	}
}
