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
// puts them before the head (putPartsLocked); reading a head loads its
// parts (partLoader), from the manifest the partition holds when it names
// the same object, else from the bucket.
//
// New parts are named by an upload intent before they are put, as an
// upload's segment objects are: gc keeps what a live intent names and
// judges the rest by gc's rules for objects no manifest names. The head
// naming them must land within the intent's window: commitLocked bounds
// its PUT so, as commitInWindowLocked does an upload's.

// maxPartBytes bounds a part object: a tier 3 part of 65,536 segments is
// about 3 MB; a reference saying more is not one tierlog wrote.
const maxPartBytes = 64 << 20

// partLoader returns the loader DecodeLayered reads a head's parts with.
// A part the partition's current manifest names (with no more skipped)
// is taken from it; any other is read from the disk cache of remote
// indexes (Caches' IndexDir; a Backend's remote-index-cache) or else from
// the bucket, and checked against its reference either way. A part read
// from the bucket is kept in the disk cache: parts never change, and a
// restart reads them from there. A part the bucket does not have is a corrupt manifest,
// never a missing one: the head is there.
func (p *Partition) partLoader(ctx context.Context) func(manifest.Part) ([]manifest.Segment, error) {
	cur := p.man.Load()
	type heldPart struct{ i, at int } // its index in cur.m.Parts, of its first segment in cur.m.Segments
	var held map[[8]byte]heldPart
	return func(ref manifest.Part) ([]manifest.Segment, error) {
		if cur != nil && len(cur.m.Parts) > 0 {
			if held == nil {
				held = make(map[[8]byte]heldPart, len(cur.m.Parts))
				at := 0
				for i, cp := range cur.m.Parts {
					held[cp.ID] = heldPart{i, at}
					at += cp.Segments
				}
			}
			if h, ok := held[ref.ID]; ok {
				cp := cur.m.Parts[h.i]
				if cp.Name() == ref.Name() && cp.Skip <= ref.Skip && ref.Skip-cp.Skip < cp.Segments {
					return cur.m.Segments[h.at+ref.Skip-cp.Skip : h.at+cp.Segments], nil
				}
			}
		}
		if ref.Bytes > maxPartBytes {
			return nil, fmt.Errorf("%w: part %s of %d bytes, more than the %d a part may have", manifest.ErrCorrupt, ref.Name(), ref.Bytes, maxPartBytes)
		}
		key := p.layout().Part(ref)
		var disk *diskCache
		if p.caches != nil {
			disk = p.caches.disk
		}
		if data, ok := disk.get(key); ok {
			// A restart reads the parts it read before from the disk
			// cache (the remote indexes'); checked as from the bucket.
			if segs, err := manifest.DecodePart(ref, data); err == nil {
				return segs, nil
			}
		}
		data, err := p.store.ReadAll(ctx, key, 0, ref.Bytes)
		if errors.Is(err, objstore.ErrNotFound) || errors.Is(err, objstore.ErrInvalidRange) {
			// Not ErrNotFound: the manifest is there, and a caller must not
			// take it for a partition without one.
			return nil, fmt.Errorf("%w: the manifest names part %s, which the bucket does not have with its %d bytes (%v)", manifest.ErrCorrupt, key, ref.Bytes, err)
		}
		if err != nil {
			return nil, fmt.Errorf("tiered: read %s: %w", key, err)
		}
		if p.metrics != nil {
			p.metrics.ManifestPartReads.Add(1)
		}
		segs, err := manifest.DecodePart(ref, data)
		if err == nil {
			disk.put(key, data)
		}
		return segs, err
	}
}

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
			p.caches.disk.put(key, po.Data) // a restart reads it from there
		}
	}
	return in, nil
}
