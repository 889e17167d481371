package broker_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tierlog/tierlog/examples/broker/broker"
	"github.com/tierlog/tierlog/local"
	"github.com/tierlog/tierlog/record"
)

// compactTopicConfig is the topic: many small segments, and a
// cleaner that cleans as soon as a little is dirty.
var compactTopicConfig = map[string]string{"cleanup.policy": "compact", "segment.bytes": "65536",
	"min.cleanable.dirty.ratio": "0.01"}

// TestCompactedTopicStaysReadable produces keyed records in rounds over a
// small key set into a topic of 64 KiB segments, lets the cleaner clean
// after each round (so later rounds clean segments already cleaned, whose
// batches are all superseded), and reads the topic from the start: every
// fetch below the high watermark returns records (an empty batch only
// for a producer's last batch), and a consumer reads every key's latest
// value. The cleaner used to keep each group's last batch, emptied,
// whatever its producer: a log of segments each holding one empty batch,
// fetches that returned nothing but that batch, and a consumer
// (librdkafka) that stopped with "Message at offset ... might be too large
// to fetch".
func TestCompactedTopicStaysReadable(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []kgo.Opt
	}{
		{"idempotent", nil},
		{"no-producer-id", []kgo.Opt{kgo.DisableIdempotentWrite()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			opts := testOptions(dir)
			opts.CleanerBackoff = 20 * time.Millisecond
			b := startBroker(t, opts)
			topic := "compacted"
			admin := newClient(t, b.Addr())
			createTopic(t, admin, topic, 1, compactTopicConfig)
			prod := newClient(t, b.Addr(), append([]kgo.Opt{kgo.DefaultProduceTopic(topic), kgo.ProducerBatchMaxBytes(16000),
				kgo.ProducerBatchCompression(kgo.NoCompression()), kgo.ProducerLinger(5 * time.Millisecond)}, tc.opts...)...)
			const rounds, perRound, keys = 5, 4000, 400
			latest := map[string]string{}
			for round := range rounds {
				recs := make([]*kgo.Record, perRound)
				for i := range recs {
					k := fmt.Sprintf("key-%03d", i%keys)
					v := fmt.Sprintf("round-%d-record-%04d-%s", round, i, strings.Repeat("v", 64))
					recs[i] = &kgo.Record{Key: []byte(k), Value: []byte(v)}
					latest[k] = v
				}
				produceSync(t, prod, recs...)
				end := int64((round + 1) * perRound)
				waitCleaned(t, b, filepath.Join(dir, "logs", topic+"-0"))
				fetchWalk(t, admin, topic, end)
				consumeLatest(t, b.Addr(), topic, latest, end)
			}
		})
	}
}

// waitCleaned waits until the broker's background cleaner has cleaned
// the partition in dir (topic-0) up to its active segment, as its
// cleaner-offset-checkpoint says.
func waitCleaned(t *testing.T, b *broker.Broker, dir string) {
	t.Helper()
	tp, err := local.ParsePartitionDirName(filepath.Base(dir))
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		active := activeBase(t, dir)
		st := b.Cleaner().Stats()
		if st.LastError != nil {
			t.Fatalf("the cleaner failed: %v", st.LastError)
		}
		cp, err := local.ReadOffsetCheckpoint(filepath.Join(filepath.Dir(dir), local.CleanerCheckpoint))
		if err != nil {
			t.Fatal(err)
		}
		if cp[tp] == active && active > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the cleaner did not reach the active segment %d of %s in a minute (its checkpoint: %d): %+v", active, dir, cp[tp], st)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// activeBase is the base offset of the partition's last segment.
func activeBase(t *testing.T, dir string) int64 {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var bases []int64
	for _, e := range ents {
		if name, ok := strings.CutSuffix(e.Name(), ".log"); ok {
			n, err := strconv.ParseInt(name, 10, 64)
			if err != nil {
				t.Fatalf("%s: %v", e.Name(), err)
			}
			bases = append(bases, n)
		}
	}
	if len(bases) == 0 {
		t.Fatalf("no segment in %s", dir)
	}
	return slices.Max(bases)
}

// consumeLatest consumes topic-0 from the start with a new client up to
// offset end (exclusive) and checks that no fetch fails and that each key
// reads its latest value last.
func consumeLatest(t *testing.T, addr, topic string, latest map[string]string, end int64) {
	t.Helper()
	cl := newClient(t, addr, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	got := map[string]string{}
	next := int64(-1)
	for next < end-1 {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("consumed up to offset %d of %d in a minute", next, end)
		}
		fs.EachError(func(topic string, p int32, err error) {
			t.Fatalf("fetch %s-%d after offset %d: %v", topic, p, next, err)
		})
		for _, r := range fs.Records() {
			if r.Offset <= next {
				t.Fatalf("offset %d after %d", r.Offset, next)
			}
			next = r.Offset
			got[string(r.Key)] = string(r.Value)
		}
	}
	for k, v := range latest {
		if got[k] != v {
			t.Fatalf("key %s reads %q, its latest value is %q", k, got[k], v)
		}
	}
}

// fetchWalk fetches topic-0 from offset 0 to end with raw Fetch requests:
// each answer must hold a batch with records, and a batch without records
// may only be the last batch in the log of a producer with an id.
func fetchWalk(t *testing.T, cl *kgo.Client, topic string, end int64) {
	t.Helper()
	lastOf := map[int64]int64{} // producer id -> last offset of its latest batch seen
	empty := map[int64]int64{}  // producer id -> last offset of an empty batch of it
	for off := int64(0); off < end; {
		req := kmsg.NewPtrFetchRequest()
		req.ReplicaID, req.MaxBytes, req.MinBytes = -1, 1<<20, 1
		rt := kmsg.NewFetchRequestTopic()
		rt.Topic = topic
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.Partition, rp.FetchOffset, rp.PartitionMaxBytes, rp.CurrentLeaderEpoch, rp.LogStartOffset = 0, off, 1<<20, -1, -1
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		resp, err := cl.Broker(broker.NodeID).Request(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		p := resp.(*kmsg.FetchResponse).Topics[0].Partitions[0]
		if p.ErrorCode != 0 {
			t.Fatalf("fetch at %d: error code %d", off, p.ErrorCode)
		}
		data, records := p.RecordBatches, 0
		if len(data) == 0 {
			t.Fatalf("fetch at %d below the high watermark %d returned nothing", off, end)
		}
		for len(data) > 0 {
			b, err := record.Parse(data)
			if err != nil {
				t.Fatalf("fetch at %d: %v", off, err)
			}
			if n := b.NumRecords(); n > 0 {
				records += int(n)
			} else if b.ProducerID() < 0 {
				t.Fatalf("fetch at %d: an empty batch %d..%d without a producer id", off, b.BaseOffset(), b.LastOffset())
			} else {
				empty[b.ProducerID()] = b.LastOffset()
			}
			if b.ProducerID() >= 0 {
				lastOf[b.ProducerID()] = b.LastOffset()
			}
			off = b.NextOffset()
			data = data[b.Size():]
		}
		if records == 0 {
			t.Fatalf("fetch up to %d: %d bytes of batches without a record", off, len(p.RecordBatches))
		}
	}
	for pid, e := range empty {
		if lastOf[pid] != e {
			t.Fatalf("producer %d: an empty batch ending at %d, not its last batch (which ends at %d)", pid, e, lastOf[pid])
		}
	}
}
