package local_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/local"
)

// TestHeldSegmentListsNeverChange: a roll appends to the segment list in
// place, without copying it; a list a reader took before a roll, a
// truncation, a retention pass or another roll shows the same segments
// after them.
func TestHeldSegmentListsNeverChange(t *testing.T) {
	l := openLog(t, t.TempDir(), cfg(t, "retention.ms", "-1"), true)
	defer l.Close()
	appendRoll := func() {
		t.Helper()
		if _, err := l.Append(ctx, batchOf(3, 1000, "v"), backend.AppendOptions{AssignOffsets: true}); err != nil {
			t.Fatal(err)
		}
		if err := l.Roll(); err != nil {
			t.Fatal(err)
		}
	}
	type held struct {
		view func() []local.HeldSegment
		segs []local.HeldSegment
	}
	var lists []held
	hold := func() {
		v := local.HoldSegmentList(l)
		lists = append(lists, held{v, v()})
	}
	for range 9 {
		hold()
		appendRoll()
	}
	hold()
	if err := l.TruncateTo(9); err != nil { // segment 9 emptied, the six after it removed
		t.Fatal(err)
	}
	hold()
	appendRoll()
	appendRoll()
	hold()
	if err := l.SetHighWatermark(l.Offsets().LogEnd); err != nil {
		t.Fatal(err)
	}
	if err := l.DeleteRecordsBefore(ctx, 6); err != nil {
		t.Fatal(err)
	}
	if _, err := l.DeleteOldSegments(); err != nil {
		t.Fatal(err)
	}
	hold()
	appendRoll()
	appendRoll()
	hold()
	for i, h := range lists {
		if got := h.view(); !slices.Equal(got, h.segs) {
			t.Errorf("list %d held by a reader shows segments %v, had %v", i, got, h.segs)
		}
	}
	var bases []int64
	for _, s := range lists[len(lists)-1].segs {
		bases = append(bases, s.Base)
	}
	if got, want := bases, []int64{6, 9, 12, 15, 18, 21}; !slices.Equal(got, want) {
		t.Errorf("the log's segments are %v, want %v", got, want)
	}
}

// TestOpenSegmentByBase: OpenSegment finds each closed segment of a log of
// many by its base, and refuses a base no segment has and the active
// segment's.
func TestOpenSegmentByBase(t *testing.T) {
	l := openLog(t, t.TempDir(), cfg(t), true)
	defer l.Close()
	for range 100 {
		if _, err := l.Append(ctx, batchOf(2, 1000, "v"), backend.AppendOptions{AssignOffsets: true}); err != nil {
			t.Fatal(err)
		}
		if err := l.Roll(); err != nil {
			t.Fatal(err)
		}
	}
	segs := l.SegmentInfos()
	for _, s := range segs[:len(segs)-1] {
		h, err := l.Segments().OpenSegment(s.BaseOffset)
		if err != nil {
			t.Fatalf("segment %d: %v", s.BaseOffset, err)
		}
		if h.BaseOffset() != s.BaseOffset || h.NextOffset() != s.NextOffset || h.Size() != s.Size {
			t.Errorf("segment %d opened as base %d, next %d, size %d; want next %d, size %d", s.BaseOffset, h.BaseOffset(), h.NextOffset(), h.Size(), s.NextOffset, s.Size)
		}
		h.Close()
		ts, err := l.Segments().LargestTimestamp(s.BaseOffset)
		if err != nil || ts != 1000 {
			t.Errorf("segment %d: largest timestamp %d, %v; want 1000", s.BaseOffset, ts, err)
		}
	}
	for _, base := range []int64{-1, 1, 101, segs[len(segs)-1].BaseOffset} {
		if h, err := l.Segments().OpenSegment(base); !errors.Is(err, local.ErrSegmentsChanged) {
			if h != nil {
				h.Close()
			}
			t.Errorf("OpenSegment(%d) = %v, want ErrSegmentsChanged", base, err)
		}
	}
	if _, err := l.Segments().LargestTimestamp(3); !errors.Is(err, local.ErrSegmentsChanged) {
		t.Errorf("LargestTimestamp(3) = %v, want ErrSegmentsChanged", err)
	}
}
