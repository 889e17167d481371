package tiered

import (
	"context"
	"fmt"

	"github.com/tierlog/tierlog/manifest"
)

// ApplyRetention applies total retention to the bucket as Kafka's remote
// log manager does: segments whose largest timestamp is older than
// retention.ms, the oldest segments while the partition's size (remote
// segments plus local-only ones) exceeds retention.bytes, and segments
// wholly below the log start offset go. They leave the manifest first (a
// commit), and only then are their objects deleted; a delete that fails
// leaves garbage for GC, never a manifest naming a missing object. It
// returns how many segments it removed.
func (p *Partition) ApplyRetention(ctx context.Context) (int, error) {
	ctx, done, err := p.beginLeaderChange(ctx)
	if err != nil {
		return 0, err
	}
	defer done()
	st := p.man.Load()
	lastRemote := st.head.LastOffset()
	if lastRemote < 0 {
		return 0, nil
	}
	cfg := p.local.Config()
	now := p.opts.Now().UnixMilli()
	// The partition's size: remote segments (the head's running totals),
	// plus local ones the bucket does not hold.
	total := st.head.Size()
	for _, si := range p.local.SegmentInfos() {
		if si.BaseOffset > lastRemote {
			total += si.Size
		}
	}
	gone := func(s manifest.Segment, total int64) bool {
		return s.LastOffset < st.head.LogStartOffset() ||
			(cfg.Delete() && cfg.RetentionMs >= 0 && now-s.MaxTimestamp > cfg.RetentionMs) ||
			(cfg.Delete() && cfg.RetentionBytes >= 0 && total-s.Size >= cfg.RetentionBytes)
	}
	// Most passes remove nothing: the first segment tells, and the whole
	// manifest is loaded only when it goes.
	first, err := p.firstSegment(ctx, st)
	if err != nil || !gone(first, total) {
		return 0, err
	}
	m, err := p.whole(ctx, st.head)
	if err != nil {
		return 0, err
	}
	segs := m.Segments
	n := 0
	for _, s := range segs {
		if !gone(s, total) {
			break
		}
		total -= s.Size
		n++
	}
	if n == 0 {
		return 0, nil
	}
	next := *m
	next.Segments = append([]manifest.Segment(nil), segs[n:]...)
	next.LogStartOffset = max(st.head.LogStartOffset(), segs[n-1].LastOffset+1)
	if len(next.Segments) > 0 {
		next.LogStartOffset = max(next.LogStartOffset, next.Segments[0].BaseOffset)
	}
	if err := p.commitLocked(ctx, st, m, &next); err != nil {
		return 0, err
	}
	p.metrics.RemoteSegmentsDeleted.Add(int64(n))
	if err := p.ensureBackupLocked(ctx); err != nil {
		// Nothing is deleted on the strength of a generation without a
		// backup (backup.go): gc removes the objects, and the local log
		// follows the log start at the next change.
		return n, err
	}
	var keys []string
	for _, s := range segs[:n] {
		for _, suf := range s.Objects() {
			keys = append(keys, p.layout().Segment(s, suf))
		}
	}
	// The log start moved: the local log follows when it still holds
	// offsets below it.
	if ls := p.local.Offsets(); next.LogStartOffset > ls.LogStart && next.LogStartOffset <= ls.HighWatermark {
		if err := p.local.DeleteRecordsBefore(ctx, next.LogStartOffset); err != nil {
			return n, err
		}
	}
	if err := p.store.Delete(ctx, keys...); err != nil {
		return n, fmt.Errorf("tiered: %d segments left the manifest but their objects were not all deleted (gc will): %w", n, err)
	}
	return n, nil
}
