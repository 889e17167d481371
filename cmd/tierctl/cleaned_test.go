package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/compaction"
	"github.com/tierlog/tierlog/local"
	"github.com/tierlog/tierlog/record"
)

// TestReadCleanedPartition: a partition the broker's cleaner cleaned has a
// segment that ends before the next one's base (its superseded tail batch
// went). consume and verify read it whole, as the broker does: the log
// directory's cleaner-offset-checkpoint says it was cleaned. They used to
// call it a segment cut short.
func TestReadCleanedPartition(t *testing.T) {
	logs := t.TempDir()
	now := func() time.Time { return time.UnixMilli(1_700_000_000_000) }
	b, err := local.OpenBackend(logs, local.BackendOptions{Now: now})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := backend.ParseConfig(map[string]string{"cleanup.policy": "compact", "file.delete.delay.ms": "0"})
	if err != nil {
		t.Fatal(err)
	}
	l, err := b.OpenLog(context.Background(), "users", 0, cfg)
	if err != nil {
		t.Fatal(err)
	}
	var bld record.Builder
	for i, kv := range [][2]string{{"a", "1"}, {"b", "1"}, {"b", "2"}, {"c", "1"}, {"d", "1"}} {
		if i == 2 || i == 4 {
			if err := l.Roll(); err != nil {
				t.Fatal(err)
			}
		}
		bld.Reset(record.NewBatchHeader())
		bld.Append(now().UnixMilli(), []byte(kv[0]), []byte(kv[1]), nil)
		batch, err := bld.Build()
		if err != nil {
			t.Fatal(err)
		}
		info, err := l.Append(context.Background(), batch, backend.AppendOptions{AssignOffsets: true})
		if err != nil {
			t.Fatal(err)
		}
		if err := l.SetHighWatermark(info.LastOffset + 1); err != nil {
			t.Fatal(err)
		}
	}
	cfg.SegmentBytes = 100 // one group a segment: [a=1 b=1] keeps a=1 only
	if err := l.SetConfig(cfg); err != nil {
		t.Fatal(err)
	}
	cl, err := compaction.NewCleaner(b, compaction.CleanerOptions{MemoryBytes: 1 << 20, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.RunOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	if segs := l.SegmentInfos(); len(segs) != 3 || segs[0].NextOffset != 2 {
		t.Fatalf("segments %+v, want 3 of them, the first ending before 2 (its b=1 superseded)", segs)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	part := filepath.Join(logs, "users-0")
	if code, out, errOut := tierctl(t, "consume", part, "--quiet"); code != 0 || strings.Fields(out)[0] != "4" {
		t.Fatalf("consume: exit %d\n%s%s", code, out, errOut)
	}
	if code, out, errOut := tierctl(t, "verify", part); code != 0 {
		t.Fatalf("verify: exit %d\n%s%s", code, out, errOut)
	}
}
