package local

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/edsrzf/mmap-go"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/index"
	"github.com/tierlog/tierlog/producerstate"
	"github.com/tierlog/tierlog/record"
	"github.com/tierlog/tierlog/vfs"
)

// segFile is one segment's files as readers see them: the .log through a
// read-only descriptor (and, once sealed, a read-only mapping) and the
// segment's offset and time indexes.
//
// Lifetime: the log holds one reference while the segment is part of it;
// each reader holds one more while it uses the segment. The descriptor, the
// mapping and the indexes are closed only by the last release, so a reader
// never has a file closed or unmapped under it. A segment that leaves the
// log has its files renamed to .deleted at once and unlinked later; open
// descriptors survive both. The writer never uses the reader's descriptor:
// the active segment opens its own (see activeSegment).
//
// Index objects a reader may hold are never closed before the last
// release: one replaced (a rebuild, the writer's writable copy taking over
// from a read-only one) is retired and closed with the files.
type segFile struct {
	base    int64
	logPath string
	opts    *segmentOptions

	refs atomic.Int32
	// size is the byte length readers may read: the writer writes bytes
	// before size moves past them.
	size atomic.Int64
	// used is set by every use of the files and cleared by the file
	// budget's clock hand (second chance); indexUsed likewise for the
	// indexes and the budget's clock of in-memory indexes.
	used, indexUsed atomic.Bool

	mu sync.Mutex // guards the fields below; no I/O of the .log under it
	// budgeted: the file budget counts the segment (it is sealed and
	// holds a descriptor, a mapping or an index).
	budgeted bool
	// left: the segment left the log (leaveLog). Out of the budget's
	// reach for good, and it opens no file by name any more (another
	// segment may have its names): what it holds was opened as it left.
	left bool
	// ringAt and keptAt are the segment's places in the file budget's
	// rings of open files and of read-only indexes, -1 when not there;
	// kept is what its read-only indexes count there. Guarded by the
	// budget's mu, not s.mu.
	ringAt, keptAt int
	kept           keptCost
	rd             vfs.File // read-only descriptor; nil until first needed
	oi             *index.OffsetIndex
	ti             *index.TimeIndex
	// tiBypassed: the time index failed its sanity check in a read-only
	// log: timestamp searches scan the segment instead of trusting it.
	tiBypassed bool
	retired    []io.Closer
	// sealed: no longer the log's last segment. Its files never change
	// again (a truncation into it writes a new file instead), so reads may
	// go through a read-only mapping.
	sealed bool
	// next is a sealed segment's next segment base (where its offsets
	// end at the latest); -1 for the last segment.
	next      int64
	readOnly  bool // a read-only log: never write, rebuild nothing on disk
	mapped    mmap.MMap
	mapFailed bool
	// reads counts the lookups (translateOffset) since the files opened:
	// a sealed segment is mapped once it reaches mapAfterReads, so one
	// reopened for a read or two (a log bounding its open files, read at
	// random) pays no mmap and munmap. Counted without mu, reset under
	// it when the files close.
	reads atomic.Int32
	// maxTs and offsetOfMaxTs are a sealed segment's largest timestamp
	// and its offset; -2 until loaded.
	maxTs, offsetOfMaxTs int64
	// checkedIndex: the offset index was checked against the log (its
	// last entry lies inside the file, on a batch that agrees with it).
	checkedIndex bool
	// txn is the segment's aborted transactions (its .txnindex), read on
	// first use when txnLoaded is false.
	txn       *producerstate.TxnIndex
	txnLoaded bool
	mtime     time.Time // the .log's mtime when the segment was loaded or created
}

// segmentOptions are what every segment of a log shares.
type segmentOptions struct {
	fs            vfs.FS
	dir           string
	maxIndexBytes int
	intervalBytes int64
	budget        *fileBudget // bounds sealed segments' open files; nil: none
	logger        *slog.Logger
	// compact is set while the topic's cleanup.policy includes compact:
	// offsets may then have gaps (see checkEnd).
	compact atomic.Bool
	// cleaned is set once a cleaner replaced segments of the log, in this
	// process or before (Options.Cleaned): a cleaned segment may end
	// before the next one's base (a cleaner keeps no empty batch there),
	// even after the policy stops compacting.
	cleaned atomic.Bool
}

func (o *segmentOptions) gapsAllowed() bool { return o.compact.Load() || o.cleaned.Load() }

func newSegFile(opts *segmentOptions, base, size int64, mtime time.Time) *segFile {
	s := &segFile{base: base, opts: opts, next: -1, ringAt: -1, keptAt: -1, maxTs: -2, offsetOfMaxTs: -1, mtime: mtime,
		logPath: filepath.Join(opts.dir, FileName(base, LogSuffix))}
	s.refs.Store(1)
	s.size.Store(size)
	return s
}

func (s *segFile) path(suffix string) string {
	if suffix == LogSuffix {
		return s.logPath
	}
	return filepath.Join(s.opts.dir, FileName(s.base, suffix))
}

// exclusiveRefs marks a segment a writer holds alone for an in-place change
// (see tryExclusive): acquire waits it out.
const exclusiveRefs = math.MinInt32 / 2

// acquire takes a reader's reference; false when the segment is already
// gone (the caller retries with a fresh segment list).
func (s *segFile) acquire() bool {
	for {
		n := s.refs.Load()
		if n == exclusiveRefs {
			runtime.Gosched() // a writer changes the file in place: brief
			continue
		}
		if n <= 0 {
			return false
		}
		if s.refs.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// tryExclusive succeeds when only the log holds the segment (no reader),
// and keeps new readers out until endExclusive: the writer may then change
// the file in place (truncate it) without cutting a reader's bytes.
func (s *segFile) tryExclusive() bool { return s.refs.CompareAndSwap(1, exclusiveRefs) }

func (s *segFile) endExclusive() { s.refs.Store(1) }

// release drops a reference; the last one closes the files.
func (s *segFile) release() {
	if s.refs.Add(-1) == 0 {
		s.mu.Lock()
		s.closeFilesLocked()
		s.mu.Unlock()
	}
}

// closeFilesLocked closes the descriptor, the mapping and the indexes
// (retired ones too). REQUIRES: s.mu held, and no reader (the last
// release).
func (s *segFile) closeFilesLocked() error { return s.closeLocked(false) }

// closeLocked is closeFilesLocked; with evict (the file budget's eviction
// of an idle segment) the read-only indexes stay, with what is known of
// them (see closeIdleFiles). REQUIRES: s.mu held, and no reader.
func (s *segFile) closeLocked(evict bool) error {
	// errors.Join of nils allocates nothing; a slice of the errors did, on
	// every eviction.
	var err error
	if evict {
		err = s.closeWritableIndexesLocked()
	} else {
		err = s.closeIndexesLocked()
	}
	for _, c := range s.retired {
		err = errors.Join(err, c.Close())
	}
	s.retired = nil
	if s.mapped != nil {
		err = errors.Join(err, s.mapped.Unmap())
		s.mapped = nil
	}
	if s.rd != nil {
		err = errors.Join(err, s.rd.Close())
		s.rd = nil
	}
	s.reads.Store(0)
	if evict {
		s.opts.budget.forgetFiles(s)
	} else {
		s.opts.budget.forget(s)
	}
	s.budgeted = false
	return err
}

// holdsFilesLocked says whether the segment holds what the file budget
// counts: a descriptor or a mapping of its .log, a writable index (the
// writer's, mapped), or retired indexes (closed by its eviction).
// Read-only indexes hold no descriptor: the budget bounds them apart (see
// fileBudget). REQUIRES: s.mu held.
func (s *segFile) holdsFilesLocked() bool {
	return s.rd != nil || s.mapped != nil || len(s.retired) > 0 ||
		(s.oi != nil && writable(s.oi)) || (s.ti != nil && writable(s.ti))
}

// footprint is an index's Footprint (nil: nothing).
type footprint interface {
	Footprint() (heapBytes int, mapped, writable bool)
}

func writable(x footprint) bool {
	_, _, w := x.Footprint()
	return w
}

// mappedReadOnly says whether x is a read-only index holding a mapping.
func mappedReadOnly[X interface {
	*index.OffsetIndex | *index.TimeIndex
	footprint
}](x X) bool {
	if x == nil {
		return false
	}
	_, mapped, w := x.Footprint()
	return mapped && !w
}

// keptCostLocked is what the segment's read-only indexes count against
// the budget's bound on them. REQUIRES: s.mu held.
func (s *segFile) keptCostLocked() keptCost {
	var c keptCost
	add := func(x footprint) {
		if n, mapped, w := x.Footprint(); !w {
			c.bytes += int64(n)
			if mapped {
				c.maps++
			}
		}
	}
	if s.oi != nil {
		add(s.oi)
	}
	if s.ti != nil {
		add(s.ti)
	}
	return c
}

// toBudgetLocked says whether the segment must now be counted by the
// file budget (sealed, holding files, not counted yet), and marks it
// counted: the caller calls budget.opened after unlocking.
// REQUIRES: s.mu held.
func (s *segFile) toBudgetLocked() bool {
	if s.budgeted || s.left || !s.sealed || s.opts.budget == nil || !s.holdsFilesLocked() {
		return false
	}
	s.budgeted = true
	return true
}

// budget counts a sealed segment that holds files but is not counted
// yet (the segment a roll just sealed keeps the writer's index mappings),
// and any segment's read-only indexes.
func (s *segFile) budget() {
	s.mu.Lock()
	count := s.toBudgetLocked()
	var kept keptCost
	if s.opts.budget != nil && !s.left {
		kept = s.keptCostLocked()
	}
	s.mu.Unlock()
	if count {
		s.opts.budget.opened(s)
	}
	if kept != (keptCost{}) {
		s.opts.budget.indexed(s, kept)
	}
}

func (s *segFile) closeIndexesLocked() error {
	var err error
	if s.oi != nil {
		err = s.oi.Close()
		s.oi = nil
	}
	if s.ti != nil {
		err = errors.Join(err, s.ti.Close())
		s.ti = nil
	}
	s.checkedIndex, s.tiBypassed = false, false
	return err
}

// closeWritableIndexesLocked closes the writer's indexes; the read-only
// ones stay, as does the check of the offset index (the files do not
// change: see closeIdleFiles). REQUIRES: s.mu held, and no reader.
func (s *segFile) closeWritableIndexesLocked() error {
	var err error
	if s.oi != nil && writable(s.oi) {
		err = s.oi.Close()
		s.oi = nil
	}
	if s.ti != nil && writable(s.ti) {
		err = errors.Join(err, s.ti.Close())
		s.ti, s.tiBypassed = nil, false
	}
	return err
}

// publishIndexesLocked makes oi and ti the indexes readers use, retiring
// the ones they replace (a reader may still hold them).
// REQUIRES: s.mu held.
func (s *segFile) publishIndexesLocked(oi *index.OffsetIndex, ti *index.TimeIndex) {
	if s.oi != nil && s.oi != oi {
		s.retired = append(s.retired, s.oi)
	}
	if s.ti != nil && s.ti != ti {
		s.retired = append(s.retired, s.ti)
	}
	s.oi, s.ti = oi, ti
	s.checkedIndex, s.tiBypassed = false, false
}

// file returns the read-only descriptor of the .log, opening it if needed.
func (s *segFile) file() (vfs.File, error) {
	s.mu.Lock()
	f, err := s.fileLocked()
	count := s.toBudgetLocked()
	s.mu.Unlock()
	s.used.Store(true)
	if count {
		s.opts.budget.opened(s)
	}
	return f, err
}

func (s *segFile) fileLocked() (vfs.File, error) {
	if s.rd == nil && s.left {
		return nil, fmt.Errorf("%w: local: %s left the log and its file could not be kept open", backend.ErrStorage, s.logPath)
	}
	if s.rd == nil {
		f, err := s.opts.fs.OpenFile(s.logPath, os.O_RDONLY, 0)
		if err != nil {
			return nil, fmt.Errorf("local: open %s: %w", s.logPath, err)
		}
		s.rd = f
	}
	return s.rd, nil
}

// offsetIndex returns the segment's offset index, opening (only) it if
// needed: the open path needs no time index. A sealed segment's index is
// checked against the log on first use (its last entry must lie inside the
// file, on a batch that agrees with it); a segment cut short is an error.
func (s *segFile) offsetIndex() (*index.OffsetIndex, error) {
	s.indexUsed.Store(true)
	s.mu.Lock()
	oi := s.oi
	checked := s.checkedIndex || !s.sealed
	s.mu.Unlock()
	if oi == nil {
		var err error
		if oi, _, err = s.openIndexes(false); err != nil {
			return nil, err
		}
	}
	if !checked {
		if err := s.checkOffsetIndex(oi); err != nil {
			return nil, err
		}
	}
	return oi, nil
}

// indexes returns both indexes, opening a closed segment's trimmed files
// read-only on first use, and rebuilding them when missing or when the
// time index fails its sanity check (in a read-only log a missing index is
// an empty view and a bad time index is bypassed: see timeIndex).
func (s *segFile) indexes() (*index.OffsetIndex, *index.TimeIndex, error) {
	if _, err := s.offsetIndex(); err != nil {
		return nil, nil, err
	}
	s.mu.Lock()
	oi, ti := s.oi, s.ti
	s.mu.Unlock()
	if oi != nil && ti != nil {
		return oi, ti, nil
	}
	return s.openIndexes(true)
}

// openIndexes opens the offset index (and the time index when withTime)
// from their files. REQUIRES: s.mu not held.
func (s *segFile) openIndexes(withTime bool) (*index.OffsetIndex, *index.TimeIndex, error) {
	oi, ti, err := s.openIndexesUncounted(withTime)
	s.budget() // the read-only indexes count against the budget's bound on them
	return oi, ti, err
}

func (s *segFile) openIndexesUncounted(withTime bool) (*index.OffsetIndex, *index.TimeIndex, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.left && (s.oi == nil || (withTime && s.ti == nil)) {
		// Its names may be another segment's now: never opened by name.
		return nil, nil, fmt.Errorf("%w: local: %s %w before its indexes were read", backend.ErrStorage, s.logPath, errLeftLog)
	}
	if s.oi == nil {
		oi, err := index.OpenOffsetIndexReadOnly(s.opts.fs, s.path(IndexSuffix), s.base)
		switch {
		case err == nil:
			s.oi = oi
		case errors.Is(err, fs.ErrNotExist):
			if err := s.rebuildOrViewLocked("offset index missing"); err != nil {
				return nil, nil, err
			}
			return s.oi, s.ti, nil
		default:
			return nil, nil, err
		}
	}
	if !withTime || s.ti != nil {
		return s.oi, s.ti, nil
	}
	ti, err := index.OpenTimeIndexReadOnly(s.opts.fs, s.path(TimeIndexSuffix), s.base)
	if err == nil {
		if err = ti.SanityCheck(); err == nil {
			err = s.timeIndexFitsLocked(ti)
		}
		if err != nil {
			ti.Close()
			s.opts.logger.Warn("time index fails its checks; not trusted", "err", err)
		}
	}
	switch {
	case err == nil:
		s.ti = ti
	case errors.Is(err, fs.ErrNotExist) || errors.Is(err, index.ErrCorrupt):
		if err := s.rebuildOrViewLocked(fmt.Sprintf("time index unusable (%v)", err)); err != nil {
			return nil, nil, err
		}
	default:
		return nil, nil, err
	}
	return s.oi, s.ti, nil
}

// timeIndexFitsLocked checks what a time index's sanity check cannot: its
// offsets lie in the segment, and its first entry (the largest timestamp
// up to its offset) is not below the first batch's largest timestamp. A
// damaged entry would otherwise start a timestamp search past the records
// it should find. REQUIRES: s.mu held.
func (s *segFile) timeIndexFitsLocked(ti *index.TimeIndex) error {
	n := ti.Entries()
	if n == 0 {
		return nil
	}
	first, last := ti.Entry(0), ti.LastEntry()
	if first.Offset < s.base || last.Offset-s.base > math.MaxInt32 {
		return fmt.Errorf("%w: %s: offsets %d..%d outside the segment based at %d", index.ErrCorrupt, s.path(TimeIndexSuffix), first.Offset, last.Offset, s.base)
	}
	f, err := s.fileLocked()
	if err != nil {
		return err
	}
	var hdr [record.BatchHeaderSize]byte
	e, err := record.ReadHeader(f, 0, s.size.Load(), hdr[:])
	if err == nil && e.Magic == 2 && first.Timestamp < e.MaxTimestamp {
		return fmt.Errorf("%w: %s: its first entry has timestamp %d, below the first batch's largest %d",
			index.ErrCorrupt, s.path(TimeIndexSuffix), first.Timestamp, e.MaxTimestamp)
	}
	return nil
}

// rebuildOrViewLocked handles a missing or unusable index: a read-write
// log rebuilds both from the .log (as Kafka does); a read-only one serves
// without them (lookups scan from the segment's start, timestamp searches
// scan every batch). REQUIRES: s.mu held.
func (s *segFile) rebuildOrViewLocked(why string) error {
	if s.readOnly {
		if s.oi == nil {
			s.oi = index.NewOffsetIndexView(nil, s.base)
		}
		s.ti, s.tiBypassed = index.NewTimeIndexView(nil, s.base), true
		return nil
	}
	res, err := rebuildSealed(s)
	if err != nil {
		return fmt.Errorf("local: rebuild the indexes of %s (%s): %w", s.logPath, why, err)
	}
	if res.corruption != nil {
		return fmt.Errorf("%w: %s: %w", backend.ErrCorruptRecord, s.logPath, res.corruption)
	}
	return nil
}

// checkOffsetIndex verifies, once, that a sealed segment's offset index
// agrees with its log: the last entry's position lies inside the file and
// the batch there ends at or before the entry's offset. A log cut short
// (its index points past its end) is damage, reported naming both files.
func (s *segFile) checkOffsetIndex(oi *index.OffsetIndex) error {
	last, slot, _ := oi.LookupSlot(math.MaxInt64)
	if slot >= 0 {
		size := s.size.Load()
		if int64(last.Position) >= size {
			return fmt.Errorf("%w: %s is %d bytes, but %s has an entry for offset %d at position %d: the log was cut short",
				backend.ErrCorruptRecord, s.logPath, size, s.path(IndexSuffix), last.Offset, last.Position)
		}
		e, err := s.headerAt(int64(last.Position))
		if err != nil {
			return err
		}
		if e.LastOffset > last.Offset && !e.Holds(last.Offset) {
			return fmt.Errorf("%w: %s position %d holds offsets %d..%d, but %s says offsets up to %d start there",
				backend.ErrCorruptRecord, s.logPath, last.Position, e.BaseOffset, e.LastOffset, s.path(IndexSuffix), last.Offset)
		}
	}
	if err := s.checkEnd(oi); err != nil {
		return err
	}
	s.mu.Lock()
	if s.oi == oi {
		s.checkedIndex = true
	}
	s.mu.Unlock()
	return nil
}

// headerAt reads the header of the entry at pos.
func (s *segFile) headerAt(pos int64) (record.Entry, error) {
	var out record.Entry
	found := false
	err := s.walkHeaders(pos, s.size.Load(), -1, func(e *record.Entry) bool {
		out, found = *e, true
		return false
	})
	if err == nil && !found {
		err = fmt.Errorf("%w: %s: no batch at position %d", backend.ErrCorruptRecord, s.logPath, pos)
	}
	return out, err
}

// headerWindowSize is how many bytes of a .log a walk without a mapping
// reads ahead in one pread. The headers a read walks, from the offset
// index entry to the batch after the ones it returns, lie within
// index.interval.bytes (4 KiB by default) and a batch or two: small
// batches' headers then cost one system call together, not one each (a
// read from the page cache costs about the same for 61 bytes and 8 KiB:
// the system call dominates).
const headerWindowSize = 8 << 10

// headerWindow is bytes of one .log read ahead for a walk of its
// headers; an io.ReaderAt for record.ReadHeader. It lives for one read
// (or one walk), while its segment is held, so the bytes below the size
// it was given do not change under it.
type headerWindow struct {
	f     vfs.File
	size  int64 // the segment's readable size: bytes past it are never read
	start int64 // the file position of buf[0]
	n     int   // bytes of buf holding the file's
	// ahead is how many bytes a miss reads (at least the header asked
	// for): headerWindowSize while the walk's headers lie close together,
	// one header when they lie further apart than a window (big batches:
	// the bytes between headers would be read for nothing).
	ahead int
	// hinted: ahead is a lookup's (expect), for the next miss.
	hinted bool
	buf    [headerWindowSize]byte
	hdr    [record.BatchHeaderSize]byte
	entry  record.Entry // the walks' scratch entry (see walk)
}

// headerWindows holds the windows, so point lookups allocate nothing.
var headerWindows = sync.Pool{New: func() any { return new(headerWindow) }}

// windowRef is the window the walks of one read share, taken from the
// pool on the first walk that reads with pread (a mapped segment needs
// none): the batch after a lookup's is usually in the bytes its walk read.
type windowRef struct{ w *headerWindow }

func (r *windowRef) get() *headerWindow {
	if r.w == nil {
		r.w = headerWindows.Get().(*headerWindow)
		r.w.f, r.w.n, r.w.ahead, r.w.hinted = nil, 0, headerWindowSize, false
	}
	return r.w
}

// expect tells the window that the walk about to start covers span bytes
// from its start, its last header included (a lookup knows it from the
// next offset index entry): its first read reads that span when it fits
// a window, else one header (the headers lie further apart than a window).
func (r *windowRef) expect(span int64) {
	w := r.get()
	w.ahead, w.hinted = headerWindowSize, true
	switch {
	case span > headerWindowSize:
		w.ahead = record.BatchHeaderSize
	case span > 0:
		w.ahead = int(span)
	}
}

// release gives the window back; the read is over.
func (r *windowRef) release() {
	if r.w != nil {
		r.w.f, r.w.entry = nil, record.Entry{} // no hold on a mapping or a file
		headerWindows.Put(r.w)
		r.w = nil
	}
}

// use points the window at f, whose readable bytes end at size.
func (w *headerWindow) use(f vfs.File, size int64) {
	if w.f != f {
		w.f, w.n = f, 0
	}
	w.size = size
}

// ReadAt serves p from the window, reading the window anew at off when
// p is not all in it: ahead bytes, or only p when the walk jumped a
// window's length past the window's end (batches bigger than a window).
func (w *headerWindow) ReadAt(p []byte, off int64) (int, error) {
	if off < w.start || off+int64(len(p)) > w.start+int64(w.n) {
		switch {
		case w.hinted: // a lookup's first read: the span it expects
			w.hinted = false
		case w.n > 0 && off-(w.start+int64(w.n)) >= headerWindowSize:
			w.ahead = len(p)
		case w.n > 0:
			w.ahead = headerWindowSize
		}
		n, err := w.f.ReadAt(w.buf[:max(0, min(int64(max(w.ahead, len(p))), w.size-off))], off)
		w.start, w.n = off, n
		if n < len(p) {
			if err == nil {
				err = io.ErrUnexpectedEOF
			}
			return copy(p, w.buf[:n]), err
		}
	}
	return copy(p, w.buf[off-w.start:w.n]), nil
}

// walkHeaders calls fn with each entry header from start until fn returns
// false or the walk reaches limit. A mapped segment's headers are read
// through its mapping (no system call); others through a window of pread
// bytes (see headerWindowSize).
//
// It checks, for free, what a reader can: offsets strictly increase from
// one batch to the next (and from prevLast, the last offset known to come
// before start; -1 when unknown), no batch starts below the segment's
// base, and no batch is cut short inside the file (the segment's bytes
// are always whole batches). A batch that merely does not fit before a
// limit below the segment's size ends the walk quietly. Damage is
// backend.ErrCorruptRecord naming the file and position.
func (s *segFile) walkHeaders(start, limit, prevLast int64, fn func(e *record.Entry) bool) error {
	return s.walkHeadersIn(nil, start, limit, prevLast, fn)
}

// walkHeadersIn is walkHeaders reading through the window of ref, which
// the walks of one read share; nil: a window of its own.
func (s *segFile) walkHeadersIn(ref *windowRef, start, limit, prevLast int64, fn func(e *record.Entry) bool) error {
	size := s.size.Load()
	if start >= size {
		return nil // nothing to walk: no descriptor to open (a new partition's empty segment)
	}
	if ref == nil {
		var own windowRef
		defer own.release()
		ref = &own
	}
	w := ref.get()
	if m := s.mapping(); m != nil {
		return s.readMapped(func() error {
			return s.walk(&w.entry, start, limit, size, prevLast, fn, func(pos int64) (record.Entry, error) { return record.HeaderAt(m, pos, size) })
		})
	}
	f, err := s.file()
	if err != nil {
		return err
	}
	w.use(f, size)
	return s.walk(&w.entry, start, limit, size, prevLast, fn, func(pos int64) (record.Entry, error) { return record.ReadHeader(w, pos, size, w.hdr[:]) })
}

// walk visits the batch headers header reads in [start, limit), each in
// *e. fn sees e's address, so an entry of walk's own escaped to the heap
// (an allocation a walk); e is the window's, pooled.
func (s *segFile) walk(e *record.Entry, start, limit, size, prevLast int64, fn func(e *record.Entry) bool, header func(pos int64) (record.Entry, error)) error {
	for pos := start; pos < limit; {
		var err error
		*e, err = header(pos)
		if err != nil {
			if err == io.EOF {
				return nil
			}
			if errors.Is(err, record.ErrTornTail) && s.readOnly && !s.sealed {
				return nil // a live log's tail, seen by a tool: not served
			}
			return s.corrupt(err)
		}
		if pos+e.Size > limit && limit < size {
			return nil // the batch ends past the caller's limit
		}
		if e.Magic == 2 || e.BaseOffset >= 0 {
			if e.BaseOffset < s.base || e.BaseOffset <= prevLast || e.LastOffset < e.BaseOffset {
				return fmt.Errorf("%w: %s position %d: a batch of offsets %d..%d after offset %d, in the segment based at %d",
					backend.ErrCorruptRecord, s.logPath, pos, e.BaseOffset, e.LastOffset, prevLast, s.base)
			}
		} else if e.LastOffset <= prevLast {
			return fmt.Errorf("%w: %s position %d: an entry ending at offset %d after offset %d",
				backend.ErrCorruptRecord, s.logPath, pos, e.LastOffset, prevLast)
		}
		prevLast = e.LastOffset
		if !fn(e) {
			return nil
		}
		pos += e.Size
	}
	return nil
}

// mapping returns a sealed segment's .log mapped read-only, mapping it
// once it has been looked up mapAfterReads times since its files opened;
// nil before, for other segments or when mapping fails (the caller then
// reads with pread).
func (s *segFile) mapping() []byte {
	s.used.Store(true)
	s.mu.Lock()
	if s.mapped != nil || !s.sealed || s.readOnly || s.mapFailed {
		m := s.mapped
		s.mu.Unlock()
		return m
	}
	if s.reads.Load() < mapAfterReads {
		s.mu.Unlock()
		return nil
	}
	m := s.mapLocked()
	count := s.toBudgetLocked()
	s.mu.Unlock()
	if count {
		s.opts.budget.opened(s)
	}
	return m
}

// mapAfterReads is the lookup since a sealed segment's files opened that
// maps its .log; the ones before it read with pread. Measured here (2
// shared cores): an mmap, three page faults and the munmap at eviction
// cost 3.7-4.5 µs, a read through pread 0.7-1 µs more than one through
// the mapping (a pread of the headers, one of the bytes, 0.3-0.4 µs
// each). So a segment is read as often through pread as its mapping
// would cost before it is mapped (ski rental: never more than twice the
// better choice made in hindsight). A log reading more segments at random
// than it keeps open reopens most for a read or two: mapping them on the
// second read (as counting walks did) cost an mmap and a munmap for a
// third of its misses.
const mapAfterReads = 4

// mapLocked maps the sealed segment's .log. REQUIRES: s.mu held.
func (s *segFile) mapLocked() []byte {
	size := s.size.Load()
	f, err := s.fileLocked()
	if err != nil || size <= 0 || size > math.MaxInt32 {
		s.mapFailed = true
		return nil
	}
	m, err := mmap.MapRegion(f.OS(), int(size), mmap.RDONLY, 0, 0)
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
func (s *segFile) readMapped(fn func() error) (err error) {
	old := debug.SetPanicOnFault(true)
	defer func() {
		debug.SetPanicOnFault(old)
		if r := recover(); r != nil {
			if _, fault := r.(interface{ Addr() uintptr }); !fault {
				panic(r)
			}
			err = fmt.Errorf("%w: %s: reading the mapped log failed: %v", backend.ErrCorruptRecord, s.logPath, r)
		}
	}()
	return fn()
}

// corrupt wraps a scan error of this segment's log: damaged framing is
// backend.ErrCorruptRecord, anything else (I/O) stays as it is.
func (s *segFile) corrupt(err error) error {
	if errors.Is(err, record.ErrCorrupt) || errors.Is(err, record.ErrTornTail) {
		return fmt.Errorf("%w: %s: %w", backend.ErrCorruptRecord, s.logPath, err)
	}
	return fmt.Errorf("local: %s: %w", s.logPath, err)
}

// lastModified returns the .log's mtime.
func (s *segFile) lastModified() time.Time {
	st, err := s.opts.fs.Stat(s.logPath)
	if err != nil {
		return time.Time{}
	}
	return st.ModTime()
}
