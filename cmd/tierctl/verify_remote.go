package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/tierlog/tierlog/local"
	"github.com/tierlog/tierlog/manifest"
	"github.com/tierlog/tierlog/objstore"
	"github.com/tierlog/tierlog/tiered"
)

// bucketPartitions lists the partitions that have a manifest in the
// bucket (one LIST page per 1,000 objects).
func bucketPartitions(ctx context.Context, store *objstore.Store) ([]string, error) {
	var out []string
	err := store.List(ctx, "", func(o objstore.ObjectInfo) bool {
		if prefix, ok := strings.CutSuffix(o.Key, "/"+tiered.ManifestName); ok {
			if _, err := local.ParsePartitionDirName(filepath.Base(prefix)); err == nil {
				out = append(out, prefix)
			}
		}
		return true
	})
	sort.Strings(out)
	return out, err
}

// verifyRemote checks a partition's objects in the bucket against its
// manifest: that each exists with the recorded size or, when deep, that
// its bytes have the recorded CRC-32C and that the segment verifies as a
// local one does (every batch CRC, offsets inside the manifest's range,
// the record count, each index entry against the log). A deep check
// downloads one segment at a time into tmp, so disk use is bounded by the
// largest segment. Object reports are named by their keys.
func verifyRemote(ctx context.Context, store *objstore.Store, rp remotePartition, deep bool, tmp string, bar *progress) ([]fileReport, error) {
	prefix, m := rp.prefix, rp.m
	if rp.err != nil {
		r := fileReport{Path: prefix + "/" + tiered.ManifestName, Kind: "manifest"}
		r.problemf("%v", rp.err)
		return []fileReport{r}, nil
	}
	if !manifestExists(m) {
		r := fileReport{Path: prefix + "/" + tiered.ManifestName, Kind: "manifest"}
		if rp.mustExist {
			r.problemf("no manifest: is the --store URL (bucket and prefix) or --partition right?")
		} else {
			r.Notes = append(r.Notes, "no manifest: the partition was not offloaded")
		}
		return []fileReport{r}, nil
	}
	if len(m.Segments) == 0 {
		r := fileReport{Path: prefix + "/" + tiered.ManifestName, Kind: "manifest"}
		r.Notes = append(r.Notes, fmt.Sprintf("manifest generation %d names no segments", m.Generation))
		return []fileReport{r}, nil
	}
	var out []fileReport
	for _, s := range m.Segments {
		if err := ctx.Err(); err != nil {
			return out, err
		}
		if !deep {
			for _, suf := range s.Objects() {
				key := prefix + "/" + s.Name(suf)
				size, _ := s.Object(suf)
				r := fileReport{Path: key, Kind: "object", Bytes: size}
				switch info, err := store.Head(ctx, key); {
				case err != nil:
					r.problemf("%v", err)
				case info.Size != size:
					r.problemf("%d bytes, the manifest says %d", info.Size, size)
				}
				bar.Add(1)
				out = append(out, r)
			}
			continue
		}
		out = append(out, verifyRemoteSegment(ctx, store, prefix, s, tmp, bar)...)
	}
	return out, nil
}

// verifyRemoteSegment downloads one segment into tmp, checks it, and
// removes the files.
func verifyRemoteSegment(ctx context.Context, store *objstore.Store, prefix string, s manifest.Segment, tmp string, bar *progress) []fileReport {
	paths := []string{
		filepath.Join(tmp, local.FileName(s.BaseOffset, local.LogSuffix)),
		filepath.Join(tmp, local.FileName(s.BaseOffset, local.IndexSuffix)),
		filepath.Join(tmp, local.FileName(s.BaseOffset, local.TimeIndexSuffix)),
	}
	keys := []string{prefix + "/" + s.Name(manifest.LogSuffix), prefix + "/" + s.Name(manifest.IndexSuffix), prefix + "/" + s.Name(manifest.TimeIndexSuffix)}
	defer func() {
		// The .txnindex and snapshot (checked against their CRC-32C by the
		// download) go too.
		for _, p := range append(paths, filepath.Join(tmp, local.FileName(s.BaseOffset, local.TxnIndexSuffix)),
			filepath.Join(tmp, local.FileName(s.LastOffset+1, local.SnapshotSuffix))) {
			os.Remove(p)
		}
	}()
	if err := tiered.DownloadSegment(ctx, store, prefix, s, tmp, tiered.RestoreOptions{OnProgress: bar.Add}); err != nil {
		r := fileReport{Path: keys[0], Kind: "log", Bytes: s.Size}
		r.problemf("%v", err)
		return []fileReport{r}
	}
	rep, sum := verifyLog(paths[0], nil)
	if rep.FirstOffset != nil && (*rep.FirstOffset < s.BaseOffset || *rep.LastOffset > s.LastOffset) {
		rep.problemf("offsets %d..%d leave the manifest's range %d..%d", *rep.FirstOffset, *rep.LastOffset, s.BaseOffset, s.LastOffset)
	}
	if rep.Records != s.Records {
		rep.problemf("%d records, the manifest says %d", rep.Records, s.Records)
	}
	out := []fileReport{rep, verifyIndexFile(paths[1], sum), verifyIndexFile(paths[2], sum)}
	for i := range out {
		out[i].Path = keys[i]
	}
	return out
}

// remotePartition is a partition's prefix and its manifest (or why it
// could not be read).
type remotePartition struct {
	prefix string
	m      *manifest.Manifest
	err    error
	// mustExist: the partition was named by --partition, so a missing
	// manifest is a problem.
	mustExist bool
}

// manifestExists tells a committed manifest from the empty one
// tiered.ReadManifest returns when there is none: every commit has a
// generation of 1 or more.
func manifestExists(m *manifest.Manifest) bool { return m.Generation > 0 }

// loadManifests reads each prefix's manifest once (one GET each) and
// returns what a check of them will move: objects (shallow) or bytes
// (deep), for the progress bar.
func loadManifests(ctx context.Context, store *objstore.Store, prefixes []string, deep bool) ([]remotePartition, int64) {
	var total int64
	out := make([]remotePartition, len(prefixes))
	for i, p := range prefixes {
		m, err := tiered.ReadManifest(ctx, store, p)
		out[i] = remotePartition{prefix: p, m: m, err: err}
		if err != nil {
			continue
		}
		for _, s := range m.Segments {
			if deep {
				total += s.Size + s.IndexSize + s.TimeIndexSize
			} else {
				total += 3
			}
		}
	}
	return out, total
}
