package clients_test

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/tierlog/tierlog/examples/broker/broker"
	"github.com/tierlog/tierlog/record"
)

var kafkaGoCodecs = map[record.Codec]kafka.Compression{
	record.GZIP: kafka.Gzip, record.Snappy: kafka.Snappy, record.LZ4: kafka.Lz4, record.ZSTD: kafka.Zstd,
}

// kafkaGoCreate creates topic with n partitions through kafka-go's client.
func kafkaGoCreate(t *testing.T, cl *kafka.Client, topic string, n int) {
	t.Helper()
	resp, err := cl.CreateTopics(context.Background(), &kafka.CreateTopicsRequest{Topics: []kafka.TopicConfig{{Topic: topic, NumPartitions: n, ReplicationFactor: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := resp.Errors[topic]; err != nil {
		t.Fatalf("create %s: %v", topic, err)
	}
}

// TestKafkaGoCodecs: kafka-go's Writer produces with every codec; the
// stored batches carry it, and its Reader reads the records back
// byte-identical.
func TestKafkaGoCodecs(t *testing.T) {
	t.Run("local", func(t *testing.T) { testKafkaGoCodecs(t, startBroker(t)) })
	t.Run("diskless", func(t *testing.T) { testKafkaGoCodecs(t, startDisklessBroker(t)) })
}

func testKafkaGoCodecs(t *testing.T, b *broker.Broker) {
	cl := &kafka.Client{Addr: kafka.TCP(b.Addr()), Timeout: time.Minute}
	for _, tc := range codecs {
		t.Run(tc.name, func(t *testing.T) {
			topic := "kafkago-" + tc.name
			kafkaGoCreate(t, cl, topic, 1)
			w := &kafka.Writer{Addr: kafka.TCP(b.Addr()), Topic: topic, Compression: kafkaGoCodecs[tc.codec],
				RequiredAcks: kafka.RequireAll, BatchSize: 50, BatchTimeout: 10 * time.Millisecond}
			defer w.Close()
			var msgs []kafka.Message
			for i := range 200 {
				msgs = append(msgs, kafka.Message{Value: payload(tc.name, i)})
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if err := w.WriteMessages(ctx, msgs...); err != nil {
				t.Fatal(err)
			}
			checkCodec(t, b, topic, tc.codec)
			r := kafka.NewReader(kafka.ReaderConfig{Brokers: []string{b.Addr()}, Topic: topic, Partition: 0, MaxWait: 200 * time.Millisecond})
			defer r.Close()
			for i := range 200 {
				m, err := r.ReadMessage(ctx)
				if err != nil {
					t.Fatalf("read %d: %v", i, err)
				}
				if !bytes.Equal(m.Value, payload(tc.name, i)) {
					t.Fatalf("offset %d: %q, want %q", m.Offset, m.Value, payload(tc.name, i))
				}
			}
		})
	}
}

// TestKafkaGoGroupMemberLeaves: two kafka-go group readers share a
// topic's four partitions; one leaves; the other takes every partition
// and every record is consumed.
func TestKafkaGoGroupMemberLeaves(t *testing.T) {
	b := startBroker(t)
	cl := &kafka.Client{Addr: kafka.TCP(b.Addr()), Timeout: time.Minute}
	kafkaGoCreate(t, cl, "kafkago-grp", 4)
	s := newSeen()
	member := func(name string) (stop func()) {
		r := kafka.NewReader(kafka.ReaderConfig{Brokers: []string{b.Addr()}, GroupID: "kg", Topic: "kafkago-grp",
			MaxWait: 200 * time.Millisecond, StartOffset: kafka.FirstOffset, CommitInterval: 100 * time.Millisecond,
			HeartbeatInterval: 200 * time.Millisecond, SessionTimeout: 6 * time.Second, RebalanceTimeout: 6 * time.Second})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			for {
				m, err := r.FetchMessage(ctx)
				if err != nil {
					return
				}
				s.add(name, int32(m.Partition), m.Value)
				r.CommitMessages(ctx, m)
			}
		}()
		return func() { cancel(); <-done; r.Close() }
	}
	stopA := member("a")
	stopB := member("b")
	defer stopB()
	w := &kafka.Writer{Addr: kafka.TCP(b.Addr()), Topic: "kafkago-grp", Balancer: &kafka.RoundRobin{}, RequiredAcks: kafka.RequireAll,
		BatchTimeout: 10 * time.Millisecond}
	defer w.Close()
	send := func(from, to int) {
		var msgs []kafka.Message
		for i := from; i < to; i++ {
			msgs = append(msgs, kafka.Message{Value: payload("grp", i)})
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := w.WriteMessages(ctx, msgs...); err != nil {
			t.Fatal(err)
		}
	}
	send(0, 200)
	waitFor(t, 2*time.Minute, "both members consuming", func() bool { ok, members := s.has("grp", 200); return ok && members == 2 })
	stopA()
	send(200, 400)
	waitFor(t, 2*time.Minute, "every record after a leaves", func() bool { ok, _ := s.has("grp", 400); return ok })
	waitFor(t, 2*time.Minute, "b on every partition", func() bool { return s.partitionsOf("b") == 4 })
}

// TestKafkaGoAdmin: kafka-go's client calls DescribeConfigs,
// IncrementalAlterConfigs, ListGroups, DescribeGroups, OffsetDelete and
// DeleteGroups (each used to end in "unexpected EOF").
func TestKafkaGoAdmin(t *testing.T) {
	b := startBroker(t)
	cl := &kafka.Client{Addr: kafka.TCP(b.Addr()), Timeout: time.Minute}
	ctx := context.Background()
	kafkaGoCreate(t, cl, "kafkago-adm", 1)
	ir, err := cl.IncrementalAlterConfigs(ctx, &kafka.IncrementalAlterConfigsRequest{Resources: []kafka.IncrementalAlterConfigsRequestResource{{
		ResourceType: kafka.ResourceTypeTopic, ResourceName: "kafkago-adm",
		Configs: []kafka.IncrementalAlterConfigsRequestConfig{{Name: "retention.ms", Value: "3600000", ConfigOperation: kafka.ConfigOperationSet}}}}})
	if err != nil || ir.Resources[0].Error != nil {
		t.Fatalf("IncrementalAlterConfigs: %v, %+v", err, ir)
	}
	dr, err := cl.DescribeConfigs(ctx, &kafka.DescribeConfigsRequest{Resources: []kafka.DescribeConfigRequestResource{{
		ResourceType: kafka.ResourceTypeTopic, ResourceName: "kafkago-adm", ConfigNames: []string{"retention.ms"}}}})
	if err != nil || len(dr.Resources) != 1 || dr.Resources[0].Error != nil || len(dr.Resources[0].ConfigEntries) != 1 {
		t.Fatalf("DescribeConfigs: %v, %+v", err, dr)
	}
	if got := dr.Resources[0].ConfigEntries[0].ConfigValue; got != "3600000" {
		t.Errorf("retention.ms: %s, want 3600000", got)
	}

	r := kafka.NewReader(kafka.ReaderConfig{Brokers: []string{b.Addr()}, GroupID: "kg-adm", Topic: "kafkago-adm", MaxWait: 200 * time.Millisecond,
		StartOffset: kafka.FirstOffset})
	w := &kafka.Writer{Addr: kafka.TCP(b.Addr()), Topic: "kafkago-adm", RequiredAcks: kafka.RequireAll, BatchTimeout: 10 * time.Millisecond}
	defer w.Close()
	if err := w.WriteMessages(ctx, kafka.Message{Value: payload("adm", 0)}); err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithTimeout(ctx, time.Minute)
	m, err := r.FetchMessage(rctx)
	if err == nil {
		err = r.CommitMessages(rctx, m)
	}
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	lg, err := cl.ListGroups(ctx, &kafka.ListGroupsRequest{})
	if err != nil || lg.Error != nil {
		t.Fatalf("ListGroups: %v, %+v", err, lg)
	}
	var listed bool
	for _, g := range lg.Groups {
		listed = listed || g.GroupID == "kg-adm"
	}
	if !listed {
		t.Errorf("ListGroups: %+v, want kg-adm", lg.Groups)
	}
	dg, err := cl.DescribeGroups(ctx, &kafka.DescribeGroupsRequest{GroupIDs: []string{"kg-adm"}})
	if err != nil || len(dg.Groups) != 1 || dg.Groups[0].Error != nil || len(dg.Groups[0].Members) != 1 {
		t.Fatalf("DescribeGroups: %v, %+v", err, dg)
	}
	r.Close()
	waitFor(t, time.Minute, "kg-adm empty after its reader closed", func() bool {
		dg, err := cl.DescribeGroups(ctx, &kafka.DescribeGroupsRequest{GroupIDs: []string{"kg-adm"}})
		return err == nil && len(dg.Groups) == 1 && dg.Groups[0].GroupState == "Empty"
	})
	od, err := cl.OffsetDelete(ctx, &kafka.OffsetDeleteRequest{GroupID: "kg-adm", Topics: map[string][]int{"kafkago-adm": {0}}})
	if err != nil || od.Error != nil {
		t.Fatalf("OffsetDelete: %v, %+v", err, od)
	}
	for _, res := range od.Topics["kafkago-adm"] {
		if res.Error != nil {
			t.Errorf("OffsetDelete kafkago-adm-%d: %v", res.Partition, res.Error)
		}
	}
	dgr, err := cl.DeleteGroups(ctx, &kafka.DeleteGroupsRequest{GroupIDs: []string{"kg-adm", "kg-none"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := dgr.Errors["kg-adm"]; err != nil {
		t.Errorf("DeleteGroups kg-adm: %v", err)
	}
	if err := dgr.Errors["kg-none"]; !errors.Is(err, kafka.GroupIdNotFound) {
		t.Errorf("DeleteGroups kg-none: %v, want GROUP_ID_NOT_FOUND", err)
	}
}
