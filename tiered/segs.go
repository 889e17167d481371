package tiered

import (
	"context"
	"errors"
	"fmt"
	"sort"

	"github.com/tierlog/tierlog/manifest"
	"github.com/tierlog/tierlog/objstore"
)

// A partition keeps its committed manifest's head (manifest.Head): the
// header, the parts it names, and the newest segments. A part's segments
// are loaded when they are needed, through the Caches' byte-bounded cache
// of parts shared by every partition of a Backend (and the disk cache of
// remote indexes, where the Backend has one), so a broker's memory for
// its manifests does not grow with their segments:
//
//   - a read walks the segments from the one holding its offset (seek,
//     seekTimestamp), loading only the parts it reaches;
//   - a change of the manifest (an upload, retention, a new log start),
//     gc, verify and restore take the whole manifest (whole): its parts
//     from the cache, else the disk, else the bucket.

// partKey names a part's live segments in the cache: its object, and
// how many of the object's segments its reference skips.
type partKey struct {
	object string
	skip   int
}

// partSegments returns ref's live segments: from the cache of parts, else
// the disk cache of remote indexes, else the bucket, checked against ref
// either way. A part read from the bucket is kept in the disk cache:
// parts never change, and a restart reads them from there. A part the
// bucket does not have is a corrupt manifest, never a missing one: the
// head is there.
func (p *Partition) partSegments(ctx context.Context, ref manifest.Part) ([]manifest.Segment, error) {
	key := p.layout().Part(ref)
	ck := partKey{key, ref.Skip}
	var parts *lru[partKey, []manifest.Segment] // nil: a tool's partition, no caches
	var disk *diskCache
	if p.caches != nil {
		parts, disk = p.caches.parts, p.caches.disk
		if segs, ok := parts.get(ck); ok {
			return segs, nil
		}
	}
	if ref.Bytes > maxPartBytes {
		return nil, fmt.Errorf("%w: part %s of %d bytes, more than the %d a part may have", manifest.ErrCorrupt, ref.Name(), ref.Bytes, maxPartBytes)
	}
	if data, ok := disk.get(key); ok {
		// A restart reads the parts it read before from the disk cache
		// (the remote indexes'); checked as from the bucket.
		if segs, err := manifest.DecodePart(ref, data); err == nil {
			if parts != nil {
				parts.put(ck, segs)
			}
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
	if err != nil {
		return nil, err
	}
	disk.put(key, data)
	if parts != nil {
		parts.put(ck, segs)
	}
	return segs, nil
}

// cachedPart returns ref's live segments if the cache of parts holds
// them, with no I/O.
func (p *Partition) cachedPart(ref manifest.Part) ([]manifest.Segment, bool) {
	if p.caches == nil {
		return nil, false
	}
	return p.caches.parts.get(partKey{p.layout().Part(ref), ref.Skip})
}

// whole returns the whole manifest head names (see segs.go's notes). It
// must not be changed.
func (p *Partition) whole(ctx context.Context, head *manifest.Head) (*manifest.Manifest, error) {
	return head.Whole(func(ref manifest.Part) ([]manifest.Segment, error) { return p.partSegments(ctx, ref) })
}

// segCursor walks a committed manifest's segments in offset order,
// loading each part's when it reaches it.
type segCursor struct {
	p    *Partition
	head *manifest.Head
	part int                // the part segs came from; len(head.Parts): the head's own
	segs []manifest.Segment // that part's live segments (or the head's own)
	i    int                // the next of segs
}

// load points c at part k (len(head.Parts): the head's own), at its
// segment i.
func (c *segCursor) load(ctx context.Context, k, i int) error {
	c.part, c.i = k, i
	if k == len(c.head.Parts) {
		c.segs = c.head.Own
		return nil
	}
	segs, err := c.p.partSegments(ctx, c.head.Parts[k])
	if err != nil {
		return err
	}
	c.segs = segs
	return nil
}

// position returns the index in the whole manifest of the segment next
// returns.
func (c *segCursor) position() int {
	n := c.i
	for _, part := range c.head.Parts[:c.part] {
		n += part.Segments
	}
	return n
}

// next returns the next segment; ok false after the last.
func (c *segCursor) next(ctx context.Context) (manifest.Segment, bool, error) {
	for c.i >= len(c.segs) {
		if c.part >= len(c.head.Parts) {
			return manifest.Segment{}, false, nil
		}
		if err := c.load(ctx, c.part+1, 0); err != nil {
			return manifest.Segment{}, false, err
		}
	}
	c.i++
	return c.segs[c.i-1], true, nil
}

// seek returns a cursor at the segment holding offset, or the first one
// after it when offset falls in a gap (manifest.Manifest.Find): the first
// segment ending at or after offset. Below the log start it is at none.
func (p *Partition) seek(ctx context.Context, head *manifest.Head, offset int64) (*segCursor, error) {
	c := &segCursor{p: p, head: head, part: len(head.Parts)}
	if offset < head.LogStartOffset() {
		return c, nil
	}
	k := sort.Search(len(head.Parts), func(j int) bool { return head.Parts[j].LastOffset >= offset })
	if err := c.load(ctx, k, 0); err != nil {
		return nil, err
	}
	c.i = sort.Search(len(c.segs), func(j int) bool { return c.segs[j].LastOffset >= offset })
	return c, nil
}

// seekTimestamp returns a cursor at the first segment whose largest
// timestamp is at least ts (manifest.Manifest.FindTimestamp), loading
// only the part that holds it: each part's reference carries its largest
// timestamp.
func (p *Partition) seekTimestamp(ctx context.Context, head *manifest.Head, ts int64) (*segCursor, error) {
	c := &segCursor{p: p, head: head}
	k := 0
	for k < len(head.Parts) && head.Parts[k].MaxTimestamp < ts {
		k++
	}
	if err := c.load(ctx, k, 0); err != nil {
		return nil, err
	}
	for c.i < len(c.segs) && c.segs[c.i].MaxTimestamp < ts {
		c.i++
	}
	return c, nil
}

// holding returns the segment whose offsets hold offset, whatever the log
// start (manifest.Manifest.Holding); ok false when none does.
func (p *Partition) holding(ctx context.Context, head *manifest.Head, offset int64) (manifest.Segment, bool, error) {
	k := sort.Search(len(head.Parts), func(j int) bool { return head.Parts[j].LastOffset >= offset })
	segs := head.Own
	if k < len(head.Parts) {
		var err error
		if segs, err = p.partSegments(ctx, head.Parts[k]); err != nil {
			return manifest.Segment{}, false, err
		}
	}
	i := sort.Search(len(segs), func(j int) bool { return segs[j].LastOffset >= offset })
	if i < len(segs) && segs[i].BaseOffset <= offset {
		return segs[i], true, nil
	}
	return manifest.Segment{}, false, nil
}

// cachedAfter returns the first segment starting after offset if the head
// or the cache of parts holds it, with no I/O (what read-ahead looks
// for).
func (p *Partition) cachedAfter(head *manifest.Head, offset int64) (manifest.Segment, bool) {
	k := sort.Search(len(head.Parts), func(j int) bool { return head.Parts[j].LastOffset > offset })
	segs := head.Own
	if k < len(head.Parts) {
		var ok bool
		if segs, ok = p.cachedPart(head.Parts[k]); !ok {
			return manifest.Segment{}, false
		}
	}
	i := sort.Search(len(segs), func(j int) bool { return segs[j].BaseOffset > offset })
	if i < len(segs) {
		return segs[i], true
	}
	return manifest.Segment{}, false
}

// firstSegment returns the first segment of st's manifest (which must
// name one), loading the first part once per state.
func (p *Partition) firstSegment(ctx context.Context, st *manifestState) (manifest.Segment, error) {
	if s := st.first.Load(); s != nil {
		return *s, nil
	}
	h := st.head
	if len(h.Parts) == 0 {
		return h.Own[0], nil
	}
	segs, err := p.partSegments(ctx, h.Parts[0])
	if err != nil {
		return manifest.Segment{}, err
	}
	s := segs[0]
	st.first.Store(&s)
	return s, nil
}

// lastSegment returns the manifest's last segment (loading the last part
// when the head holds none of its own); ok false when it has none.
func (p *Partition) lastSegment(ctx context.Context, head *manifest.Head) (manifest.Segment, bool, error) {
	if n := len(head.Own); n > 0 {
		return head.Own[n-1], true, nil
	}
	if n := len(head.Parts); n > 0 {
		segs, err := p.partSegments(ctx, head.Parts[n-1])
		if err != nil {
			return manifest.Segment{}, false, err
		}
		return segs[len(segs)-1], true, nil
	}
	return manifest.Segment{}, false, nil
}
