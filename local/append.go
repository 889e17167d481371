package local

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/producerstate"
	"github.com/tierlog/tierlog/record"
)

// Append validates and appends batches; see backend.Partition.
//
// A leader append of a client's batches (opts.AssignOffsets without
// opts.Coordinator) is validated as Kafka's leader validates a produce
// request, every record decoded (validate.go); a follower's append and the
// coordinator's transaction markers get the checks of every batch's
// header and CRC. Each batch of a leader append must be as a producer
// sends it (base offset 0); Kafka's produce path sends one batch per
// partition, and Append takes any number.
//
// As leader (opts.AssignOffsets) Append rewrites fields of the caller's
// batches in place: the base offset and leader epoch (outside the CRC) and,
// for LogAppendTime topics, the attributes and max timestamp, and for
// CreateTime ones a max timestamp that is not the records' largest (with
// a new CRC), as Kafka's broker does. When the topic's compression.type
// makes it recompress a batch, the append is written from a copy and the
// caller's bytes are left as they were.
//
// Each batch is indexed on its own (Kafka since KAFKA-806), so a follower
// appending a fetched chunk builds the same index as the leader did.
func (l *Log) Append(ctx context.Context, batches []byte, opts backend.AppendOptions) (backend.AppendInfo, error) {
	start := time.Now()
	info, err := l.append(ctx, batches, opts)
	m := l.metrics
	if err != nil {
		m.AppendErrors.Add(1)
		return info, err
	}
	m.Appends.Add(1)
	n := int64(len(batches))
	if info.Bytes > 0 {
		n = int64(info.Bytes) // what was written: a recompressed append's size
	}
	m.AppendBytes.Add(n)
	m.AppendRecords.Add(info.LastOffset - info.FirstOffset + 1)
	m.AppendLatency.Since(start)
	return info, nil
}

func (l *Log) append(ctx context.Context, batches []byte, opts backend.AppendOptions) (backend.AppendInfo, error) {
	var info backend.AppendInfo
	if err := checkCtx(ctx); err != nil {
		return info, err
	}
	if err := l.checkWritable(); err != nil {
		return info, err
	}
	// A client's leader append is validated under the writer lock (below),
	// the others here.
	client := opts.AssignOffsets && !opts.Coordinator
	var metas []batchMeta
	if !client {
		var err error
		if metas, info, err = l.validate(batches, opts); err != nil {
			return info, err
		}
		if sb := l.cfg.Load().SegmentBytes; int64(len(batches)) > sb {
			return info, fmt.Errorf("%w: an append of %d bytes is larger than segment.bytes (%d)", backend.ErrRecordListTooLarge, len(batches), sb)
		}
	}

	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.checkWritable(); err != nil {
		return info, err
	}
	epoch := opts.LeaderEpoch
	if opts.AssignOffsets {
		var err error
		if epoch, err = l.appendEpochLocked(opts); err != nil {
			return info, err
		}
	}
	leo := l.leo.Load()
	now := l.now()
	if client {
		lv := getLeaderValidation()
		defer lv.release() // after the write: batches may be lv.out
		var err error
		if batches, metas, info, err = l.validateLeaderLocked(lv, batches, now.UnixMilli()); err != nil {
			return info, err
		}
	}
	if opts.AssignOffsets {
		l.assignOffsets(batches, metas, &info, leo, epoch, now)
	} else {
		if info.FirstOffset < leo {
			return info, fmt.Errorf("%w: follower append starts at offset %d, below the log end offset %d", backend.ErrInvalidRecord, info.FirstOffset, leo)
		}
		info.LogAppendTime = -1
	}

	// The producer state checks the batches as they will be written.
	if err := l.ps.Prepare(&l.plan, batches, producerstate.Options{Origin: originOf(opts)}); err != nil {
		return info, err
	}
	if l.plan.Duplicate {
		return l.duplicateInfo(info), nil
	}
	a, err := l.activeForWriteLocked()
	if err != nil {
		return info, err
	}
	cfg := l.cfg.Load()
	if roll, why := a.shouldRoll(cfg.SegmentBytes, cfg.SegmentMs, int64(len(batches)), info.MaxTimestamp, info.LastOffset, now); roll {
		if a, err = l.rollLocked(max(info.FirstOffset, leo), why); err != nil {
			return info, err
		}
	}
	return info, l.writeLocked(a, batches, metas, &info, now)
}

// writeLocked writes batches (their offsets assigned, checked by the
// producer state) into the active segment a: the epoch cache first, then
// the bytes, the producer state, and a flush when flush.messages or
// flush.ms says so. REQUIRES: l.mu held.
func (l *Log) writeLocked(a *activeSegment, batches []byte, metas []batchMeta, info *backend.AppendInfo, now time.Time) error {
	// The epoch cache first (as Kafka assigns epochs before it appends):
	// a checkpoint that cannot be written fails the append before a byte
	// of it is in the log.
	epochsBefore, err := l.noteEpochs(batches, metas)
	if err != nil {
		return fmt.Errorf("%w: %w", backend.ErrStorage, err)
	}
	undone, err := a.append(batches, metas)
	if err != nil {
		if epochsBefore != nil {
			l.epochs.entries = epochsBefore
			l.epochs.persist(l) // best effort: a reopen drops entries past the log end
		}
		if !undone {
			return l.fail(err)
		}
		return fmt.Errorf("%w: %w", backend.ErrStorage, err)
	}
	l.dirty = true
	l.leo.Store(info.LastOffset + 1)
	if err := l.applyProducers(a); err != nil {
		return l.fail(err)
	}
	l.unflushed += int64(info.Records)
	if cfg := l.cfg.Load(); l.unflushed >= cfg.FlushMessages || (cfg.FlushMs < 1<<62 && now.Sub(l.lastFlush).Milliseconds() >= cfg.FlushMs) {
		if err := l.flushLocked(); err != nil {
			return err
		}
	}
	return nil
}

// duplicateInfo is the answer to an append that repeated a batch of its
// producer's last five: the original batch's offsets, nothing written.
// REQUIRES: l.mu held.
func (l *Log) duplicateInfo(info backend.AppendInfo) backend.AppendInfo {
	o := l.plan.Original
	info.FirstOffset, info.LastOffset, info.Duplicate = o.FirstOffset(), o.LastOffset, true
	info.LogAppendTime = -1
	if l.cfg.Load().MessageTimestampType == backend.LogAppendTime {
		info.LogAppendTime = o.Timestamp
	}
	info.Batches, info.Records, info.Bytes = 0, 0, 0
	l.metrics.DuplicateAppends.Add(1)
	return info
}

// applyProducers commits an append's producer state once its bytes are in
// the log: aborted transactions go to the .txnindex of the segment the
// markers went to, and the last stable offset moves. A failure here leaves
// the log and its .txnindex apart: the caller fails the log (as Kafka
// does), and a reopen rebuilds it. REQUIRES: l.mu held.
func (l *Log) applyProducers(a *activeSegment) error {
	if err := l.ps.Apply(&l.plan); err != nil {
		return err
	}
	for _, c := range l.plan.Completed {
		if c.Aborted {
			if err := l.appendAborted(a.f, a, c.AbortedTxn()); err != nil {
				return err
			}
		}
	}
	l.publishLSO()
	return nil
}

// assignOffsets is the leader's part of an append: each batch gets its base
// offset from the log end leo and the leader epoch (both outside the CRC)
// and, on a LogAppendTime topic, the broker's time, else the max timestamp
// in its batchMeta (a validated batch's records' largest; with a new CRC
// only when that changes it).
func (l *Log) assignOffsets(batches []byte, metas []batchMeta, info *backend.AppendInfo, leo int64, epoch int32, now time.Time) {
	next := leo
	appendTime := int64(-1)
	if l.cfg.Load().MessageTimestampType == backend.LogAppendTime {
		appendTime = now.UnixMilli()
	}
	info.MaxTimestamp = -1
	for i := range metas {
		b := record.Batch(batches[metas[i].position : metas[i].position+metas[i].size])
		b.SetBaseOffset(next)
		b.SetPartitionLeaderEpoch(epoch)
		if appendTime >= 0 {
			b.SetLogAppendTime(appendTime)
		} else {
			b.SetMaxTimestamp(metas[i].maxTs)
		}
		metas[i].lastOffset = b.LastOffset()
		metas[i].maxTs = b.MaxTimestamp()
		info.MaxTimestamp = max(info.MaxTimestamp, metas[i].maxTs)
		next = b.NextOffset()
	}
	info.FirstOffset, info.LastOffset, info.LogAppendTime = leo, next-1, appendTime
}

// activeForWriteLocked returns the writable last segment, activating it on
// the first write after a clean open. REQUIRES: l.mu held.
func (l *Log) activeForWriteLocked() (*activeSegment, error) {
	if l.act != nil {
		return l.act, nil
	}
	segs := l.segments()
	a, err := activate(segs[len(segs)-1], l.jitter())
	if err != nil {
		return nil, fmt.Errorf("%w: %w", backend.ErrStorage, err)
	}
	l.act = a
	return a, nil
}

// validate checks every batch of a follower's or the coordinator's append
// (headers and CRCs; a client's leader append goes through
// validateLeaderLocked instead) before anything is written and returns
// the per-batch facts the append needs.
func (l *Log) validate(data []byte, opts backend.AppendOptions) ([]batchMeta, backend.AppendInfo, error) {
	var info backend.AppendInfo
	if len(data) == 0 {
		return nil, info, fmt.Errorf("%w: empty append", backend.ErrInvalidRecord)
	}
	var metas []batchMeta
	prevLast := int64(-1)
	info.MaxTimestamp = -1
	for pos := 0; pos < len(data); {
		b, err := record.Parse(data[pos:])
		if err == nil {
			err = b.Validate()
		}
		if err != nil {
			return nil, info, l.recordErr(err, pos, data)
		}
		if maxBytes := l.cfg.Load().MaxMessageBytes; int64(len(b)) > maxBytes {
			return nil, info, fmt.Errorf("%w: batch at byte %d of the append is %d bytes; max.message.bytes is %d",
				backend.ErrRecordTooLarge, pos, len(b), maxBytes)
		}
		if opts.AssignOffsets {
			if b.NumRecords() == 0 {
				return nil, info, fmt.Errorf("%w: batch at byte %d of the append has no records", backend.ErrInvalidRecord, pos)
			}
			if b.LastOffsetDelta() != b.NumRecords()-1 {
				return nil, info, fmt.Errorf("%w: batch at byte %d: last offset delta %d with %d records", backend.ErrInvalidRecord, pos, b.LastOffsetDelta(), b.NumRecords())
			}
		} else {
			if b.BaseOffset() <= prevLast {
				return nil, info, fmt.Errorf("%w: batch at byte %d starts at offset %d, not after %d", backend.ErrInvalidRecord, pos, b.BaseOffset(), prevLast)
			}
			if b.BaseOffset() < 0 {
				return nil, info, fmt.Errorf("%w: batch at byte %d has offset %d", backend.ErrInvalidRecord, pos, b.BaseOffset())
			}
			prevLast = b.LastOffset()
		}
		metas = append(metas, batchMeta{position: int64(pos), size: int64(len(b)), lastOffset: b.LastOffset(), maxTs: b.MaxTimestamp()})
		info.MaxTimestamp = max(info.MaxTimestamp, b.MaxTimestamp())
		info.Records += int(b.NumRecords())
		pos += len(b)
	}
	info.Batches, info.Bytes = len(metas), len(data)
	first, _ := record.Parse(data)
	info.FirstOffset = first.BaseOffset()
	info.LastOffset = metas[len(metas)-1].lastOffset
	return metas, info, nil
}

// recordErr maps a record package error to the backend's sentinels.
func (l *Log) recordErr(err error, pos int, data []byte) error {
	switch {
	case errors.Is(err, record.ErrBadMagic) && len(data) > pos+16 && (data[pos+16] == 0 || data[pos+16] == 1):
		return fmt.Errorf("%w: batch at byte %d of the append: %w (only magic 2 is appended)", backend.ErrUnsupportedForMessageFormat, pos, err)
	case errors.Is(err, record.ErrBadMagic):
		return fmt.Errorf("%w: batch at byte %d of the append: %w", backend.ErrInvalidRecord, pos, err)
	case errors.Is(err, record.ErrCorrupt), errors.Is(err, record.ErrTornTail), errors.Is(err, record.ErrUnknownCodec):
		return fmt.Errorf("%w: batch at byte %d of the append: %w", backend.ErrCorruptRecord, pos, err)
	}
	return fmt.Errorf("%w: batch at byte %d of the append: %w", backend.ErrInvalidRecord, pos, err)
}

// noteEpochs records the leader epochs of an append's batches in the
// epoch cache and persists it when that changed it; it returns the
// entries as they were before (nil when unchanged), for an append that
// fails after it to restore. A failed write leaves the cache unchanged.
// REQUIRES: l.mu held.
func (l *Log) noteEpochs(data []byte, metas []batchMeta) ([]EpochEntry, error) {
	before := l.epochs.entries // appends never write before its length
	changed := false
	for _, m := range metas {
		b := record.Batch(data[m.position : m.position+m.size])
		changed = l.epochs.assign(b.PartitionLeaderEpoch(), b.BaseOffset()) || changed
	}
	if !changed && !l.epochs.stale {
		return nil, nil
	}
	if err := l.epochs.persist(l); err != nil {
		l.epochs.entries = before
		return nil, err
	}
	return before, nil
}

// rollLocked seals the active segment and starts a new one at base. The
// sealed segment is flushed in the background, which then advances the
// recovery point (Kafka flushes asynchronously at roll). A failure leaves
// the old segment active, or fails the log when it cannot.
// REQUIRES: l.mu held.
func (l *Log) rollLocked(base int64, why string) (*activeSegment, error) {
	old, err := l.activeForWriteLocked()
	if err != nil {
		return nil, err
	}
	if old.f.size.Load() == 0 && old.f.base == base {
		return old, nil
	}
	// The producer state as of the new segment's base, so a recovery of
	// that segment starts from it (Kafka takes it at every roll).
	l.ps.SetEndOffset(base)
	if _, err := l.writeSnapshot(false); err != nil {
		return nil, fmt.Errorf("%w: roll to a segment at %d: %w", backend.ErrStorage, base, err)
	}
	a, err := createActive(&l.segOpts, base, l.now(), l.jitter())
	if err != nil {
		return nil, fmt.Errorf("%w: roll to a segment at %d: %w", backend.ErrStorage, base, err)
	}
	if err := old.seal(base); err != nil {
		a.closeFiles()
		a.f.release()
		return nil, l.fail(fmt.Errorf("seal segment %s: %w", old.f.logPath, err))
	}
	l.publishSegments(append(l.segments(), a.f))
	l.act = a
	l.dirty = true
	l.metrics.Rolls.Add(1)
	l.logger.Debug("rolled segment", "base", base, "reason", why)
	s := old.f
	s.acquire() // the log holds it: this cannot fail
	l.rpMu.Lock()
	lowered := l.rpLowered
	l.rpMu.Unlock()
	l.bg.Add(1)
	go func() {
		defer l.bg.Done()
		defer s.release()
		// The sealed segment's files and indexes, the snapshot, and the
		// directory when names changed (the new segment's, the
		// snapshot's): the recovery point then moves past the segment.
		err := errors.Join(old.sync(true), l.syncSnapshot(base), old.closeFiles())
		// The sealed segment keeps the writer's index mappings: from
		// now on the file budget counts them, and may close them.
		s.budget()
		if err == nil {
			err = l.syncDirIfChanged()
		}
		if err != nil {
			l.flushErrMu.Lock()
			if l.flushErr == nil {
				l.flushErr = err
			}
			l.flushErrMu.Unlock()
			return
		}
		// Not after a truncation since the roll: it may have cut below
		// base, and what was appended since is not synced. Nor past a
		// segment below this one that is not known durable (an earlier
		// roll's sync still running): the recovery point covers only a
		// prefix of synced segments, or a Flush and the next recovery
		// would trust that segment unsynced.
		l.rpMu.Lock()
		if rp := l.recoveryPoint.Load(); l.rpLowered == lowered && rp < base && rp >= s.base {
			l.recoveryPoint.Store(base)
		}
		l.rpMu.Unlock()
	}()
	return a, nil
}

// Roll closes the active segment (if it holds data) and starts a new one at
// the log end offset.
func (l *Log) Roll() error {
	if err := l.checkWritable(); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	segs := l.segments()
	if segs[len(segs)-1].size.Load() == 0 {
		return nil
	}
	_, err := l.rollLocked(l.leo.Load(), "requested")
	return err
}
