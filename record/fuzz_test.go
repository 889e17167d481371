package record_test

import (
	"bytes"
	"encoding/hex"
	"errors"
	"io"
	"math/rand/v2"
	"testing"

	"github.com/klauspost/compress/snappy"

	"github.com/tierlog/tierlog/record"
)

func seedBatches(f *testing.F) {
	rng := rand.New(rand.NewPCG(21, 22))
	var b record.Builder
	for _, c := range []record.Codec{record.None, record.GZIP, record.Snappy, record.LZ4, record.ZSTD} {
		f.Add([]byte(buildTestBatch(f, &b, c, 7, 5, rng)))
	}
	marker, _ := hex.DecodeString(commitMarkerHex)
	f.Add(marker)
	// A magic 0 entry and a magic 1 entry.
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 14, 0x4d, 0xb3, 0x5b, 0x50, 0, 0, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 1, '0'})
	f.Add(make([]byte, 61))
}

// FuzzBatch: Parse, Validate and record iteration never panic on any bytes,
// and a batch that validates and iterates survives a rebuild with the same
// records.
func FuzzBatch(f *testing.F) {
	seedBatches(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		b, err := record.Parse(data)
		if err != nil {
			return
		}
		if len(b) > len(data) {
			t.Fatalf("view of %d bytes over %d", len(b), len(data))
		}
		verr := b.Validate()
		var it record.Iterator
		it.Decompressor.Max = 1 << 20
		if err := it.Reset(b); err != nil {
			return
		}
		n := 0
		for it.Next() {
			r := it.Record()
			_ = len(r.Key) + len(r.Value) + len(r.Headers)
			n++
		}
		if it.Err() == nil && verr == nil && int32(n) != b.NumRecords() {
			t.Fatalf("iterated %d records, header says %d", n, b.NumRecords())
		}
	})
}

// FuzzRecords feeds arbitrary bytes as the records section of a valid batch
// header (uncompressed and raw snappy), exercising the record decoder.
func FuzzRecords(f *testing.F) {
	rng := rand.New(rand.NewPCG(23, 24))
	var b record.Builder
	batch := buildTestBatch(f, &b, record.None, 0, 3, rng)
	f.Add(uint8(3), []byte(batch[record.BatchHeaderSize:]), false)
	f.Add(uint8(1), []byte{0x0e, 0, 0, 0, 1, 'k', 1, 'v', 0}, true)
	f.Fuzz(func(t *testing.T, count uint8, recs []byte, rawSnappy bool) {
		h := record.NewBatchHeader()
		b.Reset(h)
		b.Append(0, nil, nil, nil)
		hdr, _ := b.Build()
		p := append([]byte(nil), hdr[:record.BatchHeaderSize]...)
		if rawSnappy {
			p[22] = byte(record.Snappy)
			p = append(p, snappy.Encode(nil, recs)...)
		} else {
			p = append(p, recs...)
		}
		p[57], p[58], p[59], p[60] = 0, 0, 0, count
		n := len(p) - record.LogOverhead
		p[8], p[9], p[10], p[11] = byte(n>>24), byte(n>>16), byte(n>>8), byte(n)
		var it record.Iterator
		if err := it.Reset(p); err != nil {
			return
		}
		got := 0
		for it.Next() {
			got++
		}
		if it.Err() == nil && got != int(count) {
			t.Fatalf("clean end after %d records, count %d", got, count)
		}
		if it.Err() != nil && !errors.Is(it.Err(), record.ErrCorrupt) && !errors.Is(it.Err(), record.ErrTooLarge) {
			t.Fatalf("unexpected error class: %v", it.Err())
		}
		// Skipping into the batch never panics, and what follows a skip
		// is a suffix of what a full iteration gave.
		cleanEnd := it.Err() == nil
		if err := it.Reset(p); err != nil {
			return
		}
		it.SkipTo(int64(count / 2))
		rest := 0
		for it.Next() {
			rest++
		}
		if cleanEnd && (it.Err() != nil || rest > got) {
			t.Fatalf("after SkipTo(%d): %d records then %v, of %d", count/2, rest, it.Err(), got)
		}
	})
}

// FuzzScanner: scanning arbitrary bytes never panics, stops at or before the
// end, and re-scanning the valid prefix yields the same entries and a clean
// end.
func FuzzScanner(f *testing.F) {
	seedBatches(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		scan := func(p []byte) (offsets []int64, end int64, err error) {
			s := record.NewScanner(bytes.NewReader(p), 0, int64(len(p)), record.ScanOptions{Validate: true, BufferSize: 64})
			for s.Next() {
				offsets = append(offsets, s.Entry().Position, s.Entry().LastOffset)
			}
			return offsets, s.ValidEnd(), s.Err()
		}
		offs, end, serr := scan(data)
		if end > int64(len(data)) {
			t.Fatalf("valid end %d past %d", end, len(data))
		}
		// ReadHeader walks the same entries and stops with the same class
		// of error.
		var buf [record.BatchHeaderSize]byte
		pos, i := int64(0), 0
		for {
			e, err := record.ReadHeader(bytes.NewReader(data), pos, int64(len(data)), buf[:])
			if err != nil {
				if (err == io.EOF) != (serr == nil) || errors.Is(err, record.ErrTornTail) != errors.Is(serr, record.ErrTornTail) {
					t.Fatalf("ReadHeader stopped with %v, the scanner with %v", err, serr)
				}
				break
			}
			if i+1 >= len(offs) || offs[i] != e.Position || offs[i+1] != e.LastOffset {
				// The validating scanner may stop earlier on a bad CRC,
				// which ReadHeader does not check.
				if errors.Is(serr, record.ErrCRCMismatch) || errors.Is(serr, record.ErrBadRecord) || errors.Is(serr, record.ErrUnknownCodec) {
					break
				}
				t.Fatalf("ReadHeader entry at %d differs from the scanner's", pos)
			}
			m, merr := record.HeaderAt(data, pos, int64(len(data)))
			if merr != nil || m.Position != e.Position || m.Size != e.Size || m.LastOffset != e.LastOffset || !bytes.Equal(m.Data, e.Data) {
				t.Fatalf("HeaderAt at %d disagrees with ReadHeader: %+v %v", pos, m, merr)
			}
			pos += e.Size
			i += 2
		}
		offs2, end2, err2 := scan(data[:end])
		if err2 != nil || end2 != end || len(offs2) != len(offs) {
			t.Fatalf("rescan of the valid prefix: %d entries to %d (err %v), first scan %d to %d", len(offs2)/2, end2, err2, len(offs)/2, end)
		}
		for i := range offs {
			if offs[i] != offs2[i] {
				t.Fatalf("rescan differs at %d", i)
			}
		}
	})
}

// FuzzLegacy: legacy entries (including compressed wrappers) never panic.
func FuzzLegacy(f *testing.F) {
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 14, 0x4d, 0xb3, 0x5b, 0x50, 0, 0, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 1, '0'})
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 5, 0, 0, 0, 30, 0, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 4, 1, 2, 3, 4})
	f.Fuzz(func(t *testing.T, data []byte) {
		e, err := record.ParseLegacy(data)
		if err != nil {
			return
		}
		_ = e.Validate()
		_, _, _ = e.KeyValue()
		var it record.Iterator
		it.Decompressor.Max = 1 << 20
		if err := it.Reset(e); err != nil {
			return
		}
		for it.Next() {
		}
	})
}

func TestRawSnappyRead(t *testing.T) {
	var b record.Builder
	b.Reset(record.NewBatchHeader())
	b.Append(1, []byte("k"), []byte("value"), nil)
	b.Append(2, nil, []byte("value2"), nil)
	batch, _ := b.Build()
	p := append([]byte(nil), batch[:record.BatchHeaderSize]...)
	p = append(p, snappy.Encode(nil, batch[record.BatchHeaderSize:])...)
	p[22] = byte(record.Snappy)
	n := len(p) - record.LogOverhead
	p[8], p[9], p[10], p[11] = byte(n>>24), byte(n>>16), byte(n>>8), byte(n)
	var it record.Iterator
	if err := it.Reset(p); err != nil {
		t.Fatal(err)
	}
	got := 0
	for it.Next() {
		got++
	}
	if it.Err() != nil || got != 2 {
		t.Fatalf("read %d records from a raw snappy batch, err %v", got, it.Err())
	}
}
