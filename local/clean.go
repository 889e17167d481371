package local

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// This file is the local log's side of compaction: what a cleaner needs to
// read closed segments and to replace a run of them with one cleaned file,
// crash-safely (Kafka's LocalLog.replaceSegments).

// replaceHook, when set (by tests), is called at each durable step of
// ReplaceSegments: a crash there must leave a recoverable directory.
var replaceHook func(step string)

func replaceStep(step string) {
	if replaceHook != nil {
		replaceHook(step)
	}
}

// SetReplaceHook installs f to be called at each durable step of
// ReplaceSegments (nil removes it). It exists for the crash tests of this
// package and of the cleaner, which kill their process at each step; it
// is not for production use.
func SetReplaceHook(f func(step string)) { replaceHook = f }

// ErrSegmentsChanged means the segments a cleaner read are no longer the
// log's (retention, a truncation or another cleaner replaced them); the
// cleaned file is discarded and the next round starts over.
var ErrSegmentsChanged = errors.New("local: segments changed during cleaning")

// LargestTimestamp returns the largest record timestamp of the segment
// whose base offset is base (-1 when it has none), from its time index.
func (l *Log) LargestTimestamp(base int64) (int64, error) {
	for _, s := range l.segments() {
		if s.base != base {
			continue
		}
		if !s.acquire() {
			return -1, l.closedErr()
		}
		defer s.release()
		return s.largestTimestamp()
	}
	return -1, fmt.Errorf("%w: no segment with base %d in %s", ErrSegmentsChanged, base, l.dir)
}

// SegmentReader reads one closed segment's .log. It holds the segment's
// files: they stay readable (even after a cleaner or retention removed the
// segment from the log) until Close.
type SegmentReader struct {
	s    *segment
	f    *os.File
	size int64
	path string
}

// OpenSegment opens the closed segment whose base offset is base.
func (l *Log) OpenSegment(base int64) (*SegmentReader, error) {
	segs := l.segments()
	for _, s := range segs[:len(segs)-1] {
		if s.base != base {
			continue
		}
		if !s.acquire() {
			return nil, l.closedErr()
		}
		f, err := s.file()
		if err != nil {
			s.release()
			return nil, err
		}
		return &SegmentReader{s: s, f: f, size: s.size.Load(), path: s.logPath}, nil
	}
	return nil, fmt.Errorf("%w: no closed segment with base %d in %s", ErrSegmentsChanged, base, l.dir)
}

// ReadAt implements io.ReaderAt over the segment's .log.
func (r *SegmentReader) ReadAt(p []byte, off int64) (int, error) { return r.f.ReadAt(p, off) }

// Size is the .log's length in bytes.
func (r *SegmentReader) Size() int64 { return r.size }

// Path is the .log's path when it was opened (also after Close, for
// error messages).
func (r *SegmentReader) Path() string { return r.path }

// Close releases the segment.
func (r *SegmentReader) Close() error {
	if r.s != nil {
		r.s.release()
		r.s = nil
	}
	return nil
}

// Truncations counts the truncations that removed records from l. A
// cleaner reads it before it starts: a truncation during its round would
// make the offsets it mapped point at records that no longer exist, so
// ReplaceSegments refuses the round's files (Kafka aborts cleaning on
// truncation for the same reason).
func (l *Log) Truncations() int64 { return l.truncations.Load() }

// CleanedPath is where a cleaner writes the file replacing the segments
// from base on: <base>.log.cleaned in the log's directory, which recovery
// deletes if the process dies before ReplaceSegments.
func (l *Log) CleanedPath(base int64) string {
	return filepath.Join(l.dir, FileName(base, LogSuffix)+CleanedSuffix)
}

// ReplaceSegments replaces the consecutive closed segments whose bases are
// bases with the file at CleanedPath(bases[0]), which must hold batches
// covering up to (and ending exactly at) the last one's end: its last
// batch's next offset is the following segment's base. The file is synced
// here; its mtime is set to mtime (the newest replaced segment's, as Kafka
// does, so time retention of mtime-only segments does not restart).
// truncations is Truncations() as read before the cleaner began; if the
// log was truncated since, nothing changes and ErrSegmentsChanged returns.
//
// The replacement is crash-safe: the file becomes <base>.log.swap, the old
// segments' files become .deleted, and the swap file takes the final name;
// a crash at any point leaves either the old segments or the new one once
// the log is reopened (see removeTempFilesAndSwap). Readers holding an old
// segment finish on its files.
func (l *Log) ReplaceSegments(bases []int64, mtime time.Time, truncations int64) error {
	if l.readOnly {
		return ErrReadOnly
	}
	if len(bases) == 0 {
		return errors.New("local: ReplaceSegments needs at least one segment")
	}
	cleaned := l.CleanedPath(bases[0])
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed.Load() {
		return l.closedErr()
	}
	if n := l.truncations.Load(); n != truncations {
		return fmt.Errorf("%w: %s was truncated during the cleaning round", ErrSegmentsChanged, l.dir)
	}
	segs := l.segments()
	first := -1
	for i, s := range segs {
		if s.base == bases[0] {
			first = i
			break
		}
	}
	if first < 0 || first+len(bases) >= len(segs) {
		return fmt.Errorf("%w: segments from %d are not closed segments of %s", ErrSegmentsChanged, bases[0], l.dir)
	}
	for j, b := range bases {
		if segs[first+j].base != b {
			return fmt.Errorf("%w: segment %d of %s is gone", ErrSegmentsChanged, b, l.dir)
		}
	}
	old := segs[first : first+len(bases)]
	next := segs[first+len(bases)].base
	got, err := nextOffsetOfFile(cleaned, bases[0])
	if err != nil {
		return err
	}
	if got != next {
		return fmt.Errorf("local: cleaned file %s ends at offset %d, the segments it replaces at %d", cleaned, got, next)
	}
	f, err := os.OpenFile(cleaned, os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("local: %w", err)
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("local: sync %s: %w", cleaned, err)
	}
	if !mtime.IsZero() {
		if err := os.Chtimes(cleaned, mtime, mtime); err != nil {
			return fmt.Errorf("local: %w", err)
		}
	}

	replaceStep("cleaned")
	// From here on a crash is resolved by recovery: first the swap file.
	swap := filepath.Join(l.dir, FileName(bases[0], LogSuffix)+SwapSuffix)
	if err := os.Rename(cleaned, swap); err != nil {
		return fmt.Errorf("local: %w", err)
	}
	if err := syncDir(l.dir); err != nil {
		return err
	}
	replaceStep("swap")
	for _, s := range old {
		if _, err := s.renameDeleted(); err != nil {
			return err
		}
		replaceStep("deleted")
	}
	ns := newSegment(l.dir, bases[0], 0, &l.segOpts, mtime)
	if err := os.Rename(swap, ns.path(LogSuffix)); err != nil {
		return fmt.Errorf("local: %w", err)
	}
	replaceStep("renamed")
	ns.mu.Lock()
	res, err := ns.rebuildLocked(false)
	if err == nil && res.corruption != nil {
		err = fmt.Errorf("local: cleaned segment %s: %w", ns.path(LogSuffix), res.corruption)
	}
	if err == nil {
		err = errors.Join(ns.oi.Flush(), ns.ti.Flush())
	}
	ns.sealed = true
	cerr := ns.closeFiles() // reopened lazily, under the file budget
	ns.mu.Unlock()
	if err == nil {
		err = cerr
	}
	if err == nil {
		err = syncDir(l.dir)
	}
	if err != nil {
		// The old files are already .deleted: the log must not go on
		// without them. A reopen completes or rolls back the swap.
		return fmt.Errorf("local: replace segments from %d (reopen the log to recover): %w", bases[0], err)
	}
	repl := make([]*segment, 0, len(segs)-len(old)+1)
	repl = append(repl, segs[:first]...)
	repl = append(repl, ns)
	repl = append(repl, segs[first+len(bases):]...)
	l.setSegments(repl)
	replaceStep("indexed")
	for _, s := range old {
		s.release()
		l.removeDeletedFiles(s)
	}
	replaceStep("done")
	l.logger.Info("replaced segments with a cleaned one", "base", bases[0], "segments", len(bases), "bytes", res.validBytes)
	return nil
}
