package local

import (
	"bytes"
	"testing"
)

// TestPinnedSegmentKeepsItsIndexAfterReplacement: a segment a
// SegmentHandle pins keeps its own index after the cleaner replaced it
// with a segment of the same base (whose files now have its names): the
// budget's clocks no longer touch a segment that left the log. (Found in
// review: the kept clock dropped its in-memory index and the next use
// read the replacement's.)
func TestPinnedSegmentKeepsItsIndexAfterReplacement(t *testing.T) {
	l, segs := reopenedCompacted(t, 0)
	if len(segs) < 4 {
		t.Fatalf("%d segments", len(segs))
	}
	h := pin(t, l, segs[0].BaseOffset)
	before, err := h.IndexBytes()
	if err != nil {
		t.Fatal(err)
	}
	replaceFirstTwo(t, l, segs)
	pressKeptIndexes(t, l)
	h.s.mu.Lock()
	dropped := h.s.oi == nil
	h.s.mu.Unlock()
	t.Logf("pinned segment's index dropped by the kept clock: %v (drops %d)", dropped, l.BudgetIndexDrops())
	after, err := h.IndexBytes()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(before, after) {
		t.Fatalf("the pinned segment's offset index changed under its handle: %d bytes before the replacement, %d after (%x vs %x)",
			len(before), len(after), before, after)
	}
}

// TestPinnedSegmentReadableAfterReplacement: a segment pinned by one
// handle after the cleaner replaced it stays readable through it. (Found
// in review, older than the kept indexes: the file budget took its one
// reference for the log's and closed the descriptor the handle read
// through.)
func TestPinnedSegmentReadableAfterReplacement(t *testing.T) {
	l, segs := reopenedCompacted(t, 1)
	h := pin(t, l, segs[0].BaseOffset)
	buf := make([]byte, 100)
	if _, err := h.ReadAt(buf, 0); err != nil {
		t.Fatal(err)
	}
	replaceFirstTwo(t, l, segs)
	for range 3 {
		batchOffsets(t, l)
	}
	if _, err := h.ReadAt(buf, 0); err != nil {
		t.Fatalf("the pinned segment's handle can no longer read: %v", err)
	}
}

// reopenedCompacted writes a compacted test log and opens it again after a
// clean shutdown (with maxOpen as its open-file bound, 0 for the default),
// as after any restart: its closed segments' indexes are read-only (read
// into memory: they are small). It returns the log and its segments.
func reopenedCompacted(t *testing.T, maxOpen int) (*Log, []SegmentInfo) {
	t.Helper()
	dir := t.TempDir()
	w := newCleanTestLog(t, dir, nil, "cleanup.policy", "compact")
	cfg, end := w.Config(), w.Offsets().LogEnd
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	l, err := Open(dir, Options{Config: cfg, HighWatermark: -1, RecoveryPoint: end, CleanShutdown: true, MaxOpenSegmentFiles: maxOpen})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l, l.SegmentInfos()
}

// pin opens a handle on the segment at base, closed when the test ends.
func pin(t *testing.T, l *Log, base int64) *SegmentHandle {
	t.Helper()
	h, err := l.Segments().OpenSegment(base)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

// replaceFirstTwo has the cleaner replace the log's first two segments
// with one of every other record (its base, and names, the first's).
func replaceFirstTwo(t *testing.T, l *Log, segs []SegmentInfo) {
	t.Helper()
	c := l.Segments().BeginCleaning()
	n := 0
	r, _ := writeCleaned(t, c, l, segs[:2], func(int64) bool { n++; return n%2 == 0 })
	if err := r.Commit(); err != nil {
		t.Fatal(err)
	}
}

// pressKeptIndexes bounds the kept indexes at one byte and reads every
// segment's batches a few times: any other segment's index opening runs
// the kept clock.
func pressKeptIndexes(t *testing.T, l *Log) {
	t.Helper()
	l.segOpts.budget.mu.Lock()
	l.segOpts.budget.maxIndexBytes = 1
	l.segOpts.budget.mu.Unlock()
	for range 3 {
		batchOffsets(t, l)
	}
}
