package tiered

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"slices"
	"time"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/manifest"
	"github.com/tierlog/tierlog/producerstate"
	"github.com/tierlog/tierlog/record"
)

// readSlack is how far past the index position a remote read fetches
// beyond MaxBytes: enough to cover the scan to the batch holding the offset
// (at most one index interval and one batch) in the same ranged GET.
const readSlack = 64 << 10

// Read serves offsets at or above the local log start from the local log
// and older ones from the bucket: the manifest picks the segment (step 1),
// its cached remote offset index the position (step 2), then one window
// (from the chunk cache, or one ranged GET) returns whole batches from the
// one holding the offset.
func (p *Partition) Read(ctx context.Context, offset int64, opts backend.ReadOptions) (backend.Records, error) {
	if err := p.checkOpen(); err != nil {
		return nil, err
	}
	lo := p.local.Offsets()
	if o := p.Offsets(); offset < o.LogStart && offset >= lo.LogStart {
		// Below a committed log start the local log has not reached yet.
		return nil, &backend.OffsetOutOfRangeError{Offset: offset, LogStart: o.LogStart, LogEnd: o.LogEnd}
	}
	if offset >= lo.LogStart {
		recs, err := p.local.Read(ctx, offset, opts)
		var oor *backend.OffsetOutOfRangeError
		if !errors.As(err, &oor) {
			return recs, err
		}
		if offset > oor.LogEnd { // past the end: say the partition's range, not the local one
			return nil, &backend.OffsetOutOfRangeError{Offset: offset, LogStart: p.Offsets().LogStart, LogEnd: oor.LogEnd}
		}
		// Local retention raised the local log start under this read: the
		// offset is the bucket's now (never an out-of-range for a reader
		// of a partition that still holds it).
		lo = p.local.Offsets()
	}
	if o := p.Offsets(); offset < o.LogStart {
		p.metrics.RemoteReadErrors.Add(1)
		return nil, &backend.OffsetOutOfRangeError{Offset: offset, LogStart: o.LogStart, LogEnd: o.LogEnd}
	}
	if opts.Replica {
		return nil, &backend.OffsetMovedToTieredStorageError{Offset: offset, LocalLogStart: lo.LogStart}
	}
	if !p.attached.Load() {
		if err := p.attach(ctx); err != nil {
			p.metrics.RemoteReadErrors.Add(1)
			return nil, err
		}
		if o := p.Offsets(); offset < o.LogStart { // the manifest's start may be past the checkpoint's
			p.metrics.RemoteReadErrors.Add(1)
			return nil, &backend.OffsetOutOfRangeError{Offset: offset, LogStart: o.LogStart, LogEnd: o.LogEnd}
		}
	}
	release, err := p.opts.Readers.acquire(ctx)
	if err != nil {
		p.metrics.RemoteReadErrors.Add(1)
		return nil, err
	}
	defer release()
	start := time.Now()
	recs, remote, err := p.readRemote(ctx, offset, opts, lo)
	if err == nil && remote && opts.Isolation == backend.ReadCommitted {
		mr := recs.(*memRecords)
		mr.aborted, err = p.abortedFor(ctx, offset, mr.next)
	}
	switch {
	case err != nil:
		err = storageError(ctx, err)
		p.metrics.RemoteReadErrors.Add(1)
	case remote:
		p.metrics.RemoteReads.Add(1)
		p.metrics.RemoteReadBytes.Add(recs.Len())
		p.metrics.RemoteReadLatency.Since(start)
	}
	return recs, err
}

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
			// Nothing in the bucket at or after offset before the local
			// log: the local log serves from its start, unless offset is
			// below the partition's log start now (a DeleteRecordsBefore
			// since the caller's check), which is out of range, not a
			// read from a later offset.
			if o := p.Offsets(); offset < o.LogStart {
				return nil, false, &backend.OffsetOutOfRangeError{Offset: offset, LogStart: o.LogStart, LogEnd: o.LogEnd}
			}
			recs, err := p.local.Read(ctx, max(offset, lo.LogStart), opts)
			return recs, false, err
		}
		seg := m.Segments[i]
		recs, found, err := p.readSegment(ctx, seg, max(offset, seg.BaseOffset), maxBytes, opts)
		if err != nil || found {
			return recs, true, err
		}
		offset = seg.LastOffset + 1 // nothing at or after offset here: next segment
	}
}

// abortedFor collects the aborted transactions a read_committed read from
// fetch up to upper overlaps: from the bucket's segments (their .txnindex,
// fetched once and cached like the offset indexes) from the one holding
// fetch on, then the local log's, until an index shows no later one can
// add any (Kafka's collectAbortedTransactions over both tiers).
func (p *Partition) abortedFor(ctx context.Context, fetch, upper int64) ([]backend.AbortedTxn, error) {
	var found []producerstate.AbortedTxn
	m := p.Manifest()
	localStart := p.local.Offsets().LogStart
	i, ok := m.Find(fetch)
	for ; ok && i < len(m.Segments) && m.Segments[i].BaseOffset < localStart; i++ {
		seg := m.Segments[i]
		if seg.TxnIndexSize == 0 {
			continue
		}
		data, err := p.remoteIndex(ctx, seg, manifest.TxnIndexSuffix)
		if err != nil {
			return nil, err
		}
		var complete bool
		if found, complete, err = producerstate.CollectAbortedTxns(found, data, fetch, upper); err != nil {
			return nil, fmt.Errorf("%w: %s: %w", backend.ErrCorruptRecord, p.layout().Segment(seg, manifest.TxnIndexSuffix), err)
		}
		if complete {
			return toAborted(found, nil), nil
		}
	}
	more, _, err := p.local.CollectAborted(max(fetch, localStart), upper)
	if err != nil {
		return nil, err
	}
	return toAborted(found, more), nil
}

// toAborted merges the bucket's and the local log's aborted transactions,
// sorted by first offset.
func toAborted(remote []producerstate.AbortedTxn, local []backend.AbortedTxn) []backend.AbortedTxn {
	out := local
	for _, a := range remote {
		out = append(out, backend.AbortedTxn{ProducerID: a.ProducerID, FirstOffset: a.FirstOffset})
	}
	slices.SortFunc(out, func(a, b backend.AbortedTxn) int { return cmp.Compare(a.FirstOffset, b.FirstOffset) })
	return slices.Compact(out)
}

// remoteIndex returns one of the segment's small objects (an index, its
// .txnindex), from the cache or by one GET, checked against the size and
// CRC-32C the manifest recorded.
func (p *Partition) remoteIndex(ctx context.Context, seg manifest.Segment, suffix string) ([]byte, error) {
	key := p.layout().Segment(seg, suffix)
	if b, ok := p.caches.indexes.get(key); ok {
		return b, nil
	}
	size, want := seg.Object(suffix)
	valid := func(b []byte) bool { return int64(len(b)) == size && crc32.Checksum(b, castagnoli) == want }
	if b, ok := p.caches.disk.get(key); ok && valid(b) {
		p.caches.indexes.put(key, b)
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
	p.caches.indexes.put(key, b)
	p.caches.disk.put(key, b)
	return b, nil
}

// readSegment reads whole batches of seg from the one holding target.
// found is false when no batch of seg holds target or a later offset.
func (p *Partition) readSegment(ctx context.Context, seg manifest.Segment, target, maxBytes int64, opts backend.ReadOptions) (backend.Records, bool, error) {
	l, found, err := p.locate(ctx, seg, target, maxBytes+readSlack)
	if err != nil || !found {
		return nil, false, err
	}
	bound := p.readBound(opts.Isolation)
	if l.entry.BaseOffset >= bound {
		return &memRecords{next: target}, true, nil
	}
	// Take whole batches within MaxBytes (at least one with MinOneBatch),
	// and check the one after them.
	end, next, prevLast := l.at, target, l.entry.BaseOffset-1
	key := p.layout().Segment(seg, manifest.LogSuffix)
	checked := false // the batch at end was checked
	for end < int64(len(l.data)) {
		e, err := record.HeaderAt(l.data, end, int64(len(l.data)))
		if err != nil {
			break // the window ends inside it: checkNext reads its header
		}
		if err := checkOrder(e, prevLast, seg, key, l.pos+end); err != nil {
			return nil, false, err
		}
		if end+e.Size-l.at > maxBytes || e.LastOffset >= bound {
			checked = true
			break
		}
		prevLast = e.LastOffset
		end += e.Size
		next = e.LastOffset + 1
	}
	data := l.data[min(end, int64(len(l.data))):]
	if end == l.at {
		if !opts.MinOneBatch {
			return &memRecords{next: target}, true, nil
		}
		if !l.whole() {
			whole, _, err := p.window(ctx, key, l.pos+l.at, l.entry.Size, l.entry.Size)
			if err != nil {
				return nil, false, err
			}
			if err := p.checkNext(ctx, seg, key, l.pos+l.at+l.entry.Size, whole[l.entry.Size:], l.entry.LastOffset); err != nil {
				return nil, false, err
			}
			return &memRecords{data: whole[:l.entry.Size], next: l.entry.LastOffset + 1}, true, nil
		}
		end, next, checked = l.at+l.entry.Size, l.entry.LastOffset+1, false
		data = l.data[end:]
	}
	if !checked {
		if err := p.checkNext(ctx, seg, key, l.pos+end, data, next-1); err != nil {
			return nil, false, err
		}
	}
	p.prefetch(seg, l.pos+int64(len(l.data)))
	return &memRecords{data: l.data[l.at:end], next: next}, true, nil
}

// readBound is the first offset a read with isolation may not return.
func (p *Partition) readBound(isolation backend.Isolation) int64 {
	o := p.local.Offsets()
	switch isolation {
	case backend.ReadHighWatermark:
		return o.HighWatermark
	case backend.ReadCommitted:
		return o.LastStableOffset
	}
	return o.LogEnd
}

// OffsetForTimestamp searches the bucket's segments (by their largest
// timestamp, then their remote time index) and then the local log.
func (p *Partition) OffsetForTimestamp(ctx context.Context, ts int64) (int64, int64, bool, error) {
	if err := p.checkOpen(); err != nil {
		return 0, 0, false, err
	}
	if _, remote := p.local.RemoteLogStart(); remote {
		if err := p.attach(ctx); err != nil {
			return 0, 0, false, err
		}
	}
	m := p.Manifest()
	localStart := p.local.Offsets().LogStart
	switch ts {
	case backend.EarliestTimestamp:
		return p.Offsets().LogStart, -1, true, nil
	case backend.LatestTieredTimestamp:
		if n := len(m.Segments); n > 0 {
			return m.Segments[n-1].LastOffset, -1, true, nil
		}
		return -1, -1, false, nil
	case backend.MaxTimestamp:
		return p.maxTimestampOffset(ctx, m, localStart)
	}
	if ts < 0 {
		return p.local.OffsetForTimestamp(ctx, ts)
	}
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

// maxTimestampOffset answers MAX_TIMESTAMP over both tiers: the first
// record carrying the partition's largest timestamp.
func (p *Partition) maxTimestampOffset(ctx context.Context, m *manifest.Manifest, localStart int64) (int64, int64, bool, error) {
	best := -1
	for i, s := range m.Segments {
		if s.BaseOffset < localStart && s.LastOffset >= m.LogStartOffset && (best < 0 || s.MaxTimestamp > m.Segments[best].MaxTimestamp) {
			best = i
		}
	}
	lOff, lTs, lFound, err := p.local.OffsetForTimestamp(ctx, backend.MaxTimestamp)
	if err != nil {
		return 0, 0, false, err
	}
	if best < 0 || (lFound && lTs > m.Segments[best].MaxTimestamp) {
		return lOff, lTs, lFound, nil
	}
	return p.remoteTimestamp(ctx, m.Segments[best], m.Segments[best].MaxTimestamp)
}

// remoteTimestamp is Kafka's findOffsetByTimestamp over a remote segment:
// the time index entry only chooses where to start scanning; batches are
// then read window by window (through locate) and records filtered by the
// log start offset.
func (p *Partition) remoteTimestamp(ctx context.Context, seg manifest.Segment, ts int64) (int64, int64, bool, error) {
	tidx, err := p.remoteIndex(ctx, seg, manifest.TimeIndexSuffix)
	if err != nil {
		return 0, 0, false, err
	}
	start := p.Offsets().LogStart
	target := max(manifest.TimestampInIndex(seg, tidx, ts).Offset, start, seg.BaseOffset)
	var it record.Iterator
	key := p.layout().Segment(seg, manifest.LogSuffix)
	for target <= seg.LastOffset {
		l, found, err := p.locate(ctx, seg, target, 1<<20)
		if err != nil || !found {
			return 0, 0, false, err
		}
		data, pos := l.data, l.pos // pos: data's position in the object
		if !l.whole() {
			if data, _, err = p.window(ctx, key, l.pos+l.at, l.entry.Size, l.entry.Size); err != nil {
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
func declaredSize(data []byte, left int64, key string, pos int64) (int64, error) {
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
	BatchesScanned int
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
	m := p.Manifest()
	i, ok := m.Find(offset)
	if !ok {
		return r, &backend.OffsetOutOfRangeError{Offset: offset, LogStart: m.LogStartOffset, LogEnd: p.Offsets().LocalLogStart}
	}
	seg := m.Segments[i]
	r.Segments, r.SegmentIndex, r.Object = len(m.Segments), i, p.layout().Segment(seg, manifest.LogSuffix)
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
