package local

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"

	"github.com/tierlog/tierlog/backend"
)

// DeleteOldSegments applies retention as Kafka's deleteOldSegments does:
// segments wholly below the log start offset always go; with
// cleanup.policy=delete, segments older than retention.ms (by their largest
// timestamp, else the file's mtime) and the oldest segments past
// retention.bytes go too. It never deletes at or above the high watermark,
// and never an empty active segment. It returns how many segments went.
func (l *Log) DeleteOldSegments() (int, error) {
	if err := l.checkWritable(); err != nil {
		return 0, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.deleteOldSegmentsLocked(l.cfg.RetentionMs, l.cfg.RetentionBytes)
}

// deleteOldSegmentsLocked applies the log start rule and, for delete
// topics, the time and size rules with the given limits (-1: none).
// REQUIRES: l.mu held.
func (l *Log) deleteOldSegmentsLocked(retentionMs, retentionBytes int64) (int, error) {
	total := 0
	n, err := l.deleteSegmentsLocked("log start offset", func(_ *segment, upper int64) (bool, error) {
		return upper <= l.logStart.Load(), nil
	})
	total += n
	if err != nil || !l.cfg.Delete() {
		return total, err
	}
	if retentionMs >= 0 {
		now := l.now()
		n, err = l.deleteSegmentsLocked("retention.ms", func(s *segment, _ int64) (bool, error) {
			if !s.acquire() {
				return false, nil
			}
			defer s.release()
			ts, err := s.largestTimestamp()
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
		n, err = l.deleteSegmentsLocked("retention.bytes", func(s *segment, _ int64) (bool, error) {
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
func (l *Log) deleteSegmentsLocked(reason string, pred func(s *segment, upperBound int64) (bool, error)) (int, error) {
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
	l.setSegments(append([]*segment(nil), kept...))
	l.metrics.SegmentsDeleted.Add(int64(len(gone)))
	for _, s := range gone {
		if _, err := s.renameDeleted(); err != nil {
			return n, err
		}
		s.release()
		l.removeDeletedFiles(s)
		l.logger.Info("deleted segment", "base", s.base, "reason", reason)
	}
	return n, l.fitEpochsLocked()
}

// DeleteRecordsBefore raises the log start offset to offset and deletes the
// segments wholly below it; see backend.Partition.
func (l *Log) DeleteRecordsBefore(ctx context.Context, offset int64) error {
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
	if offset <= l.logStart.Load() {
		return nil
	}
	l.logStart.Store(offset)
	if err := l.fitEpochsLocked(); err != nil {
		return err
	}
	_, err := l.deleteSegmentsLocked("log start offset", func(_ *segment, upper int64) (bool, error) {
		return upper <= offset, nil
	})
	return err
}

// TruncateTo removes every record at or above offset; see
// backend.Partition. Batches are atomic: when offset falls inside a batch,
// the whole batch goes and the log end becomes that batch's base offset.
// A reader holding records in the removed range may see them end early.
func (l *Log) TruncateTo(offset int64) error {
	if err := l.checkWritable(); err != nil {
		return err
	}
	if offset < 0 {
		return fmt.Errorf("%w: truncate to offset %d", backend.ErrInvalidRecord, offset)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	leo := l.leo.Load()
	if offset >= leo {
		return nil
	}
	l.truncations.Add(1)
	segs := l.segments()
	if offset <= segs[0].base || offset < l.logStart.Load() {
		return l.truncateFullyLocked(offset)
	}
	i := len(segs) - 1
	for i > 0 && segs[i].base > offset {
		i--
	}
	for _, s := range segs[i+1:] {
		if _, err := s.renameDeleted(); err != nil {
			return err
		}
	}
	target := segs[i]
	target.mu.Lock()
	sealed := target.sealed
	target.mu.Unlock()
	var newLeo int64
	var err error
	kept := append([]*segment(nil), segs[:i+1]...)
	if sealed {
		// A sealed segment's file never changes (readers may have it
		// mapped): write its surviving prefix to a new file instead.
		var ns *segment
		if ns, newLeo, err = l.rewritePrefixLocked(target, offset); err != nil {
			return err
		}
		kept[i] = ns
		target.release()
		l.removeDeletedFiles(target)
	} else if newLeo, err = target.truncateTo(offset); err != nil {
		return err
	}
	l.setSegments(kept)
	l.metrics.SegmentsDeleted.Add(int64(len(segs) - i - 1))
	for _, s := range segs[i+1:] {
		s.release()
		l.removeDeletedFiles(s)
	}
	return l.setEndLocked(newLeo)
}

// rewritePrefixLocked replaces the sealed segment s with a new active
// segment holding its batches below offset (whole batches: the one holding
// offset goes too). s's files are renamed to .deleted; readers holding it
// finish on them. It returns the new segment and the new log end.
// REQUIRES: l.mu held.
func (l *Log) rewritePrefixLocked(s *segment, offset int64) (*segment, int64, error) {
	if !s.acquire() { // keep its files open while we copy from them
		return nil, 0, l.closedErr()
	}
	defer s.release()
	p, ok, err := s.translateOffset(offset, s.size.Load())
	if err != nil {
		return nil, 0, err
	}
	cut, newLeo := s.size.Load(), offset
	if ok {
		cut = p.pos
		if p.baseOffset >= 0 && p.baseOffset < offset {
			newLeo = p.baseOffset
		}
	}
	src, err := s.file()
	if err != nil {
		return nil, 0, err
	}
	if _, err := s.renameDeleted(); err != nil {
		return nil, 0, err
	}
	ns := newSegment(l.dir, s.base, 0, &l.segOpts, l.now())
	f, err := os.OpenFile(ns.path(LogSuffix), os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o644)
	if err != nil {
		return nil, 0, fmt.Errorf("local: rewrite %s: %w", ns.path(LogSuffix), err)
	}
	if _, err := io.Copy(f, io.NewSectionReader(src, 0, cut)); err != nil {
		f.Close()
		return nil, 0, fmt.Errorf("local: rewrite %s: %w", ns.path(LogSuffix), err)
	}
	if err := f.Close(); err != nil {
		return nil, 0, fmt.Errorf("local: rewrite %s: %w", ns.path(LogSuffix), err)
	}
	ns.mu.Lock()
	res, err := ns.rebuildLocked(true)
	if err == nil {
		ns.ix.Restore(0, res.maxTs, res.offsetOfMaxTs)
	}
	ns.mu.Unlock()
	if err != nil {
		return nil, 0, err
	}
	l.setRollingTs(ns)
	return ns, newLeo, nil
}

// truncateFullyLocked deletes every segment and restarts the log at offset
// (Kafka's truncateFullyAndStartAt). REQUIRES: l.mu held.
func (l *Log) truncateFullyLocked(offset int64) error {
	segs := l.segments()
	for _, s := range segs {
		if _, err := s.renameDeleted(); err != nil {
			return err
		}
	}
	s, err := createSegment(l.dir, offset, &l.segOpts, l.now(), l.jitter())
	if err != nil {
		return err
	}
	l.setSegments([]*segment{s})
	l.metrics.SegmentsDeleted.Add(int64(len(segs)))
	for _, old := range segs {
		old.release()
		l.removeDeletedFiles(old)
	}
	l.logStart.Store(offset)
	return l.setEndLocked(offset)
}

// setEndLocked moves the log end after a truncation and fits the other
// offsets and the epoch cache to it. REQUIRES: l.mu held.
func (l *Log) setEndLocked(leo int64) error {
	l.dirty = true
	l.leo.Store(leo)
	if l.hw.Load() > leo {
		l.hw.Store(leo)
	}
	if l.recoveryPoint.Load() > leo {
		l.recoveryPoint.Store(leo)
	}
	if l.logStart.Load() > leo {
		l.logStart.Store(leo)
	}
	return l.fitEpochsLocked()
}

// fitEpochsLocked fits the epoch cache to the log start and end and
// persists it when that changed it. REQUIRES: l.mu held.
func (l *Log) fitEpochsLocked() error {
	fitted := fitEpochs(l.epochs, l.logStart.Load(), l.leo.Load())
	if slices.Equal(fitted, l.epochs) {
		return nil
	}
	l.epochs = fitted
	return WriteLeaderEpochCheckpoint(l.dir, l.epochs)
}
