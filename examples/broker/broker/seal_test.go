package broker_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tierlog/tierlog/objstore"
	"github.com/tierlog/tierlog/objstore/mem"
	"github.com/tierlog/tierlog/objstore/seal"
)

// TestSealedTopicThroughTheBroker: a broker whose store seals only the
// topics that ask (seal=topics) takes remote.storage.seal.enable=true in
// CreateTopics: that topic's objects in the bucket are sealed and hold
// none of its values, another topic's are plaintext, and kgo consumes
// both back from the bucket. A broker with no key ring refuses to create
// such a topic (INVALID_CONFIG, naming the key).
func TestSealedTopicThroughTheBroker(t *testing.T) {
	line, err := seal.NewKey("k1")
	if err != nil {
		t.Fatal(err)
	}
	ring, err := seal.ParseKeyFile("test", strings.NewReader(line+"\nactive k1\n"))
	if err != nil {
		t.Fatal(err)
	}
	inner := mem.New()
	sd, err := seal.New(inner, ring, seal.Options{Selective: true})
	if err != nil {
		t.Fatal(err)
	}
	b := startBroker(t, tieredOptions(t.TempDir(), objstore.New(sd, "mem://sealed?seal=topics", objstore.Options{})))
	admin := newClient(t, b.Addr())
	secret := tieredTopic(16 << 10)
	secret["remote.storage.seal.enable"] = "true"
	createTopic(t, admin, "secrets", 1, secret)
	createTopic(t, admin, "public", 1, tieredTopic(16<<10))
	const n = 2000
	valueOf := func(topic string, i int) []byte {
		return []byte(fmt.Sprintf("%s-value-%06d-%s", topic, i, strings.Repeat("v", 64)))
	}
	for _, topic := range []string{"secrets", "public"} {
		prod := newClient(t, b.Addr(), kgo.DefaultProduceTopic(topic), kgo.ProducerBatchMaxBytes(4<<10))
		recs := make([]*kgo.Record, n)
		for i := range recs {
			recs[i] = &kgo.Record{Value: valueOf(topic, i)}
		}
		produceSync(t, prod, recs...)
		waitOffloaded(t, b, topic, 0)
	}
	raw := objstore.New(inner, "raw", objstore.Options{})
	counts := map[string]int{}
	if err := raw.List(context.Background(), "broker/", func(o objstore.ObjectInfo) bool {
		data, err := raw.ReadAll(context.Background(), o.Key, 0, -1)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(data, []byte("secrets-value-")) {
			t.Errorf("%s holds a sealed topic's value", o.Key)
		}
		switch {
		case strings.HasPrefix(o.Key, "broker/secrets-0/") && !seal.LooksSealed(data):
			t.Errorf("%s is not sealed", o.Key)
		case strings.HasPrefix(o.Key, "broker/public-0/") && seal.LooksSealed(data):
			t.Errorf("%s is sealed", o.Key)
		case strings.HasPrefix(o.Key, "broker/public-0/") && bytes.Contains(data, []byte("public-value-")):
			counts["public values"]++
		}
		counts[strings.Split(o.Key, "/")[1]]++
		return true
	}); err != nil {
		t.Fatal(err)
	}
	if counts["secrets-0"] == 0 || counts["public values"] == 0 {
		t.Fatalf("objects in the bucket: %v: the test tests nothing", counts)
	}
	for _, topic := range []string{"secrets", "public"} {
		cons := newClient(t, b.Addr(), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
		got := consumeN(t, cons, n, time.Minute)
		if len(got) != n {
			t.Fatalf("%s: %d records consumed, want %d", topic, len(got), n)
		}
		for i, r := range got {
			if !bytes.Equal(r.Value, valueOf(topic, i)) {
				t.Fatalf("%s: record %d is %q", topic, i, r.Value)
			}
		}
	}

	plain := startBroker(t, tieredOptions(t.TempDir(), objstore.New(mem.New(), "mem://plain", objstore.Options{})))
	req := kmsg.NewPtrCreateTopicsRequest()
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = "secrets", 1, 1
	for k, v := range secret {
		c := kmsg.NewCreateTopicsRequestTopicConfig()
		c.Name, c.Value = k, kmsg.StringPtr(v)
		rt.Configs = append(rt.Configs, c)
	}
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(context.Background(), newClient(t, plain.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	msg := ""
	if m := resp.Topics[0].ErrorMessage; m != nil {
		msg = *m
	}
	if code := resp.Topics[0].ErrorCode; code != 40 || !strings.Contains(msg, "remote.storage.seal.enable") { // INVALID_CONFIG
		t.Fatalf("a sealed topic on a broker with no key ring: error code %d %q, want 40 naming the key", code, msg)
	}
	// Nor may a local topic be altered to one (it would take the change
	// now and fail to open at the next start), nor, on a broker with no
	// bucket at all, to a tiered or a sealed one.
	pcl := newClient(t, plain.Addr())
	createTopic(t, pcl, "local", 1, map[string]string{})
	if code := alterTopic(t, pcl, "local", "remote.storage.enable", "remote.storage.seal.enable"); code != 40 {
		t.Fatalf("altering a local topic to a sealed one on a broker with no key ring: error code %d, want INVALID_CONFIG", code)
	}
	dir := t.TempDir()
	bare := startBroker(t, testOptions(dir))
	bcl := newClient(t, bare.Addr())
	createTopic(t, bcl, "local", 1, map[string]string{})
	for _, k := range []string{"remote.storage.seal.enable", "remote.storage.enable"} {
		if code := alterTopic(t, bcl, "local", k); code != 40 {
			t.Fatalf("%s=true on a broker with no bucket: error code %d, want INVALID_CONFIG", k, code)
		}
	}
	if err := bare.Close(); err != nil {
		t.Fatal(err)
	}
	startBroker(t, testOptions(dir)) // it starts again
}

// alterTopic sets each of keys to true on topic with
// IncrementalAlterConfigs and returns the error code.
func alterTopic(t *testing.T, cl *kgo.Client, topic string, keys ...string) int16 {
	t.Helper()
	alter := kmsg.NewPtrIncrementalAlterConfigsRequest()
	rr := kmsg.NewIncrementalAlterConfigsRequestResource()
	rr.ResourceType, rr.ResourceName = kmsg.ConfigResourceTypeTopic, topic
	for _, k := range keys {
		c := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
		c.Name, c.Value, c.Op = k, kmsg.StringPtr("true"), kmsg.IncrementalAlterConfigOpSet
		rr.Configs = append(rr.Configs, c)
	}
	alter.Resources = append(alter.Resources, rr)
	resp, err := alter.RequestWith(context.Background(), cl)
	if err != nil {
		t.Fatal(err)
	}
	return resp.Resources[0].ErrorCode
}
