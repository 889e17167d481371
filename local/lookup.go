package local

import (
	"fmt"
	"math"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/index"
	"github.com/tierlog/tierlog/record"
)

// This file is step 2 of the two-step lookup, inside one segment: the
// offset index entry for an offset, then a forward scan of batch headers.

// position is a batch found by a lookup.
type position struct {
	pos        int64
	size       int64
	baseOffset int64
	lastOffset int64
	maxTs      int64
	// vouched: the batch is all there is between its offset index entry
	// and the next (it starts at the entry's position, ends at the next
	// entry's, and its last offset is the entry's), so the index, written
	// apart from it, vouches for its base offset (see vouches).
	vouched bool
	// how the lookup went, for tools
	indexEntry   index.OffsetEntry
	indexSlot    int
	indexEntries int
	scanStart    int64 // where the header scan began
	scanned      int
	scannedBytes int64
}

// vouches reports whether entry e (slot of the index, followed by an entry
// at position after; -1: none) vouches for the base offset of the batch h:
// h is the one batch between e and the next entry, and its last offset is
// e's. An entry names the last offset of the append at its position, so a
// batch alone there ends at it; its base offset lies outside its CRC, but
// its last offset is the base plus a delta inside it, so a moved base
// would end elsewhere. A batch among others (an append of several, or
// appends without an entry after it) proves nothing by ending there: an
// earlier one's base may have moved onto the last one's offsets.
//
// A v2 batch must also hold a record for every offset of its span: Kafka's
// cleaner (before 3.8) keeps a thinned batch's last offset but indexes the
// last record it kept, so an entry may name an offset inside a batch that
// lost its tail, and the base moved down by as many would end there.
func vouches(e index.OffsetEntry, slot int, after int64, h *record.Entry) bool {
	if slot < 0 || h.Position != int64(e.Position) || h.LastOffset != e.Offset || h.Position+h.Size != after {
		return false
	}
	if h.Magic < 2 {
		return true
	}
	b := record.Batch(h.Data)
	return len(b) >= record.BatchHeaderSize && int64(b.NumRecords()) == h.LastOffset-h.BaseOffset+1
}

// translateOffset finds the first batch whose last offset is >= target,
// searching from the offset index's entry for target and scanning batch
// headers forward, never past limit. ok is false when no such batch lies
// before limit. Offsets must rise strictly from batch to batch, and the
// batches from the index entry must agree with it: one of them ends at
// exactly the entry's offset, the last offset of the append that began
// there (Kafka's rule, so none of them ends past it), or holds it, a batch
// Kafka's cleaner thinned (record.Entry.Holds). Damage is an error.
//
// It walks from the entry found, whatever lies between: what truncates,
// rewrites or replays the log, and a timestamp search, use it.
func (s *segFile) translateOffset(target, limit int64) (p position, ok bool, err error) {
	return s.translateOffsetIn(nil, target, limit, false)
}

// translateOffsetIn is translateOffset reading headers through w (see
// walkHeadersIn); with probe, it is a read's lookup, which may skip the
// batches between the entry found and the next.
//
// The entry found for target names the last offset of the append at its
// position, so target usually lies past that append, in the one the next
// entry names (after an append of more than index.interval.bytes, the
// next append has an entry). When the two entries lie more than a header
// window apart (big batches, each header a cache miss or a system call of
// its own), a probe first tries the next entry's batch: if it begins at
// or before target and the index vouches for it (vouches; its offsets
// then rise past the entry found's too, walk's prevLast check), it is the
// batch: one header read, not two. Otherwise (an append of several
// batches, appends without an entry between, a legacy entry, a damaged
// base) the scan starts at the entry found. The batch a probe finds is
// right to read even when one it skipped is damaged (a read of that one
// finds the damage), but what cuts the log there must not skip it.
func (s *segFile) translateOffsetIn(w *windowRef, target, limit int64, probe bool) (p position, ok bool, err error) {
	oi, err := s.offsetIndex()
	if err != nil {
		return p, false, err
	}
	s.reads.Add(1)
	e, slot, n := oi.LookupSlot(target)
	p.indexEntry, p.indexSlot, p.indexEntries = e, slot, n
	if probe && slot >= 0 && e.Offset < target && slot+2 < n {
		next := oi.Entry(slot + 1)
		if start := int64(next.Position); start < limit && start-int64(e.Position) > headerWindowSize {
			ok, tried, err := s.scanFrom(w, oi, slot+1, next, e.Offset, target, limit, true, &p)
			if err != nil || tried {
				return p, ok && err == nil, err
			}
		}
	}
	prevLast := s.base - 1
	if slot > 0 {
		prevLast = oi.Entry(slot - 1).Offset
	}
	ok, _, err = s.scanFrom(w, oi, slot, e, prevLast, target, limit, false, &p)
	return p, ok && err == nil, err
}

// cut is where a truncation to an offset cuts a segment (truncationCut).
type cut struct {
	at    position // the first batch that goes
	found bool     // false: no batch of the segment goes
	end   int64    // the new log end: at's base when it begins below the offset
}

// truncationCut finds where a truncation to offset cuts s: the first batch
// whose last offset is >= offset.
//
// The batch before the cut is checked: it must end where the cut begins,
// below the new log end. The walk that found the cut began at its index
// entry, which may lie past a damaged batch it never saw, a base moved
// onto the next batch's offsets (an index by Kafka's cleaner, naming an
// offset inside a thinned batch, lets a lookup start at the moved batch
// itself); a cut there would keep that batch, holding offsets past the new
// log end. A compacted gap before the cut (no batch before it ends at or
// past end-1) is no overlap.
func (s *segFile) truncationCut(offset int64) (cut, error) {
	p, ok, err := s.translateOffset(offset, s.size.Load())
	if err != nil || !ok {
		return cut{end: offset}, err
	}
	c := cut{at: p, found: true, end: offset}
	if p.baseOffset >= 0 && p.baseOffset < offset {
		c.end = p.baseOffset
	}
	if p.pos == 0 || c.end <= s.base {
		return c, nil
	}
	q, before, err := s.translateOffset(c.end-1, p.pos)
	if err != nil {
		return cut{}, err
	}
	if before && (q.pos+q.size != p.pos || q.lastOffset >= c.end) {
		return cut{}, fmt.Errorf("%w: %s: the batch at position %d holds offsets %d..%d, at or past %d, where a truncation to offset %d would end the log (cutting at position %d)",
			backend.ErrCorruptRecord, s.logPath, q.pos, q.baseOffset, q.lastOffset, c.end, offset, p.pos)
	}
	return c, nil
}

// scanFrom walks the batch headers from the position of entry e (slot
// of oi; -1: none, the segment's start) for the first batch whose last
// offset is >= target, filling p. prevLast is the last offset before
// e's position. A probe gives up (tried false) unless the first batch
// there begins at or before target and e vouches for it.
func (s *segFile) scanFrom(w *windowRef, oi *index.OffsetIndex, slot int, e index.OffsetEntry, prevLast, target, limit int64, probe bool, p *position) (ok, tried bool, err error) {
	start := int64(e.Position)
	p.scanStart = start
	after := int64(-1) // the next entry's position
	if next := slot + 1; next < p.indexEntries {
		after = int64(oi.Entry(next).Position)
	}
	if w != nil {
		// The batch holding target starts at or before the next entry's.
		if after >= 0 {
			w.expect(after - start + record.BatchHeaderSize)
		} else {
			w.expect(0)
		}
	}
	var disagree error  // the batches from the entry do not agree with it
	reached := slot < 0 // a batch ended at the entry's offset (or holds it: record.Entry.Holds)
	tried = !probe
	err = s.walkHeadersIn(w, start, limit, prevLast, func(h *record.Entry) bool {
		p.scanned++
		if !tried {
			if h.BaseOffset < 0 || h.BaseOffset > target || !vouches(e, slot, after, h) {
				return false
			}
			tried = true
		}
		p.scannedBytes = h.Position + h.Size - start
		if !reached && h.LastOffset > e.Offset && !h.Holds(e.Offset) {
			disagree = fmt.Errorf("%w: %s position %d holds offsets up to %d, but %s says an append of offsets up to %d starts at position %d",
				backend.ErrCorruptRecord, s.logPath, h.Position, h.LastOffset, s.path(IndexSuffix), e.Offset, e.Position)
			return false
		}
		reached = reached || h.Holds(e.Offset)
		if h.LastOffset >= target {
			p.pos, p.size, p.baseOffset, p.lastOffset, p.maxTs = h.Position, h.Size, h.BaseOffset, h.LastOffset, h.MaxTimestamp
			p.vouched = vouches(e, slot, after, h)
			ok = true
			return false
		}
		return true
	})
	if err == nil {
		err = disagree
	}
	if err != nil {
		return false, true, err
	}
	return ok, tried, nil
}

// batchEnd returns the end position and last offset of the last whole batch
// that starts at or after from and ends at or before limit (from and -1 when
// none fits); prevLast is the last offset before from. Every batch up to
// there is walked, and the one after it checked, by walkHeaders, so a
// read's batches are known to rise past what comes before and after them.
// Only the writer's own last segment, whose batches it checked as it
// appended them, skips ahead to the last index entry before limit: each
// header is a read there, and the bytes are the newest.
func (s *segFile) batchEnd(w *windowRef, from, limit, prevLast int64) (end, lastOffset int64, err error) {
	oi, err := s.offsetIndex()
	if err != nil {
		return from, -1, err
	}
	start := from
	s.mu.Lock()
	writers := !s.sealed && !s.readOnly
	s.mu.Unlock()
	if writers {
		if pe, ok := oi.LookupPosition(int32(min(limit, math.MaxInt32))); ok && int64(pe.Position) > start {
			start = int64(pe.Position)
			prevLast = -1 // the batches skipped are not read
		}
	}
	end, lastOffset = start, -1
	// The walk goes on to the segment's end so that walkHeaders checks the
	// first batch past limit too; it stops there.
	err = s.walkHeadersIn(w, start, s.size.Load(), prevLast, func(h *record.Entry) bool {
		if h.Position+h.Size > limit {
			return false
		}
		end, lastOffset = h.Position+h.Size, h.LastOffset
		return true
	})
	if err == nil && lastOffset < 0 && start > from {
		// The indexed batch at start does not fit: the read ends where it
		// begins, and its last offset is the one before that batch's base
		// (a legacy wrapper has none: walk the batches before it).
		legacy := false
		err = s.walkHeadersIn(w, start, s.size.Load(), -1, func(h *record.Entry) bool {
			lastOffset, legacy = h.BaseOffset-1, h.BaseOffset < 0
			return false
		})
		if err == nil && legacy {
			end = from
			err = s.walkHeadersIn(w, from, start, -1, func(h *record.Entry) bool {
				end, lastOffset = h.Position+h.Size, h.LastOffset
				return true
			})
		}
	}
	if err != nil {
		return from, -1, err
	}
	return end, lastOffset, nil
}

// checkEnd verifies a sealed segment's tail: whole batches from its last
// index entry to the end of the file, and a last offset below the next
// segment's base (equal to the one before it, for a topic that is never
// compacted, where offsets have no gaps). A segment cut short would
// otherwise read as a silent gap.
func (s *segFile) checkEnd(oi *index.OffsetIndex) error {
	s.mu.Lock()
	next, sealed := s.next, s.sealed
	s.mu.Unlock()
	if !sealed || next < 0 {
		return nil
	}
	e, slot, _ := oi.LookupSlot(math.MaxInt64)
	prevLast := s.base - 1
	if slot > 0 {
		prevLast = oi.Entry(slot - 1).Offset
	}
	last, lastPos := int64(-1), int64(-1)
	size := s.size.Load()
	if err := s.walkHeaders(int64(e.Position), size, prevLast, func(h *record.Entry) bool {
		last, lastPos = h.LastOffset, h.Position
		return true
	}); err != nil {
		return err
	}
	switch {
	case size == 0:
		return nil
	case last < 0:
		return fmt.Errorf("%w: %s: no whole batch after position %d (%d bytes)", backend.ErrCorruptRecord, s.logPath, e.Position, size)
	case last >= next:
		return fmt.Errorf("%w: %s position %d: the last batch ends at offset %d, at or past the next segment's base %d",
			backend.ErrCorruptRecord, s.logPath, lastPos, last, next)
	case last+1 < next && !s.opts.gapsAllowed():
		return fmt.Errorf("%w: %s position %d: the last batch ends at offset %d but the next segment starts at %d: offsets %d..%d are missing (the file was cut short?) in a topic that is not compacted",
			backend.ErrCorruptRecord, s.logPath, lastPos, last, next, last+1, next-1)
	}
	return nil
}

// largestTimestamp returns the segment's largest record timestamp and its
// offset (-1, -1 when it has none), from what the writer saw at roll, else
// the time index's last entry, else (an unusable time index in a read-only
// log) every batch header. Retention then falls back to the file's mtime.
func (s *segFile) largestTimestamp() (ts, offset int64, err error) {
	s.mu.Lock()
	if s.maxTs != -2 {
		ts, offset = s.maxTs, s.offsetOfMaxTs
		s.mu.Unlock()
		return ts, offset, nil
	}
	s.mu.Unlock()
	_, ti, err := s.indexes()
	if err != nil {
		return -1, -1, err
	}
	s.mu.Lock()
	bypassed := s.tiBypassed
	s.mu.Unlock()
	ts, offset = -1, -1
	if bypassed {
		err = s.walkHeaders(0, s.size.Load(), s.base-1, func(h *record.Entry) bool {
			if h.MaxTimestamp > ts {
				ts, offset = h.MaxTimestamp, h.LastOffset
			}
			return true
		})
		if err != nil {
			return -1, -1, err
		}
	} else if last := ti.LastEntry(); last.Timestamp >= 0 {
		ts, offset = last.Timestamp, last.Offset
	}
	s.mu.Lock()
	if s.ti == ti || bypassed {
		s.maxTs, s.offsetOfMaxTs = ts, offset
	}
	s.mu.Unlock()
	return ts, offset, nil
}
