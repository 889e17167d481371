package local

import (
	"errors"
	"fmt"
	"io/fs"
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
	// its descriptor by name on first use; after the rename (and the
	// unlink, with no delay) the name is gone. The descriptor is opened
	// now, kept out of the file budget's reach, and closes with the last
	// reference.
	if err := leaveLog(s); err != nil {
		return err
	}
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
// close what the reader uses. Its .log descriptor is opened now, while
// the name is its own, and its indexes too when a reader holds it; from
// here on it opens nothing by name (segFile.left): a reader keeps what it
// has until its last reference closes it, and a reader that took the
// segment only now, whose indexes it never read, gets a retryable
// backend.ErrStorage, never another segment's index.
func leaveLog(s *segFile) error {
	_, err := s.file()
	if s.refs.Load() > 1 {
		s.indexes() // an error is the reader's: it finds no index
	}
	s.mu.Lock()
	s.left = true
	s.mu.Unlock()
	s.opts.budget.forget(s)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
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
