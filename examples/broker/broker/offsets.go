package broker

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tierlog/tierlog/backend"
)

// checkLeaderEpoch answers a request's current leader epoch as Kafka's
// leader does: -1 skips the check; an older epoch is fenced (the client
// learned of a leader before this one: it refreshes its metadata), a
// newer one unknown.
func (p *partition) checkLeaderEpoch(current int32) error {
	switch {
	case current < 0 || current == p.epoch:
		return nil
	case current > p.epoch:
		return kerr.UnknownLeaderEpoch
	}
	return kerr.FencedLeaderEpoch
}

// listOffsets answers every special time: -1 (latest: the high
// watermark, or the last stable offset for read_committed), -2
// (earliest), -3 (the largest timestamp), -4 (earliest local), -5 (latest
// tiered), and a timestamp (the first offset at or after it; -1 when no
// record is that late).
func (b *Broker) listOffsets(ctx context.Context, r *kmsg.ListOffsetsRequest) kmsg.Response {
	resp := kmsg.NewPtrListOffsetsResponse()
	for _, t := range r.Topics {
		rt := kmsg.NewListOffsetsResponseTopic()
		rt.Topic = t.Topic
		for _, rp := range t.Partitions {
			pr := kmsg.NewListOffsetsResponseTopicPartition()
			pr.Partition, pr.Offset, pr.Timestamp, pr.LeaderEpoch = rp.Partition, -1, -1, -1
			p := b.partition(t.Topic, rp.Partition)
			var err error
			switch {
			case p == nil:
				err = kerr.UnknownTopicOrPartition
			default:
				err = p.checkLeaderEpoch(rp.CurrentLeaderEpoch)
			}
			if err == nil {
				err = p.listOffset(ctx, rp.Timestamp, r.IsolationLevel == 1, &pr)
			}
			pr.ErrorCode = errorCode(err)
			rt.Partitions = append(rt.Partitions, pr)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}

// listOffset answers one partition. The leader epoch answered is the
// current one: Kafka answers the epoch of the batch holding the offset,
// which OffsetForTimestamp does not return (see the package doc's gaps).
func (p *partition) listOffset(ctx context.Context, ts int64, committed bool, pr *kmsg.ListOffsetsResponseTopicPartition) error {
	if ts == backend.LatestTimestamp && committed {
		// A diskless leader that has not claimed its epoch (or a read
		// replica that has not followed its bucket) ends short of the
		// bucket: a retryable error, not its short end.
		if r, ok := p.p.(interface{ Ready(context.Context) error }); ok {
			if err := r.Ready(ctx); err != nil {
				return err
			}
		}
		pr.Offset, pr.LeaderEpoch = p.p.Offsets().LastStableOffset, p.epoch
		return nil
	}
	off, at, found, err := p.p.OffsetForTimestamp(ctx, ts)
	if err != nil {
		return err
	}
	if found {
		pr.Offset, pr.Timestamp, pr.LeaderEpoch = off, at, p.epoch
	}
	return nil
}

// deleteRecords raises each partition's log start (offset -1: the high
// watermark).
func (b *Broker) deleteRecords(ctx context.Context, r *kmsg.DeleteRecordsRequest) kmsg.Response {
	resp := kmsg.NewPtrDeleteRecordsResponse()
	for _, t := range r.Topics {
		rt := kmsg.NewDeleteRecordsResponseTopic()
		rt.Topic = t.Topic
		for _, rp := range t.Partitions {
			pr := kmsg.NewDeleteRecordsResponseTopicPartition()
			pr.Partition, pr.LowWatermark = rp.Partition, -1
			p := b.partition(t.Topic, rp.Partition)
			switch {
			case p == nil:
				pr.ErrorCode = kerr.UnknownTopicOrPartition.Code
				rt.Partitions = append(rt.Partitions, pr)
				continue
			case internalTopic(t.Topic):
				pr.ErrorCode = errorCode(errInternalTopic(t.Topic))
				rt.Partitions = append(rt.Partitions, pr)
				continue
			case b.opts.ReadReplicaOf != nil && b.isReplicaTopic(t.Topic):
				pr.ErrorCode = kerr.PolicyViolation.Code
				rt.Partitions = append(rt.Partitions, pr)
				continue
			}
			pr.ErrorCode = errorCode(p.deleteBefore(ctx, rp.Offset))
			pr.LowWatermark = p.p.Offsets().LogStart
			rt.Partitions = append(rt.Partitions, pr)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}

func (p *partition) deleteBefore(ctx context.Context, offset int64) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	o := p.p.Offsets()
	if offset == -1 {
		offset = o.HighWatermark
	}
	if offset < 0 || offset > o.HighWatermark {
		return kerr.OffsetOutOfRange
	}
	return p.p.DeleteRecordsBefore(ctx, offset)
}

// offsetForLeaderEpoch answers with EndOffsetForEpoch: the largest epoch
// at or below the one asked for, and where it ends.
func (b *Broker) offsetForLeaderEpoch(ctx context.Context, r *kmsg.OffsetForLeaderEpochRequest) kmsg.Response {
	resp := kmsg.NewPtrOffsetForLeaderEpochResponse()
	for _, t := range r.Topics {
		rt := kmsg.NewOffsetForLeaderEpochResponseTopic()
		rt.Topic = t.Topic
		for _, rp := range t.Partitions {
			pr := kmsg.NewOffsetForLeaderEpochResponseTopicPartition()
			pr.Partition, pr.LeaderEpoch, pr.EndOffset = rp.Partition, -1, -1
			p := b.partition(t.Topic, rp.Partition)
			var err error
			if p == nil {
				err = kerr.UnknownTopicOrPartition
			} else if err = p.checkLeaderEpoch(rp.CurrentLeaderEpoch); err == nil {
				var epoch int32
				var end int64
				var found bool
				epoch, end, found, err = p.p.EndOffsetForEpoch(ctx, rp.LeaderEpoch)
				if err == nil && found {
					pr.LeaderEpoch, pr.EndOffset = epoch, end
				}
			}
			pr.ErrorCode = errorCode(err)
			rt.Partitions = append(rt.Partitions, pr)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}
