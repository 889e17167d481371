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
	"sync"
	"syscall"
	"time"

	"github.com/tierlog/tierlog/objstore"
)

const tmpDir = ".tmp"

// Driver is a directory used as a bucket.
type Driver struct {
	root string

	// cont is the continuation of the last listing that stopped at a
	// page's end: its prefix, the last key it returned, and the sorted
	// entries of the directories it stopped in.
	cont       sync.Mutex
	contPrefix string
	contAfter  string
	contDirs   map[string][]dirent
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
	d.forgetListing()
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

// List implements objstore.Driver. It walks the directories under the
// prefix in key order (a directory's entries sorted as keys sort: a
// subdirectory as its name and a slash), starting each at the first entry
// past startAfter (a binary search), skipping directories that can hold
// no key in range, and stops at limit+1 keys: a page costs the entries it
// returns and the directories on its way, not the whole prefix. A
// listing continued page by page (startAfter the last key of the page
// before, same prefix) reuses the sorted entries of the directories the
// page before stopped in, so each directory is read once per listing.
// Any put or delete through this driver drops them; a key another
// process puts meanwhile into one of them may be missed, a removed one is
// never returned (as an S3 listing's pages).
func (d *Driver) List(ctx context.Context, prefix, startAfter string, limit int) ([]objstore.ObjectInfo, bool, error) {
	dirKey := ""
	if i := strings.LastIndexByte(prefix, '/'); i >= 0 {
		dirKey = prefix[:i+1]
	}
	l := &lister{ctx: ctx, d: d, prefix: prefix, startAfter: startAfter, limit: limit, keep: map[string][]dirent{}}
	d.cont.Lock()
	if d.contPrefix == prefix && d.contAfter == startAfter && startAfter != "" {
		l.cached = d.contDirs
	}
	d.contPrefix, d.contAfter, d.contDirs = "", "", nil
	d.cont.Unlock()
	if err := l.walk(dirKey); err != nil {
		return nil, false, mapErr(err)
	}
	more := len(l.out) > limit
	if more {
		l.out = l.out[:limit]
		d.cont.Lock()
		d.contPrefix, d.contAfter, d.contDirs = prefix, l.out[limit-1].Key, l.keep
		d.cont.Unlock()
	}
	return l.out, more, nil
}

// forgetListing drops the continuation of the last listing: this
// driver is about to change a directory it may hold.
func (d *Driver) forgetListing() {
	d.cont.Lock()
	d.contPrefix, d.contAfter, d.contDirs = "", "", nil
	d.cont.Unlock()
}

// dirent is a directory entry as List sorts it: its name, with a slash
// after a directory's.
type dirent struct {
	key   string // the entry's name, plus "/" for a directory
	isDir bool
}

// lister is one List call's walk.
type lister struct {
	ctx                context.Context
	d                  *Driver
	prefix, startAfter string
	limit              int
	out                []objstore.ObjectInfo
	done               bool
	// cached holds the sorted entries of directories (by key) that the
	// page before stopped in; keep collects those this one stops in.
	cached, keep map[string][]dirent
}

// walk lists the directory whose keys start with dirKey ("" for the
// root, else ending in a slash) in key order.
func (l *lister) walk(dirKey string) error {
	ents, ok := l.cached[dirKey]
	if !ok {
		var err error
		if ents, err = readSorted(l.d.path(dirKey)); err != nil {
			if errors.Is(err, iofs.ErrNotExist) {
				return nil
			}
			return err
		}
	}
	// The first entry that can hold a key past startAfter: a key after
	// it, or a directory whose keys startAfter is among.
	i := sort.Search(len(ents), func(i int) bool {
		k := dirKey + ents[i].key
		return k > l.startAfter || (ents[i].isDir && strings.HasPrefix(l.startAfter, k))
	})
	for ; i < len(ents) && !l.done; i++ {
		if err := l.ctx.Err(); err != nil {
			return err
		}
		k := dirKey + ents[i].key
		if !strings.HasPrefix(k, l.prefix) && !strings.HasPrefix(l.prefix, k) {
			if k > l.prefix {
				break // past every key with the prefix
			}
			continue
		}
		if ents[i].isDir {
			if dirKey == "" && k == tmpDir+"/" {
				continue
			}
			if err := l.walk(k); err != nil {
				return err
			}
			continue
		}
		if !strings.HasPrefix(k, l.prefix) || k <= l.startAfter {
			continue
		}
		st, err := os.Lstat(l.d.path(k))
		if err != nil || st.IsDir() {
			continue // removed meanwhile
		}
		l.out = append(l.out, info(k, st))
		l.done = len(l.out) > l.limit
	}
	if l.done {
		l.keep[dirKey] = ents // a page stopped in it: the next reads on
	}
	return nil
}

// readSorted reads a directory's entries sorted as their keys sort.
func readSorted(dir string) ([]dirent, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	des, err := f.ReadDir(-1)
	if err != nil {
		return nil, err
	}
	ents := make([]dirent, len(des))
	for i, e := range des {
		ents[i] = dirent{key: e.Name(), isDir: e.IsDir()}
		if ents[i].isDir {
			ents[i].key += "/"
		}
	}
	sort.Slice(ents, func(i, j int) bool { return ents[i].key < ents[j].key })
	return ents, nil
}

// Delete implements objstore.Driver; it also removes directories left empty.
func (d *Driver) Delete(ctx context.Context, keys []string) error {
	d.forgetListing()
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
