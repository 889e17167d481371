package local

import (
	"fmt"
	"math"

	"github.com/tierlog/tierlog/record"
)

// SegmentOrder is the rule a segment's batches follow, checked the same
// way by every reader that walks them: recovery rebuilding a segment's
// indexes, the upload scan before a segment goes to the bucket, reads
// from the bucket, and tierctl verify. Each batch's offsets rise past the
// batch before it (record.Entry.Follows: the base offset is outside a
// batch's CRC, so only this catches one that moved), the first at or
// above the segment's base offset and the last at or below Last; in a
// contiguous segment (one no cleaner compacted, as every tiered one is)
// each batch starts right after the one before it.
//
// A legacy compressed wrapper stores no base offset: only its last offset
// is held to the rule.
type SegmentOrder struct {
	Base       int64 // the segment's base offset
	Last       int64 // the largest offset the segment may hold
	Contiguous bool  // each batch starts right after the one before
	prev       int64 // the last offset of the batch before the next one
}

// NewSegmentOrder returns the order of the segment at base whose offsets
// end at last. A local segment's end is base + math.MaxInt32 (its offset
// index holds 32-bit offsets relative to base: LocalSegmentOrder); a
// segment in the bucket ends where its manifest entry says.
func NewSegmentOrder(base, last int64, contiguous bool) SegmentOrder {
	return SegmentOrder{Base: base, Last: last, Contiguous: contiguous, prev: base - 1}
}

// LocalSegmentOrder returns the order of a local segment at base.
func LocalSegmentOrder(base int64) SegmentOrder {
	return NewSegmentOrder(base, base+math.MaxInt32, false)
}

// From resumes the check after a batch whose last offset is prevLast: a
// read that starts at an offset index entry, not at the segment's start.
func (o *SegmentOrder) From(prevLast int64) { o.prev = prevLast }

// Next is the offset after the last batch checked: the base offset
// before any, the offset the next segment starts at after the last.
func (o *SegmentOrder) Next() int64 { return o.prev + 1 }

// Check holds e to the order after the batches checked before it, and
// moves past it, also when it fails (a verifier that reports every
// problem goes on from there). The error is a *record.BatchError of kind
// record.ErrOffsetOrder at e's position, naming the segment's range.
func (o *SegmentOrder) Check(e *record.Entry) error {
	prev := o.prev
	o.prev = e.LastOffset
	err := e.Follows(prev)
	if err == nil && e.LastOffset > o.Last {
		err = o.errorf(e, "offsets %d..%d run past the segment's last offset %d", e.BaseOffset, e.LastOffset, o.Last)
	}
	if err == nil && o.Contiguous && e.BaseOffset >= 0 && e.BaseOffset != prev+1 {
		err = o.errorf(e, "offsets %d..%d where %d was next", e.BaseOffset, e.LastOffset, prev+1)
	}
	if err != nil && prev < o.Base {
		if be, ok := err.(*record.BatchError); ok {
			be.Detail += fmt.Sprintf(" in the segment at base offset %d", o.Base)
		}
	}
	return err
}

func (o *SegmentOrder) errorf(e *record.Entry, format string, args ...any) error {
	return &record.BatchError{Kind: record.ErrOffsetOrder, Position: e.Position, BaseOffset: e.BaseOffset, Detail: fmt.Sprintf(format, args...)}
}
