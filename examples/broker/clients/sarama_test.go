package clients_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/tierlog/tierlog/examples/broker/broker"
	"github.com/tierlog/tierlog/record"
)

// saramaConfig is sarama's default config (its default protocol
// version: unpinned, as a new user runs it), with the producer's
// successes returned and the manual partitioner: the tests' messages
// name their partitions.
func saramaConfig() *sarama.Config {
	cfg := sarama.NewConfig()
	cfg.Producer.Return.Successes = true
	cfg.Producer.Partitioner = sarama.NewManualPartitioner
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	cfg.Consumer.Offsets.Initial = sarama.OffsetOldest
	return cfg
}

var saramaCodecs = map[record.Codec]sarama.CompressionCodec{
	record.None: sarama.CompressionNone, record.GZIP: sarama.CompressionGZIP, record.Snappy: sarama.CompressionSnappy,
	record.LZ4: sarama.CompressionLZ4, record.ZSTD: sarama.CompressionZSTD,
}

// saramaProduce sends n records of tag to topic-0 and fails the test on
// any error.
func saramaProduce(t *testing.T, addr string, cfg *sarama.Config, topic, tag string, n int) {
	t.Helper()
	prod, err := sarama.NewSyncProducer([]string{addr}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	var msgs []*sarama.ProducerMessage
	for i := range n {
		msgs = append(msgs, &sarama.ProducerMessage{Topic: topic, Partition: 0, Value: sarama.ByteEncoder(payload(tag, i))})
	}
	if err := prod.SendMessages(msgs); err != nil {
		t.Fatalf("sarama produce to %s: %v", topic, err)
	}
}

// saramaConsume reads n records of topic-0 from the start and checks
// they are tag's, in order, byte-identical.
func saramaConsume(t *testing.T, addr, topic, tag string, n int) {
	t.Helper()
	c, err := sarama.NewConsumer([]string{addr}, saramaConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	pc, err := c.ConsumePartition(topic, 0, sarama.OffsetOldest)
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	timeout := time.After(time.Minute)
	for i := range n {
		select {
		case m := <-pc.Messages():
			if !bytes.Equal(m.Value, payload(tag, i)) {
				t.Fatalf("%s offset %d: %q, want %q", topic, m.Offset, m.Value, payload(tag, i))
			}
		case err := <-pc.Errors():
			t.Fatalf("sarama consume %s: %v", topic, err)
		case <-timeout:
			t.Fatalf("sarama consumed %d of %d records of %s", i, n, topic)
		}
	}
}

// TestSaramaCodecs: sarama produces with every codec; the stored batches
// carry it, and sarama reads the records back byte-identical.
func TestSaramaCodecs(t *testing.T) {
	t.Run("local", func(t *testing.T) { testSaramaCodecs(t, startBroker(t)) })
	t.Run("diskless", func(t *testing.T) { testSaramaCodecs(t, startDisklessBroker(t)) })
}

func testSaramaCodecs(t *testing.T, b *broker.Broker) {
	for _, tc := range codecs {
		t.Run(tc.name, func(t *testing.T) {
			cfg := saramaConfig()
			cfg.Producer.Compression = saramaCodecs[tc.codec]
			// sarama flushes a partial batch only on Flush.Frequency:
			// with Flush.Messages alone, records left below it after a
			// retry or a roll wait forever (seen once in 90 runs: the
			// broker idle on its only connection, awaiting a request).
			cfg.Producer.Flush.Messages, cfg.Producer.Flush.Frequency = 50, 20*time.Millisecond
			topic := "sarama-" + tc.name
			saramaProduce(t, b.Addr(), cfg, topic, tc.name, 200)
			checkCodec(t, b, topic, tc.codec)
			saramaConsume(t, b.Addr(), topic, tc.name, 200)
		})
	}
}

// TestSaramaIdempotentAndTransactional: an idempotent producer's batches
// carry its producer id and are stored once; a transactional producer's
// committed records are read by a read_committed consumer.
func TestSaramaIdempotentAndTransactional(t *testing.T) {
	t.Run("local", func(t *testing.T) { testSaramaIdempotentAndTransactional(t, startBroker(t)) })
	t.Run("diskless", func(t *testing.T) { testSaramaIdempotentAndTransactional(t, startDisklessBroker(t)) })
}

func testSaramaIdempotentAndTransactional(t *testing.T, b *broker.Broker) {
	cfg := saramaConfig()
	cfg.Producer.Idempotent, cfg.Net.MaxOpenRequests = true, 1
	saramaProduce(t, b.Addr(), cfg, "sarama-idem", "idem", 100)
	for _, bt := range storedBatches(t, b, "sarama-idem", 0) {
		if bt.ProducerID() < 0 {
			t.Fatalf("idempotent batch at %d without a producer id", bt.BaseOffset())
		}
	}
	if end := b.Partition("sarama-idem", 0).Offsets().LogEnd; end != 100 {
		t.Fatalf("log end %d after 100 idempotent records", end)
	}

	tcfg := saramaConfig()
	tcfg.Producer.Idempotent, tcfg.Net.MaxOpenRequests = true, 1
	tcfg.Producer.Transaction.ID = "sarama-txn"
	prod, err := sarama.NewSyncProducer([]string{b.Addr()}, tcfg)
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	if err := prod.BeginTxn(); err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		if _, _, err := prod.SendMessage(&sarama.ProducerMessage{Topic: "sarama-txn", Partition: 0, Value: sarama.ByteEncoder(payload("txn", i))}); err != nil {
			t.Fatal(err)
		}
	}
	if err := prod.CommitTxn(); err != nil {
		t.Fatal(err)
	}
	var txnal bool
	for _, bt := range storedBatches(t, b, "sarama-txn", 0) {
		txnal = txnal || bt.IsTransactional()
	}
	if !txnal {
		t.Fatal("no transactional batch stored")
	}
	saramaConsume(t, b.Addr(), "sarama-txn", "txn", 10)
}

// saramaMember consumes as one member of group until ctx ends.
type saramaMember struct {
	name string
	s    *seen
}

func (m saramaMember) Setup(sarama.ConsumerGroupSession) error   { return nil }
func (m saramaMember) Cleanup(sarama.ConsumerGroupSession) error { return nil }
func (m saramaMember) ConsumeClaim(sess sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	for msg := range claim.Messages() {
		m.s.add(m.name, msg.Partition, msg.Value)
		sess.MarkMessage(msg, "")
	}
	return nil
}

// runSaramaMember runs a member until its context ends; done is closed
// when it has left the group.
func runSaramaMember(t *testing.T, ctx context.Context, addr, group, topic, name string, s *seen) (done chan struct{}) {
	cfg := saramaConfig()
	cfg.ClientID = name
	cg, err := sarama.NewConsumerGroup([]string{addr}, group, cfg)
	if err != nil {
		t.Fatal(err)
	}
	done = make(chan struct{})
	go func() {
		defer close(done)
		defer cg.Close()
		for ctx.Err() == nil {
			if err := cg.Consume(ctx, []string{topic}, saramaMember{name: name, s: s}); err != nil && !errors.Is(err, sarama.ErrClosedConsumerGroup) {
				t.Logf("%s: consume: %v", name, err)
				time.Sleep(100 * time.Millisecond)
			}
		}
	}()
	return done
}

// TestSaramaGroupMemberLeaves: two sarama members share a topic's four
// partitions; one leaves; the other takes every partition and every
// record is consumed.
func TestSaramaGroupMemberLeaves(t *testing.T) {
	b := startBroker(t)
	adm, err := sarama.NewClusterAdmin([]string{b.Addr()}, saramaConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	if err := adm.CreateTopic("sarama-grp", &sarama.TopicDetail{NumPartitions: 4, ReplicationFactor: 1}, false); err != nil {
		t.Fatal(err)
	}
	s := newSeen()
	ctxA, stopA := context.WithCancel(context.Background())
	ctxB, stopB := context.WithCancel(context.Background())
	defer stopB()
	doneA := runSaramaMember(t, ctxA, b.Addr(), "sg", "sarama-grp", "a", s)
	doneB := runSaramaMember(t, ctxB, b.Addr(), "sg", "sarama-grp", "b", s)
	defer func() { stopB(); <-doneB }()

	prod, err := sarama.NewSyncProducer([]string{b.Addr()}, saramaConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	send := func(from, to int) {
		var msgs []*sarama.ProducerMessage
		for i := from; i < to; i++ {
			msgs = append(msgs, &sarama.ProducerMessage{Topic: "sarama-grp", Partition: int32(i % 4), Value: sarama.ByteEncoder(payload("grp", i))})
		}
		if err := prod.SendMessages(msgs); err != nil {
			t.Fatal(err)
		}
	}
	send(0, 200)
	waitFor(t, 2*time.Minute, "both members consuming", func() bool { ok, members := s.has("grp", 200); return ok && members == 2 })
	stopA()
	<-doneA
	send(200, 400)
	waitFor(t, 2*time.Minute, "every record after a leaves", func() bool { ok, _ := s.has("grp", 400); return ok })
	waitFor(t, 2*time.Minute, "b on every partition", func() bool { return s.partitionsOf("b") == 4 })
}

// saramaAdmin is a sarama ClusterAdmin of b with topic (n partitions)
// created, closed with the test.
func saramaAdmin(t *testing.T, addr, topic string, n int32) sarama.ClusterAdmin {
	t.Helper()
	adm, err := sarama.NewClusterAdmin([]string{addr}, saramaConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { adm.Close() })
	if err := adm.CreateTopic(topic, &sarama.TopicDetail{NumPartitions: n, ReplicationFactor: 1}, false); err != nil {
		t.Fatal(err)
	}
	return adm
}

// TestSaramaAdminConfigs: sarama's ClusterAdmin calls DescribeCluster,
// DescribeConfigs, IncrementalAlterConfig, AlterConfig, ElectLeaders and
// DeleteTopic (refused for __consumer_offsets).
func TestSaramaAdminConfigs(t *testing.T) {
	b := startBroker(t)
	adm := saramaAdmin(t, b.Addr(), "sarama-adm", 2)
	brokers, controller, err := adm.DescribeCluster()
	if err != nil || len(brokers) != 1 || controller != brokers[0].ID() {
		t.Fatalf("DescribeCluster: %v, %d brokers, controller %d", err, len(brokers), controller)
	}
	get := func(key string) string {
		res, err := adm.DescribeConfigs([]*sarama.ConfigResource{{Type: sarama.TopicResource, Name: "sarama-adm", ConfigNames: []string{key}}},
			sarama.DescribeConfigsOptions{IncludeSynonyms: true, IncludeDocumentation: true})
		if err != nil || len(res) != 1 || res[0].ErrorCode != sarama.ErrNoError {
			t.Fatalf("DescribeConfigs: %v, %+v", err, res)
		}
		for _, e := range res[0].Configs {
			if e.Name == key {
				return e.Value
			}
		}
		t.Fatalf("DescribeConfigs: no %s in %+v", key, res[0].Configs)
		return ""
	}
	v := "86400000"
	if err := adm.IncrementalAlterConfig(sarama.TopicResource, "sarama-adm", map[string]sarama.IncrementalAlterConfigsEntry{
		"retention.ms": {Operation: sarama.IncrementalAlterConfigsOperationSet, Value: &v}}, false); err != nil {
		t.Fatal(err)
	}
	if got := get("retention.ms"); got != v {
		t.Errorf("retention.ms after IncrementalAlterConfig: %s, want %s", got, v)
	}
	seg := "2097152"
	if err := adm.AlterConfig(sarama.TopicResource, "sarama-adm", map[string]*string{"segment.bytes": &seg}, false); err != nil {
		t.Fatal(err)
	}
	if got := get("segment.bytes"); got != seg {
		t.Errorf("segment.bytes after AlterConfig: %s, want %s", got, seg)
	}
	res, err := adm.ElectLeaders(sarama.PreferredElection, map[string][]int32{"sarama-adm": {0, 1}})
	if err != nil {
		t.Fatal(err)
	}
	for p, r := range res["sarama-adm"] {
		if !errors.Is(r.ErrorCode, sarama.ErrElectionNotNeeded) {
			t.Errorf("ElectLeaders sarama-adm-%d: %v, want ELECTION_NOT_NEEDED", p, r.ErrorCode)
		}
	}
	if err := adm.DeleteTopic("sarama-adm"); err != nil {
		t.Fatalf("DeleteTopic: %v", err)
	}
	if err := adm.DeleteTopic("__consumer_offsets"); err == nil {
		t.Fatal("DeleteTopic __consumer_offsets: no error")
	}
}

// TestSaramaAdminGroups: sarama's ClusterAdmin calls ListConsumerGroups,
// DescribeConsumerGroups, ListConsumerGroupOffsets,
// DeleteConsumerGroupOffset and DeleteConsumerGroup on a group of
// commits made by sarama's offset manager.
func TestSaramaAdminGroups(t *testing.T) {
	b := startBroker(t)
	adm := saramaAdmin(t, b.Addr(), "sarama-adm", 2)
	saramaProduce(t, b.Addr(), saramaConfig(), "sarama-adm", "adm", 10)
	om, err := sarama.NewOffsetManagerFromClient("sarama-adm-group", mustClient(t, b.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []int32{0, 1} {
		pom, err := om.ManagePartition("sarama-adm", p)
		if err != nil {
			t.Fatal(err)
		}
		pom.MarkOffset(5, "")
		pom.Close()
	}
	om.Commit()
	om.Close()
	groups, err := adm.ListConsumerGroups()
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := groups["sarama-adm-group"]; !ok {
		t.Fatalf("ListConsumerGroups: %v, want sarama-adm-group", groups)
	}
	desc, err := adm.DescribeConsumerGroups([]string{"sarama-adm-group"})
	if err != nil || len(desc) != 1 || desc[0].State != "Empty" {
		t.Fatalf("DescribeConsumerGroups: %v, %+v", err, desc)
	}
	if err := adm.DeleteConsumerGroupOffset("sarama-adm-group", "sarama-adm", 1); err != nil {
		t.Fatalf("DeleteConsumerGroupOffset: %v", err)
	}
	offs, err := adm.ListConsumerGroupOffsets("sarama-adm-group", map[string][]int32{"sarama-adm": {0, 1}})
	if err != nil {
		t.Fatal(err)
	}
	if got := offs.GetBlock("sarama-adm", 0).Offset; got != 5 {
		t.Errorf("offset of partition 0: %d, want 5", got)
	}
	if got := offs.GetBlock("sarama-adm", 1).Offset; got != -1 {
		t.Errorf("offset of partition 1 after DeleteConsumerGroupOffset: %d, want -1", got)
	}
	if err := adm.DeleteConsumerGroup("sarama-adm-group"); err != nil {
		t.Fatalf("DeleteConsumerGroup: %v", err)
	}
	groups, err = adm.ListConsumerGroups()
	if _, ok := groups["sarama-adm-group"]; err != nil || ok {
		t.Fatalf("ListConsumerGroups after DeleteConsumerGroup: %v, %v", err, groups)
	}
}

// mustClient is a sarama client of addr, closed with the test.
func mustClient(t *testing.T, addr string) sarama.Client {
	t.Helper()
	cl, err := sarama.NewClient([]string{addr}, saramaConfig())
	if err != nil {
		t.Fatal(fmt.Errorf("sarama client: %w", err))
	}
	t.Cleanup(func() { cl.Close() })
	return cl
}
