package local

import (
	"context"
	"fmt"
	"sort"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/producerstate"
	"github.com/tierlog/tierlog/vfs"
)

// BecomeLeader records that this broker leads the partition from epoch on:
// the epoch's start is the log end (Kafka's maybeAssignEpochStartOffset on
// becoming leader), so OffsetsForLeaderEpoch answers for it before its first
// append. The latest cached epoch again changes nothing; an older one is
// an error matching backend.ErrFenced (a stale leadership decision). The
// entry lasts while the log end stays there: like Kafka's, it is dropped by
// a reopen before the first append, when the next BecomeLeader restores it.
// So BecomeLeader writes nothing to disk: the checkpoint file takes the
// entry with the epoch's first append, before its batches (a broker made
// leader of 10,000 partitions paid two fsyncs and a rename each, for an
// entry the next open drops).
func (l *Log) BecomeLeader(ctx context.Context, epoch int32) error {
	if err := checkCtx(ctx); err != nil {
		return err
	}
	if err := l.checkWritable(); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if n := len(l.epochs.entries); n > 0 && epoch < l.epochs.entries[n-1].Epoch {
		return fmt.Errorf("%w: %s: leader epoch %d is older than %d, seen already", backend.ErrFenced, l.dir, epoch, l.epochs.entries[n-1].Epoch)
	}
	if l.epochs.assign(epoch, l.leo.Load()) {
		// The file and the cache differ only at the log end now.
		l.epochs.stale = true
	}
	l.role, l.leadEpoch = roleLeading, epoch
	return nil
}

// BecomeFollower records that this broker follows the partition from
// epoch on: leader appends are refused from now on (a follower's epochs
// come with the batches it replicates).
func (l *Log) BecomeFollower(ctx context.Context, epoch int32) error {
	if err := checkCtx(ctx); err != nil {
		return err
	}
	if l.closed.Load() {
		return l.closedErr()
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.role = roleFollowing
	return nil
}

// logRole is what the broker last said of the log's leadership.
type logRole uint8

const (
	roleUnknown   logRole = iota // no BecomeLeader or BecomeFollower since open
	roleLeading                  // BecomeLeader(Log.leadEpoch)
	roleFollowing                // BecomeFollower
)

// appendEpochLocked is the leader epoch a leader append stamps: the epoch
// the log leads at, as backend.AppendOptions.EpochAt says; a follower's
// log takes no leader append. A log told neither since it opened (one
// used without a broker's leadership calls) stamps the caller's epoch, or
// its latest cached epoch for 0, but never an epoch older than that one:
// the batches and the epoch cache would disagree. REQUIRES: l.mu held.
func (l *Log) appendEpochLocked(opts backend.AppendOptions) (int32, error) {
	switch l.role {
	case roleLeading:
		epoch, err := opts.EpochAt(l.leadEpoch)
		if err != nil {
			return -1, fmt.Errorf("%w (%s)", err, l.dir)
		}
		return epoch, nil
	case roleFollowing:
		return -1, fmt.Errorf("%w: a leader append at epoch %d to a follower (%s)", backend.ErrWrongLeaderEpoch, opts.LeaderEpoch, l.dir)
	}
	n := len(l.epochs.entries)
	if n == 0 {
		return opts.LeaderEpoch, nil
	}
	latest := l.epochs.entries[n-1].Epoch
	switch {
	case opts.LeaderEpoch == 0:
		return latest, nil
	case opts.LeaderEpoch < latest:
		return -1, fmt.Errorf("%w: an append at leader epoch %d, older than the log's latest epoch %d (%s)", backend.ErrWrongLeaderEpoch, opts.LeaderEpoch, latest, l.dir)
	}
	return opts.LeaderEpoch, nil
}

// StartAt empties the log and starts it at offset, with the producer state
// of snapshot (a producer snapshot describing the log up to offset, in
// Kafka's format; empty: no producers): Kafka's truncateFullyAndStartAt,
// as a follower does after building its state from a bucket whose copy of
// the partition ends at offset. The epoch cache starts empty; the first
// batches appended bring their epochs. Segments readers hold stay readable
// until released.
func (sg Segments) StartAt(ctx context.Context, offset int64, snapshot []byte) error {
	l := sg.l
	if err := checkCtx(ctx); err != nil {
		return err
	}
	if offset < 0 {
		return fmt.Errorf("local: start at offset %d", offset)
	}
	if len(snapshot) > 0 {
		// Refuse a damaged snapshot before changing anything.
		if _, err := producerstate.DecodeSnapshot(snapshot); err != nil {
			return fmt.Errorf("local: start at %d: producer snapshot: %w", offset, err)
		}
	}
	if err := l.checkWritable(); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.truncateFullyLocked(offset); err != nil {
		return err
	}
	l.epochs.entries = nil
	if err := l.epochs.persist(l); err != nil {
		return l.fail(err)
	}
	if len(snapshot) > 0 {
		l.snapChanges++
		if err := vfs.WriteFileAtomic(l.segOpts.fs, l.dir, FileName(offset, SnapshotSuffix), snapshot); err != nil {
			return l.fail(fmt.Errorf("local: write %s: %w", l.snapshotPath(offset), err))
		}
		if err := l.ps.Load(snapshot, offset, l.now().UnixMilli()); err != nil {
			return l.fail(fmt.Errorf("local: load %s: %w", l.snapshotPath(offset), err))
		}
		l.ps.SetEndOffset(offset)
		l.ps.SetHighWatermark(l.hw.Load())
		l.publishLSO()
	}
	l.dirty = true
	return nil
}

// SpanAfter returns the first segment holding an offset above offset (the
// segment after a bucket's copy that ends at offset), by binary search; ok
// is false when the log ends at or before offset+1.
func (sg Segments) SpanAfter(offset int64) (span SegmentSpan, ok bool) {
	l := sg.l
	segs := l.segments()
	leo := l.leo.Load()
	next := func(i int) int64 {
		if i+1 < len(segs) {
			return segs[i+1].base
		}
		return leo
	}
	i := sort.Search(len(segs), func(i int) bool { return next(i) > offset+1 })
	if i == len(segs) || next(i) <= segs[i].base {
		return SegmentSpan{}, false
	}
	s := segs[i]
	return SegmentSpan{BaseOffset: s.base, NextOffset: next(i), Size: s.size.Load(), Active: i == len(segs)-1}, true
}
