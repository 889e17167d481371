package local

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"

	"github.com/tierlog/tierlog/producerstate"
	"github.com/tierlog/tierlog/record"
	"github.com/tierlog/tierlog/vfs"
)

// This file is the local log's door for the layers above it: a handle that
// pins a closed segment (the tiered uploader and the cleaner read through
// it, never by path), and a cleaner's crash-safe replacement of a run of
// closed segments with one cleaned file (Kafka's LocalLog.replaceSegments).

var (
	// ErrSegmentsChanged means the segments a caller read are no longer the
	// log's (retention, a truncation or another cleaner replaced them): a
	// cleaned file is discarded and the next round starts over.
	ErrSegmentsChanged = errors.New("local: segments changed")
	// ErrBadReplacement means a cleaned file does not fit the segments it
	// would replace: a batch outside their range, offsets that do not
	// rise, or nothing of the last segment (a crash would then not know
	// where the replacement ends). Nothing is replaced.
	ErrBadReplacement = errors.New("local: cleaned file does not fit the segments it replaces")
)

// SegmentHandle pins one closed segment: its .log and indexes stay
// readable, even after retention, a truncation or a cleaner took the
// segment out of the log, until Close. A closed segment's bytes never
// change.
type SegmentHandle struct {
	s          *segFile
	f          vfs.File
	size, next int64
}

// OpenSegment pins the closed (not last) segment whose base offset is
// base. The caller MUST Close the handle.
func (sg Segments) OpenSegment(base int64) (*SegmentHandle, error) {
	l := sg.l
	segs := l.segments()
	if i := segmentWithBase(segs, base); i >= 0 && i < len(segs)-1 {
		s := segs[i]
		if !s.acquire() {
			return nil, l.closedErr()
		}
		f, err := s.file()
		if err != nil {
			s.release()
			return nil, err
		}
		return &SegmentHandle{s: s, f: f, size: s.size.Load(), next: segs[i+1].base}, nil
	}
	return nil, fmt.Errorf("%w: no closed segment with base %d in %s", ErrSegmentsChanged, base, l.dir)
}

// ReadAt implements io.ReaderAt over the segment's .log.
func (h *SegmentHandle) ReadAt(p []byte, off int64) (int, error) { return h.f.ReadAt(p, off) }

// BaseOffset is the segment's base offset.
func (h *SegmentHandle) BaseOffset() int64 { return h.s.base }

// NextOffset is the base of the segment after it (when it was opened): the
// segment holds offsets below it.
func (h *SegmentHandle) NextOffset() int64 { return h.next }

// Size is the .log's length in bytes.
func (h *SegmentHandle) Size() int64 { return h.size }

// Path is the .log's path when it was opened (for messages).
func (h *SegmentHandle) Path() string { return h.s.logPath }

// ModTime is the .log's modification time.
func (h *SegmentHandle) ModTime() time.Time { return h.s.lastModified() }

// IndexBytes returns the segment's offset index (its whole entries, as a
// closed segment's trimmed .index holds them), checked against the log
// and rebuilt from it when missing.
func (h *SegmentHandle) IndexBytes() ([]byte, error) {
	oi, _, err := h.s.indexes()
	if err != nil {
		return nil, err
	}
	return oi.AppendEntries(nil), nil
}

// TimeIndexBytes returns the segment's time index entries; a time index
// that fails its checks is rebuilt from the log first.
func (h *SegmentHandle) TimeIndexBytes() ([]byte, error) {
	_, ti, err := h.s.indexes()
	if err != nil {
		return nil, err
	}
	return ti.AppendEntries(nil), nil
}

// TxnIndexBytes returns the segment's .txnindex entries (nil when it has
// no aborted transactions).
func (h *SegmentHandle) TxnIndexBytes() ([]byte, error) {
	b, err := h.s.txnIndexBytes()
	if len(b) == 0 {
		b = nil
	}
	return b, err
}

// SnapshotBytes returns the producer snapshot describing the log up to the
// segment's end (taken when the next segment began), or nil when there is
// none (a log written before snapshots, or one whose snapshot was lost).
func (h *SegmentHandle) SnapshotBytes() ([]byte, error) {
	b, err := vfs.ReadFile(h.s.opts.fs, h.s.opts.path(h.next, SnapshotSuffix))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("local: read %s: %w", h.s.opts.path(h.next, SnapshotSuffix), err)
	}
	return b, nil
}

// LargestTimestamp is the segment's largest record timestamp (-1 when it
// has none).
func (h *SegmentHandle) LargestTimestamp() (int64, error) {
	ts, _, err := h.s.largestTimestamp()
	return ts, err
}

// Close releases the segment; it is idempotent.
func (h *SegmentHandle) Close() error {
	if h.s != nil {
		h.s.release()
		h.s = nil
	}
	return nil
}

// LargestTimestamp returns the largest record timestamp of the segment
// whose base offset is base (-1 when it has none), from its time index.
func (sg Segments) LargestTimestamp(base int64) (int64, error) {
	l := sg.l
	segs := l.segments()
	if i := segmentWithBase(segs, base); i >= 0 {
		s := segs[i]
		if !s.acquire() {
			return -1, l.closedErr()
		}
		defer s.release()
		ts, _, err := s.largestTimestamp()
		return ts, err
	}
	return -1, fmt.Errorf("%w: no segment with base %d in %s", ErrSegmentsChanged, base, l.dir)
}

// IndexSizes returns the bytes of the offset and time index entries of
// the closed segment whose base is base (what a cleaner's grouping bounds
// by segment.index.bytes); a missing index counts 0 (it is rebuilt).
func (sg Segments) IndexSizes(base int64) (offsetIndex, timeIndex int64, err error) {
	l := sg.l
	segs := l.segments()
	if i := segmentWithBase(segs, base); i >= 0 {
		s := segs[i]
		for i, suf := range []string{IndexSuffix, TimeIndexSuffix} {
			st, err := l.segOpts.fs.Stat(s.path(suf))
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			if err != nil {
				return 0, 0, fmt.Errorf("local: %w", err)
			}
			if i == 0 {
				offsetIndex = st.Size()
			} else {
				timeIndex = st.Size()
			}
		}
		return offsetIndex, timeIndex, nil
	}
	return 0, 0, fmt.Errorf("%w: no segment with base %d in %s", ErrSegmentsChanged, base, l.dir)
}

// Cleaning is one round of a log cleaner. It notes how often the log was
// truncated when the round began: a truncation during the round makes the
// offsets the cleaner mapped point at records that no longer exist, so
// every replacement of the round is then refused (Kafka aborts cleaning on
// truncation for the same reason).
type Cleaning struct {
	l           *Log
	truncations int64
}

// BeginCleaning starts a cleaner's round; call it before reading anything.
func (sg Segments) BeginCleaning() *Cleaning {
	return &Cleaning{l: sg.l, truncations: sg.l.truncations.Load()}
}

// Replacement is one cleaned file being written to replace consecutive
// closed segments. Write the batches, then Commit (or Abort). Until Commit
// the file is <base>.log.cleaned, which a reopen after a crash removes.
type Replacement struct {
	c     *Cleaning
	bases []int64
	path  string
	w     vfs.File
	off   int64
	err   error
	// txns are the aborted transactions whose ABORT markers the cleaned
	// file keeps: its .txnindex (Kafka's cleaner writes the same).
	txns *producerstate.TxnIndex
}

// NewReplacement creates the cleaned file that will replace the closed
// segments whose bases are bases (consecutive, in order).
func (c *Cleaning) NewReplacement(bases []int64) (*Replacement, error) {
	l := c.l
	if l.readOnly {
		return nil, ErrReadOnly
	}
	if len(bases) == 0 {
		return nil, errors.New("local: a replacement needs at least one segment")
	}
	path := l.segOpts.path(bases[0], LogSuffix) + CleanedSuffix
	w, err := l.segOpts.fs.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("local: create %s: %w", path, err)
	}
	return &Replacement{c: c, bases: append([]int64(nil), bases...), path: path, w: w}, nil
}

// Path is the cleaned file's path (for messages).
func (r *Replacement) Path() string { return r.path }

// Shorten makes the replacement replace only its first n segments (a
// cleaner that found nothing to keep in the others leaves them for a
// later replacement); the file must then hold batches of the n-th.
func (r *Replacement) Shorten(n int) error {
	if n < 1 || n > len(r.bases) {
		return fmt.Errorf("local: a replacement of %d segments from %d cannot be shortened to %d", len(r.bases), r.bases[0], n)
	}
	r.bases = r.bases[:n]
	return nil
}

// Write appends p to the cleaned file.
func (r *Replacement) Write(p []byte) (int, error) {
	if r.err != nil {
		return 0, r.err
	}
	n, err := r.w.WriteAt(p, r.off)
	r.off += int64(n)
	if err != nil {
		r.err = fmt.Errorf("local: write %s: %w", r.path, err)
		return n, r.err
	}
	return n, nil
}

// AddAborted records that the cleaned file keeps the ABORT marker of t:
// the new segment's .txnindex lists it. Markers come in offset order.
func (r *Replacement) AddAborted(t producerstate.AbortedTxn) error {
	if r.txns == nil {
		r.txns, _ = producerstate.NewTxnIndex(r.bases[0], nil)
	}
	if _, err := r.txns.Append(t); err != nil {
		return fmt.Errorf("local: %s: %w", r.path, err)
	}
	return nil
}

// Abort removes the cleaned file.
func (r *Replacement) Abort() error {
	if r.w == nil {
		return nil
	}
	r.w.Close()
	r.w = nil
	if err := r.c.l.segOpts.fs.Remove(r.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("local: remove %s: %w", r.path, err)
	}
	return nil
}

// Commit replaces the segments with the cleaned file, whose batches must
// lie within their range [first base, the following segment's base), in
// rising offsets, the last of them in the last replaced segment's range
// (so that recovery after a crash knows which segments the file
// replaces, from its base to its last offset); only a replacement of one
// segment may be empty. A file that does not fit is ErrBadReplacement. It
// fails with ErrSegmentsChanged when the log was truncated since
// BeginCleaning or the segments are no longer the log's. Either way
// nothing changes and the file is removed. The cleaned segment takes the newest mtime of the segments it
// replaces (as Kafka does, so time retention of mtime-only segments does
// not restart).
//
// It is crash-safe: the file is synced and becomes <base>.log.swap, the old
// segments' files become .deleted, and the swap file takes the final name;
// a crash at any point leaves either the old segments or the new one once
// the log is reopened (see removeTempFilesAndSwap). Readers holding an old
// segment finish on its files.
func (r *Replacement) Commit() (err error) {
	if r.w == nil {
		return errors.New("local: replacement already committed or aborted")
	}
	defer func() {
		if err != nil {
			r.Abort()
		}
	}()
	if r.err != nil {
		return r.err
	}
	if err := r.w.Sync(); err != nil {
		return fmt.Errorf("local: fsync %s: %w", r.path, err)
	}
	if err := r.w.Close(); err != nil {
		return fmt.Errorf("local: close %s: %w", r.path, err)
	}
	r.w = nil
	l := r.c.l
	txnCleaned := ""
	if r.txns != nil && r.txns.Len() > 0 {
		txnCleaned = l.segOpts.path(r.bases[0], TxnIndexSuffix) + CleanedSuffix
		if err := writeSynced(l.segOpts.fs, txnCleaned, r.txns.Bytes()); err != nil {
			return err
		}
	}
	return l.replaceSegments(r.bases, r.path, txnCleaned, r.c.truncations)
}

// writeSynced writes data to a new file at path and fsyncs it; a failure
// removes it.
func writeSynced(fsys vfs.FS, path string, data []byte) (err error) {
	f, err := fsys.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("local: write %s: %w", path, err)
	}
	defer func() {
		if err != nil {
			fsys.Remove(path)
		}
	}()
	_, err = f.WriteAt(data, 0)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("local: write %s: %w", path, err)
	}
	return nil
}

// checkReplacementLocked finds the segments a replacement names among segs
// (consecutive closed segments) and checks that the cleaned file ends
// exactly where they do; it returns the first one's index and the base of
// the segment after them. REQUIRES: l.mu held.
func (l *Log) checkReplacementLocked(segs []*segFile, bases []int64, cleaned string) (first int, next int64, err error) {
	first = -1
	for i, s := range segs {
		if s.base == bases[0] {
			first = i
			break
		}
	}
	if first < 0 || first+len(bases) >= len(segs) {
		return 0, 0, fmt.Errorf("%w: segments from %d are not closed segments of %s", ErrSegmentsChanged, bases[0], l.dir)
	}
	for j, b := range bases {
		if segs[first+j].base != b {
			return 0, 0, fmt.Errorf("%w: segment %d of %s is gone", ErrSegmentsChanged, b, l.dir)
		}
	}
	next = segs[first+len(bases)].base
	if err := l.checkCleanedFile(cleaned, bases, next); err != nil {
		return 0, 0, err
	}
	return first, next, nil
}

// checkCleanedFile checks that the batches of the cleaned file at path
// fit the segments from bases[0] to next (see Commit).
func (l *Log) checkCleanedFile(path string, bases []int64, next int64) error {
	f, err := l.segOpts.fs.OpenFile(path, os.O_RDONLY, 0)
	if err != nil {
		return fmt.Errorf("local: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("local: %w", err)
	}
	lastBase := bases[len(bases)-1]
	prev := bases[0] - 1
	sc := record.NewScanner(f, 0, st.Size(), record.ScanOptions{HeadersOnly: true})
	for sc.Next() {
		e := sc.Entry()
		if e.BaseOffset <= prev || e.LastOffset < e.BaseOffset || e.LastOffset >= next {
			return fmt.Errorf("%w: %s holds the batch of offsets %d..%d at position %d, after offset %d, replacing [%d, %d)",
				ErrBadReplacement, path, e.BaseOffset, e.LastOffset, e.Position, prev, bases[0], next)
		}
		prev = e.LastOffset
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("%w: %s: %w", ErrBadReplacement, path, err)
	}
	if prev < lastBase && (len(bases) > 1 || st.Size() > 0) {
		return fmt.Errorf("%w: %s (%d bytes) ends at offset %d, before the last segment it replaces (%d, of %d from %d)",
			ErrBadReplacement, path, st.Size(), prev, lastBase, len(bases), bases[0])
	}
	return nil
}

// replaceSegments is Commit under the writer lock.
func (l *Log) replaceSegments(bases []int64, cleaned, txnCleaned string, truncations int64) (err error) {
	fsys := l.segOpts.fs
	defer func() {
		if err != nil {
			fsys.Remove(cleaned) // a no-op once it was renamed
			if txnCleaned != "" {
				fsys.Remove(txnCleaned)
			}
		}
	}()
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.checkWritable(); err != nil {
		return err
	}
	if n := l.truncations.Load(); n != truncations {
		return fmt.Errorf("%w: %s was truncated during the cleaning round", ErrSegmentsChanged, l.dir)
	}
	if l.cfg.Load().RemoteStorageEnable {
		// Its closed segments may be in a bucket now, as they are: a
		// local copy that differs would stop local retention for good
		// (the bucket's copy is cleaned in the bucket).
		return fmt.Errorf("%w: %s became tiered during the cleaning round", ErrSegmentsChanged, l.dir)
	}
	segs := l.segments()
	first, next, err := l.checkReplacementLocked(segs, bases, cleaned)
	if err != nil {
		return err
	}
	old := segs[first : first+len(bases)]
	var mtime time.Time
	for _, s := range old {
		if t := s.lastModified(); t.After(mtime) {
			mtime = t
		}
	}
	if !mtime.IsZero() {
		if err := fsys.Chtimes(cleaned, mtime, mtime); err != nil {
			return fmt.Errorf("local: %w", err)
		}
	}
	// From here on a crash is resolved by recovery: first the swap file
	// (the commit point: a .cleaned file left beside it, the .txnindex's,
	// rolls it back), then the .txnindex's swap file.
	swap := l.segOpts.path(bases[0], LogSuffix) + SwapSuffix
	if err := fsys.Rename(cleaned, swap); err != nil {
		return fmt.Errorf("local: %w", err)
	}
	txnSwap := ""
	if txnCleaned != "" {
		txnSwap = l.segOpts.path(bases[0], TxnIndexSuffix) + SwapSuffix
		if err := fsys.Rename(txnCleaned, txnSwap); err != nil {
			return l.fail(fmt.Errorf("replace segments from %d: %w", bases[0], err)) // a reopen rolls back
		}
	}
	if err := l.syncDir(); err != nil {
		return l.fail(err) // the swap file is there: a reopen completes it
	}
	// A failure past this point leaves the directory for a reopen to
	// complete or roll back: the log must not go on.
	for _, s := range old {
		leaveLog(s) // while its names are its own (the replacement takes the first's)
		if _, err := renameDeleted(s); err != nil {
			return l.fail(fmt.Errorf("replace segments from %d: %w", bases[0], err))
		}
	}
	ns, err := l.installCleaned(swap, txnSwap, bases[0], next, mtime)
	if err != nil {
		return l.fail(fmt.Errorf("replace segments from %d: %w", bases[0], err))
	}
	repl := make([]*segFile, 0, len(segs)-len(old)+1)
	repl = append(repl, segs[:first]...)
	repl = append(repl, ns)
	repl = append(repl, segs[first+len(bases):]...)
	l.segOpts.cleaned.Store(true)
	l.setSegments(repl)
	for _, s := range old {
		s.release()
		l.removeDeletedFiles(s)
	}
	l.logger.Info("replaced segments with a cleaned one", "base", bases[0], "segments", len(bases), "bytes", ns.size.Load())
	return nil
}

// installCleaned renames a replacement's swap file to its segment name,
// rebuilds its indexes (synced) and syncs the directory; the new segment's
// files are then closed, to be reopened lazily under the file budget.
// REQUIRES: l.mu held.
func (l *Log) installCleaned(swap, txnSwap string, base, next int64, mtime time.Time) (*segFile, error) {
	fsys := l.segOpts.fs
	ns := newSegFile(&l.segOpts, base, 0, mtime)
	if err := fsys.Rename(swap, ns.logPath); err != nil {
		return nil, err
	}
	if txnSwap != "" {
		if err := fsys.Rename(txnSwap, ns.path(TxnIndexSuffix)); err != nil {
			return nil, err
		}
	}
	st, err := fsys.Stat(ns.logPath)
	if err != nil {
		return nil, err
	}
	ns.size.Store(st.Size())
	ns.mu.Lock()
	res, err := rebuildSealed(ns)
	if err == nil && res.corruption != nil {
		err = fmt.Errorf("cleaned segment %s: %w", ns.logPath, res.corruption)
	}
	ns.sealed, ns.next = true, next
	if cerr := ns.closeFilesLocked(); err == nil {
		err = cerr
	}
	ns.mu.Unlock()
	if err == nil {
		err = l.syncDir()
	}
	return ns, err
}
