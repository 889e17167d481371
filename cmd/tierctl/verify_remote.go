package main

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/tierlog/tierlog/manifest"
	"github.com/tierlog/tierlog/objstore"
	"github.com/tierlog/tierlog/tiered"
)

// bucketPartitions lists the partitions that have a manifest in the
// bucket (one LIST page per 1,000 objects).
func bucketPartitions(ctx context.Context, store *objstore.Store) ([]string, error) {
	var out []string
	err := store.List(ctx, "", func(o objstore.ObjectInfo) bool {
		if k, err := manifest.ParseKey(o.Key); err == nil && k.Kind == manifest.KindManifest {
			out = append(out, strings.TrimSuffix(o.Key, "/"+k.Name()))
		}
		return true
	})
	sort.Strings(out)
	return out, err
}

// verifyRemote checks a partition's objects in the bucket against its
// manifest, through the bucket check (tiered.CheckBucket): that every
// object each segment records exists with the recorded size or, when
// deep, that its bytes have the recorded CRC-32C and that the segment
// verifies as a local one does (every batch CRC, offsets inside the
// manifest's range, the record count, each index entry against the log,
// the producer snapshot and the aborted transactions). A deep check
// downloads one segment at a time into tmp, so disk use is bounded by the
// largest segment. Object reports are named by their keys, and what is
// wrong with an object is reported on that object.
func verifyRemote(ctx context.Context, store *objstore.Store, rp remotePartition, deep bool, tmp string, bar *progress) ([]fileReport, error) {
	l, m := manifest.NewLayout(rp.prefix), rp.m
	if rp.err != nil {
		r := fileReport{Path: l.Manifest(), Kind: manifest.KindManifest.String()}
		r.problemf("%v", rp.err)
		return []fileReport{r}, nil
	}
	if !manifestExists(m) {
		r := fileReport{Path: l.Manifest(), Kind: manifest.KindManifest.String()}
		if rp.mustExist {
			r.problemf("no manifest: is the --store URL (bucket and prefix) or --partition right?")
		} else {
			r.Notes = append(r.Notes, "no manifest: the partition was not offloaded")
		}
		return []fileReport{r}, nil
	}
	if len(m.Segments) == 0 {
		r := fileReport{Path: l.Manifest(), Kind: manifest.KindManifest.String()}
		r.Notes = append(r.Notes, fmt.Sprintf("manifest generation %d names no segments", m.Generation))
		return []fileReport{r}, nil
	}
	var out []fileReport
	opts := tiered.CheckOptions{Deep: deep, Dir: tmp, OnProgress: bar.Add}
	err := tiered.CheckBucket(ctx, store, rp.prefix, m, opts, func(s manifest.Segment, objects []tiered.ObjectCheck) error {
		if !deep {
			for _, o := range objects {
				r := fileReport{Path: o.Key, Kind: "object", Bytes: o.Size}
				if o.Err != nil {
					r.problemf("%v", o.Err)
				}
				bar.Add(1)
				out = append(out, r)
			}
			return nil
		}
		out = append(out, verifyRemoteSegment(s, objects)...)
		return nil
	})
	return out, err
}

// verifyRemoteSegment checks the content of a segment's objects the
// bucket check downloaded (those whose size and CRC-32C matched): one
// report an object, under its key.
func verifyRemoteSegment(s manifest.Segment, objects []tiered.ObjectCheck) []fileReport {
	byKind := map[manifest.Kind]tiered.ObjectCheck{}
	for _, o := range objects {
		byKind[o.Kind] = o
	}
	var sum *logSummary
	out := make([]fileReport, 0, len(objects))
	for _, o := range objects {
		var r fileReport
		switch {
		case o.Err != nil:
			r = fileReport{Kind: o.Kind.String(), Bytes: o.Size}
			r.problemf("%v", o.Err)
		case o.Kind == manifest.KindLog:
			r, sum = verifyLog(o.Path, nil)
			if r.FirstOffset != nil && (*r.FirstOffset < s.BaseOffset || *r.LastOffset > s.LastOffset) {
				r.problemf("offsets %d..%d leave the manifest's range %d..%d", *r.FirstOffset, *r.LastOffset, s.BaseOffset, s.LastOffset)
			}
			if r.Records != s.Records {
				r.problemf("%d records, the manifest says %d", r.Records, s.Records)
			}
		case o.Kind == manifest.KindIndex || o.Kind == manifest.KindTimeIndex || o.Kind == manifest.KindTxnIndex:
			if byKind[manifest.KindLog].Err != nil {
				r = fileReport{Kind: o.Kind.String(), Bytes: o.Size}
				r.Notes = append(r.Notes, "its CRC-32C matches; its entries were not checked, the .log being damaged")
			} else if o.Kind == manifest.KindTxnIndex {
				r = verifyTxnIndexFile(o.Path, sum)
			} else {
				r = verifyIndexFile(o.Path, sum)
			}
		case o.Kind == manifest.KindSnapshot:
			r = verifySnapshotFile(o.Path, &offsetRange{start: s.BaseOffset, end: s.LastOffset + 1})
		default:
			r = fileReport{Kind: o.Kind.String(), Bytes: o.Size}
		}
		r.Path = o.Key
		out = append(out, r)
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
		objects, bytes := m.Objects()
		if deep {
			total += bytes
		} else {
			total += int64(objects)
		}
	}
	return out, total
}
