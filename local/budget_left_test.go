package local

import (
	"bytes"
	"testing"
)

// TestLeftSegmentStaysOutOfTheRings: a segment that left the log stays out
// of the budget's rings when a reader holding it uses its indexes, so no
// clock takes the reader's one reference for the log's, and it opens no
// index by name (the replacement's has its name). (Found in review: an
// index opened after it left put it back in the kept ring.)
func TestLeftSegmentStaysOutOfTheRings(t *testing.T) {
	l, segs := reopenedCompacted(t, 0)
	h := pin(t, l, segs[0].BaseOffset)
	// The offset index only (a lookup), as a reader's first use.
	oi, err := h.s.offsetIndex()
	if err != nil {
		t.Fatal(err)
	}
	before := oi.AppendEntries(nil)
	replaceFirstTwo(t, l, segs)
	l.segOpts.budget.mu.Lock()
	inKept := h.s.keptAt >= 0
	l.segOpts.budget.mu.Unlock()
	t.Logf("after leaveLog: in kept ring %v", inKept)
	// The handle's first time-index use after the replacement.
	if _, err := h.TimeIndexBytes(); err != nil {
		t.Fatal(err)
	}
	l.segOpts.budget.mu.Lock()
	inKept = h.s.keptAt >= 0 && h.s.keptAt < len(l.segOpts.budget.kept) && l.segOpts.budget.kept[h.s.keptAt] == h.s
	l.segOpts.budget.mu.Unlock()
	t.Logf("after TimeIndexBytes: in kept ring %v", inKept)
	pressKeptIndexes(t, l)
	after, err := h.IndexBytes()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(before, after) {
		t.Fatalf("left segment back in the kept ring (%v); its offset index changed under its handle: %x before, %x after", inKept, before, after)
	}
}

// TestPinnedSegmentIndexDroppedBeforeReplacement: a pinned segment whose
// in-memory index the kept clock dropped while it was still in the log
// reads it again as it leaves (its own, by its name then), never the
// replacement's. (Found in review.)
func TestPinnedSegmentIndexDroppedBeforeReplacement(t *testing.T) {
	l, segs := reopenedCompacted(t, 0)
	h := pin(t, l, segs[0].BaseOffset)
	before, err := h.IndexBytes()
	if err != nil {
		t.Fatal(err)
	}
	pressKeptIndexes(t, l)
	h.s.mu.Lock()
	dropped := h.s.oi == nil
	h.s.mu.Unlock()
	t.Logf("pinned segment's in-memory index dropped while in the log: %v", dropped)
	replaceFirstTwo(t, l, segs)
	after, err := h.IndexBytes()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(before, after) {
		t.Fatalf("the pinned segment's offset index changed under its handle: %x before, %x after", before, after)
	}
}

// TestPinnedSegmentTimeIndexAfterReplacement: a handle that asks for the
// time index only after the cleaner replaced its segment gets its own
// (read as the segment left), never the replacement's. (Found in review:
// it got the replacement's, whose offsets the time index's checks let
// through.)
func TestPinnedSegmentTimeIndexAfterReplacement(t *testing.T) {
	l, segs := reopenedCompacted(t, 0)
	// Another handle reads the time index first (what the pinned
	// segment's file holds), then lets go.
	h0, err := l.Segments().OpenSegment(segs[0].BaseOffset)
	if err != nil {
		t.Fatal(err)
	}
	before, err := h0.TimeIndexBytes()
	if err != nil {
		t.Fatal(err)
	}
	h0.Close()
	h := pin(t, l, segs[0].BaseOffset)
	h.s.mu.Lock()
	if h.s.ti != nil {
		h.s.ti.Close()
		h.s.ti = nil // as if never opened since the restart (or dropped by the kept clock)
	}
	h.s.mu.Unlock()
	replaceFirstTwo(t, l, segs)
	after, err := h.TimeIndexBytes()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(before, after) {
		t.Fatalf("the pinned segment (offsets %d..%d) got another time index: %x before, %x after", segs[0].BaseOffset, segs[1].BaseOffset-1, before, after)
	}
}
