package local_test

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/local"
	"github.com/tierlog/tierlog/testing/faultfs"
	"github.com/tierlog/tierlog/vfs"
)

// TestSnapshotRenameFailureDuringRoll: a roll writes the producer state
// snapshot at the new segment's base (tmp, then rename) before it creates
// the segment; a failed rename fails the append that needed the roll with
// nothing changed and no .tmp left, and the next append rolls.
func TestSnapshotRenameFailureDuringRoll(t *testing.T) {
	dir := t.TempDir()
	ffs := faultfs.New(vfs.Default)
	l := openFaulty(t, dir, ffs, cfg(t, "segment.bytes", "2048"), false)
	defer l.Close()
	for l.SegmentInfos()[len(l.SegmentInfos())-1].Size < 1500 {
		if _, err := l.Append(ctx, batchOf(1, 0, "f"), backend.AppendOptions{AssignOffsets: true}); err != nil {
			t.Fatal(err)
		}
	}
	before := stateOf(t, l)
	ffs.SetHook(func(op faultfs.Op) error {
		if op.Kind == faultfs.OpRename && strings.Contains(op.Path, local.SnapshotSuffix) {
			return &os.PathError{Op: "rename", Path: op.Path, Err: syscall.EIO}
		}
		return nil
	})
	_, err := l.Append(ctx, batchOf(12, 0, "r"), backend.AppendOptions{AssignOffsets: true})
	ffs.SetHook(nil)
	if !errors.Is(err, backend.ErrStorage) || !strings.Contains(err.Error(), local.SnapshotSuffix) {
		t.Fatalf("append needing a roll whose snapshot cannot be renamed: %v", err)
	}
	if after := stateOf(t, l); !slices.Equal(after.sizes, before.sizes) || after.end != before.end {
		t.Fatalf("the failed roll changed the log: %+v, was %+v", after, before)
	}
	if tmps, _ := filepath.Glob(filepath.Join(dir, "*.tmp")); len(tmps) != 0 {
		t.Fatalf("the failed roll left %v", tmps)
	}
	if _, err := l.Append(ctx, batchOf(12, 0, "r"), backend.AppendOptions{AssignOffsets: true}); err != nil {
		t.Fatalf("the next append: %v", err)
	}
	if got := len(l.SegmentInfos()); got != len(before.sizes)+1 {
		t.Fatalf("%d segments after the roll, want %d", got, len(before.sizes)+1)
	}
	snaps, _ := filepath.Glob(filepath.Join(dir, "*"+local.SnapshotSuffix))
	if len(snaps) == 0 {
		t.Fatal("the roll that succeeded wrote no producer snapshot")
	}
}

// snapshotOffsets lists the producer snapshots in dir by offset.
func snapshotOffsets(t *testing.T, dir string) []int64 {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "*"+local.SnapshotSuffix))
	if err != nil {
		t.Fatal(err)
	}
	var out []int64
	for _, p := range m {
		off, err := strconv.ParseInt(strings.TrimSuffix(filepath.Base(p), local.SnapshotSuffix), 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, off)
	}
	slices.Sort(out)
	return out
}

// TestProducerSnapshotLifecycle: a producer snapshot is written at every
// roll (at the new segment's base) and at Close (at the log end); moving
// the log start removes those below it, and a truncation those above the
// new log end, as Kafka's ProducerStateManager does; the state reloaded
// from what is left still knows each producer.
func TestProducerSnapshotLifecycle(t *testing.T) {
	dir := t.TempDir()
	c := cfg(t, "segment.bytes", "2048", "file.delete.delay.ms", "0", "retention.ms", "-1")
	l := openLog(t, dir, c, false)
	seq := int32(0)
	for len(l.SegmentInfos()) < 6 {
		if _, err := l.Append(ctx, idemBatch(7, seq, 5), backend.AppendOptions{AssignOffsets: true}); err != nil {
			t.Fatal(err)
		}
		seq += 5
	}
	var bases []int64
	for _, si := range l.SegmentInfos()[1:] {
		bases = append(bases, si.BaseOffset)
	}
	if got := snapshotOffsets(t, dir); !slices.Equal(got, bases) {
		t.Fatalf("snapshots at %v after the rolls, want one at each new segment's base %v", got, bases)
	}
	l.SetHighWatermark(l.Offsets().LogEnd)
	start := bases[2]
	if err := l.DeleteRecordsBefore(ctx, start); err != nil {
		t.Fatal(err)
	}
	if got := snapshotOffsets(t, dir); got[0] < start {
		t.Fatalf("snapshots at %v after the log start moved to %d", got, start)
	}
	end := bases[len(bases)-1] - 3
	if err := l.TruncateTo(end); err != nil {
		t.Fatal(err)
	}
	if got := snapshotOffsets(t, dir); got[len(got)-1] > l.Offsets().LogEnd {
		t.Fatalf("snapshots at %v after a truncation to %d", got, l.Offsets().LogEnd)
	}
	leo := l.Offsets().LogEnd
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if got := snapshotOffsets(t, dir); got[len(got)-1] != leo {
		t.Fatalf("snapshots at %v after Close, want one at the log end %d", got, leo)
	}
	// The producer's last batch before the truncation point is a
	// duplicate for the reopened log; a batch after it continues.
	l = openLog(t, dir, c, true)
	defer l.Close()
	// One producer from offset 0: its sequences are the offsets.
	info, err := l.Append(ctx, idemBatch(7, int32(leo)-5, 5), backend.AppendOptions{AssignOffsets: true})
	if err != nil || info.FirstOffset != leo-5 {
		t.Fatalf("a retry of the producer's last batch after the reopen: %+v, %v; want a duplicate at %d", info, err, leo-5)
	}
	if _, err := l.Append(ctx, idemBatch(7, int32(leo), 5), backend.AppendOptions{AssignOffsets: true}); err != nil {
		t.Fatalf("the producer's next batch after the reopen: %v", err)
	}
}

// listingFS counts the directory listings of an FS.
type listingFS struct {
	vfs.FS
	listings int
}

func (f *listingFS) ReadDir(name string) ([]fs.DirEntry, error) {
	f.listings++
	return f.FS.ReadDir(name)
}

// TestOpenListsTheDirectoryOnce: a log's open finds its segments and its
// producer snapshots in one listing of its directory; when the open
// changed the directory first (a leftover .tmp removed), it lists it
// again. Either way a snapshot past the log end is removed, and the
// state is loaded from the one at the log end.
func TestOpenListsTheDirectoryOnce(t *testing.T) {
	for _, leftover := range []bool{false, true} {
		t.Run(fmt.Sprintf("leftover=%v", leftover), func(t *testing.T) {
			dir := t.TempDir()
			l := openLog(t, dir, cfg(t), true)
			for range 3 {
				if _, err := l.Append(ctx, batchOf(2, 1000, "v"), backend.AppendOptions{AssignOffsets: true}); err != nil {
					t.Fatal(err)
				}
				if err := l.Roll(); err != nil {
					t.Fatal(err)
				}
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			stray := filepath.Join(dir, local.FileName(999, local.SnapshotSuffix))
			if err := os.WriteFile(stray, []byte("past the end"), 0o644); err != nil {
				t.Fatal(err)
			}
			if leftover {
				if err := os.WriteFile(filepath.Join(dir, local.FileName(6, local.SnapshotSuffix)+".tmp"), nil, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			lfs := &listingFS{FS: vfs.Default}
			l, err := local.Open(dir, local.Options{Config: cfg(t), CleanShutdown: true, LogStartOffset: -1, HighWatermark: -1, FS: lfs})
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			want := 1
			if leftover {
				want = 2
			}
			if lfs.listings != want {
				t.Errorf("the open listed the directory %d times, want %d", lfs.listings, want)
			}
			if got := snapshotOffsets(t, dir); !slices.Equal(got, []int64{2, 4, 6}) {
				t.Errorf("snapshots after the open: %v, want [2 4 6] (the one past the log end removed)", got)
			}
			if tmps, _ := filepath.Glob(filepath.Join(dir, "*.tmp")); len(tmps) != 0 {
				t.Errorf("the open left %v", tmps)
			}
			if _, err := l.Append(ctx, batchOf(2, 1000, "w"), backend.AppendOptions{AssignOffsets: true}); err != nil {
				t.Fatal(err)
			}
		})
	}
}
