package broker_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tierlog/tierlog/examples/broker/broker"
)

// recordsPerCase is how many records a test case produces (100,000 per
// codec, as the issue asks: about a second); TIERLOG_BROKER_RECORDS
// changes it for a longer or shorter run.
func recordsPerCase(def int) int {
	if s := os.Getenv("TIERLOG_BROKER_RECORDS"); s != "" {
		if n, err := strconv.Atoi(s); err == nil && n > 0 {
			return n
		}
	}
	return def
}

// testOptions are a test broker's options: a free loopback port, fast
// rebalances.
func testOptions(dir string) broker.Options {
	// retention.ms=-1: the tests' records carry old timestamps, which
	// retention (a deadline on the timing wheel) would delete at once.
	return broker.Options{Listen: "127.0.0.1:0", Dir: dir, InitialRebalanceDelay: 50 * time.Millisecond,
		TopicConfig: map[string]string{"retention.ms": "-1"},
		Logger:      slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))}
}

// startBroker starts a broker closed with the test.
func startBroker(t testing.TB, opts broker.Options) *broker.Broker {
	t.Helper()
	b, err := broker.Start(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Errorf("close broker: %v", err)
		}
	})
	return b
}

// newClient returns a kgo client of addr, closed with the test.
func newClient(t testing.TB, addr string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	opts = append([]kgo.Opt{kgo.SeedBrokers(addr), kgo.AllowAutoTopicCreation(), kgo.RetryTimeout(30 * time.Second),
		kgo.FetchMaxWait(200 * time.Millisecond)}, opts...)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// createTopic creates a topic with CreateTopics.
func createTopic(t testing.TB, cl *kgo.Client, name string, partitions int32, cfg map[string]string) {
	t.Helper()
	req := kmsg.NewPtrCreateTopicsRequest()
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = name, partitions, 1
	for k, v := range cfg {
		c := kmsg.NewCreateTopicsRequestTopicConfig()
		c.Name, c.Value = k, kmsg.StringPtr(v)
		rt.Configs = append(rt.Configs, c)
	}
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(context.Background(), cl)
	if err != nil {
		t.Fatal(err)
	}
	if code := resp.Topics[0].ErrorCode; code != 0 {
		t.Fatalf("create topic %s: error code %d (%v)", name, code, resp.Topics[0].ErrorMessage)
	}
}

// produceSync produces recs and fails the test on any error.
func produceSync(t testing.TB, cl *kgo.Client, recs ...*kgo.Record) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// consumeN polls until n records have arrived or the time is up.
func consumeN(t testing.TB, cl *kgo.Client, n int, within time.Duration) []*kgo.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	var out []*kgo.Record
	for len(out) < n {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("consumed %d of %d records in %v", len(out), n, within)
		}
		fs.EachError(func(topic string, p int32, err error) {
			t.Fatalf("fetch %s-%d: %v", topic, p, err)
		})
		out = append(out, fs.Records()...)
	}
	return out
}

func value(i int) []byte {
	return []byte(fmt.Sprintf("value-%08d-%s", i, "the quick brown fox jumps over the lazy dog"))
}
