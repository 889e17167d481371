package tiered

import (
	"context"
	"errors"
	"fmt"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/local"
	"github.com/tierlog/tierlog/manifest"
)

// Before local retention deletes a local segment, the bucket must hold
// that segment, byte for byte: a manifest entry with the same base and
// last offset, size and CRC-32C as the local file (the CRC computed from
// the local file, never taken from the manifest alone), whose objects
// exist. A writer whose local log diverged from the bucket's (another
// writer's data under the same offsets) keeps its own.

// ErrDiverged means a local segment differs from the bucket's copy of the
// same offsets: local retention keeps it, and an operator must decide
// which copy is right.
var ErrDiverged = errors.New("tiered: local log and bucket disagree")

// verifiedSegment is a local segment known to be in the bucket: the
// manifest entry (by id) and the local file's size.
type verifiedSegment struct {
	id   [8]byte
	size int64
	last int64
}

// checkObjectsLocked HEADs the objects of just-committed segments: they
// must exist with the sizes the manifest records. Those that do are
// verified (their CRC was computed from the local file at upload).
// REQUIRES: p.mu held.
func (p *Partition) checkObjectsLocked(ctx context.Context, segs []manifest.Segment) error {
	for _, seg := range segs {
		if err := p.headObjects(ctx, seg); err != nil {
			return err
		}
		p.markVerifiedLocked(seg)
	}
	return nil
}

func (p *Partition) markVerifiedLocked(seg manifest.Segment) {
	if p.verified == nil {
		p.verified = map[int64]verifiedSegment{}
	}
	p.verified[seg.BaseOffset] = verifiedSegment{id: seg.ID, size: seg.Size, last: seg.LastOffset}
}

// headObjects checks that a segment's objects exist with the sizes the
// manifest records.
func (p *Partition) headObjects(ctx context.Context, seg manifest.Segment) error {
	for _, suf := range seg.Objects() {
		key := p.key(seg.Name(suf))
		info, err := p.store.Head(ctx, key)
		if err != nil {
			return fmt.Errorf("tiered: check %s after its commit: %w", key, err)
		}
		if size, _ := seg.Object(suf); info.Size != size {
			return fmt.Errorf("%w: tiered: %s is %d bytes, the manifest says %d", backend.ErrCorruptRecord, key, info.Size, size)
		}
	}
	return nil
}

// bucketHoldsLocked says whether the bucket holds exactly the local
// segment si; an error says why not (ErrDiverged when the copies differ).
// REQUIRES: p.mu held.
func (p *Partition) bucketHoldsLocked(ctx context.Context, m *manifest.Manifest, si local.SegmentInfo) error {
	i, ok := m.Find(si.BaseOffset)
	if !ok || m.Segments[i].BaseOffset != si.BaseOffset || m.Segments[i].LastOffset != si.NextOffset-1 {
		return fmt.Errorf("%w: local segment %d..%d is not one segment of the bucket", ErrDiverged, si.BaseOffset, si.NextOffset-1)
	}
	seg := m.Segments[i]
	if v, ok := p.verified[si.BaseOffset]; ok && v.id == seg.ID && v.size == si.Size && v.last == si.NextOffset-1 {
		return nil
	}
	h, err := p.local.OpenSegment(si.BaseOffset)
	if err != nil {
		return fmt.Errorf("tiered: %w", err)
	}
	defer h.Close()
	var mine manifest.Segment
	mine.BaseOffset, mine.MaxTimestamp = si.BaseOffset, -1
	if err := p.scanForUpload(h, &mine); err != nil {
		return err
	}
	if h.Size() != seg.Size || mine.LogCRC != seg.LogCRC {
		return fmt.Errorf("%w: local segment %s (%d bytes, CRC-32C %08x) is not the bucket's %s (%d bytes, CRC-32C %08x)",
			ErrDiverged, h.Path(), h.Size(), mine.LogCRC, p.key(seg.Name(manifest.LogSuffix)), seg.Size, seg.LogCRC)
	}
	if err := p.headObjects(ctx, seg); err != nil {
		return err
	}
	p.markVerifiedLocked(seg)
	return nil
}
