package broker_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tierlog/tierlog/objstore"
	"github.com/tierlog/tierlog/objstore/fs"
	"github.com/tierlog/tierlog/objstore/mem"
	"github.com/tierlog/tierlog/testing/crashchild"
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

// disklessBrokerChild is a broker over the directory args[0], on args[1],
// with its bucket a directory (args[2]: file://), until it is killed.
func disklessBrokerChild(args []string) int {
	d, err := fs.Open(args[2])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	opts := tieredOptions(args[0], objstore.New(d, "file://"+args[2], objstore.Options{}))
	opts.Listen = args[1]
	opts.RemoteLogManager["diskless.produce.commit.interval.ms"] = "20"
	return serveUntilKilled(opts)
}

// TestDisklessKillLoop SIGKILLs the broker (a child process) again and
// again while kgo's idempotent producer produces with acks=all to a
// diskless topic, and on every other restart removes the broker's whole
// log directory first: every acknowledged record is read back exactly
// once, in the order it was produced.
func TestDisklessKillLoop(t *testing.T) {
	dir, addr, bucket := t.TempDir(), freePort(t), t.TempDir()
	start := func() *crashchild.Child { return startRole(t, "diskless-broker", dir, addr, bucket) }
	child := start()
	createTopic(t, newClient(t, addr), "events", 1, disklessTopic())
	prod := newClient(t, addr, kgo.DefaultProduceTopic("events"), kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.RecordDeliveryTimeout(time.Minute), kgo.ProducerLinger(time.Millisecond))
	pr := startProducing(prod, func(i int) {
		if i%64 == 63 {
			time.Sleep(time.Millisecond) // leave the broker some air
		}
	})
	ackedNow := pr.count
	const kills = 6
	for k := range kills {
		want := ackedNow() + 300
		deadline := time.Now().Add(time.Minute)
		for ackedNow() < want {
			if time.Now().After(deadline) {
				t.Fatalf("kill %d: %d records acknowledged in a minute, want %d", k, ackedNow(), want)
			}
			time.Sleep(time.Millisecond)
		}
		child.Kill()
		if exit := child.Wait(); !exit.Killed() {
			t.Fatalf("kill %d: the child broker was not killed: %v", k, exit)
		}
		if k%2 == 1 {
			if err := os.RemoveAll(filepath.Join(dir, "logs")); err != nil {
				t.Fatal(err)
			}
		}
		child = start()
	}
	sent := pr.finish()
	prod.Close()
	n := pr.count()
	cons := newClient(t, addr, kgo.ConsumeTopics("events"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	seen := map[int]bool{}
	last := -1
	for _, r := range consumeN(t, cons, n, 2*time.Minute) {
		v, err := strconv.Atoi(string(r.Value))
		if err != nil {
			t.Fatalf("offset %d holds %q", r.Offset, r.Value)
		}
		if seen[v] {
			t.Fatalf("record %d read twice (again at offset %d)", v, r.Offset)
		}
		if v < last {
			t.Fatalf("record %d at offset %d after record %d: out of order", v, r.Offset, last)
		}
		seen[v], last = true, v
	}
	missing := 0
	for v := range pr.acked {
		if !seen[v] {
			missing++
		}
	}
	if missing > 0 {
		t.Fatalf("%d of %d acknowledged records missing after %d SIGKILLs (%d with the log directory removed)", missing, n, kills, kills/2)
	}
	t.Logf("%d records sent, %d acknowledged, every one read back once and in order after %d SIGKILLs, %d of them with the log directory removed", sent, n, kills, kills/2)
}

// TestDisklessConsumerGroup: a consumer group over a diskless topic of
// four partitions: every record consumed once, a member leaving and the
// other taking over, the committed offsets adding up.
func TestDisklessConsumerGroup(t *testing.T) {
	opts := tieredOptions(t.TempDir(), objstore.New(mem.New(), "mem://group", objstore.Options{}))
	opts.RemoteLogManager["diskless.produce.commit.interval.ms"] = "10"
	b := startBroker(t, opts)
	prod := newClient(t, b.Addr())
	createTopic(t, prod, "grp", 4, disklessTopic())
	produceTo(t, prod, "grp", 0, 2000)
	s := newSeen(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	m0, done0 := member(t, b.Addr(), "m0", s, ctx)
	m1, done1 := member(t, b.Addr(), "m1", s, ctx)
	s.waitFor(2000, time.Minute)
	m0.Close()
	produceTo(t, prod, "grp", 2000, 1000)
	s.waitFor(3000, time.Minute)
	cancel()
	<-done0
	<-done1
	if err := m1.CommitUncommittedOffsets(context.Background()); err != nil {
		t.Logf("final commit: %v", err)
	}
	m1.Close()
	checkCommitted(t, newClient(t, b.Addr()), 3000)
}
