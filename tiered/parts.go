package tiered

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"

	"github.com/tierlog/tierlog/manifest"
	"github.com/tierlog/tierlog/objstore"
)

// The manifest's parts (manifest version 3, see package manifest's
// layered.go): the head at the manifest's key names immutable part
// objects holding runs of older segments. A commit that makes new parts
// puts them before the head (putPartsLocked). A partition keeps its
// committed manifest's head only; a part's segments are loaded when a
// read reaches them or a change needs the whole manifest (segs.go).
//
// New parts are named by an upload intent before they are put, as an
// upload's segment objects are: gc keeps what a live intent names and
// judges the rest by gc's rules for objects no manifest names. The head
// naming them must land within the intent's window: commitLocked bounds
// its PUT so, as commitInWindowLocked does an upload's.

// maxPartBytes bounds a part object: a tier 3 part of 65,536 segments is
// about 3 MB; a reference saying more is not one tierlog wrote.
const maxPartBytes = 64 << 20

// newPartID is a fresh random id for a part.
func newPartID() (id [8]byte) {
	if _, err := rand.Read(id[:]); err != nil {
		panic(err) // crypto/rand does not fail
	}
	return id
}

// putPartsLocked puts the parts a commit building on generation gen
// made: first an upload intent naming them (gc protects what a live
// intent names, whatever its grace period, and removes it once the
// manifest moved past gen or the intent's window ended), then each part,
// create-only with its CRC-32C. The head naming them must land within the
// intent's window (commitLocked bounds its PUT so); the caller removes
// the intent once it did. REQUIRES: p.mu held.
func (p *Partition) putPartsLocked(ctx context.Context, gen uint64, made []manifest.PartObject) (*intent, error) {
	names := make([]string, len(made))
	for i, po := range made {
		names[i] = po.Name()
	}
	in, err := p.putIntent(ctx, gen, names)
	if err != nil {
		return nil, err
	}
	for _, po := range made {
		key := p.layout().Part(po.Part)
		opts := objstore.PutOptions{IfNoneMatch: true, CRC32C: po.CRC, HasCRC32C: true}
		_, err := p.store.Put(ctx, key, bytes.NewReader(po.Data), int64(len(po.Data)), opts)
		if errors.Is(err, objstore.ErrPreconditionFailed) {
			// Ours, from a try whose answer was lost (the id is new to
			// this commit): the same bytes, or it is not ours.
			var got []byte
			if got, err = p.store.ReadAll(ctx, key, 0, -1); err == nil && !bytes.Equal(got, po.Data) {
				err = fmt.Errorf("%w: part %s is there with other bytes", manifest.ErrCorrupt, key)
			}
		}
		if err != nil {
			return nil, fmt.Errorf("tiered: put manifest part %s: %w", key, err) // the intent tells gc what to remove
		}
		p.metrics.ManifestPartsPut.Add(1)
		p.metrics.ManifestBytesPut.Add(int64(len(po.Data)))
		if p.caches != nil {
			p.caches.disk.put(key, po.Data) // a restart may read it from there
		}
	}
	return in, nil
}
