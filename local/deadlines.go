package local

import (
	"errors"
	"math"
	"time"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/timingwheel"
)

// A log's deadlines (see the package doc, "Background work"): each is one
// task on a timing wheel that, when due, only queues the log's work; a
// small pool of goroutines does the work (I/O, Log.mu), never the wheel's
// goroutine.

// dueKind says which work of a log (or of a Backend) is due.
type dueKind uint8

const (
	dueFlush          dueKind = 1 << iota // flush.ms since the last flush, with something unflushed
	dueRetention                          // a retention check
	dueDeletes                            // .deleted files whose file.delete.delay.ms passed
	dueCheckpoint                         // the Backend's checkpoint files
	dueRoll                               // segment.ms since the active segment took its first record
	dueProducerExpiry                     // producer.id.expiration.check.interval.ms since the last check
)

// deadlineWorkers bounds the goroutines doing a Backend's timed work.
const deadlineWorkers = 2

// deadlineRetry is how long a retention check that failed, or found a
// segment overdue that nothing holds back, waits before it looks again.
const deadlineRetry = 30 * time.Second

// retentionState is where a log's retention deadline stands.
type retentionState uint8

const (
	retIdle    retentionState = iota // no time retention, or not computed yet
	retQueued                        // a check is queued
	retArmed                         // the task waits for the oldest segment's deadline
	retNoData                        // the log holds no record: the first append queues a check
	retBlocked                       // the oldest segment is overdue above the high watermark
	retOverdue                       // overdue with nothing holding it back: checked once more
)

// logDeadlines is a log's timed work and its tasks. Guarded by Log.mu.
type logDeadlines struct {
	sched *scheduler // nil for a log alone until it first needs one
	own   bool       // sched was made for this log: closed with it
	work  work
	// started: Open has returned; the hooks below may queue work (the
	// loader's changes do not).
	started bool
	// background: flush.ms and retention run (a Backend's
	// BackgroundInterval > 0); .deleted files are removed either way.
	background bool

	flush deadline

	retention   *timingwheel.Task
	retState    retentionState
	retOldest   *segFile // the oldest segment when the deadline was computed
	retSegs     int      // and the number of segments
	inRetention bool     // a retention check is changing the segments

	deletes deadline
	roll    deadline
	expiry  deadline // the next removal of expired producers
	// idleSince is when the deadlines first saw the last segment (the one
	// at idleBase) hold data: the idle roll's clock.
	idleSince time.Time
	idleBase  int64
}

// deadline is one of a log's tasks on the wheel and the moment it is
// armed for.
type deadline struct {
	task *timingwheel.Task
	at   time.Time // zero: the task is not pending
}

// setDeadlineLocked arms dl for at, moving it if it was armed for another
// moment, or cancels it when ok is false (nothing is due, or never).
// REQUIRES: l.mu held.
func (l *Log) setDeadlineLocked(dl *deadline, at time.Time, ok bool, due dueKind) {
	if !ok {
		if !dl.at.IsZero() {
			cancelTask(dl.task)
			dl.at = time.Time{}
		}
		return
	}
	if at.Equal(dl.at) {
		return
	}
	s := l.schedLocked()
	if s == nil {
		return
	}
	dl.at = at
	s.arm(&dl.task, at, l.now(), &l.dl.work, due)
}

// startDeadlines is the end of Open: the log's work may be queued from
// now on. It arms what the loader left due: the deletion of segments
// recovery retired, a flush, the first retention check.
func (l *Log) startDeadlines() {
	if l.readOnly {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	d := &l.dl
	d.work.run = l.runDeadlines
	d.started = true
	l.armDeletesLocked()
	if d.background {
		l.armFlushLocked()
		l.queueRetentionLocked()
		l.armRollLocked()
		l.armProducerExpiryLocked()
	}
}

// stopDeadlines is the start of Close: no work of the log runs after it
// returns. REQUIRES: l.closed set, l.mu not held (a run in progress takes
// it).
func (l *Log) stopDeadlines() {
	l.mu.Lock()
	d := &l.dl
	s := d.sched
	d.started = false
	cancelTask(d.flush.task)
	cancelTask(d.retention)
	cancelTask(d.deletes.task)
	cancelTask(d.roll.task)
	cancelTask(d.expiry.task)
	l.mu.Unlock()
	if s != nil {
		s.stop(&d.work)
	}
}

// closeDeadlines closes a scheduler the log made for itself.
// REQUIRES: stopDeadlines returned.
func (l *Log) closeDeadlines() {
	if d := &l.dl; d.own && d.sched != nil {
		d.sched.close()
	}
}

// schedLocked returns the log's scheduler, making one for a log opened on
// its own. REQUIRES: l.mu held.
func (l *Log) schedLocked() *scheduler {
	d := &l.dl
	if d.sched == nil {
		s, err := newScheduler(nil, l.now, 1)
		if err != nil {
			l.logger.Error("no timer for the log's deadlines", "err", err)
			return nil
		}
		d.sched, d.own = s, true
	}
	return d.sched
}

// queueLocked queues the log's work. REQUIRES: l.mu held.
func (l *Log) queueLocked(due dueKind) {
	if s := l.schedLocked(); s != nil {
		s.enqueue(&l.dl.work, due)
	}
}

// runDeadlines is the log's work, on a pool goroutine.
func (l *Log) runDeadlines(due dueKind) {
	if due&dueDeletes != 0 {
		l.removeDueDeletedFiles()
	}
	if due&dueFlush != 0 {
		if err := l.flushIfDue(); err != nil && !errors.Is(err, backend.ErrClosed) {
			l.logger.Error("flush.ms", "err", err)
		}
	}
	if due&dueRetention != 0 {
		l.retentionCheck()
	}
	if due&dueRoll != 0 {
		if err := l.rollIfIdle(); err != nil && !errors.Is(err, backend.ErrClosed) {
			l.logger.Error("segment.ms", "err", err)
		}
	}
	if due&dueProducerExpiry != 0 {
		l.expireProducersDue()
	}
}

// lockWritable takes l.mu for a timed write, checking that the log may be
// written both before waiting for the lock and once it holds it (Close or
// a failure may come between); on an error the lock is not held.
func (l *Log) lockWritable() error {
	if err := l.checkWritable(); err != nil {
		return err
	}
	l.mu.Lock()
	if err := l.checkWritable(); err != nil {
		l.mu.Unlock()
		return err
	}
	return nil
}

// rollIfIdle rolls the active segment when segment.ms (less its jitter)
// has passed since it took its first record, then arms the next roll
// deadline.
func (l *Log) rollIfIdle() error {
	if err := l.lockWritable(); err != nil {
		return err
	}
	defer l.mu.Unlock()
	l.dl.roll.at = time.Time{} // fired
	if at, ok := l.idleRollAtLocked(); ok && !l.now().Before(at) {
		if _, err := l.rollLocked(l.leo.Load(), "segment.ms"); err != nil {
			return err
		}
	}
	l.armRollLocked()
	return nil
}

// idleRollAtLocked is when the last segment rolls by segment.ms if no
// append rolls it first; ok is false when it never does (it is empty, or
// segment.ms is beyond a time.Duration). The clock is the wall clock from
// when the log's deadlines first saw the segment hold data (after a
// reopen, the open: a segment not yet written to since a clean open has
// no activeSegment, and is rolled all the same). REQUIRES: l.mu held.
func (l *Log) idleRollAtLocked() (time.Time, bool) {
	d := &l.dl
	segs := l.segments()
	last := segs[len(segs)-1]
	if last.size.Load() == 0 {
		d.idleSince = time.Time{} // empty, or emptied by a truncation: the clock starts again
		return time.Time{}, false
	}
	if d.idleSince.IsZero() || d.idleBase != last.base {
		d.idleSince, d.idleBase = l.now(), last.base
	}
	jitter := int64(0)
	if l.act != nil && l.act.f == last {
		jitter = l.act.jitterMs
	}
	return msAfter(d.idleSince, max(l.cfg.Load().SegmentMs-jitter, 0))
}

// armRollLocked arms the segment.ms deadline of an active segment that
// holds data, and cancels it otherwise. Kafka rolls by segment.ms only
// when an append arrives (UnifiedLog.maybeRoll, which tierlog's append
// does too), so an idle partition's last segment would stay open forever,
// out of reach of retention, compaction and tiering; this deadline rolls
// it. REQUIRES: l.mu held.
func (l *Log) armRollLocked() {
	d := &l.dl
	if !d.started || !d.background {
		return
	}
	at, ok := l.idleRollAtLocked()
	l.setDeadlineLocked(&d.roll, at, ok, dueRoll)
}

// flushIfDue flushes when flush.ms has passed since the last flush, then
// arms the next flush deadline (if something is unflushed).
func (l *Log) flushIfDue() error {
	if err := l.lockWritable(); err != nil {
		return err
	}
	defer l.mu.Unlock()
	l.dl.flush.at = time.Time{} // fired
	if at, ok := msAfter(l.lastFlush, l.cfg.Load().FlushMs); ok && !l.now().Before(at) {
		if err := l.flushLocked(); err != nil {
			return err
		}
	}
	l.armFlushLocked()
	return nil
}

// unflushedLocked says whether a flush would fsync something.
// REQUIRES: l.mu held.
func (l *Log) unflushedLocked() bool {
	return l.dirty || l.recoveryPoint.Load() != l.leo.Load()
}

// armFlushLocked arms the flush.ms deadline (the last flush plus
// flush.ms) when something is unflushed, and cancels it otherwise.
// REQUIRES: l.mu held.
func (l *Log) armFlushLocked() {
	d := &l.dl
	if !d.started || !d.background {
		return
	}
	at, ok := msAfter(l.lastFlush, l.cfg.Load().FlushMs) // flush.ms's "never" (Long.MAX) is not ok
	l.setDeadlineLocked(&d.flush, at, ok && l.unflushedLocked(), dueFlush)
}

// queueRetentionLocked queues a retention check (it arms the next
// deadline when done). REQUIRES: l.mu held.
func (l *Log) queueRetentionLocked() {
	d := &l.dl
	if !d.started || !d.background {
		return
	}
	d.retState = retQueued
	l.queueLocked(dueRetention)
}

// retentionCheck applies retention (as DeleteOldSegments) and arms the
// next retention deadline.
func (l *Log) retentionCheck() {
	if l.lockWritable() != nil {
		return // closed, or failed until it is reopened
	}
	defer l.mu.Unlock()
	d := &l.dl
	cfg := l.cfg.Load()
	d.inRetention = true
	_, err := l.deleteOldSegmentsLocked(cfg.RetentionMs, cfg.RetentionBytes)
	d.inRetention = false
	if err != nil {
		if l.checkWritable() != nil {
			return
		}
		l.logger.Error("retention", "err", err)
	}
	l.armRetentionLocked(err != nil)
}

// armRetentionLocked arms the time retention deadline: the moment the
// oldest segment's largest timestamp (else its file's mtime) is older than
// retention.ms, when DeleteOldSegments would delete it. Size retention
// needs no deadline: only a roll makes a log bigger in whole segments, and
// a roll queues a check (see segmentsChangedLocked). failed says the check
// that calls it failed: the next one waits deadlineRetry.
// REQUIRES: l.mu held.
func (l *Log) armRetentionLocked(failed bool) {
	d := &l.dl
	segs := l.segments()
	// Whether the check that just ran kept a segment it was due to
	// delete: the same oldest segment was overdue before it.
	keptAgain := d.retState == retOverdue && d.retOldest == segs[0]
	d.retOldest, d.retSegs, d.retState = segs[0], len(segs), retIdle
	cfg := l.cfg.Load()
	if !d.started || !d.background || !cfg.Delete() || cfg.RemoteStorageEnable || cfg.RetentionMs < 0 {
		cancelTask(d.retention)
		return
	}
	s := l.schedLocked()
	if s == nil {
		return
	}
	now := l.now()
	retry := func() {
		d.retState = retArmed
		s.arm(&d.retention, now.Add(deadlineRetry), now, &d.work, dueRetention)
	}
	if failed {
		retry()
		return
	}
	oldest := segs[0]
	if len(segs) == 1 && oldest.size.Load() == 0 {
		cancelTask(d.retention)
		d.retState = retNoData // the first append queues a check
		return
	}
	if cfg.RetentionBytes >= 0 {
		var size int64
		for _, s := range segs {
			size += s.size.Load()
		}
		if size-oldest.size.Load() >= cfg.RetentionBytes {
			// The size rule deletes it: the check that just ran did not.
			l.keptOverdueLocked(segs, keptAgain, now)
			return
		}
	}
	ts := int64(-1)
	if oldest.acquire() {
		t, _, err := oldest.largestTimestamp()
		oldest.release()
		if err != nil {
			l.logger.Error("retention: largest timestamp", "base", oldest.base, "err", err)
			retry()
			return
		}
		ts = t
	}
	if ts < 0 {
		ts = oldest.lastModified().UnixMilli()
	}
	if cfg.RetentionMs > math.MaxInt64-1-ts {
		cancelTask(d.retention)
		return // never
	}
	// From at on, now.UnixMilli()-ts > retention.ms: the segment goes.
	at := time.UnixMilli(ts + cfg.RetentionMs + 1)
	if at.After(now) {
		d.retState = retArmed
		s.arm(&d.retention, at, now, &d.work, dueRetention)
		return
	}
	l.keptOverdueLocked(segs, keptAgain, now)
}

// keptOverdueLocked arms the retention task when the oldest segment is
// past a retention limit yet still here. Above the high watermark it waits
// for the high watermark (offsetsChangedLocked queues the check).
// Otherwise the check read its clock just before the deadline: it looks
// again at once, and after that only every deadlineRetry (a check that
// disagrees with the deadline must not spin): again says the check that
// just ran was that second look. REQUIRES: l.mu held.
func (l *Log) keptOverdueLocked(segs []*segFile, again bool, now time.Time) {
	d := &l.dl
	if retentionUpper(l, segs) > l.hw.Load() {
		cancelTask(d.retention)
		d.retState = retBlocked
		return
	}
	at := now
	if again {
		l.logger.Warn("retention: the oldest segment is past a retention limit but was kept", "base", segs[0].base)
		at = now.Add(deadlineRetry)
	}
	d.retState = retOverdue
	d.sched.arm(&d.retention, at, now, &d.work, dueRetention)
}

// retentionUpper is the first offset above the oldest segment: retention
// deletes it only once the high watermark reaches it.
func retentionUpper(l *Log, segs []*segFile) int64 {
	if len(segs) > 1 {
		return segs[1].base
	}
	return l.leo.Load()
}

// offsetsChangedLocked is called at each move of the log end, the high
// watermark or the last stable offset: it arms the flush deadline for
// what was appended and the idle roll of a segment that took its first
// record, and queues a retention check that was waiting for
// data or for the high watermark. REQUIRES: l.mu held.
func (l *Log) offsetsChangedLocked() {
	d := &l.dl
	if !d.started || !d.background {
		return
	}
	l.armFlushLocked()
	l.armRollLocked()
	switch d.retState {
	case retNoData:
		if segs := l.segments(); len(segs) > 1 || segs[0].size.Load() > 0 {
			l.queueRetentionLocked()
		}
	case retBlocked:
		if retentionUpper(l, l.segments()) <= l.hw.Load() {
			l.queueRetentionLocked()
		}
	}
}

// segmentsChangedLocked is called when the segment list changes (a roll,
// retention, a truncation, a cleaner's replacement): a new oldest segment
// has another retention deadline, and a roll may put the log over
// retention.bytes. REQUIRES: l.mu held.
func (l *Log) segmentsChangedLocked(segs []*segFile) {
	d := &l.dl
	if !d.started || !d.background {
		return
	}
	l.armRollLocked() // a roll leaves an empty active segment
	if d.inRetention {
		return
	}
	cfg := l.cfg.Load()
	if !cfg.Delete() || cfg.RemoteStorageEnable {
		return
	}
	if (cfg.RetentionMs >= 0 && segs[0] != d.retOldest) || (cfg.RetentionBytes >= 0 && len(segs) > d.retSegs) {
		l.queueRetentionLocked()
	}
}

// configChangedLocked reschedules after SetConfig. REQUIRES: l.mu held.
func (l *Log) configChangedLocked(old, c *backend.Config) {
	d := &l.dl
	if !d.started {
		return
	}
	l.armFlushLocked()
	if old.RetentionMs != c.RetentionMs || old.RetentionBytes != c.RetentionBytes ||
		old.Delete() != c.Delete() || old.RemoteStorageEnable != c.RemoteStorageEnable {
		l.queueRetentionLocked()
	}
	if old.FileDeleteDelayMs != c.FileDeleteDelayMs {
		l.armDeletesLocked()
	}
	if old.SegmentMs != c.SegmentMs {
		l.armRollLocked()
	}
}

// armDeletesLocked arms the removal of the .deleted files retired first,
// at their retirement plus file.delete.delay.ms (as configured now).
// REQUIRES: l.mu held.
func (l *Log) armDeletesLocked() {
	d := &l.dl
	if !d.started {
		return
	}
	var at time.Time
	ok := len(l.pending) > 0
	if ok {
		// A delay beyond a time.Duration is never: Close removes them.
		at, ok = msAfter(l.pending[0].retired, l.cfg.Load().FileDeleteDelayMs)
	}
	l.setDeadlineLocked(&d.deletes, at, ok, dueDeletes)
}

// removeDueDeletedFiles unlinks the .deleted files whose delay passed and
// arms the next removal.
func (l *Log) removeDueDeletedFiles() {
	l.mu.Lock()
	if l.closed.Load() {
		l.mu.Unlock()
		return // Close removes them
	}
	l.dl.deletes.at = time.Time{} // fired
	now, delay := l.now(), l.cfg.Load().FileDeleteDelayMs
	var due []string
	n := 0
	for _, p := range l.pending {
		if at, ok := msAfter(p.retired, delay); !ok || now.Before(at) {
			break
		}
		due = append(due, p.paths...)
		n++
	}
	l.pending = append([]*pendingDelete(nil), l.pending[n:]...)
	l.armDeletesLocked()
	l.mu.Unlock()
	l.removeAll(due) // Close waits for this run, so the files go before it returns
}
