package broker_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tierlog/tierlog/examples/broker/broker"
)

// seen records which (partition, offset) pairs a group consumed and
// fails on a second delivery.
type seen struct {
	mu   sync.Mutex
	t    *testing.T
	at   map[[2]int64]string
	cond *sync.Cond
}

func newSeen(t *testing.T) *seen {
	s := &seen{t: t, at: map[[2]int64]string{}}
	s.cond = sync.NewCond(&s.mu)
	return s
}

func (s *seen) add(member string, r *kgo.Record) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := [2]int64{int64(r.Partition), r.Offset}
	if prev, ok := s.at[k]; ok {
		s.t.Errorf("partition %d offset %d consumed twice (by %s and %s)", r.Partition, r.Offset, prev, member)
	}
	s.at[k] = member
	s.cond.Broadcast()
}

func (s *seen) waitFor(n int, within time.Duration) {
	s.t.Helper()
	deadline := time.Now().Add(within)
	go func() { time.Sleep(within); s.cond.Broadcast() }()
	s.mu.Lock()
	defer s.mu.Unlock()
	for len(s.at) < n {
		if time.Now().After(deadline) {
			s.t.Fatalf("the group consumed %d of %d records in %v", len(s.at), n, within)
		}
		s.cond.Wait()
	}
}

// member consumes in group g until its context ends, committing after
// each poll with rebalances blocked meanwhile: each record is processed
// once across rebalances.
func member(t *testing.T, addr, name string, s *seen, ctx context.Context) (*kgo.Client, chan struct{}) {
	cl := newClient(t, addr, kgo.ConsumerGroup("g"), kgo.ConsumeTopics("grp"), kgo.DisableAutoCommit(),
		kgo.BlockRebalanceOnPoll(), kgo.HeartbeatInterval(100*time.Millisecond), kgo.SessionTimeout(3*time.Second),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.ClientID(name))
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			fs := cl.PollFetches(ctx)
			for _, r := range fs.Records() {
				s.add(name, r)
			}
			if err := cl.CommitUncommittedOffsets(context.Background()); err != nil && ctx.Err() == nil {
				t.Logf("%s: commit: %v", name, err)
			}
			cl.AllowRebalance()
		}
	}()
	return cl, done
}

func produceTo(t *testing.T, cl *kgo.Client, topic string, from, n int) {
	recs := make([]*kgo.Record, n)
	for i := range recs {
		recs[i] = &kgo.Record{Topic: topic, Key: []byte(fmt.Sprint(from + i)), Value: value(from + i)}
	}
	produceSync(t, cl, recs...)
}

// TestConsumerGroup runs three kgo members over a 6-partition topic: every
// record is consumed once; a member leaves and the rest take over its
// partitions; after a broker restart a new member resumes from the
// committed offsets; __consumer_offsets is compacted by the cleaner and
// still answers OffsetFetch.
func TestConsumerGroup(t *testing.T) {
	dir := t.TempDir()
	opts := testOptions(dir)
	opts.OffsetsSegmentBytes = 16 << 10
	opts.CleanerBackoff = 100 * time.Millisecond
	b, err := broker.Start(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { b.Close() }()
	prod := newClient(t, b.Addr())
	createTopic(t, prod, "grp", 6, nil)
	produceTo(t, prod, "grp", 0, 3000)

	s := newSeen(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var members []*kgo.Client
	var dones []chan struct{}
	for i := range 3 {
		cl, done := member(t, b.Addr(), fmt.Sprintf("m%d", i), s, ctx)
		members, dones = append(members, cl), append(dones, done)
	}
	s.waitFor(3000, time.Minute)

	// One member leaves; the other two take its partitions.
	members[0].Close()
	produceTo(t, prod, "grp", 3000, 3000)
	s.waitFor(6000, time.Minute)
	cancel()
	for i, cl := range members[1:] {
		<-dones[i+1]
		if err := cl.CommitUncommittedOffsets(context.Background()); err != nil {
			t.Logf("final commit: %v", err)
		}
		cl.Close()
	}
	prod.Close()

	// A consumer committing periodically rewrites the same keys: the
	// cleaner compacts __consumer_offsets down to the latest of each.
	admin := newClient(t, b.Addr())
	recommit(t, admin, 300)
	deadline := time.Now().Add(30 * time.Second)
	for b.Cleaner().Stats().Removed == 0 {
		if time.Now().After(deadline) {
			ents, _ := os.ReadDir(filepath.Join(dir, "logs", "__consumer_offsets-0"))
			for _, e := range ents {
				fi, _ := e.Info()
				t.Logf("%s %d", e.Name(), fi.Size())
			}
			t.Fatalf("the cleaner removed nothing from %s in 30s: %+v", "__consumer_offsets", b.Cleaner().Stats())
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("cleaner: %d records removed in %d rounds", b.Cleaner().Stats().Removed, b.Cleaner().Stats().Rounds)

	// Restart on the same address: the committed offsets are reloaded
	// from the compacted topic.
	opts.Listen = b.Addr()
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if b, err = broker.Start(opts); err != nil {
		t.Fatal(err)
	}
	admin = newClient(t, b.Addr())
	checkCommitted(t, admin, 6000)
	produceTo(t, admin, "grp", 6000, 600)
	s2 := newSeen(t)
	ctx2, cancel2 := context.WithCancel(context.Background())
	cl, done := member(t, b.Addr(), "after-restart", s2, ctx2)
	s2.waitFor(600, time.Minute)
	cancel2()
	<-done
	cl.Close()
	for k := range s2.at {
		if s.at[k] != "" {
			t.Errorf("partition %d offset %d consumed again after the restart", k[0], k[1])
		}
	}
}

// checkCommitted asks OffsetFetch for group g and expects the offsets of
// topic grp to add up to total.
func checkCommitted(t *testing.T, cl *kgo.Client, total int64) {
	t.Helper()
	req := kmsg.NewPtrOffsetFetchRequest()
	req.Group = "g"
	resp, err := req.RequestWith(context.Background(), cl)
	if err != nil {
		t.Fatal(err)
	}
	if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
		t.Fatal(err)
	}
	sum := int64(0)
	for _, rt := range resp.Topics {
		for _, p := range rt.Partitions {
			if rt.Topic == "grp" {
				sum += p.Offset
			}
		}
	}
	if sum != total {
		t.Fatalf("committed offsets add up to %d, want %d", sum, total)
	}
}

// recommit commits group g's current offsets again n times, as the
// standalone commits of a tool would.
func recommit(t *testing.T, cl *kgo.Client, n int) {
	t.Helper()
	fetch := kmsg.NewPtrOffsetFetchRequest()
	fetch.Group = "g"
	cur, err := fetch.RequestWith(context.Background(), cl)
	if err != nil {
		t.Fatal(err)
	}
	req := kmsg.NewPtrOffsetCommitRequest()
	req.Group, req.Generation = "g", -1
	for _, rt := range cur.Topics {
		ct := kmsg.NewOffsetCommitRequestTopic()
		ct.Topic = rt.Topic
		for _, p := range rt.Partitions {
			cp := kmsg.NewOffsetCommitRequestTopicPartition()
			cp.Partition, cp.Offset, cp.LeaderEpoch = p.Partition, p.Offset, p.LeaderEpoch
			ct.Partitions = append(ct.Partitions, cp)
		}
		req.Topics = append(req.Topics, ct)
	}
	for range n {
		resp, err := req.RequestWith(context.Background(), cl)
		if err != nil {
			t.Fatal(err)
		}
		for _, rt := range resp.Topics {
			for _, p := range rt.Partitions {
				if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
					t.Fatalf("commit %s-%d: %v", rt.Topic, p.Partition, err)
				}
			}
		}
	}
}
