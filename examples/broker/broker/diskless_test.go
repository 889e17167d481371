package broker_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tierlog/tierlog/objstore"
	"github.com/tierlog/tierlog/objstore/mem"
	"github.com/tierlog/tierlog/tiered"
)

// disklessTopic is a diskless topic's config (small segments, so they
// consolidate into the bucket while the test runs).
func disklessTopic() map[string]string {
	return map[string]string{"diskless.enable": "true", "segment.bytes": "65536", "local.retention.ms": "0",
		"retention.ms": "-1", "file.delete.delay.ms": "0"}
}

// TestDisklessTopic: a diskless topic through the broker with kgo, every
// codec, acks=all (idempotent) and acks=1: every record is consumed back
// byte for byte; then the broker stops, its whole log directory is
// removed, and the restarted broker, with only the bucket, serves every
// acknowledged record again, once, in order.
func TestDisklessTopic(t *testing.T) {
	store := objstore.New(mem.New(), "mem://diskless", objstore.Options{})
	dir := t.TempDir()
	opts := tieredOptions(dir, store)
	opts.RemoteLogManager["diskless.produce.commit.interval.ms"] = "20"
	b := startBroker(t, opts)
	admin := newClient(t, b.Addr())
	const topic = "events"
	createTopic(t, admin, topic, 1, disklessTopic())
	if p, ok := b.Partition(topic, 0).(*tiered.Partition); !ok || !p.Diskless() {
		t.Fatalf("the topic's partition is a %T, not a diskless tiered partition", b.Partition(topic, 0))
	}
	per := recordsPerCase(4000) / 5
	var want []*kgo.Record
	i := 0
	for _, c := range []struct {
		name  string
		codec kgo.CompressionCodec
		acks1 bool
	}{{"none", kgo.NoCompression(), false}, {"gzip", kgo.GzipCompression(), true}, {"snappy", kgo.SnappyCompression(), false},
		{"lz4", kgo.Lz4Compression(), true}, {"zstd", kgo.ZstdCompression(), false}} {
		copts := []kgo.Opt{kgo.ProducerBatchCompression(c.codec), kgo.DefaultProduceTopic(topic)}
		if c.acks1 {
			copts = append(copts, kgo.RequiredAcks(kgo.LeaderAck()), kgo.DisableIdempotentWrite())
		}
		prod := newClient(t, b.Addr(), copts...)
		var recs []*kgo.Record
		for range per {
			recs = append(recs, &kgo.Record{Key: []byte(fmt.Sprintf("%s-%d", c.name, i)), Value: value(i)})
			i++
		}
		produceSync(t, prod, recs...)
		// Acknowledged means in the bucket: the high watermark, which
		// answered the produce, is at most the durable end.
		if o := b.Partition(topic, 0).Offsets(); o.HighWatermark < int64(i) {
			t.Fatalf("%s: after %d acknowledged records the high watermark is %d", c.name, i, o.HighWatermark)
		}
		want = append(want, recs...)
	}
	check := func(what string) {
		t.Helper()
		cons := newClient(t, b.Addr(), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
		got := consumeN(t, cons, len(want), time.Minute)
		if len(got) != len(want) {
			t.Fatalf("%s: %d records, want %d", what, len(got), len(want))
		}
		for j, r := range got {
			if r.Offset != int64(j) || !bytes.Equal(r.Key, want[j].Key) || !bytes.Equal(r.Value, want[j].Value) {
				t.Fatalf("%s: record %d is offset %d key %q, want offset %d key %q", what, j, r.Offset, r.Key, j, want[j].Key)
			}
		}
	}
	check("before the restart")

	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(dir, "logs")); err != nil {
		t.Fatal(err)
	}
	b = startBroker(t, opts)
	check("after the log directory was removed")
}
