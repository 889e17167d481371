package tiered

import (
	"context"
	"fmt"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/manifest"
)

// A tiered partition's offsets, from the local log's and the committed
// manifest's.

// Offsets returns the partition's offsets in one view: LogStart is the
// remote start when old segments live in the bucket; LocalLogStart the
// local one; TieredEnd the committed manifest's end (see tieredEnd).
func (p *Partition) Offsets() backend.Offsets {
	v := p.view()
	return v.offsets()
}

// tieredEnd is backend.Offsets.TieredEnd: the offset after the last one
// of m's segments, or the log start when m holds none (before the
// manifest is read, m is an empty one). A deleted partition's manifest is
// nothing of a partition created anew under its name.
func tieredEnd(h *manifest.Head, logStart int64) int64 {
	if last := h.LastOffset(); last >= 0 && !h.Deleted() {
		return last + 1
	}
	return logStart
}

// notifyTieredEnd fires Changed when the tiered end is no longer before:
// called (deferred) around each change of the manifest or the log start.
func (p *Partition) notifyTieredEnd(before int64) {
	if p.Offsets().TieredEnd != before {
		p.segs.NotifyChanged()
	}
}

// fitLocalStartLocked moves the local log's start up to the manifest's
// when a committed log start (DeleteRecordsBefore, remote retention) did
// not reach it: the change was interrupted after its commit, or its
// commit's answer was lost and adopted later. REQUIRES: p.mu held.
func (p *Partition) fitLocalStartLocked(ctx context.Context) error {
	o := p.local.Offsets()
	h := p.Head()
	if h.Deleted() {
		return nil // a deleted partition's log start is not this one's (see Offsets)
	}
	if target := min(h.LogStartOffset(), o.HighWatermark); target > o.LogStart {
		if err := p.ensureBackupLocked(ctx); err != nil {
			return err
		}
		if err := p.local.DeleteRecordsBefore(ctx, target); err != nil {
			return fmt.Errorf("tiered: move the local log start to the committed %d: %w", target, err)
		}
	}
	return nil
}
