package broker_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tierlog/tierlog/examples/broker/broker"
	"github.com/tierlog/tierlog/record"
)

// TestCodecs produces records in each codec with kgo's idempotent
// producer (its default) and consumes them back: every key, value, header
// and timestamp as produced, in order, once.
func TestCodecs(t *testing.T) {
	n := recordsPerCase(100_000)
	b := startBroker(t, testOptions(t.TempDir()))
	for _, c := range []struct {
		name  string
		codec kgo.CompressionCodec
	}{{"none", kgo.NoCompression()}, {"gzip", kgo.GzipCompression()}, {"snappy", kgo.SnappyCompression()},
		{"lz4", kgo.Lz4Compression()}, {"zstd", kgo.ZstdCompression()}} {
		t.Run(c.name, func(t *testing.T) {
			topic := "codec-" + c.name
			prod := newClient(t, b.Addr(), kgo.ProducerBatchCompression(c.codec), kgo.DefaultProduceTopic(topic))
			base := time.UnixMilli(1_700_000_000_000)
			recs := make([]*kgo.Record, n)
			for i := range recs {
				recs[i] = &kgo.Record{Key: []byte(fmt.Sprintf("key-%d", i%100)), Value: value(i),
					Headers: []kgo.RecordHeader{{Key: "i", Value: []byte(fmt.Sprint(i))}}, Timestamp: base.Add(time.Duration(i) * time.Millisecond)}
			}
			produceSync(t, prod, recs...)
			cons := newClient(t, b.Addr(), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
			got := consumeN(t, cons, n, time.Minute)
			if len(got) != n {
				t.Fatalf("consumed %d records, produced %d", len(got), n)
			}
			for i, r := range got {
				w := recs[i]
				if r.Offset != int64(i) || !bytes.Equal(r.Key, w.Key) || !bytes.Equal(r.Value, w.Value) ||
					!r.Timestamp.Equal(w.Timestamp) || len(r.Headers) != 1 || !bytes.Equal(r.Headers[0].Value, w.Headers[0].Value) {
					t.Fatalf("record %d: got offset %d key %q value %q ts %v, want key %q value %q ts %v",
						i, r.Offset, r.Key, r.Value, r.Timestamp, w.Key, w.Value, w.Timestamp)
				}
			}
		})
	}
}

// produceRaw sends one Produce of a single record (no producer id) to
// topic-0 with timeout, and returns the partition's answer. The request's
// acks are the client's (kgo sets them).
func produceRaw(t *testing.T, cl *kgo.Client, topic string, timeout time.Duration) kmsg.ProduceResponseTopicPartition {
	t.Helper()
	var bld record.Builder
	bld.Reset(record.NewBatchHeader())
	bld.Append(time.Now().UnixMilli(), nil, []byte("parked"), nil)
	batch, err := bld.Build()
	if err != nil {
		t.Fatal(err)
	}
	req := kmsg.NewPtrProduceRequest()
	req.TimeoutMillis = int32(timeout.Milliseconds())
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Partition, rp.Records = 0, batch
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := cl.Broker(broker.NodeID).Request(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	return resp.(*kmsg.ProduceResponse).Topics[0].Partitions[0]
}

// TestProduceWaitsForHighWatermark: an acks=-1 produce is parked in the
// purgatory until the high watermark passes its batch. With the high
// watermark held (a replica that stopped fetching), it waits; once the
// high watermark moves, the partition's watcher completes it; one whose
// timeout passes first is answered REQUEST_TIMED_OUT. acks=1 answers after
// the append alone.
func TestProduceWaitsForHighWatermark(t *testing.T) {
	b := startBroker(t, testOptions(t.TempDir()))
	cl := newClient(t, b.Addr())
	createTopic(t, cl, "hw", 1, nil)
	p := b.Partition("hw", 0)

	broker.HoldHighWatermark(b, "hw", 0, true)
	answered := make(chan kmsg.ProduceResponseTopicPartition, 1)
	go func() { answered <- produceRaw(t, cl, "hw", 20*time.Second) }()
	deadline := time.Now().Add(10 * time.Second)
	for p.Offsets().LogEnd != 1 {
		if time.Now().After(deadline) {
			t.Fatal("the produce was not appended")
		}
		time.Sleep(time.Millisecond)
	}
	select {
	case pr := <-answered:
		t.Fatalf("answered (error %d) with the high watermark at %d, below the batch", pr.ErrorCode, p.Offsets().HighWatermark)
	case <-time.After(300 * time.Millisecond):
	}
	released := time.Now()
	broker.HoldHighWatermark(b, "hw", 0, false)
	select {
	case pr := <-answered:
		if pr.ErrorCode != 0 || pr.BaseOffset != 0 {
			t.Fatalf("after the high watermark moved: error %d, base offset %d; want 0, 0", pr.ErrorCode, pr.BaseOffset)
		}
		t.Logf("answered %v after the high watermark moved", time.Since(released))
	case <-time.After(5 * time.Second):
		t.Fatal("the high watermark moved past the batch, and the parked produce stayed parked")
	}
	if hw := p.Offsets().HighWatermark; hw != 1 {
		t.Fatalf("high watermark %d, want 1", hw)
	}

	broker.HoldHighWatermark(b, "hw", 0, true)
	start := time.Now()
	if pr := produceRaw(t, cl, "hw", 300*time.Millisecond); pr.ErrorCode != kerr.RequestTimedOut.Code {
		t.Fatalf("held high watermark, 300 ms timeout: error %d, want REQUEST_TIMED_OUT (%d)", pr.ErrorCode, kerr.RequestTimedOut.Code)
	}
	if el := time.Since(start); el < 300*time.Millisecond {
		t.Fatalf("REQUEST_TIMED_OUT after %v, before the 300 ms timeout", el)
	}
	leaderAcks := newClient(t, b.Addr(), kgo.RequiredAcks(kgo.LeaderAck()), kgo.DisableIdempotentWrite())
	if pr := produceRaw(t, leaderAcks, "hw", time.Second); pr.ErrorCode != 0 || pr.BaseOffset != 2 {
		t.Fatalf("acks=1 with the high watermark held: error %d, base offset %d; want 0, 2", pr.ErrorCode, pr.BaseOffset)
	}
	if o := p.Offsets(); o.HighWatermark != 1 || o.LogEnd != 3 {
		t.Fatalf("offsets %+v, want the high watermark held at 1 below a log end of 3", o)
	}
	broker.HoldHighWatermark(b, "hw", 0, false)
	if hw := p.Offsets().HighWatermark; hw != 3 {
		t.Fatalf("high watermark %d after the release, want 3", hw)
	}
}
