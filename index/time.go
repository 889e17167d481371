package index

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/tierlog/tierlog/vfs"
)

// TimeEntry is a time index entry with its absolute offset.
type TimeEntry struct {
	Timestamp int64
	Offset    int64
}

// TimeIndex maps timestamps to offsets in one segment.
type TimeIndex struct{ shared }

// OpenTimeIndex opens or creates the writable time index at path,
// preallocated to maxIndexSize rounded down to 12 bytes and memory-mapped.
func OpenTimeIndex(fsys vfs.FS, path string, baseOffset int64, maxIndexSize int) (*TimeIndex, error) {
	x := &TimeIndex{shared{t: table{kind: timeKind, base: baseOffset}}}
	if err := x.t.openFile(fsys, path, true, maxIndexSize); err != nil {
		return nil, err
	}
	return x, nil
}

// OpenTimeIndexReadOnly maps an existing time index file read-only.
func OpenTimeIndexReadOnly(fsys vfs.FS, path string, baseOffset int64) (*TimeIndex, error) {
	x := &TimeIndex{shared{t: table{kind: timeKind, base: baseOffset}}}
	if err := x.t.openFile(fsys, path, false, 0); err != nil {
		return nil, err
	}
	return x, nil
}

// NewTimeIndexView returns a read-only time index over data, not copied.
func NewTimeIndexView(data []byte, baseOffset int64) *TimeIndex {
	x := &TimeIndex{shared{t: table{kind: timeKind, base: baseOffset}}}
	x.t.view(data)
	return x
}

// IsFull reports whether only the slot reserved for the roll entry is left
// (Kafka's TimeIndex.isFull: entries >= maxEntries-1).
func (x *TimeIndex) IsFull() bool {
	x.t.mu.RLock()
	defer x.t.mu.RUnlock()
	return x.t.n >= x.t.maxEntries()-1
}

// Entry returns entry i (0 <= i < Entries()).
func (x *TimeIndex) Entry(i int) TimeEntry {
	x.t.mu.RLock()
	defer x.t.mu.RUnlock()
	return x.entryLocked(i)
}

func (x *TimeIndex) entryLocked(i int) TimeEntry {
	return TimeEntry{Timestamp: x.t.key(i), Offset: x.t.offset(i)}
}

// LastEntry returns the last entry, or (-1, baseOffset) when empty.
func (x *TimeIndex) LastEntry() TimeEntry {
	x.t.mu.RLock()
	defer x.t.mu.RUnlock()
	if x.t.n == 0 {
		return TimeEntry{Timestamp: -1, Offset: x.t.base}
	}
	return x.entryLocked(x.t.n - 1)
}

// Lookup returns the entry with the largest timestamp <= ts, or
// (-1, baseOffset) when there is none.
func (x *TimeIndex) Lookup(ts int64) TimeEntry {
	x.t.mu.RLock()
	defer x.t.mu.RUnlock()
	i := x.t.search(ts)
	if i < 0 {
		return TimeEntry{Timestamp: -1, Offset: x.t.base}
	}
	return x.entryLocked(i)
}

// MaybeAppend adds (ts, offset) when ts is above the last entry's timestamp
// (or the index is empty), as Kafka's TimeIndex.maybeAppend does: an equal
// timestamp is silently skipped; an earlier timestamp or offset is an error.
// skipFullCheck lets the entry written at roll or close use the reserved
// slot. Entries with a negative timestamp (no timestamp) are never written.
func (x *TimeIndex) MaybeAppend(ts, offset int64, skipFullCheck bool) error {
	x.t.mu.Lock()
	defer x.t.mu.Unlock()
	if err := x.t.checkWritableLocked(); err != nil {
		return err
	}
	max := x.t.maxEntries()
	if (!skipFullCheck && x.t.n >= max-1) || x.t.n >= max {
		return fmt.Errorf("%w: %s: %d entries, appending (%d, %d)", ErrFull, x.t.name(), x.t.n, ts, offset)
	}
	if ts < 0 {
		return nil // no timestamp (magic 0): nothing to index
	}
	rel := offset - x.t.base
	if rel < 0 || rel > math.MaxInt32 {
		return fmt.Errorf("%w: %s: offset %d is outside the segment based at %d", ErrInvalidOffset, x.t.name(), offset, x.t.base)
	}
	if x.t.n > 0 {
		last := x.entryLocked(x.t.n - 1)
		if offset < last.Offset {
			return fmt.Errorf("%w: %s: offset %d is below the last entry's %d", ErrInvalidOffset, x.t.name(), offset, last.Offset)
		}
		if ts < last.Timestamp {
			return fmt.Errorf("%w: %s: timestamp %d is below the last entry's %d", ErrInvalidTimestamp, x.t.name(), ts, last.Timestamp)
		}
		if ts == last.Timestamp {
			return nil
		}
	}
	if err := x.t.backSlotLocked(x.t.n); err != nil {
		return err
	}
	p := x.t.data[x.t.n*TimeEntrySize:]
	binary.BigEndian.PutUint64(p, uint64(ts))
	binary.BigEndian.PutUint32(p[8:], uint32(int32(rel)))
	x.t.appendedLocked()
	return nil
}

// SanityCheck reports a corrupt index: a bad length, a last timestamp below
// the first, a last offset below the base, or non-zero slots past the
// valid prefix.
func (x *TimeIndex) SanityCheck() error {
	x.t.mu.RLock()
	n := x.t.n
	var first, last TimeEntry
	if n > 0 {
		first, last = x.entryLocked(0), x.entryLocked(n-1)
	}
	x.t.mu.RUnlock()
	if n > 0 && last.Timestamp < first.Timestamp {
		return fmt.Errorf("%w: %s: last timestamp %d is below the first %d", ErrCorrupt, x.t.name(), last.Timestamp, first.Timestamp)
	}
	lastOffset := x.t.base
	if n > 0 {
		lastOffset = last.Offset
	}
	return x.t.sanityCheck(lastOffset)
}
