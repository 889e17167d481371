package tiered

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"time"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/index"
	"github.com/tierlog/tierlog/manifest"
	"github.com/tierlog/tierlog/record"
)

// readSlack is how far past the index position a remote read fetches
// beyond MaxBytes: enough to cover the scan to the batch holding the offset
// (at most one index interval and one batch) in the same ranged GET.
const readSlack = 64 << 10

// Read serves offsets at or above the local log start from the local log
// and older ones from the bucket: the manifest picks the segment (step 1),
// its cached remote offset index the position (step 2), then one ranged GET
// from there returns whole batches from the one holding the offset.
func (p *Partition) Read(ctx context.Context, offset int64, opts backend.ReadOptions) (backend.Records, error) {
	lo := p.local.Offsets()
	if offset >= lo.LogStart {
		return p.local.Read(ctx, offset, opts)
	}
	if o := p.Offsets(); offset < o.LogStart {
		p.metrics.RemoteReadErrors.Add(1)
		return nil, &backend.OffsetOutOfRangeError{Offset: offset, LogStart: o.LogStart, LogEnd: o.LogEnd}
	}
	start := time.Now()
	recs, remote, err := p.readRemote(ctx, offset, opts, lo)
	switch {
	case err != nil:
		p.metrics.RemoteReadErrors.Add(1)
	case remote:
		p.metrics.RemoteReads.Add(1)
		p.metrics.RemoteReadBytes.Add(recs.Len())
		p.metrics.RemoteReadLatency.Since(start)
	}
	return recs, err
}

// readRemote serves a read below the local log start; remote says whether
// the bucket served it (the manifest may have moved on, leaving the local
// log to).
func (p *Partition) readRemote(ctx context.Context, offset int64, opts backend.ReadOptions, lo backend.Offsets) (recs backend.Records, remote bool, err error) {
	maxBytes := int64(opts.MaxBytes)
	if maxBytes <= 0 {
		maxBytes = 1 << 20
	}
	m := p.Manifest()
	for {
		i, ok := m.Find(offset)
		if !ok || m.Segments[i].BaseOffset >= lo.LogStart {
			recs, err := p.local.Read(ctx, max(offset, lo.LogStart), opts)
			return recs, false, err
		}
		seg := m.Segments[i]
		recs, found, err := p.readSegment(ctx, seg, max(offset, seg.BaseOffset), maxBytes, opts)
		if err != nil || found {
			return recs, true, err
		}
		offset = seg.LastOffset + 1 // nothing at or after offset here (compacted): next segment
	}
}

// remoteIndex returns one of the segment's index objects, from the cache or
// by one GET, checked against the CRC-32C the manifest recorded.
func (p *Partition) remoteIndex(ctx context.Context, seg manifest.Segment, suffix string) ([]byte, error) {
	key := p.key(seg.Name(suffix))
	if b, ok := p.indexes.get(key); ok {
		return b, nil
	}
	size, want := seg.IndexSize, seg.IndexCRC
	if suffix == manifest.TimeIndexSuffix {
		size, want = seg.TimeIndexSize, seg.TimeIndexCRC
	}
	valid := func(b []byte) bool { return int64(len(b)) == size && crc32.Checksum(b, castagnoli) == want }
	if b, ok := p.diskIndexes.get(key); ok && valid(b) {
		p.indexes.put(key, b)
		return b, nil
	}
	var b []byte
	if size > 0 {
		var err error
		if b, err = p.store.ReadAll(ctx, key, 0, size); err != nil {
			return nil, fmt.Errorf("tiered: %w", err)
		}
	}
	if !valid(b) {
		return nil, fmt.Errorf("%w: %s: %d bytes with CRC-32C 0x%08x, the manifest recorded %d and 0x%08x",
			backend.ErrCorruptRecord, key, len(b), crc32.Checksum(b, castagnoli), size, want)
	}
	p.indexes.put(key, b)
	p.diskIndexes.put(key, b)
	return b, nil
}

// readSegment reads whole batches of seg from the one holding target.
// found is false when no batch of seg holds target or a later offset.
func (p *Partition) readSegment(ctx context.Context, seg manifest.Segment, target, maxBytes int64, opts backend.ReadOptions) (backend.Records, bool, error) {
	idx, err := p.remoteIndex(ctx, seg, manifest.IndexSuffix)
	if err != nil {
		return nil, false, err
	}
	pos := int64(manifest.OffsetInIndex(seg, idx, target).Position)
	logKey := p.key(seg.Name(manifest.LogSuffix))
	for pos < seg.Size {
		n := min(seg.Size-pos, maxBytes+readSlack)
		data, cached := p.chunks.get(logKey, pos)
		if cached && !holdsBatchFor(data, target) {
			cached = false // the cached range ends before the batch we need
		}
		if !cached {
			var err error
			if data, err = p.store.ReadAll(ctx, logKey, pos, n); err != nil {
				return nil, false, fmt.Errorf("tiered: %w", err)
			}
			p.chunks.put(logKey, pos, data)
		}
		// Skip to the batch holding target.
		at := int64(0)
		var first record.Entry
		found := false
		for at < int64(len(data)) {
			e, err := record.HeaderAt(data, at, int64(len(data)))
			if err != nil {
				if errors.Is(err, record.ErrTornTail) || err == io.EOF {
					break // the window ends inside a batch
				}
				return nil, false, fmt.Errorf("%w: %s at %d: %v", backend.ErrCorruptRecord, logKey, pos+at, err)
			}
			if e.LastOffset >= target {
				first, found = e, true
				break
			}
			at += e.Size
		}
		if !found && at == 0 {
			// The batch at pos is larger than the window: read it whole.
			size, err := declaredSize(data, seg.Size-pos, logKey, pos)
			if err != nil {
				return nil, false, err
			}
			if data, err = p.store.ReadAll(ctx, logKey, pos, size); err != nil {
				return nil, false, fmt.Errorf("tiered: %w", err)
			}
			e, err := record.HeaderAt(data, 0, size)
			if err != nil {
				return nil, false, fmt.Errorf("%w: %s at %d: %v", backend.ErrCorruptRecord, logKey, pos, err)
			}
			if e.LastOffset < target {
				pos += size
				continue
			}
			first, found = e, true
		}
		if !found {
			pos += at // continue after the last whole batch
			continue
		}
		if opts.MaxOffset > 0 && first.BaseOffset >= opts.MaxOffset {
			return &memRecords{next: target}, true, nil
		}
		// Take whole batches within MaxBytes (at least one with
		// MinOneBatch), fetching the first again whole if it was cut.
		end, next := at, target
		for end < int64(len(data)) {
			e, err := record.HeaderAt(data, end, int64(len(data)))
			if err != nil || end+e.Size-at > maxBytes || (opts.MaxOffset > 0 && e.BaseOffset >= opts.MaxOffset) {
				break
			}
			end += e.Size
			next = e.LastOffset + 1
		}
		if end == at {
			if !opts.MinOneBatch {
				return &memRecords{next: target}, true, nil
			}
			if at+first.Size > int64(len(data)) {
				whole, err := p.store.ReadAll(ctx, logKey, pos+at, first.Size)
				if err != nil {
					return nil, false, fmt.Errorf("tiered: %w", err)
				}
				return &memRecords{data: whole, next: first.LastOffset + 1}, true, nil
			}
			end, next = at+first.Size, first.LastOffset+1
		}
		p.prefetch(seg, pos+int64(len(data)))
		return &memRecords{data: data[at:end], next: next}, true, nil
	}
	return nil, false, nil
}

// holdsBatchFor reports whether data (a range of a segment starting at a
// batch boundary) holds whole the batch with an offset >= target.
func holdsBatchFor(data []byte, target int64) bool {
	for at := int64(0); at < int64(len(data)); {
		e, err := record.HeaderAt(data, at, int64(len(data)))
		if err != nil {
			return false
		}
		if e.LastOffset >= target {
			return true
		}
		at += e.Size
	}
	return false
}

// OffsetForTimestamp searches the bucket's segments (by their largest
// timestamp, then their remote time index) and then the local log.
func (p *Partition) OffsetForTimestamp(ctx context.Context, ts int64) (int64, int64, bool, error) {
	m := p.Manifest()
	localStart := p.local.Offsets().LogStart
	if len(m.Segments) > 0 {
		i, ok := m.FindTimestamp(ts)
		for ; ok && i < len(m.Segments) && m.Segments[i].BaseOffset < localStart; i++ {
			seg := m.Segments[i]
			if seg.MaxTimestamp < ts {
				continue
			}
			off, rts, found, err := p.remoteTimestamp(ctx, seg, ts)
			if err != nil || found {
				return off, rts, found, err
			}
		}
	}
	return p.local.OffsetForTimestamp(ctx, ts)
}

// remoteTimestamp is Kafka's findOffsetByTimestamp over a remote segment.
func (p *Partition) remoteTimestamp(ctx context.Context, seg manifest.Segment, ts int64) (int64, int64, bool, error) {
	tidx, err := p.remoteIndex(ctx, seg, manifest.TimeIndexSuffix)
	if err != nil {
		return 0, 0, false, err
	}
	idx, err := p.remoteIndex(ctx, seg, manifest.IndexSuffix)
	if err != nil {
		return 0, 0, false, err
	}
	// As Kafka: the time index entry only chooses where to start scanning;
	// records are filtered by the log start offset.
	start := p.Offsets().LogStart
	pos := int64(manifest.OffsetInIndex(seg, idx, max(manifest.TimestampInIndex(seg, tidx, ts).Offset, start)).Position)
	logKey := p.key(seg.Name(manifest.LogSuffix))
	var it record.Iterator
	for pos < seg.Size {
		data, err := p.store.ReadAll(ctx, logKey, pos, min(seg.Size-pos, 1<<20))
		if err != nil {
			return 0, 0, false, fmt.Errorf("tiered: %w", err)
		}
		at := int64(0)
		for at < int64(len(data)) {
			e, err := record.HeaderAt(data, at, int64(len(data)))
			if err != nil {
				break
			}
			if at+e.Size > int64(len(data)) {
				break
			}
			if e.MaxTimestamp >= ts && e.LastOffset >= start {
				if err := it.Reset(data[at : at+e.Size]); err != nil {
					return 0, 0, false, fmt.Errorf("%w: %s: %v", backend.ErrCorruptRecord, logKey, err)
				}
				for it.Next() {
					if r := it.Record(); r.Timestamp >= ts && r.Offset >= start {
						return r.Offset, r.Timestamp, true, nil
					}
				}
			}
			at += e.Size
		}
		if at == 0 {
			// A batch larger than the window: read it whole.
			size, err := declaredSize(data, seg.Size-pos, logKey, pos)
			if err != nil {
				return 0, 0, false, err
			}
			whole, err := p.store.ReadAll(ctx, logKey, pos, size)
			if err != nil {
				return 0, 0, false, fmt.Errorf("tiered: %w", err)
			}
			if err := it.Reset(whole); err != nil {
				return 0, 0, false, fmt.Errorf("%w: %s: %v", backend.ErrCorruptRecord, logKey, err)
			}
			for it.Next() {
				if r := it.Record(); r.Timestamp >= ts && r.Offset >= start {
					return r.Offset, r.Timestamp, true, nil
				}
			}
			pos += size
			continue
		}
		pos += at
	}
	return 0, 0, false, nil
}

// declaredSize reads the size of the entry starting at data[0] from its
// length field, checking it against the bytes left in the segment.
func declaredSize(data []byte, left int64, key string, pos int64) (int64, error) {
	if len(data) < record.LogOverhead {
		return 0, fmt.Errorf("%w: %s at %d: %d bytes, not a batch header", backend.ErrCorruptRecord, key, pos, len(data))
	}
	size := int64(binary.BigEndian.Uint32(data[8:12])) + record.LogOverhead
	if size < record.BatchHeaderSize || size > left {
		return 0, fmt.Errorf("%w: %s at %d: a batch of %d bytes with %d left in the segment", backend.ErrCorruptRecord, key, pos, size, left)
	}
	return size, nil
}

// RemoteLookup shows the two steps of a lookup in the bucket, for tools.
type RemoteLookup struct {
	Segments       int    // segments in the manifest (step 1 searched them)
	SegmentIndex   int    // the one step 1 chose
	Object         string // its .log object
	IndexEntries   int    // entries of its remote offset index
	IndexSlot      int    // the entry step 2 chose (-1: none, segment start)
	IndexOffset    int64
	IndexPosition  int32
	BatchesScanned int
	BaseOffset     int64
	LastOffset     int64
	BatchPosition  int64
	BatchSize      int64
}

// LookupRemote finds the batch holding offset in the bucket and reports how.
func (p *Partition) LookupRemote(ctx context.Context, offset int64) (RemoteLookup, error) {
	var r RemoteLookup
	m := p.Manifest()
	i, ok := m.Find(offset)
	if !ok {
		return r, &backend.OffsetOutOfRangeError{Offset: offset, LogStart: m.LogStartOffset, LogEnd: p.Offsets().LocalLogStart}
	}
	seg := m.Segments[i]
	r.Segments, r.SegmentIndex, r.Object = len(m.Segments), i, p.key(seg.Name(manifest.LogSuffix))
	idx, err := p.remoteIndex(ctx, seg, manifest.IndexSuffix)
	if err != nil {
		return r, err
	}
	target := max(offset, seg.BaseOffset)
	e, slot, n := index.NewOffsetIndexView(idx, seg.BaseOffset).LookupSlot(target)
	r.IndexEntries, r.IndexSlot, r.IndexOffset, r.IndexPosition = n, slot, e.Offset, e.Position
	pos := int64(e.Position)
	for pos < seg.Size {
		data, err := p.store.ReadAll(ctx, r.Object, pos, min(seg.Size-pos, readSlack))
		if err != nil {
			return r, fmt.Errorf("tiered: %w", err)
		}
		at := int64(0)
		for at < int64(len(data)) {
			h, err := record.HeaderAt(data, at, int64(len(data)))
			if err != nil && !errors.Is(err, record.ErrTornTail) {
				return r, fmt.Errorf("%w: %s at %d: %v", backend.ErrCorruptRecord, r.Object, pos+at, err)
			}
			if err != nil {
				break
			}
			r.BatchesScanned++
			if h.LastOffset >= target {
				r.BaseOffset, r.LastOffset, r.BatchPosition, r.BatchSize = h.BaseOffset, h.LastOffset, pos+at, h.Size
				return r, nil
			}
			at += h.Size
		}
		if at == 0 {
			// A batch larger than the window: its header says enough.
			size, err := declaredSize(data, seg.Size-pos, r.Object, pos)
			if err != nil {
				return r, err
			}
			r.BatchesScanned++
			if h := record.Batch(data[:record.BatchHeaderSize]); h.LastOffset() >= target {
				r.BaseOffset, r.LastOffset, r.BatchPosition, r.BatchSize = h.BaseOffset(), h.LastOffset(), pos, size
				return r, nil
			}
			at = size
		}
		pos += at
	}
	return r, fmt.Errorf("%w: offset %d: no batch at or after it in %s", backend.ErrNotFound, offset, r.Object)
}
