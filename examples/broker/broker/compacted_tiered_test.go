package broker_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tierlog/tierlog/tiered"
)

// TestCompactedTieredTopic: a compacted tiered topic served to kgo. Its
// segments leave the disk as soon as the bucket holds them, and the
// bucket's cleaner cleans them there in rounds, while a consumer group
// commits its offsets to __consumer_offsets (compacted and local, as
// ever). After several rounds a consumer reading from the start gets
// each key's latest value, every record it reads is one produced at that
// offset, and fewer records than were produced. The same for a
// compacted diskless topic, whose records reach the bucket in WAL objects
// first.
func TestCompactedTieredTopic(t *testing.T) {
	for _, diskless := range []bool{false, true} {
		t.Run(map[bool]string{false: "tiered", true: "diskless"}[diskless], func(t *testing.T) { compactedTieredTopic(t, diskless) })
	}
}

func compactedTieredTopic(t *testing.T, diskless bool) {
	opts := tieredOptions(t.TempDir(), s3Store(t))
	cfg := tieredTopic(4 << 10)
	if diskless {
		opts.RemoteLogManager["diskless.produce.commit.interval.ms"] = "20"
		cfg["diskless.enable"] = "true"
	}
	b := startBroker(t, opts)
	admin := newClient(t, b.Addr())
	const topic, keys, rounds, perRound = "changelog", 50, 6, 400
	cfg["cleanup.policy"] = "compact"
	cfg["min.cleanable.dirty.ratio"] = "0.1"
	createTopic(t, admin, topic, 1, cfg)
	prod := newClient(t, b.Addr(), kgo.DefaultProduceTopic(topic), kgo.ProducerBatchMaxBytes(1<<10))
	tp, ok := b.Partition(topic, 0).(*tiered.Partition)
	if !ok || tp.Diskless() != diskless {
		t.Fatalf("%s-0 is a %T, not a tiered partition (diskless: %v)", topic, b.Partition(topic, 0), diskless)
	}
	type produced struct{ key, value string }
	all := map[int64]produced{}
	latest := map[string]int64{}
	n := 0
	for round := range rounds {
		recs := make([]*kgo.Record, perRound)
		for i := range recs {
			k := fmt.Sprintf("key-%02d", (n+i*7)%keys)
			recs[i] = &kgo.Record{Key: []byte(k), Value: []byte(fmt.Sprintf("%s=round-%d-%d", k, round, n+i))}
		}
		n += perRound
		produceSync(t, prod, recs...)
		for _, r := range recs {
			all[r.Offset] = produced{string(r.Key), string(r.Value)}
			latest[string(r.Key)] = r.Offset
		}
		// The round's segments into the bucket, and a cleaning of them.
		want := tp.Metrics().CompactRounds.Load() + 1
		waitOffloaded(t, b, topic, 0)
		deadline := time.Now().Add(time.Minute)
		for tp.Metrics().CompactRounds.Load() < want {
			if time.Now().After(deadline) {
				t.Fatalf("round %d: the bucket's cleaner ran no round in a minute (errors %d)", round, tp.Metrics().CompactErrors.Load())
			}
			time.Sleep(20 * time.Millisecond)
		}
		// A group's commit lands in __consumer_offsets, which stays local
		// and is cleaned by the local cleaner.
		g := newClient(t, b.Addr(), kgo.ConsumerGroup("readers"), kgo.ConsumeTopics(topic), kgo.DisableAutoCommit(),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
		consumeN(t, g, 1, time.Minute)
		if err := g.CommitUncommittedOffsets(context.Background()); err != nil {
			t.Fatal(err)
		}
		g.Close()
	}
	if tp.Metrics().CompactSegmentsReplaced.Load() == 0 {
		t.Fatal("no bucket segment was replaced")
	}
	last := int64(n - 1)
	cons := newClient(t, b.Addr(), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	seen := map[int64]bool{}
	prev := int64(-1)
	for !seen[last] {
		fs := cons.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %d records, not up to offset %d, in 2m", len(seen), last)
		}
		fs.EachError(func(topic string, p int32, err error) { t.Fatalf("fetch %s-%d: %v", topic, p, err) })
		for _, r := range fs.Records() {
			w, ok := all[r.Offset]
			if !ok || w.key != string(r.Key) || w.value != string(r.Value) || r.Offset <= prev {
				t.Fatalf("offset %d (after %d) reads %q=%q; produced there: %+v (%v)", r.Offset, prev, r.Key, r.Value, w, ok)
			}
			prev = r.Offset
			seen[r.Offset] = true
		}
	}
	for k, off := range latest {
		if !seen[off] {
			t.Fatalf("key %s's latest value (offset %d, %q) was not read", k, off, all[off].value)
		}
	}
	if len(seen) >= n {
		t.Fatalf("read %d records of %d produced: nothing was cleaned", len(seen), n)
	}
	t.Logf("%d records produced over %d keys, %d read back; %d cleaner rounds replaced %d bucket segments", n, keys, len(seen),
		tp.Metrics().CompactRounds.Load(), tp.Metrics().CompactSegmentsReplaced.Load())
}
