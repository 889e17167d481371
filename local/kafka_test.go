package local_test

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/local"
	"github.com/tierlog/tierlog/record"
	"github.com/tierlog/tierlog/testing/fixtures"
)

// TestOpenKafkaPartitionDirs opens partition directories written by real
// Kafka brokers (copies: opening may rebuild indexes) and reads back every
// record.
func TestOpenKafkaPartitionDirs(t *testing.T) {
	for _, c := range []struct {
		rel     string
		records int
		leo     int64
	}{
		{"ldi-poc/__consumer_offsets-6", 13, 13},
		{"ldi-poc/TestTopicPatient-0", 3, 3},
		{"ldi-poc/__cluster_metadata-0", 4929, 4929},
		{"kafka-starter-windows/kafka-logs/test-0", 97, 97},
		{"kafka-starter-windows/kafka-logs/__consumer_offsets-36", 1, 1},
		{"kafkalite-legacy/tests/test-data/fs-data/numbers-0", 11394, 11394},
		{"kafkalite-legacy/tests/test-data/fs-data/hamlet-gzip-0", 5382, 5382},
	} {
		t.Run(c.rel, func(t *testing.T) {
			src := fixtures.Path(t, c.rel)
			dir := filepath.Join(t.TempDir(), filepath.Base(src))
			if err := os.CopyFS(dir, os.DirFS(src)); err != nil {
				t.Fatal(err)
			}
			l := openLog(t, dir, cfg(t), false)
			if got := l.Offsets().LogEnd; got != c.leo {
				t.Fatalf("log end %d, want %d", got, c.leo)
			}
			recs := readAll(t, l, 0)
			if len(recs) != c.records {
				t.Fatalf("read %d records, want %d", len(recs), c.records)
			}
			for i, r := range recs {
				if r.Offset != int64(i) {
					t.Fatalf("record %d has offset %d", i, r.Offset)
				}
			}
			// A lookup in the middle agrees with the scan.
			mid := c.leo / 2
			lr, err := l.Lookup(mid)
			if err != nil || lr.LastOffset < mid || (lr.BaseOffset >= 0 && lr.BaseOffset > mid) {
				t.Fatalf("Lookup(%d) = %+v, %v", mid, lr, err)
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			// What tierlog left is still a valid Kafka directory: the
			// indexes it rebuilt match the log.
			checkIndexesMatchLog(t, dir)
		})
	}
}

// checkIndexesMatchLog checks every .index entry of every segment in dir
// against the batch at its position.
func checkIndexesMatchLog(t *testing.T, dir string) {
	t.Helper()
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		base, suffix, err := local.ParseFileName(e.Name())
		if err != nil || suffix != local.IndexSuffix {
			continue
		}
		idx, _ := os.ReadFile(filepath.Join(dir, e.Name()))
		log, _ := os.ReadFile(filepath.Join(dir, local.FileName(base, local.LogSuffix)))
		for i := 0; i+8 <= len(idx); i += 8 {
			off := base + int64(binary.BigEndian.Uint32(idx[i:]))
			pos := int64(binary.BigEndian.Uint32(idx[i+4:]))
			s := record.NewScanner(bytes.NewReader(log), pos, int64(len(log)), record.ScanOptions{HeadersOnly: true})
			if !s.Next() || s.Entry().LastOffset != off {
				t.Fatalf("%s entry %d: offset %d at position %d does not match the log", e.Name(), i/8, off, pos)
			}
		}
	}
}

// kafkaModel replays Kafka's roll and index rules over a sequence of batch
// sizes and last offsets: the expected segment bases, index entries and
// trimmed index sizes, computed independently of the code under test.
type modelSegment struct {
	base    int64
	size    int64
	entries [][2]int64 // (offset, position)
}

func kafkaModel(sizes []int64, lastOffsets []int64, segmentBytes, interval int64) []modelSegment {
	var segs []modelSegment
	cur := modelSegment{base: 0}
	var since int64
	first := int64(0)
	for i, sz := range sizes {
		if cur.size > segmentBytes-sz { // LogSegment.shouldRoll
			segs = append(segs, cur)
			cur = modelSegment{base: first}
			since = 0
		}
		if since > interval {
			cur.entries = append(cur.entries, [2]int64{lastOffsets[i], cur.size})
			since = 0
		}
		since += sz
		cur.size += sz
		first = lastOffsets[i] + 1
	}
	return append(segs, cur)
}

// TestKafkaRuleFiftyThousandRecords: 50,000 records of 200-byte values in
// producer batches (closed when the next record would exceed 16384 bytes),
// segment.bytes=1 MiB, index.interval.bytes=4096: segment boundaries, index
// entries and trimmed index sizes are what Kafka's rules give, and lookups
// scan at most one index interval plus one batch.
func TestKafkaRuleFiftyThousandRecords(t *testing.T) {
	dir := t.TempDir()
	c := cfg(t, "segment.bytes", "1048576", "index.interval.bytes", "4096")
	l := openLog(t, dir, c, false)
	var b record.Builder
	val := bytes.Repeat([]byte("v"), 200)
	var sizes, lasts []int64
	next := int64(0)
	ts := int64(1_788_026_072_512)
	maxBatch := int64(0)
	for next < 50_000 {
		b.Reset(record.NewBatchHeader())
		for next < 50_000 && (b.NumRecords() == 0 || b.SizeWith(ts, nil, val, nil) <= 16384) {
			b.Append(ts, nil, val, nil)
			next++
		}
		batch, err := b.Build()
		if err != nil {
			t.Fatal(err)
		}
		info, err := l.Append(ctx, batch, backend.AppendOptions{AssignOffsets: true})
		if err != nil {
			t.Fatal(err)
		}
		sizes = append(sizes, int64(len(batch)))
		lasts = append(lasts, info.LastOffset)
		maxBatch = max(maxBatch, int64(len(batch)))
		ts++
	}
	model := kafkaModel(sizes, lasts, 1048576, 4096)
	infos := l.SegmentInfos()
	if len(infos) != len(model) {
		t.Fatalf("%d segments, Kafka's rule gives %d", len(infos), len(model))
	}
	for i, m := range model {
		if infos[i].BaseOffset != m.base || infos[i].Size != m.size {
			t.Fatalf("segment %d: base %d size %d, want base %d size %d", i, infos[i].BaseOffset, infos[i].Size, m.base, m.size)
		}
	}
	for _, off := range []int64{0, 25_000, 49_000} {
		r, err := l.Lookup(off)
		if err != nil {
			t.Fatal(err)
		}
		if r.BaseOffset > off || r.LastOffset < off {
			t.Fatalf("Lookup(%d) found batch %d..%d", off, r.BaseOffset, r.LastOffset)
		}
		if r.BytesScanned > 4096+maxBatch+maxBatch {
			t.Fatalf("Lookup(%d) scanned %d bytes, more than one interval plus one batch", off, r.BytesScanned)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	for _, m := range model {
		idx, err := os.ReadFile(filepath.Join(dir, local.FileName(m.base, local.IndexSuffix)))
		if err != nil {
			t.Fatal(err)
		}
		if len(idx) != 8*len(m.entries) {
			t.Fatalf("segment %d: trimmed .index is %d bytes, Kafka's rule gives %d entries", m.base, len(idx), len(m.entries))
		}
		for i, e := range m.entries {
			off := m.base + int64(binary.BigEndian.Uint32(idx[i*8:]))
			pos := int64(binary.BigEndian.Uint32(idx[i*8+4:]))
			if off != e[0] || pos != e[1] {
				t.Fatalf("segment %d entry %d: (%d, %d), want (%d, %d)", m.base, i, off, pos, e[0], e[1])
			}
		}
		tidx, _ := os.ReadFile(filepath.Join(dir, local.FileName(m.base, local.TimeIndexSuffix)))
		// Every offset entry brings a time entry (timestamps rise per
		// batch), plus the roll entry when the last batch was not indexed.
		if n := len(tidx) / 12; n != len(m.entries) && n != len(m.entries)+1 {
			t.Fatalf("segment %d: %d time index entries for %d offset entries", m.base, n, len(m.entries))
		}
	}
}

// TestKafkaProducerStateOnOpen: opening copies of Kafka's partition
// directories rebuilds the producers Kafka held (from the idempotent
// batches, or from Kafka's own .snapshot), and the opened log then treats
// a producer's retry of one of its last five batches as a duplicate.
func TestKafkaProducerStateOnOpen(t *testing.T) {
	open := func(t *testing.T, rel string) *local.Log {
		src := fixtures.Path(t, rel)
		dir := filepath.Join(t.TempDir(), filepath.Base(src))
		if err := os.CopyFS(dir, os.DirFS(src)); err != nil {
			t.Fatal(err)
		}
		l := openLog(t, dir, cfg(t), false)
		t.Cleanup(func() { l.Close() })
		return l
	}
	t.Run("TestTopicPatient-0", func(t *testing.T) {
		l := open(t, "ldi-poc/TestTopicPatient-0")
		ps := l.Producers()
		if len(ps) != 3 {
			t.Fatalf("%d producers, want 3: %+v", len(ps), ps)
		}
		for i, p := range ps {
			if p.ProducerID != int64(i+1) || p.Epoch != 0 || len(p.Batches) != 1 || p.Batches[0].LastSeq != 0 || p.Batches[0].LastOffset != int64(i) {
				t.Fatalf("producer %d: %+v", i, p)
			}
		}
	})
	t.Run("test-0", func(t *testing.T) {
		l := open(t, "kafka-starter-windows/kafka-logs/test-0")
		ps := l.Producers()
		if len(ps) != 1 || ps[0].ProducerID != 0 || len(ps[0].Batches) != 5 || ps[0].Batches[4].LastSeq != 96 || ps[0].Batches[4].LastOffset != 96 {
			t.Fatalf("producers %+v, want producer 0 with last sequence 96 at offset 96", ps)
		}
		// A retry of the batch holding sequences 88..94 is a duplicate.
		if err := l.BecomeLeader(ctx, 0); err != nil {
			t.Fatal(err)
		}
		info, err := l.Append(ctx, idemBatch(0, 88, 7), backend.AppendOptions{AssignOffsets: true})
		if err != nil || !info.Duplicate || info.FirstOffset != 88 || info.LastOffset != 94 {
			t.Fatalf("a retry of sequences 88..94: %+v, %v", info, err)
		}
		if info, err := l.Append(ctx, idemBatch(0, 97, 1), backend.AppendOptions{AssignOffsets: true}); err != nil || info.Duplicate || info.FirstOffset != 97 {
			t.Fatalf("the next batch: %+v, %v", info, err)
		}
	})
	t.Run("__consumer_offsets-6", func(t *testing.T) {
		// Kafka's empty snapshot at 13 is loaded (not rebuilt): it stays, and
		// no producer comes out of batches without producer ids.
		l := open(t, "ldi-poc/__consumer_offsets-6")
		if ps := l.Producers(); len(ps) != 0 {
			t.Fatalf("producers %+v", ps)
		}
		if _, err := os.Stat(filepath.Join(l.Dir(), "00000000000000000013.snapshot")); err != nil {
			t.Fatalf("Kafka's snapshot is gone: %v", err)
		}
	})
}
