package tiered

import (
	"context"
	"errors"
	"fmt"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/objstore"
)

// Read replicas.
//
// A read replica serves a partition from another cluster's bucket alone
// (Options.ReadReplica, BackendOptions.ReadReplica): no broker of the
// origin replicates to it and it writes nothing to the bucket. Its local
// log holds no record: it starts where the bucket's segments end (Kafka's
// truncateFullyAndStartAt, with the producer snapshot the bucket keeps
// there, so the last stable offset knows the origin's open transactions),
// and its high watermark is that end. Every offset below is served from
// the bucket, as a follower's below its local start: Fetch, ListOffsets
// and OffsetsForLeaderEpoch (the manifest's epochs).
//
// ReplicaStep follows the origin: a HEAD of the manifest, a GET (and the
// new parts) only when it changed, then the local log moves to the new
// end. A Backend's service steps every replica each task interval, so a
// replica is behind the origin's last commit by at most one interval plus
// the time of one step.
//
// The origin's retention may delete objects a replica's manifest still
// names. A read that finds such an object missing steps the replica (the
// origin's newer manifest no longer names it) and reads once more: the
// answer is then out of range, never another record. A replica never
// restores a manifest, claims, commits, uploads or collects garbage; a
// manifest that went back in time takes it offline as any partition.
//
// A replica that has not yet followed its bucket (opened while it was
// unreachable) tries at its first read or lookup, and answers a retryable
// backend.ErrStorage while the bucket does not answer: never an empty
// log's out-of-range, which would make a consumer reset its offset.
//
// A replica of a diskless topic serves the records past its segments too,
// from the WAL, up to what the origin's writer marked acknowledged:
// see replica_wal.go.

// ErrReadReplica is a write to a read replica (it matches
// backend.ErrNotLeader: its origin's leader takes writes).
var ErrReadReplica = fmt.Errorf("%w: tiered: a read replica serves reads only", backend.ErrNotLeader)

// ReadReplica says whether the partition is a read replica.
func (p *Partition) ReadReplica() bool { return p.opts.ReadReplica }

// notReplica refuses a write to a read replica.
func (p *Partition) notReplica() error {
	if p.opts.ReadReplica {
		return fmt.Errorf("%w (%s)", ErrReadReplica, p.prefix)
	}
	return nil
}

// ReplicaStep follows the origin's manifest and moves the replica's local
// log to the bucket's end (see above). It is ErrReadReplica's opposite: a
// partition not opened as a replica refuses it.
func (p *Partition) ReplicaStep(ctx context.Context) error {
	if !p.opts.ReadReplica {
		return fmt.Errorf("tiered: %s: ReplicaStep on a partition that is not a read replica", p.prefix)
	}
	ctx, done, err := p.beginChange(ctx)
	if err != nil {
		return err
	}
	defer done()
	if err := p.refreshLocked(ctx); err != nil {
		return err
	}
	return p.catchUpLocked(ctx)
}

// catchUpLocked starts the local log at the end of the manifest held,
// unless it starts and ends there already (a replica's local log holds no
// record: one that does, or ends elsewhere, is started over). The
// manifest is adopted before the local log moves (a view takes the local offsets first, then the manifest: it
// never sees the local log past a manifest that does not reach it).
// REQUIRES: p.mu held.
func (p *Partition) catchUpLocked(ctx context.Context) error {
	h := p.Head()
	if h.Deleted() {
		p.replicaSynced.Store(true)
		return nil // the origin deleted it: what was served stays, nothing moves
	}
	if h.WAL() != nil {
		return p.followWALLocked(ctx, h) // a diskless partition's
	}
	p.rwal, p.rlocal = nil, false
	// The bucket's end: past its last segment, or its log start when
	// retention took every segment.
	end := remoteEnd(h)
	if lo := p.local.Offsets(); lo.LogEnd == end && lo.LogStart == end {
		p.replicaSynced.Store(true)
		return nil
	}
	if err := p.startAtLocked(ctx, h, end); err != nil {
		return err
	}
	if err := p.local.SetHighWatermark(end); err != nil {
		return err
	}
	p.adopt(p.man.Load()) // the local log's checkpointed start follows the bucket's
	p.replicaSynced.Store(true)
	return nil
}

// replicaReady is nil once the replica has followed its bucket at least
// once. Before (a Backend opened it with the bucket unreachable) its
// local log says nothing of the origin's offsets: it steps now, and if
// the bucket still does not answer, the error is a retryable
// backend.ErrStorage, never an answer from an empty log (an out-of-range
// that would send a consumer to reset its offset).
func (p *Partition) replicaReady(ctx context.Context) error {
	if !p.opts.ReadReplica || p.replicaSynced.Load() {
		return nil
	}
	err := p.Attach(ctx)
	if err == nil {
		err = p.ReplicaStep(ctx)
	}
	if err == nil && !p.replicaSynced.Load() {
		// A step may end without following (one that passed numbers WAL
		// gc removed serves from the next step's manifest).
		err = errors.New("its step served nothing yet")
	}
	if err != nil {
		return storageError(ctx, fmt.Errorf("tiered: %s: the read replica has not followed its bucket yet: %w", p.prefix, err))
	}
	return nil
}

// replicaRead is Read for a read replica: a read that found an object
// the manifest names missing from the bucket (the origin's retention
// removed it) steps the replica and reads once more.
func (p *Partition) replicaRead(ctx context.Context, offset int64, opts backend.ReadOptions) (backend.Records, error) {
	if err := p.replicaReady(ctx); err != nil {
		return nil, err
	}
	recs, err := p.readTries(ctx, offset, opts)
	if err == nil || !errors.Is(err, objstore.ErrNotFound) {
		return recs, err
	}
	if serr := p.ReplicaStep(ctx); serr != nil {
		return nil, errors.Join(err, serr)
	}
	return p.readTries(ctx, offset, opts)
}
