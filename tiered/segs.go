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

// partKey names a part's live segments in the cache: its object (the
// partition's prefix, the object's first offset and id: what its key is
// made of, without building the key on every read), how many of the
// object's segments its reference skips, and which block (wholePart: all
// of them). The directories' cache keys a part by its object alone
// (skip 0, wholePart).
type partKey struct {
	prefix string
	base   int64
	id     [8]byte
	skip   int
	block  int
}

// partKey is the cache key of ref's live segments in block (wholePart:
// all of them).
func (p *Partition) partKey(ref manifest.Part, block int) partKey {
	return partKey{p.prefix, ref.ObjectBase, ref.ID, ref.Skip, block}
}

// dirKey is the cache key of ref's block directory.
func (p *Partition) dirKey(ref manifest.Part) partKey {
	return partKey{p.prefix, ref.ObjectBase, ref.ID, 0, wholePart}
}

// wholePart is the block of a partKey that names all of a part's
// segments.
const wholePart = -1

// wholePartBytes is the largest part a lookup reads whole (one GET); a
// larger one (a part of tier 2 or above, thousands of segments) is read
// by its block directory and the one block of BlockSegments segments the
// lookup needs: two ranged GETs of a few KiB, whatever the part's size.
const wholePartBytes = 64 << 10

// partSegments returns ref's live segments: from the cache of parts, else
// the disk cache of remote indexes, else the bucket, checked against ref
// either way. A part read from the bucket is kept in the disk cache:
// parts never change, and a restart reads them from there. A part the
// bucket does not have is a corrupt manifest, never a missing one: the
// head is there.
func (p *Partition) partSegments(ctx context.Context, ref manifest.Part) ([]manifest.Segment, error) {
	ck := p.partKey(ref, wholePart)
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
	key := p.layout().Part(ref)
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
	data, err := p.readPart(ctx, ref, 0, ref.Bytes)
	if err != nil {
		return nil, err
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
	return p.caches.parts.get(p.partKey(ref, wholePart))
}

// cachedBlock returns the live segments of the block of a large part
// that holds the first segment starting after offset, if the caches hold
// its directory and it, with no I/O.
func (p *Partition) cachedBlock(ref manifest.Part, offset int64) ([]manifest.Segment, bool) {
	if p.caches == nil {
		return nil, false
	}
	blocks, ok := p.caches.dirs.get(p.dirKey(ref))
	if !ok {
		return nil, false
	}
	j := sort.Search(len(blocks), func(j int) bool { return blocks[j].LastOffset > offset })
	if j == len(blocks) {
		return nil, false
	}
	return p.caches.parts.get(p.partKey(ref, j))
}

// readPart reads n bytes of the part ref from off. A part the bucket
// does not have is a corrupt manifest, never a missing one: the manifest
// is there, and a caller must not take it for a partition without one.
func (p *Partition) readPart(ctx context.Context, ref manifest.Part, off, n int64) ([]byte, error) {
	key := p.layout().Part(ref)
	data, err := p.store.ReadAll(ctx, key, off, n)
	if errors.Is(err, objstore.ErrNotFound) || errors.Is(err, objstore.ErrInvalidRange) {
		return nil, fmt.Errorf("%w: the manifest names part %s, which the bucket does not have with its %d bytes (%v)", manifest.ErrCorrupt, key, ref.Bytes, err)
	}
	if err != nil {
		return nil, fmt.Errorf("tiered: read %s: %w", key, err)
	}
	return data, nil
}

// partDirectory returns a large part's block directory: from the cache,
// else the disk cache, else a ranged GET. A version 1 part's directory,
// which carries no CRC of its own, is manifest.ErrUncheckedDirectory: the
// caller reads that part whole.
func (p *Partition) partDirectory(ctx context.Context, ref manifest.Part) ([]manifest.Block, error) {
	key := p.dirKey(ref)
	if p.caches != nil {
		if blocks, ok := p.caches.dirs.get(key); ok {
			return blocks, nil
		}
	}
	blocks, err := readChecked(p, ctx, ref, func(dir []byte) ([]manifest.Block, error) {
		return manifest.DecodePartDirectory(ref, dir)
	}, ref.DirRange)
	if err != nil {
		return nil, err
	}
	if p.caches != nil {
		p.caches.dirs.put(key, blocks)
	}
	return blocks, nil
}

// readChecked reads a range of the part ref (where gives it) from the
// disk cache, else by a ranged GET, and decodes it with decode, which
// checks it. A range from the disk cache that does not decode is read
// from the bucket again.
func readChecked[T any](p *Partition, ctx context.Context, ref manifest.Part, decode func([]byte) (T, error), where func() (int64, int64)) (T, error) {
	off, n := where()
	if p.caches != nil {
		if data, ok := p.caches.disk.getRange(p.layout().Part(ref), off, n); ok {
			if v, err := decode(data); err == nil {
				return v, nil
			}
		}
	}
	data, err := p.readPart(ctx, ref, off, n)
	if err != nil {
		var zero T
		return zero, err
	}
	if p.metrics != nil {
		p.metrics.ManifestRangeReads.Add(1)
	}
	return decode(data)
}

// partBlock returns the live segments of block j of a large part (blocks
// is its directory): from the cache, else the disk cache, else a ranged
// GET.
func (p *Partition) partBlock(ctx context.Context, ref manifest.Part, blocks []manifest.Block, j int) ([]manifest.Segment, error) {
	ck := p.partKey(ref, j)
	if p.caches != nil {
		if segs, ok := p.caches.parts.get(ck); ok {
			return segs, nil
		}
	}
	b := blocks[j]
	segs, err := readChecked(p, ctx, ref, func(data []byte) ([]manifest.Segment, error) {
		return b.LiveSegments(ref, data)
	}, func() (int64, int64) { return b.Offset, b.Size })
	if err != nil {
		return nil, err
	}
	if p.caches != nil {
		p.caches.parts.put(ck, segs)
	}
	return segs, nil
}

// whole returns the whole manifest head names (see segs.go's notes). It
// must not be changed.
func (p *Partition) whole(ctx context.Context, head *manifest.Head) (*manifest.Manifest, error) {
	return head.Whole(func(ref manifest.Part) ([]manifest.Segment, error) { return p.partSegments(ctx, ref) })
}

// segCursor walks a committed manifest's segments in offset order,
// loading each part's when it reaches it: a part of at most
// wholePartBytes whole, a larger one a block at a time.
type segCursor struct {
	p      *Partition
	head   *manifest.Head
	part   int              // the part segs came from; len(head.Parts): the head's own
	blocks []manifest.Block // that part's directory when it is read by blocks, else nil
	block  int              // the block segs came from
	segs   []manifest.Segment
	i      int // the next of segs
}

// enter points c at part k (len(head.Parts): the head's own): at its
// first block that pick accepts (blocks hold live segments; nil: the
// first), with segs that block's live segments or, for a part read
// whole, all of them.
func (c *segCursor) enter(ctx context.Context, k int, pick func(manifest.Block) bool) error {
	c.part, c.blocks, c.block, c.segs, c.i = k, nil, 0, nil, 0
	if k == len(c.head.Parts) {
		c.segs = c.head.Own
		return nil
	}
	ref := c.head.Parts[k]
	if ref.Bytes > wholePartBytes {
		blocks, err := c.p.partDirectory(ctx, ref)
		switch {
		case err == nil:
			c.blocks = blocks
			j := 0
			for j < len(blocks) && (blocks[j].First+blocks[j].Segments <= ref.Skip || pick != nil && !pick(blocks[j])) {
				j++
			}
			return c.loadBlock(ctx, min(j, len(blocks)-1))
		case !errors.Is(err, manifest.ErrUncheckedDirectory):
			return err
		}
		// A version 1 part: its directory is not checked alone.
	}
	segs, err := c.p.partSegments(ctx, ref)
	c.segs = segs
	return err
}

// loadBlock points c at block j of the current part.
func (c *segCursor) loadBlock(ctx context.Context, j int) error {
	segs, err := c.p.partBlock(ctx, c.head.Parts[c.part], c.blocks, j)
	if err != nil {
		return err
	}
	c.block, c.segs, c.i = j, segs, 0
	return nil
}

// position returns the index in the whole manifest of the segment next
// returns.
func (c *segCursor) position() int {
	n := c.i
	for _, part := range c.head.Parts[:c.part] {
		n += part.Segments
	}
	if c.blocks != nil {
		n += max(c.blocks[c.block].First-c.head.Parts[c.part].Skip, 0)
	}
	return n
}

// next returns the next segment; ok false after the last.
func (c *segCursor) next(ctx context.Context) (manifest.Segment, bool, error) {
	for c.i >= len(c.segs) {
		switch {
		case c.blocks != nil && c.block+1 < len(c.blocks):
			if err := c.loadBlock(ctx, c.block+1); err != nil {
				return manifest.Segment{}, false, err
			}
		case c.part >= len(c.head.Parts):
			return manifest.Segment{}, false, nil
		default:
			if err := c.enter(ctx, c.part+1, nil); err != nil {
				return manifest.Segment{}, false, err
			}
		}
	}
	c.i++
	return c.segs[c.i-1], true, nil
}

// seekAny returns a cursor at the first segment ending at or after
// offset, whatever the log start. It is small enough to inline, so the
// cursor of a caller that keeps it to itself lives on that caller's
// stack (a read allocates none).
func (p *Partition) seekAny(ctx context.Context, head *manifest.Head, offset int64) (*segCursor, error) {
	c := &segCursor{p: p, head: head}
	return c, c.seekAny(ctx, offset)
}

// seekAny points c at the first segment ending at or after offset.
func (c *segCursor) seekAny(ctx context.Context, offset int64) error {
	head := c.head
	k := sort.Search(len(head.Parts), func(j int) bool { return head.Parts[j].LastOffset >= offset })
	if err := c.enter(ctx, k, func(b manifest.Block) bool { return b.LastOffset >= offset }); err != nil {
		return err
	}
	c.i = sort.Search(len(c.segs), func(j int) bool { return c.segs[j].LastOffset >= offset })
	return nil
}

// seek returns a cursor at the segment holding offset, or the first one
// after it when offset falls in a gap (manifest.Manifest.Find): the first
// segment ending at or after offset. Below the log start it is at none.
// Like seekAny, it inlines.
func (p *Partition) seek(ctx context.Context, head *manifest.Head, offset int64) (*segCursor, error) {
	c := &segCursor{p: p, head: head}
	return c, c.seek(ctx, offset)
}

// seek points c at the segment holding offset (see Partition.seek).
func (c *segCursor) seek(ctx context.Context, offset int64) error {
	if offset < c.head.LogStartOffset() {
		c.part = len(c.head.Parts)
		return nil
	}
	return c.seekAny(ctx, offset)
}

// seekTimestamp returns a cursor at the first segment whose largest
// timestamp is at least ts (manifest.Manifest.FindTimestamp), loading
// only the part (or block) that holds it: each part's reference, and
// each block's directory entry, carries its largest timestamp.
func (p *Partition) seekTimestamp(ctx context.Context, head *manifest.Head, ts int64) (*segCursor, error) {
	c := &segCursor{p: p, head: head}
	k := 0
	for k < len(head.Parts) && head.Parts[k].MaxTimestamp < ts {
		k++
	}
	reaches := func(b manifest.Block) bool { return b.MaxTimestamp >= ts }
	if err := c.enter(ctx, k, reaches); err != nil {
		return nil, err
	}
	for {
		for c.i < len(c.segs) && c.segs[c.i].MaxTimestamp < ts {
			c.i++
		}
		if c.i < len(c.segs) || c.blocks == nil {
			return c, nil
		}
		// The block's largest timestamp was a segment the part skips:
		// the next block that reaches ts (the part's live segments do:
		// its reference says so).
		j := c.block + 1
		for j < len(c.blocks) && !reaches(c.blocks[j]) {
			j++
		}
		if j == len(c.blocks) {
			return c, nil // none: next goes on from the part's end
		}
		if err := c.loadBlock(ctx, j); err != nil {
			return nil, err
		}
	}
}

// holding returns the segment whose offsets hold offset, whatever the log
// start (manifest.Manifest.Holding); ok false when none does.
func (p *Partition) holding(ctx context.Context, head *manifest.Head, offset int64) (manifest.Segment, bool, error) {
	c, err := p.seekAny(ctx, head, offset)
	if err != nil {
		return manifest.Segment{}, false, err
	}
	s, ok, err := c.next(ctx)
	if err != nil || !ok || s.BaseOffset > offset {
		return manifest.Segment{}, false, err
	}
	return s, true, nil
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
			if segs, ok = p.cachedBlock(head.Parts[k], offset); !ok {
				return manifest.Segment{}, false
			}
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
	c := &segCursor{p: p, head: st.head}
	if err := c.enter(ctx, 0, nil); err != nil {
		return manifest.Segment{}, err
	}
	s, ok, err := c.next(ctx)
	if err != nil {
		return manifest.Segment{}, err
	}
	if !ok {
		return manifest.Segment{}, fmt.Errorf("%w: %s: the manifest names no segment", manifest.ErrCorrupt, p.layout().Manifest())
	}
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
		return p.holding(ctx, head, head.Parts[n-1].LastOffset)
	}
	return manifest.Segment{}, false, nil
}
