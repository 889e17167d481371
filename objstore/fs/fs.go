// Package fs is an objstore driver over a local directory: the embedded
// default, and a bucket on a mounted filesystem.
//
// An object is the file <root>/<key>. A put writes <root>/.tmp/<random>,
// fsyncs it, then renames it into place and fsyncs the directory, so a
// reader sees the old object or the new one, never a part. Conditional puts
// take an exclusive flock on <root>/.lock around the check and the rename,
// which makes them atomic across processes on one host. ETags name the
// file's inode and modification time, so every put makes a new one.
package fs

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	iofs "io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/tierlog/tierlog/objstore"
)

const tmpDir = ".tmp"

// Driver is a directory used as a bucket.
type Driver struct {
	root string
}

// Open returns a driver over root, which must exist and be a directory
// (a missing bucket is objstore.ErrBucketNotFound).
func Open(root string) (*Driver, error) {
	st, err := os.Stat(root)
	if err != nil || !st.IsDir() {
		return nil, fmt.Errorf("%w: directory %s", objstore.ErrBucketNotFound, root)
	}
	if err := os.MkdirAll(filepath.Join(root, tmpDir), 0o755); err != nil {
		return nil, mapErr(err)
	}
	return &Driver{root: root}, nil
}

func (d *Driver) path(key string) string { return filepath.Join(d.root, filepath.FromSlash(key)) }

// mapErr is the one place this driver's errors become the seam's.
func mapErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, iofs.ErrNotExist):
		return fmt.Errorf("%w: %w", objstore.ErrNotFound, err)
	case errors.Is(err, iofs.ErrPermission):
		return fmt.Errorf("%w: %w", objstore.ErrAccessDenied, err)
	case errors.Is(err, syscall.ENOTDIR), errors.Is(err, syscall.EISDIR), errors.Is(err, syscall.ENAMETOOLONG):
		return fmt.Errorf("%w: %w", objstore.ErrInvalidKey, err)
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return err
	}
	return err
}

func etag(st os.FileInfo) string {
	ino := uint64(0)
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		ino = sys.Ino
	}
	return fmt.Sprintf(`"%x-%x-%x"`, ino, st.ModTime().UnixNano(), st.Size())
}

func info(key string, st os.FileInfo) objstore.ObjectInfo {
	return objstore.ObjectInfo{Key: key, Size: st.Size(), ETag: etag(st), LastModified: st.ModTime()}
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Put implements objstore.Driver.
func (d *Driver) Put(ctx context.Context, key string, body io.ReadSeeker, size int64, opts objstore.PutOptions) (_ objstore.ObjectInfo, err error) {
	if err := ctx.Err(); err != nil {
		return objstore.ObjectInfo{}, err
	}
	if key == tmpDir || strings.HasPrefix(key, tmpDir+"/") {
		return objstore.ObjectInfo{}, fmt.Errorf("%w: %q is reserved by the fs driver", objstore.ErrInvalidKey, key)
	}
	var rnd [8]byte
	rand.Read(rnd[:])
	tmp := filepath.Join(d.root, tmpDir, hex.EncodeToString(rnd[:]))
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return objstore.ObjectInfo{}, mapErr(err)
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(tmp)
		}
	}()
	h := crc32.New(castagnoli)
	n, err := io.Copy(io.MultiWriter(f, h), io.LimitReader(readerCtx{ctx, body}, size))
	if err != nil {
		return objstore.ObjectInfo{}, err
	}
	if n != size {
		return objstore.ObjectInfo{}, fmt.Errorf("body ended after %d of %d bytes", n, size)
	}
	if opts.HasCRC32C && h.Sum32() != opts.CRC32C {
		return objstore.ObjectInfo{}, objstore.ErrChecksumMismatch
	}
	if err = f.Sync(); err != nil {
		return objstore.ObjectInfo{}, mapErr(err)
	}
	if err = f.Close(); err != nil {
		return objstore.ObjectInfo{}, mapErr(err)
	}
	final := d.path(key)
	if err = os.MkdirAll(filepath.Dir(final), 0o755); err != nil {
		return objstore.ObjectInfo{}, mapErr(err)
	}
	if opts.IfNoneMatch || opts.IfMatch != "" {
		unlock, lerr := d.lock()
		if lerr != nil {
			err = lerr
			return objstore.ObjectInfo{}, err
		}
		defer unlock()
		st, serr := os.Stat(final)
		exists := serr == nil
		if serr != nil && !errors.Is(serr, iofs.ErrNotExist) {
			err = mapErr(serr)
			return objstore.ObjectInfo{}, err
		}
		if (opts.IfNoneMatch && exists) || (opts.IfMatch != "" && (!exists || etag(st) != opts.IfMatch)) {
			err = objstore.ErrPreconditionFailed
			return objstore.ObjectInfo{}, err
		}
	}
	if st, serr := os.Stat(final); serr == nil && st.IsDir() {
		err = fmt.Errorf("%w: %q is the directory of other keys", objstore.ErrInvalidKey, key)
		return objstore.ObjectInfo{}, err
	}
	if err = os.Rename(tmp, final); err != nil {
		return objstore.ObjectInfo{}, mapErr(err)
	}
	if err = syncDir(filepath.Dir(final)); err != nil {
		return objstore.ObjectInfo{}, err
	}
	st, err := os.Stat(final)
	if err != nil {
		return objstore.ObjectInfo{}, mapErr(err)
	}
	return info(key, st), nil
}

// lock takes the bucket's cross-process lock for a conditional put.
func (d *Driver) lock() (func(), error) {
	f, err := os.OpenFile(filepath.Join(d.root, tmpDir, ".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, mapErr(err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, err
	}
	return func() { syscall.Flock(int(f.Fd()), syscall.LOCK_UN); f.Close() }, nil
}

func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return mapErr(err)
	}
	defer f.Close()
	return f.Sync()
}

type readerCtx struct {
	ctx context.Context
	r   io.Reader
}

func (r readerCtx) Read(p []byte) (int, error) {
	if err := r.ctx.Err(); err != nil {
		return 0, err
	}
	return r.r.Read(p)
}

// Get implements objstore.Driver.
func (d *Driver) Get(ctx context.Context, key string, offset, length int64) (io.ReadCloser, objstore.ObjectInfo, error) {
	if err := ctx.Err(); err != nil {
		return nil, objstore.ObjectInfo{}, err
	}
	f, err := os.Open(d.path(key))
	if err != nil {
		return nil, objstore.ObjectInfo{}, mapErr(err)
	}
	st, err := f.Stat()
	if err != nil || st.IsDir() {
		f.Close()
		return nil, objstore.ObjectInfo{}, fmt.Errorf("%w: %s", objstore.ErrNotFound, key)
	}
	size := st.Size()
	if offset > size || (offset == size && size > 0) {
		f.Close()
		return nil, objstore.ObjectInfo{}, fmt.Errorf("%w: offset %d of a %d-byte object", objstore.ErrInvalidRange, offset, size)
	}
	n := size - offset
	if length >= 0 {
		n = min(n, length)
	}
	return struct {
		io.Reader
		io.Closer
	}{readerCtx{ctx, io.NewSectionReader(f, offset, n)}, f}, info(key, st), nil
}

// Head implements objstore.Driver.
func (d *Driver) Head(ctx context.Context, key string) (objstore.ObjectInfo, error) {
	if err := ctx.Err(); err != nil {
		return objstore.ObjectInfo{}, err
	}
	st, err := os.Stat(d.path(key))
	if err != nil {
		return objstore.ObjectInfo{}, mapErr(err)
	}
	if st.IsDir() {
		return objstore.ObjectInfo{}, fmt.Errorf("%w: %s", objstore.ErrNotFound, key)
	}
	return info(key, st), nil
}

// List implements objstore.Driver. It walks the directory that holds the
// prefix and sorts the keys it finds.
func (d *Driver) List(ctx context.Context, prefix, startAfter string, limit int) ([]objstore.ObjectInfo, bool, error) {
	base := d.root
	if i := strings.LastIndexByte(prefix, '/'); i >= 0 {
		base = d.path(prefix[:i])
	}
	var out []objstore.ObjectInfo
	err := filepath.WalkDir(base, func(p string, e iofs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, iofs.ErrNotExist) {
				return nil
			}
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		rel, _ := filepath.Rel(d.root, p)
		key := filepath.ToSlash(rel)
		if e.IsDir() {
			if key == tmpDir {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasPrefix(key, prefix) || key <= startAfter {
			return nil
		}
		st, err := e.Info()
		if err != nil {
			return nil // removed meanwhile
		}
		out = append(out, info(key, st))
		return nil
	})
	if err != nil {
		return nil, false, mapErr(err)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	more := len(out) > limit
	if more {
		out = out[:limit]
	}
	return out, more, nil
}

// Delete implements objstore.Driver; it also removes directories left empty.
func (d *Driver) Delete(ctx context.Context, keys []string) error {
	for _, k := range keys {
		if err := ctx.Err(); err != nil {
			return err
		}
		p := d.path(k)
		if err := os.Remove(p); err != nil && !errors.Is(err, iofs.ErrNotExist) {
			return mapErr(err)
		}
		for dir := filepath.Dir(p); dir != d.root && strings.HasPrefix(dir, d.root); dir = filepath.Dir(dir) {
			if os.Remove(dir) != nil {
				break // not empty
			}
		}
	}
	return nil
}

// AbortStaleUploads removes temporary files of puts that never finished.
func (d *Driver) AbortStaleUploads(ctx context.Context, prefix string, olderThan time.Time) (int, error) {
	ents, err := os.ReadDir(filepath.Join(d.root, tmpDir))
	if err != nil {
		return 0, mapErr(err)
	}
	n := 0
	for _, e := range ents {
		st, err := e.Info()
		if err != nil || e.Name() == ".lock" || !st.ModTime().Before(olderThan) {
			continue
		}
		if os.Remove(filepath.Join(d.root, tmpDir, e.Name())) == nil {
			n++
		}
	}
	return n, nil
}

// Close implements objstore.Driver.
func (d *Driver) Close() error { return nil }
