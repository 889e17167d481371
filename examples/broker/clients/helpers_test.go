package clients_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/examples/broker/broker"
	"github.com/tierlog/tierlog/objstore"
	"github.com/tierlog/tierlog/objstore/mem"
	"github.com/tierlog/tierlog/record"
)

// startBroker starts a broker on a free loopback port, closed with the
// test.
func startBroker(t *testing.T) *broker.Broker {
	t.Helper()
	return startBrokerWith(t, broker.Options{TopicConfig: map[string]string{"retention.ms": "-1"}})
}

// startDisklessBroker starts a broker whose topics are all diskless
// (diskless.enable=true by default, an in-memory bucket), closed with the
// test.
func startDisklessBroker(t *testing.T) *broker.Broker {
	t.Helper()
	return startBrokerWith(t, broker.Options{Store: objstore.New(mem.New(), "mem://clients", objstore.Options{}),
		TopicConfig:      map[string]string{"retention.ms": "-1", "diskless.enable": "true"},
		RemoteLogManager: map[string]string{"diskless.produce.commit.interval.ms": "10"}})
}

func startBrokerWith(t *testing.T, opts broker.Options) *broker.Broker {
	t.Helper()
	opts.Listen, opts.Dir, opts.InitialRebalanceDelay = "127.0.0.1:0", t.TempDir(), 50*time.Millisecond
	opts.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
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

// payload is record i's value: compressible, and distinct per record.
func payload(tag string, i int) []byte {
	return []byte(fmt.Sprintf("%s-%06d-%s", tag, i, bytes.Repeat([]byte("the quick brown fox "), 8)))
}

// codecs are the codecs every client test produces with.
var codecs = []struct {
	name  string
	codec record.Codec
}{
	{"none", record.None}, {"gzip", record.GZIP}, {"snappy", record.Snappy}, {"lz4", record.LZ4}, {"zstd", record.ZSTD},
}

// storedBatches reads every batch of topic-i from the broker's partition.
func storedBatches(t *testing.T, b *broker.Broker, topic string, i int32) []record.Batch {
	t.Helper()
	p := b.Partition(topic, i)
	if p == nil {
		t.Fatalf("no partition %s-%d", topic, i)
	}
	var out []record.Batch
	for off := p.Offsets().LogStart; off < p.Offsets().LogEnd; {
		recs, err := p.Read(context.Background(), off, backend.ReadOptions{MaxBytes: 1 << 20, MinOneBatch: true})
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		_, err = recs.WriteTo(&buf)
		recs.Close()
		if err != nil {
			t.Fatal(err)
		}
		if buf.Len() == 0 {
			t.Fatalf("%s-%d: read at %d returned nothing", topic, i, off)
		}
		for rest := buf.Bytes(); len(rest) > 0; {
			bt, err := record.Parse(rest)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, bt)
			off, rest = bt.NextOffset(), rest[len(bt):]
		}
	}
	return out
}

// checkCodec fails the test unless every batch of topic-0 has codec want.
func checkCodec(t *testing.T, b *broker.Broker, topic string, want record.Codec) {
	t.Helper()
	batches := storedBatches(t, b, topic, 0)
	if len(batches) == 0 {
		t.Fatalf("%s: no batches stored", topic)
	}
	for _, bt := range batches {
		if bt.Codec() != want {
			t.Fatalf("%s: batch at %d stored with codec %d, want %d", topic, bt.BaseOffset(), bt.Codec(), want)
		}
	}
}

// seen collects the values a consumer group's members consume.
type seen struct {
	mu     sync.Mutex
	values map[string]int
	by     map[string]map[int32]bool // member: partitions it consumed from
}

func newSeen() *seen { return &seen{values: map[string]int{}, by: map[string]map[int32]bool{}} }

func (s *seen) add(member string, partition int32, v []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.values[string(v)]++
	if s.by[member] == nil {
		s.by[member] = map[int32]bool{}
	}
	s.by[member][partition] = true
}

// has reports whether every value of tag 0..n-1 was seen, and how many
// members consumed.
func (s *seen) has(tag string, n int) (bool, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range n {
		if s.values[string(payload(tag, i))] == 0 {
			return false, len(s.by)
		}
	}
	return true, len(s.by)
}

func (s *seen) partitionsOf(member string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.by[member])
}

// waitFor polls cond until it holds, failing the test after within (a
// bound on a hung run, not a measure of speed).
func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, within)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
