package index

import (
	"math"
	"unsafe"
)

// shared holds what both index types offer over their table.
type shared struct{ t table }

// BaseOffset returns the segment's base offset.
func (x *shared) BaseOffset() int64 { return x.t.base }

// Path returns the file path, or "" for a view.
func (x *shared) Path() string {
	x.t.mu.RLock()
	defer x.t.mu.RUnlock()
	return x.t.path
}

// Entries returns the number of valid entries.
func (x *shared) Entries() int {
	x.t.mu.RLock()
	defer x.t.mu.RUnlock()
	return x.t.n
}

// MaxEntries returns the number of slots.
func (x *shared) MaxEntries() int {
	x.t.mu.RLock()
	defer x.t.mu.RUnlock()
	return x.t.maxEntries()
}

// Footprint says what the index holds: about heapBytes of Go memory (its
// search summary, itself, and its entries when a read-only file small
// enough was read in at open: smallIndexBytes), whether it holds a mapping
// of its file (a read-only one holds no descriptor: it is closed once the
// file is mapped), and whether it is writable (the writer's: its Close
// trims and flushes the file). A read-only index that is not mapped holds
// only memory: a caller may drop it without Close, even while others
// still read it.
func (x *shared) Footprint() (heapBytes int, mapped, writable bool) {
	x.t.mu.RLock()
	defer x.t.mu.RUnlock()
	heapBytes = int(unsafe.Sizeof(*x)) + len(x.t.path)
	if x.t.mm == nil {
		heapBytes += cap(x.t.data)
	}
	for _, level := range x.t.summary {
		heapBytes += int(unsafe.Sizeof(level)) + 8*cap(level)
	}
	return heapBytes, x.t.mm != nil, x.t.writable
}

// SizeInBytes returns the bytes the valid entries take (the trimmed size).
func (x *shared) SizeInBytes() int { return x.Entries() * x.t.kind.entrySize }

// AppendEntries appends the valid entries' bytes (the file as a trimmed
// index holds them) to dst.
func (x *shared) AppendEntries(dst []byte) []byte {
	x.t.mu.RLock()
	defer x.t.mu.RUnlock()
	return append(dst, x.t.data[:x.t.n*x.t.kind.entrySize]...)
}

// TruncateTo removes every entry whose offset is >= offset (for the time
// index too: Kafka's TimeIndex.truncateTo searches on the offset value).
func (x *shared) TruncateTo(offset int64) error {
	x.t.mu.Lock()
	defer x.t.mu.Unlock()
	return x.t.truncateToLocked(offset)
}

// Reset removes every entry.
func (x *shared) Reset() error { return x.TruncateTo(math.MinInt64) }

// Resize sets the file to maxIndexSize rounded down to the entry size
// (Kafka re-expands the active segment's indexes to segment.index.bytes).
func (x *shared) Resize(maxIndexSize int) error {
	x.t.mu.Lock()
	defer x.t.mu.Unlock()
	return x.t.resizeLocked(maxIndexSize)
}

// TrimToValidSize shrinks the file to exactly its valid entries, as Kafka
// does when a segment rolls.
func (x *shared) TrimToValidSize() error {
	x.t.mu.Lock()
	defer x.t.mu.Unlock()
	return x.t.resizeLocked(x.t.n * x.t.kind.entrySize)
}

// Reserve makes sure the next n slots (as many as are left) have disk
// blocks under them, so that appending n entries cannot fail for want of
// space: a log reserves before it writes a byte of an append, and a full
// disk then fails the append with nothing written.
func (x *shared) Reserve(n int) error {
	x.t.mu.Lock()
	defer x.t.mu.Unlock()
	if err := x.t.checkWritableLocked(); err != nil {
		return err
	}
	last := min(x.t.n+n, x.t.maxEntries()) - 1
	if last < x.t.n {
		return nil
	}
	return x.t.backSlotLocked(last)
}

// Flush makes the entries durable (msync + fsync).
func (x *shared) Flush() error { return x.t.flush() }

// Rename moves the index file to newPath; the index stays usable.
func (x *shared) Rename(newPath string) error { return x.t.rename(newPath) }

// Close trims a writable index to its valid entries, then unmaps it.
// Close is idempotent.
func (x *shared) Close() error { return x.t.close() }
