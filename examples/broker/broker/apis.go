package broker

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

const apiVersionsKey = 18

// apis are the requests served and their version ranges. Each range
// stops before a version whose semantics this broker does not implement:
// topic ids in Produce v12+ and Fetch v13+, KIP-848 member epochs in
// OffsetCommit v9+, batched groups in OffsetFetch v8+, KIP-890's epoch
// bump in EndTxn v4+ and AddPartitionsToTxn v4+ (a broker-to-broker
// shape), the new ListOffsets times past -5.
var apis = map[int16][2]int16{
	0:  {0, 11}, // Produce: v3 up served (record batch v2), v0-v2 refused (produceMinVersion)
	1:  {4, 12}, // Fetch
	2:  {1, 9},  // ListOffsets (v7: -3, v8: -4, v9: -5)
	3:  {0, 12}, // Metadata (v0: kafka-python's version probe)
	8:  {2, 8},  // OffsetCommit
	9:  {1, 7},  // OffsetFetch
	10: {0, 3},  // FindCoordinator
	11: {0, 7},  // JoinGroup
	12: {0, 4},  // Heartbeat
	13: {0, 4},  // LeaveGroup
	14: {0, 5},  // SyncGroup
	15: {0, 5},  // DescribeGroups
	16: {0, 5},  // ListGroups
	18: {0, 4},  // ApiVersions
	19: {0, 7},  // CreateTopics
	20: {0, 6},  // DeleteTopics
	21: {0, 2},  // DeleteRecords
	22: {0, 4},  // InitProducerID
	23: {0, 4},  // OffsetForLeaderEpoch
	24: {0, 3},  // AddPartitionsToTxn
	25: {0, 3},  // AddOffsetsToTxn
	26: {0, 3},  // EndTxn
	28: {0, 3},  // TxnOffsetCommit
	32: {0, 4},  // DescribeConfigs
	33: {0, 2},  // AlterConfigs
	42: {0, 2},  // DeleteGroups
	43: {0, 2},  // ElectLeaders
	44: {0, 1},  // IncrementalAlterConfigs
	47: {0, 0},  // OffsetDelete
	60: {0, 1},  // DescribeCluster
	61: {0, 0},  // DescribeProducers
	65: {0, 0},  // DescribeTransactions
	66: {0, 1},  // ListTransactions
}

// produceMinVersion is the first Produce version served: v3 carries
// record batches (magic 2), the only format the log stores. ApiVersions
// says Produce from v0 all the same, as Apache Kafka 4.0 does
// (KAFKA-18659): librdkafka (its issue #4956) does not compress with
// gzip, snappy or lz4 for a broker whose Produce starts above v0, and
// sends those batches uncompressed without a word. Kafka 4.0 advertises
// 0 (ApiKeys.PRODUCE_API_VERSIONS_RESPONSE_MIN_VERSION) while its
// oldestVersion stays 3, so its SocketServer refuses a v0-v2 request's
// header and closes the connection. This broker answers instead, as the
// change's author wanted ("a disconnection is too confusing if the
// given version is included as part of the api versions response"): a
// Produce below v3 is parsed (kmsg reads every version) and answered
// UNSUPPORTED_VERSION for each of its partitions, nothing appended, and
// the connection stays usable.
const produceMinVersion = 3

func supported(key, version int16) bool {
	r, ok := apis[key]
	return ok && version >= r[0] && version <= r[1]
}

// handle runs one request other than Fetch.
func (b *Broker) handle(ctx context.Context, c *conn, req *request) (kmsg.Response, error) {
	switch r := req.kreq.(type) {
	case *kmsg.ApiVersionsRequest:
		return b.apiVersions(req), nil
	case *kmsg.MetadataRequest:
		return b.metadata(r), nil
	case *kmsg.CreateTopicsRequest:
		return b.createTopics(r), nil
	case *kmsg.DeleteTopicsRequest:
		return b.deleteTopics(r), nil
	case *kmsg.ProduceRequest:
		return b.produce(ctx, r)
	case *kmsg.ListOffsetsRequest:
		return b.listOffsets(ctx, r), nil
	case *kmsg.DeleteRecordsRequest:
		return b.deleteRecords(ctx, r), nil
	case *kmsg.OffsetForLeaderEpochRequest:
		return b.offsetForLeaderEpoch(ctx, r), nil
	case *kmsg.InitProducerIDRequest:
		return b.txns.initProducerID(ctx, r), nil
	case *kmsg.AddPartitionsToTxnRequest:
		return b.txns.addPartitions(r), nil
	case *kmsg.AddOffsetsToTxnRequest:
		return b.txns.addOffsets(r), nil
	case *kmsg.EndTxnRequest:
		return b.txns.endTxn(ctx, r), nil
	case *kmsg.TxnOffsetCommitRequest:
		return b.txns.txnOffsetCommit(r), nil
	case *kmsg.FindCoordinatorRequest:
		return b.findCoordinator(r), nil
	case *kmsg.JoinGroupRequest:
		return b.groups.join(ctx, r, req.clientID, c.remoteHost()), nil
	case *kmsg.SyncGroupRequest:
		return b.groups.sync(ctx, r), nil
	case *kmsg.HeartbeatRequest:
		return b.groups.heartbeat(r), nil
	case *kmsg.LeaveGroupRequest:
		return b.groups.leave(r), nil
	case *kmsg.OffsetCommitRequest:
		return b.groups.offsetCommit(ctx, r), nil
	case *kmsg.OffsetFetchRequest:
		return b.groups.offsetFetch(r), nil
	}
	return b.handleAdmin(ctx, req)
}

// handleAdmin runs one admin request.
func (b *Broker) handleAdmin(ctx context.Context, req *request) (kmsg.Response, error) {
	switch r := req.kreq.(type) {
	case *kmsg.DescribeConfigsRequest:
		return b.describeConfigs(r), nil
	case *kmsg.AlterConfigsRequest:
		return b.alterConfigs(r), nil
	case *kmsg.IncrementalAlterConfigsRequest:
		return b.incrementalAlterConfigs(r), nil
	case *kmsg.ListGroupsRequest:
		return b.groups.listGroups(r), nil
	case *kmsg.DescribeGroupsRequest:
		return b.groups.describeGroups(r), nil
	case *kmsg.DeleteGroupsRequest:
		return b.groups.deleteGroups(ctx, r), nil
	case *kmsg.OffsetDeleteRequest:
		return b.groups.offsetDelete(ctx, r), nil
	case *kmsg.DescribeClusterRequest:
		return b.describeCluster(r), nil
	case *kmsg.ElectLeadersRequest:
		return b.electLeaders(r), nil
	case *kmsg.DescribeProducersRequest:
		return b.describeProducers(r), nil
	case *kmsg.DescribeTransactionsRequest:
		return b.txns.describeTransactions(r), nil
	case *kmsg.ListTransactionsRequest:
		return b.txns.listTransactions(r), nil
	}
	return nil, fmt.Errorf("broker: no handler for api key %d", req.key)
}

func (b *Broker) apiVersions(req *request) kmsg.Response {
	resp := kmsg.NewPtrApiVersionsResponse()
	if req.badVersion {
		resp.ErrorCode = kerr.UnsupportedVersion.Code
	}
	for key := int16(0); key < 100; key++ {
		r, ok := apis[key]
		if !ok {
			continue
		}
		k := kmsg.NewApiVersionsResponseApiKey()
		k.ApiKey, k.MinVersion, k.MaxVersion = key, r[0], r[1]
		resp.ApiKeys = append(resp.ApiKeys, k)
	}
	return resp
}

// findCoordinator answers that this node coordinates every group and
// transactional id.
func (b *Broker) findCoordinator(r *kmsg.FindCoordinatorRequest) kmsg.Response {
	resp := kmsg.NewPtrFindCoordinatorResponse()
	host, port := b.hostPort()
	resp.NodeID, resp.Host, resp.Port = NodeID, host, port
	keys := r.CoordinatorKeys
	if r.Version < 4 {
		keys = []string{r.CoordinatorKey}
	}
	for _, k := range keys {
		c := kmsg.NewFindCoordinatorResponseCoordinator()
		c.Key, c.NodeID, c.Host, c.Port = k, NodeID, host, port
		resp.Coordinators = append(resp.Coordinators, c)
	}
	return resp
}
