package broker

import (
	"context"
	"errors"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/timingwheel/purgatory"
)

// produce appends each partition's batches as the leader. The backend
// checks the producer state: a retried batch of an idempotent producer is
// AppendInfo.Duplicate, answered with the original batch's offsets as
// Kafka answers it; a sequence gap or a fenced epoch is a typed error,
// answered with its Kafka code. acks=0 gets no answer; acks=1 is answered
// once the batches are in the leader's log (for a diskless topic, whose
// log is a cache, once they are in the bucket, as acks=-1); acks=-1 once the high
// watermark has passed them (every in-sync replica has them: on one node,
// once the partition's watcher moved it), parked in the purgatory until
// then or until the request's timeout, when the partitions still short
// answer REQUEST_TIMED_OUT.
func (b *Broker) produce(ctx context.Context, r *kmsg.ProduceRequest) (kmsg.Response, error) {
	a, err := b.produceAppend(ctx, r)
	if err != nil {
		return nil, err
	}
	return a.await(b), nil
}

// appended is a Produce whose batches are appended, and what its answer
// still waits for: the high watermark to pass each of waits, until
// deadline.
type appended struct {
	resp     *kmsg.ProduceResponse
	waits    []hwWait
	deadline time.Time
}

// await waits for the high watermark (or the deadline) and returns the
// answer, each partition still short of it answered with its error.
func (a appended) await(b *Broker) kmsg.Response {
	if len(a.waits) > 0 {
		b.awaitHighWatermark(a.waits, a.deadline)
		for _, w := range a.waits {
			if err := w.err(b); err != nil {
				pr := &a.resp.Topics[w.topic].Partitions[w.part]
				pr.ErrorCode, pr.BaseOffset, pr.LogAppendTime = errorCode(err), -1, -1
				msg := err.Error()
				pr.ErrorMessage = &msg
			}
		}
	}
	return a.resp
}

// produceAppend is produce up to the wait: every partition's batches
// appended (or refused), the answer built but for what waits on the high
// watermark.
func (b *Broker) produceAppend(ctx context.Context, r *kmsg.ProduceRequest) (appended, error) {
	if r.Version < produceMinVersion {
		resp, err := refuseProduce(r, kerr.UnsupportedVersion)
		return appendedOf(resp), err
	}
	if r.Acks != -1 && r.Acks != 0 && r.Acks != 1 {
		// Kafka's ReplicaManager.appendRecords: nothing appended.
		resp, err := refuseProduce(r, kerr.InvalidRequiredAcks)
		return appendedOf(resp), err
	}
	resp := kmsg.NewPtrProduceResponse()
	var waits []hwWait
	for ti, t := range r.Topics {
		rt := kmsg.NewProduceResponseTopic()
		rt.Topic = t.Topic
		for _, rp := range t.Partitions {
			pr := kmsg.NewProduceResponseTopicPartition()
			pr.Partition = rp.Partition
			p := b.partition(t.Topic, rp.Partition)
			if p == nil || internalTopic(t.Topic) {
				pr.ErrorCode = kerr.UnknownTopicOrPartition.Code
				if p != nil {
					pr.ErrorCode = kerr.InvalidTopicException.Code // internal: written by the coordinator only
				}
				rt.Partitions = append(rt.Partitions, pr)
				continue
			}
			if b.opts.ReadReplicaOf != nil && b.isReplicaTopic(t.Topic) {
				pr.ErrorCode = kerr.PolicyViolation.Code
				pr.ErrorMessage = kmsg.StringPtr(errReplicaWrite(t.Topic).Error())
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
				if r.Acks == -1 || (r.Acks == 1 && isDiskless(p.p)) {
					waits = append(waits, hwWait{p: p, need: info.LastOffset + 1, topic: ti, part: len(rt.Partitions)})
				}
			}
			pr.LogStartOffset = p.p.Offsets().LogStart
			rt.Partitions = append(rt.Partitions, pr)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	if r.Acks == 0 {
		return appended{}, errNoResponse
	}
	return appended{resp: resp, waits: waits, deadline: time.Now().Add(time.Duration(r.TimeoutMillis) * time.Millisecond)}, nil
}

func appendedOf(resp kmsg.Response) appended {
	r, _ := resp.(*kmsg.ProduceResponse)
	return appended{resp: r}
}

// isDiskless says whether p acknowledges appends only once the bucket
// holds them (a tiered.Partition of a diskless.enable=true topic): its
// leader's log is not durable, so acks=1 waits for the high watermark as
// acks=-1 does.
func isDiskless(p backend.Partition) bool {
	d, ok := p.(interface{ Diskless() bool })
	return ok && d.Diskless()
}

// refuseProduce answers every partition of r with err (no answer for
// acks=0), appending nothing.
func refuseProduce(r *kmsg.ProduceRequest, err *kerr.Error) (kmsg.Response, error) {
	if r.Acks == 0 {
		return nil, errNoResponse
	}
	resp := kmsg.NewPtrProduceResponse()
	for _, t := range r.Topics {
		rt := kmsg.NewProduceResponseTopic()
		rt.Topic = t.Topic
		for _, rp := range t.Partitions {
			pr := kmsg.NewProduceResponseTopicPartition()
			pr.Partition, pr.ErrorCode = rp.Partition, err.Code
			rt.Partitions = append(rt.Partitions, pr)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp, nil
}

// hwWait is one partition of a request waiting for the high watermark:
// its batches end before need. topic and part place it in a Produce
// answer.
type hwWait struct {
	p           *partition
	need        int64
	topic, part int
}

// done says whether the wait is over: the high watermark reached need, or
// the partition is no longer this broker's to answer for (deleted).
func (w hwWait) done(b *Broker) bool {
	return w.p.p.Offsets().HighWatermark >= w.need || b.partition(w.p.tp.Topic, w.p.tp.Partition) != w.p
}

// err is the wait's outcome: nil once the high watermark passed the
// batches; NOT_LEADER_OR_FOLLOWER for a partition deleted meanwhile;
// REQUEST_TIMED_OUT when the time ran out first (the batches are in the
// log, but not yet acknowledged as replicated: an idempotent producer's
// retry is answered as a duplicate).
func (w hwWait) err(b *Broker) error {
	switch {
	case w.p.p.Offsets().HighWatermark >= w.need:
		return nil
	case b.partition(w.p.tp.Topic, w.p.tp.Partition) != w.p:
		return kerr.NotLeaderForPartition
	}
	return kerr.RequestTimedOut
}

// produceOp is a request parked until the high watermark of each of its
// partitions passes its batches (Kafka's DelayedProduce).
type produceOp struct {
	b     *Broker
	waits []hwWait
	done  chan struct{}
}

func (op *produceOp) CanComplete() bool {
	for _, w := range op.waits {
		if !w.done(op.b) {
			return false
		}
	}
	return true
}

func (op *produceOp) OnComplete()   { close(op.done) }
func (op *produceOp) OnExpiration() { close(op.done) }

// awaitHighWatermark returns once every wait is done or deadline passes
// (or the broker closes); the waits' err says which.
func (b *Broker) awaitHighWatermark(waits []hwWait, deadline time.Time) {
	op := &produceOp{b: b, waits: waits, done: make(chan struct{})}
	keys := make([]backend.TopicPartition, len(waits))
	for i, w := range waits {
		keys[i] = w.p.tp
	}
	if _, err := b.produces.TryCompleteElseWatch(op, deadline, keys...); err != nil {
		if !errors.Is(err, purgatory.ErrClosed) {
			b.logger.Warn("produce: park", "err", err)
		}
		return
	}
	<-op.done
}

// appendReplicated appends a coordinator's batches (committed offsets,
// transaction markers) and waits until the high watermark passes them, as
// Kafka's coordinators write with acks=-1; timeout is Kafka's
// offsets.commit.timeout.ms.
func (p *partition) appendReplicated(ctx context.Context, b *Broker, batches []byte, coordinator bool) error {
	info, err := p.append(ctx, batches, coordinator)
	if err != nil {
		return err
	}
	w := hwWait{p: p, need: info.LastOffset + 1}
	b.awaitHighWatermark([]hwWait{w}, time.Now().Add(coordinatorWriteTimeout))
	return w.err(b)
}

// coordinatorWriteTimeout bounds a coordinator's wait for the high
// watermark (Kafka's offsets.commit.timeout.ms, 5 s).
const coordinatorWriteTimeout = 5 * time.Second
