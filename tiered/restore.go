package tiered

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"os"
	"strings"
	"time"

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
func Restore(ctx context.Context, store *objstore.Store, prefix, dir string) (*manifest.Manifest, error) {
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
	p := &Partition{store: store, prefix: prefix}
	for _, s := range m.Segments {
		for _, o := range []struct {
			suffix, localSuffix string
			size                int64
			crc                 uint32
		}{
			{manifest.LogSuffix, local.LogSuffix, s.Size, s.LogCRC},
			{manifest.IndexSuffix, local.IndexSuffix, s.IndexSize, s.IndexCRC},
			{manifest.TimeIndexSuffix, local.TimeIndexSuffix, s.TimeIndexSize, s.TimeIndexCRC},
		} {
			key := p.key(s.Name(o.suffix))
			var data []byte
			if o.size > 0 {
				if data, err = store.ReadAll(ctx, key, 0, o.size); err != nil {
					return nil, fmt.Errorf("tiered: restore %s: %w", key, err)
				}
			}
			if got := crc32.Checksum(data, castagnoli); got != o.crc || int64(len(data)) != o.size {
				return nil, fmt.Errorf("tiered: restore %s: %d bytes with CRC-32C %08x, the manifest recorded %d and %08x", key, len(data), got, o.size, o.crc)
			}
			if err := local.WriteFileAtomic(dir, local.FileName(s.BaseOffset, o.localSuffix), data); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}

// GC finds objects under prefix that the committed manifest does not name
// and that are older than grace (uploads that crashed before their commit,
// segments dropped by retention whose delete failed), and deletes them
// unless dryRun. It also aborts stale multipart uploads. It returns the
// keys it removed (or would remove).
func GC(ctx context.Context, store *objstore.Store, prefix string, grace time.Duration, dryRun bool) ([]string, error) {
	m, err := ReadManifest(ctx, store, prefix)
	if err != nil {
		return nil, err
	}
	p := &Partition{store: store, prefix: prefix}
	named := map[string]bool{p.key(ManifestName): true}
	for _, s := range m.Segments {
		for _, suf := range []string{manifest.LogSuffix, manifest.IndexSuffix, manifest.TimeIndexSuffix} {
			named[p.key(s.Name(suf))] = true
		}
	}
	cutoff := time.Now().Add(-grace)
	var garbage []string
	listPrefix := prefix
	if listPrefix != "" && !strings.HasSuffix(listPrefix, "/") {
		listPrefix += "/"
	}
	err = store.List(ctx, listPrefix, func(o objstore.ObjectInfo) bool {
		if !named[o.Key] && o.LastModified.Before(cutoff) {
			garbage = append(garbage, o.Key)
		}
		return true
	})
	if err != nil || dryRun {
		return garbage, err
	}
	if err := store.Delete(ctx, garbage...); err != nil {
		return nil, err
	}
	if _, err := store.AbortStaleUploads(ctx, listPrefix, grace); err != nil {
		return garbage, err
	}
	return garbage, nil
}
