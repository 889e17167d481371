package broker

import (
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tierlog/tierlog/producerstate"
)

// describeCluster answers the one node, which is also the controller.
func (b *Broker) describeCluster(r *kmsg.DescribeClusterRequest) kmsg.Response {
	resp := kmsg.NewPtrDescribeClusterResponse()
	resp.ClusterID, resp.ControllerID, resp.ClusterAuthorizedOperations = clusterID, NodeID, -2147483648
	resp.EndpointType = 1
	if r.Version >= 1 && r.EndpointType != 1 {
		// Kafka's broker listener answers only for brokers (1); the
		// controllers' endpoints (2) are asked of a controller.
		resp.ErrorCode = kerr.UnsupportedEndpointType.Code
		resp.ErrorMessage = kmsg.StringPtr(fmt.Sprintf("endpoint type %d: this listener answers for brokers (1)", r.EndpointType))
		resp.EndpointType = r.EndpointType
		return resp
	}
	host, port := b.hostPort()
	br := kmsg.NewDescribeClusterResponseBroker()
	br.NodeID, br.Host, br.Port = NodeID, host, port
	resp.Brokers = append(resp.Brokers, br)
	return resp
}

// electLeaders answers as a single node: the one replica leads every
// partition already (ELECTION_NOT_NEEDED); a null topic list asks for
// every partition.
func (b *Broker) electLeaders(r *kmsg.ElectLeadersRequest) kmsg.Response {
	resp := kmsg.NewPtrElectLeadersResponse()
	topics := r.Topics
	if topics == nil {
		for _, name := range b.topicNames() {
			t, _ := b.topic(name, false)
			if t == nil {
				continue
			}
			rt := kmsg.NewElectLeadersRequestTopic()
			rt.Topic = name
			for _, p := range t.parts {
				rt.Partitions = append(rt.Partitions, p.tp.Partition)
			}
			topics = append(topics, rt)
		}
	}
	for _, t := range topics {
		rt := kmsg.NewElectLeadersResponseTopic()
		rt.Topic = t.Topic
		for _, i := range t.Partitions {
			rp := kmsg.NewElectLeadersResponseTopicPartition()
			rp.Partition, rp.ErrorCode = i, kerr.ElectionNotNeeded.Code
			if b.partition(t.Topic, i) == nil {
				rp.ErrorCode = kerr.UnknownTopicOrPartition.Code
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}

// describeProducers answers each partition's producer state: the
// producers of its local log (Kafka's DescribeProducers).
func (b *Broker) describeProducers(r *kmsg.DescribeProducersRequest) kmsg.Response {
	resp := kmsg.NewPtrDescribeProducersResponse()
	for _, t := range r.Topics {
		rt := kmsg.NewDescribeProducersResponseTopic()
		rt.Topic = t.Topic
		for _, i := range t.Partitions {
			rp := kmsg.NewDescribeProducersResponseTopicPartition()
			rp.Partition = i
			p := b.partition(t.Topic, i)
			if p == nil {
				rp.ErrorCode = kerr.UnknownTopicOrPartition.Code
				rt.Partitions = append(rt.Partitions, rp)
				continue
			}
			l, ok := p.p.(producerLister)
			if !ok {
				rp.ErrorCode = kerr.UnknownServerError.Code
				rp.ErrorMessage = kmsg.StringPtr(fmt.Sprintf("partition of type %T has no producer state to read", p.p))
				rt.Partitions = append(rt.Partitions, rp)
				continue
			}
			for _, pi := range l.Producers() {
				ap := kmsg.NewDescribeProducersResponseTopicPartitionActiveProducer()
				ap.ProducerID, ap.ProducerEpoch, ap.LastSequence = pi.ProducerID, int32(pi.Epoch), pi.LastSequence()
				ap.LastTimestamp, ap.CoordinatorEpoch, ap.CurrentTxnStartOffset = pi.LastTimestamp, pi.CoordinatorEpoch, pi.CurrentTxnFirstOffset
				rp.ActiveProducers = append(rp.ActiveProducers, ap)
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}

// producerLister is what a partition that keeps producer state offers
// (a *local.Log and a *tiered.Partition do).
type producerLister interface {
	Producers() []producerstate.ProducerInfo
}

// describeTransactions describes each transactional id's transaction.
func (tc *txnCoordinator) describeTransactions(r *kmsg.DescribeTransactionsRequest) kmsg.Response {
	resp := kmsg.NewPtrDescribeTransactionsResponse()
	tc.mu.Lock()
	defer tc.mu.Unlock()
	for _, id := range r.TransactionalIDs {
		ts := kmsg.NewDescribeTransactionsResponseTransactionState()
		ts.TransactionalID = id
		t := tc.data.Transactions[id]
		if t == nil {
			ts.ErrorCode = kerr.TransactionalIDNotFound.Code
			resp.TransactionStates = append(resp.TransactionStates, ts)
			continue
		}
		ts.State, ts.TimeoutMillis, ts.ProducerID, ts.ProducerEpoch = t.State, t.TimeoutMs, t.ProducerID, t.Epoch
		ts.StartTimestamp = -1
		if t.State == txnOngoing {
			ts.StartTimestamp = t.StartMs
		}
		byTopic := map[string][]int32{}
		for _, tp := range t.Partitions {
			byTopic[tp.Topic] = append(byTopic[tp.Topic], tp.Partition)
		}
		for _, name := range sortedKeys(byTopic) {
			tt := kmsg.NewDescribeTransactionsResponseTransactionStateTopic()
			tt.Topic, tt.Partitions = name, byTopic[name]
			slices.Sort(tt.Partitions)
			ts.Topics = append(ts.Topics, tt)
		}
		resp.TransactionStates = append(resp.TransactionStates, ts)
	}
	return resp
}

// txnStates are Kafka's transaction state names, the ListTransactions
// filters a client may send.
var txnStates = []string{txnEmpty, txnOngoing, txnPrepareCommit, txnPrepareAbort, txnCompleteCommit, txnCompleteAbort}

// listTransactions lists the transactional ids, filtered by state,
// producer id and (v1) how long ago the last transaction began, as
// Kafka's TransactionStateManager filters them.
func (tc *txnCoordinator) listTransactions(r *kmsg.ListTransactionsRequest) kmsg.Response {
	resp := kmsg.NewPtrListTransactionsResponse()
	for _, s := range r.StateFilters {
		if !slices.Contains(txnStates, s) {
			resp.UnknownStateFilters = append(resp.UnknownStateFilters, s)
		}
	}
	now := time.Now().UnixMilli()
	tc.mu.Lock()
	defer tc.mu.Unlock()
	for _, id := range sortedKeys(tc.data.Transactions) {
		t := tc.data.Transactions[id]
		switch {
		case len(r.StateFilters) > 0 && !slices.Contains(r.StateFilters, t.State),
			len(r.ProducerIDFilters) > 0 && !slices.Contains(r.ProducerIDFilters, t.ProducerID),
			r.Version >= 1 && r.DurationFilterMillis >= 0 && now-t.StartMs <= r.DurationFilterMillis:
			continue
		}
		ts := kmsg.NewListTransactionsResponseTransactionState()
		ts.TransactionalID, ts.ProducerID, ts.TransactionState = id, t.ProducerID, t.State
		resp.TransactionStates = append(resp.TransactionStates, ts)
	}
	return resp
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
