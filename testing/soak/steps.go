package soak

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/record"
	"github.com/tierlog/tierlog/tiered"
)

// pick chooses the next step.
func (c *child) pick() (string, func(ctx context.Context) error) {
	steps := []struct {
		w    int
		name string
		fn   func(ctx context.Context) error
	}{
		{30, "produce-a", c.produceA},
		{12, "flush-a", c.flushA},
		{12, "produce-b", c.produceB},
		{6, "flush-b", c.flushB},
		{10, "offload", c.offload},
		{6, "retention", c.retention},
		{5, "clean-b", c.cleanB},
		{10, "produce-c", c.produceC},
		{5, "flush-c", c.flushC},
		{4, "offload-c", c.offloadC},
		{3, "retention-c", c.retentionC},
		{4, "compact-c", c.compactC},
		{1, "reopen-c", c.reopenC},
		{3, "checkpoint", func(context.Context) error { return c.b.Checkpoint() }},
		{2, "roll", c.roll},
		{1, "delete-records", c.deleteRecords},
		{2, "reopen-a", c.reopenA},
		{1, "restart-clean", c.restartClean},
	}
	total := 0
	for _, s := range steps {
		total += s.w
	}
	n := c.rng.IntN(total)
	for _, s := range steps {
		if n < s.w {
			return s.name, s.fn
		}
		n -= s.w
	}
	panic("unreachable")
}

func (c *child) codec() record.Codec {
	switch n := c.rng.IntN(20); {
	case n < 12:
		return record.None
	case n < 15:
		return record.LZ4
	case n < 17:
		return record.ZSTD
	case n < 19:
		return record.Snappy
	default:
		return record.GZIP
	}
}

func (c *child) value(lo, hi int) []byte {
	n := lo + c.rng.IntN(hi-lo+1)
	o := c.rng.IntN(len(c.pool) - n)
	return c.pool[o : o+n]
}

// produceA appends one to three batches to A as the leader does
// (idempotent or not, any codec), records them in the ledger, and moves
// the high watermark to the log end. Now and then an idempotent batch is
// sent again, as a producer retrying does: it must be answered as a
// duplicate with the first append's offsets.
func (c *child) produceA(ctx context.Context) error {
	var bl record.Builder
	idem := c.rng.IntN(10) < 7
	nb := 1
	if !idem {
		nb = 1 + c.rng.IntN(3)
	}
	var payload []byte
	records := 0
	for range nb {
		h := record.NewBatchHeader()
		h.Codec = c.codec()
		if idem {
			h.ProducerID, h.ProducerEpoch, h.BaseSequence = c.pidA, 0, c.seqA
		}
		bl.Reset(h)
		n := 1 + c.rng.IntN(30)
		ts := time.Now().UnixMilli()
		for range n {
			var key []byte
			if c.rng.IntN(3) == 0 {
				key = fmt.Appendf(nil, "a%d", c.rng.IntN(1000))
			}
			var hdrs []record.Header
			if c.rng.IntN(8) == 0 {
				hdrs = []record.Header{{Key: []byte("h"), Value: c.value(0, 16)}}
			}
			bl.Append(ts, key, c.value(8, 1000), hdrs)
		}
		b, err := bl.Build()
		if err != nil {
			return err
		}
		payload = append(payload, b...)
		records += n
	}
	retry := append([]byte(nil), payload...)
	end := c.la.Offsets().LogEnd
	info, err := c.p.Append(ctx, payload, backend.AppendOptions{AssignOffsets: true, LeaderEpoch: int32(c.spec.Life)})
	if err != nil {
		return err
	}
	if info.FirstOffset != end || info.Duplicate {
		return violation("A", "an append at the log end %d was given offsets %d..%d (duplicate %v)", end, info.FirstOffset, info.LastOffset, info.Duplicate)
	}
	for b := record.Batch(payload); len(b) > 0; {
		n := int(b.Length()) + record.LogOverhead
		if err := c.led.batchA(b[:n]); err != nil {
			return err
		}
		b = b[n:]
	}
	if idem {
		c.seqA += int32(records)
	}
	c.count("batches_produced", int64(nb))
	c.count("records_produced", int64(records))
	c.count("bytes_produced", int64(len(payload)))
	if err := c.p.SetHighWatermark(info.LastOffset + 1); err != nil {
		return err
	}
	if idem && c.rng.IntN(10) == 0 {
		dup, err := c.p.Append(ctx, retry, backend.AppendOptions{AssignOffsets: true, LeaderEpoch: int32(c.spec.Life)})
		if err != nil {
			return fmt.Errorf("resend an idempotent batch: %w", err)
		}
		if !dup.Duplicate || dup.FirstOffset != info.FirstOffset || dup.LastOffset != info.LastOffset {
			return violation("A", "a resent idempotent batch (first at %d..%d) was answered %+v", info.FirstOffset, info.LastOffset, dup)
		}
		c.count("duplicates_answered", 1)
	}
	return nil
}

// produceB appends a batch of keyed records (some tombstones) to B.
func (c *child) produceB(ctx context.Context) error {
	if err := c.produceKeyed(ctx, topicB, c.lb, &c.pidB, &c.seqB); err != nil {
		return err
	}
	return c.lb.SetHighWatermark(c.lb.Offsets().LogEnd)
}

// produceC is produceB for C, through its tiered partition.
func (c *child) produceC(ctx context.Context) error {
	if err := c.produceKeyed(ctx, topicC, c.pc, &c.pidC, &c.seqC); err != nil {
		return err
	}
	return c.pc.SetHighWatermark(c.pc.Offsets().LogEnd)
}

// produceKeyed appends a batch of keyed records (some tombstones) to a
// compacted topic as its leader does, idempotently or not, and records
// it in the ledger.
func (c *child) produceKeyed(ctx context.Context, topic byte, p backend.Partition, pid *int64, seq *int32) error {
	var bl record.Builder
	h := record.NewBatchHeader()
	h.Codec = c.codec()
	idem := c.rng.IntN(2) == 0
	if idem {
		h.ProducerID, h.ProducerEpoch, h.BaseSequence = *pid, 0, *seq
	}
	bl.Reset(h)
	n := 1 + c.rng.IntN(15)
	ts := time.Now().UnixMilli()
	for range n {
		k := c.rng.IntN(c.rng.IntN(keysB) + 1) // skewed: low keys are hot
		var v []byte
		if c.rng.IntN(12) != 0 {
			v = c.value(16, 400)
		}
		bl.Append(ts, fmt.Appendf(nil, "k%05d", k), v, nil)
	}
	b, err := bl.Build()
	if err != nil {
		return err
	}
	batch := append([]byte(nil), b...)
	end := p.Offsets().LogEnd
	info, err := p.Append(ctx, batch, backend.AppendOptions{AssignOffsets: true, LeaderEpoch: int32(c.spec.Life)})
	if err != nil {
		return err
	}
	if info.FirstOffset != end || info.Duplicate {
		return violation(string(topic), "an append at the log end %d was given offsets %d..%d", end, info.FirstOffset, info.LastOffset)
	}
	if err := c.led.batchKeyed(topic, batch, keyOf); err != nil {
		return err
	}
	if idem {
		*seq += int32(n)
	}
	c.count("records_produced", int64(n))
	c.count("bytes_produced", int64(len(batch)))
	return nil
}

// keysB is how many keys B's records spread over.
const keysB = 300

// flushA flushes A and then, durably, acknowledges its log end.
func (c *child) flushA(context.Context) error {
	end := c.p.Offsets().LogEnd
	if err := c.p.Flush(); err != nil {
		return err
	}
	c.count("flushes", 1)
	return c.led.flushed(topicA, end)
}

func (c *child) flushB(context.Context) error {
	end := c.lb.Offsets().LogEnd
	if err := c.lb.Flush(); err != nil {
		return err
	}
	c.count("flushes", 1)
	return c.led.flushed(topicB, end)
}

func (c *child) flushC(context.Context) error {
	end := c.pc.Offsets().LogEnd
	if err := c.pc.Flush(); err != nil {
		return err
	}
	c.count("flushes", 1)
	return c.led.flushed(topicC, end)
}

func (c *child) offloadC(ctx context.Context) error {
	n, err := c.pc.Offload(ctx)
	c.count("c_segments_uploaded", int64(n))
	return err
}

// retentionC applies C's retention: local retention only (C is compacted,
// not deleted), so its offloaded segments leave the disk, for the bucket's
// cleaner to clean.
func (c *child) retentionC(ctx context.Context) error {
	before := len(c.lc.SegmentInfos())
	_, err := c.pc.ApplyRetention(ctx)
	c.count("c_local_segments_deleted", int64(before-len(c.lc.SegmentInfos())))
	return err
}

// compactC runs a round of the bucket's cleaner over C (now and then
// forced, whatever the dirty ratio; with a small map, so a round may stop
// at its map's end) while appending to C.
func (c *child) compactC(ctx context.Context) error {
	var st tiered.CompactStats
	var err error
	o := tiered.CompactOptions{MemoryBytes: c.spec.CleanerMemory, Force: c.rng.IntN(3) == 0, ScratchDir: filepath.Join(c.spec.Root, "scratch")}
	done := make(chan struct{})
	go func() { // c.rng is the step's: only this goroutine's caller draws from it
		defer close(done)
		st, err = c.pc.CompactRemote(ctx, o)
	}()
	for range c.rng.IntN(4) {
		if err := c.produceC(ctx); err != nil {
			<-done
			return err
		}
	}
	<-done
	if err == nil && st.Ran {
		c.count("c_compact_rounds", 1)
		c.count("c_compact_segments_replaced", int64(st.SegmentsReplaced))
		c.count("c_compact_merges", int64(st.Merged))
		c.count("c_compact_records_removed", st.RecordsRemoved)
	}
	return err
}

func (c *child) offload(ctx context.Context) error {
	before := c.metrics.BytesUploaded.Load()
	n, err := c.p.Offload(ctx)
	c.count("segments_uploaded", int64(n))
	c.count("segment_bytes_uploaded", c.metrics.BytesUploaded.Load()-before)
	return err
}

func (c *child) retention(ctx context.Context) error {
	n, err := c.p.ApplyRetention(ctx)
	c.count("remote_segments_deleted", int64(n))
	if err == nil {
		if h := c.p.Head(); h.Count() > 0 && c.p.Offsets().LogStart != h.LogStartOffset() {
			return violation("A", "after retention the log start is %d, the manifest's %d", c.p.Offsets().LogStart, h.LogStartOffset())
		}
	}
	return err
}

// cleanB runs the log cleaner over B while appending to it.
func (c *child) cleanB(ctx context.Context) error {
	var cleaned bool
	var err error
	done := make(chan struct{})
	go func() {
		defer close(done)
		cleaned, err = c.cleaner.RunOnce(ctx)
	}()
	for range c.rng.IntN(4) {
		if err := c.produceB(ctx); err != nil {
			<-done
			return err
		}
	}
	<-done
	if cleaned && err == nil {
		c.count("clean_rounds", 1)
	}
	st := c.cleaner.Stats()
	c.stMu.Lock()
	c.st["clean_records_removed"] = st.Removed
	c.stMu.Unlock()
	return err
}

func (c *child) roll(context.Context) error {
	switch c.rng.IntN(3) {
	case 0:
		return c.lb.Roll()
	case 1:
		return c.lc.Roll()
	}
	return c.la.Roll()
}

// deleteRecords raises A's log start (Kafka's DeleteRecords) to any
// offset up to the high watermark: mostly to the end of the bucket's first
// segment; often a little, into the middle of a batch or a segment; now
// and then anywhere, past the bucket's end too, or to the high watermark
// itself (every record goes).
func (c *child) deleteRecords(ctx context.Context) error {
	o := c.p.Offsets()
	m, err := c.p.Manifest(ctx)
	if err != nil {
		return err
	}
	hw := o.HighWatermark
	if hw <= o.LogStart {
		return c.p.DeleteRecordsBefore(ctx, o.LogStart) // nothing to delete: a no-op
	}
	to := o.LogStart + 1 + c.rng.Int64N(min(hw-o.LogStart, 300))
	switch n := c.rng.IntN(16); {
	case n == 0:
		to = hw
	case n < 3:
		to = o.LogStart + 1 + c.rng.Int64N(hw-o.LogStart)
	case n < 11 && len(m.Segments) > 1 && m.Segments[0].LastOffset >= o.LogStart:
		to = m.Segments[0].LastOffset + 1
	}
	return c.p.DeleteRecordsBefore(ctx, to)
}

// reopenA closes the tiered partition and opens it again (the manifest is
// read afresh, the caches are empty). The local log must come back with
// the high watermark it had and no lower a log start (the partition's log
// start is checked after every step).
func (c *child) reopenA(ctx context.Context) error {
	before := c.la.Offsets()
	if err := c.p.Close(); err != nil {
		return err
	}
	if err := c.openA(ctx); err != nil {
		return err
	}
	c.newProducers()
	if after := c.la.Offsets(); after.HighWatermark != before.HighWatermark || after.LogStart < before.LogStart {
		return violation("A", "closed with the local log at %+v, reopened at %+v", before, after)
	}
	return nil
}

// reopenC is reopenA for C.
func (c *child) reopenC(ctx context.Context) error {
	before := c.lc.Offsets()
	if err := c.pc.Close(); err != nil {
		return err
	}
	if err := c.openC(ctx); err != nil {
		return err
	}
	c.newProducers()
	if after := c.lc.Offsets(); after.HighWatermark != before.HighWatermark || after.LogStart < before.LogStart {
		return violation("C", "closed with the local log at %+v, reopened at %+v", before, after)
	}
	return nil
}

// restartClean closes the whole log directory cleanly and opens it again.
func (c *child) restartClean(context.Context) error {
	if err := c.closeAll(); err != nil {
		return err
	}
	return c.openAll()
}

// final brings the bucket up to date with no faults on, applies
// retention, cleans B until nothing is left to clean, offloads C and
// cleans it in the bucket, checks, and closes cleanly.
func (c *child) final() error {
	steps := []struct {
		name string
		fn   func(ctx context.Context) error
	}{
		{"flush-a", c.flushA},
		{"flush-b", c.flushB},
		{"offload", func(ctx context.Context) error {
			for try := 0; ; try++ {
				if err := c.offload(ctx); err == nil || !retryable(err) || try > 20 {
					return err
				}
				time.Sleep(200 * time.Millisecond)
			}
		}},
		{"retention", c.retention},
		{"clean-b", func(ctx context.Context) error {
			for range 20 {
				cleaned, err := c.cleaner.RunOnce(ctx)
				if err != nil || !cleaned {
					return err
				}
				c.count("clean_rounds", 1)
			}
			return nil
		}},
		{"flush-c", c.flushC},
		{"offload-c", func(ctx context.Context) error {
			if err := c.lc.Roll(); err != nil {
				return err
			}
			for try := 0; ; try++ {
				if err := c.offloadC(ctx); err == nil || !retryable(err) || try > 20 {
					return err
				}
				time.Sleep(200 * time.Millisecond)
			}
		}},
		{"retention-c", c.retentionC},
		{"compact-c", func(ctx context.Context) error {
			for range 20 {
				st, err := c.pc.CompactRemote(ctx, tiered.CompactOptions{Force: true, ScratchDir: filepath.Join(c.spec.Root, "scratch")})
				if err != nil {
					return err
				}
				c.count("c_compact_rounds", 1)
				if st.End == st.FirstDirty { // nothing was left to map
					return nil
				}
			}
			return nil
		}},
	}
	for _, s := range steps {
		if err := c.do(s.name, s.fn); err != nil {
			return err
		}
	}
	c.step = "close"
	c.saveProgress()
	return c.closeAll()
}
