package local_test

import (
	"errors"
	"testing"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/local"
)

func TestMetricsCountWhatHappened(t *testing.T) {
	l := openLog(t, t.TempDir(), cfg(t, "segment.bytes", "4096"), false)
	defer l.Close()
	var appended, records int64
	for i := range 20 {
		b := batchOf(10, int64(1000+i), "m")
		if _, err := l.Append(ctx, b, backend.AppendOptions{AssignOffsets: true}); err != nil {
			t.Fatal(err)
		}
		appended += int64(len(b))
		records += 10
	}
	if _, err := l.Append(ctx, []byte("not a batch"), backend.AppendOptions{AssignOffsets: true}); err == nil {
		t.Fatal("garbage appended")
	}
	if err := l.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := l.SetHighWatermark(l.Offsets().LogEnd); err != nil {
		t.Fatal(err)
	}
	got := readAll(t, l, 0)
	if _, err := l.Read(ctx, 1<<40, backend.ReadOptions{}); !errors.As(err, new(*backend.OffsetOutOfRangeError)) {
		t.Fatalf("read past the end: %v", err)
	}
	segs, size := l.Size()
	rolls := l.Metrics().Rolls.Load()
	if err := l.DeleteRecordsBefore(ctx, 100); err != nil {
		t.Fatal(err)
	}
	if _, err := l.DeleteOldSegments(); err != nil {
		t.Fatal(err)
	}
	segsAfter, _ := l.Size()

	m := l.Metrics()
	check := func(name string, got, want int64) {
		t.Helper()
		if got != want {
			t.Errorf("%s = %d, want %d", name, got, want)
		}
	}
	check("Appends", m.Appends.Load(), 20)
	check("AppendErrors", m.AppendErrors.Load(), 1)
	check("AppendBytes", m.AppendBytes.Load(), appended)
	check("AppendRecords", m.AppendRecords.Load(), records)
	check("AppendLatency count", int64(m.AppendLatency.Snapshot().Count), 20)
	check("ReadErrors", m.ReadErrors.Load(), 1)
	check("Flushes", m.Flushes.Load(), 1)
	check("Rolls", rolls, int64(segs-1))
	// Retention that removes every segment rolls a new one first.
	check("SegmentsDeleted", m.SegmentsDeleted.Load(), int64(segs-segsAfter)+m.Rolls.Load()-rolls)
	if len(got) != 200 || m.Reads.Load() == 0 || m.ReadBytes.Load() < appended || int64(m.ReadLatency.Snapshot().Count) != m.Reads.Load() {
		t.Errorf("read %d records in %d reads of %d bytes, latency count %d", len(got), m.Reads.Load(), m.ReadBytes.Load(), m.ReadLatency.Snapshot().Count)
	}
	if segs < 3 || size < appended || segsAfter >= segs {
		t.Errorf("Size %d segments / %d B, %d after retention (appended %d B)", segs, size, segsAfter, appended)
	}
}

// A Backend's logs share one Metrics.
func TestBackendMetricsShared(t *testing.T) {
	b, err := local.OpenBackend(t.TempDir(), local.BackendOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	for p := range int32(3) {
		l, err := b.OpenLog(ctx, "t", p, backend.DefaultConfig())
		if err != nil {
			t.Fatal(err)
		}
		if l.Metrics() != b.Metrics() {
			t.Fatal("a backend's log has metrics of its own")
		}
		if _, err := l.Append(ctx, batchOf(5, 1, "b"), backend.AppendOptions{AssignOffsets: true}); err != nil {
			t.Fatal(err)
		}
	}
	if n := b.Metrics().AppendRecords.Load(); n != 15 {
		t.Fatalf("backend counted %d records, want 15", n)
	}
}
