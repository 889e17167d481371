package local

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/producerstate"
	"github.com/tierlog/tierlog/vfs"
)

// DeleteOldSegments applies retention as Kafka's deleteOldSegments does:
// segments wholly below the log start offset always go; with
// cleanup.policy=delete, segments older than retention.ms (by their largest
// timestamp, else the file's mtime) and the oldest segments past
// retention.bytes go too. It never deletes at or above the high watermark,
// and never an empty active segment. It returns how many segments went.
//
// A tiered log (remote.storage.enable=true) applies only the log start
// rule here: its time and size rules are the tiered layer's, which deletes
// a local segment only once the bucket is shown to hold it (Kafka's
// local.retention.* and highestOffsetInRemoteStorage).
func (l *Log) DeleteOldSegments() (int, error) {
	if err := l.checkWritable(); err != nil {
		return 0, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	cfg := l.cfg.Load()
	return l.deleteOldSegmentsLocked(cfg.RetentionMs, cfg.RetentionBytes)
}

// deleteOldSegmentsLocked applies the log start rule and, for delete
// topics, the time and size rules with the given limits (-1: none).
// REQUIRES: l.mu held.
func (l *Log) deleteOldSegmentsLocked(retentionMs, retentionBytes int64) (int, error) {
	total := 0
	n, err := l.deleteSegmentsLocked("log start offset", func(_ *segFile, upper int64) (bool, error) {
		return upper <= l.logStart.Load(), nil
	})
	total += n
	if cfg := l.cfg.Load(); err != nil || !cfg.Delete() || cfg.RemoteStorageEnable {
		return total, err
	}
	if retentionMs >= 0 {
		now := l.now()
		n, err = l.deleteSegmentsLocked("retention.ms", func(s *segFile, _ int64) (bool, error) {
			if !s.acquire() {
				return false, nil
			}
			defer s.release()
			ts, _, err := s.largestTimestamp()
			if err != nil {
				return false, err
			}
			if ts < 0 {
				ts = s.lastModified().UnixMilli()
			}
			return now.UnixMilli()-ts > retentionMs, nil
		})
		total += n
		if err != nil {
			return total, err
		}
	}
	if retentionBytes >= 0 {
		var size int64
		for _, s := range l.segments() {
			size += s.size.Load()
		}
		diff := size - retentionBytes
		n, err = l.deleteSegmentsLocked("retention.bytes", func(s *segFile, _ int64) (bool, error) {
			if diff-s.size.Load() >= 0 {
				diff -= s.size.Load()
				return true, nil
			}
			return false, nil
		})
		total += n
	}
	return total, err
}

// deleteSegmentsLocked deletes segments from the oldest while pred holds
// (Kafka's deletableSegments walk), raising the log start offset first.
// REQUIRES: l.mu held.
func (l *Log) deleteSegmentsLocked(reason string, pred func(s *segFile, upperBound int64) (bool, error)) (int, error) {
	segs := l.segments()
	hw, leo := l.hw.Load(), l.leo.Load()
	n := 0
	for i, s := range segs {
		upper := leo
		if i+1 < len(segs) {
			upper = segs[i+1].base
		}
		if upper > hw || (i == len(segs)-1 && s.size.Load() == 0) {
			break
		}
		ok, err := pred(s, upper)
		if err != nil {
			return 0, err
		}
		if !ok {
			break
		}
		n++
	}
	if n == 0 {
		return 0, nil
	}
	if n == len(segs) {
		// Every segment goes, the active one included: roll first so the
		// log keeps an (empty) active segment.
		if _, err := l.rollLocked(leo, reason); err != nil {
			return 0, err
		}
		segs = l.segments()
	}
	gone, kept := segs[:n], segs[n:]
	l.dirty = true
	if kept[0].base > l.logStart.Load() {
		l.logStart.Store(kept[0].base)
		if l.hw.Load() < kept[0].base {
			l.hw.Store(kept[0].base)
		}
	}
	l.setSegments(append([]*segFile(nil), kept...))
	l.metrics.SegmentsDeleted.Add(int64(len(gone)))
	for _, s := range gone {
		if err := l.retireSegment(s); err != nil {
			return n, err
		}
		l.logger.Info("deleted segment", "base", s.base, "reason", reason)
	}
	return n, l.logStartMovedLocked()
}

// logStartMovedLocked fits what follows the log start to it: the epoch
// cache, the producer state (and its snapshots below it) and the last
// stable offset. REQUIRES: l.mu held.
func (l *Log) logStartMovedLocked() error {
	ls := l.logStart.Load()
	l.ps.OnLogStartIncremented(ls)
	l.publishLSO()
	snaps, err := l.listSnapshots()
	if err != nil {
		return err
	}
	for _, off := range snaps {
		if off < ls {
			if err := l.removeSnapshot(off); err != nil {
				return err
			}
		}
	}
	return l.epochs.fit(l)
}

// DeleteRecordsBefore raises the log start offset to offset and deletes the
// segments wholly below it; see backend.Partition.
func (l *Log) DeleteRecordsBefore(ctx context.Context, offset int64) error {
	return l.deleteBefore(ctx, offset, "log start offset")
}

// TrimLocalBefore is DeleteRecordsBefore for a tiered log's local
// retention: the local copies below offset go because the bucket holds
// them, and the deletes are logged as local retention's.
func (sg Segments) TrimLocalBefore(ctx context.Context, offset int64) error {
	return sg.l.deleteBefore(ctx, offset, "local retention")
}

// deleteBefore raises the (local) log start to offset and deletes the
// segments wholly below it, logging reason for each.
func (l *Log) deleteBefore(ctx context.Context, offset int64, reason string) error {
	if err := checkCtx(ctx); err != nil {
		return err
	}
	if err := l.checkWritable(); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	hw := l.hw.Load()
	if offset > hw {
		return &backend.OffsetOutOfRangeError{Offset: offset, LogStart: l.logStart.Load(), LogEnd: hw}
	}
	if offset > l.logStart.Load() {
		l.logStart.Store(offset)
		if err := l.logStartMovedLocked(); err != nil {
			return err
		}
	}
	// Segments wholly below offset go even when the log start was there
	// already: a crash after the checkpoint and before the deletes leaves
	// them, and a retry must finish the job.
	_, err := l.deleteSegmentsLocked(reason, func(_ *segFile, upper int64) (bool, error) {
		return upper <= offset, nil
	})
	return err
}

// TruncateTo removes every record at or above offset; see
// backend.Partition. Batches are atomic: when offset falls inside a batch,
// the whole batch goes and the log end becomes that batch's base offset.
// A reader holding records in the removed range may see them end early.
//
// The lowered recovery point must reach recovery-point-offset-checkpoint
// before records are appended again, or a recovery after a crash trusts
// what was written after the truncation on the word of the old point: a
// Backend's log writes the checkpoints before TruncateTo returns (Kafka's
// LogManager.truncateTo); a log opened alone leaves that to its caller.
func (l *Log) TruncateTo(offset int64) error {
	cut, err := l.truncateTo(offset)
	if err == nil && cut && l.truncated != nil {
		if err := l.truncated(); err != nil {
			// Appends must not resume over the old recovery point, and a
			// retry finds nothing to cut (and so nothing to checkpoint):
			// the log fails until it is reopened, which recovers.
			return l.fail(fmt.Errorf("truncated to %d, but the checkpoints could not be written: %w", offset, err))
		}
	}
	return err
}

// truncateTo is TruncateTo but the checkpoints; cut says records went.
func (l *Log) truncateTo(offset int64) (cut bool, err error) {
	if err := l.checkWritable(); err != nil {
		return false, err
	}
	if offset < 0 {
		return false, fmt.Errorf("%w: truncate to offset %d", backend.ErrInvalidRecord, offset)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	leo := l.leo.Load()
	if offset >= leo {
		return false, nil
	}
	l.truncations.Add(1)
	segs := l.segments()
	if offset <= segs[0].base || offset < l.logStart.Load() {
		return true, l.truncateFullyLocked(offset)
	}
	i := len(segs) - 1
	for i > 0 && segs[i].base > offset {
		i--
	}
	// Where the target is cut, found before anything changes: a cut its
	// batches refuse (truncationCut: damage before it) leaves the log as
	// it was, the segments after it too. l.mu keeps its bytes as they are
	// until the cut.
	if !segs[i].acquire() { // its files open while they are read
		return false, l.closedErr()
	}
	c, err := segs[i].truncationCut(offset)
	segs[i].release()
	if err != nil {
		return false, err
	}
	// The segments after the target go first: a crash from here on
	// leaves a log that ends with the target, a state on the way.
	for _, s := range segs[i+1:] {
		leaveLog(s) // while its names are its own
		if _, err := renameDeleted(s); err != nil {
			return true, l.fail(err)
		}
	}
	// Durable before the target is cut: otherwise a power loss may keep
	// the cut (and appends after it) and lose the renames, and the stale
	// segments come back overlapping or past a gap (TestCrashPowerLoss).
	if i+1 < len(segs) {
		if err := l.syncDir(); err != nil {
			return true, l.fail(err)
		}
	}
	target, last := segs[i], segs[len(segs)-1]
	if target == last {
		if _, err := l.activeForWriteLocked(); err != nil {
			return true, err
		}
	}
	kept := append([]*segFile(nil), segs[:i+1]...)
	newLeo, err := l.cutTargetLocked(kept, i, target == last, c)
	if err != nil {
		return true, err
	}
	l.setSegments(kept)
	l.metrics.SegmentsDeleted.Add(int64(len(segs) - i - 1))
	for _, s := range segs[i+1:] {
		s.release()
		l.removeDeletedFiles(s)
	}
	if err := l.setEndLocked(newLeo); err != nil {
		return true, err
	}
	if err := l.rebuildProducerState(nil, nil); err != nil {
		return true, l.fail(err)
	}
	return true, l.syncTruncationLocked()
}

// cutTargetLocked cuts kept[i], the segment holding the offset truncated
// to, at c (its truncationCut) and returns the new log end; the segment
// becomes the active one (kept[i] is replaced when a new file takes its
// place). REQUIRES: l.mu held.
func (l *Log) cutTargetLocked(kept []*segFile, i int, isLast bool, c cut) (int64, error) {
	target := kept[i]
	if isLast && target.tryExclusive() {
		// The last segment and no reader holds it: cut it in place, as
		// Kafka does.
		newLeo, err := l.act.truncateInPlace(c)
		target.endExclusive()
		if err == nil {
			err = target.truncateTxnIndex(newLeo)
		}
		if err != nil {
			return 0, l.fail(err)
		}
		return newLeo, nil
	}
	// A sealed segment never changes (readers may have it mapped), and a
	// reader holds this one: its surviving prefix goes to a new file that
	// takes its place; readers finish on the old one.
	a, newLeo, err := l.rewritePrefixLocked(target, c)
	if err != nil {
		return 0, l.fail(err)
	}
	if l.act != nil {
		l.act.closeFiles() // the old last segment leaves the log
	}
	l.act, kept[i] = a, a.f
	return newLeo, nil
}

// syncTruncationLocked makes a truncation durable before TruncateTo
// returns: the cut .log and indexes of the new last segment, and the
// directory. Appends after it then never land beside records a power loss
// could bring back, and a segment below the recovery point never keeps a
// cut that was not synced. REQUIRES: l.mu held.
func (l *Log) syncTruncationLocked() error {
	if l.act != nil {
		if err := l.act.sync(true); err != nil {
			return l.fail(err)
		}
	}
	if err := l.syncDir(); err != nil {
		return l.fail(err)
	}
	return nil
}

// rewritePrefixLocked replaces s with a new last segment holding its
// batches before the cut c (whole batches: the one holding the offset
// truncated to goes too) and returns it with the new log end. Crash-safe
// as a cleaner's replacement:
// the prefix is written to <base>.log.cleaned and synced, becomes
// <base>.log.swap, s's files become .deleted, and the swap file takes the
// name; a reopen completes or rolls back whatever a crash interrupted. s is
// retired: readers holding it finish on its files. REQUIRES: l.mu held.
func (l *Log) rewritePrefixLocked(s *segFile, c cut) (*activeSegment, int64, error) {
	if !s.acquire() { // keep its files open while we copy from them
		return nil, 0, l.closedErr()
	}
	defer s.release()
	keep, newLeo := s.size.Load(), c.end // the bytes kept
	if c.found {
		keep = c.at.pos
	}
	src, err := s.file()
	if err != nil {
		return nil, 0, err
	}
	txns, err := s.txnIndexBytes() // read before its file is renamed away
	if err != nil {
		return nil, 0, err
	}
	fsys := l.segOpts.fs
	cleaned, swap := s.logPath+CleanedSuffix, s.logPath+SwapSuffix
	w, err := fsys.OpenFile(cleaned, os.O_CREATE|os.O_TRUNC|os.O_RDWR, 0o644)
	if err != nil {
		return nil, 0, fmt.Errorf("local: rewrite %s: %w", s.logPath, err)
	}
	_, err = io.Copy(io.NewOffsetWriter(w, 0), io.NewSectionReader(src, 0, keep))
	if err == nil {
		err = w.Sync()
	}
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = fsys.Rename(cleaned, swap)
	}
	if err != nil {
		fsys.Remove(cleaned)
		return nil, 0, fmt.Errorf("local: rewrite %s: %w", s.logPath, err)
	}
	if err := l.syncDir(); err != nil {
		return nil, 0, err
	}
	leaveLog(s) // while its names are its own (the swap file takes its .log's)
	if _, err := renameDeleted(s); err != nil {
		return nil, 0, err
	}
	if err := fsys.Rename(swap, s.logPath); err != nil {
		return nil, 0, fmt.Errorf("local: rewrite %s: %w", s.logPath, err)
	}
	if err := l.carryTxnIndex(s.base, txns, newLeo); err != nil {
		return nil, 0, err
	}
	ns := newSegFile(&l.segOpts, s.base, keep, l.now())
	_, a, err := recoverSegment(ns, true)
	if err != nil {
		return nil, 0, err
	}
	if err := l.syncDir(); err != nil {
		a.closeFiles()
		ns.release()
		return nil, 0, err
	}
	a.jitterMs = l.jitter()
	a.loadRollingTs()
	s.release() // the log's reference: s has left the log
	l.removeDeletedFiles(s)
	return a, newLeo, nil
}

// txnIndexBytes returns a copy of s's .txnindex entries.
func (s *segFile) txnIndexBytes() ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	x, err := s.txnIndexLocked()
	if err != nil {
		return nil, err
	}
	return append([]byte(nil), x.Bytes()...), nil
}

// carryTxnIndex writes the .txnindex of the segment at base that replaces
// another after a truncation to end: the old one's entries (data) whose
// markers lie below end.
func (l *Log) carryTxnIndex(base int64, data []byte, end int64) error {
	keep, err := producerstate.NewTxnIndex(base, data)
	if err != nil {
		return err
	}
	if keep.TruncateTo(end) == 0 {
		return nil
	}
	name := FileName(base, TxnIndexSuffix)
	if err := vfs.WriteFileAtomic(l.segOpts.fs, l.dir, name, keep.Bytes()); err != nil {
		return fmt.Errorf("local: write %s: %w", name, err)
	}
	return nil
}

// truncateFullyLocked deletes every segment and restarts the log at offset
// (Kafka's truncateFullyAndStartAt). REQUIRES: l.mu held.
func (l *Log) truncateFullyLocked(offset int64) error {
	segs := l.segments()
	for _, s := range segs {
		leaveLog(s) // while its names are its own (the new segment may take them)
		if _, err := renameDeleted(s); err != nil {
			return l.fail(err)
		}
	}
	a, err := createActive(&l.segOpts, offset, l.now(), l.jitter())
	if err != nil {
		return l.fail(err)
	}
	if l.act != nil {
		l.act.closeFiles()
	}
	l.act = a
	l.setSegments([]*segFile{a.f})
	l.metrics.SegmentsDeleted.Add(int64(len(segs)))
	for _, old := range segs {
		old.release()
		l.removeDeletedFiles(old)
	}
	l.logStart.Store(offset)
	// The producer state starts over (Kafka's truncateFullyAndStartAt).
	l.ps.Reset(offset)
	snaps, err := l.listSnapshots()
	if err != nil {
		return l.fail(err)
	}
	for _, off := range snaps {
		if err := l.removeSnapshot(off); err != nil {
			return l.fail(err)
		}
	}
	if err := l.setEndLocked(offset); err != nil {
		return err
	}
	l.ps.SetHighWatermark(l.hw.Load())
	l.publishLSO()
	return l.syncTruncationLocked()
}

// setEndLocked moves the log end after a truncation and fits the other
// offsets and the epoch cache to it. REQUIRES: l.mu held.
func (l *Log) setEndLocked(leo int64) error {
	l.dirty = true
	l.leo.Store(leo)
	if l.hw.Load() > leo {
		l.hw.Store(leo)
	}
	l.rpMu.Lock()
	l.rpLowered++
	if l.recoveryPoint.Load() > leo {
		l.recoveryPoint.Store(leo)
	}
	l.rpMu.Unlock()
	if l.logStart.Load() > leo {
		l.logStart.Store(leo)
	}
	return l.epochs.fit(l)
}
