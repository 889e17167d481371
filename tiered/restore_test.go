package tiered_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/local"
	"github.com/tierlog/tierlog/manifest"
	"github.com/tierlog/tierlog/objstore"
	"github.com/tierlog/tierlog/objstore/mem"
	"github.com/tierlog/tierlog/testing/faultfs"
	"github.com/tierlog/tierlog/testing/faultstore"
	"github.com/tierlog/tierlog/tiered"
	"github.com/tierlog/tierlog/vfs"
)

// offloadedForRestore fills a bucket with a partition of several segments,
// offloaded under "tl/orders-0", and returns its driver and manifest.
func offloadedForRestore(t *testing.T) (*mem.Driver, *manifest.Manifest) {
	t.Helper()
	drv := mem.New()
	store := objstore.New(drv, "mem://restore-atomic", objstore.Options{})
	c := cfg(t, "segment.bytes", "300000", "local.retention.ms", "0", "file.delete.delay.ms", "0")
	p := open(t, filepath.Join(t.TempDir(), "orders-0"), store, 1, c)
	produce(t, p, 10_000)
	if _, err := p.Offload(ctx); err != nil {
		t.Fatal(err)
	}
	m := manifestOf(t, p)
	p.Close()
	if len(m.Segments) < 3 {
		t.Fatalf("%d segments offloaded, want 3 or more", len(m.Segments))
	}
	return drv, m
}

// onlyLock fails unless logDir holds nothing but the lock file: no
// partition directory, whole or partial, and no temporary directory.
func onlyLock(t *testing.T, logDir string) {
	t.Helper()
	ents, err := os.ReadDir(logDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if e.Name() != local.LockFile {
			t.Errorf("a failed restore left %s in the log directory", e.Name())
		}
	}
}

// restoredEnd opens the restored directory and returns its log end.
func restoredEnd(t *testing.T, dir string, m *manifest.Manifest) int64 {
	t.Helper()
	l, err := local.Open(dir, local.Options{LogStartOffset: m.LogStartOffset, HighWatermark: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Offsets().LogEnd
}

// TestRestoreFailureLeavesNothing: a restore that fails part way (a body
// cut short again and again, a CRC mismatch, an error from the store)
// leaves no partition directory, whole or partial, and no temporary one;
// a rerun once the fault is gone restores the partition.
func TestRestoreFailureLeavesNothing(t *testing.T) {
	drv, m := offloadedForRestore(t)
	victim := "tl/orders-0/" + m.Segments[1].Name(manifest.LogSuffix)
	wantEnd := m.Segments[len(m.Segments)-1].LastOffset + 1
	for _, c := range []struct {
		name  string
		rules []faultstore.Rule
		// damage changes the bucket and returns what undoes it.
		damage  func(t *testing.T, store *objstore.Store) (undo func())
		wantErr error
	}{
		{name: "body cut every time", rules: []faultstore.Rule{{Op: objstore.OpGet, KeyContains: m.Segments[1].Name(manifest.LogSuffix), Fault: faultstore.CutBody, AfterBytes: 1000, Every: 1}}},
		{name: "store error", rules: []faultstore.Rule{{Op: objstore.OpGet, KeyContains: m.Segments[2].Name(manifest.IndexSuffix), Fault: faultstore.Permanent, Every: 1}}},
		{name: "crc mismatch", wantErr: backend.ErrCorruptRecord, damage: func(t *testing.T, store *objstore.Store) func() {
			good, err := store.ReadAll(ctx, victim, 0, -1)
			if err != nil {
				t.Fatal(err)
			}
			bad := bytes.Clone(good)
			bad[len(bad)/2] ^= 0xff
			if _, err := store.Put(ctx, victim, bytes.NewReader(bad), int64(len(bad)), objstore.PutOptions{}); err != nil {
				t.Fatal(err)
			}
			return func() {
				if _, err := store.Put(ctx, victim, bytes.NewReader(good), int64(len(good)), objstore.PutOptions{}); err != nil {
					t.Fatal(err)
				}
			}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			fd := faultstore.Wrap(drv, 1, c.rules...)
			store := objstore.New(fd, "faulty", objstore.Options{MaxAttempts: 2, BaseBackoff: time.Millisecond})
			undo := func() {}
			if c.damage != nil {
				undo = c.damage(t, store)
			}
			logDir := t.TempDir()
			dir := filepath.Join(logDir, "orders-0")
			_, err := tiered.Restore(ctx, store, "tl/orders-0", dir, tiered.RestoreOptions{})
			if err == nil || (c.wantErr != nil && !errors.Is(err, c.wantErr)) {
				t.Fatalf("restore with a fault: %v, want an error (%v)", err, c.wantErr)
			}
			t.Logf("restore failed as it should: %v", err)
			onlyLock(t, logDir)

			// The fault gone, a rerun restores everything.
			fd.SetEnabled(false)
			undo()
			rm, err := tiered.Restore(ctx, store, "tl/orders-0", dir, tiered.RestoreOptions{})
			if err != nil {
				t.Fatalf("rerun: %v", err)
			}
			if end := restoredEnd(t, dir, rm); end != wantEnd {
				t.Fatalf("restored log ends at %d, want %d", end, wantEnd)
			}
		})
	}
}

// TestRestoreRemovesKilledLeftover: the temporary directory of a restore
// that was killed is not a partition to tierlog, and the next restore of
// the partition removes it.
func TestRestoreRemovesKilledLeftover(t *testing.T) {
	drv, _ := offloadedForRestore(t)
	store := objstore.New(drv, "mem://restore-atomic", objstore.Options{})
	logDir := t.TempDir()
	leftover := filepath.Join(logDir, "orders-0.restoring-0123456789abcdef-delete")
	if err := os.MkdirAll(leftover, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(leftover, local.FileName(0, local.LogSuffix)), []byte("half a segment"), 0o644); err != nil {
		t.Fatal(err)
	}
	b, err := local.OpenBackend(logDir, local.BackendOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if tps, err := b.Partitions(ctx); err != nil || len(tps) != 0 {
		t.Fatalf("the log dir lists partitions %v (%v) with only a restore's leftover in it", tps, err)
	}
	b.Close()
	if _, err := tiered.Restore(ctx, store, "tl/orders-0", filepath.Join(logDir, "orders-0"), tiered.RestoreOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(leftover); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the leftover of a killed restore is still there: %v", err)
	}
}

// TestRestoreTakesTheLogDirLock: while another process holds the log
// directory (a broker), restore writes nothing; a caller holding it through
// an open Backend passes that Backend.
func TestRestoreTakesTheLogDirLock(t *testing.T) {
	drv, m := offloadedForRestore(t)
	store := objstore.New(drv, "mem://restore-atomic", objstore.Options{})
	logDir := t.TempDir()
	dir := filepath.Join(logDir, "orders-0")
	lock, err := vfs.Default.Lock(filepath.Join(logDir, local.LockFile))
	if err != nil {
		t.Fatal(err)
	}
	_, err = tiered.Restore(ctx, store, "tl/orders-0", dir, tiered.RestoreOptions{})
	if !errors.Is(err, vfs.ErrLocked) {
		t.Fatalf("restore into a locked log directory: %v, want vfs.ErrLocked", err)
	}
	onlyLock(t, logDir)
	lock.Close()

	b, err := local.OpenBackend(logDir, local.BackendOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if _, err := tiered.Restore(ctx, store, "tl/orders-0", filepath.Join(t.TempDir(), "orders-0"), tiered.RestoreOptions{Backend: b}); err == nil ||
		!strings.Contains(err.Error(), logDir) {
		t.Fatalf("restore outside the Backend's log directory: %v", err)
	}
	rm, err := tiered.Restore(ctx, store, "tl/orders-0", dir, tiered.RestoreOptions{Backend: b})
	if err != nil {
		t.Fatal(err)
	}
	if end := restoredEnd(t, dir, rm); end != m.Segments[len(m.Segments)-1].LastOffset+1 {
		t.Fatalf("restored log ends at %d", end)
	}
}

// TestRestoreWithoutManifest: a prefix with no manifest is ErrNoManifest,
// and nothing is written.
func TestRestoreWithoutManifest(t *testing.T) {
	drv, _ := offloadedForRestore(t)
	store := objstore.New(drv, "mem://restore-atomic", objstore.Options{})
	logDir := t.TempDir()
	_, err := tiered.Restore(ctx, store, "tl/orders-9", filepath.Join(logDir, "orders-9"), tiered.RestoreOptions{})
	if !errors.Is(err, tiered.ErrNoManifest) || !strings.Contains(err.Error(), "tl/orders-9") {
		t.Fatalf("restore of a prefix without a manifest: %v", err)
	}
	onlyLock(t, logDir)
}

// TestRestoreOutOfSpace: a disk that fills up at any point of a restore
// (each of a spread of byte counts, from the first object to the last)
// fails it with ENOSPC and leaves the log directory as it was, the
// partition absent; with room again, a rerun restores everything.
func TestRestoreOutOfSpace(t *testing.T) {
	drv, m := offloadedForRestore(t)
	store := objstore.New(drv, "mem://restore-atomic", objstore.Options{})
	wantEnd := m.Segments[len(m.Segments)-1].LastOffset + 1
	var total int64
	for _, s := range m.Segments {
		for _, suf := range s.Objects() {
			size, _ := s.Object(suf)
			total += size
		}
	}
	for _, room := range []int64{0, 100, total / 3, total / 2, total - 1000} {
		t.Run(fmt.Sprint("room=", room), func(t *testing.T) {
			ffs := faultfs.New(vfs.Default)
			ffs.SetSpace(room)
			logDir := t.TempDir()
			dir := filepath.Join(logDir, "orders-0")
			_, err := tiered.Restore(ctx, store, "tl/orders-0", dir, tiered.RestoreOptions{FS: ffs})
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("restore with %d bytes of room (of %d): %v; want ENOSPC", room, total, err)
			}
			onlyLock(t, logDir)
			ffs.SetSpace(-1)
			rm, err := tiered.Restore(ctx, store, "tl/orders-0", dir, tiered.RestoreOptions{FS: ffs})
			if err != nil {
				t.Fatalf("rerun with room: %v", err)
			}
			if end := restoredEnd(t, dir, rm); end != wantEnd {
				t.Fatalf("restored log ends at %d, want %d", end, wantEnd)
			}
		})
	}
}
