package record_test

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/tierlog/tierlog/record"
)

func TestCRC32CCheckValue(t *testing.T) {
	if got := record.CRC32C([]byte("123456789")); got != 0xE3069283 {
		t.Fatalf("crc32c(123456789) = %#x, want 0xE3069283", got)
	}
}

// The COMMIT marker test vector from the storage reference (built from the
// spec): baseOffset 10, pid 1000, epoch 0, coordinatorEpoch 5, ts 1700000000000.
const commitMarkerHex = "000000000000000a000000420000000002fc84b0340030000000000000018bcfe568000000018bcfe5680000000000000003e80000ffffffff000000012000000008000000010c00000000000500"

func TestEndTxnMarkerGolden(t *testing.T) {
	want, _ := hex.DecodeString(commitMarkerHex)
	var b record.Builder
	got, err := b.BuildEndTxnMarker(record.EndTxnMarker{
		BaseOffset: 10, PartitionLeaderEpoch: 0, ProducerID: 1000, ProducerEpoch: 0,
		CoordinatorEpoch: 5, Commit: true, Timestamp: 1700000000000,
	})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("marker bytes\n got %x\nwant %x", []byte(got), want)
	}
	if err := got.Validate(); err != nil {
		t.Fatal(err)
	}
	if got.CRC() != 0xfc84b034 || !got.IsControl() || !got.IsTransactional() || got.BaseSequence() != -1 {
		t.Fatalf("header fields wrong: crc %#x control %v txn %v seq %d", got.CRC(), got.IsControl(), got.IsTransactional(), got.BaseSequence())
	}
	var it record.Iterator
	if err := it.Reset(got); err != nil || !it.Next() {
		t.Fatalf("reset %v next %v", err, it.Err())
	}
	r := it.Record()
	ct, err := record.ParseControlKey(r.Key)
	if err != nil || ct != record.ControlCommit {
		t.Fatalf("control type %v err %v", ct, err)
	}
	ce, err := record.ParseEndTxnMarkerValue(r.Value)
	if err != nil || ce != 5 {
		t.Fatalf("coordinator epoch %d err %v", ce, err)
	}
}

// buildTestBatch builds a batch of n records with varied keys, values,
// headers and timestamps.
func buildTestBatch(t testing.TB, b *record.Builder, codec record.Codec, base int64, n int, rng *rand.Rand) record.Batch {
	t.Helper()
	h := record.NewBatchHeader()
	h.BaseOffset = base
	h.Codec = codec
	h.PartitionLeaderEpoch = 3
	b.Reset(h)
	ts := int64(1_700_000_000_000)
	for i := 0; i < n; i++ {
		var key, val []byte
		if rng.IntN(4) != 0 {
			key = fmt.Appendf(nil, "key-%d", rng.IntN(1000))
		}
		if rng.IntN(8) != 0 {
			val = bytes.Repeat([]byte{byte('a' + i%26)}, rng.IntN(300))
		}
		var hs []record.Header
		for j := rng.IntN(3); j > 0; j-- {
			hs = append(hs, record.Header{Key: []byte("h"), Value: []byte{byte(j)}})
		}
		b.Append(ts+int64(rng.IntN(2000))-1000, key, val, hs)
	}
	batch, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	return append(record.Batch(nil), batch...)
}

func TestBuildIterateRoundTripAllCodecs(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var b record.Builder
	for _, c := range []record.Codec{record.None, record.GZIP, record.Snappy, record.LZ4, record.ZSTD} {
		t.Run(c.String(), func(t *testing.T) {
			batch := buildTestBatch(t, &b, c, 100, 500, rng)
			if err := batch.Validate(); err != nil {
				t.Fatal(err)
			}
			if batch.Codec() != c || batch.BaseOffset() != 100 || batch.LastOffset() != 599 || batch.NumRecords() != 500 {
				t.Fatalf("header: codec %v base %d last %d n %d", batch.Codec(), batch.BaseOffset(), batch.LastOffset(), batch.NumRecords())
			}
			var it record.Iterator
			if err := it.Reset(batch); err != nil {
				t.Fatal(err)
			}
			maxTs := int64(-1)
			n := 0
			for it.Next() {
				r := it.Record()
				if r.Offset != int64(100+n) {
					t.Fatalf("offset %d, want %d", r.Offset, 100+n)
				}
				maxTs = max(maxTs, r.Timestamp)
				n++
			}
			if it.Err() != nil || n != 500 {
				t.Fatalf("n %d err %v", n, it.Err())
			}
			if maxTs != batch.MaxTimestamp() {
				t.Fatalf("max timestamp %d, header says %d", maxTs, batch.MaxTimestamp())
			}
		})
	}
}

// TestCorruptEveryByteInCRCRange flips each byte in the CRC range of a batch
// (and the CRC itself) and expects Validate to fail every time.
func TestCorruptEveryByteInCRCRange(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	var b record.Builder
	for _, c := range []record.Codec{record.None, record.ZSTD} {
		batch := buildTestBatch(t, &b, c, 0, 40, rng)
		for i := 17; i < len(batch); i++ {
			bad := append(record.Batch(nil), batch...)
			bad[i] ^= byte(1 + rng.IntN(255))
			err := bad.Validate()
			if !errors.Is(err, record.ErrCorrupt) {
				t.Fatalf("%v: flipping byte %d of %d: Validate = %v, want corruption", c, i, len(batch), err)
			}
		}
		// Outside the CRC: base offset and leader epoch may change freely.
		ok := append(record.Batch(nil), batch...)
		ok.SetBaseOffset(1 << 40)
		ok.SetPartitionLeaderEpoch(99)
		if err := ok.Validate(); err != nil {
			t.Fatalf("rewriting base offset and epoch broke the batch: %v", err)
		}
	}
}

// TestTruncateEveryPosition cuts a three-batch log at every byte position:
// a cut on a batch boundary is a clean end, any other cut a torn tail, and
// never corruption.
func TestTruncateEveryPosition(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	var b record.Builder
	var log []byte
	var bounds = map[int]bool{0: true}
	for i := 0; i < 3; i++ {
		log = append(log, buildTestBatch(t, &b, record.None, int64(i*10), 10, rng)...)
		bounds[len(log)] = true
	}
	for cut := 0; cut <= len(log); cut++ {
		s := record.NewScanner(bytes.NewReader(log[:cut]), 0, int64(cut), record.ScanOptions{Validate: true, BufferSize: 100})
		for s.Next() {
		}
		err := s.Err()
		if bounds[cut] {
			if err != nil || s.ValidEnd() != int64(cut) {
				t.Fatalf("cut %d on a boundary: err %v valid end %d", cut, err, s.ValidEnd())
			}
			continue
		}
		if !errors.Is(err, record.ErrTornTail) || errors.Is(err, record.ErrCorrupt) {
			t.Fatalf("cut %d: err %v, want a torn tail", cut, err)
		}
		if !bounds[int(s.ValidEnd())] || s.ValidEnd() > int64(cut) {
			t.Fatalf("cut %d: valid end %d is not the last whole batch", cut, s.ValidEnd())
		}
	}
}

func TestScannerCorruptionKinds(t *testing.T) {
	var b record.Builder
	rng := rand.New(rand.NewPCG(7, 8))
	good := buildTestBatch(t, &b, record.None, 0, 5, rng)
	tail := func(mut func(p []byte)) error {
		p := append(append([]byte(nil), good...), good...)
		mut(p[len(good):])
		s := record.NewScanner(bytes.NewReader(p), 0, int64(len(p)), record.ScanOptions{Validate: true})
		n := 0
		for s.Next() {
			n++
		}
		if n != 1 || s.ValidEnd() != int64(len(good)) {
			t.Fatalf("scanned %d entries to %d", n, s.ValidEnd())
		}
		return s.Err()
	}
	cases := []struct {
		name string
		mut  func(p []byte)
		want error
	}{
		{"zero-filled", func(p []byte) { clear(p) }, record.ErrBadSize},
		{"size below 14", func(p []byte) { binary.BigEndian.PutUint32(p[8:], 13) }, record.ErrBadSize},
		{"v2 size below 61", func(p []byte) { binary.BigEndian.PutUint32(p[8:], 40) }, record.ErrBadSize},
		{"magic 7", func(p []byte) { p[16] = 7 }, record.ErrBadMagic},
		{"crc", func(p []byte) { p[len(p)-1] ^= 0xff }, record.ErrCRCMismatch},
	}
	for _, c := range cases {
		err := tail(c.mut)
		var be *record.BatchError
		if !errors.Is(err, c.want) || !errors.Is(err, record.ErrCorrupt) || !errors.As(err, &be) || be.Position != int64(len(good)) {
			t.Errorf("%s: err %v, want %v at position %d", c.name, err, c.want, len(good))
		}
	}
}

func TestIteratorRejectsMalformedRecords(t *testing.T) {
	var b record.Builder
	b.Reset(record.NewBatchHeader())
	b.Append(1, []byte("k"), []byte("v"), []record.Header{{Key: []byte("h"), Value: nil}})
	batch, _ := b.Build()
	good := append(record.Batch(nil), batch...)
	fix := func(p record.Batch) record.Batch {
		binary.BigEndian.PutUint32(p[17:], p.ComputeCRC())
		return p
	}
	cases := map[string]func(p record.Batch) record.Batch{
		"count too high": func(p record.Batch) record.Batch { binary.BigEndian.PutUint32(p[57:], 2); return fix(p) },
		"trailing bytes": func(p record.Batch) record.Batch {
			p = append(p, 0)
			binary.BigEndian.PutUint32(p[8:], uint32(len(p)-12))
			return fix(p)
		},
		"record length past end": func(p record.Batch) record.Batch { p[61] = 0x7e; return fix(p) },
		"negative header count":  func(p record.Batch) record.Batch { p[len(p)-4] = 0x01; return fix(p) },
	}
	for name, mut := range cases {
		p := mut(append(record.Batch(nil), good...))
		if err := p.Validate(); err != nil && !errors.Is(err, record.ErrBadRecord) {
			t.Fatalf("%s: Validate: %v", name, err)
		}
		var it record.Iterator
		err := it.Reset(p)
		for err == nil && it.Next() {
		}
		if err == nil {
			err = it.Err()
		}
		if !errors.Is(err, record.ErrBadRecord) || !errors.Is(err, record.ErrCorrupt) {
			t.Errorf("%s: err %v, want a malformed record error", name, err)
		}
	}
}

func TestDecompressCap(t *testing.T) {
	var b record.Builder
	h := record.NewBatchHeader()
	for _, c := range []record.Codec{record.GZIP, record.Snappy, record.LZ4, record.ZSTD} {
		h.Codec = c
		b.Reset(h)
		for i := 0; i < 100; i++ {
			b.Append(0, nil, make([]byte, 10_000), nil)
		}
		batch, err := b.Build()
		if err != nil {
			t.Fatal(err)
		}
		var it record.Iterator
		it.Decompressor.Max = 100_000
		if err := it.Reset(batch); !errors.Is(err, record.ErrTooLarge) {
			t.Errorf("%v: err %v, want ErrTooLarge", c, err)
		}
		it.Decompressor.Max = 0
		if err := it.Reset(batch); err != nil {
			t.Errorf("%v: with the default cap: %v", c, err)
		}
	}
}

func TestLogAppendTimeRewrite(t *testing.T) {
	var b record.Builder
	b.Reset(record.NewBatchHeader())
	b.Append(5, nil, []byte("a"), nil)
	b.Append(7, nil, []byte("b"), nil)
	batch, _ := b.Build()
	batch.SetLogAppendTime(42)
	if err := batch.Validate(); err != nil {
		t.Fatal(err)
	}
	var it record.Iterator
	_ = it.Reset(batch)
	for it.Next() {
		if it.Record().Timestamp != 42 {
			t.Fatalf("record timestamp %d, want 42 (LogAppendTime)", it.Record().Timestamp)
		}
	}
	if batch.TimestampType() != record.LogAppendTime || batch.MaxTimestamp() != 42 {
		t.Fatal("attributes or max timestamp not rewritten")
	}
}

func TestBuilderAllocatesNothingPerRecord(t *testing.T) {
	var b record.Builder
	val := bytes.Repeat([]byte("x"), 100)
	key := []byte("key-00001")
	build := func() {
		b.Reset(record.NewBatchHeader())
		for b.SizeWith(1, key, val, nil) <= 16384 {
			b.Append(1, key, val, nil)
		}
		if _, err := b.Build(); err != nil {
			t.Fatal(err)
		}
	}
	build() // warm the buffers
	if allocs := testing.AllocsPerRun(50, build); allocs != 0 {
		t.Fatalf("building a 16 KiB batch allocates %.1f times, want 0", allocs)
	}
}

func TestParseCodec(t *testing.T) {
	for c := record.None; c <= record.ZSTD; c++ {
		got, err := record.ParseCodec(c.String())
		if err != nil || got != c {
			t.Fatalf("ParseCodec(%q) = %v, %v", c.String(), got, err)
		}
	}
	if _, err := record.ParseCodec("brotli"); !errors.Is(err, record.ErrUnknownCodec) {
		t.Fatalf("ParseCodec(brotli) err = %v", err)
	}
}

func TestBuildEmptyKeepsOffsetsAndProducer(t *testing.T) {
	var b record.Builder
	h := record.NewBatchHeader()
	h.BaseOffset, h.ProducerID, h.ProducerEpoch, h.BaseSequence, h.Codec = 100, 7, 2, 40, record.ZSTD
	h.PartitionLeaderEpoch = 3
	b.Reset(h)
	b.Append(5, []byte("k"), []byte("v"), nil) // ignored
	e := b.BuildEmpty(9, 1234)
	if err := e.Validate(); err != nil {
		t.Fatal(err)
	}
	if e.BaseOffset() != 100 || e.LastOffset() != 109 || e.NumRecords() != 0 || e.Codec() != record.None ||
		e.ProducerID() != 7 || e.ProducerEpoch() != 2 || e.BaseSequence() != 40 || e.PartitionLeaderEpoch() != 3 ||
		e.BaseTimestamp() != record.NoTimestamp || e.MaxTimestamp() != 1234 || len(e) != record.BatchHeaderSize {
		t.Fatalf("empty batch header wrong: % x", []byte(e))
	}
	var it record.Iterator
	if err := it.Reset(e); err != nil {
		t.Fatal(err)
	}
	if it.Next() || it.Err() != nil {
		t.Fatalf("an empty batch yields records (err %v)", it.Err())
	}
}

// TestIteratorSkipTo: after SkipTo(k), Next returns the first record at
// or after k, in every codec, with the records around it unchanged.
func TestIteratorSkipTo(t *testing.T) {
	for _, codec := range []record.Codec{record.None, record.GZIP, record.Snappy, record.LZ4, record.ZSTD} {
		var b record.Builder
		h := record.NewBatchHeader()
		h.BaseOffset, h.Codec = 1000, codec
		b.Reset(h)
		for i := range 50 {
			var hdrs []record.Header
			if i%3 == 0 {
				hdrs = []record.Header{{Key: []byte("h"), Value: []byte{byte(i)}}}
			}
			b.Append(int64(5000+i), []byte(fmt.Sprint("k", i)), []byte(fmt.Sprint("value-", i)), hdrs)
		}
		batch, err := b.Build()
		if err != nil {
			t.Fatal(err)
		}
		var it record.Iterator
		for _, target := range []int64{0, 1000, 1001, 1025, 1049, 1050, 2000} {
			if err := it.Reset(batch); err != nil {
				t.Fatal(err)
			}
			it.SkipTo(target)
			ok := it.Next()
			want := max(target, 1000)
			if want > 1049 {
				if ok {
					t.Fatalf("%v: SkipTo(%d) then Next gave offset %d, want none", codec, target, it.Record().Offset)
				}
				continue
			}
			r := it.Record()
			if !ok || r.Offset != want || string(r.Value) != fmt.Sprint("value-", want-1000) || r.Timestamp != 5000+want-1000 {
				t.Fatalf("%v: SkipTo(%d) then Next: ok %v, %+v (err %v)", codec, target, ok, r, it.Err())
			}
			n := 1
			for it.Next() {
				n++
			}
			if it.Err() != nil || int64(n) != 1050-want {
				t.Fatalf("%v: after SkipTo(%d), %d records then %v", codec, target, n, it.Err())
			}
		}
	}
}

// SkipTo reads the common record's framing (one- and two-byte varints)
// on a fast path and any other through head: over records of every
// varint width (values up to 20 KB, timestamp deltas up to 2^40, offset
// deltas with gaps of up to 100,000), SkipTo(k) then Next gives what a
// full iteration gives for the first record at or after k.
func TestIteratorSkipToEveryWidth(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	var b record.Builder
	h := record.NewBatchHeader()
	h.BaseOffset = 5000
	b.Reset(h)
	delta := int32(-1)
	for range 300 {
		delta += 1 + int32(rng.IntN(3)*rng.IntN(2)*rng.IntN(50_000))
		ts := int64(1_700_000_000_000)
		switch rng.IntN(3) {
		case 1:
			ts += rng.Int64N(100)
		case 2:
			ts += rng.Int64N(1 << 40)
		}
		value := make([]byte, []int{0, 10, 100, 3000, 20_000}[rng.IntN(5)])
		if err := b.AppendAt(delta, ts, nil, value, nil); err != nil {
			t.Fatal(err)
		}
	}
	batch, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	var all []record.Record
	var it record.Iterator
	if err := it.Reset(batch); err != nil {
		t.Fatal(err)
	}
	for it.Next() {
		all = append(all, *it.Record())
	}
	if it.Err() != nil || len(all) != 300 {
		t.Fatalf("%d records, %v", len(all), it.Err())
	}
	for target := int64(4990); target <= all[len(all)-1].Offset+2; target += 1 + rng.Int64N(400) {
		if err := it.Reset(batch); err != nil {
			t.Fatal(err)
		}
		it.SkipTo(target)
		i, _ := slices.BinarySearchFunc(all, target, func(r record.Record, o int64) int { return cmp.Compare(r.Offset, o) })
		ok := it.Next()
		if i == len(all) {
			if ok || it.Err() != nil {
				t.Fatalf("SkipTo(%d) past the last record, then Next: %v, %v", target, ok, it.Err())
			}
			continue
		}
		if r := it.Record(); !ok || r.Offset != all[i].Offset || r.Timestamp != all[i].Timestamp || len(r.Value) != len(all[i].Value) {
			t.Fatalf("SkipTo(%d) then Next: %v, offset %d ts %d %d bytes (err %v); want offset %d ts %d %d bytes",
				target, ok, r.Offset, r.Timestamp, len(r.Value), it.Err(), all[i].Offset, all[i].Timestamp, len(all[i].Value))
		}
	}
}

// framedRecord is a record of no key, value or headers at offset delta
// offDelta, framed by its length.
func framedRecord(offDelta int64) []byte {
	body := []byte{0} // attributes
	body = binary.AppendVarint(body, 0)
	body = binary.AppendVarint(body, offDelta)
	body = append(body, 1, 1, 0) // null key, null value, no headers
	return append(binary.AppendVarint(nil, int64(len(body))), body...)
}

// A well-formed record whose length is written in two bytes where one
// would do is skipped whole (SkipTo's fast path reads it as head does).
func TestIteratorSkipToNonMinimalLength(t *testing.T) {
	r0 := framedRecord(0)
	area := append(append([]byte{0x80 | r0[0], 0x00}, r0[1:]...), framedRecord(1)...)
	var it record.Iterator
	if err := it.Reset(rawBatch(hdr{base: 100, magic: 2, lastDelta: 1, pid: -1, epoch: -1, seq: -1, count: 2}, area)); err != nil {
		t.Fatal(err)
	}
	it.SkipTo(101)
	if !it.Next() || it.Record().Offset != 101 || it.Next() || it.Err() != nil {
		t.Fatalf("a length in two bytes: SkipTo(101), then offset %d, err %v", it.Record().Offset, it.Err())
	}
}

// TestIteratorSkipToStopsAtMalformed: SkipTo reads each record's length
// and deltas as Next does, so a record Next would refuse is not skipped
// but reported by the Next after it, whatever its offset; its fast path
// refuses the same lengths, in one byte and in two.
func TestIteratorSkipToStopsAtMalformed(t *testing.T) {
	cases := map[string][]byte{
		// An offset delta past int32, below the target offset.
		"offset delta past int32": framedRecord(-1 << 33),
		// A timestamp delta that does not end within the record.
		"timestamp delta":        {0x0c, 0, 0x80, 0x80, 0x80, 0x80, 0x80},
		"length 4":               {0x08, 0, 0, 0, 0},
		"length 5":               {0x0a, 0, 0, 0, 1, 1},
		"length -1":              {0x01, 0, 0, 0, 1, 1, 0},
		"length -2":              {0x03, 0, 0, 0, 1, 1, 0},
		"length -100, two bytes": {0xc7, 0x01, 0, 0, 0, 1, 1, 0},
		"length 0 as 0x80 0x00":  {0x80, 0x00, 0, 0, 0, 1, 1, 0},
		"length 5 as 0x8a 0x00":  {0x8a, 0x00, 0, 0, 0, 1, 1},
		"length past the batch":  {0xfe, 0x01, 0, 0, 0, 1, 1, 0},
	}
	for name, first := range cases {
		area := append(append([]byte(nil), first...), framedRecord(1)...)
		for len(area) < 14 {
			area = append(area, 0)
		}
		b := rawBatch(hdr{base: 100, magic: 2, lastDelta: 1, pid: -1, epoch: -1, seq: -1, count: 2}, area)
		var it record.Iterator
		if err := it.Reset(b); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		it.SkipTo(101)
		if it.Next() || !errors.Is(it.Err(), record.ErrBadRecord) {
			t.Errorf("%s: after SkipTo(101), Next gave a record (%v) or err %v, want ErrBadRecord", name, it.Record().Offset, it.Err())
		}
	}
}
