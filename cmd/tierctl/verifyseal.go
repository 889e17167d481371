package main

import (
	"context"
	"fmt"

	"github.com/tierlog/tierlog/objstore"
	"github.com/tierlog/tierlog/objstore/seal"
)

// sealCheck says, of a sealed bucket, which objects are sealed under a
// bucket key wrapped by a retired key-file key (one not active), and
// which bucket keys are. nil for a bucket that is not sealed.
type sealCheck struct {
	d    *seal.Driver
	keys []seal.BucketKey
	kek  map[string]seal.BucketKey
}

func newSealCheck(ctx context.Context, store *objstore.Store) (*sealCheck, error) {
	d, err := seal.Sealed(store)
	if err != nil {
		return nil, nil
	}
	keys, err := seal.BucketKeys(ctx, store)
	if err != nil {
		return nil, err
	}
	sc := &sealCheck{d: d, keys: keys, kek: map[string]seal.BucketKey{}}
	for _, k := range keys {
		if old, ok := sc.kek[k.ID]; !ok || k.Retired && !old.Retired {
			sc.kek[k.ID] = k // one of its objects under a retired key says so
		}
	}
	return sc, nil
}

// note adds to each object's report what it is sealed under, when that is
// a retired key (the header is the one the check read: no request).
func (sc *sealCheck) note(ctx context.Context, rs []fileReport) {
	if sc == nil {
		return
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
		case !sealed:
			r.Notes = append(r.Notes, "not sealed: written before the bucket was (read with read-plaintext=true)")
		case sc.kek[id].Retired:
			r.Notes = append(r.Notes, fmt.Sprintf("sealed under bucket key %s, wrapped by the retired key %s: tierctl rekey --apply re-wraps it", id, sc.kek[id].KEK))
		case sc.kek[id].KEK == "":
			r.problemf("sealed under bucket key %s, whose object is not in the store (%s%s): the object is unreadable", id, seal.KeyFolder(r.Path), id)
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
