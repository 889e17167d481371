package local

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/record"
)

// This file opens a log, as Kafka's LogLoader does: resolve files an
// interrupted operation left, list the segments, recover from the recovery
// point after an unclean shutdown (or find the log end after a clean one),
// then fit the checkpointed offsets and the leader epoch cache to the log.

// load opens the segments and recovers them. REQUIRES: l not yet shared.
func (l *Log) load(opts Options) error {
	if l.readOnly {
		return l.loadReadOnly(opts)
	}
	ents, err := l.removeTempFilesAndSwap()
	if err != nil {
		return err
	}
	if ents == nil { // it changed the directory: list it as it is now
		if ents, err = l.segOpts.fs.ReadDir(l.dir); err != nil {
			return fmt.Errorf("local: read %s: %w", l.dir, err)
		}
	}
	// The segments and the producer snapshots from one listing.
	listed := &snapshotListing{offsets: snapshotsIn(ents), changes: l.snapChanges}
	segs, err := l.listSegments(ents)
	if err != nil {
		return err
	}
	logStart := max(opts.LogStartOffset, 0)
	if len(segs) == 0 {
		a, err := createActive(&l.segOpts, logStart, l.now(), l.jitter())
		if err != nil {
			return err
		}
		l.setSegments([]*segFile{a.f})
		l.act = a
		l.leo.Store(logStart)
	} else {
		l.setSegments(segs)
		if err := l.recover(opts); err != nil {
			return err
		}
	}
	segs = l.segments()
	for i, s := range segs[:len(segs)-1] {
		s.sealed, s.next = true, segs[i+1].base // not shared yet: no lock needed
	}
	leo := l.leo.Load()
	if opts.LogStartOffset >= 0 && opts.LogStartOffset < segs[0].base {
		// The checkpoint's log start lies below the local log: the offsets
		// between live elsewhere (a bucket). Kept for the tiered layer.
		l.remoteStart.Store(opts.LogStartOffset)
	}
	logStart = min(max(logStart, segs[0].base), leo)
	l.logStart.Store(logStart)
	l.hw.Store(min(max(opts.HighWatermark, logStart), leo))
	// After a clean shutdown everything is durable. After a recovery the
	// point stays where it was (Kafka's LogLoader.recoverLog): what the
	// recovery rebuilt and cut is not yet synced, and a recovery point
	// past it would make the next recovery trust it. The first flush
	// syncs it.
	rp := leo
	if !opts.CleanShutdown {
		rp = min(max(opts.RecoveryPoint, 0), leo)
	}
	l.recoveryPoint.Store(rp)
	if err := l.checkTopicID(opts.TopicID); err != nil {
		return err
	}
	if err := l.epochs.load(l); err != nil {
		return err
	}
	err = l.rebuildProducerState(l.rebuilt, listed)
	l.rebuilt = nil
	return err
}

// listSegments opens a segFile for every .log of ents, the directory's
// listing, sorted by base offset, removing index files that have no log
// (as Kafka does).
func (l *Log) listSegments(ents []fs.DirEntry) ([]*segFile, error) {
	fsys := l.segOpts.fs
	hasLog := map[int64]bool{}
	var orphans []int64
	for _, e := range ents {
		if e.IsDir() {
			continue
		}
		base, suffix, err := ParseFileName(e.Name())
		if err != nil {
			continue
		}
		switch suffix {
		case LogSuffix:
			hasLog[base] = true
		case IndexSuffix, TimeIndexSuffix, TxnIndexSuffix:
			orphans = append(orphans, base)
		}
	}
	for _, base := range orphans {
		if hasLog[base] {
			continue
		}
		for _, suf := range []string{IndexSuffix, TimeIndexSuffix, TxnIndexSuffix} {
			if err := fsys.Remove(l.segOpts.path(base, suf)); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return nil, fmt.Errorf("local: remove orphan index: %w", err)
			}
		}
		l.logger.Info("removed index files without a log", "base", base)
	}
	var segs []*segFile
	for base := range hasLog {
		st, err := fsys.Stat(l.segOpts.path(base, LogSuffix))
		if err != nil {
			return nil, fmt.Errorf("local: %w", err)
		}
		segs = append(segs, newSegFile(&l.segOpts, base, st.Size(), st.ModTime()))
	}
	sort.Slice(segs, func(i, j int) bool { return segs[i].base < segs[j].base })
	return segs, nil
}

// checkTopicID keeps partition.metadata as Kafka does.
func (l *Log) checkTopicID(id string) error {
	if id == "" {
		return nil
	}
	have, err := readPartitionMetadata(l.segOpts.fs, filepath.Join(l.dir, PartitionMetadataFile))
	if err != nil {
		return err
	}
	if have == "" {
		return writePartitionMetadata(l.segOpts.fs, l.dir, id)
	}
	if have != id {
		return fmt.Errorf("%w: %s holds topic id %s, opened as %s", ErrTopicIDMismatch, l.dir, have, id)
	}
	return nil
}

// removeTempFilesAndSwap is Kafka's removeTempFilesAndCollectSwapFiles plus
// the swap completion: *.deleted and checkpoint *.tmp files go; *.cleaned
// files go, and with them any *.swap at or above the lowest cleaned offset
// (an interrupted cleaning); the remaining *.swap files replace the
// segments they cover.
//
// It returns the directory's listing when it changed nothing in it (the
// usual case), for the next step to use, else nil.
func (l *Log) removeTempFilesAndSwap() ([]fs.DirEntry, error) {
	fsys := l.segOpts.fs
	ents, err := fsys.ReadDir(l.dir)
	if err != nil {
		return nil, fmt.Errorf("local: read %s: %w", l.dir, err)
	}
	changed := false
	rm := func(name string) error {
		changed = true
		if err := fsys.Remove(filepath.Join(l.dir, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("local: remove %s: %w", name, err)
		}
		return nil
	}
	minCleaned := int64(-1)
	var swaps []string
	for _, e := range ents {
		name := e.Name()
		switch {
		case strings.HasSuffix(name, DeletedSuffix), strings.HasSuffix(name, ".tmp"):
			if err := rm(name); err != nil {
				return nil, err
			}
		case strings.HasSuffix(name, CleanedSuffix):
			if base, _, err := ParseFileName(name); err == nil && (minCleaned < 0 || base < minCleaned) {
				minCleaned = base
			}
			if err := rm(name); err != nil {
				return nil, err
			}
		case strings.HasSuffix(name, SwapSuffix):
			swaps = append(swaps, name)
		}
	}
	slices.Sort(swaps) // in offset order, whatever the listing's
	var keep []string
	for _, name := range swaps {
		base, _, err := ParseFileName(name)
		if err != nil {
			continue
		}
		if minCleaned >= 0 && base >= minCleaned {
			if err := rm(name); err != nil {
				return nil, err
			}
			continue
		}
		keep = append(keep, name)
	}
	// A .log.swap replaces every segment whose base lies in [swap base,
	// swap next offset).
	for _, name := range keep {
		if !strings.HasSuffix(name, LogSuffix+SwapSuffix) {
			continue
		}
		base, _, _ := ParseFileName(name)
		next, err := l.nextOffsetOfFile(filepath.Join(l.dir, name), base)
		if err != nil {
			return nil, err
		}
		// An empty swap file replaces the one segment of its base (a
		// cleaner's replacement of more segments is never empty).
		next = max(next, base+1)
		for _, e := range ents {
			b, suf, err := ParseFileName(e.Name())
			if err != nil || b < base || b >= next {
				continue
			}
			if suf == LogSuffix || suf == IndexSuffix || suf == TimeIndexSuffix || suf == TxnIndexSuffix {
				if err := rm(e.Name()); err != nil {
					return nil, err
				}
			}
		}
	}
	for _, name := range keep {
		if err := fsys.Rename(filepath.Join(l.dir, name), filepath.Join(l.dir, strings.TrimSuffix(name, SwapSuffix))); err != nil {
			return nil, fmt.Errorf("local: complete swap of %s: %w", name, err)
		}
		l.logger.Info("completed an interrupted segment swap", "file", name)
	}
	if len(keep) > 0 {
		return nil, l.syncDir()
	}
	if changed {
		return nil, nil
	}
	return ents, nil
}

// nextOffsetOfFile scans a .log file's headers for one past its last offset.
func (l *Log) nextOffsetOfFile(path string, base int64) (int64, error) {
	f, err := l.segOpts.fs.OpenFile(path, os.O_RDONLY, 0)
	if err != nil {
		return 0, fmt.Errorf("local: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return 0, fmt.Errorf("local: %w", err)
	}
	next := base
	sc := record.NewScanner(f, 0, st.Size(), record.ScanOptions{HeadersOnly: true})
	for sc.Next() {
		next = sc.Entry().LastOffset + 1
	}
	return next, nil
}

// recover validates segments from the recovery point (unless the shutdown
// was clean) and finds the log end. REQUIRES: l not yet shared.
func (l *Log) recover(opts Options) error {
	segs := l.segments()
	last := len(segs) - 1
	if opts.CleanShutdown {
		return l.findEndAfterCleanShutdown(segs[last])
	}
	// Recover from the segment holding the offset before the recovery
	// point, not the one holding the point itself: a flush sets the point
	// to the log end without syncing the active segment's indexes, and a
	// roll at exactly that offset makes the next segment start there; the
	// old active segment's indexes are synced only by the roll's
	// background flush, which a crash may beat.
	rp := max(opts.RecoveryPoint, 0)
	from := 0
	for i, s := range segs {
		if s.base < rp {
			from = i
		}
	}
	l.rebuilt = map[int64]bool{}
	for i := from; i <= last; i++ {
		s := segs[i]
		res, a, err := recoverSegment(s, i == last)
		if err != nil {
			return err
		}
		l.rebuilt[s.base] = true
		if res.truncated > 0 {
			l.logger.Warn("truncated a torn or corrupt segment tail", "base", s.base, "bytes", res.truncated, "cause", res.corruption)
		}
		// A segment that stops short of the next one's base lost its
		// tail: a roll syncs the sealed segment after the new segment's
		// name may already be durable, so a power loss between them
		// leaves a gap. Offsets of a log that is not compacted follow
		// one another, so the gap is damage too (records past it were
		// never flushed: a flush syncs every segment below the log end).
		gap := i < last && res.nextOffset < segs[i+1].base && !s.opts.gapsAllowed()
		if gap {
			l.logger.Warn("segment ends before the next one starts; the later segments were never flushed",
				"base", s.base, "next", res.nextOffset, "following", segs[i+1].base)
		}
		if (res.truncated > 0 || gap) && i < last {
			// Everything after a damaged segment is unreliable: Kafka
			// deletes it, and this one becomes the last.
			for _, later := range segs[i+1:] {
				if err := l.retireSegment(later); err != nil {
					return err
				}
			}
			segs = segs[:i+1]
			l.setSegments(segs)
			if a, err = activate(s, l.jitter()); err != nil {
				return err
			}
			last = i
		}
		if i == last {
			a.jitterMs = l.jitter()
			a.loadRollingTs()
			l.act = a
			l.leo.Store(res.nextOffset)
			return nil
		}
	}
	return nil
}

// findEndAfterCleanShutdown finds the log end from the last segment's
// index and the headers after its last entry, as Kafka's readNextOffset.
// The segment is made writable on the first append, not here: most of a
// broker's partitions are idle at start, and expanding two indexes costs a
// few hundred microseconds each.
func (l *Log) findEndAfterCleanShutdown(s *segFile) error {
	oi, err := s.offsetIndex()
	if err != nil {
		return err
	}
	e, slot, _ := oi.LookupSlot(1<<63 - 1)
	prevLast := s.base - 1
	if slot > 0 {
		prevLast = oi.Entry(slot - 1).Offset
	}
	size := s.size.Load()
	next, end := s.base, int64(e.Position)
	if slot >= 0 {
		next = e.Offset + 1
	}
	err = s.walkHeaders(int64(e.Position), size, prevLast, func(h *record.Entry) bool {
		next, end = h.LastOffset+1, h.Position+h.Size
		return true
	})
	if err == nil && end == size {
		l.leo.Store(next)
		return nil
	}
	if err != nil && !errors.Is(err, backend.ErrCorruptRecord) {
		return err
	}
	// Marked clean, yet the last segment does not end on a whole batch:
	// recover it rather than append after garbage.
	l.logger.Warn("the last segment of a cleanly shut down log has a damaged tail; recovering it", "base", s.base, "err", err)
	res, a, err := recoverSegment(s, true)
	if err != nil {
		return err
	}
	l.rebuilt = map[int64]bool{s.base: true}
	a.jitterMs = l.jitter()
	a.loadRollingTs()
	l.act = a
	l.leo.Store(res.nextOffset)
	return nil
}

// loadReadOnly opens the segments of an existing directory as they are:
// temporary files are ignored, every segment is treated as closed, and the
// log end is where the last segment's whole batches end.
func (l *Log) loadReadOnly(opts Options) error {
	ents, err := l.segOpts.fs.ReadDir(l.dir)
	if err != nil {
		return fmt.Errorf("local: read %s: %w", l.dir, err)
	}
	var segs []*segFile
	for _, e := range ents {
		base, suffix, err := ParseFileName(e.Name())
		if err != nil || suffix != LogSuffix || e.IsDir() {
			continue
		}
		st, err := l.segOpts.fs.Stat(filepath.Join(l.dir, e.Name()))
		if err != nil {
			return fmt.Errorf("local: %w", err)
		}
		s := newSegFile(&l.segOpts, base, st.Size(), st.ModTime())
		s.readOnly = true
		segs = append(segs, s)
	}
	if len(segs) == 0 {
		return fmt.Errorf("%w: no segments in %s", backend.ErrNotFound, l.dir)
	}
	sort.Slice(segs, func(i, j int) bool { return segs[i].base < segs[j].base })
	for i, s := range segs[:len(segs)-1] {
		s.sealed, s.next = true, segs[i+1].base
	}
	l.setSegments(segs)
	last := segs[len(segs)-1]
	oi, err := last.offsetIndex()
	if err != nil {
		return err
	}
	f, err := last.file()
	if err != nil {
		return err
	}
	next := last.base
	e, slot, _ := oi.LookupSlot(1<<63 - 1)
	if slot >= 0 {
		next = e.Offset + 1
	}
	sc := record.NewScanner(f, int64(e.Position), last.size.Load(), record.ScanOptions{HeadersOnly: true, BufferSize: 4096})
	for sc.Next() {
		next = sc.Entry().LastOffset + 1
	}
	if sc.Err() != nil {
		// Serve the whole batches only; say what was left out.
		l.logger.Warn("the last segment ends in a torn or damaged tail; not serving it", "base", last.base, "err", sc.Err())
		last.size.Store(sc.ValidEnd())
	}
	l.leo.Store(next)
	if opts.LogStartOffset >= 0 && opts.LogStartOffset < segs[0].base {
		l.remoteStart.Store(opts.LogStartOffset)
	}
	logStart := max(opts.LogStartOffset, segs[0].base)
	l.logStart.Store(min(logStart, next))
	hw := opts.HighWatermark
	if hw < 0 {
		hw = next
	}
	l.hw.Store(min(max(hw, l.logStart.Load()), next))
	l.recoveryPoint.Store(next)
	if epochs, err := readLeaderEpochs(l.segOpts.fs, filepath.Join(l.dir, LeaderEpochCheckpoint)); err == nil {
		l.epochs.entries = epochs
	}
	return l.rebuildProducerState(nil, nil)
}
