package main

import (
	"context"
	"fmt"

	"github.com/tierlog/tierlog/manifest"
	"github.com/tierlog/tierlog/objstore"
	"github.com/tierlog/tierlog/objstore/seal"
)

// sealCheck says, of a sealed bucket, which objects are sealed under a
// bucket key wrapped by a retired key-file key (one not active), and
// which bucket keys are. nil for a bucket that is not sealed.
type sealCheck struct {
	d      *seal.Driver
	keys   []seal.BucketKey
	byName map[string]seal.BucketKey
}

// newSealCheck lists the bucket keys of the key folders of the partitions
// under prefixes (not the whole store).
func newSealCheck(ctx context.Context, store *objstore.Store, prefixes []string) (*sealCheck, error) {
	d, err := seal.Sealed(store)
	if err != nil {
		return nil, nil
	}
	var folders []string
	for _, p := range prefixes {
		folders = append(folders, seal.KeyFolder(p+"/"+manifest.ManifestName))
	}
	keys, err := seal.BucketKeys(ctx, store, folders...)
	if err != nil {
		return nil, err
	}
	sc := &sealCheck{d: d, keys: keys, byName: map[string]seal.BucketKey{}}
	for _, k := range keys {
		sc.byName[k.Name] = k
	}
	return sc, nil
}

// note adds to each object's report of the partition under prefix what
// it is sealed under, when that is a retired key (the header is the one
// the check read: no request). With a store that seals only the topics
// that ask (seal=topics), an object of the other kind than its
// partition's manifest is a problem: the partition's broker cannot read
// it.
func (sc *sealCheck) note(ctx context.Context, prefix string, rs []fileReport) {
	if sc == nil {
		return
	}
	// kinds: the partition's manifest says its objects' kind (not when
	// it cannot be read: the check reported that).
	kinds, partitionSealed := false, false
	if sc.d.Selective() {
		_, s, err := sc.d.ObjectKey(ctx, prefix+"/"+manifest.ManifestName)
		kinds, partitionSealed = err == nil, s
	}
	for i := range rs {
		r := &rs[i]
		if len(r.Problems) > 0 {
			continue
		}
		id, sealed, err := sc.d.ObjectKey(ctx, r.Path)
		switch {
		case err != nil:
			continue // not an object, or one the check reported already
		case kinds && sealed != partitionSealed:
			if sealed {
				r.problemf("sealed, in a partition whose manifest is not (seal=topics): its topic's broker cannot read it")
			} else {
				r.problemf("not sealed, in a partition whose manifest is (seal=topics): its topic's broker refuses it")
			}
			continue
		case !sealed && sc.d.Selective():
			continue // a plaintext topic's
		case !sealed:
			r.Notes = append(r.Notes, "not sealed: written before the bucket was (read with read-plaintext=true)")
			continue
		}
		name := seal.KeyFolder(r.Path) + id
		bk, ok := sc.byName[name]
		switch {
		case !ok:
			r.problemf("sealed under bucket key %s, whose object %s is not in the store: the object is unreadable", id, name)
		case bk.Retired:
			r.Notes = append(r.Notes, fmt.Sprintf("sealed under bucket key %s, wrapped by the retired key %s: tierctl rekey --apply re-wraps it", id, bk.KEK))
		}
	}
}

// keyReports reports each bucket key wrapped by a retired key.
func (sc *sealCheck) keyReports() []fileReport {
	if sc == nil {
		return nil
	}
	var out []fileReport
	for _, k := range sc.keys {
		r := fileReport{Path: k.Name, Kind: "bucket key"}
		switch {
		case k.Err != nil:
			r.problemf("cannot be opened: %v; every object sealed under it is unreadable", k.Err)
		case k.Retired:
			r.Notes = append(r.Notes, fmt.Sprintf("wrapped by the retired key %s: tierctl rekey --apply re-wraps it", k.KEK))
		default:
			continue
		}
		out = append(out, r)
	}
	return out
}
