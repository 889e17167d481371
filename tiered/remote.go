package tiered

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"slices"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/index"
	"github.com/tierlog/tierlog/manifest"
	"github.com/tierlog/tierlog/objstore"
	"github.com/tierlog/tierlog/producerstate"
	"github.com/tierlog/tierlog/record"
)

// readSlack is how far past the index position a remote read fetches
// beyond MaxBytes: enough to cover the scan to the batch holding the offset
// (at most one index interval and one batch) in the same ranged GET.
const readSlack = 64 << 10

// storageError types a failure to reach the bucket as backend.ErrStorage
// (Kafka's KAFKA_STORAGE_ERROR, which clients retry); errors that already
// say what went wrong in the partition's terms (out of range, corrupt
// data, closed, the caller's context ending) pass as they are; a request
// that timed out under the store's own deadline is a storage error.
func storageError(ctx context.Context, err error) error {
	if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		return err
	}
	for _, typed := range []error{backend.ErrStorage, backend.ErrOffsetOutOfRange, backend.ErrCorruptRecord, backend.ErrClosed, backend.ErrFenced} {
		if errors.Is(err, typed) {
			return err
		}
	}
	return fmt.Errorf("%w: %w", backend.ErrStorage, err)
}

// bucketTier is the bucket: the committed manifest's segments, from the
// partition's log start up to the local log's start.
type bucketTier struct{ p *Partition }

func (bucketTier) remote() bool { return true }

// start is the log start while the bucket runs on into the local log
// (before the manifest is read, the one the checkpoint recorded); at or
// past the local start, the bucket serves nothing.
func (bucketTier) start(v view) int64 { return v.logStart() }

// read is step 1 of the two-step lookup: the manifest's segment holding
// offset (or the next one), below end; readSegment does step 2.
func (t bucketTier) read(ctx context.Context, v view, offset, end int64, opts backend.ReadOptions) (backend.Records, bool, error) {
	maxBytes := int64(opts.MaxBytes)
	if maxBytes <= 0 {
		maxBytes = 1 << 20
	}
	c, err := t.p.seek(ctx, v.head, offset)
	if err != nil {
		return nil, true, err
	}
	for {
		seg, ok, err := c.next(ctx)
		if err != nil {
			return nil, true, err
		}
		if !ok || seg.BaseOffset >= end {
			return nil, false, nil
		}
		recs, found, err := t.p.readSegment(ctx, v, seg, max(offset, seg.BaseOffset), maxBytes, opts)
		if errors.Is(err, objstore.ErrNotFound) && !errors.Is(err, objstore.ErrBucketNotFound) && !t.p.names(ctx, seg) {
			// Retention committed past the view and deleted the segment
			// under the read: a new view answers from the new manifest.
			// A segment the committed manifest still names is missing
			// from the bucket: a storage error, never retried away.
			return nil, true, fmt.Errorf("%w: %w", errViewMoved, err)
		}
		if err != nil || found {
			return recs, true, err
		}
		// Nothing at or after offset in this segment: the next one.
	}
}

// names reports whether the committed manifest names seg, the same
// upload, with offsets at or above its log start.
// When that cannot be told (a part of the manifest cannot be read), it
// does: the caller's error stands.
func (p *Partition) names(ctx context.Context, seg manifest.Segment) bool {
	h := p.Head()
	if seg.LastOffset < h.LogStartOffset() {
		return false
	}
	s, ok, err := p.holding(ctx, h, seg.BaseOffset)
	return err != nil || ok && s.BaseOffset == seg.BaseOffset && s.ID == seg.ID
}

// aborted reads the .txnindex of each segment from the one holding fetch
// (fetched once and cached like the offset indexes).
func (t bucketTier) aborted(ctx context.Context, v view, acc []backend.AbortedTxn, fetch, upper, end int64) ([]backend.AbortedTxn, bool, error) {
	var found []producerstate.AbortedTxn
	complete := false
	c, err := t.p.seek(ctx, v.head, fetch)
	if err != nil {
		return nil, false, err
	}
	for !complete {
		seg, ok, err := c.next(ctx)
		if err != nil {
			return nil, false, err
		}
		if !ok || seg.BaseOffset >= end {
			break
		}
		if seg.TxnIndexSize == 0 {
			continue
		}
		data, err := t.p.remoteIndex(ctx, seg, manifest.TxnIndexSuffix)
		if err != nil {
			return nil, false, err
		}
		if found, complete, err = producerstate.CollectAbortedTxns(found, data, fetch, upper); err != nil {
			return nil, false, fmt.Errorf("%w: %s: %w", backend.ErrCorruptRecord, t.p.layout().Segment(seg, manifest.TxnIndexSuffix), err)
		}
	}
	for _, a := range found {
		acc = append(acc, backend.AbortedTxn{ProducerID: a.ProducerID, FirstOffset: a.FirstOffset})
	}
	return acc, complete, nil
}

// offsetForTimestamp searches the segments by their largest timestamp,
// then their remote time index.
func (t bucketTier) offsetForTimestamp(ctx context.Context, v view, ts, end int64) (int64, int64, bool, error) {
	if ts == backend.MaxTimestamp {
		seg, ok, err := t.p.maxTimestampSegment(ctx, v, end)
		if err != nil || !ok {
			return -1, -1, false, err
		}
		return t.p.remoteTimestamp(ctx, v, seg, seg.MaxTimestamp)
	}
	c, err := t.p.seekTimestamp(ctx, v.head, ts)
	if err != nil {
		return -1, -1, false, err
	}
	for {
		seg, ok, err := c.next(ctx)
		if err != nil || !ok || seg.BaseOffset >= end {
			return -1, -1, false, err
		}
		if seg.MaxTimestamp < ts {
			continue
		}
		off, rts, found, err := t.p.remoteTimestamp(ctx, v, seg, ts)
		if err != nil || found {
			return off, rts, found, err
		}
	}
}

// maxTimestamp is the largest of the manifest's recorded segment
// timestamps: no GET but of the parts that may hold it.
func (t bucketTier) maxTimestamp(ctx context.Context, v view, end int64) (int64, int64, bool, error) {
	seg, ok, err := t.p.maxTimestampSegment(ctx, v, end)
	if err != nil || !ok {
		return 0, -1, false, err
	}
	return seg.MaxTimestamp, -1, true, nil // its offset takes GETs: asked only of the best tier
}

// maxTimestampSegment is the first segment below end, at or past the log
// start, with the largest timestamp (ok false: none). Each part's
// reference carries its largest timestamp: the parts are visited from the
// largest down, and only those that may hold a better segment than the
// best found are loaded (in a log whose timestamps grow, none but the
// head's own and the last part).
func (p *Partition) maxTimestampSegment(ctx context.Context, v view, end int64) (manifest.Segment, bool, error) {
	h := v.head
	ls := h.LogStartOffset()
	var best manifest.Segment
	bestAt, found := 0, false // bestAt: the part best is in (len(h.Parts): the head's own)
	consider := func(k int, segs []manifest.Segment) {
		for _, s := range segs {
			if s.BaseOffset < end && s.LastOffset >= ls && (!found || s.MaxTimestamp > best.MaxTimestamp || s.MaxTimestamp == best.MaxTimestamp && k < bestAt) {
				best, bestAt, found = s, k, true
			}
		}
	}
	consider(len(h.Parts), h.Own)
	order := make([]int, 0, len(h.Parts))
	for k, part := range h.Parts {
		if part.BaseOffset < end && part.LastOffset >= ls {
			order = append(order, k)
		}
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(h.Parts[b].MaxTimestamp, h.Parts[a].MaxTimestamp) })
	for _, k := range order {
		if found && (h.Parts[k].MaxTimestamp < best.MaxTimestamp || h.Parts[k].MaxTimestamp == best.MaxTimestamp && k > bestAt) {
			continue // it cannot hold a better one
		}
		segs, err := p.partSegments(ctx, h.Parts[k])
		if err != nil {
			return manifest.Segment{}, false, err
		}
		consider(k, segs)
	}
	return best, found, nil
}

// epochs are the manifest's: each segment keeps its leader-epoch map. A
// part whose segments are all of one epoch adds it from its reference
// alone; only a part a leader change fell in (or the log start cuts into)
// is loaded.
func (t bucketTier) epochs(ctx context.Context, v view, end int64, add func(int32, int64)) error {
	h := v.head
	ls := h.LogStartOffset()
	addSegments := func(segs []manifest.Segment) {
		for _, s := range segs {
			if s.LastOffset < ls || s.BaseOffset >= end {
				continue
			}
			if len(s.Epochs) == 0 { // a version 1 manifest: the highest epoch only
				add(s.LeaderEpoch, max(s.BaseOffset, ls))
			}
			for _, e := range s.Epochs {
				add(e.Epoch, max(e.StartOffset, ls))
			}
		}
	}
	for _, part := range h.Parts {
		switch {
		case part.LastOffset < ls:
			continue
		case part.BaseOffset >= end:
			return nil
		case part.FirstEpoch == part.LastEpoch && part.BaseOffset >= ls:
			// Every segment's epoch map is [{epoch, its base}]: the
			// first segment's base is where the part's epoch starts.
			add(part.FirstEpoch, part.BaseOffset)
			continue
		}
		segs, err := t.p.partSegments(ctx, part)
		if err != nil {
			return err
		}
		addSegments(segs)
	}
	addSegments(h.Own)
	return nil
}

// cachedIndex is one of a segment's small objects held in memory: its
// bytes and, for its offset index, the parsed view step 2 of a lookup
// searches, built once when the bytes arrive rather than at every read.
type cachedIndex struct {
	data    []byte
	offsets *index.OffsetIndex // nil but for the .index
}

// newCachedIndex holds data, seg's object of suffix.
func newCachedIndex(seg manifest.Segment, suffix string, data []byte) cachedIndex {
	c := cachedIndex{data: data}
	if suffix == manifest.IndexSuffix {
		c.offsets = index.NewOffsetIndexView(data, seg.BaseOffset)
	}
	return c
}

// remoteIndex returns one of the segment's small objects (an index, its
// .txnindex), from the cache or by one GET, checked against the size and
// CRC-32C the manifest recorded.
func (p *Partition) remoteIndex(ctx context.Context, seg manifest.Segment, suffix string) ([]byte, error) {
	c, err := p.remoteObject(ctx, seg, suffix)
	return c.data, err
}

// remoteOffsetIndex returns the segment's remote offset index, parsed.
func (p *Partition) remoteOffsetIndex(ctx context.Context, seg manifest.Segment) (*index.OffsetIndex, error) {
	c, err := p.remoteObject(ctx, seg, manifest.IndexSuffix)
	return c.offsets, err
}

// remoteObject is remoteIndex, as the cache holds it.
func (p *Partition) remoteObject(ctx context.Context, seg manifest.Segment, suffix string) (cachedIndex, error) {
	ck := p.objectKey(seg, suffix)
	if c, ok := p.caches.indexes.get(ck); ok {
		return c, nil
	}
	key := ck.String()
	size, want := seg.Object(suffix)
	valid := func(b []byte) bool { return int64(len(b)) == size && crc32.Checksum(b, castagnoli) == want }
	if b, ok := p.caches.disk.get(key); ok && valid(b) {
		c := newCachedIndex(seg, suffix, b)
		p.caches.indexes.put(ck, c)
		return c, nil
	}
	var b []byte
	if size > 0 {
		var err error
		if b, err = p.store.ReadAll(ctx, key, 0, size); err != nil {
			return cachedIndex{}, fmt.Errorf("tiered: %w", err)
		}
	}
	if !valid(b) {
		return cachedIndex{}, fmt.Errorf("%w: %s: %d bytes with CRC-32C 0x%08x, the manifest recorded %d and 0x%08x",
			backend.ErrCorruptRecord, key, len(b), crc32.Checksum(b, castagnoli), size, want)
	}
	c := newCachedIndex(seg, suffix, b)
	p.caches.indexes.put(ck, c)
	p.caches.disk.put(key, b)
	return c, nil
}

// readSegment reads whole batches of seg from the one holding target.
// found is false when no batch of seg holds target or a later offset.
func (p *Partition) readSegment(ctx context.Context, v view, seg manifest.Segment, target, maxBytes int64, opts backend.ReadOptions) (backend.Records, bool, error) {
	l, found, err := p.locate(ctx, seg, target, maxBytes+readSlack)
	if err != nil || !found {
		return nil, false, err
	}
	bound := v.readBound(opts.Isolation)
	if l.entry.BaseOffset >= bound {
		return &memRecords{next: target}, true, nil
	}
	// Take whole batches within MaxBytes (at least one with MinOneBatch),
	// and check the one after them. locate read and checked the first.
	// Where the window ends at a batch's end, the batches go on in the
	// cached range from there (a read-ahead's, which starts at a batch),
	// lent in place as the answer's second piece (rest): a read crossing
	// two ranges copies neither.
	end, next := l.at, target
	key := l.key
	checked := false // the batch after the last taken was checked
	var rest []byte  // the second piece
	crossed := false // the walk went on into rest's range
	// The window walked: l.data, then rest's range.
	pos, data, w, at := l.pos, l.data, l.walked, l.at
	if l.whole() && l.entry.Size <= maxBytes && l.entry.LastOffset < bound {
		end, next = l.at+l.entry.Size, l.entry.LastOffset+1
		at = end
		for {
			if at == int64(len(data)) {
				if crossed || pos+at >= seg.Size {
					break
				}
				more, mw := p.caches.chunks.lend(key, pos+at, maxBytes-(end-l.at)+readSlack)
				if len(more) == 0 {
					break
				}
				pos, data, w, at, crossed = pos+at, more, mw, 0, true
			}
			e, known, ordered := w.batch(at)
			if !known {
				var err error
				if e, err = record.HeaderAt(data, at, int64(len(data))); err != nil {
					break // the window ends inside it: checkNext reads its header
				}
			}
			if !ordered {
				if err := checkOrder(e, next-1, seg, key, pos+at); err != nil {
					return nil, false, err
				}
			}
			if end-l.at+int64(len(rest))+e.Size > maxBytes || e.LastOffset >= bound {
				checked = true
				break
			}
			at += e.Size
			next = e.LastOffset + 1
			if crossed {
				rest = data[:at]
			} else {
				end = at
			}
		}
	}
	if end == l.at {
		if !opts.MinOneBatch {
			return &memRecords{next: target}, true, nil
		}
		if !l.whole() {
			whole, _, _, err := p.window(ctx, seg, key, l.pos+l.at, l.entry.Size, l.entry.Size)
			if err != nil {
				return nil, false, err
			}
			if err := p.checkNext(ctx, seg, key, l.pos+l.at+l.entry.Size, whole[l.entry.Size:], l.entry.LastOffset); err != nil {
				return nil, false, err
			}
			return &memRecords{data: whole[:l.entry.Size], next: l.entry.LastOffset + 1}, true, nil
		}
		end, next, checked = l.at+l.entry.Size, l.entry.LastOffset+1, false
		at = end
		if _, _, ordered := l.walked.batch(end); ordered {
			checked = true // the walk on arrival checked the batch after it
		}
	}
	if !checked {
		if err := p.checkNext(ctx, seg, key, pos+at, data[min(at, int64(len(data))):], next-1); err != nil {
			return nil, false, err
		}
	}
	reached := l.pos + int64(len(l.data)) // the read's window: a read-ahead serves the next read's
	if crossed {
		reached = pos + min(at+readSlack, int64(len(data)))
	}
	p.prefetch(v, seg, reached, maxBytes+readSlack)
	return &memRecords{data: l.data[l.at:end], rest: rest, next: next}, true, nil
}

// remoteTimestamp is Kafka's findOffsetByTimestamp over a remote segment:
// the time index entry only chooses where to start scanning; batches are
// then read window by window (through locate) and records filtered by the
// log start offset.
func (p *Partition) remoteTimestamp(ctx context.Context, v view, seg manifest.Segment, ts int64) (int64, int64, bool, error) {
	tidx, err := p.remoteIndex(ctx, seg, manifest.TimeIndexSuffix)
	if err != nil {
		return 0, 0, false, err
	}
	start := v.logStart()
	target := max(manifest.TimestampInIndex(seg, tidx, ts).Offset, start, seg.BaseOffset)
	var it record.Iterator
	key := p.objectKey(seg, manifest.LogSuffix)
	for target <= seg.LastOffset {
		l, found, err := p.locate(ctx, seg, target, 1<<20)
		if err != nil || !found {
			return 0, 0, false, err
		}
		data, pos := l.data, l.pos // pos: data's position in the object
		if !l.whole() {
			if data, _, _, err = p.window(ctx, seg, key, l.pos+l.at, l.entry.Size, l.entry.Size); err != nil {
				return 0, 0, false, err
			}
			pos, l.at = l.pos+l.at, 0
		}
		prevLast := l.entry.BaseOffset - 1
		for at := l.at; at < int64(len(data)); {
			e, err := record.HeaderAt(data, at, int64(len(data)))
			if err != nil || at+e.Size > int64(len(data)) {
				break
			}
			if err := checkOrder(e, prevLast, seg, key, pos+at); err != nil {
				return 0, 0, false, err
			}
			if e.MaxTimestamp >= ts && e.LastOffset >= start {
				off, rts, found, err := it.FirstAtOrAfter(data[at:at+e.Size], ts, start)
				if err != nil {
					return 0, 0, false, fmt.Errorf("%w: %s position %d: %w", backend.ErrCorruptRecord, key, pos+at, err)
				}
				if found {
					// The answer stands only if the next batch does not overlap its batch.
					if err := p.checkNext(ctx, seg, key, pos+at+e.Size, data[at+e.Size:], e.LastOffset); err != nil {
						return 0, 0, false, err
					}
					return off, rts, true, nil
				}
			}
			prevLast, target = e.LastOffset, e.LastOffset+1
			at += e.Size
		}
	}
	return 0, 0, false, nil
}

// declaredSize reads the size of the entry starting at data[0] from its
// length field, checking it against the bytes left in the segment.
func declaredSize(data []byte, left int64, key objectKey, pos int64) (int64, error) {
	if len(data) < record.LogOverhead {
		return 0, fmt.Errorf("%w: %s position %d: %d bytes, not a batch header", backend.ErrCorruptRecord, key, pos, len(data))
	}
	size := int64(binary.BigEndian.Uint32(data[8:12])) + record.LogOverhead
	if size < record.BatchHeaderSize || size > left {
		return 0, fmt.Errorf("%w: %s position %d: a batch of %d bytes with %d left in the segment", backend.ErrCorruptRecord, key, pos, size, left)
	}
	return size, nil
}

// RemoteLookup shows the two steps of a lookup in the bucket, for tools:
// the same path Read takes (manifest, remote index, window through the
// chunk cache).
type RemoteLookup struct {
	Segments       int    // segments in the manifest (step 1 searched them)
	SegmentIndex   int    // the one step 1 chose
	Object         string // its .log object
	IndexEntries   int    // entries of its remote offset index
	IndexSlot      int    // the entry step 2 chose (-1: none, segment start)
	IndexOffset    int64
	IndexPosition  int32
	BatchesScanned int  // batches scanned to get there (headers, or what the cached window's walk read of them)
	Cached         bool // the window holding the batch came from the chunk cache
	BaseOffset     int64
	LastOffset     int64
	BatchPosition  int64
	BatchSize      int64
}

// LookupRemote finds the batch holding offset in the bucket and reports how.
func (p *Partition) LookupRemote(ctx context.Context, offset int64) (RemoteLookup, error) {
	var r RemoteLookup
	if err := p.checkOpen(); err != nil {
		return r, err
	}
	if err := p.attach(ctx); err != nil {
		return r, err
	}
	v := p.view()
	c, err := p.seek(ctx, v.head, offset)
	if err != nil {
		return r, err
	}
	r.SegmentIndex = c.position()
	seg, ok, err := c.next(ctx)
	if err != nil {
		return r, err
	}
	if !ok {
		return r, &backend.OffsetOutOfRangeError{Offset: offset, LogStart: v.head.LogStartOffset(), LogEnd: v.offsets().LocalLogStart}
	}
	r.Segments, r.Object = v.head.Count(), p.layout().Segment(seg, manifest.LogSuffix)
	l, found, err := p.locate(ctx, seg, max(offset, seg.BaseOffset), 1<<20+readSlack)
	r.IndexEntries, r.IndexSlot, r.IndexOffset, r.IndexPosition = l.indexEntries, l.indexSlot, l.indexEntry.Offset, l.indexEntry.Position
	r.BatchesScanned, r.Cached = l.scanned, l.cached
	if err != nil {
		return r, err
	}
	if !found {
		return r, fmt.Errorf("%w: offset %d: no batch at or after it in %s", backend.ErrNotFound, offset, r.Object)
	}
	r.BaseOffset, r.LastOffset, r.BatchPosition, r.BatchSize = l.entry.BaseOffset, l.entry.LastOffset, l.pos+l.at, l.entry.Size
	return r, nil
}
