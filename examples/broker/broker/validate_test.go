package broker_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tierlog/tierlog/record"
)

// TestProduceInvalidAcks: acks other than -1, 0 and 1 is answered
// INVALID_REQUIRED_ACKS for each partition, nothing appended, as Kafka's
// ReplicaManager.appendRecords answers it.
func TestProduceInvalidAcks(t *testing.T) {
	b := startBroker(t, testOptions(t.TempDir()))
	cl := newClient(t, b.Addr())
	createTopic(t, cl, "acks", 1, nil)
	c := dialRaw(t, b.Addr()) // kgo sends the acks it was configured with
	for _, acks := range []int16{2, -2, 5} {
		req := kmsg.NewPtrProduceRequest()
		req.SetVersion(9)
		req.Acks, req.TimeoutMillis = acks, 1000
		rt := kmsg.NewProduceRequestTopic()
		rt.Topic = "acks"
		rp := kmsg.NewProduceRequestTopicPartition()
		rp.Records = oneBatch(t)
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		resp := c.roundTrip(req).(*kmsg.ProduceResponse)
		if code := resp.Topics[0].Partitions[0].ErrorCode; code != kerr.InvalidRequiredAcks.Code {
			t.Errorf("acks=%d: error code %d, want INVALID_REQUIRED_ACKS (%d)", acks, code, kerr.InvalidRequiredAcks.Code)
		}
	}
	if end := b.Partition("acks", 0).Offsets().LogEnd; end != 0 {
		t.Fatalf("log end %d after produces with invalid acks, want 0", end)
	}
}

// TestCreateTopicsInvalidCounts: NumPartitions -1 takes the default
// (num.partitions), 0 and below -1 are INVALID_PARTITIONS; a replication
// factor of 0 or below -1 is INVALID_REPLICATION_FACTOR (Kafka's
// ReplicationControlManager).
func TestCreateTopicsInvalidCounts(t *testing.T) {
	opts := testOptions(t.TempDir())
	opts.Partitions = 3
	b := startBroker(t, opts)
	cl := newClient(t, b.Addr())
	for _, tc := range []struct {
		name       string
		partitions int32
		rf         int16
		code       int16
	}{
		{"minus-five", -5, 1, kerr.InvalidPartitions.Code},
		{"zero", 0, 1, kerr.InvalidPartitions.Code},
		{"rf-zero", 1, 0, kerr.InvalidReplicationFactor.Code},
		{"rf-minus-two", 1, -2, kerr.InvalidReplicationFactor.Code},
		{"default", -1, -1, 0},
	} {
		req := kmsg.NewPtrCreateTopicsRequest()
		rt := kmsg.NewCreateTopicsRequestTopic()
		rt.Topic, rt.NumPartitions, rt.ReplicationFactor = tc.name, tc.partitions, tc.rf
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(context.Background(), cl)
		if err != nil {
			t.Fatal(err)
		}
		if code := resp.Topics[0].ErrorCode; code != tc.code {
			t.Errorf("%s: NumPartitions %d, ReplicationFactor %d: error code %d, want %d", tc.name, tc.partitions, tc.rf, code, tc.code)
		}
		exists := b.Partition(tc.name, 0) != nil
		if exists != (tc.code == 0) {
			t.Errorf("%s: topic exists %v after error code %d", tc.name, exists, resp.Topics[0].ErrorCode)
		}
	}
	if b.Partition("default", 2) == nil || b.Partition("default", 3) != nil {
		t.Error("NumPartitions -1 did not create num.partitions (3) partitions")
	}
}

// oneBatch is a record batch of one record, as a producer sends it.
func oneBatch(t *testing.T) []byte {
	t.Helper()
	var bld record.Builder
	bld.Reset(record.NewBatchHeader())
	bld.Append(time.Now().UnixMilli(), nil, value(0), nil)
	bt, err := bld.Build()
	if err != nil {
		t.Fatal(err)
	}
	return append([]byte(nil), bt...)
}

// TestProduceInvalidTimestamp: a record whose CreateTime is past
// message.timestamp.after.max.ms is answered INVALID_TIMESTAMP, as
// Kafka's LogValidator answers it, with nothing appended.
func TestProduceInvalidTimestamp(t *testing.T) {
	b := startBroker(t, testOptions(t.TempDir()))
	cl := newClient(t, b.Addr())
	createTopic(t, cl, "ts", 1, map[string]string{"message.timestamp.after.max.ms": "60000"})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rec := &kgo.Record{Topic: "ts", Value: []byte("ahead"), Timestamp: time.Now().Add(time.Hour)}
	if err := cl.ProduceSync(ctx, rec).FirstErr(); !errors.Is(err, kerr.InvalidTimestamp) {
		t.Fatalf("produce an hour ahead: %v, want INVALID_TIMESTAMP", err)
	}
	if end := b.Partition("ts", 0).Offsets().LogEnd; end != 0 {
		t.Fatalf("log end %d after a refused produce, want 0", end)
	}
}
