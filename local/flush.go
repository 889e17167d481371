package local

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"sync/atomic"
	"time"

	"github.com/tierlog/tierlog/vfs"
)

// Durability: what Flush syncs, and the directory entries it syncs only
// when one changed (entryFS). The package doc's "Files" section says what
// a recovery rebuilds instead.

// Flush makes every appended byte durable and advances the recovery point.
func (l *Log) Flush() error {
	if err := l.checkWritable(); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.flushLocked()
}

// flushLocked makes every appended byte durable and moves the recovery
// point to the log end. It fsyncs what a recovery would not rebuild:
//
//   - each segment sealed since the recovery point, and the one holding
//     the offset before it (a background flush after its roll usually
//     did already): its .log and both indexes,
//     since once the recovery point passes a segment, recovery trusts its
//     indexes (Kafka's LogSegment.flush);
//   - the active segment's .log (and .txnindex, when it has one), but not
//     its indexes: after an unclean shutdown recovery validates every
//     segment from the one holding the offset before the recovery point
//     on (Log.recover), and the point set here is the log end, whose
//     previous offset the active segment holds even after a roll at the
//     log end, so the active segment's indexes are always rebuilt from
//     its .log. A clean shutdown, which trusts them, makes them durable
//     in Close;
//   - the directory, only when a name in it was created, renamed or
//     removed since its last sync (entryFS counts them), and its parent
//     after Open created it.
//
// TestCrashPowerLoss proves it against a model of what a power loss keeps.
// An fsync error fails the log (see fail): the kernel may have dropped the
// pages, so retrying proves nothing.
// REQUIRES: l.mu held.
func (l *Log) flushLocked() error {
	leo := l.leo.Load()
	rp := l.recoveryPoint.Load()
	if !l.dirty && rp == leo {
		return l.takeFlushErr() // nothing new: no fsync
	}
	start := time.Now()
	segs := l.segments()
	var errs []error
	// The sealed segments from the one whose successor begins at or past
	// rp: the segment holding rp-1 may have been active when a flush set
	// rp, its indexes not yet durable (a roll at rp). Found by a binary
	// search, not a walk over every segment of the log.
	from := sort.Search(len(segs)-1, func(i int) bool { return segs[i+1].base >= rp })
	for _, s := range segs[from : len(segs)-1] {
		errs = append(errs, syncSealed(s))
	}
	if l.act != nil {
		errs = append(errs, l.act.sync(false))
	}
	if err := errors.Join(errs...); err != nil {
		return l.fail(err)
	}
	if err := l.syncDirIfChanged(); err != nil {
		return l.fail(err)
	}
	if l.newDir {
		if err := l.segOpts.fs.SyncDir(filepath.Dir(l.dir)); err != nil {
			return l.fail(fmt.Errorf("local: fsync dir %s: %w", filepath.Dir(l.dir), err))
		}
		l.newDir = false
	}
	l.recoveryPoint.Store(leo)
	l.unflushed = 0
	l.dirty = false
	l.lastFlush = l.now()
	l.metrics.Flushes.Add(1)
	l.metrics.FlushLatency.Since(start)
	return l.takeFlushErr()
}

// syncSealed fsyncs a sealed segment's .log and indexes.
func syncSealed(s *segFile) error {
	if !s.acquire() {
		return nil // gone meanwhile (retention): nothing to make durable
	}
	defer s.release()
	f, err := s.file()
	if errors.Is(err, fs.ErrNotExist) {
		return nil // renamed away meanwhile (retention): nothing to make durable
	}
	if err != nil {
		return err
	}
	return syncSegmentFiles(s, f)
}

// syncSegmentFiles fsyncs a segment's .log through f and its indexes.
func syncSegmentFiles(s *segFile, f vfs.File) error {
	if err := f.Sync(); err != nil {
		return fmt.Errorf("local: fsync %s: %w", s.logPath, err)
	}
	s.mu.Lock()
	oi, ti := s.oi, s.ti
	s.mu.Unlock()
	var errs []error
	if oi != nil {
		errs = append(errs, flushIndex(oi))
	}
	if ti != nil {
		errs = append(errs, flushIndex(ti))
	}
	return errors.Join(errs...)
}

func (l *Log) takeFlushErr() error {
	l.flushErrMu.Lock()
	defer l.flushErrMu.Unlock()
	err := l.flushErr
	l.flushErr = nil
	if err != nil {
		return l.fail(err)
	}
	return nil
}

func (l *Log) syncDir() error {
	if err := l.segOpts.fs.SyncDir(l.dir); err != nil {
		return fmt.Errorf("local: fsync dir %s: %w", l.dir, err)
	}
	return nil
}

// syncDirIfChanged syncs the log's directory when a name in it changed
// since its last sync.
func (l *Log) syncDirIfChanged() error {
	if !l.segOpts.fs.(*entryFS).changed() {
		return nil
	}
	return l.syncDir()
}

// entryFS is a log's filesystem: the caller's, counting the changes to
// directory entries (a file created, renamed or removed) so that a flush
// syncs the directory only when one since its last sync may not be
// durable. Every file of a log is in its directory, so any change counts.
// A change is counted once its call returns and a sync covers the changes
// counted before it started: a change racing a sync is left for the next.
type entryFS struct {
	vfs.FS
	dir     string
	changes atomic.Int64 // entry changes made
	synced  atomic.Int64 // of them, those a SyncDir of dir made durable
}

func (e *entryFS) changed() bool { return e.changes.Load() != e.synced.Load() }

func (e *entryFS) OpenFile(name string, flag int, perm fs.FileMode) (vfs.File, error) {
	f, err := e.FS.OpenFile(name, flag, perm)
	if flag&os.O_CREATE != 0 {
		e.changes.Add(1)
	}
	return f, err
}

func (e *entryFS) Remove(name string) error {
	defer e.changes.Add(1)
	return e.FS.Remove(name)
}

func (e *entryFS) RemoveAll(name string) error {
	defer e.changes.Add(1)
	return e.FS.RemoveAll(name)
}

func (e *entryFS) Rename(oldpath, newpath string) error {
	defer e.changes.Add(1)
	return e.FS.Rename(oldpath, newpath)
}

func (e *entryFS) SyncDir(name string) error {
	n := e.changes.Load()
	if err := e.FS.SyncDir(name); err != nil {
		return err
	}
	if name == e.dir {
		for {
			s := e.synced.Load()
			if s >= n || e.synced.CompareAndSwap(s, n) {
				break
			}
		}
	}
	return nil
}
