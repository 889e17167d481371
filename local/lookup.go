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
	// how the lookup went, for tools
	indexEntry   index.OffsetEntry
	indexSlot    int
	indexEntries int
	scanned      int
	scannedBytes int64
}

// translateOffset finds the first batch whose last offset is >= target,
// searching from the offset index's entry for target and scanning batch
// headers forward, never past limit. ok is false when no such batch lies
// before limit. Offsets must rise strictly from batch to batch, and the
// batches from the index entry must agree with it: one of them ends at
// exactly the entry's offset, the last offset of the append that began
// there (Kafka's rule, so none of them ends past it). Damage is an error.
func (s *segFile) translateOffset(target, limit int64) (p position, ok bool, err error) {
	return s.translateOffsetIn(nil, target, limit)
}

// translateOffsetIn is translateOffset reading headers through w (see
// walkHeadersIn).
func (s *segFile) translateOffsetIn(w *windowRef, target, limit int64) (p position, ok bool, err error) {
	oi, err := s.offsetIndex()
	if err != nil {
		return p, false, err
	}
	s.reads.Add(1)
	e, slot, n := oi.LookupSlot(target)
	p.indexEntry, p.indexSlot, p.indexEntries = e, slot, n
	prevLast := s.base - 1
	if slot > 0 {
		prevLast = oi.Entry(slot - 1).Offset
	}
	start := int64(e.Position)
	if w != nil {
		// The batch holding target starts at or before the next entry's.
		if next := slot + 1; next < n {
			w.expect(int64(oi.Entry(next).Position) - start + record.BatchHeaderSize)
		} else {
			w.expect(0)
		}
	}
	var disagree error  // the batches from the entry do not agree with it
	reached := slot < 0 // a batch ended at the entry's offset
	err = s.walkHeadersIn(w, start, limit, prevLast, func(h *record.Entry) bool {
		p.scanned++
		p.scannedBytes = h.Position + h.Size - start
		if !reached && h.LastOffset > e.Offset {
			disagree = fmt.Errorf("%w: %s position %d holds offsets up to %d, but %s says an append of offsets up to %d starts at position %d",
				backend.ErrCorruptRecord, s.logPath, h.Position, h.LastOffset, s.path(IndexSuffix), e.Offset, e.Position)
			return false
		}
		reached = reached || h.LastOffset == e.Offset
		if h.LastOffset >= target {
			p.pos, p.size, p.baseOffset, p.lastOffset, p.maxTs = h.Position, h.Size, h.BaseOffset, h.LastOffset, h.MaxTimestamp
			ok = true
			return false
		}
		return true
	})
	if err == nil {
		err = disagree
	}
	if err != nil {
		return p, false, err
	}
	return p, ok, nil
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
