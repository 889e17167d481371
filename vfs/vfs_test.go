package vfs_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"

	"github.com/tierlog/tierlog/vfs"
)

// TestOpenFileAsOSOpenFile: the operating system's FS opens, creates and
// refuses files as os.OpenFile does: the same flags, the permission bits
// given (less the umask), errors a *fs.PathError naming the file that
// errors.Is matches, and directories listed and synced.
func TestOpenFileAsOSOpenFile(t *testing.T) {
	dir := t.TempDir()
	fsys := vfs.Default
	name := filepath.Join(dir, "a.log")

	_, err := fsys.OpenFile(name, os.O_RDONLY, 0)
	var pe *fs.PathError
	if !errors.Is(err, fs.ErrNotExist) || !errors.As(err, &pe) || pe.Op != "open" || pe.Path != name {
		t.Fatalf("open of a missing file: %v, want a *fs.PathError (open %s) matching fs.ErrNotExist", err, name)
	}

	f, err := fsys.OpenFile(name, os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o640)
	if err != nil {
		t.Fatal(err)
	}
	if f.Name() != name {
		t.Errorf("Name() = %q, want %q", f.Name(), name)
	}
	if _, err := f.WriteAt([]byte("hello"), 3); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 5)
	if _, err := f.ReadAt(got, 3); err != nil || string(got) != "hello" {
		t.Fatalf("ReadAt = %q, %v; want hello", got, err)
	}
	st, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	// The umask may take bits away, never add them; none takes the owner's.
	if perm := st.Mode().Perm(); perm&^0o640 != 0 || perm&0o600 != 0o600 || st.Size() != 8 {
		t.Errorf("created with mode %v and size %d, want within -rw-r----- with the owner's bits, and 8", perm, st.Size())
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := fsys.OpenFile(name, os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o644); !errors.Is(err, fs.ErrExist) {
		t.Errorf("O_EXCL over an existing file: %v, want fs.ErrExist", err)
	}
	if _, err := fsys.OpenFile(filepath.Join(name, "x"), os.O_RDONLY, 0); !errors.Is(err, syscall.ENOTDIR) {
		t.Errorf("open below a file: %v, want ENOTDIR", err)
	}
	r, err := fsys.OpenFile(name, os.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.WriteAt([]byte("x"), 0); err == nil {
		t.Error("a write to a file opened read-only succeeded")
	}
	r.Close()

	ents, err := fsys.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if !slices.Equal(names, []string{"a.log"}) {
		t.Errorf("ReadDir = %v, want [a.log]", names)
	}
	if err := fsys.SyncDir(dir); err != nil {
		t.Error(err)
	}
	if _, err := fsys.ReadDir(filepath.Join(dir, "missing")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("ReadDir of a missing directory: %v, want fs.ErrNotExist", err)
	}

	lk, err := fsys.Lock(filepath.Join(dir, ".lock"))
	if err != nil {
		t.Fatal(err)
	}
	defer lk.Close()
	if l2, err := fsys.Lock(filepath.Join(dir, ".lock")); !errors.Is(err, vfs.ErrLocked) {
		if l2 != nil {
			l2.Close()
		}
		t.Errorf("a second lock: %v, want ErrLocked", err)
	}
}
