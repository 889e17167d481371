package broker

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// produce appends each partition's batches as the leader. The backend
// checks the producer state: a retried batch of an idempotent producer is
// AppendInfo.Duplicate, answered with the original batch's offsets as
// Kafka answers it; a sequence gap or a fenced epoch is a typed error,
// answered with its Kafka code. acks=0 gets no answer; acks=1 and acks=-1
// are the same on one node (the high watermark moves with each append).
func (b *Broker) produce(ctx context.Context, r *kmsg.ProduceRequest) (kmsg.Response, error) {
	resp := kmsg.NewPtrProduceResponse()
	for _, t := range r.Topics {
		rt := kmsg.NewProduceResponseTopic()
		rt.Topic = t.Topic
		for _, rp := range t.Partitions {
			pr := kmsg.NewProduceResponseTopicPartition()
			pr.Partition = rp.Partition
			p := b.partition(t.Topic, rp.Partition)
			if p == nil || t.Topic == offsetsTopic {
				pr.ErrorCode = kerr.UnknownTopicOrPartition.Code
				if p != nil {
					pr.ErrorCode = kerr.InvalidTopicException.Code // internal: written by the coordinator only
				}
				rt.Partitions = append(rt.Partitions, pr)
				continue
			}
			info, err := p.append(ctx, rp.Records, false)
			if err != nil {
				pr.ErrorCode = errorCode(err)
				msg := err.Error()
				pr.ErrorMessage = &msg
				b.logger.Debug("produce refused", "partition", p.tp.String(), "err", err)
			} else {
				pr.BaseOffset, pr.LogAppendTime = info.FirstOffset, info.LogAppendTime
			}
			pr.LogStartOffset = p.p.Offsets().LogStart
			rt.Partitions = append(rt.Partitions, pr)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	if r.Acks == 0 {
		return nil, errNoResponse
	}
	return resp, nil
}
