package broker

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/record"
	"github.com/tierlog/tierlog/timingwheel"
)

// Transaction states (Kafka's TransactionState), as transactions.json
// names them.
const (
	txnEmpty          = "Empty"
	txnOngoing        = "Ongoing"
	txnPrepareCommit  = "PrepareCommit"
	txnPrepareAbort   = "PrepareAbort"
	txnCompleteCommit = "CompleteCommit"
	txnCompleteAbort  = "CompleteAbort"
)

// producerIDBlock is how many producer ids transactions.json reserves at
// a time: ids are never handed out twice, across restarts and crashes.
const producerIDBlock = 1000

// maxTxnTimeout is transaction.max.timeout.ms.
const maxTxnTimeout = 15 * time.Minute

// pendingOffset is an offset a transaction commits for a group when it
// commits (TxnOffsetCommit).
type pendingOffset struct {
	Group       string
	Topic       string
	Partition   int32
	Offset      int64
	LeaderEpoch int32
	Metadata    string
}

// txnMeta is one transactional id's state, as transactions.json keeps it.
type txnMeta struct {
	ProducerID int64
	Epoch      int16
	TimeoutMs  int32
	State      string
	Partitions []backend.TopicPartition `json:",omitempty"`
	Groups     []string                 `json:",omitempty"`
	Offsets    []pendingOffset          `json:",omitempty"`
	StartMs    int64                    `json:",omitempty"`

	timeout *timingwheel.Task
}

// txnFileData is transactions.json.
type txnFileData struct {
	NextProducerID int64
	Transactions   map[string]*txnMeta
}

// txnCoordinator hands out producer ids and runs transactions: their
// state in transactions.json (written before each answer), the COMMIT or
// ABORT markers through the backend at EndTxn, the transaction's offset
// commits applied when it commits, and an abort when a transaction
// outlives its timeout. Every request runs under mu, marker writes
// included. Lock order: mu, then offsetLog.mu, then partition.mu.
type txnCoordinator struct {
	b *Broker

	mu sync.Mutex
	// guarded by mu
	data     txnFileData
	nextPID  int64 // next id to hand out
	blockEnd int64 // ids below it are reserved in the file
	builder  record.Builder
}

// newTxnCoordinator loads transactions.json and finishes what a crash or
// shutdown interrupted: a decided transaction's markers are written
// again; an open one is aborted (its producer is fenced by the epoch
// bump, as by a timeout).
func newTxnCoordinator(b *Broker) (*txnCoordinator, error) {
	tc := &txnCoordinator{b: b, data: txnFileData{Transactions: map[string]*txnMeta{}}}
	if err := readJSON(b.opts.Dir+"/"+txnFile, &tc.data); err != nil {
		return nil, err
	}
	if tc.data.Transactions == nil {
		tc.data.Transactions = map[string]*txnMeta{}
	}
	tc.nextPID, tc.blockEnd = tc.data.NextProducerID, tc.data.NextProducerID
	tc.mu.Lock()
	defer tc.mu.Unlock()
	for id, t := range tc.data.Transactions {
		var err error
		switch t.State {
		case txnPrepareCommit, txnPrepareAbort:
			err = tc.completeLocked(context.Background(), t, t.State == txnPrepareCommit)
		case txnOngoing:
			err = tc.abortLocked(context.Background(), id, t, true)
		}
		if err != nil {
			return nil, fmt.Errorf("broker: finish transaction %q: %w", id, err)
		}
	}
	return tc, nil
}

// saveLocked writes transactions.json. REQUIRES: tc.mu held.
func (tc *txnCoordinator) saveLocked() error {
	tc.data.NextProducerID = tc.blockEnd
	return writeJSON(tc.b.opts.Dir, txnFile, &tc.data)
}

// allocLocked hands out a producer id, reserving a new block in the file
// first when the current one is used up. REQUIRES: tc.mu held.
func (tc *txnCoordinator) allocLocked() (int64, error) {
	if tc.nextPID >= tc.blockEnd {
		tc.blockEnd = tc.nextPID + producerIDBlock
		if err := tc.saveLocked(); err != nil {
			tc.blockEnd = tc.nextPID
			return -1, err
		}
	}
	id := tc.nextPID
	tc.nextPID++
	return id, nil
}

func (tc *txnCoordinator) initProducerID(ctx context.Context, r *kmsg.InitProducerIDRequest) kmsg.Response {
	resp := kmsg.NewPtrInitProducerIDResponse()
	resp.ProducerID, resp.ProducerEpoch = -1, -1
	tc.mu.Lock()
	defer tc.mu.Unlock()
	if r.TransactionalID == nil {
		// An idempotent producer: a fresh id (also when it asks to bump
		// an epoch it has: a new id starts its sequences over just as
		// well).
		id, err := tc.allocLocked()
		resp.ErrorCode = errorCode(err)
		if err == nil {
			resp.ProducerID, resp.ProducerEpoch = id, 0
		}
		return resp
	}
	if r.TransactionTimeoutMillis <= 0 || time.Duration(r.TransactionTimeoutMillis)*time.Millisecond > maxTxnTimeout {
		resp.ErrorCode = kerr.InvalidTransactionTimeout.Code
		return resp
	}
	txnID := *r.TransactionalID
	t := tc.data.Transactions[txnID]
	var err error
	switch {
	case t == nil:
		var id int64
		if id, err = tc.allocLocked(); err == nil {
			t = &txnMeta{ProducerID: id, Epoch: 0, State: txnEmpty}
			tc.data.Transactions[txnID] = t
		}
	case r.ProducerID >= 0 && (r.ProducerID != t.ProducerID || r.ProducerEpoch != t.Epoch):
		err = kerr.ProducerFenced
	case t.State == txnPrepareCommit || t.State == txnPrepareAbort:
		err = tc.completeLocked(ctx, t, t.State == txnPrepareCommit)
		if err == nil {
			err = tc.bumpLocked(t)
		}
	case t.State == txnOngoing:
		// A new producer instance fences the old one and aborts what
		// it left open.
		err = tc.abortLocked(ctx, txnID, t, true)
	default:
		err = tc.bumpLocked(t)
	}
	if err == nil {
		t.TimeoutMs = r.TransactionTimeoutMillis
		err = tc.saveLocked()
	}
	resp.ErrorCode = errorCode(err)
	if err == nil {
		resp.ProducerID, resp.ProducerEpoch = t.ProducerID, t.Epoch
	}
	return resp
}

// bumpLocked raises the producer epoch, moving to a new producer id when
// the epoch is exhausted. REQUIRES: tc.mu held.
func (tc *txnCoordinator) bumpLocked(t *txnMeta) error {
	if t.Epoch >= math.MaxInt16-1 {
		id, err := tc.allocLocked()
		if err != nil {
			return err
		}
		t.ProducerID, t.Epoch = id, 0
		return nil
	}
	t.Epoch++
	return nil
}

// checkLocked finds a transactional id's state for a request from
// producer pid at epoch. REQUIRES: tc.mu held.
func (tc *txnCoordinator) checkLocked(txnID string, pid int64, epoch int16) (*txnMeta, error) {
	t := tc.data.Transactions[txnID]
	switch {
	case t == nil || t.ProducerID != pid:
		return nil, kerr.InvalidProducerIDMapping
	case epoch != t.Epoch:
		return nil, kerr.ProducerFenced
	case t.State == txnPrepareCommit || t.State == txnPrepareAbort:
		return nil, kerr.ConcurrentTransactions
	}
	return t, nil
}

// beginLocked marks t Ongoing, arming its timeout. REQUIRES: tc.mu held.
func (tc *txnCoordinator) beginLocked(txnID string, t *txnMeta) {
	if t.State == txnOngoing {
		return
	}
	t.State, t.StartMs = txnOngoing, time.Now().UnixMilli()
	t.Partitions, t.Groups, t.Offsets = nil, nil, nil
	pid, epoch := t.ProducerID, t.Epoch
	task, err := tc.b.timer.AfterFunc(time.Duration(t.TimeoutMs)*time.Millisecond, func() {
		// Timer callbacks must be quick: the abort writes markers.
		go tc.expire(txnID, pid, epoch)
	})
	if err == nil {
		t.timeout = task
	}
}

// expire aborts a transaction that outlived its timeout.
func (tc *txnCoordinator) expire(txnID string, pid int64, epoch int16) {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	t := tc.data.Transactions[txnID]
	if t == nil || t.ProducerID != pid || t.Epoch != epoch || t.State != txnOngoing {
		return
	}
	tc.b.logger.Info("transaction timed out; aborting", "transactionalID", txnID, "producerID", pid)
	if err := tc.abortLocked(context.Background(), txnID, t, true); err != nil {
		tc.b.logger.Error("abort timed-out transaction", "transactionalID", txnID, "err", err)
		return
	}
	if err := tc.saveLocked(); err != nil {
		tc.b.logger.Error("abort timed-out transaction", "transactionalID", txnID, "err", err)
	}
}

// abortLocked aborts t's open transaction, first bumping the epoch when
// fence is set (the old producer's writes are refused from then on).
// REQUIRES: tc.mu held.
func (tc *txnCoordinator) abortLocked(ctx context.Context, txnID string, t *txnMeta, fence bool) error {
	if fence {
		if err := tc.bumpLocked(t); err != nil {
			return err
		}
	}
	t.State = txnPrepareAbort
	if err := tc.saveLocked(); err != nil {
		return err
	}
	return tc.completeLocked(ctx, t, false)
}

// completeLocked writes a decided transaction's outcome: on commit its
// offset commits, then a marker in each partition; then the state
// Complete*. It is safe to run again after a crash: commits are
// idempotent, and a marker for a transaction a partition no longer has
// open is a no-op there. REQUIRES: tc.mu held.
func (tc *txnCoordinator) completeLocked(ctx context.Context, t *txnMeta, commit bool) error {
	if t.timeout != nil {
		t.timeout.Cancel()
		t.timeout = nil
	}
	if commit {
		byGroup := map[string]map[backend.TopicPartition]committed{}
		for _, o := range t.Offsets {
			m := byGroup[o.Group]
			if m == nil {
				m = map[backend.TopicPartition]committed{}
				byGroup[o.Group] = m
			}
			m[backend.TopicPartition{Topic: o.Topic, Partition: o.Partition}] = committed{Offset: o.Offset, LeaderEpoch: o.LeaderEpoch, Metadata: o.Metadata}
		}
		for g, m := range byGroup {
			if err := tc.b.offsets.commit(ctx, g, m); err != nil {
				return err
			}
		}
	}
	for _, tp := range t.Partitions {
		p := tc.b.partition(tp.Topic, tp.Partition)
		if p == nil {
			continue // deleted since
		}
		batch, err := tc.builder.BuildEndTxnMarker(record.EndTxnMarker{ProducerID: t.ProducerID, ProducerEpoch: t.Epoch,
			PartitionLeaderEpoch: p.epoch, Commit: commit, Timestamp: time.Now().UnixMilli()})
		if err != nil {
			return err
		}
		if err := p.appendReplicated(ctx, tc.b, batch, true); err != nil {
			return fmt.Errorf("marker to %s: %w", tp, err)
		}
	}
	t.State = txnCompleteAbort
	if commit {
		t.State = txnCompleteCommit
	}
	t.Partitions, t.Groups, t.Offsets = nil, nil, nil
	return tc.saveLocked()
}

func (tc *txnCoordinator) addPartitions(r *kmsg.AddPartitionsToTxnRequest) kmsg.Response {
	resp := kmsg.NewPtrAddPartitionsToTxnResponse()
	tc.mu.Lock()
	defer tc.mu.Unlock()
	t, err := tc.checkLocked(r.TransactionalID, r.ProducerID, r.ProducerEpoch)
	unknown := false
	if err == nil {
		for _, rt := range r.Topics {
			if tc.b.opts.ReadReplicaOf != nil && tc.b.isReplicaTopic(rt.Topic) {
				// Its markers could never be written: the transaction
				// would never end.
				err = errReplicaWrite(rt.Topic)
			}
			for _, p := range rt.Partitions {
				unknown = unknown || tc.b.partition(rt.Topic, p) == nil
			}
		}
	}
	if err == nil && !unknown {
		tc.beginLocked(r.TransactionalID, t)
		for _, rt := range r.Topics {
			for _, p := range rt.Partitions {
				tp := backend.TopicPartition{Topic: rt.Topic, Partition: p}
				if !slices.Contains(t.Partitions, tp) {
					t.Partitions = append(t.Partitions, tp)
				}
			}
		}
		err = tc.saveLocked()
	}
	for _, rt := range r.Topics {
		ot := kmsg.NewAddPartitionsToTxnResponseTopic()
		ot.Topic = rt.Topic
		for _, p := range rt.Partitions {
			op := kmsg.NewAddPartitionsToTxnResponseTopicPartition()
			op.Partition = p
			switch {
			case err != nil:
				op.ErrorCode = errorCode(err)
			case unknown && tc.b.partition(rt.Topic, p) == nil:
				op.ErrorCode = kerr.UnknownTopicOrPartition.Code
			case unknown:
				op.ErrorCode = kerr.OperationNotAttempted.Code
			}
			ot.Partitions = append(ot.Partitions, op)
		}
		resp.Topics = append(resp.Topics, ot)
	}
	return resp
}

func (tc *txnCoordinator) addOffsets(r *kmsg.AddOffsetsToTxnRequest) kmsg.Response {
	resp := kmsg.NewPtrAddOffsetsToTxnResponse()
	tc.mu.Lock()
	defer tc.mu.Unlock()
	t, err := tc.checkLocked(r.TransactionalID, r.ProducerID, r.ProducerEpoch)
	if err == nil {
		tc.beginLocked(r.TransactionalID, t)
		if !slices.Contains(t.Groups, r.Group) {
			t.Groups = append(t.Groups, r.Group)
		}
		err = tc.saveLocked()
	}
	resp.ErrorCode = errorCode(err)
	return resp
}

func (tc *txnCoordinator) txnOffsetCommit(r *kmsg.TxnOffsetCommitRequest) kmsg.Response {
	resp := kmsg.NewPtrTxnOffsetCommitResponse()
	tc.mu.Lock()
	defer tc.mu.Unlock()
	t, err := tc.checkLocked(r.TransactionalID, r.ProducerID, r.ProducerEpoch)
	if err == nil && (t.State != txnOngoing || !slices.Contains(t.Groups, r.Group)) {
		err = kerr.InvalidTxnState // AddOffsetsToTxn first
	}
	if err == nil {
		for _, rt := range r.Topics {
			for _, p := range rt.Partitions {
				o := pendingOffset{Group: r.Group, Topic: rt.Topic, Partition: p.Partition, Offset: p.Offset, LeaderEpoch: p.LeaderEpoch}
				if p.Metadata != nil {
					o.Metadata = *p.Metadata
				}
				t.Offsets = slices.DeleteFunc(t.Offsets, func(q pendingOffset) bool {
					return q.Group == o.Group && q.Topic == o.Topic && q.Partition == o.Partition
				})
				t.Offsets = append(t.Offsets, o)
			}
		}
		err = tc.saveLocked()
	}
	for _, rt := range r.Topics {
		ot := kmsg.NewTxnOffsetCommitResponseTopic()
		ot.Topic = rt.Topic
		for _, p := range rt.Partitions {
			op := kmsg.NewTxnOffsetCommitResponseTopicPartition()
			op.Partition, op.ErrorCode = p.Partition, errorCode(err)
			ot.Partitions = append(ot.Partitions, op)
		}
		resp.Topics = append(resp.Topics, ot)
	}
	return resp
}

func (tc *txnCoordinator) endTxn(ctx context.Context, r *kmsg.EndTxnRequest) kmsg.Response {
	resp := kmsg.NewPtrEndTxnResponse()
	tc.mu.Lock()
	defer tc.mu.Unlock()
	t := tc.data.Transactions[r.TransactionalID]
	var err error
	switch {
	case t == nil || t.ProducerID != r.ProducerID:
		err = kerr.InvalidProducerIDMapping
	case r.ProducerEpoch != t.Epoch:
		err = kerr.ProducerFenced
	case t.State == txnOngoing:
		t.State = txnPrepareAbort
		if r.Commit {
			t.State = txnPrepareCommit
		}
		if err = tc.saveLocked(); err == nil {
			err = tc.completeLocked(ctx, t, r.Commit)
		}
	case t.State == txnPrepareCommit && r.Commit, t.State == txnPrepareAbort && !r.Commit:
		err = tc.completeLocked(ctx, t, r.Commit) // a retry after a failed marker write
	case t.State == txnCompleteCommit && r.Commit, t.State == txnCompleteAbort && !r.Commit:
		// A retry of an EndTxn that succeeded.
	case t.State == txnEmpty && !r.Commit:
		// Aborting a transaction that wrote nothing.
	default:
		err = kerr.InvalidTxnState
	}
	resp.ErrorCode = errorCode(err)
	if err != nil {
		tc.b.logger.Warn("end transaction", "transactionalID", r.TransactionalID, "commit", r.Commit, "err", err)
	}
	return resp
}

// pendingCommit reports whether an undecided transaction holds an offset
// commit for the group's partition.
func (tc *txnCoordinator) pendingCommit(group string, tp backend.TopicPartition) bool {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	for _, t := range tc.data.Transactions {
		if t.State == txnCompleteAbort || t.State == txnCompleteCommit || t.State == txnEmpty {
			continue
		}
		for _, o := range t.Offsets {
			if o.Group == group && o.Topic == tp.Topic && o.Partition == tp.Partition {
				return true
			}
		}
	}
	return false
}
