// Package vfs is the filesystem seam of tierlog's local log and indexes.
// Every file the log creates, writes, syncs, truncates, renames or removes
// goes through an FS, so that tests can inject the faults production brings
// (testing/faultfs: EIO, ENOSPC at the k-th byte, fsync and rename
// failures) and crash a process at its k-th write.
//
// The seam is small on purpose (pebble's vfs.FS and raft-wal's VFS are the
// models): an FS opens files and changes names; a File reads, writes at
// offsets, syncs and truncates. Reads through a memory mapping and
// sendfile(2) need the operating system's file (File.OS); writes never go
// around the seam, except stores into an index mapping, whose backing pages
// are written through the File first (see package index).
package vfs

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// FS is a filesystem. Implementations MUST be safe for concurrent use.
// Errors are the operating system's (*fs.PathError and the like), so
// errors.Is(err, fs.ErrNotExist) and errors.Is(err, syscall.ENOSPC) work
// through every implementation.
type FS interface {
	// OpenFile opens name with os.OpenFile's flags and permission bits
	// (the OS FS drops setuid, setgid and sticky bits).
	OpenFile(name string, flag int, perm fs.FileMode) (File, error)
	// Remove removes a file or an empty directory.
	Remove(name string) error
	// RemoveAll removes name and everything below it.
	RemoveAll(name string) error
	// Rename renames oldpath to newpath, replacing newpath. It is durable
	// only once the directory is synced (SyncDir).
	Rename(oldpath, newpath string) error
	Stat(name string) (fs.FileInfo, error)
	// ReadDir lists a directory, in no particular order (a log directory
	// of 100,000 segments holds 300,000 names: sorting them was a third
	// of its open).
	ReadDir(name string) ([]fs.DirEntry, error)
	MkdirAll(name string, perm fs.FileMode) error
	Chtimes(name string, atime, mtime time.Time) error
	// SyncDir makes the directory's entries (names created, renamed and
	// removed in it) durable.
	SyncDir(name string) error
	// Lock takes an exclusive advisory lock on name (created when absent)
	// for this process, held until the returned Closer closes. A lock held
	// elsewhere is an error wrapping ErrLocked.
	Lock(name string) (io.Closer, error)
}

// File is an open file. Its methods MUST be safe for concurrent use where
// os.File's are (ReadAt and WriteAt at distinct ranges).
type File interface {
	Name() string
	io.ReaderAt
	// WriteAt writes at an offset; a short write returns an error (ENOSPC
	// after some bytes, say) with n the bytes written.
	io.WriterAt
	// Sync makes the file's data and size durable. An error means the
	// kernel may have dropped written pages: the caller MUST NOT assume
	// any unsynced byte survives, and retrying Sync proves nothing.
	Sync() error
	Truncate(size int64) error
	Stat() (fs.FileInfo, error)
	Close() error
	// OS returns the operating system's file under this one, for read-only
	// memory mappings and sendfile(2). Writes MUST go through File.
	OS() *os.File
}

// ErrLocked means another process holds a lock (FS.Lock).
var ErrLocked = errors.New("vfs: locked by another process")

// Default is the operating system's filesystem.
var Default FS = osFS{}

type osFS struct{}

type osFile struct{ *os.File }

func (f osFile) OS() *os.File { return f.File }

func (osFS) OpenFile(name string, flag int, perm fs.FileMode) (File, error) {
	f, err := openFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return osFile{f}, nil
}

// openFile opens name as os.OpenFile does, but hands the descriptor to
// os.NewFile: os.OpenFile offers every file to the runtime's network
// poller, which refuses a regular file or a directory (epoll gives EPERM)
// after five system calls (fcntl, epoll_ctl, fcntl back), about 1.4 µs an
// open on a VM, and a broker's restart opens six files a partition. A
// file the poller does not hold reads and writes as any other (a blocking
// call on a thread of its own). perm's permission bits only: tierlog
// creates no file with setuid, setgid or sticky bits.
func openFile(name string, flag int, perm fs.FileMode) (*os.File, error) {
	for {
		fd, err := syscall.Open(name, flag|syscall.O_CLOEXEC, uint32(perm.Perm()))
		if err == nil {
			return os.NewFile(uintptr(fd), name), nil
		}
		if err != syscall.EINTR {
			return nil, &fs.PathError{Op: "open", Path: name, Err: err}
		}
	}
}

func (osFS) Remove(name string) error              { return os.Remove(name) }
func (osFS) RemoveAll(name string) error           { return os.RemoveAll(name) }
func (osFS) Rename(oldpath, newpath string) error  { return os.Rename(oldpath, newpath) }
func (osFS) Stat(name string) (fs.FileInfo, error) { return os.Stat(name) }
func (osFS) ReadDir(name string) ([]fs.DirEntry, error) {
	f, err := openFile(name, os.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return f.ReadDir(-1)
}
func (osFS) MkdirAll(name string, perm fs.FileMode) error { return os.MkdirAll(name, perm) }
func (osFS) Chtimes(name string, atime, mtime time.Time) error {
	return os.Chtimes(name, atime, mtime)
}

func (osFS) SyncDir(name string) error {
	d, err := openFile(name, os.O_RDONLY, 0)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return &fs.PathError{Op: "fsync", Path: name, Err: err}
	}
	return nil
}

func (osFS) Lock(name string) (io.Closer, error) {
	f, err := openFile(name, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("%w: %s: %w", ErrLocked, name, err)
	}
	return f, nil
}

// ReadFile reads a whole file through fsys.
func ReadFile(fsys FS, name string) ([]byte, error) {
	f, err := fsys.OpenFile(name, os.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	buf := make([]byte, st.Size())
	n, err := f.ReadAt(buf, 0)
	if err == io.EOF && n == len(buf) {
		err = nil
	}
	return buf[:n], err
}

// WriteFileAtomic replaces dir/name with data durably, as a crash can
// never leave it half written: write name.tmp, fsync it, rename it over
// name, fsync the directory. A failure removes the temporary file.
func WriteFileAtomic(fsys FS, dir, name string, data []byte) (err error) {
	tmp := filepath.Join(dir, name+".tmp")
	f, err := fsys.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			f.Close()
			fsys.Remove(tmp)
		}
	}()
	if _, err = f.WriteAt(data, 0); err != nil {
		return err
	}
	if err = f.Sync(); err != nil {
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	if err = fsys.Rename(tmp, filepath.Join(dir, name)); err != nil {
		return err
	}
	return fsys.SyncDir(dir)
}
