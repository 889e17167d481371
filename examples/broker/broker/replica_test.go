package broker_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tierlog/tierlog/examples/broker/broker"
	"github.com/tierlog/tierlog/objstore"
	"github.com/tierlog/tierlog/objstore/mem"
	"github.com/tierlog/tierlog/testing/objstoretest"
	"github.com/tierlog/tierlog/tiered"
)

// bucketEnd is the offset after the last one the bucket holds of p.
func bucketEnd(p *tiered.Partition) int64 {
	return p.Head().LastOffset() + 1
}

// TestReadReplicaToKgo: a broker started as a read replica of another
// broker's bucket (Options.ReadReplicaOf, the reference broker's
// --read-replica-of) finds its tiered topic, and serves kgo every record
// the origin offloaded, each value at its offset (each value names its
// record), none twice. The origin produces half the records, then the
// other half once the replica has served its first, offloading all the
// while: the replica is read as it follows new commits (its lag behind
// the origin's uploads is logged). A produce to it is refused, and it
// writes nothing to the bucket.
func TestReadReplicaToKgo(t *testing.T) {
	store := s3Store(t)
	origin := startBroker(t, tieredOptions(t.TempDir(), store))
	admin := newClient(t, origin.Addr())
	const topic = "orders"
	createTopic(t, admin, topic, 2, tieredTopic(16<<10))

	ropts := testOptions(t.TempDir())
	ro := &noWritesDriver{ReadOnly: objstoretest.ReadOnly{Driver: store.Driver()}} // the replica's writes fail, and are counted
	ropts.ReadReplicaOf, ropts.ReadReplicaPrefix = objstore.New(ro, "s3-replica", objstore.Options{}), "broker"
	ropts.RemoteLogManager = map[string]string{"remote.log.manager.task.interval.ms": "100"}
	ropts.ReplicaDiscoveryInterval = 100 * time.Millisecond
	replica := startBroker(t, ropts)

	// The origin produces (and offloads, every task interval) while the
	// replica is read; what it produced is recorded by partition and
	// offset.
	n := recordsPerCase(20_000)
	prod := newClient(t, origin.Addr(), kgo.DefaultProduceTopic(topic), kgo.ProducerBatchMaxBytes(4<<10))
	var mu sync.Mutex
	produced := map[int32]map[int64]string{0: {}, 1: {}}
	// Half the records, then the other half once the replica has served
	// its first: the origin produces and offloads while the replica is
	// read, whatever the machine's pace.
	done, firstRead := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; i < n; i += 500 {
			if i == n/2 {
				select {
				case <-firstRead:
				case <-time.After(2 * time.Minute):
					t.Error("the replica served nothing while the origin produced")
					return
				}
			}
			recs := make([]*kgo.Record, 0, 500)
			for j := i; j < min(i+500, n); j++ {
				recs = append(recs, &kgo.Record{Key: fmt.Appendf(nil, "k%d", j), Value: value(j)})
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			res := prod.ProduceSync(ctx, recs...)
			cancel()
			if err := res.FirstErr(); err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			for _, r := range res {
				produced[r.Record.Partition][r.Record.Offset] = string(r.Record.Value)
			}
			mu.Unlock()
		}
	}()

	// The replica finds the topic in the bucket.
	deadline := time.Now().Add(30 * time.Second)
	for replica.Partition(topic, 0) == nil || replica.Partition(topic, 1) == nil {
		if time.Now().After(deadline) {
			t.Fatal("the replica did not find the topic in the bucket")
		}
		time.Sleep(20 * time.Millisecond)
	}

	// The lag: each time the replica's high watermark moves, how long
	// after the upload of the origin's segment that ends there (its
	// manifest's upload time, set before the commit).
	var lags []time.Duration
	lagDone := make(chan struct{})
	go func() {
		defer close(lagDone)
		op := origin.Partition(topic, 0).(*tiered.Partition)
		rp := replica.Partition(topic, 0)
		hw := rp.Offsets().HighWatermark
		for {
			select {
			case <-done:
				return
			default:
			}
			if now := rp.Offsets().HighWatermark; now > hw {
				hw = now
				m, err := op.Manifest(context.Background())
				if err != nil {
					continue
				}
				if i, ok := m.Holding(hw - 1); ok && m.Segments[i].LastOffset == hw-1 {
					lags = append(lags, time.Since(time.UnixMilli(m.Segments[i].UploadTimeMs)))
				}
			}
			time.Sleep(time.Millisecond)
		}
	}()

	cons := newClient(t, replica.Addr(), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{
		topic: {0: kgo.NewOffset().At(0), 1: kgo.NewOffset().At(0)}}))
	got := map[int32]map[int64]string{0: {}, 1: {}}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var ends [2]int64
	readEarly := false
	for {
		select {
		case <-done:
			if ends[0] == 0 {
				// Production ended: what the origin offloads of it is
				// what the replica must serve (the active segment stays
				// on the origin's disk).
				for i := range int32(2) {
					tp := waitOffloaded(t, origin, topic, i)
					ends[i] = bucketEnd(tp)
				}
			}
		default:
		}
		if ends[0] > 0 && int64(len(got[0])) >= ends[0] && int64(len(got[1])) >= ends[1] {
			break
		}
		fs := cons.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("consumed %d and %d records from the replica; the bucket holds %d and %d", len(got[0]), len(got[1]), ends[0], ends[1])
		}
		fs.EachError(func(topic string, p int32, err error) { t.Fatalf("fetch %s-%d from the replica: %v", topic, p, err) })
		for _, r := range fs.Records() {
			if _, dup := got[r.Partition][r.Offset]; dup {
				t.Fatalf("offset %d of partition %d read twice", r.Offset, r.Partition)
			}
			got[r.Partition][r.Offset] = string(r.Value)
			if !readEarly {
				readEarly = true
				close(firstRead)
			}
		}
	}
	<-lagDone
	mu.Lock()
	defer mu.Unlock()
	for p := range int32(2) {
		for off := range ends[p] {
			want, ok := produced[p][off]
			if !ok {
				t.Fatalf("partition %d offset %d: the replica served it, the producer has no record of it", p, off)
			}
			if got[p][off] != want {
				t.Fatalf("partition %d offset %d: the replica served %q, the origin took %q", p, off, got[p][off], want)
			}
		}
	}
	slices.Sort(lags)
	if len(lags) > 0 {
		t.Logf("%d and %d records read from the replica; its lag behind the origin's uploads (task interval 100 ms), %d moves: median %v, max %v",
			ends[0], ends[1], len(lags), lags[len(lags)/2], lags[len(lags)-1])
	}

	// A produce to the replica is refused.
	rprod := newClient(t, replica.Addr(), kgo.DefaultProduceTopic(topic), kgo.RecordRetries(1))
	pctx, pcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer pcancel()
	if err := rprod.ProduceSync(pctx, &kgo.Record{Value: []byte("x")}).FirstErr(); !errors.Is(err, kerr.PolicyViolation) {
		t.Fatalf("a produce to the read replica: %v; want POLICY_VIOLATION", err)
	}
	ro.Check(t)
}

// TestReadReplicaOptions: a read replica with a Store of its own is
// refused.
func TestReadReplicaOptions(t *testing.T) {
	opts := tieredOptions(t.TempDir(), s3Store(t))
	opts.ReadReplicaOf = opts.Store
	if _, err := broker.Start(opts); err == nil {
		t.Fatal("a broker with Store and ReadReplicaOf started")
	}
}

// TestReadReplicaOfDisklessToKgo: a read replica of a diskless topic
// serves every acknowledged record to kgo, past the bucket's segments
// too (from the origin's WAL, up to what its writer marked
// acknowledged), while the origin produces; and writes nothing.
func TestReadReplicaOfDisklessToKgo(t *testing.T) {
	store := objstore.New(mem.New(), "mem://diskless-replica", objstore.Options{})
	oopts := tieredOptions(t.TempDir(), store)
	oopts.RemoteLogManager["diskless.produce.commit.interval.ms"] = "20"
	origin := startBroker(t, oopts)
	admin := newClient(t, origin.Addr())
	const topic = "events"
	createTopic(t, admin, topic, 1, disklessTopic())

	ropts := testOptions(t.TempDir())
	ro := &noWritesDriver{ReadOnly: objstoretest.ReadOnly{Driver: store.Driver()}}
	ropts.ReadReplicaOf, ropts.ReadReplicaPrefix = objstore.New(ro, "mem-replica", objstore.Options{}), "broker"
	ropts.RemoteLogManager = map[string]string{"remote.log.manager.task.interval.ms": "50"}
	ropts.ReplicaDiscoveryInterval = 50 * time.Millisecond
	replica := startBroker(t, ropts)

	prod := newClient(t, origin.Addr(), kgo.DefaultProduceTopic(topic), kgo.ProducerBatchMaxBytes(4<<10))
	cons := newClient(t, replica.Addr(), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	n := recordsPerCase(6000)
	var want []*kgo.Record
	got := map[int64]string{}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	tail := false // the replica served a record past the bucket's segments
	// The lag: from a produce's acknowledgement to the replica's high
	// watermark passing it.
	rp := replica.Partition(topic, 0)
	for rp == nil {
		time.Sleep(time.Millisecond)
		rp = replica.Partition(topic, 0)
	}
	var acks []struct {
		end int64
		at  time.Time
	}
	var lags []time.Duration
	var lagMu sync.Mutex
	stopLag := make(chan struct{})
	lagDone := make(chan struct{})
	go func() {
		defer close(lagDone)
		for {
			select {
			case <-stopLag:
				return
			case <-time.After(time.Millisecond):
			}
			hw := rp.Offsets().HighWatermark
			lagMu.Lock()
			for len(acks) > 0 && acks[0].end <= hw {
				lags = append(lags, time.Since(acks[0].at))
				acks = acks[1:]
			}
			lagMu.Unlock()
		}
	}()
	for i := 0; i < n || int64(len(got)) < int64(n); {
		if i < n {
			recs := make([]*kgo.Record, 0, 200)
			for ; len(recs) < 200 && i < n; i++ {
				recs = append(recs, &kgo.Record{Key: fmt.Appendf(nil, "k%d", i), Value: value(i)})
			}
			produceSync(t, prod, recs...)
			lagMu.Lock()
			acks = append(acks, struct {
				end int64
				at  time.Time
			}{recs[len(recs)-1].Offset + 1, time.Now()})
			lagMu.Unlock()
			want = append(want, recs...)
		}
		pctx, pcancel := context.WithTimeout(ctx, 200*time.Millisecond)
		fs := cons.PollFetches(pctx)
		pcancel()
		if ctx.Err() != nil {
			t.Fatalf("consumed %d records from the replica of %d produced", len(got), n)
		}
		fs.EachError(func(topic string, p int32, err error) {
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("fetch %s-%d from the replica: %v", topic, p, err)
			}
		})
		segEnd := origin.Partition(topic, 0).(*tiered.Partition).Head().LastOffset() + 1
		for _, r := range fs.Records() {
			if _, dup := got[r.Offset]; dup {
				t.Fatalf("offset %d read twice", r.Offset)
			}
			got[r.Offset] = string(r.Value)
			tail = tail || r.Offset >= segEnd
		}
	}
	for off, r := range want {
		if got[int64(off)] != string(r.Value) || r.Offset != int64(off) {
			t.Fatalf("offset %d: the replica served %q, the origin took %q at %d", off, got[int64(off)], r.Value, r.Offset)
		}
	}
	if !tail {
		t.Fatal("the replica served nothing past the bucket's segments: the test tested the segments only")
	}
	close(stopLag)
	<-lagDone
	slices.Sort(lags)
	if len(lags) > 0 {
		t.Logf("%d records read from the replica; its lag behind the origin's acknowledgements (commit interval 20 ms, task interval 50 ms), %d produces: median %v, max %v",
			n, len(lags), lags[len(lags)/2], lags[len(lags)-1])
	}
	ro.Check(t)
}
