package broker_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// topicConfig is topic's config key as DescribeConfigs answers it.
func topicConfig(t *testing.T, adm *kadm.Client, topic, key string) kadm.Config {
	t.Helper()
	rcs, err := adm.DescribeTopicConfigs(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	rc, err := rcs.On(topic, nil)
	if err != nil || rc.Err != nil {
		t.Fatalf("describe %s configs: %v, %v", topic, err, rc.Err)
	}
	for _, c := range rc.Configs {
		if c.Key == key {
			return c
		}
	}
	t.Fatalf("describe %s configs: no %s", topic, key)
	return kadm.Config{}
}

func configValue(c kadm.Config) string {
	if c.Value == nil {
		return "<nil>"
	}
	return *c.Value
}

// TestAdminConfigs: DescribeConfigs answers a topic's overrides, the
// broker's defaults and Kafka's, with their sources, and the broker's own
// settings; IncrementalAlterConfigs and AlterConfigs change a topic's
// overrides, applied to its partitions and kept across a restart; the
// internal topic refuses losing its compaction.
func TestAdminConfigs(t *testing.T) {
	dir := t.TempDir()
	b := startBroker(t, testOptions(dir))
	cl := newClient(t, b.Addr())
	adm := kadm.NewClient(cl)
	ctx := context.Background()
	createTopic(t, cl, "conf", 2, map[string]string{"segment.bytes": "1048576"})

	if c := topicConfig(t, adm, "conf", "segment.bytes"); configValue(c) != "1048576" || c.Source != kmsg.ConfigSourceDynamicTopicConfig {
		t.Errorf("segment.bytes: %s from %v, want 1048576 from DYNAMIC_TOPIC_CONFIG", configValue(c), c.Source)
	}
	if c := topicConfig(t, adm, "conf", "retention.ms"); configValue(c) != "-1" || c.Source != kmsg.ConfigSourceStaticBrokerConfig {
		t.Errorf("retention.ms: %s from %v, want the broker's -1 (STATIC_BROKER_CONFIG)", configValue(c), c.Source)
	}
	if c := topicConfig(t, adm, "conf", "retention.bytes"); configValue(c) != "-1" || c.Source != kmsg.ConfigSourceDefaultConfig {
		t.Errorf("retention.bytes: %s from %v, want Kafka's -1 (DEFAULT_CONFIG)", configValue(c), c.Source)
	}
	brcs, err := adm.DescribeBrokerConfigs(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(brcs) != 1 || brcs[0].Err != nil || len(brcs[0].Configs) == 0 {
		t.Fatalf("describe broker configs: %+v", brcs)
	}

	rs, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "retention.bytes", Value: kmsg.StringPtr("123456789")}}, "conf")
	if err != nil || rs[0].Err != nil {
		t.Fatalf("incremental alter: %v, %+v", err, rs)
	}
	if got := b.Partition("conf", 1).Offsets(); got.LogEnd != 0 {
		t.Fatalf("conf-1: %+v", got)
	}
	if c := topicConfig(t, adm, "conf", "retention.bytes"); configValue(c) != "123456789" {
		t.Errorf("retention.bytes after SET: %s", configValue(c))
	}
	if c := topicConfig(t, adm, "conf", "segment.bytes"); configValue(c) != "1048576" {
		t.Errorf("segment.bytes after an incremental SET of another key: %s, want kept", configValue(c))
	}
	rs, err = adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "retention.bytes", Value: kmsg.StringPtr("not-a-number")}}, "conf")
	if err != nil || !errors.Is(rs[0].Err, kerr.InvalidConfig) {
		t.Errorf("SET retention.bytes=not-a-number: %v, %v, want INVALID_CONFIG", err, rs[0].Err)
	}
	rs, err = adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "cleanup.policy", Value: kmsg.StringPtr("delete")}}, "__consumer_offsets")
	if err != nil || !errors.Is(rs[0].Err, kerr.InvalidConfig) {
		t.Errorf("__consumer_offsets cleanup.policy=delete: %v, %v, want INVALID_CONFIG", err, rs[0].Err)
	}

	// AlterConfigs replaces the overrides: segment.bytes returns to the
	// default.
	rs, err = adm.AlterTopicConfigsState(ctx, []kadm.AlterConfig{{Name: "retention.bytes", Value: kmsg.StringPtr("987654321")}}, "conf")
	if err != nil || rs[0].Err != nil {
		t.Fatalf("alter: %v, %+v", err, rs)
	}
	if c := topicConfig(t, adm, "conf", "segment.bytes"); c.Source != kmsg.ConfigSourceDefaultConfig {
		t.Errorf("segment.bytes after AlterConfigs without it: %s from %v, want the default", configValue(c), c.Source)
	}

	cl.Close()
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	b = startBroker(t, testOptions(dir))
	adm = kadm.NewClient(newClient(t, b.Addr()))
	if c := topicConfig(t, adm, "conf", "retention.bytes"); configValue(c) != "987654321" || c.Source != kmsg.ConfigSourceDynamicTopicConfig {
		t.Errorf("retention.bytes after a restart: %s from %v, want 987654321", configValue(c), c.Source)
	}
}

// TestAdminGroups: ListGroups and DescribeGroups show a consumer group
// with its member, and a group known only by its commits; DeleteGroups
// refuses a group with members and deletes an empty one with its
// offsets; OffsetDelete deletes the offsets asked of an empty group.
func TestAdminGroups(t *testing.T) {
	b := startBroker(t, testOptions(t.TempDir()))
	cl := newClient(t, b.Addr())
	adm := kadm.NewClient(cl)
	ctx := context.Background()
	createTopic(t, cl, "gt", 2, nil)
	createTopic(t, cl, "gu", 1, nil)
	produceSync(t, cl, &kgo.Record{Topic: "gt", Value: value(1)})
	member := newClient(t, b.Addr(), kgo.ConsumerGroup("live"), kgo.ConsumeTopics("gt"), kgo.ClientID("member-client"))
	consumeN(t, member, 1, time.Minute)
	commit(t, cl, "simple", "gt", 3)
	commit(t, cl, "simple", "gu", 4)

	waitFor(t, time.Minute, "group live stable", func() bool {
		ls, err := adm.ListGroups(ctx)
		return err == nil && ls["live"].State == "Stable"
	})
	ls, err := adm.ListGroups(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if g, ok := ls["live"]; !ok || g.ProtocolType != "consumer" {
		t.Errorf("ListGroups: live %+v", g)
	}
	if g, ok := ls["simple"]; !ok || g.State != "Empty" {
		t.Errorf("ListGroups: simple %+v, want Empty", g)
	}
	dg, err := adm.DescribeGroups(ctx, "live", "simple", "nobody")
	if err != nil {
		t.Fatal(err)
	}
	live := dg["live"]
	if live.State != "Stable" || len(live.Members) != 1 || live.Members[0].ClientID != "member-client" {
		t.Fatalf("DescribeGroups live: %+v", live)
	}
	if a, ok := live.Members[0].Assigned.AsConsumer(); !ok || len(a.Topics) != 1 || a.Topics[0].Topic != "gt" {
		t.Errorf("DescribeGroups live: assignment %+v", live.Members[0].Assigned)
	}
	if dg["nobody"].State != "Dead" {
		t.Errorf("DescribeGroups nobody: %+v, want Dead", dg["nobody"])
	}

	dr, err := adm.DeleteGroups(ctx, "live")
	if err != nil || !errors.Is(dr["live"].Err, kerr.NonEmptyGroup) {
		t.Errorf("DeleteGroups live with a member: %v, %v, want NON_EMPTY_GROUP", err, dr["live"].Err)
	}
	ts := kadm.TopicsSet{}
	ts.Add("gu", 0)
	or, err := adm.DeleteOffsets(ctx, "simple", ts)
	if err != nil || or.Error() != nil {
		t.Fatalf("DeleteOffsets simple gu-0: %v, %v", err, or.Error())
	}
	if got := fetchCommitted(t, cl, "simple", "gu"); got != -1 {
		t.Errorf("simple gu-0 after OffsetDelete: %d, want none", got)
	}
	if got := fetchCommitted(t, cl, "simple", "gt"); got != 3 {
		t.Errorf("simple gt-0 after deleting gu's: %d, want 3", got)
	}
	dr, err = adm.DeleteGroups(ctx, "simple", "nobody")
	if err != nil || dr["simple"].Err != nil || !errors.Is(dr["nobody"].Err, kerr.GroupIDNotFound) {
		t.Fatalf("DeleteGroups simple, nobody: %v, %+v", err, dr)
	}
	if got := fetchCommitted(t, cl, "simple", "gt"); got != -1 {
		t.Errorf("simple gt-0 after DeleteGroups: %d, want none", got)
	}
	if ls, _ := adm.ListGroups(ctx); ls["simple"].Group != "" {
		t.Errorf("ListGroups after DeleteGroups simple: %+v", ls["simple"])
	}
}

// TestAdminClusterAndTransactions: DescribeCluster answers the one node;
// ElectLeaders answers ELECTION_NOT_NEEDED; DescribeProducers shows an
// idempotent producer; ListTransactions and DescribeTransactions show an
// open transaction and its partitions, then its commit.
func TestAdminClusterAndTransactions(t *testing.T) {
	b := startBroker(t, testOptions(t.TempDir()))
	cl := newClient(t, b.Addr())
	adm := kadm.NewClient(cl)
	ctx := context.Background()
	createTopic(t, cl, "ct", 2, nil)

	dc := kmsg.NewPtrDescribeClusterRequest()
	dcr, err := dc.RequestWith(ctx, cl)
	if err != nil || dcr.ErrorCode != 0 || len(dcr.Brokers) != 1 || dcr.ClusterID == "" {
		t.Fatalf("DescribeCluster: %v, %+v", err, dcr)
	}

	ts := kadm.TopicsSet{}
	ts.Add("ct", 0, 1)
	er, err := adm.ElectLeaders(ctx, kadm.ElectPreferredReplica, ts)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []int32{0, 1} {
		if r := er["ct"][p]; !errors.Is(r.Err, kerr.ElectionNotNeeded) {
			t.Errorf("ElectLeaders ct-%d: %v, want ELECTION_NOT_NEEDED", p, r.Err)
		}
	}

	produceSync(t, cl, &kgo.Record{Topic: "ct", Partition: 0, Value: value(0)})
	dp, err := adm.DescribeProducers(ctx, ts)
	if err != nil {
		t.Fatal(err)
	}
	var producers int
	dp.EachProducer(func(p kadm.DescribedProducer) {
		producers++
		if p.ProducerID < 0 || p.LastSequence < 0 {
			t.Errorf("DescribeProducers: %+v", p)
		}
	})
	if producers == 0 {
		t.Error("DescribeProducers: no producer after an idempotent produce")
	}

	txn := newClient(t, b.Addr(), kgo.TransactionalID("admin-txn"), kgo.DefaultProduceTopic("ct"))
	if err := txn.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	produceSync(t, txn, &kgo.Record{Partition: 1, Value: value(1)})
	lt, err := adm.ListTransactions(ctx, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := lt["admin-txn"]; got.State != "Ongoing" {
		t.Errorf("ListTransactions: admin-txn %+v, want Ongoing", got)
	}
	dt, err := adm.DescribeTransactions(ctx, "admin-txn", "no-such-txn")
	if err != nil {
		t.Fatal(err)
	}
	if got := dt["admin-txn"]; got.State != "Ongoing" || len(got.Topics["ct"]) == 0 {
		t.Errorf("DescribeTransactions admin-txn: %+v", got)
	}
	if !errors.Is(dt["no-such-txn"].Err, kerr.TransactionalIDNotFound) {
		t.Errorf("DescribeTransactions no-such-txn: %v, want TRANSACTIONAL_ID_NOT_FOUND", dt["no-such-txn"].Err)
	}
	if err := txn.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	lt, err = adm.ListTransactions(ctx, nil, []string{"CompleteCommit"})
	if err != nil {
		t.Fatal(err)
	}
	if got := lt["admin-txn"]; got.State != "CompleteCommit" {
		t.Errorf("ListTransactions CompleteCommit: admin-txn %+v", got)
	}
}
