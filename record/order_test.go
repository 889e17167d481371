package record_test

import (
	"bytes"
	"errors"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/tierlog/tierlog/record"
)

// TestOrderedScannerRefusesMovedBaseOffsets: three batches of 4 records at
// offsets 10, 14, 18; the middle one's base offset (outside the CRC) moved
// to each value below. An ordered scan either gives the batches as they
// were or stops with ErrOffsetOrder, which is corruption: at the middle
// batch when it moved back (or its last offset wrapped), at the last one
// when it moved forward. An unordered scan, as before, gives all three.
func TestOrderedScannerRefusesMovedBaseOffsets(t *testing.T) {
	var b record.Builder
	rng := rand.New(rand.NewPCG(21, 2))
	var log []byte
	var second, third int64
	for _, base := range []int64{10, 14, 18} {
		switch base {
		case 14:
			second = int64(len(log))
		case 18:
			third = int64(len(log))
		}
		log = append(log, buildTestBatch(t, &b, record.None, base, 4, rng)...)
	}
	for _, moved := range []int64{14, 18, 22, 15, 13, 11, 10, 9, 0, -1, -100, 1 << 40, math.MaxInt64 - 1, math.MinInt64} {
		p := append([]byte(nil), log...)
		record.Batch(p[second:]).SetBaseOffset(moved)
		s := record.NewScanner(bytes.NewReader(p), 0, int64(len(p)), record.ScanOptions{Validate: true, Ordered: true})
		n := 0
		for s.Next() {
			n++
		}
		err := s.Err()
		if moved == 14 {
			if err != nil || n != 3 {
				t.Errorf("base offset as written: %d batches, %v", n, err)
			}
			continue
		}
		at, good := second, 1
		if moved > 14 && moved+3 > moved {
			at, good = third, 2
		}
		var be *record.BatchError
		if !errors.Is(err, record.ErrOffsetOrder) || !errors.Is(err, record.ErrCorrupt) || !errors.As(err, &be) || be.Position != at || n != good {
			t.Errorf("base offset moved to %d: %d batches, then %v; want ErrOffsetOrder at position %d", moved, n, err, at)
		}
		if s.ValidEnd() != at {
			t.Errorf("base offset moved to %d: ValidEnd %d, want %d", moved, s.ValidEnd(), at)
		}
		u := record.NewScanner(bytes.NewReader(p), 0, int64(len(p)), record.ScanOptions{})
		for n = 0; u.Next(); n++ {
		}
		if u.Err() != nil || n != 3 {
			t.Errorf("base offset moved to %d, unordered scan: %d batches, %v", moved, n, u.Err())
		}
	}
}

func TestEntryFollows(t *testing.T) {
	cases := []struct {
		e        record.Entry
		prevLast int64
		ok       bool
	}{
		{record.Entry{Magic: 2, BaseOffset: 0, LastOffset: 0}, -1, true},
		{record.Entry{Magic: 2, BaseOffset: 5, LastOffset: 9}, 4, true},
		{record.Entry{Magic: 2, BaseOffset: 7, LastOffset: 9}, 4, true}, // a gap: compaction
		{record.Entry{Magic: 2, BaseOffset: 4, LastOffset: 9}, 4, false},
		{record.Entry{Magic: 2, BaseOffset: 0, LastOffset: 3}, 4, false},
		{record.Entry{Magic: 2, BaseOffset: -1, LastOffset: 2}, -1, false},
		{record.Entry{Magic: 2, BaseOffset: math.MaxInt64, LastOffset: math.MinInt64 + 2}, 4, false}, // the last offset wrapped
		{record.Entry{Magic: 1, BaseOffset: -1, LastOffset: 9}, 4, true},                             // a compressed legacy wrapper
		{record.Entry{Magic: 1, BaseOffset: -1, LastOffset: 4}, 4, false},
		{record.Entry{Magic: 0, BaseOffset: -3, LastOffset: -3}, -1, false},
	}
	for _, c := range cases {
		err := c.e.Follows(c.prevLast)
		if (err == nil) != c.ok || err != nil && !errors.Is(err, record.ErrOffsetOrder) {
			t.Errorf("%+v after %d: %v, want ok %v", c.e, c.prevLast, err, c.ok)
		}
	}
}

// An index entry may name a v2 batch's last offset or, as Kafka's cleaner
// before 3.8 indexed a thinned batch, any offset of its span; a legacy
// entry only its last.
func TestEntryHolds(t *testing.T) {
	cases := []struct {
		e      record.Entry
		offset int64
		ok     bool
	}{
		{record.Entry{Magic: 2, BaseOffset: 5, LastOffset: 9}, 9, true},
		{record.Entry{Magic: 2, BaseOffset: 5, LastOffset: 9}, 7, true},
		{record.Entry{Magic: 2, BaseOffset: 5, LastOffset: 9}, 5, true},
		{record.Entry{Magic: 2, BaseOffset: 5, LastOffset: 9}, 4, false},
		{record.Entry{Magic: 2, BaseOffset: 5, LastOffset: 9}, 10, false},
		{record.Entry{Magic: 2, BaseOffset: -1, LastOffset: 9}, 3, false},
		{record.Entry{Magic: 1, BaseOffset: -1, LastOffset: 9}, 9, true}, // a compressed legacy wrapper
		{record.Entry{Magic: 1, BaseOffset: -1, LastOffset: 9}, 8, false},
		{record.Entry{Magic: 1, BaseOffset: 6, LastOffset: 9}, 7, false},
	}
	for _, c := range cases {
		if got := c.e.Holds(c.offset); got != c.ok {
			t.Errorf("%+v holds %d: %v, want %v", c.e, c.offset, got, c.ok)
		}
	}
}

func TestIteratorFirstAtOrAfter(t *testing.T) {
	var b record.Builder
	h := record.NewBatchHeader()
	h.BaseOffset = 100
	b.Reset(h)
	for i := range 5 {
		b.Append(1000+int64(i)*10, nil, []byte{byte(i)}, nil) // timestamps 1000..1040
	}
	batch, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	var it record.Iterator
	for _, c := range []struct {
		ts, start, off int64
		found          bool
	}{
		{0, 0, 100, true}, {1015, 0, 102, true}, {1040, 0, 104, true}, {1041, 0, 0, false},
		{1000, 103, 103, true}, {1000, 105, 0, false},
	} {
		off, ts, found, err := it.FirstAtOrAfter(batch, c.ts, c.start)
		if err != nil || found != c.found || found && (off != c.off || ts != 1000+(off-100)*10) {
			t.Errorf("FirstAtOrAfter(ts %d, start %d) = %d, %d, %v, %v; want %d, %v", c.ts, c.start, off, ts, found, err, c.off, c.found)
		}
	}
	if _, _, _, err := it.FirstAtOrAfter(batch[:10], 0, 0); !errors.Is(err, record.ErrCorrupt) {
		t.Errorf("FirstAtOrAfter of 10 bytes: %v, want ErrCorrupt", err)
	}
}
