package local

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"sort"
	"time"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/producerstate"
	"github.com/tierlog/tierlog/record"
	"github.com/tierlog/tierlog/vfs"
)

// This file keeps the partition's producer state (package producerstate:
// Kafka's ProducerStateManager) with the log: the state itself, checked and
// updated by every append; its snapshots, <offset>.snapshot, taken at every
// roll and at Close and loaded at open; and each segment's .txnindex, the
// aborted transactions whose ABORT markers it holds, which read_committed
// reads return. Everything here REQUIRES Log.mu (or the log not yet
// shared), but the segFile methods, which take segFile.mu.

// originOf maps an append's options to a producer-state origin.
func originOf(opts backend.AppendOptions) producerstate.Origin {
	switch {
	case !opts.AssignOffsets:
		return producerstate.OriginReplication
	case opts.Coordinator:
		return producerstate.OriginCoordinator
	}
	return producerstate.OriginClient
}

// publishLSO recomputes the last stable offset readers see, and wakes
// what waits on Changed: every change of the log end, the high watermark
// or the last stable offset ends here.
func (l *Log) publishLSO() {
	l.lso.Store(l.ps.LastStableOffset(l.hw.Load(), l.logStart.Load()))
	l.notifyChanged()
}

// snapshotPath names the producer snapshot describing the log up to offset.
func (l *Log) snapshotPath(offset int64) string {
	return l.segOpts.path(offset, SnapshotSuffix)
}

// listSnapshots returns the offsets of the producer snapshots in the
// directory, ascending.
func (l *Log) listSnapshots() ([]int64, error) {
	ents, err := l.segOpts.fs.ReadDir(l.dir)
	if err != nil {
		return nil, fmt.Errorf("local: read %s: %w", l.dir, err)
	}
	return snapshotsIn(ents), nil
}

// snapshotsIn returns the offsets of the snapshot files a directory
// listing names, in order.
func snapshotsIn(ents []fs.DirEntry) []int64 {
	var out []int64
	for _, e := range ents {
		if base, suffix, err := ParseFileName(e.Name()); err == nil && suffix == SnapshotSuffix {
			out = append(out, base)
		}
	}
	slices.Sort(out)
	return out
}

// snapshotListing is the snapshots a directory listing taken as the log
// opened names, and snapChanges then.
type snapshotListing struct {
	offsets []int64
	changes int64
}

// snapshotsListed returns the snapshots: those of listed when no snapshot
// was written or removed since it was taken (a log's open then lists its
// directory once, not twice), else a new listing's.
func (l *Log) snapshotsListed(listed *snapshotListing) ([]int64, error) {
	if listed != nil && listed.changes == l.snapChanges {
		return listed.offsets, nil
	}
	return l.listSnapshots()
}

func (l *Log) removeSnapshot(offset int64) error {
	if l.readOnly {
		return nil
	}
	l.snapChanges++
	if err := l.segOpts.fs.Remove(l.snapshotPath(offset)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("local: remove %s: %w", l.snapshotPath(offset), err)
	}
	return nil
}

// writeSnapshot writes the producer state's snapshot under the offset it
// describes (its EndOffset), unless one is there already. With sync it is
// durable on return; without, the file is written and renamed into place
// and made durable later (at a roll, by the rolled segment's background
// flush, as Kafka does): a snapshot lost to a crash is only a longer
// replay, and a damaged one fails its CRC and is passed over.
func (l *Log) writeSnapshot(sync bool) (wrote bool, err error) {
	data, offset := l.ps.Snapshot(l.snapBuf[:0])
	l.snapBuf = data
	path := l.snapshotPath(offset)
	if _, err := l.segOpts.fs.Stat(path); err == nil {
		return false, nil
	}
	l.snapChanges++
	if sync {
		if err := vfs.WriteFileAtomic(l.segOpts.fs, l.dir, FileName(offset, SnapshotSuffix), data); err != nil {
			return false, fmt.Errorf("local: write %s: %w", path, err)
		}
		return true, nil
	}
	fsys := l.segOpts.fs
	tmp := path + ".tmp"
	f, err := fsys.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		return false, fmt.Errorf("local: write %s: %w", tmp, err)
	}
	_, err = f.WriteAt(data, 0)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = fsys.Rename(tmp, path)
	}
	if err != nil {
		fsys.Remove(tmp)
		return false, fmt.Errorf("local: write %s: %w", path, err)
	}
	return true, nil
}

// syncSnapshot makes the snapshot at offset durable, when there is one.
func (l *Log) syncSnapshot(offset int64) error {
	f, err := l.segOpts.fs.OpenFile(l.snapshotPath(offset), os.O_RDONLY, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("local: %w", err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return fmt.Errorf("local: fsync %s: %w", l.snapshotPath(offset), err)
	}
	return nil
}

// rebuildProducerState brings the producer state to the log end after an
// open or a truncation, as Kafka's truncateAndReload and
// rebuildProducerState: snapshots above the log end or below the (local)
// log start are deleted; unless the state is at the log end already, the
// newest remaining snapshot is loaded (a damaged one is deleted and the
// next older tried; with none the state starts empty at the log start)
// and every batch after it replayed. The .txnindex of each segment in
// rebuilt (one recovery rewrote) is written again, whole, from what the
// replay finds in it.
//
// The snapshot at the log start is kept: it is the only record of the
// transactions open across it, whose first batches are gone from the
// local log (in a tiered partition's bucket, or deleted), and a replay
// from the log start without it finds their markers completing nothing,
// so a rewritten .txnindex loses their aborts. Kafka's truncateAndReload
// deletes the snapshots at or below the partition's log start, which for
// a tiered partition lies below the local log, so it keeps the snapshot
// at the local log start too; retention (logStartMovedLocked) likewise
// removes only those below the log start.
func (l *Log) rebuildProducerState(rebuilt map[int64]bool, listed *snapshotListing) error {
	leo, logStart := l.leo.Load(), l.logStart.Load()
	snaps, err := l.snapshotsListed(listed)
	if err != nil {
		return err
	}
	var keep []int64
	for _, off := range snaps {
		if off > leo || off < logStart {
			if err := l.removeSnapshot(off); err != nil {
				return err
			}
			continue
		}
		keep = append(keep, off)
	}
	if l.ps.EndOffset() != leo || len(rebuilt) > 0 {
		// A segment recovery rewrote gets its .txnindex again from its own
		// markers, replayed with the state as of its base (Kafka's
		// recoverSegment): load no snapshot past the first such base.
		limit := leo
		for base := range rebuilt {
			limit = min(limit, base)
		}
		for len(keep) > 0 && keep[len(keep)-1] > limit {
			keep = keep[:len(keep)-1]
		}
		loaded := false
		for i := len(keep) - 1; i >= 0 && !loaded; i-- {
			data, err := vfs.ReadFile(l.segOpts.fs, l.snapshotPath(keep[i]))
			if err == nil {
				err = l.ps.Load(data, keep[i], l.now().UnixMilli())
			}
			if err == nil {
				loaded = true
				break
			}
			l.logger.Warn("producer snapshot unusable; trying an older one", "file", l.snapshotPath(keep[i]), "err", err)
			if err := l.removeSnapshot(keep[i]); err != nil {
				return err
			}
		}
		if !loaded {
			// No snapshot at all: the state is rebuilt from the log start,
			// and every segment's .txnindex with it (a log written before
			// tierlog kept them has none, and the cleaner relies on them).
			l.ps.Reset(logStart)
			if rebuilt == nil {
				rebuilt = map[int64]bool{}
			}
			for _, s := range l.segments() {
				if !l.readOnly {
					rebuilt[s.base] = true
				}
			}
		}
		if err := l.replayProducers(rebuilt); err != nil {
			return err
		}
	} else {
		l.ps.OnLogStartIncremented(logStart)
	}
	l.ps.SetEndOffset(leo)
	l.ps.SetHighWatermark(l.hw.Load())
	l.publishLSO()
	return nil
}

// replayProducers replays every batch from the producer state's end
// offset to the log end (headers only; control batches read whole),
// appending the aborted transactions of segments in rebuilt to their
// .txnindex.
func (l *Log) replayProducers(rebuilt map[int64]bool) error {
	from := max(l.ps.EndOffset(), l.logStart.Load())
	segs := l.segments()
	for i, s := range segs {
		if i+1 < len(segs) && segs[i+1].base <= from {
			continue
		}
		if rebuilt[s.base] {
			if err := l.resetTxnIndex(s); err != nil {
				return err
			}
		}
		start := int64(0)
		if from > s.base {
			p, ok, err := s.translateOffset(from, s.size.Load())
			if err != nil {
				return err
			}
			if !ok {
				continue
			}
			start = p.pos
		}
		if err := l.replaySegment(s, start, rebuilt[s.base]); err != nil {
			return err
		}
	}
	return nil
}

// replaySegment replays the batches of s from position start.
func (l *Log) replaySegment(s *segFile, start int64, writeTxns bool) error {
	var replayErr error
	var whole []byte
	err := s.walkHeaders(start, s.size.Load(), -1, func(e *record.Entry) bool {
		if e.Magic != 2 {
			return true
		}
		b := e.Batch()
		if b.IsControl() {
			whole = slices.Grow(whole[:0], int(e.Size))[:e.Size]
			if replayErr = l.readBatchAt(s, e.Position, whole); replayErr != nil {
				return false
			}
			b = record.Batch(whole)
		}
		c, ok, err := l.ps.Replay(b)
		if err != nil {
			replayErr = fmt.Errorf("local: %s position %d: replay producer state: %w", s.logPath, e.Position, err)
			return false
		}
		if ok && c.Aborted && writeTxns {
			replayErr = l.appendAborted(s, nil, c.AbortedTxn())
		}
		return replayErr == nil
	})
	if err != nil {
		return err
	}
	return replayErr
}

// readBatchAt reads len(p) bytes of s's .log at pos.
func (l *Log) readBatchAt(s *segFile, pos int64, p []byte) error {
	f, err := s.file()
	if err != nil {
		return err
	}
	if n, err := f.ReadAt(p, pos); n < len(p) {
		return fmt.Errorf("local: read %s at %d: %w", s.logPath, pos, err)
	}
	return nil
}

// resetTxnIndex empties a segment's .txnindex (a recovery rebuilds it).
func (l *Log) resetTxnIndex(s *segFile) error {
	s.mu.Lock()
	s.txn, s.txnLoaded = nil, true
	s.mu.Unlock()
	if err := l.segOpts.fs.Remove(s.path(TxnIndexSuffix)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("local: remove %s: %w", s.path(TxnIndexSuffix), err)
	}
	return nil
}

// appendAborted appends an aborted transaction to s's .txnindex, creating
// the file on its first entry (as Kafka does), through w when the writer
// holds it open (the active segment), else a descriptor of its own.
func (l *Log) appendAborted(s *segFile, a *activeSegment, t producerstate.AbortedTxn) error {
	entry, pos, err := s.addAborted(t)
	if err != nil {
		return err
	}
	var f vfs.File
	if a != nil {
		if f, err = a.txnFile(); err != nil {
			return err
		}
	} else {
		if f, err = l.segOpts.fs.OpenFile(s.path(TxnIndexSuffix), os.O_CREATE|os.O_RDWR, 0o644); err != nil {
			return fmt.Errorf("local: open %s: %w", s.path(TxnIndexSuffix), err)
		}
		defer f.Close()
	}
	if _, err := f.WriteAt(entry, pos); err != nil {
		return fmt.Errorf("local: write %s: %w", s.path(TxnIndexSuffix), err)
	}
	return nil
}

// txnIndexLocked returns the segment's aborted-transaction index, reading
// its .txnindex on first use (none: empty). REQUIRES: s.mu held.
func (s *segFile) txnIndexLocked() (*producerstate.TxnIndex, error) {
	if s.txnLoaded && s.txn != nil {
		return s.txn, nil
	}
	var data []byte
	if !s.txnLoaded && s.left {
		// Its names may be another segment's now: never read by name.
		return nil, fmt.Errorf("%w: local: %s %w before its aborted transactions were read", backend.ErrStorage, s.logPath, errLeftLog)
	}
	if !s.txnLoaded {
		var err error
		data, err = vfs.ReadFile(s.opts.fs, s.path(TxnIndexSuffix))
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("local: read %s: %w", s.path(TxnIndexSuffix), err)
		}
	}
	x, err := producerstate.NewTxnIndex(s.base, data)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", backend.ErrCorruptRecord, s.path(TxnIndexSuffix), err)
	}
	s.txn, s.txnLoaded = x, true
	return x, nil
}

// addAborted adds t to the segment's index and returns its bytes and
// their position in the file.
func (s *segFile) addAborted(t producerstate.AbortedTxn) ([]byte, int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	x, err := s.txnIndexLocked()
	if err != nil {
		return nil, 0, err
	}
	pos := int64(len(x.Bytes()))
	entry, err := x.Append(t)
	if err != nil {
		return nil, 0, fmt.Errorf("local: %s: %w", s.path(TxnIndexSuffix), err)
	}
	return append([]byte(nil), entry...), pos, nil
}

// collectAborted appends to dst the aborted transactions of the segment
// that overlap [fetch, upper); complete says no later segment can hold
// more (Kafka's TransactionIndex.collectAbortedTxns).
func (s *segFile) collectAborted(dst []producerstate.AbortedTxn, fetch, upper int64) ([]producerstate.AbortedTxn, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	x, err := s.txnIndexLocked()
	if err != nil {
		return dst, false, err
	}
	out, complete := x.Collect(dst, fetch, upper)
	return out, complete, nil
}

// truncateTxnIndex drops the entries at or above offset from the
// segment's .txnindex, in memory and on disk.
func (s *segFile) truncateTxnIndex(offset int64) error {
	s.mu.Lock()
	x, err := s.txnIndexLocked()
	n := 0
	if err == nil {
		before := len(x.Bytes())
		n = x.TruncateTo(offset)
		if n == before {
			s.mu.Unlock()
			return nil
		}
	}
	s.mu.Unlock()
	if err != nil {
		return err
	}
	f, err := s.opts.fs.OpenFile(s.path(TxnIndexSuffix), os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("local: open %s: %w", s.path(TxnIndexSuffix), err)
	}
	defer f.Close()
	if err := f.Truncate(int64(n)); err != nil {
		return fmt.Errorf("local: truncate %s: %w", s.path(TxnIndexSuffix), err)
	}
	return nil
}

// txnFile returns the writer's descriptor of the segment's .txnindex,
// creating the file.
func (a *activeSegment) txnFile() (vfs.File, error) {
	if a.txnw == nil {
		f, err := a.f.opts.fs.OpenFile(a.f.path(TxnIndexSuffix), os.O_CREATE|os.O_RDWR, 0o644)
		if err != nil {
			return nil, fmt.Errorf("local: open %s: %w", a.f.path(TxnIndexSuffix), err)
		}
		a.txnw = f
	}
	return a.txnw, nil
}

// abortedFor collects the aborted transactions a read_committed read from
// fetch up to upper must report: from the segment holding fetch (segs[i])
// on, until a segment's index says no later one can add any (Kafka's
// collectAbortedTransactions); complete says one did.
func (l *Log) abortedFor(segs []*segFile, i int, fetch, upper int64) (out []backend.AbortedTxn, complete bool, err error) {
	var found []producerstate.AbortedTxn
	for ; i < len(segs) && !complete; i++ {
		if !segs[i].acquire() {
			continue // retired meanwhile: its offsets are below the log start now
		}
		found, complete, err = segs[i].collectAborted(found, fetch, upper)
		segs[i].release()
		if err != nil {
			return nil, false, err
		}
	}
	return toBackendAborted(found), complete, nil
}

// CollectAborted returns the aborted transactions a read_committed read
// from fetch up to upper overlaps, from the local segments (from the one
// holding fetch on); complete says a segment's index showed no later one
// can add any. A tiered partition asks its bucket's segments first.
func (sg Segments) CollectAborted(fetch, upper int64) ([]backend.AbortedTxn, bool, error) {
	l := sg.l
	segs := l.segments()
	i := sort.Search(len(segs), func(i int) bool { return segs[i].base > fetch }) - 1
	return l.abortedFor(segs, max(i, 0), fetch, upper)
}

// AbortedTxns returns the aborted transactions (with their ABORT markers'
// offsets) that overlap [from, upper), from the .txnindex of the segments
// from the one holding from on, until one shows no later segment can add
// any: what a log cleaner removes. Sorted by first offset.
func (sg Segments) AbortedTxns(from, upper int64) ([]producerstate.AbortedTxn, error) {
	l := sg.l
	segs := l.segments()
	i := max(sort.Search(len(segs), func(i int) bool { return segs[i].base > from })-1, 0)
	var found []producerstate.AbortedTxn
	for complete := false; i < len(segs) && !complete; i++ {
		if !segs[i].acquire() {
			continue
		}
		var err error
		found, complete, err = segs[i].collectAborted(found, from, upper)
		segs[i].release()
		if err != nil {
			return nil, err
		}
	}
	slices.SortFunc(found, func(a, b producerstate.AbortedTxn) int { return int(a.FirstOffset - b.FirstOffset) })
	return found, nil
}

// toBackendAborted converts and sorts aborted transactions by first offset.
func toBackendAborted(found []producerstate.AbortedTxn) []backend.AbortedTxn {
	if len(found) == 0 {
		return nil
	}
	out := make([]backend.AbortedTxn, len(found))
	for j, a := range found {
		out[j] = backend.AbortedTxn{ProducerID: a.ProducerID, FirstOffset: a.FirstOffset}
	}
	slices.SortFunc(out, func(a, b backend.AbortedTxn) int {
		if a.FirstOffset != b.FirstOffset {
			return int(a.FirstOffset - b.FirstOffset)
		}
		return int(a.ProducerID - b.ProducerID)
	})
	return out
}

// RemoveExpiredProducers removes the producers without an open
// transaction that wrote nothing for producer.id.expiration.ms, as Kafka's
// periodic check does, and returns how many went. A log with background
// work (a Backend's BackgroundInterval > 0) does it itself every
// producer.id.expiration.check.interval.ms; a log without calls this.
func (l *Log) RemoveExpiredProducers() (int, error) {
	if err := l.checkWritable(); err != nil {
		return 0, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ps.RemoveExpiredProducers(l.now().UnixMilli()), nil
}

// armProducerExpiryLocked arms the next removal of expired producers,
// producer.id.expiration.check.interval.ms from now (Kafka's LogManager
// runs it on that period for every log). REQUIRES: l.mu held.
func (l *Log) armProducerExpiryLocked() {
	every := time.Duration(l.ps.Config().ExpirationCheckIntervalMs()) * time.Millisecond
	l.setDeadlineLocked(&l.dl.expiry, l.now().Add(every), true, dueProducerExpiry)
}

// expireProducersDue is the deadline's work: the producers idle past
// producer.id.expiration.ms go, so a partition that sees many short-lived
// idempotent producers holds the recent ones only; the next check is
// armed.
func (l *Log) expireProducersDue() {
	if err := l.lockWritable(); err != nil {
		return // closed or failed: nothing to arm again
	}
	defer l.mu.Unlock()
	l.dl.expiry.at = time.Time{} // fired
	if n := l.ps.RemoveExpiredProducers(l.now().UnixMilli()); n > 0 {
		l.logger.Debug("expired producers removed", "removed", n, "left", l.ps.Len())
	}
	l.armProducerExpiryLocked()
}

// Producers returns the producer state's producers (Kafka's
// DescribeProducers).
func (l *Log) Producers() []producerstate.ProducerInfo {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ps.Producers()
}
