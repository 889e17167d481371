package local_test

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/local"
	"github.com/tierlog/tierlog/record"
	"github.com/tierlog/tierlog/testing/faultfs"
	"github.com/tierlog/tierlog/vfs"
)

// Disk faults through testing/faultfs: whatever fails, nothing flushed is
// lost, nothing torn is served, and the errors name the file.

func openFaulty(t *testing.T, dir string, ffs *faultfs.FS, c backend.Config, clean bool) *local.Log {
	t.Helper()
	l, err := local.Open(dir, local.Options{Config: c, CleanShutdown: clean, LogStartOffset: -1, HighWatermark: -1, FS: ffs})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// logState is what a failed write must leave exactly as it was.
type logState struct {
	end     int64
	records int
	sizes   []int64
}

func stateOf(t *testing.T, l *local.Log) logState {
	t.Helper()
	var st logState
	st.end = l.Offsets().LogEnd
	st.records = len(readAll(t, l, l.Offsets().LogStart))
	for _, si := range l.SegmentInfos() {
		st.sizes = append(st.sizes, si.Size)
		if fi, err := os.Stat(si.Path); err == nil && fi.Size() != si.Size {
			t.Fatalf("%s is %d bytes on disk, the log says %d", si.Path, fi.Size(), si.Size)
		}
	}
	return st
}

// TestFsyncFailureFailsTheLog: a failed fsync is not retried (the kernel
// may have dropped the pages): Flush reports it naming the file, every
// later write is refused with ErrStorage, and a reopen keeps every record
// flushed before it.
func TestFsyncFailureFailsTheLog(t *testing.T) {
	dir := t.TempDir()
	ffs := faultfs.New(vfs.Default)
	l := openFaulty(t, dir, ffs, cfg(t, "segment.bytes", "4096"), false)
	for i := range 20 {
		if _, err := l.Append(ctx, batchOf(3, int64(i), "a"), backend.AppendOptions{AssignOffsets: true}); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Flush(); err != nil {
		t.Fatal(err)
	}
	flushed := l.Offsets().LogEnd
	for i := range 5 {
		if _, err := l.Append(ctx, batchOf(3, int64(i), "b"), backend.AppendOptions{AssignOffsets: true}); err != nil {
			t.Fatal(err)
		}
	}
	ffs.SetHook(faultfs.FailAll(faultfs.OpSync, nil, syscall.EIO))
	err := l.Flush()
	if !errors.Is(err, backend.ErrStorage) || !errors.Is(err, syscall.EIO) || !strings.Contains(err.Error(), dir) {
		t.Fatalf("flush with a failing fsync: %v; want ErrStorage wrapping EIO, naming the file", err)
	}
	ffs.SetHook(nil)
	if _, err := l.Append(ctx, batchOf(1, 0, "c"), backend.AppendOptions{AssignOffsets: true}); !errors.Is(err, backend.ErrStorage) {
		t.Fatalf("append after a failed fsync: %v; want ErrStorage until the log is reopened", err)
	}
	if err := l.Flush(); !errors.Is(err, backend.ErrStorage) {
		t.Fatalf("a second flush after a failed fsync: %v; want ErrStorage (an fsync is not retried)", err)
	}
	if err := l.Close(); !errors.Is(err, backend.ErrStorage) {
		t.Fatalf("close of a failed log: %v", err)
	}
	r := openLog(t, dir, cfg(t, "segment.bytes", "4096"), false) // unclean: recovery
	defer r.Close()
	if got := int64(len(readAll(t, r, 0))); got < flushed {
		t.Fatalf("after reopen %d records, %d were flushed", got, flushed)
	}
	if _, err := r.Append(ctx, batchOf(1, 0, "d"), backend.AppendOptions{AssignOffsets: true}); err != nil {
		t.Fatalf("append after reopen: %v", err)
	}
}

// TestWriteErrorLeavesLogAsItWas: EIO on the .log write fails the append
// (ErrStorage, naming the file) with nothing appended; the next append
// goes through.
func TestWriteErrorLeavesLogAsItWas(t *testing.T) {
	dir := t.TempDir()
	ffs := faultfs.New(vfs.Default)
	l := openFaulty(t, dir, ffs, cfg(t), false)
	defer l.Close()
	for i := range 5 {
		if _, err := l.Append(ctx, batchOf(3, int64(i), "a"), backend.AppendOptions{AssignOffsets: true}); err != nil {
			t.Fatal(err)
		}
	}
	before := stateOf(t, l)
	ffs.SetHook(faultfs.FailAll(faultfs.OpWrite, func(p string) bool { return strings.HasSuffix(p, local.LogSuffix) }, syscall.EIO))
	_, err := l.Append(ctx, batchOf(3, 9, "x"), backend.AppendOptions{AssignOffsets: true})
	ffs.SetHook(nil)
	if !errors.Is(err, backend.ErrStorage) || !errors.Is(err, syscall.EIO) || !strings.Contains(err.Error(), local.LogSuffix) {
		t.Fatalf("append with EIO: %v; want ErrStorage wrapping EIO, naming the .log", err)
	}
	if after := stateOf(t, l); !slices.Equal(after.sizes, before.sizes) || after.end != before.end || after.records != before.records {
		t.Fatalf("a failed append changed the log: %+v, was %+v", after, before)
	}
	if _, err := l.Append(ctx, batchOf(3, 9, "y"), backend.AppendOptions{AssignOffsets: true}); err != nil {
		t.Fatalf("the append after the failed one: %v", err)
	}
}

// TestENOSPCAtEveryByteOfAnAppend: a full disk at every byte of an append
// of several batches (its index page backing included) leaves the log
// exactly as it was; once there is space again the append goes through,
// and a reopen finds every record and rebuilt indexes that match.
func TestENOSPCAtEveryByteOfAnAppend(t *testing.T) {
	dir := t.TempDir()
	ffs := faultfs.New(vfs.Default)
	c := cfg(t, "index.interval.bytes", "100")
	l := openFaulty(t, dir, ffs, c, false)
	var chunk []byte
	for i := range 3 {
		chunk = append(chunk, batchOf(4, int64(i), "p")...)
	}
	follower := func(base int64) []byte { // the same batches as a follower appends them
		out := append([]byte(nil), chunk...)
		for pos := 0; pos < len(out); {
			b, _ := record.Parse(out[pos:])
			b.SetBaseOffset(base)
			base = b.NextOffset()
			pos += len(b)
		}
		return out
	}
	failures := 0
	for k := 0; ; k++ {
		before := stateOf(t, l)
		ffs.SetSpace(int64(k))
		_, err := l.Append(ctx, follower(before.end), backend.AppendOptions{})
		ffs.SetSpace(-1)
		if err == nil {
			if k == 0 {
				t.Fatal("an append went through with no space at all")
			}
			break
		}
		failures++
		if !errors.Is(err, backend.ErrStorage) || !errors.Is(err, syscall.ENOSPC) {
			t.Fatalf("k=%d: %v; want ErrStorage wrapping ENOSPC", k, err)
		}
		if after := stateOf(t, l); !slices.Equal(after.sizes, before.sizes) || after.end != before.end || after.records != before.records {
			t.Fatalf("k=%d: a failed append changed the log: %+v, was %+v", k, after, before)
		}
		if k > 1<<20 {
			t.Fatal("no end")
		}
		k += k / 50 // dense at the start (index backing), sparser through the batches
	}
	if failures < 10 {
		t.Fatalf("only %d failed attempts: the test proves little", failures)
	}
	want := len(readAll(t, l, 0))
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	r := openLog(t, dir, c, false)
	defer r.Close()
	if got := len(readAll(t, r, 0)); got != want {
		t.Fatalf("after reopen %d records, want %d", got, want)
	}
}

// TestCreateFailureDuringRoll: the new segment cannot be created; the
// append that needed the roll fails with nothing written, and the next one
// rolls.
func TestCreateFailureDuringRoll(t *testing.T) {
	dir := t.TempDir()
	ffs := faultfs.New(vfs.Default)
	l := openFaulty(t, dir, ffs, cfg(t, "segment.bytes", "2048"), false)
	defer l.Close()
	for len(l.SegmentInfos()) < 2 {
		if _, err := l.Append(ctx, batchOf(3, 0, "a"), backend.AppendOptions{AssignOffsets: true}); err != nil {
			t.Fatal(err)
		}
	}
	// Fill the last segment so the next append rolls.
	for l.SegmentInfos()[len(l.SegmentInfos())-1].Size < 1500 {
		if _, err := l.Append(ctx, batchOf(1, 0, "f"), backend.AppendOptions{AssignOffsets: true}); err != nil {
			t.Fatal(err)
		}
	}
	before := stateOf(t, l)
	ffs.SetHook(func(op faultfs.Op) error {
		if op.Kind == faultfs.OpOpen && op.Flag&os.O_CREATE != 0 && strings.HasSuffix(op.Path, local.LogSuffix) {
			return &os.PathError{Op: "open", Path: op.Path, Err: syscall.EIO}
		}
		return nil
	})
	_, err := l.Append(ctx, batchOf(12, 0, "r"), backend.AppendOptions{AssignOffsets: true})
	ffs.SetHook(nil)
	if !errors.Is(err, backend.ErrStorage) || !strings.Contains(err.Error(), local.LogSuffix) {
		t.Fatalf("append needing a roll that cannot create its segment: %v", err)
	}
	if after := stateOf(t, l); !slices.Equal(after.sizes, before.sizes) || after.end != before.end {
		t.Fatalf("the failed roll changed the log: %+v, was %+v", after, before)
	}
	if _, err := l.Append(ctx, batchOf(12, 0, "r"), backend.AppendOptions{AssignOffsets: true}); err != nil {
		t.Fatalf("the next append: %v", err)
	}
	if len(l.SegmentInfos()) != len(before.sizes)+1 {
		t.Fatalf("%d segments after the roll, want %d", len(l.SegmentInfos()), len(before.sizes)+1)
	}
}

// TestEpochCheckpointRenameFailure: an append that opens a new leader
// epoch must write leader-epoch-checkpoint (tmp, fsync, rename) before its
// bytes; a failed rename fails the append with nothing written.
func TestEpochCheckpointRenameFailure(t *testing.T) {
	dir := t.TempDir()
	ffs := faultfs.New(vfs.Default)
	l := openFaulty(t, dir, ffs, cfg(t), false)
	defer l.Close()
	if _, err := l.Append(ctx, batchOf(2, 0, "a"), backend.AppendOptions{AssignOffsets: true, LeaderEpoch: 1}); err != nil {
		t.Fatal(err)
	}
	before := stateOf(t, l)
	ffs.SetHook(faultfs.FailAll(faultfs.OpRename, nil, syscall.EIO))
	_, err := l.Append(ctx, batchOf(2, 0, "b"), backend.AppendOptions{AssignOffsets: true, LeaderEpoch: 2})
	ffs.SetHook(nil)
	if !errors.Is(err, backend.ErrStorage) || !strings.Contains(err.Error(), local.LeaderEpochCheckpoint) {
		t.Fatalf("append whose epoch checkpoint cannot be renamed: %v", err)
	}
	if after := stateOf(t, l); after.end != before.end || !slices.Equal(after.sizes, before.sizes) {
		t.Fatal("the failed append changed the log")
	}
	if got := l.LeaderEpochs(); len(got) != 1 || got[0].Epoch != 1 {
		t.Fatalf("epoch cache after the failed append: %v", got)
	}
	if _, err := l.Append(ctx, batchOf(2, 0, "b"), backend.AppendOptions{AssignOffsets: true, LeaderEpoch: 2}); err != nil {
		t.Fatal(err)
	}
	if got := l.LeaderEpochs(); len(got) != 2 || got[1] != (local.EpochEntry{Epoch: 2, StartOffset: 2}) {
		t.Fatalf("epoch cache: %v", got)
	}
}

// TestRenameFailureDuringCleanerSwap fails each rename of a cleaner's
// replacement in turn: the commit reports it naming the files; the log
// either goes on (it was left whole) or refuses writes until reopened; a
// reopen holds the old batches or the new ones, never a mix, and nothing
// is left behind.
func TestRenameFailureDuringCleanerSwap(t *testing.T) {
	c := cfg(t, "segment.bytes", "2000", "file.delete.delay.ms", "0", "cleanup.policy", "compact")
	for nth := 1; ; nth++ {
		dir := filepath.Join(t.TempDir(), "p-0")
		ffs := faultfs.New(vfs.Default)
		l := openFaulty(t, dir, ffs, c, false)
		for i := range 40 {
			if _, err := l.Append(ctx, batchOf(2, int64(i), "c"), backend.AppendOptions{AssignOffsets: true}); err != nil {
				t.Fatal(err)
			}
		}
		if err := l.Flush(); err != nil {
			t.Fatal(err)
		}
		segs := l.SegmentInfos()
		before := batchBases(t, l)
		// Replace segments 1 and 2 with their batches but those at
		// multiples of 4 (the group's last batch always stays).
		r, err := l.Segments().BeginCleaning().NewReplacement([]int64{segs[1].BaseOffset, segs[2].BaseOffset})
		if err != nil {
			t.Fatal(err)
		}
		dropped := map[int64]bool{}
		for i, si := range segs[1:3] {
			h, err := l.Segments().OpenSegment(si.BaseOffset)
			if err != nil {
				t.Fatal(err)
			}
			sc := record.NewScanner(h, 0, h.Size(), record.ScanOptions{})
			for sc.Next() {
				e := sc.Entry()
				if last := i == 1 && e.Position+e.Size == h.Size(); !last && e.BaseOffset%4 == 0 {
					dropped[e.BaseOffset] = true
					continue
				}
				r.Write(e.Data)
			}
			h.Close()
		}
		after := slices.DeleteFunc(slices.Clone(before), func(b int64) bool { return dropped[b] })
		renames := 0
		ffs.SetHook(func(op faultfs.Op) error {
			if op.Kind == faultfs.OpRename {
				if renames++; renames == nth {
					return &os.PathError{Op: "rename", Path: op.Path, Err: syscall.EIO}
				}
			}
			return nil
		})
		err = r.Commit()
		ffs.SetHook(nil)
		if err == nil {
			l.Close()
			if nth == 1 {
				t.Fatal("no rename was failed")
			}
			t.Logf("failed each of the commit's %d renames in turn", nth-1)
			return
		}
		if !strings.Contains(err.Error(), dir) {
			t.Errorf("rename %d: %v does not name the partition's files", nth, err)
		}
		end := l.Offsets().LogEnd
		if _, aerr := l.Append(ctx, batchOf(2, 0, "z"), backend.AppendOptions{AssignOffsets: true}); aerr != nil && !errors.Is(aerr, backend.ErrStorage) {
			t.Errorf("rename %d: append after the failed commit: %v", nth, aerr)
		}
		l.Close()
		re := openLog(t, dir, c, false)
		got := slices.DeleteFunc(batchBases(t, re), func(b int64) bool { return b >= end }) // the z batch, if it went in
		if !slices.Equal(got, before) && !slices.Equal(got, after) {
			t.Fatalf("rename %d failed: the reopened log holds %v, neither the old %v nor the new %v", nth, got, before, after)
		}
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			if n := e.Name(); strings.HasSuffix(n, local.SwapSuffix) || strings.HasSuffix(n, local.CleanedSuffix) || strings.HasSuffix(n, local.DeletedSuffix) {
				t.Fatalf("rename %d: %s left behind after recovery", nth, n)
			}
		}
		re.Close()
	}
}

// batchBases reads a log batch by batch and returns the batches' bases.
func batchBases(t *testing.T, l *local.Log) []int64 {
	t.Helper()
	var out []int64
	for off := l.Offsets().LogStart; off < l.Offsets().LogEnd; {
		rs, err := l.Read(ctx, off, backend.ReadOptions{MaxBytes: 1, MinOneBatch: true})
		if err != nil {
			t.Fatalf("read %d: %v", off, err)
		}
		var buf bytes.Buffer
		rs.WriteTo(&buf)
		rs.Close()
		b, err := record.Parse(buf.Bytes())
		if err != nil || b.Validate() != nil {
			t.Fatalf("read %d: %v", off, err)
		}
		out = append(out, b.BaseOffset())
		off = b.NextOffset()
	}
	return out
}

// TestRollSyncsRaiseTheRecoveryPointInOrder: each roll syncs the sealed
// segment in the background and then raises the recovery point to the new
// base; a later roll's sync finishing first must not raise it past an
// earlier sealed segment whose sync is still running (a Flush and the
// next recovery would then trust that segment unsynced).
func TestRollSyncsRaiseTheRecoveryPointInOrder(t *testing.T) {
	dir := t.TempDir()
	ffs := faultfs.New(vfs.Default)
	l := openFaulty(t, dir, ffs, cfg(t, "segment.bytes", "2048"), false)
	defer l.Close()
	first := filepath.Join(dir, local.FileName(0, local.LogSuffix))
	release := make(chan struct{})
	ffs.SetHook(func(op faultfs.Op) error {
		if op.Kind == faultfs.OpSync && op.Path == first {
			<-release // the first sealed segment's fsync is slow
		}
		return nil
	})
	for len(l.SegmentInfos()) < 4 {
		if _, err := l.Append(ctx, batchOf(3, 0, "a"), backend.AppendOptions{AssignOffsets: true}); err != nil {
			t.Fatal(err)
		}
	}
	second := l.SegmentInfos()[1].BaseOffset
	time.Sleep(200 * time.Millisecond) // the later rolls' syncs end meanwhile
	if rp := l.RecoveryPoint(); rp >= second {
		close(release)
		t.Fatalf("recovery point %d while the segment below %d is not synced yet", rp, second)
	}
	close(release)
	ffs.SetHook(nil)
	deadline := time.Now().Add(10 * time.Second)
	for l.RecoveryPoint() < second {
		if time.Now().After(deadline) {
			t.Fatalf("recovery point %d after the first segment's sync ended, want at least %d", l.RecoveryPoint(), second)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestEpochCheckpointFailingAfterRename: a checkpoint write that fails
// after its rename (the directory's fsync) left the new entry in the file
// while the failed append put the cache back as if the file had not
// changed: the next append, at the old epoch, wrote no checkpoint, and a
// reopen took the file's entry as real (epoch 6 from offset 5, where
// offsets 5..9 were written at epoch 3).
func TestEpochCheckpointFailingAfterRename(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "orders-0")
	ffs := faultfs.New(vfs.Default)
	l := openFaulty(t, dir, ffs, cfg(t), false)
	if _, err := l.Append(ctx, batchOf(5, 1, "a"), backend.AppendOptions{AssignOffsets: true, LeaderEpoch: 3}); err != nil {
		t.Fatal(err)
	}
	var renamed atomic.Bool
	ffs.SetHook(func(op faultfs.Op) error {
		if op.Kind == faultfs.OpRename && strings.HasSuffix(op.To, local.LeaderEpochCheckpoint) {
			renamed.Store(true)
		}
		if op.Kind == faultfs.OpSyncDir && renamed.Swap(false) {
			return &fs.PathError{Op: "syncdir", Path: op.Path, Err: syscall.EIO}
		}
		return nil
	})
	if _, err := l.Append(ctx, batchOf(5, 2, "b"), backend.AppendOptions{AssignOffsets: true, LeaderEpoch: 6}); err == nil {
		t.Fatal("append with a failing checkpoint succeeded")
	}
	ffs.SetHook(nil)
	if _, err := l.Append(ctx, batchOf(5, 3, "c"), backend.AppendOptions{AssignOffsets: true, LeaderEpoch: 3}); err != nil {
		t.Fatal(err)
	}
	want := []local.EpochEntry{{Epoch: 3, StartOffset: 0}}
	if got := l.LeaderEpochs(); !slices.Equal(got, want) {
		t.Fatalf("cache %v, want %v", got, want)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = openLog(t, dir, cfg(t), true)
	defer l.Close()
	if got := l.LeaderEpochs(); !slices.Equal(got, want) {
		t.Fatalf("after reopen %v, want %v (offsets 5..9 were written at epoch 3)", got, want)
	}
}
