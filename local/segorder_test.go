package local_test

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/tierlog/tierlog/local"
	"github.com/tierlog/tierlog/record"
)

// TestSegmentOrder: the one order rule of a segment's batches, as every
// reader of a segment holds them to it.
func TestSegmentOrder(t *testing.T) {
	e := func(pos, base, last int64) record.Entry {
		return record.Entry{Position: pos, BaseOffset: base, LastOffset: last, Magic: 2}
	}
	legacy := func(pos, last int64) record.Entry {
		return record.Entry{Position: pos, BaseOffset: -1, LastOffset: last, Magic: 1}
	}
	cases := []struct {
		name    string
		order   local.SegmentOrder
		batches []record.Entry
		bad     int    // index of the first batch that fails; -1 none
		detail  string // in its error
		next    int64  // Next after all
	}{
		{"in order", local.LocalSegmentOrder(100), []record.Entry{e(0, 100, 104), e(80, 105, 105), e(160, 106, 120)}, -1, "", 121},
		{"gaps (compacted)", local.LocalSegmentOrder(100), []record.Entry{e(0, 102, 104), e(80, 110, 111)}, -1, "", 112},
		{"below the base", local.LocalSegmentOrder(100), []record.Entry{e(0, 99, 104)}, 0, "segment at base offset 100", 105},
		{"overlap", local.LocalSegmentOrder(100), []record.Entry{e(0, 100, 104), e(80, 104, 110)}, 1, "after offset 104", 111},
		{"last below base", local.LocalSegmentOrder(100), []record.Entry{e(0, 100, 104), e(80, 106, 105)}, 1, "", 106},
		{"past a relative offset", local.LocalSegmentOrder(0), []record.Entry{e(0, 0, 4), e(80, 5, math.MaxInt32+1)}, 1, "past the segment's last offset", math.MaxInt32 + 2},
		{"past the manifest's last", local.NewSegmentOrder(100, 110, false), []record.Entry{e(0, 100, 111)}, 0, "past the segment's last offset 110", 112},
		{"contiguous", local.NewSegmentOrder(100, 200, true), []record.Entry{e(0, 100, 104), e(80, 105, 110)}, -1, "", 111},
		{"contiguous, a gap", local.NewSegmentOrder(100, 200, true), []record.Entry{e(0, 100, 104), e(80, 107, 110)}, 1, "where 105 was next", 111},
		{"contiguous, starts late", local.NewSegmentOrder(100, 200, true), []record.Entry{e(0, 101, 104)}, 0, "where 100 was next", 105},
		{"legacy wrapper", local.LocalSegmentOrder(100), []record.Entry{legacy(0, 103), legacy(60, 107)}, -1, "", 108},
		{"legacy wrapper going back", local.LocalSegmentOrder(100), []record.Entry{legacy(0, 103), legacy(60, 103)}, 1, "", 104},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o := c.order
			bad := -1
			for i := range c.batches {
				err := o.Check(&c.batches[i])
				if err == nil {
					continue
				}
				var be *record.BatchError
				if !errors.As(err, &be) || !errors.Is(err, record.ErrOffsetOrder) || !errors.Is(err, record.ErrCorrupt) || be.Position != c.batches[i].Position {
					t.Fatalf("batch %d: %v: want a *record.BatchError of ErrOffsetOrder at position %d", i, err, c.batches[i].Position)
				}
				if !strings.Contains(err.Error(), c.detail) {
					t.Errorf("batch %d: %q does not say %q", i, err, c.detail)
				}
				if bad < 0 {
					bad = i
				}
			}
			if bad != c.bad {
				t.Errorf("first failing batch %d, want %d", bad, c.bad)
			}
			if o.Next() != c.next {
				t.Errorf("Next %d, want %d", o.Next(), c.next)
			}
		})
	}
	// A read resumes at an index entry: the batches before it are not seen.
	o := local.NewSegmentOrder(100, 200, false)
	o.From(149)
	if err := o.Check(&record.Entry{BaseOffset: 150, LastOffset: 155, Magic: 2}); err != nil || o.Next() != 156 {
		t.Fatalf("resumed at 150: %v, next %d", err, o.Next())
	}
	if err := o.Check(&record.Entry{BaseOffset: 155, LastOffset: 157, Magic: 2}); err == nil {
		t.Fatal("an overlap after resuming passed")
	}
}
