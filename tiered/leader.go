package tiered

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/local"
	"github.com/tierlog/tierlog/manifest"
	"github.com/tierlog/tierlog/objstore"
)

// Leadership and the bucket.
//
// One writer owns a partition's manifest: the leader. BecomeLeader(epoch)
// makes this partition that writer; before its first change it claims the
// bucket, committing the manifest it finds with its own epoch (a
// conditional put on the ETag it read). From then on an older leader's
// commit fails its condition, and that writer, reading the manifest back,
// finds a newer epoch and is fenced; a writer finding an older epoch's
// commit that landed before its claim keeps it (those segments were below
// the old leader's high watermark) and claims over it. A follower uploads
// nothing: it reads the manifest for the partition's log start and for its
// own local retention, and a follower too far behind the leader builds its
// start from the bucket (BuildFromBucket).

// ErrNotLeader means a change only the leader makes (an upload, remote
// retention, a new log start in the bucket) was asked of a partition this
// broker does not lead. It matches backend.ErrNotLeader, so
// backend.KafkaCode answers it NOT_LEADER_OR_FOLLOWER (6).
var ErrNotLeader = fmt.Errorf("tiered: %w", backend.ErrNotLeader)

func (p *Partition) notLeader() error {
	return fmt.Errorf("%w: %s (epoch %d)", ErrNotLeader, p.prefix, p.epoch.Load())
}

// attach reads the manifest the first time it is needed (see
// Options.OpenWithoutBucket). Its failure to reach the bucket is a
// retryable backend.ErrStorage.
func (p *Partition) attach(ctx context.Context) error {
	if p.attached.Load() {
		return nil
	}
	// Close ends the reading too: another caller, Close itself, may wait
	// for attachMu (a reader passes its own ctx, often one that never ends).
	ctx, cancel := p.withClose(ctx)
	defer cancel()
	if err := p.attachMu.Lock(ctx); err != nil {
		return storageError(ctx, fmt.Errorf("tiered: %s: waiting for another read of the manifest: %w", p.layout().Manifest(), err))
	}
	defer p.attachMu.Unlock()
	if p.attached.Load() {
		return nil
	}
	st, err := p.readManifest(ctx)
	if err == nil && st.etag == "" && p.manifestExpected() {
		st, err = p.restoreManifest(ctx)
	}
	if err != nil {
		return storageError(ctx, fmt.Errorf("tiered: %s: the bucket cannot be read (local data is served meanwhile): %w", p.layout().Manifest(), err))
	}
	if st.etag == "" {
		if rs, ok := p.segs.RemoteLogStart(); ok {
			return fmt.Errorf("%w: %w under %q: the partition's log start is %d (log-start-offset-checkpoint) but its local log starts at %d, "+
				"so the offsets between live in a bucket: is the store URL or prefix right?", objstore.ErrRetryable, ErrNoManifest, p.layout().Manifest(), rs, p.local.Offsets().LogStart)
		}
		if gen := p.recordedGeneration(); gen > 0 {
			// A wrong URL or prefix is likelier here than a bucket
			// rolled back to before the partition (judge refuses that
			// once attached).
			// Retryable: a store not yet caught up (a restarted MinIO
			// node) answers not-found for what it holds.
			return fmt.Errorf("%w: %w under %q: the partition last committed or adopted manifest generation %d (%s): is the store URL or prefix right?",
				objstore.ErrRetryable, ErrNoManifest, p.layout().Manifest(), gen, filepath.Join(p.local.Dir(), local.TierStateCheckpoint))
		}
	}
	if err := p.judge(st); err != nil {
		return err
	}
	if p.dl == nil && st.head.WAL() != nil && !st.head.Deleted() && !p.segs.ReadOnly() && !p.opts.ReadReplica {
		// Its recent records may be only in WAL objects, which a classic
		// partition neither reads nor keeps. (A tool's read-only view
		// reads its segments, and so does a read replica: replica.go.)
		return fmt.Errorf("%w: %s: the bucket's manifest (generation %d) is a diskless partition's: open it with diskless.enable=true",
			backend.ErrInvalidConfig, p.layout().Manifest(), st.head.Generation())
	}
	p.adopt(st)
	if st.head.Deleted() && (p.openedEmpty || p.local.Offsets().LogEnd == 0) {
		p.reborn.Store(true)
	}
	if epoch := p.epoch.Load(); p.role.Load() == roleLeader && st.head.WriterEpoch() > epoch {
		p.fence(st.head.WriterEpoch(), fmt.Errorf("the manifest was committed by leader epoch %d, this writer has %d", st.head.WriterEpoch(), epoch))
	}
	p.attached.Store(true)
	return nil
}

// Attached says whether the partition has read its manifest (see
// Options.OpenWithoutBucket).
func (p *Partition) Attached() bool { return p.attached.Load() }

// Attach reads the manifest now if it was not read yet: a Backend's
// service attaches partitions opened while the bucket was unreachable.
func (p *Partition) Attach(ctx context.Context) error {
	if err := p.checkOpen(); err != nil {
		return err
	}
	ctx, cancel := p.withClose(ctx)
	defer cancel()
	return p.attach(ctx)
}

// claimLocked makes the bucket's manifest carry this leader's epoch before
// its first change in the epoch (see the top of this file); with no
// manifest yet it creates an empty one. REQUIRES: p.mu held, attached.
func (p *Partition) claimLocked(ctx context.Context) error {
	if err := p.Fenced(); err != nil {
		return err
	}
	epoch := p.epoch.Load()
	if p.role.Load() != roleLeader {
		// Became a follower since beginLeaderChange looked (BecomeFollower
		// stores the role before the epoch): epoch may be the new
		// leader's, which this writer must never claim.
		return p.notLeader()
	}
	if p.dl != nil {
		// A halted WAL writer is replaced first, and the new one claims.
		if err := p.renewWriterLocked(); err != nil {
			return err
		}
	}
	if p.claimed.Load() == epoch {
		return nil
	}
	for attempt := 0; ; attempt++ {
		now, err := p.judged(ctx)
		if err != nil {
			return fmt.Errorf("tiered: claim the manifest for leader epoch %d: %w", epoch, err)
		}
		next, err := p.claimOver(now, epoch)
		if next == nil {
			return err // claimed already, or fenced
		}
		if p.dl != nil {
			if err := p.claimWALLocked(ctx, now, &next, epoch); err != nil {
				return fmt.Errorf("tiered: claim the manifest for leader epoch %d: %w", epoch, err)
			}
		}
		err = p.claimPut(ctx, now, next)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, objstore.ErrPreconditionFailed):
			// Another writer, or a retry of this put whose first try
			// landed: reconciling tells which.
			if err := p.reconcileLocked(ctx); err != nil {
				if errors.Is(err, objstore.ErrRetryable) && attempt < 3 && p.unknown == nil {
					continue // an older leader's commit landed first: claim over it
				}
				// Still unknown (the bucket could not be read back): the
				// next change reconciles first. Claiming again now would
				// take this writer's own landed claim for a rival's.
				return err
			}
			if p.claimed.Load() == epoch {
				return nil
			}
			if attempt >= 3 {
				return fmt.Errorf("tiered: claim the manifest for leader epoch %d: %w", epoch, objstore.ErrRetryable)
			}
		default:
			// A lost answer is settled by the next change, which
			// reconciles it as it does a commit's.
			return err
		}
	}
}

// claimOver decides what this writer at epoch commits over the manifest
// now to claim it: the next manifest, or nil with nil when the manifest
// is this writer's already, or nil with the fencing error when another
// writer owns the partition (or a deleted one's). REQUIRES: p.mu held.
func (p *Partition) claimOver(now *manifestState, epoch int32) (*manifest.Head, error) {
	known := p.man.Load()
	switch {
	case now.etag == "":
		// No manifest yet: create one carrying this epoch, so an
		// older leader cannot create it after this one took over.
		return (&manifest.Manifest{Generation: 1, WriterEpoch: epoch, Lineage: newLineage()}).Head()
	case now.head.Deleted() && now.etag != known.etag:
		// A writer that knew the partition before its deletion: it
		// must not bring it back.
		p.adopt(now)
		p.fence(now.head.WriterEpoch(), fmt.Errorf("the partition was deleted (manifest generation %d)", now.head.Generation()))
		return nil, p.Fenced()
	case now.head.Deleted() && !p.reborn.Load():
		// Its local log held records when it first read the deleted
		// manifest: they may be the deleted partition's (a broker that
		// missed the deletion, or a Delete cut short), and must not
		// come back.
		o := p.local.Offsets()
		p.fence(now.head.WriterEpoch(), fmt.Errorf("the partition was deleted (manifest generation %d), and the local log at %s "+
			"held offsets %d..%d from before: finish the deletion (Delete the partition again) before creating it anew",
			now.head.Generation(), p.local.Dir(), o.LogStart, o.LogEnd-1))
		return nil, p.Fenced()
	case now.head.Deleted():
		// A new partition of the same name, which has known only the
		// deleted manifest: it starts over from it, as a new
		// incarnation (Born) no writer of the old one may write into.
		return (&manifest.Manifest{Generation: now.head.Generation() + 1, WriterEpoch: epoch, Born: now.head.Generation() + 1, Lineage: newLineage()}).Head()
	case recreatedSince(known, now):
		p.adopt(now)
		p.fence(now.head.WriterEpoch(), recreatedError(known, now))
		return nil, p.Fenced()
	case now.head.WriterEpoch() > epoch:
		p.adopt(now)
		p.fence(now.head.WriterEpoch(), fmt.Errorf("the manifest was committed by leader epoch %d, this writer has %d", now.head.WriterEpoch(), epoch))
		return nil, p.Fenced()
	case now.head.WriterEpoch() == epoch && now.etag == p.man.Load().etag:
		// This writer's own manifest (a restart at the same epoch); a
		// diskless partition's new WAL writer still claims it.
		if p.walNamesOther(now.head) {
			return nextClaim(now, epoch)
		}
		p.claimed.Store(epoch)
		return nil, nil
	case now.head.WriterEpoch() == epoch:
		// Another writer at this epoch moved the manifest since this
		// one read it: two leaders of one epoch; this one steps back.
		p.adopt(now)
		p.fence(epoch, fmt.Errorf("the manifest moved to generation %d, written by another writer of leader epoch %d", now.head.Generation(), epoch))
		return nil, p.Fenced()
	default:
		return nextClaim(now, epoch)
	}
}

// nextClaim is the manifest a claim at epoch commits over now: its head
// with the next generation and the epoch, naming the same parts (a claim
// PUTs the head only), and a lineage if it had none.
func nextClaim(now *manifestState, epoch int32) (*manifest.Head, error) {
	return now.head.Edit(func(m *manifest.Manifest) {
		m.Generation, m.WriterEpoch = now.head.Generation()+1, epoch
		giveLineage(m)
	})
}

// newLineage is a new incarnation's random identity (never zero).
func newLineage() [8]byte {
	for {
		if l := newPartID(); l != ([8]byte{}) {
			return l
		}
	}
}

// giveLineage gives m a lineage if it has none: a manifest written before
// lineages gets one at its next commit, which every directory that
// adopts it then records.
func giveLineage(m *manifest.Manifest) {
	if m.Lineage == ([8]byte{}) && !m.Deleted {
		m.Lineage = newLineage()
	}
}

// recreatedSince says whether the partition was deleted and created anew
// since a writer read known: the bucket's manifest now belongs to an
// incarnation born after it. A writer that has read no manifest, or only
// a deleted one (a new partition itself), cannot tell, and is not judged.
func recreatedSince(known, now *manifestState) bool {
	return known.etag != "" && !known.head.Deleted() && now.head.Born() > known.head.Generation()
}

func recreatedError(known, now *manifestState) error {
	return fmt.Errorf("the partition was deleted and created anew (generation %d) since this writer read generation %d: "+
		"its records belong to the deleted partition", now.head.Born(), known.head.Generation())
}

// claimPut commits next over now, conditionally, as this writer's claim.
// On a failure the outcome is left for reconcileLocked: the manifest held
// is now's and the attempt is next. REQUIRES: p.mu held.
func (p *Partition) claimPut(ctx context.Context, now *manifestState, next *manifest.Head) error {
	data := next.Encode()
	info, err := p.store.Put(ctx, p.layout().Manifest(), bytes.NewReader(data), int64(len(data)), objstore.PutOptions{IfMatch: now.etag, IfNoneMatch: now.etag == ""})
	p.metrics.ManifestBytesPut.Add(int64(len(data)))
	if err != nil {
		p.adopt(now)
		p.unknown = next
		return fmt.Errorf("tiered: claim the manifest for leader epoch %d: %w", next.WriterEpoch(), err)
	}
	p.adopt(&manifestState{head: next, etag: info.ETag})
	if p.dl != nil {
		p.dl.claimCommitted(next.WriterEpoch()) // before claimed: see claimedFor
	}
	p.claimed.Store(next.WriterEpoch())
	p.metrics.ManifestCommits.Add(1)
	p.backupManifest(ctx, next.Generation(), data)
	p.opts.Logger.Info("claimed the bucket", "prefix", p.prefix, "epoch", next.WriterEpoch(), "generation", next.Generation(),
		"previous_epoch", now.head.WriterEpoch())
	return nil
}

// BecomeLeader makes this partition the leader at epoch; see
// backend.Partition. The bucket is claimed at the first change of the
// epoch (an upload, retention), so this call needs no bucket. An epoch
// above the one that fenced this writer lifts the fencing.
func (p *Partition) BecomeLeader(ctx context.Context, epoch int32) error {
	if err := p.checkNotClosed(); err != nil {
		return err
	}
	if err := p.notReplica(); err != nil {
		return err
	}
	if cur := p.epoch.Load(); epoch < cur {
		return fmt.Errorf("%w: %s: leader epoch %d is older than %d, seen already", backend.ErrFenced, p.prefix, epoch, cur)
	}
	if p.dl == nil || p.claimed.Load() == epoch {
		if err := p.local.BecomeLeader(ctx, epoch); err != nil {
			return err
		}
	}
	// A diskless partition's local log leads once its claim has made its
	// tail from the bucket (claimWALLocked): the epoch begins at that log
	// end, and the tail keeps the epochs its batches were written at.
	p.epoch.Store(epoch)
	p.role.Store(roleLeader)
	if f := p.fenc.Load(); f != nil && epoch > f.epoch {
		p.fenc.CompareAndSwap(f, nil)
	}
	p.opts.Logger.Info("became leader", "prefix", p.prefix, "epoch", epoch)
	if p.dl != nil {
		// A diskless partition claims now (fencing the writer before it,
		// taking its tail): its appends wait for the claim. The bucket
		// unreachable, the first append claims.
		if err := p.claimDiskless(ctx); err != nil {
			p.opts.Logger.Warn("diskless: the claim failed; the first append tries again", "prefix", p.prefix, "epoch", epoch, "err", err)
		}
	}
	if p.opts.onWork != nil {
		p.opts.onWork(p)
	}
	return nil
}

// BecomeFollower makes this partition a follower at epoch; see
// backend.Partition. An upload in flight finishes or fails its commit; no
// new one starts.
func (p *Partition) BecomeFollower(ctx context.Context, epoch int32) error {
	if err := p.checkNotClosed(); err != nil {
		return err
	}
	if p.opts.ReadReplica {
		return nil // a follower already, of a bucket it never writes
	}
	if cur := p.epoch.Load(); epoch < cur {
		return fmt.Errorf("%w: %s: leader epoch %d is older than %d, seen already", backend.ErrFenced, p.prefix, epoch, cur)
	}
	if err := p.local.BecomeFollower(ctx, epoch); err != nil {
		return err
	}
	// The role before the epoch: a change that reads the epoch and then
	// the role (claimLocked, commitBuiltLocked) never takes the new
	// leader's epoch for its own.
	p.role.Store(roleFollower)
	p.epoch.Store(epoch)
	if p.dl != nil {
		// Appends not yet in the bucket fail (unreported: the writer
		// forgets the partition).
		p.dl.writer().Forget(p.dl.tp)
		p.dl.failed.Store(true)
		// A follower's log is the broker's to change (truncation to a new
		// leader's epoch end, a start over): leading again, it is made
		// from the bucket once more.
		p.dl.rebuilt.Store(false)
		p.dl.pending.Store(false)
	}
	p.opts.Logger.Info("became follower", "prefix", p.prefix, "epoch", epoch)
	return nil
}

// needsClaim says whether the partition leads at an epoch it has not yet
// claimed the bucket for (read without p.mu: a hint for the service).
func (p *Partition) needsClaim() bool {
	return p.role.Load() == roleLeader && p.claimed.Load() != p.epoch.Load() && p.Fenced() == nil
}

// IsLeader says whether the partition leads (BecomeLeader, or Open with
// its LeaderEpoch).
func (p *Partition) IsLeader() bool { return p.role.Load() == roleLeader }

// Refresh reads the manifest again and adopts it when it moved on: a
// follower follows the leader's commits this way (the partition's log
// start, what local retention may delete). A leader's own commits keep it
// current already.
func (p *Partition) Refresh(ctx context.Context) error {
	ctx, done, err := p.beginChange(ctx)
	if err != nil {
		return err
	}
	defer done()
	return p.refreshLocked(ctx)
}

// refreshLocked adopts the bucket's manifest when its generation is newer
// than the one held. A HEAD first: a manifest whose ETag is the one held
// is not read again (a follower's tick over an idle partition costs one
// request and no body; a changed one costs a HEAD and a GET).
// REQUIRES: p.mu held.
func (p *Partition) refreshLocked(ctx context.Context) error {
	if cur := p.man.Load(); cur != nil && cur.etag != "" {
		info, err := p.store.Head(ctx, p.layout().Manifest())
		if err == nil && info.ETag == cur.etag {
			p.metrics.ManifestUnchanged.Add(1)
			return nil
		}
		// Changed, missing or unreadable: read and judge it whole.
	}
	now, err := p.judged(ctx)
	if err != nil {
		return storageError(ctx, fmt.Errorf("tiered: refresh %s: %w", p.layout().Manifest(), err))
	}
	if cur := p.man.Load(); now.etag != cur.etag && now.head.Generation() >= cur.head.Generation() {
		p.adopt(now)
		if p.role.Load() == roleLeader && now.head.WriterEpoch() > p.epoch.Load() {
			p.fence(now.head.WriterEpoch(), fmt.Errorf("the manifest was committed by leader epoch %d, this writer has %d", now.head.WriterEpoch(), p.epoch.Load()))
		}
	}
	return nil
}

// FollowerStep is a follower's periodic work: follow the manifest, then
// delete local segments the bucket holds (verified against it) as
// local.retention.* says.
func (p *Partition) FollowerStep(ctx context.Context) error {
	ctx, done, err := p.beginChange(ctx)
	if err != nil {
		return err
	}
	defer done()
	if err := p.refreshLocked(ctx); err != nil {
		return err
	}
	if err := p.fitLocalStartLocked(ctx); err != nil {
		return err
	}
	return p.applyLocalRetentionLocked(ctx)
}

// BuildFromBucket starts a follower's log where the bucket's segment
// holding leaderLocalLogStart-1 ends, with the producer snapshot the bucket
// keeps there; see backend.Tiered. The leader epochs below that point are
// the manifest's, which EndOffsetForEpoch reads.
func (p *Partition) BuildFromBucket(ctx context.Context, leaderLocalLogStart int64) (int64, error) {
	if err := p.notReplica(); err != nil {
		return 0, err
	}
	if p.role.Load() == roleLeader {
		return 0, fmt.Errorf("tiered: %s: the leader builds nothing from the bucket", p.prefix)
	}
	ctx, done, err := p.beginChange(ctx)
	if err != nil {
		return 0, err
	}
	defer done()
	if err := p.refreshLocked(ctx); err != nil {
		return 0, err
	}
	head := p.Head()
	var seg manifest.Segment
	ok := false
	if leaderLocalLogStart >= 1 && leaderLocalLogStart-1 >= head.LogStartOffset() {
		if seg, ok, err = p.holding(ctx, head, leaderLocalLogStart-1); err != nil {
			return 0, storageError(ctx, err)
		}
	}
	if !ok {
		return 0, fmt.Errorf("%w: tiered: %s: the bucket does not hold offset %d (its segments end at %d): the leader's upload may not be committed yet",
			backend.ErrStorage, p.prefix, leaderLocalLogStart-1, head.LastOffset())
	}
	var snap []byte
	if seg.SnapshotSize > 0 {
		if snap, err = p.remoteIndex(ctx, seg, manifest.SnapshotSuffix); err != nil {
			return 0, storageError(ctx, err)
		}
	}
	next := seg.LastOffset + 1
	if err := p.segs.StartAt(ctx, next, snap); err != nil {
		return 0, err
	}
	p.verified = nil
	p.adopt(p.man.Load()) // the local log's checkpointed start follows the bucket's
	p.opts.Logger.Info("built the follower's start from the bucket", "prefix", p.prefix, "next", next,
		"leader_local_log_start", leaderLocalLogStart, "log_start", head.LogStartOffset())
	return next, nil
}
