package local

import (
	"context"
	"testing"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/record"
)

// TestKeptClockUnmapsLastSegmentsIndexUnderTheLog: the kept indexes'
// clock never closes the last segment's indexes, which the log itself
// reads holding only its own reference (activate's largest timestamp,
// the end after a clean shutdown): the interleaving activate can meet is
// forced here. (Found in review: the clock took refs == 1 for idle on an
// unsealed segment too, and the largest timestamp read became -1.)
func TestKeptClockUnmapsLastSegmentsIndexUnderTheLog(t *testing.T) {
	dir := t.TempDir()
	cfg, err := backend.ParseConfig(map[string]string{"segment.bytes": "140000", "index.interval.bytes": "1"})
	if err != nil {
		t.Fatal(err)
	}
	w, err := Open(dir, Options{Config: cfg, HighWatermark: -1})
	if err != nil {
		t.Fatal(err)
	}
	var b record.Builder
	for i := range 3000 {
		b.Reset(record.NewBatchHeader())
		b.Append(int64(1000+i), nil, []byte("m"), nil)
		batch, err := b.Build()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Append(context.Background(), batch, backend.AppendOptions{AssignOffsets: true}); err != nil {
			t.Fatal(err)
		}
	}
	end := w.Offsets().LogEnd
	w.Close()
	l, err := Open(dir, Options{Config: cfg, HighWatermark: -1, RecoveryPoint: end, CleanShutdown: true})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	segs := l.segments()
	last := segs[len(segs)-1]
	if len(segs) < 2 || last.sealed {
		t.Fatalf("%d segments", len(segs))
	}
	_, ti, err := last.indexes() // as activate's largestTimestamp does, holding the log's reference only
	if err != nil {
		t.Fatal(err)
	}
	if !mappedReadOnly(ti) {
		t.Skip("the last segment's time index is not mapped")
	}
	want := ti.LastEntry()
	// Another log of the Backend opens indexes while the mappings are at
	// their bound: one call's hand passes every segment twice.
	b2 := l.segOpts.budget
	b2.mu.Lock()
	b2.maxIndexMaps = 0
	b2.mu.Unlock()
	if _, err := segs[0].offsetIndex(); err != nil {
		t.Fatal(err)
	}
	got := ti.LastEntry()
	t.Logf("refs %d, drops %d", last.refs.Load(), b2.indexDrops.Load())
	if got != want {
		t.Fatalf("the time index the log was reading was closed under it: its last entry went from %+v to %+v", want, got)
	}
}
