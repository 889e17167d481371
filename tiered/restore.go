package tiered

import (
	"context"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/local"
	"github.com/tierlog/tierlog/manifest"
	"github.com/tierlog/tierlog/objstore"
)

// ReadManifest reads the committed manifest under prefix from store; a
// missing one is an empty manifest.
func ReadManifest(ctx context.Context, store *objstore.Store, prefix string) (*manifest.Manifest, error) {
	p := &Partition{store: store, prefix: prefix}
	st, err := p.readManifest(ctx)
	if err != nil {
		return nil, err
	}
	return st.m, nil
}

// Restore rebuilds a partition directory from the bucket alone (a lost disk,
// a new broker): every segment the committed manifest names is downloaded
// into dir under Kafka's file names, each object checked against the
// CRC-32C the manifest recorded. dir must not exist or be empty. It
// returns the manifest it restored; the caller opens dir as a local log
// with the manifest's LogStartOffset.
//
// Objects stream to disk (memory stays bounded whatever the segment size)
// under temporary names, are fsynced, and take their final names only
// once their size and CRC-32C match; a body cut short resumes where it
// stopped. A failed restore removes the object it was writing.
func Restore(ctx context.Context, store *objstore.Store, prefix, dir string, opts RestoreOptions) (*manifest.Manifest, error) {
	if ents, err := os.ReadDir(dir); err == nil && len(ents) > 0 {
		return nil, fmt.Errorf("tiered: restore into %s: the directory is not empty", dir)
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("tiered: restore: %w", err)
	}
	m, err := ReadManifest(ctx, store, prefix)
	if err != nil {
		return nil, err
	}
	if len(m.Segments) == 0 {
		return nil, fmt.Errorf("tiered: restore: no manifest (or no segments) under %s", prefix)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("tiered: restore: %w", err)
	}
	if opts.OnStart != nil {
		var total int64
		for _, s := range m.Segments {
			total += s.Size + s.IndexSize + s.TimeIndexSize
		}
		opts.OnStart(total)
	}
	for _, s := range m.Segments {
		if err := DownloadSegment(ctx, store, prefix, s, dir, opts); err != nil {
			return nil, err
		}
	}
	// The renames are durable once the directory is.
	d, err := os.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("tiered: restore: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return nil, fmt.Errorf("tiered: restore: sync %s: %w", dir, err)
	}
	return m, nil
}

// DownloadSegment downloads one segment the manifest names (.log, .index,
// .timeindex) into dir under Kafka's file names, as Restore does: streamed
// through temporary files, resumed when cut short, and renamed only once
// size and CRC-32C match the manifest (a mismatch is ErrCorruptRecord
// naming the object). It does not sync dir.
func DownloadSegment(ctx context.Context, store *objstore.Store, prefix string, s manifest.Segment, dir string, opts RestoreOptions) error {
	p := &Partition{store: store, prefix: prefix}
	buf := make([]byte, 1<<20)
	for _, o := range []struct {
		suffix, localSuffix string
		size                int64
		crc                 uint32
	}{
		{manifest.LogSuffix, local.LogSuffix, s.Size, s.LogCRC},
		{manifest.IndexSuffix, local.IndexSuffix, s.IndexSize, s.IndexCRC},
		{manifest.TimeIndexSuffix, local.TimeIndexSuffix, s.TimeIndexSize, s.TimeIndexCRC},
	} {
		if err := restoreObject(ctx, store, p.key(s.Name(o.suffix)), o.size, o.crc,
			filepath.Join(dir, local.FileName(s.BaseOffset, o.localSuffix)), buf, opts.OnProgress); err != nil {
			return err
		}
	}
	return nil
}

// RestoreOptions tune Restore.
type RestoreOptions struct {
	// OnStart, when set, is called once the manifest is read, with the
	// bytes Restore is about to download; OnProgress with the bytes of
	// each object as they are written to disk. For progress displays.
	OnStart    func(total int64)
	OnProgress func(n int64)
}

// restoreAttempts bounds how often one object's body may be cut short
// (each resumption is a new GET, itself retried by the store).
const restoreAttempts = 5

// restoreObject streams the object key (size bytes, CRC-32C want) into
// path through a temporary file, resuming a body cut short.
func restoreObject(ctx context.Context, store *objstore.Store, key string, size int64, want uint32,
	path string, buf []byte, progress func(int64)) (err error) {
	tmp := path + ".restoring"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("tiered: restore: %w", err)
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(tmp)
		}
	}()
	h := crc32.New(castagnoli)
	var off int64
	for cuts := 0; off < size; {
		rc, _, err := store.Get(ctx, key, off, size-off)
		if err != nil {
			return fmt.Errorf("tiered: restore %s: %w", key, err)
		}
		n, rerr, werr := copyBody(f, h, rc, buf, progress)
		rc.Close()
		off += n
		if werr != nil {
			return fmt.Errorf("tiered: restore %s: %w", key, werr)
		}
		if off < size {
			if err := ctx.Err(); err != nil {
				return err
			}
			if cuts++; cuts >= restoreAttempts {
				return fmt.Errorf("tiered: restore %s: the body was cut short %d times, at %d of %d bytes: %v", key, cuts, off, size, rerr)
			}
		}
	}
	if got := h.Sum32(); got != want {
		return fmt.Errorf("%w: tiered: restore %s: %d bytes with CRC-32C %08x, the manifest recorded %08x", backend.ErrCorruptRecord, key, off, got, want)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("tiered: restore: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("tiered: restore: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("tiered: restore: %w", err)
	}
	return nil
}

// copyBody copies r to f and h until r ends or fails; a read error (a cut
// body) and a write error are told apart, since only the first is worth
// another GET.
func copyBody(f *os.File, h hash.Hash32, r io.Reader, buf []byte, progress func(int64)) (n int64, rerr, werr error) {
	for {
		k, err := r.Read(buf)
		if k > 0 {
			if _, werr = f.Write(buf[:k]); werr != nil {
				return n, nil, werr
			}
			h.Write(buf[:k])
			n += int64(k)
			if progress != nil {
				progress(int64(k))
			}
		}
		if err == io.EOF {
			return n, nil, nil
		}
		if err != nil {
			return n, err, nil
		}
	}
}
