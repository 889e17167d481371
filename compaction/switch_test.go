package compaction

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/local"
	"github.com/tierlog/tierlog/record"
)

// TestCleanedLogSwitchedToDelete: a clean leaves a segment ending before
// the next one's base (the superseded tail batch goes, with no empty batch
// in its place); the topic's policy then becomes delete, and the broker
// restarts after a crash. Neither a read nor recovery takes the gap for
// damage: the log directory's cleaner-offset-checkpoint says the log was
// cleaned. Recovery used to take it for a segment cut short by a power
// loss and delete every later segment.
func TestCleanedLogSwitchedToDelete(t *testing.T) {
	dir := t.TempDir()
	c := &clock{t: time.UnixMilli(1_700_000_000_000)}
	b, err := local.OpenBackend(dir, local.BackendOptions{Now: c.now})
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
		bld.Append(c.now().UnixMilli(), []byte(kv[0]), []byte(kv[1]), nil)
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
	cl, err := NewCleaner(b, CleanerOptions{MemoryBytes: 1 << 20, Now: c.now})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.RunOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	if segs := l.SegmentInfos(); len(segs) != 3 || segs[0].NextOffset != 2 {
		t.Fatalf("segments %+v, want 3 of them, the first ending before 2", segs)
	}
	want, end := readAll(t, l), l.Offsets().LogEnd
	if len(want) != 4 || want[0].key != "a" || want[1].offset != 2 {
		t.Fatalf("the clean left %+v", want)
	}
	cfg.CleanupPolicy = []string{backend.CleanupDelete}
	if err := l.SetConfig(cfg); err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, l); !reflect.DeepEqual(got, want) {
		t.Fatalf("with cleanup.policy=delete the log reads %+v, want %+v", got, want)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	// As after a crash that lost the recovery point: every segment is
	// recovered.
	for _, name := range []string{local.CleanShutdownFile, local.RecoveryPointCheckpoint} {
		if err := os.Remove(filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	if b, err = local.OpenBackend(dir, local.BackendOptions{Now: c.now}); err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if l, err = b.OpenLog(context.Background(), "users", 0, cfg); err != nil {
		t.Fatal(err)
	}
	if got := l.Offsets().LogEnd; got != end {
		t.Fatalf("after recovery the log ends at %d, it ended at %d", got, end)
	}
	if got := readAll(t, l); !reflect.DeepEqual(got, want) {
		t.Fatalf("after recovery the log reads %+v, want %+v", got, want)
	}
}
