package index

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/tierlog/tierlog/vfs"
)

// OffsetEntry is an offset index entry with its absolute offset.
type OffsetEntry struct {
	Offset   int64
	Position int32
}

// OffsetIndex maps offsets to file positions in one segment's .log.
type OffsetIndex struct{ shared }

// OpenOffsetIndex opens or creates the writable offset index at path for the
// segment with baseOffset, preallocated to maxIndexSize (segment.index.bytes)
// rounded down to 8 bytes and memory-mapped. Existing valid entries are kept.
func OpenOffsetIndex(fsys vfs.FS, path string, baseOffset int64, maxIndexSize int) (*OffsetIndex, error) {
	x := &OffsetIndex{shared{t: table{kind: offsetKind, base: baseOffset}}}
	if err := x.t.openFile(fsys, path, true, maxIndexSize); err != nil {
		return nil, err
	}
	return x, nil
}

// OpenOffsetIndexReadOnly maps an existing offset index file read-only, at
// its current length (a closed segment's trimmed index).
func OpenOffsetIndexReadOnly(fsys vfs.FS, path string, baseOffset int64) (*OffsetIndex, error) {
	x := &OffsetIndex{shared{t: table{kind: offsetKind, base: baseOffset}}}
	if err := x.t.openFile(fsys, path, false, 0); err != nil {
		return nil, err
	}
	return x, nil
}

// NewOffsetIndexView returns a read-only offset index over data (for
// example an index fetched from a bucket). It does not copy data; the caller
// must not change it while the view is in use.
func NewOffsetIndexView(data []byte, baseOffset int64) *OffsetIndex {
	x := &OffsetIndex{shared{t: table{kind: offsetKind, base: baseOffset}}}
	x.t.view(data)
	return x
}

// IsFull reports whether no slot is free.
func (x *OffsetIndex) IsFull() bool {
	x.t.mu.RLock()
	defer x.t.mu.RUnlock()
	return x.t.n >= x.t.maxEntries()
}

// Entry returns entry i (0 <= i < Entries()).
func (x *OffsetIndex) Entry(i int) OffsetEntry {
	x.t.mu.RLock()
	defer x.t.mu.RUnlock()
	return x.entryLocked(i)
}

func (x *OffsetIndex) entryLocked(i int) OffsetEntry {
	return OffsetEntry{Offset: x.t.offset(i), Position: x.t.position(i)}
}

// LastEntry returns the last entry, or (baseOffset, 0) when empty.
func (x *OffsetIndex) LastEntry() OffsetEntry {
	x.t.mu.RLock()
	defer x.t.mu.RUnlock()
	if x.t.n == 0 {
		return OffsetEntry{Offset: x.t.base}
	}
	return x.entryLocked(x.t.n - 1)
}

// Lookup returns the entry with the largest offset <= target, or
// (baseOffset, 0) when there is none.
func (x *OffsetIndex) Lookup(target int64) OffsetEntry {
	x.t.mu.RLock()
	defer x.t.mu.RUnlock()
	i := x.t.search(target)
	if i < 0 {
		return OffsetEntry{Offset: x.t.base}
	}
	return x.entryLocked(i)
}

// LookupSlot is Lookup that also returns the chosen slot (-1 on a miss) and
// the number of entries searched over, for tools that show their work.
func (x *OffsetIndex) LookupSlot(target int64) (OffsetEntry, int, int) {
	x.t.mu.RLock()
	defer x.t.mu.RUnlock()
	i := x.t.search(target)
	if i < 0 {
		return OffsetEntry{Offset: x.t.base}, -1, x.t.n
	}
	return x.entryLocked(i), i, x.t.n
}

// Append adds (offset, position). The index must not be full, and offset
// must be above the last entry's and within the segment's int32 relative
// range; positions are the caller's to keep increasing.
func (x *OffsetIndex) Append(offset int64, position int32) error {
	x.t.mu.Lock()
	defer x.t.mu.Unlock()
	if err := x.t.checkWritableLocked(); err != nil {
		return err
	}
	if x.t.n >= x.t.maxEntries() {
		return fmt.Errorf("%w: %s: %d entries, appending offset %d", ErrFull, x.t.name(), x.t.n, offset)
	}
	rel := offset - x.t.base
	if rel < 0 || rel > math.MaxInt32 {
		return fmt.Errorf("%w: %s: offset %d is outside the segment based at %d", ErrInvalidOffset, x.t.name(), offset, x.t.base)
	}
	if x.t.n > 0 {
		if last := x.t.offset(x.t.n - 1); offset <= last {
			return fmt.Errorf("%w: %s: offset %d at slot %d is not above the last offset %d", ErrInvalidOffset, x.t.name(), offset, x.t.n, last)
		}
	}
	if err := x.t.backSlotLocked(x.t.n); err != nil {
		return err
	}
	p := x.t.data[x.t.n*OffsetEntrySize:]
	binary.BigEndian.PutUint32(p, uint32(int32(rel)))
	binary.BigEndian.PutUint32(p[4:], uint32(position))
	x.t.appendedLocked()
	return nil
}

// SanityCheck reports a corrupt index: a length that is not a multiple of 8,
// a last offset below the base, or non-zero slots past the valid prefix.
func (x *OffsetIndex) SanityCheck() error { return x.t.sanityCheck(x.LastEntry().Offset) }

// LookupPosition returns the entry with the largest position <= pos, and
// false when every entry lies past pos. Positions increase with offsets, so
// this finds the last indexed batch boundary before a byte limit (Kafka's
// fetchUpperBoundOffset looks the other way).
func (x *OffsetIndex) LookupPosition(pos int32) (OffsetEntry, bool) {
	x.t.mu.RLock()
	defer x.t.mu.RUnlock()
	lo, hi := 0, x.t.n-1
	if hi < 0 || x.t.position(0) > pos {
		return OffsetEntry{Offset: x.t.base}, false
	}
	for lo < hi {
		mid := int(uint(lo+hi+1) >> 1)
		if x.t.position(mid) <= pos {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return x.entryLocked(lo), true
}
