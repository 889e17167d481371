package broker

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/timingwheel/purgatory"
)

// fetchPart is one partition of a Fetch answer: its offsets, its error,
// and the Records to send (nil for none).
type fetchPart struct {
	partition int32
	errCode   int16
	offsets   backend.Offsets
	aborted   []backend.AbortedTxn
	recs      backend.Records
}

// fetchTopic is one topic of a Fetch answer.
type fetchTopic struct {
	name  string
	parts []fetchPart
}

// fetchResult is a whole Fetch answer before it is written.
type fetchResult struct {
	topics []fetchTopic
	bytes  int64
	errors bool
}

// release closes every Records of the result.
func (res *fetchResult) release() {
	for i := range res.topics {
		for j := range res.topics[i].parts {
			if r := res.topics[i].parts[j].recs; r != nil {
				r.Close()
				res.topics[i].parts[j].recs = nil
			}
		}
	}
}

// fetch answers a Fetch: it reads every partition asked for; with fewer
// bytes than MinBytes and no error it parks the request in the purgatory
// under its partitions until one of them moves (the partition watchers
// call CheckAndComplete on each Changed) or MaxWait passes, then reads
// again. The answer's records go from each partition's Records straight
// to the socket (sendfile from the page cache for local segments).
func (b *Broker) fetch(ctx context.Context, c *conn, req *request, r *kmsg.FetchRequest) error {
	if r.SessionID != 0 {
		// This broker never hands out fetch sessions (it answers
		// SessionID 0, so clients send full fetches).
		resp := kmsg.NewPtrFetchResponse()
		resp.ErrorCode = kerr.FetchSessionIDNotFound.Code
		return c.writeResponse(req, resp)
	}
	deadline := time.Now().Add(time.Duration(r.MaxWaitMillis) * time.Millisecond)
	minBytes := int64(max(r.MinBytes, 1))
	for {
		res := b.readFetch(ctx, r)
		if res.bytes >= minBytes || res.errors || !time.Now().Before(deadline) {
			err := c.writeFetch(req, res)
			res.release()
			return err
		}
		res.release()
		if expired := b.parkFetch(r, deadline); expired {
			res = b.readFetch(ctx, r)
			err := c.writeFetch(req, res)
			res.release()
			return err
		}
	}
}

// readFetch reads every partition of r.
func (b *Broker) readFetch(ctx context.Context, r *kmsg.FetchRequest) *fetchResult {
	iso := backend.ReadHighWatermark
	if r.IsolationLevel == 1 {
		iso = backend.ReadCommitted
	}
	maxBytes := int64(r.MaxBytes)
	if r.Version < 3 || maxBytes <= 0 {
		maxBytes = 50 << 20
	}
	res := &fetchResult{}
	early := b.readRemoteEarly(ctx, r, maxBytes, iso)
	for ti, t := range r.Topics {
		ft := fetchTopic{name: t.Topic}
		for pi, rp := range t.Partitions {
			fp := fetchPart{partition: rp.Partition, offsets: backend.Offsets{HighWatermark: -1, LastStableOffset: -1, LogStart: -1}}
			p := b.partition(t.Topic, rp.Partition)
			if p == nil {
				fp.errCode = kerr.UnknownTopicOrPartition.Code
				res.errors = true
				ft.parts = append(ft.parts, fp)
				continue
			}
			if err := p.checkLeaderEpoch(rp.CurrentLeaderEpoch); err != nil {
				fp.errCode = errorCode(err)
				res.errors = true
				ft.parts = append(ft.parts, fp)
				continue
			}
			fp.offsets = p.p.Offsets()
			limit := min(int64(rp.PartitionMaxBytes), maxBytes-res.bytes)
			if limit <= 0 && res.bytes > 0 {
				ft.parts = append(ft.parts, fp)
				continue
			}
			opts := backend.ReadOptions{MaxBytes: int(max(limit, 1)), MinOneBatch: res.bytes == 0, Isolation: iso}
			recs, err := early.take(ti, pi, opts)
			if recs == nil && err == nil {
				recs, err = p.p.Read(ctx, rp.FetchOffset, opts)
			}
			if err != nil {
				fp.errCode = errorCode(err)
				res.errors = true
				if !errors.Is(err, backend.ErrOffsetOutOfRange) {
					b.logger.Warn("fetch", "partition", p.tp.String(), "offset", rp.FetchOffset, "err", err)
				}
				ft.parts = append(ft.parts, fp)
				continue
			}
			if a, ok := recs.(backend.Aborted); ok && iso == backend.ReadCommitted {
				fp.aborted = a.AbortedTransactions()
			}
			if recs.Len() == 0 {
				recs.Close()
			} else {
				fp.recs = recs
				res.bytes += recs.Len()
			}
			ft.parts = append(ft.parts, fp)
		}
		res.topics = append(res.topics, ft)
	}
	early.close()
	return res
}

// earlyReads are the reads of a Fetch's partitions that the partition
// says wait on the network (backend.Tiered.ReadWaits: only the bucket
// holds their offsets; the broker does not route by tier), run side by side before the in-order pass (remote
// reads wait on the network; Kafka's RemoteLogReader pool runs them
// concurrently too, and tiered's reader pool bounds them), each up to its
// partition's PartitionMaxBytes. The in-order pass takes each where the
// read it would make gives the same answer (it fits the bytes the Fetch
// has left) and reads again otherwise, so the answer is the in-order one.
type earlyReads struct {
	res map[[2]int]earlyRead
}

type earlyRead struct {
	recs backend.Records
	err  error
}

// readRemoteEarly starts the remote reads of r, when at least two of its
// partitions' reads wait on the network and their PartitionMaxBytes fit the
// Fetch's MaxBytes together (so each gets its own bound, as it would in
// order), and waits for them.
func (b *Broker) readRemoteEarly(ctx context.Context, r *kmsg.FetchRequest, maxBytes int64, iso backend.Isolation) *earlyReads {
	type job struct {
		at     [2]int
		p      *partition
		offset int64
		max    int32
	}
	var jobs []job
	var sum int64
	for ti, t := range r.Topics {
		for pi, rp := range t.Partitions {
			p := b.partition(t.Topic, rp.Partition)
			if p == nil || p.checkLeaderEpoch(rp.CurrentLeaderEpoch) != nil {
				continue
			}
			if t, ok := p.p.(backend.Tiered); !ok || !t.ReadWaits(rp.FetchOffset) {
				continue
			}
			jobs = append(jobs, job{at: [2]int{ti, pi}, p: p, offset: rp.FetchOffset, max: rp.PartitionMaxBytes})
			sum += int64(rp.PartitionMaxBytes)
		}
	}
	if len(jobs) < 2 || sum > maxBytes {
		return nil
	}
	e := &earlyReads{res: make(map[[2]int]earlyRead, len(jobs))}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, j := range jobs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			recs, err := j.p.p.Read(ctx, j.offset, backend.ReadOptions{MaxBytes: int(max(j.max, 1)), MinOneBatch: true, Isolation: iso})
			mu.Lock()
			e.res[j.at] = earlyRead{recs, err}
			mu.Unlock()
		}()
	}
	wg.Wait()
	return e
}

// take returns the early read of partition pi of topic ti if it is the
// answer a read with opts would give (its bytes fit opts.MaxBytes, or it
// is one batch and opts.MinOneBatch), else nil, nil (closing it): the
// caller reads.
func (e *earlyReads) take(ti, pi int, opts backend.ReadOptions) (backend.Records, error) {
	if e == nil {
		return nil, nil
	}
	r, ok := e.res[[2]int{ti, pi}]
	if !ok {
		return nil, nil
	}
	delete(e.res, [2]int{ti, pi})
	if r.err != nil || r.recs.Len() <= int64(opts.MaxBytes) {
		return r.recs, r.err
	}
	r.recs.Close()
	return nil, nil
}

// close closes the early reads not taken (partitions the Fetch had no
// bytes left for).
func (e *earlyReads) close() {
	if e == nil {
		return
	}
	for _, r := range e.res {
		if r.recs != nil {
			r.recs.Close()
		}
	}
}

// fetchOp is a Fetch parked in the purgatory: it can complete once one of
// its partitions has something past the position asked for (or the
// position left the log: an error to answer).
type fetchOp struct {
	b         *Broker
	r         *kmsg.FetchRequest
	committed bool
	done      chan bool // true: expired
}

func (op *fetchOp) CanComplete() bool {
	for _, t := range op.r.Topics {
		for _, rp := range t.Partitions {
			p := op.b.partition(t.Topic, rp.Partition)
			if p == nil {
				return true
			}
			o := p.p.Offsets()
			bound := o.HighWatermark
			if op.committed {
				bound = o.LastStableOffset
			}
			if rp.FetchOffset < bound || rp.FetchOffset < o.LogStart || rp.FetchOffset > o.LogEnd {
				return true
			}
		}
	}
	return false
}

func (op *fetchOp) OnComplete()   { op.done <- false }
func (op *fetchOp) OnExpiration() { op.done <- true }

// parkFetch waits until r can make progress or deadline passes, and
// reports whether it expired.
func (b *Broker) parkFetch(r *kmsg.FetchRequest, deadline time.Time) bool {
	op := &fetchOp{b: b, r: r, committed: r.IsolationLevel == 1, done: make(chan bool, 1)}
	var keys []backend.TopicPartition
	for _, t := range r.Topics {
		for _, rp := range t.Partitions {
			keys = append(keys, backend.TopicPartition{Topic: t.Topic, Partition: rp.Partition})
		}
	}
	if len(keys) == 0 {
		t := time.NewTimer(time.Until(deadline))
		defer t.Stop()
		select {
		case <-t.C:
		case <-b.closing:
		}
		return true
	}
	if _, err := b.fetches.TryCompleteElseWatch(op, deadline, keys...); err != nil {
		if !errors.Is(err, purgatory.ErrClosed) {
			b.logger.Warn("fetch: park", "err", err)
		}
		return true
	}
	return <-op.done
}
