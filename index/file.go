package index

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sync"

	"github.com/edsrzf/mmap-go"

	"github.com/tierlog/tierlog/vfs"
)

// Entry sizes (frozen).
const (
	OffsetEntrySize = 8
	TimeEntrySize   = 12
)

// Sentinel errors; wrapped with the file and offsets that failed.
var (
	// ErrFull means an append found no free slot; a log rolls before this.
	ErrFull = errors.New("index: full")
	// ErrInvalidOffset means an append would break the order: an offset
	// not above the last entry's, or one outside the segment's int32
	// relative range.
	ErrInvalidOffset = errors.New("index: invalid offset")
	// ErrInvalidTimestamp means a time index append went back in time.
	ErrInvalidTimestamp = errors.New("index: invalid timestamp")
	// ErrCorrupt means the file fails a sanity check.
	ErrCorrupt = errors.New("index: corrupt index")
	// ErrReadOnly means a write was asked of a read-only index.
	ErrReadOnly = errors.New("index: read only")
	// ErrClosed means the index was used after Close.
	ErrClosed = errors.New("index: closed")
)

// kind describes one index format: its entry size and where its search key
// and its offset live in an entry.
type kind struct {
	name      string
	entrySize int
	keyAt     int  // byte offset of the search key in an entry
	keyIs64   bool // int64 timestamp key; else int32 relative offset
	offsetAt  int  // byte offset of the int32 relative offset
}

var (
	offsetKind = kind{name: "offset index", entrySize: OffsetEntrySize, keyAt: 0, offsetAt: 0}
	timeKind   = kind{name: "time index", entrySize: TimeEntrySize, keyAt: 0, keyIs64: true, offsetAt: 8}
)

// table is the storage and search shared by both index types: a byte slice
// of slots (mmap'd file or caller bytes) of which the first n are valid.
type table struct {
	kind kind
	base int64

	fs vfs.FS // nil for a view

	mu      sync.RWMutex // guards everything below; readers RLock
	path    string       // "" for a view; the file is closed once mapped
	mm      mmap.MMap    // nil for a view or an empty file
	data    []byte       // all slots: len = maxEntries*entrySize
	n       int          // valid entries
	summary [][]int64    // search levels over the keys; see fanout
	// allocated is how many leading bytes of a writable file are known to
	// be backed by disk blocks; see backSlotLocked.
	allocated int
	writable  bool
	closed    bool
}

// openFile opens (or, when writable, creates) an index file and maps it. A
// writable index is resized to maxBytes rounded down to the entry size; a
// read-only one keeps its length. The descriptor is closed once the file
// is mapped, so an open index costs no file handle (10,000 partitions
// would otherwise hold 20,000 of them).
func (t *table) openFile(fsys vfs.FS, path string, writable bool, maxBytes int) error {
	t.fs, t.path, t.writable = fsys, path, writable
	if writable && maxBytes < t.kind.entrySize {
		return fmt.Errorf("%w: %s: max index size %d is below one %d-byte entry", ErrInvalidOffset, path, maxBytes, t.kind.entrySize)
	}
	want := int64(-1)
	if writable {
		want = int64(roundDown(maxBytes, t.kind.entrySize))
	}
	oldSize, err := t.mapPathLocked(want, writable)
	if err != nil {
		return err
	}
	// Slots past the file's old length are zero: no need to read (and
	// fault in) them.
	t.n = t.validPrefixWithin(int(min(oldSize, int64(len(t.data)))) / t.kind.entrySize)
	t.rebuildSummaryLocked()
	t.allocated = roundUp(t.n*t.kind.entrySize, pageSize)
	return nil
}

// smallIndexBytes is the largest read-only index read into memory rather
// than mapped (1,024 offset entries: about 4 MiB of log at the default
// index.interval.bytes).
const smallIndexBytes = 8 << 10

// pageSize is the unit in which index files get disk blocks.
var pageSize = os.Getpagesize()

func roundUp(n, m int) int { return (n + m - 1) / m * m }

// backSlotLocked makes sure the page holding slot i has disk blocks before
// the entry is written through the mapping. A preallocated index is sparse;
// the first store into a hole makes the kernel allocate the block inside
// the page fault, which on ext4 was measured here at 3.6 ms (a pwrite into
// a hole: 6 µs). So the page is first filled with zeros by pwrite, once per
// page (every 512 offset entries), through a short-lived descriptor.
// REQUIRES: t.mu held for writing.
func (t *table) backSlotLocked(i int) error {
	end := (i + 1) * t.kind.entrySize
	if end <= t.allocated {
		return nil
	}
	from := t.allocated
	to := min(roundUp(end, pageSize), len(t.data))
	f, err := t.fs.OpenFile(t.path, os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("index: open %s: %w", t.path, err)
	}
	defer f.Close()
	if _, err := f.WriteAt(make([]byte, to-from), int64(from)); err != nil {
		return fmt.Errorf("index: extend %s: %w", t.path, err)
	}
	t.allocated = to
	return nil
}

// mapPathLocked opens t.path, sets its length to size when size >= 0
// (entries past the old end read as zero, entries past the new end are
// gone, as Kafka's resize), maps it and closes the descriptor.
// REQUIRES: t.mu held for writing, or t not yet shared.
func (t *table) mapPathLocked(size int64, create bool) (oldSize int64, err error) {
	flag := os.O_RDONLY
	if t.writable {
		flag = os.O_RDWR
		if create {
			flag |= os.O_CREATE
		}
	}
	f, err := t.fs.OpenFile(t.path, flag, 0o644)
	if err != nil {
		return 0, fmt.Errorf("index: open %s: %w", t.path, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return 0, fmt.Errorf("index: stat %s: %w", t.path, err)
	}
	oldSize = st.Size()
	if size >= 0 && st.Size() != size {
		if err := f.Truncate(size); err != nil {
			return oldSize, fmt.Errorf("index: resize %s to %d bytes: %w", t.path, size, err)
		}
	} else {
		size = st.Size()
	}
	usable := roundDown64(size, int64(t.kind.entrySize))
	if usable == 0 {
		t.mm, t.data = nil, nil
		return oldSize, nil
	}
	if usable > int64(^uint(0)>>1) {
		return oldSize, fmt.Errorf("%w: %s: %d bytes", ErrCorrupt, t.path, size)
	}
	if !t.writable && usable <= smallIndexBytes {
		// A small read-only index is read, not mapped: the open checks
		// and summarizes every entry anyway, and a mapping costs an mmap,
		// a munmap at close and a page fault a page (a log bounding its
		// open files reopens indexes of segments it reads at random), and
		// counts against vm.max_map_count.
		buf := make([]byte, usable)
		if _, err := f.ReadAt(buf, 0); err != nil {
			return oldSize, fmt.Errorf("index: read %s (%d bytes): %w", t.path, usable, err)
		}
		t.mm, t.data = nil, buf
		return oldSize, nil
	}
	prot := mmap.RDONLY
	if t.writable {
		prot = mmap.RDWR
	}
	m, err := mmap.MapRegion(f.OS(), int(usable), prot, 0, 0)
	if err != nil {
		return oldSize, fmt.Errorf("index: mmap %s (%d bytes): %w", t.path, usable, err)
	}
	t.mm, t.data = m, m
	return oldSize, nil
}

func (t *table) unmapLocked() error {
	if t.mm == nil {
		if t.path != "" {
			t.data = nil // a small index read into memory (not a view's bytes)
		}
		return nil
	}
	err := t.mm.Unmap()
	t.mm, t.data = nil, nil
	if err != nil {
		return fmt.Errorf("index: unmap %s: %w", t.path, err)
	}
	return nil
}

// view makes t a read-only index over data (which it does not copy).
func (t *table) view(data []byte) {
	t.data = data[:roundDown(len(data), t.kind.entrySize)]
	t.n = t.validPrefix()
	t.rebuildSummaryLocked()
}

func (t *table) maxEntries() int { return len(t.data) / t.kind.entrySize }

// key returns the search key of slot i.
func (t *table) key(i int) int64 {
	p := t.data[i*t.kind.entrySize+t.kind.keyAt:]
	if t.kind.keyIs64 {
		return int64(binary.BigEndian.Uint64(p))
	}
	return t.base + int64(int32(binary.BigEndian.Uint32(p)))
}

// offset returns the absolute offset stored in slot i.
func (t *table) offset(i int) int64 {
	return t.base + int64(int32(binary.BigEndian.Uint32(t.data[i*t.kind.entrySize+t.kind.offsetAt:])))
}

// position returns the position field of slot i of an offset index.
func (t *table) position(i int) int32 {
	return int32(binary.BigEndian.Uint32(t.data[i*t.kind.entrySize+4:]))
}

// validPrefix returns how many leading slots hold valid entries: slot 0 is
// valid unless all zero; slot i>0 is valid while the order holds.
func (t *table) validPrefix() int { return t.validPrefixWithin(t.maxEntries()) }

// validPrefixWithin is validPrefix over the first max slots only.
func (t *table) validPrefixWithin(max int) int {
	if max == 0 || allZero(t.data[:t.kind.entrySize]) {
		return 0
	}
	if t.offset(0) < t.base {
		return 0
	}
	n := 1
	for ; n < max; n++ {
		if t.key(n) <= t.key(n-1) || t.offset(n) < t.offset(n-1) {
			break
		}
		if !t.kind.keyIs64 && t.position(n) <= t.position(n-1) {
			break
		}
	}
	return n
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// fanout is the stride of the in-memory summary. summary[0] holds the key
// of every 32nd entry, summary[1] every 32nd key of summary[0], and so on
// until a level holds at most 32 keys: about 3% of the index's size, kept in
// Go memory. A lookup counts keys <= target in one 32-key block per level
// and then in one 32-entry block of the mapping (four cache lines). The
// loads of a block do not depend on each other, so the CPU fetches its
// lines in parallel, where a plain binary search takes one dependent miss
// per step over the whole mapping.
const fanout = 32

// rebuildSummaryLocked recomputes the summary from the valid entries.
// REQUIRES: t.mu held for writing, or t not yet shared.
func (t *table) rebuildSummaryLocked() {
	t.summary = t.summary[:0]
	for i := 0; i < t.n; i += fanout {
		t.pushSummary(0, t.key(i))
	}
}

// pushSummary appends key to summary level l, creating and feeding the
// level above as its blocks fill.
func (t *table) pushSummary(l int, key int64) {
	if l == len(t.summary) {
		t.summary = append(t.summary, nil)
	}
	i := len(t.summary[l])
	t.summary[l] = append(t.summary[l], key)
	if i%fanout != 0 {
		return
	}
	switch {
	case l+1 < len(t.summary):
		t.pushSummary(l+1, key)
	case i > 0: // level l now holds fanout+1 keys: it needs a level above
		t.summary = append(t.summary, []int64{t.summary[l][0]})
		t.pushSummary(l+1, key)
	}
}

// appendedLocked publishes a newly written entry at slot n.
// REQUIRES: t.mu held for writing.
func (t *table) appendedLocked() {
	if t.n%fanout == 0 {
		t.pushSummary(0, t.key(t.n))
	}
	t.n++
}

// search returns the largest slot < n whose key is <= target, or -1.
// REQUIRES: t.mu held (read or write).
func (t *table) search(target int64) int {
	if t.n == 0 || t.summary[0][0] > target {
		return -1
	}
	// Invariant: block j of the level below starts with a key <= target.
	j := 0
	for l := len(t.summary) - 1; l >= 0; l-- {
		keys := t.summary[l]
		start := j * fanout
		end := min(start+fanout, len(keys))
		k := 0
		for _, key := range keys[start+1 : end] {
			k += le(key, target)
		}
		j = start + k
	}
	start := j * fanout
	end := min(start+fanout, t.n)
	k := 0
	for i := start + 1; i < end; i++ {
		k += le(t.key(i), target)
	}
	return start + k
}

// le is 1 when a <= b, else 0, written so the compiler emits a flag-setting
// instruction instead of a branch: which keys fall below a random target is
// unpredictable, and a mispredicted branch would also discard the loads the
// CPU had started for the rest of the block.
func le(a, b int64) int {
	x := 0
	if a <= b {
		x = 1
	}
	return x
}

// searchOffset is search on the stored offset instead of the key (Kafka's
// VALUE search, used to truncate a time index). Offsets never decrease.
// REQUIRES: t.mu held.
func (t *table) searchOffset(target int64) int {
	lo, hi := 0, t.n-1
	if hi < 0 || t.offset(0) > target {
		return -1
	}
	for lo < hi {
		mid := int(uint(lo+hi+1) >> 1)
		if t.offset(mid) <= target {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return lo
}

// truncateToLocked removes every entry whose offset is >= offset and zeroes
// the freed slots, so a crash cannot resurrect them.
// REQUIRES: t.mu held for writing.
func (t *table) truncateToLocked(offset int64) error {
	if !t.writable {
		return fmt.Errorf("%w: %s", ErrReadOnly, t.name())
	}
	slot := t.searchOffset(offset)
	n := 0
	switch {
	case slot < 0:
		n = 0
	case t.offset(slot) == offset:
		n = slot
	default:
		n = slot + 1
	}
	if n < t.n {
		clear(t.data[n*t.kind.entrySize : t.n*t.kind.entrySize])
		t.n = n
		t.rebuildSummaryLocked()
	}
	return nil
}

// resizeLocked sets the file (and mapping) to maxBytes rounded down to the
// entry size, keeping min(n, new max) entries.
// REQUIRES: t.mu held for writing.
func (t *table) resizeLocked(maxBytes int) error {
	if !t.writable {
		return fmt.Errorf("%w: %s", ErrReadOnly, t.name())
	}
	want := roundDown(maxBytes, t.kind.entrySize)
	if want == len(t.data) {
		return nil
	}
	if err := t.unmapLocked(); err != nil {
		return err
	}
	if _, err := t.mapPathLocked(int64(want), false); err != nil {
		return err
	}
	if t.n > t.maxEntries() {
		t.n = t.maxEntries()
		t.rebuildSummaryLocked()
	}
	t.allocated = min(t.allocated, len(t.data))
	return nil
}

// checkWritableLocked refuses a write to a closed or read-only index.
// REQUIRES: t.mu held.
func (t *table) checkWritableLocked() error {
	if t.closed {
		return fmt.Errorf("%w: %s", ErrClosed, t.name())
	}
	if !t.writable {
		return fmt.Errorf("%w: %s", ErrReadOnly, t.name())
	}
	return nil
}

func (t *table) name() string {
	if t.path != "" {
		return t.path
	}
	return t.kind.name + " view"
}

// Close trims a writable index to its valid entries, unmaps and closes it.
func (t *table) close() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil
	}
	t.closed = true
	// errors.Join of nils allocates nothing (a slice of the errors did, on
	// every close of a log bounding its open files).
	var err error
	if t.writable {
		err = t.resizeLocked(t.n * t.kind.entrySize)
		if t.mm != nil {
			if ferr := t.mm.Flush(); ferr != nil {
				err = errors.Join(err, fmt.Errorf("index: flush %s: %w", t.path, ferr))
			}
		}
	}
	err = errors.Join(err, t.unmapLocked())
	t.data, t.n, t.summary = nil, 0, nil
	return err
}

// flush writes dirty pages of a writable index to disk (msync) and fsyncs
// the file, so its length is durable too.
func (t *table) flush() error {
	t.mu.RLock()
	defer t.mu.RUnlock()
	if t.closed {
		return fmt.Errorf("%w: %s", ErrClosed, t.name())
	}
	if !t.writable {
		return nil
	}
	if t.mm != nil {
		if err := t.mm.Flush(); err != nil {
			return fmt.Errorf("index: flush %s: %w", t.path, err)
		}
	}
	// The length (set when the file was created or resized) is metadata
	// msync does not cover.
	f, err := t.fs.OpenFile(t.path, os.O_RDONLY, 0)
	if err != nil {
		return fmt.Errorf("index: open %s: %w", t.path, err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return fmt.Errorf("index: fsync %s: %w", t.path, err)
	}
	return nil
}

// rename moves the file to newPath (the open mapping stays valid).
func (t *table) rename(newPath string) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.path == "" {
		return fmt.Errorf("%w: cannot rename a view", ErrReadOnly)
	}
	if err := t.fs.Rename(t.path, newPath); err != nil {
		return fmt.Errorf("index: rename: %w", err)
	}
	t.path = newPath
	return nil
}

// sanityCheck reports what Kafka's sanityCheck reports, plus slots past the
// valid prefix that are not zero (entries out of order).
func (t *table) sanityCheck(lastOffset int64) error {
	t.mu.RLock()
	defer t.mu.RUnlock()
	if t.path != "" && !t.writable {
		if st, err := t.fs.Stat(t.path); err == nil && st.Size()%int64(t.kind.entrySize) != 0 {
			return fmt.Errorf("%w: %s: length %d is not a multiple of %d", ErrCorrupt, t.name(), st.Size(), t.kind.entrySize)
		}
	}
	if t.n > 0 && lastOffset < t.base {
		return fmt.Errorf("%w: %s: last offset %d is below the base offset %d", ErrCorrupt, t.name(), lastOffset, t.base)
	}
	for i := t.n; i < t.maxEntries(); i++ {
		if !allZero(t.data[i*t.kind.entrySize : (i+1)*t.kind.entrySize]) {
			return fmt.Errorf("%w: %s: slot %d breaks the order after %d valid entries", ErrCorrupt, t.name(), i, t.n)
		}
	}
	return nil
}

func roundDown(n, m int) int       { return n / m * m }
func roundDown64(n, m int64) int64 { return n / m * m }
