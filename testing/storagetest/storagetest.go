// Package storagetest is the conformance battery every backend.Partition
// must pass. An implementation's test calls Run with a harness maker:
//
//	func TestConformance(t *testing.T) {
//		storagetest.Run(t, func(t *testing.T) storagetest.Harness { return newHarness(t) })
//	}
//
// Each subtest gets a fresh harness (a fresh, empty partition).
package storagetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/record"
)

// Harness gives the battery one partition to test.
type Harness interface {
	// Open opens the partition with cfg, creating it empty the first
	// time. After the partition is closed, Open MUST reopen the same data.
	Open(t *testing.T, cfg backend.Config) backend.Partition
}

// Compactor is implemented by harnesses whose partitions a log cleaner can
// compact (cleanup.policy=compact). The battery then also holds Records
// across a cleaning round, which must leave them readable.
type Compactor interface {
	// Compact runs one cleaning round over p, opened by this harness with
	// a config whose cleanup.policy includes compact.
	Compact(t *testing.T, p backend.Partition)
}

// Run runs the battery; newHarness is called once per subtest. It
// reports whether every clause ran: a -run filter (go test -run
// 'X/ConcurrentReaders') runs only some.
func Run(t *testing.T, newHarness func(t *testing.T) Harness) (all bool) {
	tests := []struct {
		name string
		fn   func(t *testing.T, h Harness)
	}{
		{"RoundTripEveryOffset", testRoundTrip},
		{"ReadBounds", testReadBounds},
		{"MaxBytes", testMaxBytes},
		{"ReadThroughAtByteLimits", testReadThroughAtByteLimits},
		{"Isolation", testIsolation},
		{"OffsetForTimestamp", testOffsetForTimestamp},
		{"RollBoundaries", testRollBoundaries},
		{"DeleteRecordsBefore", testDeleteRecordsBefore},
		{"TruncateTo", testTruncateTo},
		{"Reopen", testReopen},
		{"FollowerAppend", testFollowerAppend},
		{"BadInput", testBadInput},
		{"LeaderValidation", testLeaderValidation},
		{"LeaderTimestamps", testLeaderTimestamps},
		{"LeaderCompression", testLeaderCompression},
		{"CompactedKeys", testCompactedKeys},
		{"ConcurrentReaders", testConcurrentReaders},
		{"HeldRecords", testHeldRecords},
		{"IdempotentProducers", testIdempotentProducers},
		{"Transactions", testTransactions},
		{"LeaderEpochs", testLeaderEpochs},
		{"BecomeLeader", testBecomeLeader},
		{"LeaderAppendEpoch", testLeaderAppendEpoch},
		{"ReadsAtTheLocalStart", testReadsAtTheLocalStart},
		{"ListOffsetsSpecial", testListOffsetsSpecial},
		{"Changed", testChanged},
		{"TieredEnd", testTieredEnd},
		{"ReplicaRead", testReplicaRead},
		{"Closed", testClosed},
	}
	ran := 0
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { ran++; tc.fn(t, newHarness(t)) })
	}
	return ran == len(tests)
}

var ctx = context.Background()

// Config returns Kafka's defaults overridden by kv pairs.
func Config(t testing.TB, kv ...string) backend.Config {
	t.Helper()
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	c, err := backend.ParseConfig(m)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// rec is a record as the battery wrote it.
type rec struct {
	offset int64
	ts     int64
	key    []byte
	value  []byte
}

// model is what the partition should hold.
type model struct {
	recs []rec
}

func (m *model) from(offset int64) []rec {
	for i, r := range m.recs {
		if r.offset >= offset {
			return m.recs[i:]
		}
	}
	return nil
}

// appendBatches appends n batches of 1..maxRecs records as leader and
// records them in m. Timestamps rise with jitter (some go backwards).
func appendBatches(t *testing.T, p backend.Partition, m *model, rng *rand.Rand, n, maxRecs int, codec record.Codec) {
	t.Helper()
	var b record.Builder
	ts := int64(1_700_000_000_000)
	if len(m.recs) > 0 {
		ts = m.recs[len(m.recs)-1].ts
	}
	for i := 0; i < n; i++ {
		h := record.NewBatchHeader()
		h.Codec = codec
		b.Reset(h)
		k := 1 + rng.IntN(maxRecs)
		var batch []rec
		for j := 0; j < k; j++ {
			ts += int64(rng.IntN(20)) - 5
			r := rec{ts: ts, key: fmt.Appendf(nil, "key-%d", rng.IntN(50)), value: bytes.Repeat([]byte{byte('a' + rng.IntN(26))}, rng.IntN(300))}
			b.Append(r.ts, r.key, r.value, nil)
			batch = append(batch, r)
		}
		data, err := b.Build()
		if err != nil {
			t.Fatal(err)
		}
		info, err := p.Append(ctx, append([]byte(nil), data...), backend.AppendOptions{AssignOffsets: true, LeaderEpoch: 1})
		if err != nil {
			t.Fatalf("append: %v", err)
		}
		if info.LastOffset-info.FirstOffset != int64(k-1) {
			t.Fatalf("append of %d records got offsets %d..%d", k, info.FirstOffset, info.LastOffset)
		}
		for j := range batch {
			batch[j].offset = info.FirstOffset + int64(j)
		}
		m.recs = append(m.recs, batch...)
	}
}

// readFrom reads records from offset to the log end (or limit records)
// through Read and WriteTo, checking batch CRCs.
func readFrom(t *testing.T, p backend.Partition, offset int64, limit int) []rec {
	t.Helper()
	return readFromBytes(t, p, offset, limit, 32<<10)
}

// readFromBytes is readFrom with reads of at most maxBytes (at least one
// batch each).
func readFromBytes(t *testing.T, p backend.Partition, offset int64, limit, maxBytes int) []rec {
	t.Helper()
	var out []rec
	var it record.Iterator
	end := p.Offsets().LogEnd
	for offset < end && (limit <= 0 || len(out) < limit) {
		r, err := p.Read(ctx, offset, backend.ReadOptions{MaxBytes: maxBytes, MinOneBatch: true})
		if err != nil {
			t.Fatalf("read %d: %v", offset, err)
		}
		var buf bytes.Buffer
		n, err := r.WriteTo(&buf)
		r.Close()
		if err != nil || n != r.Len() {
			t.Fatalf("read %d: WriteTo %d of %d: %v", offset, n, r.Len(), err)
		}
		if n == 0 {
			t.Fatalf("read %d: nothing returned below the log end %d", offset, end)
		}
		asked := offset
		sc := record.NewScanner(bytes.NewReader(buf.Bytes()), 0, n, record.ScanOptions{Validate: true})
		first := true
		for sc.Next() {
			e := sc.Entry()
			if first && (e.BaseOffset > offset || e.LastOffset < offset) && e.BaseOffset <= offset {
				t.Fatalf("read %d: first batch %d..%d does not hold it", offset, e.BaseOffset, e.LastOffset)
			}
			first = false
			if err := it.Reset(e.Data); err != nil {
				t.Fatal(err)
			}
			for it.Next() {
				x := it.Record()
				if x.Offset >= offset {
					out = append(out, rec{offset: x.Offset, ts: x.Timestamp, key: append([]byte(nil), x.Key...), value: append([]byte(nil), x.Value...)})
				}
			}
			if it.Err() != nil {
				t.Fatal(it.Err())
			}
			offset = e.LastOffset + 1
		}
		if sc.Err() != nil {
			t.Fatalf("read returned a partial batch: %v", sc.Err())
		}
		if or, ok := r.(backend.OffsetRange); ok && or.NextOffset() != offset {
			t.Fatalf("read %d: NextOffset %d, but its batches end at %d", asked, or.NextOffset(), offset)
		}
	}
	return out
}

// commitAll moves the high watermark to the log end, as a broker does once
// replicas have the records (a tiered partition may then offload them).
func commitAll(t *testing.T, p backend.Partition) {
	t.Helper()
	if err := p.SetHighWatermark(p.Offsets().LogEnd); err != nil {
		t.Fatal(err)
	}
}

func sameRecords(t *testing.T, what string, got, want []rec) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d records, want %d", what, len(got), len(want))
	}
	for i := range got {
		g, w := got[i], want[i]
		if g.offset != w.offset || g.ts != w.ts || !bytes.Equal(g.key, w.key) || !bytes.Equal(g.value, w.value) {
			t.Fatalf("%s: record %d is offset %d ts %d, want offset %d ts %d (or its bytes differ)", what, i, g.offset, g.ts, w.offset, w.ts)
		}
	}
}

func testRoundTrip(t *testing.T, h Harness) {
	p := h.Open(t, Config(t, "segment.bytes", "16384", "index.interval.bytes", "1024"))
	defer p.Close()
	rng := rand.New(rand.NewPCG(1, 1))
	var m model
	for _, c := range []record.Codec{record.None, record.GZIP, record.Snappy, record.LZ4, record.ZSTD} {
		appendBatches(t, p, &m, rng, 12, 20, c)
	}
	commitAll(t, p)
	if got := p.Offsets().LogEnd; got != int64(len(m.recs)) {
		t.Fatalf("log end %d, want %d", got, len(m.recs))
	}
	sameRecords(t, "full read", readFrom(t, p, 0, 0), m.recs)
	for _, r := range m.recs {
		got := readFrom(t, p, r.offset, 1)
		sameRecords(t, fmt.Sprintf("read at %d", r.offset), got[:1], []rec{r})
	}
}

func testReadBounds(t *testing.T, h Harness) {
	p := h.Open(t, Config(t))
	defer p.Close()
	var m model
	appendBatches(t, p, &m, rand.New(rand.NewPCG(2, 2)), 5, 5, record.None)
	end := p.Offsets().LogEnd
	r, err := p.Read(ctx, end, backend.ReadOptions{})
	if err != nil || r.Len() != 0 {
		t.Fatalf("read at the log end: len %v, err %v; want empty", r, err)
	}
	r.Close()
	var oor *backend.OffsetOutOfRangeError
	if _, err := p.Read(ctx, end+1, backend.ReadOptions{}); !errors.As(err, &oor) || oor.LogEnd != end {
		t.Fatalf("read past the end: %v", err)
	}
	if _, err := p.Read(ctx, -1, backend.ReadOptions{}); !errors.Is(err, backend.ErrOffsetOutOfRange) {
		t.Fatalf("read at -1: %v", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := p.Read(cctx, 0, backend.ReadOptions{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("read with a cancelled context: %v", err)
	}
}

func testMaxBytes(t *testing.T, h Harness) {
	p := h.Open(t, Config(t))
	defer p.Close()
	var m model
	appendBatches(t, p, &m, rand.New(rand.NewPCG(3, 3)), 20, 10, record.None)
	commitAll(t, p)
	r, err := p.Read(ctx, 0, backend.ReadOptions{MaxBytes: 1})
	if err != nil {
		t.Fatal(err)
	}
	if r.Len() != 0 {
		t.Fatalf("MaxBytes 1 without MinOneBatch returned %d bytes", r.Len())
	}
	r.Close()
	r, err = p.Read(ctx, 0, backend.ReadOptions{MaxBytes: 1, MinOneBatch: true})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	r.WriteTo(&buf)
	r.Close()
	b, err := record.Parse(buf.Bytes())
	if err != nil || len(b) != buf.Len() {
		t.Fatalf("MinOneBatch returned %d bytes, not exactly one batch (%v)", buf.Len(), err)
	}
	for _, max := range []int{100, 1000, 5000} {
		r, err := p.Read(ctx, 0, backend.ReadOptions{MaxBytes: max})
		if err != nil {
			t.Fatal(err)
		}
		if r.Len() > int64(max) {
			t.Fatalf("MaxBytes %d returned %d bytes", max, r.Len())
		}
		var buf bytes.Buffer
		r.WriteTo(&buf)
		r.Close()
		sc := record.NewScanner(bytes.NewReader(buf.Bytes()), 0, int64(buf.Len()), record.ScanOptions{Validate: true})
		for sc.Next() {
		}
		if sc.Err() != nil {
			t.Fatalf("MaxBytes %d: not whole batches: %v", max, sc.Err())
		}
	}
}

// testIsolation: a read stops at its isolation's bound, before the batch
// that holds it; ReadHighWatermark with a high watermark of 0 returns
// nothing (the zero a broker passes for a new partition); ReadCommitted
// without transactions reads to the high watermark and reports no aborted
// transactions.
func testIsolation(t *testing.T, h Harness) {
	p := h.Open(t, Config(t, "segment.bytes", "4096"))
	defer p.Close()
	var m model
	appendBatches(t, p, &m, rand.New(rand.NewPCG(31, 31)), 20, 10, record.None)
	for _, iso := range []backend.Isolation{backend.ReadHighWatermark, backend.ReadCommitted} {
		r, err := p.Read(ctx, 0, backend.ReadOptions{Isolation: iso, MinOneBatch: true})
		if err != nil {
			t.Fatal(err)
		}
		if r.Len() != 0 {
			t.Fatalf("isolation %d with the high watermark at 0 returned %d bytes", iso, r.Len())
		}
		r.Close()
	}
	if r, err := p.Read(ctx, 0, backend.ReadOptions{}); err != nil || r.Len() == 0 {
		t.Fatalf("a read to the log end returned %v, %v", r, err)
	} else {
		r.Close()
	}
	hw := m.recs[len(m.recs)/2].offset
	if err := p.SetHighWatermark(hw); err != nil {
		t.Fatal(err)
	}
	if o := p.Offsets(); o.LastStableOffset != o.HighWatermark {
		t.Fatalf("without transactions the last stable offset %d is not the high watermark %d", o.LastStableOffset, o.HighWatermark)
	}
	for _, iso := range []backend.Isolation{backend.ReadHighWatermark, backend.ReadCommitted} {
		got := 0
		for off := int64(0); off < hw; {
			r, err := p.Read(ctx, off, backend.ReadOptions{Isolation: iso, MaxBytes: 1 << 20})
			if err != nil {
				t.Fatal(err)
			}
			if a, ok := r.(backend.Aborted); iso == backend.ReadCommitted && (!ok || len(a.AbortedTransactions()) != 0) {
				t.Fatalf("a read_committed Records does not report aborted transactions (implements Aborted: %v)", ok)
			}
			var buf bytes.Buffer
			r.WriteTo(&buf)
			r.Close()
			if buf.Len() == 0 {
				break
			}
			sc := record.NewScanner(bytes.NewReader(buf.Bytes()), 0, int64(buf.Len()), record.ScanOptions{})
			for sc.Next() {
				if sc.Entry().LastOffset >= hw {
					t.Fatalf("isolation %d with the high watermark at %d returned a batch ending at %d", iso, hw, sc.Entry().LastOffset)
				}
				off = sc.Entry().LastOffset + 1
				got++
			}
		}
		if got == 0 {
			t.Fatalf("isolation %d returned nothing below the high watermark", iso)
		}
	}
}

// testReadThroughAtByteLimits reads a log of many segments and dense
// indexes from start to end at several byte limits: every record comes
// back once, and each read's NextOffset (where Records report one) is
// where its batches end, wherever the limit falls.
func testReadThroughAtByteLimits(t *testing.T, h Harness) {
	p := h.Open(t, Config(t, "segment.bytes", "65536", "index.interval.bytes", "512"))
	defer p.Close()
	var m model
	appendBatches(t, p, &m, rand.New(rand.NewPCG(8, 8)), 300, 10, record.None)
	commitAll(t, p)
	start := p.Offsets().LogStart
	for _, maxBytes := range []int{1, 700, 3000, 10_000, 100_000} {
		sameRecords(t, fmt.Sprintf("read through at %d bytes a read", maxBytes), readFromBytes(t, p, start, 0, maxBytes), m.from(start))
	}
}

func testOffsetForTimestamp(t *testing.T, h Harness) {
	p := h.Open(t, Config(t, "segment.bytes", "8192", "index.interval.bytes", "512"))
	defer p.Close()
	var m model
	appendBatches(t, p, &m, rand.New(rand.NewPCG(4, 4)), 60, 8, record.None)
	commitAll(t, p)
	lo, hi := m.recs[0].ts-10, m.recs[len(m.recs)-1].ts+10
	for _, r := range m.recs {
		hi = max(hi, r.ts+10)
	}
	for ts := lo; ts <= hi; ts += 7 {
		wantOff, wantTs, wantFound := int64(0), int64(0), false
		for _, r := range m.recs {
			if r.ts >= ts {
				wantOff, wantTs, wantFound = r.offset, r.ts, true
				break
			}
		}
		off, rts, found, err := p.OffsetForTimestamp(ctx, ts)
		if err != nil {
			t.Fatal(err)
		}
		if found != wantFound || (found && (off != wantOff || rts != wantTs)) {
			t.Fatalf("OffsetForTimestamp(%d) = %d (ts %d), %v; want %d (ts %d), %v", ts, off, rts, found, wantOff, wantTs, wantFound)
		}
	}
}

func testRollBoundaries(t *testing.T, h Harness) {
	p := h.Open(t, Config(t, "segment.bytes", "2048", "index.interval.bytes", "100"))
	defer p.Close()
	var m model
	appendBatches(t, p, &m, rand.New(rand.NewPCG(5, 5)), 80, 6, record.None)
	commitAll(t, p)
	sameRecords(t, "full read", readFrom(t, p, 0, 0), m.recs)
	for _, r := range m.recs {
		got := readFrom(t, p, r.offset, 1)
		if len(got) == 0 || got[0].offset != r.offset {
			t.Fatalf("read at %d", r.offset)
		}
	}
}

func testDeleteRecordsBefore(t *testing.T, h Harness) {
	p := h.Open(t, Config(t, "segment.bytes", "4096"))
	defer p.Close()
	var m model
	appendBatches(t, p, &m, rand.New(rand.NewPCG(6, 6)), 40, 6, record.None)
	end := p.Offsets().LogEnd
	if err := p.DeleteRecordsBefore(ctx, end/2); !errors.Is(err, backend.ErrOffsetOutOfRange) {
		t.Fatalf("DeleteRecordsBefore above the high watermark: %v", err)
	}
	if err := p.SetHighWatermark(end); err != nil {
		t.Fatal(err)
	}
	cut := end / 2
	if err := p.DeleteRecordsBefore(ctx, cut); err != nil {
		t.Fatal(err)
	}
	if o := p.Offsets(); o.LogStart != cut {
		t.Fatalf("log start %d, want %d", o.LogStart, cut)
	}
	if _, err := p.Read(ctx, cut-1, backend.ReadOptions{}); !errors.Is(err, backend.ErrOffsetOutOfRange) {
		t.Fatalf("read below the log start: %v", err)
	}
	sameRecords(t, "read from the log start", readFrom(t, p, cut, 0), m.from(cut))
	off, _, found, err := p.OffsetForTimestamp(ctx, 0)
	if err != nil || !found || off != cut {
		t.Fatalf("OffsetForTimestamp(0) after DeleteRecordsBefore = %d, %v, %v; want %d", off, found, err, cut)
	}
}

func testTruncateTo(t *testing.T, h Harness) {
	p := h.Open(t, Config(t, "segment.bytes", "4096"))
	defer p.Close()
	rng := rand.New(rand.NewPCG(7, 7))
	var m model
	appendBatches(t, p, &m, rng, 40, 1, record.None) // single-record batches: every offset is a boundary
	for _, cut := range []int64{35, 20, 3} {
		if err := p.TruncateTo(cut); err != nil {
			t.Fatal(err)
		}
		if o := p.Offsets(); o.LogEnd != cut {
			t.Fatalf("log end after TruncateTo(%d): %d", cut, o.LogEnd)
		}
		m.recs = m.recs[:cut]
		sameRecords(t, fmt.Sprintf("after TruncateTo(%d)", cut), readFrom(t, p, 0, 0), m.recs)
		appendBatches(t, p, &m, rng, 3, 4, record.None)
		sameRecords(t, "append after truncation", readFrom(t, p, 0, 0), m.recs)
		m.recs = m.recs[:cut]
		if err := p.TruncateTo(cut); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.TruncateTo(1 << 40); err != nil || p.Offsets().LogEnd != 3 {
		t.Fatalf("TruncateTo past the end: %v, log end %d", err, p.Offsets().LogEnd)
	}
}

func testReopen(t *testing.T, h Harness) {
	c := Config(t, "segment.bytes", "4096")
	p := h.Open(t, c)
	var m model
	rng := rand.New(rand.NewPCG(8, 8))
	appendBatches(t, p, &m, rng, 30, 5, record.ZSTD)
	p.SetHighWatermark(int64(len(m.recs)) - 3)
	before := p.Offsets()
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	p = h.Open(t, c)
	defer p.Close()
	if after := p.Offsets(); after.LogEnd != before.LogEnd || after.LogStart != before.LogStart {
		t.Fatalf("offsets after reopen %+v, before %+v", after, before)
	}
	sameRecords(t, "after reopen", readFrom(t, p, 0, 0), m.recs)
	appendBatches(t, p, &m, rng, 5, 5, record.None)
	sameRecords(t, "append after reopen", readFrom(t, p, 0, 0), m.recs)
}

func testFollowerAppend(t *testing.T, h Harness) {
	p := h.Open(t, Config(t))
	defer p.Close()
	var b record.Builder
	mk := func(base int64, n int, epoch int32) []byte {
		hd := record.NewBatchHeader()
		hd.BaseOffset, hd.PartitionLeaderEpoch = base, epoch
		b.Reset(hd)
		for i := 0; i < n; i++ {
			b.Append(int64(i), nil, []byte("f"), nil)
		}
		out, _ := b.Build()
		return append([]byte(nil), out...)
	}
	chunk := append(mk(0, 3, 1), mk(3, 2, 2)...)
	if _, err := p.Append(ctx, chunk, backend.AppendOptions{}); err != nil {
		t.Fatal(err)
	}
	if p.Offsets().LogEnd != 5 {
		t.Fatalf("log end %d after a follower chunk", p.Offsets().LogEnd)
	}
	if _, err := p.Append(ctx, mk(2, 1, 2), backend.AppendOptions{}); !errors.Is(err, backend.ErrInvalidRecord) {
		t.Fatalf("follower append below the log end: %v", err)
	}
	if _, err := p.Append(ctx, append(mk(10, 2, 2), mk(11, 1, 2)...), backend.AppendOptions{}); !errors.Is(err, backend.ErrInvalidRecord) {
		t.Fatalf("follower batches out of order: %v", err)
	}
	// A gap (the leader compacted) is accepted.
	if _, err := p.Append(ctx, mk(9, 1, 2), backend.AppendOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := readFrom(t, p, 5, 0); len(got) != 1 || got[0].offset != 9 {
		t.Fatalf("read across the gap: %+v", got)
	}
}

func testBadInput(t *testing.T, h Harness) {
	p := h.Open(t, Config(t, "max.message.bytes", "4000"))
	defer p.Close()
	var m model
	appendBatches(t, p, &m, rand.New(rand.NewPCG(9, 9)), 3, 3, record.None)
	var b record.Builder
	b.Reset(record.NewBatchHeader())
	b.Append(1, []byte("k"), []byte("v"), nil)
	good, _ := b.Build()
	good = append(record.Batch(nil), good...)
	big := record.NewBatchHeader()
	b.Reset(big)
	for i := 0; i < 50; i++ {
		b.Append(1, nil, bytes.Repeat([]byte("x"), 100), nil)
	}
	large, _ := b.Build()
	large = append(record.Batch(nil), large...)
	flip := func(i int) []byte { c := append([]byte(nil), good...); c[i] ^= 0x5a; return c }
	cases := []struct {
		name string
		data []byte
		want error
	}{
		{"crc", flip(len(good) - 2), backend.ErrCorruptRecord},
		// An unknown magic is corrupt (Kafka's CORRUPT_MESSAGE); a legacy
		// one is a message set a produce request cannot carry
		// (INVALID_RECORD).
		{"magic", flip(16), backend.ErrCorruptRecord},
		{"legacy magic", resum(func() []byte { c := append([]byte(nil), good...); c[16] = 1; return c }()), backend.ErrInvalidRecord},
		{"length", flip(11), backend.ErrCorruptRecord},
		{"truncated", good[:40], backend.ErrCorruptRecord},
		{"trailing garbage", append(append([]byte(nil), good...), 1, 2, 3), backend.ErrCorruptRecord},
		{"too large", large, backend.ErrRecordTooLarge},
		{"good then bad", append(append([]byte(nil), good...), flip(30)...), backend.ErrCorruptRecord},
	}
	for _, c := range cases {
		before := p.Offsets()
		_, err := p.Append(ctx, c.data, backend.AppendOptions{AssignOffsets: true})
		if !errors.Is(err, c.want) {
			t.Errorf("%s: err %v, want %v", c.name, err, c.want)
		}
		if p.Offsets() != before {
			t.Errorf("%s: a rejected append changed the offsets", c.name)
		}
	}
	sameRecords(t, "after rejected appends", readFrom(t, p, 0, 0), m.recs)
}

// testConcurrentReaders reads at random offsets while a writer appends,
// rolls and moves the log start: every read MUST return whole, valid
// batches, starting with the batch that holds the offset asked, and every
// batch MUST hold exactly the records the writer appended at its offsets
// (same timestamps, keys and values).
func testConcurrentReaders(t *testing.T, h Harness) {
	p := h.Open(t, Config(t, "segment.bytes", "4096", "file.delete.delay.ms", "0"))
	defer p.Close()
	// mu guards m. The writer holds it across each append and its record
	// in m, so a reader that takes it after a read finds in m every record
	// the read can have returned. Records in m are never changed once
	// appended: a reader keeps a copy of the slice, not of the records.
	var mu sync.Mutex
	var m model
	rng := rand.New(rand.NewPCG(10, 10))
	appendBatches(t, p, &m, rng, 10, 5, record.None)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func(seed uint64) {
			defer wg.Done()
			r := rand.New(rand.NewPCG(seed, seed))
			for {
				select {
				case <-stop:
					return
				default:
				}
				o := p.Offsets()
				if o.LogEnd == o.LogStart {
					continue
				}
				off := o.LogStart + r.Int64N(o.LogEnd-o.LogStart)
				recs, err := p.Read(ctx, off, backend.ReadOptions{MaxBytes: 8192, MinOneBatch: true})
				if errors.Is(err, backend.ErrOffsetOutOfRange) {
					continue // retention moved the log start meanwhile
				}
				if err != nil {
					errs <- err
					return
				}
				var buf bytes.Buffer
				_, err = recs.WriteTo(&buf)
				recs.Close()
				if err != nil {
					errs <- fmt.Errorf("WriteTo at %d: %w", off, err)
					return
				}
				mu.Lock()
				want := m.recs
				mu.Unlock()
				ranges, err := checkBatches(buf.Bytes(), want, true)
				if err != nil {
					errs <- fmt.Errorf("read at %d: %w", off, err)
					return
				}
				if len(ranges) == 0 || ranges[0][0] > off || ranges[0][1] < off {
					errs <- fmt.Errorf("read at %d (log %d..%d) returned batches %v, not starting with the one that holds it", off, o.LogStart, o.LogEnd, ranges)
					return
				}
			}
		}(uint64(g))
	}
	deadline := time.Now().Add(500 * time.Millisecond)
	for i := 0; time.Now().Before(deadline); i++ {
		func() {
			mu.Lock()
			defer mu.Unlock() // appendBatches may fail the test
			appendBatches(t, p, &m, rng, 1, 5, record.None)
		}()
		end := p.Offsets().LogEnd
		p.SetHighWatermark(end)
		if i%10 == 9 {
			if err := p.DeleteRecordsBefore(ctx, end-20); err != nil {
				t.Error(err)
				break
			}
		}
	}
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func testClosed(t *testing.T, h Harness) {
	p := h.Open(t, Config(t, "segment.bytes", "1024"))
	var m model
	appendBatches(t, p, &m, rand.New(rand.NewPCG(11, 11)), 20, 2, record.None)
	commitAll(t, p) // a tiered partition offloads: offset 0 is then read from its bucket
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	for _, off := range []int64{0, m.recs[len(m.recs)-1].offset} {
		if r, err := p.Read(ctx, off, backend.ReadOptions{}); !errors.Is(err, backend.ErrClosed) {
			t.Errorf("Read of offset %d after Close: %v (%v)", off, err, r)
		}
	}
	if _, _, _, err := p.OffsetForTimestamp(ctx, 0); !errors.Is(err, backend.ErrClosed) {
		t.Errorf("OffsetForTimestamp after Close: %v", err)
	}
	if err := p.SetHighWatermark(1); !errors.Is(err, backend.ErrClosed) {
		t.Errorf("SetHighWatermark after Close: %v", err)
	}
	if err := p.DeleteRecordsBefore(ctx, 1); !errors.Is(err, backend.ErrClosed) {
		t.Errorf("DeleteRecordsBefore after Close: %v", err)
	}
	if _, err := p.Append(ctx, []byte{1}, backend.AppendOptions{}); !errors.Is(err, backend.ErrClosed) {
		t.Errorf("Append after Close: %v", err)
	}
	if err := p.TruncateTo(0); !errors.Is(err, backend.ErrClosed) {
		t.Errorf("TruncateTo after Close: %v", err)
	}
	if err := p.Flush(); !errors.Is(err, backend.ErrClosed) {
		t.Errorf("Flush after Close: %v", err)
	}
}

// held is a Records a reader holds, with the records it must yield.
type held struct {
	what string
	r    backend.Records
	want []rec
}

// hold reads at offset and keeps the Records unread, noting the records
// the bytes must hold: those of m from the batch holding offset on, as far
// as the read reaches (checked when it is finally written out).
func hold(t *testing.T, p backend.Partition, m *model, offset int64, what string) held {
	t.Helper()
	r, err := p.Read(ctx, offset, backend.ReadOptions{MaxBytes: 4096, MinOneBatch: true})
	if err != nil {
		t.Fatalf("%s: read %d: %v", what, offset, err)
	}
	return held{what: what, r: r, want: append([]rec(nil), m.recs...)}
}

// check writes the held Records out and compares every record they hold
// with the model as it was when they were read.
func (h held) check(t *testing.T) {
	t.Helper()
	defer h.r.Close()
	var buf bytes.Buffer
	n, err := h.r.WriteTo(&buf)
	if err != nil || n != h.r.Len() {
		t.Fatalf("%s: WriteTo wrote %d of %d bytes: %v", h.what, n, h.r.Len(), err)
	}
	if n == 0 {
		t.Fatalf("%s: the held read returned nothing", h.what)
	}
	if _, err := checkBatches(buf.Bytes(), h.want, false); err != nil {
		t.Fatalf("%s: %v", h.what, err)
	}
}

// checkBatches validates data (the bytes a read returned: whole batches)
// and compares every record in it with the record want (sorted by offset)
// holds at its offset: same timestamp, key and value. With whole (no
// cleaner ran), each batch MUST also hold every record want has in its
// offset range, no more and no fewer. It returns the batches' offset ranges.
// It calls no t methods, so a reader goroutine may use it.
func checkBatches(data []byte, want []rec, whole bool) ([][2]int64, error) {
	var ranges [][2]int64
	sc := record.NewScanner(bytes.NewReader(data), 0, int64(len(data)), record.ScanOptions{Validate: true})
	var it record.Iterator
	for sc.Next() {
		e := sc.Entry()
		ranges = append(ranges, [2]int64{e.BaseOffset, e.LastOffset})
		if err := it.Reset(e.Data); err != nil {
			return ranges, fmt.Errorf("batch %d..%d: %w", e.BaseOffset, e.LastOffset, err)
		}
		i := sort.Search(len(want), func(i int) bool { return want[i].offset >= e.BaseOffset })
		for it.Next() {
			x := it.Record()
			for !whole && i < len(want) && want[i].offset < x.Offset {
				i++
			}
			if whole && i < len(want) && want[i].offset < x.Offset {
				return ranges, fmt.Errorf("batch %d..%d lacks offset %d, which was written there", e.BaseOffset, e.LastOffset, want[i].offset)
			}
			if i >= len(want) || want[i].offset != x.Offset {
				return ranges, fmt.Errorf("batch %d..%d holds offset %d (ts %d), which is not a record written there", e.BaseOffset, e.LastOffset, x.Offset, x.Timestamp)
			}
			w := want[i]
			switch {
			case x.Timestamp != w.ts:
				return ranges, fmt.Errorf("batch %d..%d: offset %d has timestamp %d, written %d", e.BaseOffset, e.LastOffset, x.Offset, x.Timestamp, w.ts)
			case !bytes.Equal(x.Key, w.key):
				return ranges, fmt.Errorf("batch %d..%d: offset %d has key %q, written %q", e.BaseOffset, e.LastOffset, x.Offset, x.Key, w.key)
			case !bytes.Equal(x.Value, w.value):
				return ranges, fmt.Errorf("batch %d..%d: offset %d has a value (%d bytes) that is not the one written (%d bytes)", e.BaseOffset, e.LastOffset, x.Offset, len(x.Value), len(w.value))
			}
			i++
		}
		if it.Err() != nil {
			return ranges, fmt.Errorf("batch %d..%d: %w", e.BaseOffset, e.LastOffset, it.Err())
		}
		if whole && i < len(want) && want[i].offset <= e.LastOffset {
			return ranges, fmt.Errorf("batch %d..%d lacks offset %d, which was written there", e.BaseOffset, e.LastOffset, want[i].offset)
		}
	}
	if sc.Err() != nil {
		return ranges, fmt.Errorf("damaged bytes: %w", sc.Err())
	}
	return ranges, nil
}

// testHeldRecords holds Records (read, not yet written out) across a clean
// reopen's first append, rolls, retention, truncations of the last and of
// a closed segment, and a cleaning round, then writes each out: every one
// MUST still hold the bytes it held when it was read (backend.Partition:
// a Records stays readable until it is closed).
func testHeldRecords(t *testing.T, h Harness) {
	kv := []string{"segment.bytes", "2048", "file.delete.delay.ms", "0"}
	compactor, canCompact := h.(Compactor)
	if canCompact {
		kv = append(kv, "cleanup.policy", "compact,delete", "min.cleanable.dirty.ratio", "0.01")
	}
	c := Config(t, kv...)
	p := h.Open(t, c)
	var m model
	rng := rand.New(rand.NewPCG(12, 12))
	appendBatches(t, p, &m, rng, 40, 4, record.None)
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	// Read the last segment after a clean reopen, then append (to a
	// segment with room: no roll) and write the read out: the first append
	// makes that segment writable again, and MUST NOT cut its readers.
	big := Config(t, append(kv, "segment.bytes", "1048576")...)
	p = h.Open(t, big)
	first := hold(t, p, &m, p.Offsets().LogEnd-1, "read of the last segment before the first append after a reopen")
	appendBatches(t, p, &m, rng, 1, 2, record.None)
	first.check(t)
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	p = h.Open(t, c)
	defer p.Close()
	var end int64
	var hs []held
	hs = append(hs, hold(t, p, &m, 0, "read of the first segment before retention"))
	hs = append(hs, hold(t, p, &m, m.recs[len(m.recs)/2].offset, "read of a middle segment before truncations"))
	appendBatches(t, p, &m, rng, 20, 4, record.None) // rolls
	// Commit half: truncations happen above the high watermark.
	if err := p.SetHighWatermark(m.recs[len(m.recs)/2].offset); err != nil {
		t.Fatal(err)
	}
	hs = append(hs, hold(t, p, &m, p.Offsets().LogEnd-1, "read of the last segment before a truncation into it"))
	// Truncate into the last segment, then into a closed one.
	if err := p.TruncateTo(p.Offsets().LogEnd - 1); err != nil {
		t.Fatal(err)
	}
	m.recs = m.recs[:len(m.recs)-1]
	cut := m.recs[len(m.recs)*3/4].offset
	if err := p.TruncateTo(cut); err != nil {
		t.Fatal(err)
	}
	end = p.Offsets().LogEnd
	for len(m.recs) > 0 && m.recs[len(m.recs)-1].offset >= end {
		m.recs = m.recs[:len(m.recs)-1]
	}
	appendBatches(t, p, &m, rng, 10, 4, record.None)
	commitAll(t, p)
	if canCompact {
		hs = append(hs, hold(t, p, &m, m.recs[len(m.recs)/3].offset, "read before a cleaning round"))
		compactor.Compact(t, p)
	}
	// Retention: the first segments go.
	if err := p.DeleteRecordsBefore(ctx, m.recs[len(m.recs)/2].offset); err != nil {
		t.Fatal(err)
	}
	for _, x := range hs {
		x.check(t)
	}
}
