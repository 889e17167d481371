package local

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/record"
)

// DefaultMaxBytes is the read size when ReadOptions.MaxBytes is 0.
const DefaultMaxBytes = 1 << 20

// Read returns whole batches from the batch holding offset; see
// backend.Partition. It reads from one segment at a time, as Kafka does: a
// read that reaches a segment's end returns what it has, and the next read
// continues in the next segment.
func (l *Log) Read(ctx context.Context, offset int64, opts backend.ReadOptions) (backend.Records, error) {
	start := time.Now()
	recs, err := l.read(ctx, offset, opts)
	m := l.metrics
	if err != nil {
		m.ReadErrors.Add(1)
		return recs, err
	}
	m.Reads.Add(1)
	m.ReadBytes.Add(recs.Len())
	m.ReadLatency.Since(start)
	return recs, nil
}

func (l *Log) read(ctx context.Context, offset int64, opts backend.ReadOptions) (backend.Records, error) {
	if err := checkCtx(ctx); err != nil {
		return nil, err
	}
	if l.closed.Load() {
		return nil, l.closedErr()
	}
	maxBytes := int64(opts.MaxBytes)
	if maxBytes <= 0 {
		maxBytes = DefaultMaxBytes
	}
	for {
		ls, leo := l.logStart.Load(), l.leo.Load()
		if offset < ls || offset > leo {
			return nil, &backend.OffsetOutOfRangeError{Offset: offset, LogStart: ls, LogEnd: leo}
		}
		bound := l.readBound(opts.Isolation, leo)
		if offset >= bound {
			return emptyRecords{next: offset}, nil
		}
		seg, segs, i, err := l.acquireSegmentFor(offset)
		if err != nil {
			return nil, err
		}
		next := int64(-1)
		if i+1 < len(segs) {
			next = segs[i+1].base
		}
		recs, err := l.readSegment(seg, next, offset, maxBytes, bound, opts)
		fr, owns := recs.(*fileRecords)
		if !owns {
			seg.release()
		}
		if err == nil && owns && opts.Isolation == backend.ReadCommitted {
			if fr.aborted, _, err = l.abortedFor(segs, i, offset, fr.next); err != nil {
				fr.Close()
				recs = nil
			}
		}
		if errors.Is(err, errLeftLog) && l.tookOut(seg) {
			// The cleaner replaced the segment (or a truncation or
			// retention took it) between the list this read took and
			// its first look at the segment's indexes: the log holds
			// what replaced it now.
			if err := checkCtx(ctx); err != nil {
				return nil, err
			}
			continue
		}
		if err != nil || recs != nil {
			return recs, err
		}
		// Nothing at or after offset in this segment (compaction removed
		// its tail): continue from the next segment's base.
		if i+1 >= len(segs) {
			if l.segments()[len(l.segments())-1] != segs[len(segs)-1] {
				continue // the segment list changed under us: retry
			}
			return emptyRecords{next: offset}, nil
		}
		offset = max(offset, segs[i+1].base)
	}
}

// tookOut reports whether the log took seg out of its segment list, once
// the writer taking it out is done: every change that takes segments out
// (a cleaner's replacement, a truncation, retention) marks them left and
// publishes the list without them under l.mu. False when seg is still
// the log's (that change failed part-way).
func (l *Log) tookOut(seg *segFile) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	segs := l.segments()
	i := segmentWithBase(segs, seg.base)
	return i < 0 || segs[i] != seg
}

// readBound is the first offset a read with isolation may not return:
// the log end, the high watermark or the last stable offset.
func (l *Log) readBound(isolation backend.Isolation, leo int64) int64 {
	switch isolation {
	case backend.ReadHighWatermark:
		return min(l.hw.Load(), leo)
	case backend.ReadCommitted:
		return min(l.lso.Load(), leo)
	}
	return leo
}

// readSegment reads from one segment, which the caller has acquired; next
// is the base of the segment after it (-1 for the last), bound the first
// offset the read may not return (it stops before the batch holding it, as
// Kafka's does). It returns nil Records (and no error) when the segment
// holds nothing at or after offset. A *fileRecords result takes over the
// caller's reference; for any other result the caller releases it.
func (l *Log) readSegment(seg *segFile, next, offset, maxBytes, bound int64, opts backend.ReadOptions) (backend.Records, error) {
	var w windowRef // the read's walks share what they read
	defer w.release()
	limit := seg.size.Load()
	if bound < l.leo.Load() {
		p, ok, err := seg.translateOffsetIn(&w, bound, limit, true)
		if err != nil {
			return nil, err
		}
		if ok {
			limit = p.pos
		}
	}
	p, ok, err := seg.translateOffsetIn(&w, offset, limit, true)
	if err != nil || !ok {
		return nil, err
	}
	// Find where the read ends: whole batches within maxBytes (at least
	// the first with MinOneBatch), the batch after them checked too. The
	// lookup's walk read and checked the first batch: the walk for the
	// end starts after it.
	readEnd := min(limit, p.pos+maxBytes)
	if opts.MinOneBatch {
		readEnd = max(readEnd, p.pos+p.size)
	}
	first := p.pos + p.size
	if first > readEnd {
		return emptyRecords{next: offset}, nil
	}
	end, last := first, p.lastOffset
	// The look at the batch after a read's last catches a base offset
	// moved onto the next batch's offsets. A read of one batch the offset
	// index vouches for (alone between two entries, ending at its own:
	// vouches) needs none: its base did not move.
	if first < readEnd || !p.vouched {
		e, l, err := seg.batchEnd(&w, first, readEnd, p.lastOffset)
		if err != nil {
			return nil, err
		}
		if l >= 0 { // else no whole batch after the first
			end, last = e, l
		}
	}
	if next >= 0 && last >= next {
		return nil, fmt.Errorf("%w: %s: the batch ending at position %d holds offset %d, at or past the next segment's base %d",
			backend.ErrCorruptRecord, seg.logPath, end, last, next)
	}
	f, err := seg.file()
	if err != nil {
		return nil, err
	}
	return &fileRecords{seg: seg, f: f, pos: p.pos, n: end - p.pos, next: last + 1}, nil
}

// LookupResult shows the two steps of an offset lookup, for tools.
type LookupResult struct {
	Segments      int    // segments searched by base offset
	SegmentIndex  int    // which one step 1 chose
	SegmentPath   string // its .log
	IndexEntries  int    // entries in its offset index
	IndexSlot     int    // the entry step 2 chose (-1: none, start of the segment)
	IndexOffset   int64
	IndexPosition int32
	// ScanPosition is where the header scan began: the entry's position,
	// or the next entry's when the two lie more than a header window (8
	// KiB) apart and the batch there, alone up to the entry after, begins
	// at or before the offset (see segFile.translateOffsetIn).
	ScanPosition   int64
	BatchesScanned int   // headers read, the next entry's tried first included
	BytesScanned   int64 // from ScanPosition to the end of the batch found
	BatchPosition  int64
	BatchSize      int64
	BaseOffset     int64
	LastOffset     int64
	MaxTimestamp   int64
}

// Lookup finds the batch holding offset and reports how: step 1 picks the
// segment by binary search over base offsets, step 2 the offset index
// entry, then a forward scan of batch headers finds the batch. A segment
// that leaves the log under the lookup (the cleaner replaced it) is looked
// up again in what replaced it, as a read is.
func (l *Log) Lookup(offset int64) (LookupResult, error) {
	for {
		r, seg, err := l.lookup(offset)
		if errors.Is(err, errLeftLog) && l.tookOut(seg) {
			continue
		}
		return r, err
	}
}

// lookup is one try of Lookup, on the segment list it takes; seg is the
// segment it looked in last.
func (l *Log) lookup(offset int64) (r LookupResult, seg *segFile, err error) {
	ls, leo := l.logStart.Load(), l.leo.Load()
	if offset < ls || offset >= leo {
		return r, nil, &backend.OffsetOutOfRangeError{Offset: offset, LogStart: ls, LogEnd: leo}
	}
	seg, segs, i, err := l.acquireSegmentFor(offset)
	if err != nil {
		return r, nil, err
	}
	defer func() { seg.release() }()
	r.Segments = len(segs)
	for {
		p, ok, err := seg.translateOffsetIn(nil, offset, seg.size.Load(), true) // a read's lookup
		if err != nil {
			return r, seg, err
		}
		r.SegmentIndex, r.SegmentPath = i, seg.logPath
		r.IndexEntries, r.IndexSlot, r.IndexOffset, r.IndexPosition = p.indexEntries, p.indexSlot, p.indexEntry.Offset, p.indexEntry.Position
		r.ScanPosition, r.BatchesScanned, r.BytesScanned = p.scanStart, p.scanned, p.scannedBytes
		if ok {
			r.BatchPosition, r.BatchSize, r.BaseOffset, r.LastOffset, r.MaxTimestamp = p.pos, p.size, p.baseOffset, p.lastOffset, p.maxTs
			return r, seg, nil
		}
		if i+1 >= len(segs) || !segs[i+1].acquire() {
			return r, seg, fmt.Errorf("%w: offset %d: no batch at or after it", backend.ErrNotFound, offset)
		}
		seg.release()
		i++
		seg = segs[i]
		offset = seg.base
	}
}

// OffsetForTimestamp returns the first offset whose record timestamp is >=
// ts; see backend.Partition. The segment is the first whose largest
// timestamp is at or past ts, as in Kafka, found by binary search
// (timestamps.go); then the time index narrows the scan.
func (l *Log) OffsetForTimestamp(ctx context.Context, ts int64) (int64, int64, bool, error) {
	if err := checkCtx(ctx); err != nil {
		return 0, 0, false, err
	}
	if l.closed.Load() {
		return 0, 0, false, l.closedErr()
	}
	o := l.Offsets()
	switch ts {
	case backend.LatestTimestamp:
		return o.HighWatermark, -1, true, nil
	case backend.EarliestTimestamp, backend.EarliestLocalTimestamp:
		return o.LogStart, -1, true, nil
	case backend.LatestTieredTimestamp:
		return -1, -1, false, nil // nothing of a local log is tiered
	case backend.MaxTimestamp:
		return l.maxTimestampOffset(ctx)
	}
	if ts < 0 {
		return 0, 0, false, fmt.Errorf("%w: timestamp %d", backend.ErrInvalidRecord, ts)
	}
search:
	for {
		list := l.segs.Load()
		first, err := l.firstSegmentForTimestamp(list, ts)
		if errors.Is(err, errLeftLog) && l.listChanged(list) {
			if err := checkCtx(ctx); err != nil {
				return 0, 0, false, err
			}
			continue
		}
		if err != nil {
			return 0, 0, false, err
		}
		for _, seg := range (*list)[first:] {
			if !seg.acquire() {
				// It left the log after the search took the list:
				// skipping it could pass over the first match, which
				// its replacement holds. Search the new list.
				if l.closed.Load() {
					return 0, 0, false, l.closedErr()
				}
				if l.listChanged(list) {
					continue search
				}
				continue
			}
			off, rts, found, err := l.searchTimestamp(seg, ts)
			seg.release()
			if errors.Is(err, errLeftLog) && l.tookOut(seg) {
				// As in read: the segment left the log under the
				// search, and the log holds what replaced it.
				if err := checkCtx(ctx); err != nil {
					return 0, 0, false, err
				}
				continue search
			}
			if err != nil || found {
				return off, rts, found, err
			}
		}
		return 0, 0, false, nil
	}
}

// maxTimestampOffset answers ListOffsets' MAX_TIMESTAMP: the first record
// with the log's largest timestamp, found in the first segment whose
// largest timestamp it is.
// A segment that left the log under it (see read) makes it look again.
func (l *Log) maxTimestampOffset(ctx context.Context) (int64, int64, bool, error) {
	for {
		list := l.segs.Load()
		off, rts, found, err := l.maxTimestampIn(*list)
		if errors.Is(err, errLeftLog) && l.listChanged(list) {
			if err := checkCtx(ctx); err != nil {
				return 0, 0, false, err
			}
			continue
		}
		return off, rts, found, err
	}
}

// listChanged reports whether the log published a segment list other
// than list, once the writer changing it (under l.mu) is done.
func (l *Log) listChanged(list *[]*segFile) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.segs.Load() != list
}

// maxTimestampIn is maxTimestampOffset over the segments segs.
func (l *Log) maxTimestampIn(segs []*segFile) (int64, int64, bool, error) {
	var best *segFile
	bestTs := int64(-1)
	for _, seg := range segs {
		if !seg.acquire() {
			if l.closed.Load() {
				return 0, 0, false, l.closedErr()
			}
			// It left the log: the largest timestamp may be in what
			// replaced it.
			return 0, 0, false, fmt.Errorf("%w: local: %s %w", backend.ErrStorage, seg.logPath, errLeftLog)
		}
		ts, _, err := seg.largestTimestamp()
		if err == nil && ts > bestTs {
			if best != nil {
				best.release()
			}
			best, bestTs = seg, ts
			continue
		}
		seg.release()
		if err != nil {
			if best != nil {
				best.release()
			}
			return 0, 0, false, err
		}
	}
	if best == nil {
		return 0, 0, false, nil
	}
	defer best.release()
	return l.searchTimestamp(best, bestTs)
}

// searchTimestamp is Kafka's findOffsetByTimestamp for one segment.
func (l *Log) searchTimestamp(seg *segFile, ts int64) (int64, int64, bool, error) {
	largest, _, err := seg.largestTimestamp()
	if err != nil {
		return 0, 0, false, err
	}
	if largest < ts {
		return 0, 0, false, nil
	}
	_, ti, err := seg.indexes()
	if err != nil {
		return 0, 0, false, err
	}
	logStart := l.logStart.Load()
	te := ti.Lookup(ts)
	// Batches before the one holding the time index's offset are older
	// than ts; the lookup checks that batch against those before it.
	p, ok, err := seg.translateOffset(max(te.Offset, logStart, seg.base), seg.size.Load())
	if err != nil || !ok {
		return 0, 0, false, err
	}
	f, err := seg.file()
	if err != nil {
		return 0, 0, false, err
	}
	sc := record.NewScanner(f, p.pos, seg.size.Load(), record.ScanOptions{Ordered: true})
	var it record.Iterator
	for sc.Next() {
		e := sc.Entry()
		if e.MaxTimestamp < ts || e.LastOffset < logStart {
			continue
		}
		off, rts, found, err := it.FirstAtOrAfter(e.Data, ts, logStart)
		if err != nil {
			return 0, 0, false, fmt.Errorf("%w: %s position %d: %w", backend.ErrCorruptRecord, seg.logPath, e.Position, err)
		}
		if found {
			// The answer stands only if the next batch does not overlap
			// the one that holds it.
			if sc.Next(); sc.Err() != nil {
				break
			}
			return off, rts, true, nil
		}
	}
	if err := sc.Err(); err != nil {
		return 0, 0, false, fmt.Errorf("%w: %s: %w", backend.ErrCorruptRecord, seg.logPath, err)
	}
	return 0, 0, false, nil
}

// ReadAll copies the records of a Read to w and closes them; a helper for
// tools and tests.
func ReadAll(r backend.Records, w io.Writer) (int64, error) {
	defer r.Close()
	return r.WriteTo(w)
}
