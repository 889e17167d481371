// Package faultfs wraps a vfs.FS and injects the disk faults production
// brings: an fsync that fails, EIO on a write, ENOSPC at the k-th byte, a
// rename or a create that fails, a process killed at its k-th write. Tests
// hand an *FS to local.Options.FS (or BackendOptions.FS) and set a Hook:
//
//	ffs := faultfs.New(vfs.Default)
//	ffs.SetHook(faultfs.FailNth(faultfs.OpSync, 3, syscall.EIO))
//	l, _ := local.Open(dir, local.Options{FS: ffs})
//
// Every operation is numbered (Op.Seq, from 1) so a test can replay a
// fault at the same step: log the seed or the step.
package faultfs

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/tierlog/tierlog/vfs"
)

// Kind is what an operation does.
type Kind int

// Operation kinds.
const (
	OpOpen     Kind = iota // OpenFile (Op.Flag says whether it creates or writes)
	OpRead                 // File.ReadAt
	OpWrite                // File.WriteAt
	OpSync                 // File.Sync
	OpTruncate             // File.Truncate
	OpRename               // FS.Rename (Op.To is the new name)
	OpRemove               // FS.Remove and FS.RemoveAll
	OpSyncDir              // FS.SyncDir
	OpMkdir                // FS.MkdirAll
	OpChtimes              // FS.Chtimes
)

var kindNames = [...]string{"open", "read", "write", "sync", "truncate", "rename", "remove", "syncdir", "mkdir", "chtimes"}

func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// Op is one operation, as the Hook sees it before it runs.
type Op struct {
	Seq  int64 // 1 for the first operation of this FS
	Kind Kind
	Path string
	To   string // OpRename: the new name
	Off  int64  // OpRead, OpWrite: offset; OpTruncate: the new size
	Len  int    // OpRead, OpWrite: bytes
	Flag int    // OpOpen: os.OpenFile flags
}

// Mutates reports whether the operation changes the disk (reads, plain
// opens and stats do not).
func (op Op) Mutates() bool {
	switch op.Kind {
	case OpRead:
		return false
	case OpOpen:
		return op.Flag&(os.O_CREATE|os.O_TRUNC|os.O_WRONLY|os.O_RDWR) != 0
	}
	return true
}

func (op Op) String() string {
	switch op.Kind {
	case OpRename:
		return fmt.Sprintf("#%d %s %s -> %s", op.Seq, op.Kind, op.Path, op.To)
	case OpRead, OpWrite:
		return fmt.Sprintf("#%d %s %s [%d, +%d)", op.Seq, op.Kind, op.Path, op.Off, op.Len)
	}
	return fmt.Sprintf("#%d %s %s", op.Seq, op.Kind, op.Path)
}

// A Hook sees every operation before it runs. A non-nil error fails the
// operation with it, and nothing of the operation happens (a failed write
// writes nothing; see SetSpace for a write that stops part-way). A hook
// may also end the process (a crash test's SIGKILL at its k-th write).
type Hook func(op Op) error

// FS is a vfs.FS with faults. It is safe for concurrent use.
type FS struct {
	inner vfs.FS
	seq   atomic.Int64

	mu    sync.Mutex
	hook  Hook
	space int64 // bytes writes may still write; <0: no limit

	injected atomic.Int64
}

var _ vfs.FS = (*FS)(nil)

// New wraps inner (vfs.Default for the real disk).
func New(inner vfs.FS) *FS { return &FS{inner: inner, space: -1} }

// SetHook installs h (nil removes it).
func (f *FS) SetHook(h Hook) {
	f.mu.Lock()
	f.hook = h
	f.mu.Unlock()
}

// SetSpace leaves n bytes of free space: the writes that follow may write
// n bytes in all (any file; filling a hole in a sparse file takes space as
// much as growing one), and the write that would pass that writes what fits
// and fails with ENOSPC, as a full disk does. n < 0 removes the limit.
func (f *FS) SetSpace(n int64) {
	f.mu.Lock()
	f.space = n
	f.mu.Unlock()
}

// Ops is how many operations have run (or been refused) so far.
func (f *FS) Ops() int64 { return f.seq.Load() }

// Injected is how many operations a hook or the space limit failed.
func (f *FS) Injected() int64 { return f.injected.Load() }

func (f *FS) check(op Op) error {
	op.Seq = f.seq.Add(1)
	f.mu.Lock()
	h := f.hook
	f.mu.Unlock()
	if h == nil {
		return nil
	}
	if err := h(op); err != nil {
		f.injected.Add(1)
		return err
	}
	return nil
}

// FailNth returns a hook failing the n-th operation of kind (counting
// from 1 from when the hook is installed) with &fs.PathError{Err: errno}.
func FailNth(kind Kind, n int, errno error) Hook {
	var seen atomic.Int64
	return func(op Op) error {
		if op.Kind == kind && seen.Add(1) == int64(n) {
			return &fs.PathError{Op: op.Kind.String(), Path: op.Path, Err: errno}
		}
		return nil
	}
}

// FailAll returns a hook failing every operation of kind whose path
// matches (nil: any path) with errno.
func FailAll(kind Kind, match func(path string) bool, errno error) Hook {
	return func(op Op) error {
		if op.Kind == kind && (match == nil || match(op.Path)) {
			return &fs.PathError{Op: op.Kind.String(), Path: op.Path, Err: errno}
		}
		return nil
	}
}

func (f *FS) OpenFile(name string, flag int, perm fs.FileMode) (vfs.File, error) {
	if err := f.check(Op{Kind: OpOpen, Path: name, Flag: flag}); err != nil {
		return nil, err
	}
	in, err := f.inner.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return &file{File: in, fs: f}, nil
}

func (f *FS) Remove(name string) error {
	if err := f.check(Op{Kind: OpRemove, Path: name}); err != nil {
		return err
	}
	return f.inner.Remove(name)
}

func (f *FS) RemoveAll(name string) error {
	if err := f.check(Op{Kind: OpRemove, Path: name}); err != nil {
		return err
	}
	return f.inner.RemoveAll(name)
}

func (f *FS) Rename(oldpath, newpath string) error {
	if err := f.check(Op{Kind: OpRename, Path: oldpath, To: newpath}); err != nil {
		return err
	}
	return f.inner.Rename(oldpath, newpath)
}

func (f *FS) Stat(name string) (fs.FileInfo, error)      { return f.inner.Stat(name) }
func (f *FS) ReadDir(name string) ([]fs.DirEntry, error) { return f.inner.ReadDir(name) }

func (f *FS) MkdirAll(name string, perm fs.FileMode) error {
	if err := f.check(Op{Kind: OpMkdir, Path: name}); err != nil {
		return err
	}
	return f.inner.MkdirAll(name, perm)
}

func (f *FS) Chtimes(name string, atime, mtime time.Time) error {
	if err := f.check(Op{Kind: OpChtimes, Path: name}); err != nil {
		return err
	}
	return f.inner.Chtimes(name, atime, mtime)
}

func (f *FS) SyncDir(name string) error {
	if err := f.check(Op{Kind: OpSyncDir, Path: name}); err != nil {
		return err
	}
	return f.inner.SyncDir(name)
}

func (f *FS) Lock(name string) (io.Closer, error) { return f.inner.Lock(name) }

type file struct {
	vfs.File
	fs *FS
}

func (f *file) ReadAt(p []byte, off int64) (int, error) {
	if err := f.fs.check(Op{Kind: OpRead, Path: f.Name(), Off: off, Len: len(p)}); err != nil {
		return 0, err
	}
	return f.File.ReadAt(p, off)
}

func (f *file) WriteAt(p []byte, off int64) (int, error) {
	if err := f.fs.check(Op{Kind: OpWrite, Path: f.Name(), Off: off, Len: len(p)}); err != nil {
		return 0, err
	}
	fit := f.fs.reserve(len(p))
	n, werr := f.File.WriteAt(p[:fit], off)
	if werr == nil && fit < len(p) {
		f.fs.injected.Add(1)
		werr = &fs.PathError{Op: "write", Path: f.Name(), Err: syscall.ENOSPC}
	}
	return n, werr
}

// reserve returns how many bytes of a write of n fit in the space left,
// taking them from it.
func (f *FS) reserve(n int) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.space < 0 {
		return n
	}
	fit := int(min(int64(n), f.space))
	f.space -= int64(fit)
	return fit
}

func (f *file) Sync() error {
	if err := f.fs.check(Op{Kind: OpSync, Path: f.Name()}); err != nil {
		return err
	}
	return f.File.Sync()
}

func (f *file) Truncate(size int64) error {
	if err := f.fs.check(Op{Kind: OpTruncate, Path: f.Name(), Off: size}); err != nil {
		return err
	}
	return f.File.Truncate(size)
}
