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
