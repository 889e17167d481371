package local

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/edsrzf/mmap-go"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/index"
	"github.com/tierlog/tierlog/record"
)

// segment is one .log file with its .index and .timeindex.
//
// Lifetime: the log holds one reference while the segment is part of it;
// each reader holds one more while it uses the segment. Files are closed
// (and index mappings removed) only when the last reference goes, so a
// reader never has a file unmapped or closed under it; a deleted segment's
// files are renamed to .deleted at once and unlinked later, which open
// descriptors survive.
type segment struct {
	base    int64
	dir     string
	logPath string // the .log's path, kept: lookups report it
	opts    *segmentOptions

	refs atomic.Int32
	// size is the byte length readers may read: bytes are written before
	// size moves past them.
	size atomic.Int64

	mu     sync.Mutex // guards everything below; never held during a write
	log    *os.File   // nil until first needed (closed segments open lazily)
	oi     *index.OffsetIndex
	ti     *index.TimeIndex
	active bool
	ix     *index.Indexer // active segment only
	// rollingBasedTs is the first batch's max timestamp (the segment.ms
	// clock); -1 when unknown or empty.
	rollingBasedTs int64
	created        time.Time
	jitterMs       int64
	// maxTs and offsetOfMaxTs describe a closed segment's largest
	// timestamp; loaded lazily (-2 = not loaded).
	maxTs, offsetOfMaxTs int64
	deleted              bool // files renamed to .deleted
	readOnly             bool // never write: missing indexes are empty views
	// sealed: no longer the log's last segment. Its files never change
	// again (a truncation into it writes a new file instead), so point
	// lookups may read its headers through a read-only mapping.
	sealed    bool
	mapped    mmap.MMap
	mapFailed bool
	// used is set by every use of the files, cleared by the file budget's
	// clock hand (second chance).
	used atomic.Bool
}

type segmentOptions struct {
	maxIndexBytes int
	intervalBytes int64
	budget        *fileBudget // bounds sealed segments' open files; nil: none
}

func (s *segment) path(suffix string) string {
	if suffix == LogSuffix {
		return s.logPath
	}
	return filepath.Join(s.dir, FileName(s.base, suffix))
}

func newSegment(dir string, base, size int64, opts *segmentOptions, created time.Time) *segment {
	s := &segment{base: base, dir: dir, opts: opts, rollingBasedTs: -1, maxTs: -2, offsetOfMaxTs: -1, created: created,
		logPath: filepath.Join(dir, FileName(base, LogSuffix))}
	s.refs.Store(1)
	s.size.Store(size)
	return s
}

// createSegment makes a new empty active segment at base, removing stale
// files of the same name first (as Kafka's roll does).
func createSegment(dir string, base int64, opts *segmentOptions, now time.Time, jitterMs int64) (s *segment, err error) {
	s = newSegment(dir, base, 0, opts, now)
	s.jitterMs = jitterMs
	for _, suf := range []string{LogSuffix, IndexSuffix, TimeIndexSuffix, TxnIndexSuffix} {
		if err := os.Remove(s.path(suf)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("local: remove stale %s: %w", s.path(suf), err)
		}
	}
	f, err := os.OpenFile(s.path(LogSuffix), os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("local: create segment: %w", err)
	}
	s.log = f
	defer func() {
		if err != nil {
			s.closeFiles()
		}
	}()
	if err := s.activateLocked(); err != nil {
		return nil, err
	}
	s.ix.Restore(0, -1, -1)
	return s, nil
}

// activateLocked makes s the writable active segment: log opened read-write,
// indexes writable and preallocated, the Indexer ready.
// REQUIRES: s.mu held, or s not yet shared.
func (s *segment) activateLocked() error {
	if s.log == nil {
		f, err := os.OpenFile(s.path(LogSuffix), os.O_RDWR, 0)
		if err != nil {
			return fmt.Errorf("local: open %s: %w", s.path(LogSuffix), err)
		}
		s.log = f
	} else if err := s.reopenLogRW(); err != nil {
		return err
	}
	if err := s.closeIndexesLocked(); err != nil {
		return err
	}
	oi, err := index.OpenOffsetIndex(s.path(IndexSuffix), s.base, s.opts.maxIndexBytes)
	if err != nil {
		return err
	}
	ti, err := index.OpenTimeIndex(s.path(TimeIndexSuffix), s.base, s.opts.maxIndexBytes)
	if err != nil {
		oi.Close()
		return err
	}
	s.oi, s.ti = oi, ti
	s.ix = index.NewIndexer(oi, ti, s.opts.intervalBytes)
	s.active = true
	return nil
}

// reopenLogRW swaps a read-only descriptor for a read-write one.
func (s *segment) reopenLogRW() error {
	f, err := os.OpenFile(s.path(LogSuffix), os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("local: open %s: %w", s.path(LogSuffix), err)
	}
	s.log.Close()
	s.log = f
	return nil
}

// acquire takes a reader's reference; false when the segment is already
// gone (the caller retries with a fresh segment list).
func (s *segment) acquire() bool {
	for {
		n := s.refs.Load()
		if n <= 0 {
			return false
		}
		if s.refs.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// release drops a reference; the last one closes the files.
func (s *segment) release() {
	if s.refs.Add(-1) == 0 {
		s.mu.Lock()
		s.closeFiles()
		s.mu.Unlock()
	}
}

// closeFiles closes the log and indexes (indexes of an active segment are
// trimmed by their Close). REQUIRES: s.mu held, or s not shared.
func (s *segment) closeFiles() error {
	var errs []error
	errs = append(errs, s.closeIndexesLocked())
	if s.mapped != nil {
		errs = append(errs, s.mapped.Unmap())
		s.mapped = nil
	}
	if s.log != nil {
		errs = append(errs, s.log.Close())
		s.log = nil
	}
	s.opts.budget.forget(s)
	return errors.Join(errs...)
}

func (s *segment) closeIndexesLocked() error {
	var errs []error
	if s.oi != nil {
		errs = append(errs, s.oi.Close())
		s.oi = nil
	}
	if s.ti != nil {
		errs = append(errs, s.ti.Close())
		s.ti = nil
	}
	s.ix = nil
	return errors.Join(errs...)
}

// file returns the log file, opening it read-only if needed.
func (s *segment) file() (*os.File, error) {
	s.mu.Lock()
	opened := s.log == nil
	f, err := s.fileLocked()
	count := opened && err == nil && s.sealed
	s.mu.Unlock()
	s.used.Store(true)
	if count {
		s.opts.budget.opened(s)
	}
	return f, err
}

func (s *segment) fileLocked() (*os.File, error) {
	if s.log == nil {
		f, err := os.Open(s.path(LogSuffix))
		if err != nil {
			return nil, fmt.Errorf("local: open %s: %w", s.path(LogSuffix), err)
		}
		s.log = f
	}
	return s.log, nil
}

// offsetIndex returns the segment's offset index, opening (only) it if
// needed: the open path needs no time index.
func (s *segment) offsetIndex() (*index.OffsetIndex, error) {
	s.mu.Lock()
	if s.oi != nil {
		oi := s.oi
		s.mu.Unlock()
		return oi, nil
	}
	if !s.active {
		oi, err := index.OpenOffsetIndexReadOnly(s.path(IndexSuffix), s.base)
		if err == nil {
			s.oi = oi
			s.mu.Unlock()
			return oi, nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			s.mu.Unlock()
			return nil, err
		}
	}
	s.mu.Unlock()
	oi, _, err := s.indexes()
	return oi, err
}

// indexes returns the segment's indexes, opening a closed segment's
// trimmed files read-only on first use, or rebuilding them when missing.
func (s *segment) indexes() (*index.OffsetIndex, *index.TimeIndex, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.oi != nil && s.ti != nil {
		return s.oi, s.ti, nil
	}
	if s.oi != nil && !s.active {
		ti, err := index.OpenTimeIndexReadOnly(s.path(TimeIndexSuffix), s.base)
		if err == nil {
			s.ti = ti
			return s.oi, ti, nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return nil, nil, err
		}
		s.oi.Close()
		s.oi = nil
	}
	oi, err := index.OpenOffsetIndexReadOnly(s.path(IndexSuffix), s.base)
	if err == nil {
		var ti *index.TimeIndex
		ti, err = index.OpenTimeIndexReadOnly(s.path(TimeIndexSuffix), s.base)
		if err == nil {
			s.oi, s.ti = oi, ti
			return oi, ti, nil
		}
		oi.Close()
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return nil, nil, err
	}
	if s.readOnly {
		// Without an index every lookup scans from the segment's start.
		s.oi, s.ti = index.NewOffsetIndexView(nil, s.base), index.NewTimeIndexView(nil, s.base)
		return s.oi, s.ti, nil
	}
	// An index file is missing: rebuild both from the log, as Kafka does.
	if _, err := s.rebuildLocked(false); err != nil {
		return nil, nil, err
	}
	return s.oi, s.ti, nil
}

// append writes batches (already validated, offsets final) at the end of
// the active segment and indexes each batch by Kafka's rule. On a write
// error the file is cut back to its previous size.
// REQUIRES: the log's writer lock.
// written reports whether the bytes are in the log (an index error leaves
// them there).
func (s *segment) append(data []byte, batches []batchMeta) (written bool, err error) {
	pos := s.size.Load()
	if _, err := s.log.WriteAt(data, pos); err != nil {
		if terr := s.log.Truncate(pos); terr != nil {
			return false, fmt.Errorf("local: append to %s failed (%v) and truncating back failed: %w", s.path(LogSuffix), err, terr)
		}
		return false, fmt.Errorf("local: append to %s: %w", s.path(LogSuffix), err)
	}
	s.mu.Lock()
	if pos == 0 {
		s.rollingBasedTs = batches[0].maxTs
	}
	var ierr error
	for _, b := range batches {
		if err := s.ix.Append(b.position+pos, b.size, b.lastOffset, b.maxTs, b.lastOffset); err != nil && ierr == nil {
			ierr = err
		}
	}
	s.mu.Unlock()
	s.size.Store(pos + int64(len(data)))
	if ierr != nil {
		// The bytes are in the log; an index that refused an entry only
		// makes lookups scan further. Kafka rolls before an index fills,
		// so this is a bug, reported but not fatal.
		return true, fmt.Errorf("local: index %s: %w", s.path(IndexSuffix), ierr)
	}
	return true, nil
}

// batchMeta is what append needs to know about one batch of an append.
type batchMeta struct {
	position   int64 // within the appended bytes
	size       int64
	lastOffset int64
	maxTs      int64
}

// shouldRoll applies Kafka's LogSegment.shouldRoll before an append of
// size bytes whose largest timestamp is maxTs and last offset lastOffset.
func (s *segment) shouldRoll(cfgSegmentBytes, segmentMs int64, size int64, maxTs, lastOffset int64, now time.Time) (bool, string) {
	cur := s.size.Load()
	if cur > cfgSegmentBytes-size {
		return true, "segment.bytes"
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if cur > 0 {
		var waited int64
		if s.rollingBasedTs >= 0 && maxTs >= 0 {
			waited = maxTs - s.rollingBasedTs
		} else {
			waited = now.Sub(s.created).Milliseconds()
		}
		if waited > segmentMs-s.jitterMs {
			return true, "segment.ms"
		}
	}
	if s.oi != nil && (s.oi.IsFull() || s.ti.IsFull()) {
		return true, "full index"
	}
	if lastOffset-s.base < 0 || lastOffset-s.base > math.MaxInt32 {
		return true, "relative offset overflow"
	}
	return false, ""
}

// onBecomeInactive is Kafka's onBecomeInactiveSegment: the final time index
// entry, then both indexes trimmed (kept open read-write until close).
// REQUIRES: the log's writer lock.
func (s *segment) onBecomeInactive() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.active {
		return nil
	}
	s.active = false
	if s.ix != nil {
		ts, off := s.ix.MaxTimestamp()
		s.maxTs, s.offsetOfMaxTs = ts, off
		if err := s.ix.Roll(); err != nil {
			return err
		}
	}
	s.ix = nil
	var errs []error
	if s.oi != nil {
		errs = append(errs, s.oi.TrimToValidSize())
	}
	if s.ti != nil {
		errs = append(errs, s.ti.TrimToValidSize())
	}
	return errors.Join(errs...)
}

// largestTimestamp returns the segment's largest record timestamp, from
// the Indexer (active) or the time index's last entry (closed); -1 when it
// has none. Retention then falls back to the file's mtime.
func (s *segment) largestTimestamp() (int64, error) {
	s.mu.Lock()
	if s.active && s.ix != nil {
		ts, _ := s.ix.MaxTimestamp()
		s.mu.Unlock()
		return ts, nil
	}
	if s.maxTs != -2 {
		ts := s.maxTs
		s.mu.Unlock()
		return ts, nil
	}
	s.mu.Unlock()
	_, ti, err := s.indexes()
	if err != nil {
		return -1, err
	}
	last := ti.LastEntry()
	s.mu.Lock()
	s.maxTs, s.offsetOfMaxTs = last.Timestamp, last.Offset
	s.mu.Unlock()
	return last.Timestamp, nil
}

// lastModified returns the .log's mtime.
func (s *segment) lastModified() time.Time {
	st, err := os.Stat(s.path(LogSuffix))
	if err != nil {
		return time.Time{}
	}
	return st.ModTime()
}

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
// before limit.
func (s *segment) translateOffset(target, limit int64) (p position, ok bool, err error) {
	oi, err := s.offsetIndex()
	if err != nil {
		return p, false, err
	}
	e, slot, n := oi.LookupSlot(target)
	p.indexEntry, p.indexSlot, p.indexEntries = e, slot, n
	return s.scanFrom(int64(e.Position), limit, target, p)
}

func (s *segment) scanFrom(start, limit, target int64, p position) (position, bool, error) {
	found := false
	err := s.walkHeaders(start, limit, func(e *record.Entry) bool {
		p.scanned++
		p.scannedBytes = e.Position + e.Size - start
		if e.LastOffset >= target {
			p.pos, p.size, p.baseOffset, p.lastOffset, p.maxTs = e.Position, e.Size, e.BaseOffset, e.LastOffset, e.MaxTimestamp
			found = true
			return false
		}
		return true
	})
	return p, found, err
}

// headerBufs holds the buffers of walkHeaders, so point lookups allocate
// nothing.
var headerBufs = sync.Pool{New: func() any { return new([record.BatchHeaderSize]byte) }}

// walkHeaders calls fn with each entry header from start until fn returns
// false or the walk reaches limit. A sealed segment's headers are read
// through its mapping (no system call); others with one pread each. A torn
// tail ends the walk quietly (it is not served); corruption is an error.
func (s *segment) walkHeaders(start, limit int64, fn func(e *record.Entry) bool) error {
	if m := s.mapping(); m != nil {
		return s.readMapped(func() error {
			return s.walk(start, limit, fn, func(pos int64) (record.Entry, error) { return record.HeaderAt(m, pos, limit) })
		})
	}
	f, err := s.file()
	if err != nil {
		return err
	}
	buf := headerBufs.Get().(*[record.BatchHeaderSize]byte)
	defer headerBufs.Put(buf)
	return s.walk(start, limit, fn, func(pos int64) (record.Entry, error) { return record.ReadHeader(f, pos, limit, buf[:]) })
}

// walk visits the batch headers header reads in [start, limit).
func (s *segment) walk(start, limit int64, fn func(e *record.Entry) bool, header func(pos int64) (record.Entry, error)) error {
	for pos := start; pos < limit; {
		e, err := header(pos)
		if err != nil {
			if err == io.EOF || errors.Is(err, record.ErrTornTail) {
				return nil
			}
			return s.corrupt(err)
		}
		if !fn(&e) {
			return nil
		}
		pos += e.Size
	}
	return nil
}

// mapping returns a sealed segment's .log mapped read-only, mapping it on
// first use; nil for other segments or when mapping fails (the caller then
// reads with pread).
func (s *segment) mapping() []byte {
	s.used.Store(true)
	s.mu.Lock()
	if s.mapped != nil || !s.sealed || s.readOnly || s.mapFailed {
		m := s.mapped
		s.mu.Unlock()
		return m
	}
	opened := s.log == nil
	m := s.mapLocked()
	count := opened && s.log != nil
	s.mu.Unlock()
	if count {
		s.opts.budget.opened(s)
	}
	return m
}

// mapLocked maps the sealed segment's .log. REQUIRES: s.mu held.
func (s *segment) mapLocked() []byte {
	size := s.size.Load()
	f, err := s.fileLocked()
	if err != nil || size <= 0 || size > math.MaxInt32 {
		s.mapFailed = true
		return nil
	}
	m, err := mmap.MapRegion(f, int(size), mmap.RDONLY, 0, 0)
	if err != nil {
		s.mapFailed = true
		return nil
	}
	s.mapped = m
	return m
}

// readMapped runs fn, which reads the segment's mapping. Sealed files do
// not change, but an I/O error or an outside hand truncating the file
// would turn a read into a fault: that becomes an error, not a crash.
func (s *segment) readMapped(fn func() error) (err error) {
	old := debug.SetPanicOnFault(true)
	defer func() {
		debug.SetPanicOnFault(old)
		if r := recover(); r != nil {
			if _, fault := r.(interface{ Addr() uintptr }); !fault {
				panic(r)
			}
			err = fmt.Errorf("%w: %s: reading the mapped log failed: %v", backend.ErrCorruptRecord, s.path(LogSuffix), r)
		}
	}()
	return fn()
}

// batchEnd returns the end position and last offset of the last whole batch
// that starts at or after from and ends at or before limit (from and -1 when
// none fits). It uses the offset index to skip near limit, then scans
// headers.
func (s *segment) batchEnd(from, limit int64) (end, lastOffset int64, err error) {
	oi, err := s.offsetIndex()
	if err != nil {
		return from, -1, err
	}
	start := from
	if e, ok := oi.LookupPosition(int32(min(limit, math.MaxInt32))); ok && int64(e.Position) > start {
		start = int64(e.Position)
	}
	end, lastOffset = start, -1
	err = s.walkHeaders(start, limit, func(e *record.Entry) bool {
		end, lastOffset = e.Position+e.Size, e.LastOffset
		return true
	})
	if err == nil && lastOffset < 0 && start > from {
		// The indexed batch at start does not fit: the read ends where it
		// begins, and its last offset is the one before that batch's base.
		err = s.walkHeaders(start, s.size.Load(), func(e *record.Entry) bool {
			lastOffset = e.BaseOffset - 1
			return false
		})
	}
	if err != nil {
		return from, -1, err
	}
	return end, lastOffset, nil
}

// recoverResult is what rebuilding a segment found.
type recoverResult struct {
	validBytes    int64
	truncated     int64 // bytes cut from the tail
	nextOffset    int64 // one past the last valid batch; base when empty
	firstOffset   int64 // -1 when empty
	maxTs         int64
	offsetOfMaxTs int64
	corruption    error // why the tail was cut, when it was
	epochs        []EpochEntry
}

// rebuildLocked is Kafka's LogSegment.recover: validate every batch from the
// start, rebuild both indexes by the index rule, truncate the log at the
// first torn or corrupt batch. With keepActive the rebuilt indexes stay
// writable at full size; otherwise they are trimmed.
// REQUIRES: s.mu held.
func (s *segment) rebuildLocked(keepActive bool) (res recoverResult, err error) {
	res = recoverResult{nextOffset: s.base, firstOffset: -1, maxTs: -1, offsetOfMaxTs: -1}
	if err := s.closeIndexesLocked(); err != nil {
		return res, err
	}
	if s.log != nil {
		s.log.Close()
		s.log = nil
	}
	f, err := os.OpenFile(s.path(LogSuffix), os.O_RDWR, 0)
	if err != nil {
		return res, fmt.Errorf("local: open %s: %w", s.path(LogSuffix), err)
	}
	s.log = f
	st, err := f.Stat()
	if err != nil {
		return res, err
	}
	for _, suf := range []string{IndexSuffix, TimeIndexSuffix} {
		if err := os.Remove(s.path(suf)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return res, err
		}
	}
	// A closed segment's indexes are trimmed right after, so size them to
	// what the index rule can produce for this log (at most one entry per
	// interval, or per batch) rather than segment.index.bytes.
	maxBytes := s.opts.maxIndexBytes
	if !keepActive {
		perEntry := max(s.opts.intervalBytes+1, record.BatchHeaderSize)
		maxBytes = int(min(int64(maxBytes), (st.Size()/perEntry+2)*index.TimeEntrySize))
	}
	oi, err := index.OpenOffsetIndex(s.path(IndexSuffix), s.base, maxBytes)
	if err != nil {
		return res, err
	}
	ti, err := index.OpenTimeIndex(s.path(TimeIndexSuffix), s.base, maxBytes)
	if err != nil {
		oi.Close()
		return res, err
	}
	s.oi, s.ti = oi, ti
	ix := index.NewIndexer(oi, ti, s.opts.intervalBytes)
	sc := record.NewScanner(f, 0, st.Size(), record.ScanOptions{Validate: true})
	prevLast := s.base - 1
	var epoch int32 = -1
	for sc.Next() {
		e := sc.Entry()
		first := e.BaseOffset
		if first < 0 {
			first = e.LastOffset
		}
		if first <= prevLast || e.LastOffset-s.base > math.MaxInt32 || e.LastOffset < first {
			res.corruption = fmt.Errorf("%w: batch at position %d: offsets %d..%d do not follow %d within segment %d",
				record.ErrCorrupt, e.Position, first, e.LastOffset, prevLast, s.base)
			break
		}
		if !oi.IsFull() && !ti.IsFull() {
			if err := ix.Append(e.Position, e.Size, e.LastOffset, e.MaxTimestamp, e.LastOffset); err != nil {
				return res, err
			}
		}
		if e.Magic == 2 {
			if pe := e.Batch().PartitionLeaderEpoch(); pe >= 0 && pe > epoch {
				epoch = pe
				res.epochs = append(res.epochs, EpochEntry{Epoch: pe, StartOffset: first})
			}
		}
		if res.firstOffset < 0 {
			res.firstOffset = first
		}
		prevLast = e.LastOffset
		res.validBytes = e.Position + e.Size
		res.nextOffset = e.LastOffset + 1
	}
	if res.corruption == nil {
		res.corruption = sc.Err()
	}
	res.maxTs, res.offsetOfMaxTs = ix.MaxTimestamp()
	if res.validBytes < st.Size() {
		res.truncated = st.Size() - res.validBytes
		if err := f.Truncate(res.validBytes); err != nil {
			return res, fmt.Errorf("local: truncate %s to %d: %w", s.path(LogSuffix), res.validBytes, err)
		}
	} else {
		res.corruption = nil
	}
	s.size.Store(res.validBytes)
	if keepActive {
		s.ix = ix
		s.active = true
		return res, nil
	}
	if err := ix.Roll(); err != nil {
		return res, err
	}
	s.maxTs, s.offsetOfMaxTs = res.maxTs, res.offsetOfMaxTs
	if err := oi.TrimToValidSize(); err != nil {
		return res, err
	}
	return res, ti.TrimToValidSize()
}

// truncateTo removes every batch whose last offset is >= offset and the
// index entries that point at them; the segment must then be the active one.
// It returns the new next offset (the base offset of the first removed
// batch, or offset when the cut falls between batches).
// REQUIRES: the log's writer lock.
func (s *segment) truncateTo(offset int64) (int64, error) {
	p, ok, err := s.translateOffset(offset, s.size.Load())
	if err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.active {
		if err := s.activateLocked(); err != nil {
			return 0, err
		}
	}
	if !ok {
		return offset, nil // nothing at or above offset here
	}
	cut := p.baseOffset
	if cut < 0 || cut > offset {
		cut = offset
	}
	if err := s.oi.TruncateTo(cut); err != nil {
		return 0, err
	}
	if err := s.ti.TruncateTo(cut); err != nil {
		return 0, err
	}
	s.size.Store(p.pos)
	if err := s.log.Truncate(p.pos); err != nil {
		return 0, fmt.Errorf("local: truncate %s to %d: %w", s.path(LogSuffix), p.pos, err)
	}
	// Restart the index rule and the largest timestamp from what is left,
	// as a reloaded Kafka segment would.
	ts, off := int64(-1), int64(-1)
	if last := s.ti.LastEntry(); last.Timestamp >= 0 {
		ts, off = last.Timestamp, last.Offset
	}
	s.ix = index.NewIndexer(s.oi, s.ti, s.opts.intervalBytes)
	s.ix.Restore(0, ts, off)
	if p.pos == 0 {
		s.rollingBasedTs = -1
	}
	return cut, nil
}

// flush makes the log and indexes durable.
func (s *segment) flush() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var errs []error
	if s.log != nil {
		if err := s.log.Sync(); err != nil {
			errs = append(errs, fmt.Errorf("local: fsync %s: %w", s.path(LogSuffix), err))
		}
	}
	if s.oi != nil && s.active {
		errs = append(errs, s.oi.Flush())
	}
	if s.ti != nil && s.active {
		errs = append(errs, s.ti.Flush())
	}
	return errors.Join(errs...)
}

// renameDeleted renames the segment's files to *.deleted (Kafka's
// asyncDeleteSegment first step) and returns the new paths.
func (s *segment) renameDeleted() ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, suf := range []string{LogSuffix, IndexSuffix, TimeIndexSuffix, TxnIndexSuffix} {
		from := s.path(suf)
		to := from + DeletedSuffix
		if err := os.Rename(from, to); err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			return out, fmt.Errorf("local: rename %s: %w", from, err)
		}
		out = append(out, to)
	}
	s.deleted = true
	return out, nil
}

// readAt reads len(p) bytes at off of the .log.
func (s *segment) readAt(p []byte, off int64) error {
	f, err := s.file()
	if err != nil {
		return err
	}
	if _, err := f.ReadAt(p, off); err != nil && !(errors.Is(err, io.EOF) && len(p) == 0) {
		return fmt.Errorf("local: read %s at %d: %w", s.path(LogSuffix), off, err)
	}
	return nil
}

// corrupt wraps a scan error of this segment's log: damaged framing is
// backend.ErrCorruptRecord, anything else (I/O) stays as it is.
func (s *segment) corrupt(err error) error {
	if errors.Is(err, record.ErrCorrupt) {
		return fmt.Errorf("%w: %s: %v", backend.ErrCorruptRecord, s.path(LogSuffix), err)
	}
	return fmt.Errorf("local: %s: %w", s.path(LogSuffix), err)
}
