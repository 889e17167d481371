package tiered

import (
	"context"
	"fmt"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/local"
	"github.com/tierlog/tierlog/manifest"
	"github.com/tierlog/tierlog/wal"
)

// LocalOf returns the local log under p, for tests that look (and write)
// beneath the partition: nothing outside the package's tests has it.
func LocalOf(p *Partition) *local.Log { return p.local }

// KeepMovingLocalTier makes every read of p's local tier report that the
// tier moved past the read's view, as local retention racing every view
// would. Call it before p is shared.
func KeepMovingLocalTier(p *Partition) {
	i := len(p.tiers) - 1
	p.tiers[i] = movingTier{p.tiers[i]}
}

// movingTier is a tier whose offsets always moved past the view.
type movingTier struct{ tier }

func (movingTier) read(context.Context, view, int64, int64, backend.ReadOptions) (backend.Records, bool, error) {
	return nil, true, fmt.Errorf("%w: %w", errViewMoved, &backend.OffsetOutOfRangeError{Offset: 0, LogStart: 0, LogEnd: 0})
}

// AppendSegments commits segs after the manifest's last segment as an
// upload does: from the head and the parts a carry merges
// (commitAppendLocked), not the whole manifest; for tests of the
// manifest at sizes no log reaches (the segments' objects are not put).
func AppendSegments(ctx context.Context, p *Partition, segs []manifest.Segment) error {
	ctx, done, err := p.beginLeaderChange(ctx)
	if err != nil {
		return err
	}
	defer done()
	st := p.man.Load()
	return p.commitAppendLocked(ctx, st, segs, st.head.LogStartOffset())
}

// CommitSegments is AppendSegments through the whole manifest, as
// retention and DeleteRecordsBefore commit (commitLocked, Layer).
func CommitSegments(ctx context.Context, p *Partition, segs []manifest.Segment) error {
	ctx, done, err := p.beginLeaderChange(ctx)
	if err != nil {
		return err
	}
	defer done()
	st := p.man.Load()
	prev, err := p.whole(ctx, st.head)
	if err != nil {
		return err
	}
	next := *prev
	next.Segments = append(prev.Segments[:len(prev.Segments):len(prev.Segments)], segs...)
	return p.commitLocked(ctx, st, prev, &next)
}

// ClaimAfterRoleCheck is the claim of a leader's change that passed
// beginLeaderChange's role check just before a BecomeFollower: it takes
// the partition's lock and claims, with no role check of its own.
func ClaimAfterRoleCheck(ctx context.Context, p *Partition) error {
	ctx, done, err := p.beginChange(ctx)
	if err != nil {
		return err
	}
	defer done()
	return p.claimLocked(ctx)
}

// WALWriterOf is the WAL writer a diskless partition appends through.
func WALWriterOf(p *Partition) *wal.Writer { return p.dl.writer() }

// SetClaimed sets the epoch p holds its claim at, as an append that
// checked the claim before another goroutine moved it sees it.
func SetClaimed(p *Partition, epoch int32) { p.claimed.Store(epoch) }

// StartWALWriter is the Backend's WAL writer, started anew if the last
// one halted.
func StartWALWriter(b *Backend) (*wal.Writer, error) { return b.walWriter() }

// CacheRemoteRange puts n bytes of the .log object of p's remote segment
// seg, from position pos, into the chunk cache, as a read-ahead that
// fetched only them (its neighbours evicted) leaves them.
func CacheRemoteRange(ctx context.Context, p *Partition, seg manifest.Segment, pos, n int64) error {
	key := p.objectKey(seg, manifest.LogSuffix)
	data, err := p.store.ReadAll(ctx, key.String(), pos, n)
	if err != nil {
		return err
	}
	p.caches.chunks.put(key, pos, chunk{data: data, batches: walkBatches(data, seg, key, pos), atBatch: true})
	return nil
}
