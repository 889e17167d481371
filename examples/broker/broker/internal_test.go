package broker_test

import (
	"context"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestInternalTopicRefused: __consumer_offsets holds every group's
// committed offsets; a client cannot delete it, create it anew, or
// delete its records. Kafka's broker refuses writes to and DeleteRecords
// of an internal topic with INVALID_TOPIC_EXCEPTION (ReplicaManager:
// "Cannot delete records of internal topic"), and its tools refuse to
// delete one ("a kafka internal topic and is not allowed to be marked
// for deletion"): DeleteTopics answers the same code here. Commits made
// before the attempts are still served, and new ones are taken.
func TestInternalTopicRefused(t *testing.T) {
	b := startBroker(t, testOptions(t.TempDir()))
	cl := newClient(t, b.Addr())
	ctx := context.Background()
	createTopic(t, cl, "data", 1, nil)
	commit(t, cl, "g", "data", 5)

	del := kmsg.NewPtrDeleteTopicsRequest()
	del.TopicNames = []string{"__consumer_offsets"}
	dt := kmsg.NewDeleteTopicsRequestTopic()
	dt.Topic = kmsg.StringPtr("__consumer_offsets")
	del.Topics = append(del.Topics, dt)
	dresp, err := del.RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	if code := dresp.Topics[0].ErrorCode; code != kerr.InvalidTopicException.Code {
		t.Errorf("DeleteTopics __consumer_offsets: error code %d, want INVALID_TOPIC_EXCEPTION (%d)", code, kerr.InvalidTopicException.Code)
	}

	cr := kmsg.NewPtrCreateTopicsRequest()
	ct := kmsg.NewCreateTopicsRequestTopic()
	ct.Topic, ct.NumPartitions, ct.ReplicationFactor = "__consumer_offsets", 3, 1
	cr.Topics = append(cr.Topics, ct)
	cresp, err := cr.RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	if code := cresp.Topics[0].ErrorCode; code != kerr.TopicAlreadyExists.Code {
		t.Errorf("CreateTopics __consumer_offsets: error code %d, want TOPIC_ALREADY_EXISTS (%d)", code, kerr.TopicAlreadyExists.Code)
	}

	dr := kmsg.NewPtrDeleteRecordsRequest()
	drt := kmsg.NewDeleteRecordsRequestTopic()
	drt.Topic = "__consumer_offsets"
	drp := kmsg.NewDeleteRecordsRequestTopicPartition()
	drp.Offset = -1
	drt.Partitions = append(drt.Partitions, drp)
	dr.Topics = append(dr.Topics, drt)
	drresp, err := dr.RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	if code := drresp.Topics[0].Partitions[0].ErrorCode; code != kerr.InvalidTopicException.Code {
		t.Errorf("DeleteRecords __consumer_offsets: error code %d, want INVALID_TOPIC_EXCEPTION (%d)", code, kerr.InvalidTopicException.Code)
	}
	if start := b.Partition("__consumer_offsets", 0).Offsets().LogStart; start != 0 {
		t.Errorf("__consumer_offsets log start %d after the refused DeleteRecords, want 0", start)
	}

	if got := fetchCommitted(t, cl, "g", "data"); got != 5 {
		t.Errorf("committed offset %d after the refused requests, want 5", got)
	}
	commit(t, cl, "g", "data", 7)
	if got := fetchCommitted(t, cl, "g", "data"); got != 7 {
		t.Errorf("committed offset %d, want 7", got)
	}
}

// commit commits offset for topic-0 in group (a simple, memberless
// commit, as an admin tool makes it).
func commit(t *testing.T, cl *kgo.Client, group, topic string, offset int64) {
	t.Helper()
	req := kmsg.NewPtrOffsetCommitRequest()
	req.Group, req.Generation = group, -1
	rt := kmsg.NewOffsetCommitRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewOffsetCommitRequestTopicPartition()
	rp.Partition, rp.Offset = 0, offset
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(context.Background(), cl)
	if err != nil {
		t.Fatal(err)
	}
	if code := resp.Topics[0].Partitions[0].ErrorCode; code != 0 {
		t.Fatalf("commit %s %s-0 at %d: error code %d", group, topic, offset, code)
	}
}

// fetchCommitted is group's committed offset of topic-0 (-1: none).
func fetchCommitted(t *testing.T, cl *kgo.Client, group, topic string) int64 {
	t.Helper()
	req := kmsg.NewPtrOffsetFetchRequest()
	req.Group = group
	rt := kmsg.NewOffsetFetchRequestTopic()
	rt.Topic, rt.Partitions = topic, []int32{0}
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(context.Background(), cl)
	if err != nil {
		t.Fatal(err)
	}
	if resp.ErrorCode != 0 || resp.Topics[0].Partitions[0].ErrorCode != 0 {
		t.Fatalf("offset fetch %s: error codes %d, %d", group, resp.ErrorCode, resp.Topics[0].Partitions[0].ErrorCode)
	}
	return resp.Topics[0].Partitions[0].Offset
}
