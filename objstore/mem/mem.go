// Package mem is an in-memory objstore driver, for tests: a map guarded by
// a mutex, with S3's semantics for conditional puts, ranges and listing.
package mem

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"hash/crc32"
	"io"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/tierlog/tierlog/objstore"
)

type object struct {
	data     []byte
	etag     string
	modified time.Time
}

// Driver is an in-memory bucket.
type Driver struct {
	mu      sync.Mutex
	objects map[string]object
	// dirs counts the objects under each "directory" of a key (each
	// prefix of it ending in "/"), so a put tells whether keys would
	// nest in the key's depth, not the bucket's size.
	dirs map[string]int
}

// New returns an empty bucket.
func New() *Driver { return &Driver{objects: map[string]object{}, dirs: map[string]int{}} }

// parentDirs calls fn with each prefix of key that ends in "/".
func parentDirs(key string, fn func(dir string)) {
	for i := range len(key) {
		if key[i] == '/' {
			fn(key[:i+1])
		}
	}
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Put implements objstore.Driver.
func (d *Driver) Put(ctx context.Context, key string, body io.ReadSeeker, size int64, opts objstore.PutOptions) (objstore.ObjectInfo, error) {
	if err := ctx.Err(); err != nil {
		return objstore.ObjectInfo{}, err
	}
	data := make([]byte, size)
	if _, err := io.ReadFull(body, data); err != nil {
		return objstore.ObjectInfo{}, fmt.Errorf("reading the body: %w", err)
	}
	if opts.HasCRC32C && crc32.Checksum(data, castagnoli) != opts.CRC32C {
		return objstore.ObjectInfo{}, objstore.ErrChecksumMismatch
	}
	sum := md5.Sum(data)
	o := object{data: data, etag: `"` + hex.EncodeToString(sum[:]) + `"`, modified: time.Now()}
	d.mu.Lock()
	defer d.mu.Unlock()
	cur, exists := d.objects[key]
	if opts.IfNoneMatch && exists {
		return objstore.ObjectInfo{}, objstore.ErrPreconditionFailed
	}
	if opts.IfMatch != "" && (!exists || cur.etag != opts.IfMatch) {
		return objstore.ObjectInfo{}, objstore.ErrPreconditionFailed
	}
	if !exists { // keys never nest
		if d.dirs[key+"/"] > 0 {
			return objstore.ObjectInfo{}, fmt.Errorf("%w: %q and the objects under %q would nest", objstore.ErrInvalidKey, key, key+"/")
		}
		var nested string
		parentDirs(key, func(dir string) {
			if _, ok := d.objects[strings.TrimSuffix(dir, "/")]; ok && nested == "" {
				nested = strings.TrimSuffix(dir, "/")
			}
		})
		if nested != "" {
			return objstore.ObjectInfo{}, fmt.Errorf("%w: %q and %q would nest", objstore.ErrInvalidKey, key, nested)
		}
		parentDirs(key, func(dir string) { d.dirs[dir]++ })
	}
	d.objects[key] = o
	return objstore.ObjectInfo{Key: key, Size: size, ETag: o.etag, LastModified: o.modified}, nil
}

// Get implements objstore.Driver.
func (d *Driver) Get(ctx context.Context, key string, offset, length int64) (io.ReadCloser, objstore.ObjectInfo, error) {
	if err := ctx.Err(); err != nil {
		return nil, objstore.ObjectInfo{}, err
	}
	d.mu.Lock()
	o, ok := d.objects[key]
	d.mu.Unlock()
	if !ok {
		return nil, objstore.ObjectInfo{}, objstore.ErrNotFound
	}
	size := int64(len(o.data))
	if offset > size || (offset == size && size > 0) {
		return nil, objstore.ObjectInfo{}, fmt.Errorf("%w: offset %d of a %d-byte object", objstore.ErrInvalidRange, offset, size)
	}
	end := size
	if length >= 0 {
		end = min(size, offset+length)
	}
	info := objstore.ObjectInfo{Key: key, Size: size, ETag: o.etag, LastModified: o.modified}
	return io.NopCloser(bytes.NewReader(o.data[offset:end])), info, nil
}

// Head implements objstore.Driver.
func (d *Driver) Head(ctx context.Context, key string) (objstore.ObjectInfo, error) {
	if err := ctx.Err(); err != nil {
		return objstore.ObjectInfo{}, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	o, ok := d.objects[key]
	if !ok {
		return objstore.ObjectInfo{}, objstore.ErrNotFound
	}
	return objstore.ObjectInfo{Key: key, Size: int64(len(o.data)), ETag: o.etag, LastModified: o.modified}, nil
}

// List implements objstore.Driver.
func (d *Driver) List(ctx context.Context, prefix, startAfter string, limit int) ([]objstore.ObjectInfo, bool, error) {
	if err := ctx.Err(); err != nil {
		return nil, false, err
	}
	d.mu.Lock()
	var keys []string
	for k := range d.objects {
		if strings.HasPrefix(k, prefix) && k > startAfter {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	more := len(keys) > limit
	if more {
		keys = keys[:limit]
	}
	out := make([]objstore.ObjectInfo, len(keys))
	for i, k := range keys {
		o := d.objects[k]
		out[i] = objstore.ObjectInfo{Key: k, Size: int64(len(o.data)), ETag: o.etag, LastModified: o.modified}
	}
	d.mu.Unlock()
	return out, more, nil
}

// Delete implements objstore.Driver.
func (d *Driver) Delete(ctx context.Context, keys []string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, k := range keys {
		if _, ok := d.objects[k]; !ok {
			continue
		}
		delete(d.objects, k)
		parentDirs(k, func(dir string) {
			if d.dirs[dir]--; d.dirs[dir] == 0 {
				delete(d.dirs, dir)
			}
		})
	}
	return nil
}

// AbortStaleUploads implements objstore.Driver: there are no uploads.
func (d *Driver) AbortStaleUploads(context.Context, string, time.Time) (int, error) { return 0, nil }

// Close implements objstore.Driver.
func (d *Driver) Close() error { return nil }
