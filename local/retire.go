package local

import (
	"errors"
	"fmt"
	"io/fs"

	"github.com/tierlog/tierlog/index"
)

// Retiring segments: out of the published list, renamed to .deleted while
// readers may still hold them, unlinked after file.delete.delay.ms.

func (l *Log) removeAll(paths []string) {
	for _, p := range paths {
		l.segOpts.fs.Remove(p)
	}
}

// retireSegment takes a segment out of the log's hands: its files are
// renamed to .deleted (readers holding it keep reading them), the log's
// reference is dropped, and the files are unlinked after
// file.delete.delay.ms. REQUIRES: l.mu held (or the log not shared); the
// segment is no longer in the published list, or is about to leave it.
func (l *Log) retireSegment(s *segFile) error {
	// A reader that took the segment before it left the list would open
	// its files by name on first use; after the rename (and the unlink,
	// with no delay) the names are gone, or another segment's. What it
	// may read is opened now (leaveLog), kept out of the file budget's
	// reach, and closes with the last reference.
	leaveLog(s)
	if _, err := renameDeleted(s); err != nil {
		return err
	}
	s.release()
	l.removeDeletedFiles(s)
	return nil
}

// leaveLog takes s out of the file budget's reach for good as it leaves
// the log (retired, replaced by the cleaner, cut by a truncation), before
// its files are renamed and before the log's reference goes: the
// budget's clocks would take a reader's one reference for the log's and
// close what the reader uses. When a reader holds it, what the reader may
// still read is opened now, while the names are its own: the .log
// descriptor, the offset and time indexes (never rebuilt here: a missing
// or damaged one stays unread) and the aborted-transaction index. From
// here on it opens nothing by name (segFile.left): a reader keeps what it
// has until its last reference closes it, and what was not opened (a
// reader that took the segment only now) is a retryable
// backend.ErrStorage, never another segment's file. Nothing is opened for
// a segment no reader holds, so a truncation of thousands of segments
// holds no descriptor more.
// errLeftLog is wrapped by the errors of a segment that left the log
// before a reader that took it opened what it needed (see leaveLog).
var errLeftLog = errors.New("left the log")

func leaveLog(s *segFile) {
	if s.refs.Load() > 1 {
		if _, err := s.file(); err != nil {
			s.opts.logger.Warn("a segment leaving the log: its reader will find no .log", "path", s.logPath, "err", err)
		}
		s.mu.Lock()
		s.loadForLeavingLocked()
		s.mu.Unlock()
	}
	s.mu.Lock()
	s.left = true
	s.mu.Unlock()
	s.opts.budget.forget(s)
}

// loadForLeavingLocked opens the indexes s has not, read-only, from their
// files: no rebuild (its log is leaving; a missing or damaged index stays
// unread) and no budget (s is leaving it). REQUIRES: s.mu held.
func (s *segFile) loadForLeavingLocked() {
	if s.oi == nil {
		if oi, err := index.OpenOffsetIndexReadOnly(s.opts.fs, s.path(IndexSuffix), s.base); err == nil {
			s.oi, s.checkedIndex = oi, false // checked against the log at first use
		}
	}
	if s.ti == nil {
		if ti, err := index.OpenTimeIndexReadOnly(s.opts.fs, s.path(TimeIndexSuffix), s.base); err == nil {
			if ti.SanityCheck() == nil && s.timeIndexFitsLocked(ti) == nil {
				s.ti = ti
			} else {
				ti.Close()
			}
		}
	}
	if !s.txnLoaded {
		s.txnIndexLocked() // an error leaves it unread: the reader's error
	}
}

// renameDeleted renames the segment's files to *.deleted (Kafka's
// asyncDeleteSegment first step) and returns the new paths.
func renameDeleted(s *segFile) ([]string, error) {
	var out []string
	for _, suf := range []string{LogSuffix, IndexSuffix, TimeIndexSuffix, TxnIndexSuffix} {
		from := s.path(suf)
		to := from + DeletedSuffix
		if err := s.opts.fs.Rename(from, to); err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			return out, fmt.Errorf("local: rename %s: %w", from, err)
		}
		out = append(out, to)
	}
	return out, nil
}

// removeDeletedFiles schedules the unlinking of a segment's .deleted files
// after file.delete.delay.ms (on the log's deletion deadline, see
// armDeletesLocked); with a delay of 0 they go now.
// REQUIRES: l.mu held (or the log not shared).
func (l *Log) removeDeletedFiles(s *segFile) {
	paths := []string{}
	for _, suf := range []string{LogSuffix, IndexSuffix, TimeIndexSuffix, TxnIndexSuffix} {
		paths = append(paths, s.path(suf)+DeletedSuffix)
	}
	if l.cfg.Load().FileDeleteDelayMs == 0 {
		l.removeAll(paths)
		return
	}
	l.pending = append(l.pending, &pendingDelete{paths: paths, retired: l.now()})
	l.armDeletesLocked()
}
