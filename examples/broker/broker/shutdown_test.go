package broker_test

import (
	"context"
	"crypto/rand"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tierlog/tierlog/examples/broker/broker"
	"github.com/tierlog/tierlog/objstore"
	"github.com/tierlog/tierlog/objstore/mem"
	"github.com/tierlog/tierlog/testing/faultstore"
	"github.com/tierlog/tierlog/testing/objstoretest"
)

// TestCloseWithTheBucketDown: the bucket stops answering while producers
// fill a diskless topic's WAL buffer, so their appends wait for buffer
// space that no upload will free. Close cancels those requests and
// returns: it does not wait for the bucket to come back.
func TestCloseWithTheBucketDown(t *testing.T) {
	drv := faultstore.Wrap(mem.New(), 0)
	down := drv.Add(bucketDown)
	down.SetEnabled(false)
	store := objstore.New(drv, "mem://shutdown", objstore.Options{MaxAttempts: 1, Timeout: 500 * time.Millisecond})
	opts := tieredOptions(t.TempDir(), store)
	opts.RemoteLogManager["diskless.produce.buffer.max.bytes"] = "1024"
	b := startBroker(t, opts)
	createTopic(t, newClient(t, b.Addr()), "events", 1, disklessTopic())
	prod := newClient(t, b.Addr(), kgo.DefaultProduceTopic("events"))
	produceSync(t, prod, &kgo.Record{Value: []byte("acknowledged before the bucket went down")})

	down.SetEnabled(true)
	for range 4 {
		v := make([]byte, 4<<10)
		rand.Read(v)
		prod.Produce(context.Background(), &kgo.Record{Value: v}, nil)
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(time.Second) // the appends reach the writer and wait for its buffer
	closed := make(chan struct{})
	go func() { b.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(20 * time.Second):
		down.SetEnabled(false) // let it finish, then fail
		<-closed
		t.Fatal("Close did not return within 20 s with the bucket down (the store's bound is 0.5 s)")
	}
}

// stallUntil makes the requests on keys match selects wait until their
// ctx ends or release is called (it may be called more than once);
// entered gets a value as each begins to wait. skip lets that many
// matching requests through first.
func stallUntil(d *faultstore.Driver, match func(objstore.Op, string) bool, skip int32) (entered <-chan struct{}, release func()) {
	in, out := make(chan struct{}, 64), make(chan struct{})
	hold := faultstore.Hold(out, in)
	var n atomic.Int32
	d.Add(faultstore.Rule{Every: 1, Fault: faultstore.Hook, Match: match,
		Before: func(ctx context.Context, c faultstore.Call) error {
			if n.Add(1) <= skip {
				return nil
			}
			return hold(ctx, c)
		}})
	return in, sync.OnceFunc(func() { close(out) })
}

// closeWithin closes b and fails the test unless Close returns within
// 15 s (the bucket holds a request 30 s or more); then it lets the
// bucket answer so that Close can finish.
func closeWithin(t *testing.T, b interface{ Close() error }, release func(), what string) {
	t.Helper()
	closed := make(chan struct{})
	go func() { b.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(15 * time.Second):
		release()
		<-closed
		t.Fatalf("Close waited for %s until the bucket answered", what)
	}
}

// TestCloseDuringANewReplicaTopicsOpen: a read replica's discovery finds
// a new topic, and the bucket stops answering the reads of its manifest
// as the new partition catches up. Close does not wait for them.
func TestCloseDuringANewReplicaTopicsOpen(t *testing.T) {
	inner := replicaOrigin(t)
	d := faultstore.Wrap(inner, 1)
	// The first read is discovery's look at whether the topic was
	// deleted; the Open's catch-up reads after it.
	entered, release := stallUntil(d, func(op objstore.Op, k string) bool {
		return op != objstore.OpPut && strings.HasSuffix(k, "other-0/manifest")
	}, 1)
	defer release()
	replica, err := startReplicaNoCleanup(replicaOf(t, &noWritesDriver{ReadOnly: objstoretest.ReadOnly{Driver: d}}, 100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	origin := objstore.New(inner, "mem://origin", objstore.Options{})
	data, err := origin.ReadAll(context.Background(), "broker/orders-0/manifest", 0, -1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := origin.Put(context.Background(), "broker/other-0/manifest", bytesReader(data), int64(len(data)), objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("no Open read the new topic's manifest")
	}
	closeWithin(t, replica, release, "a new replica topic's Open")
}

// TestCloseDuringADisklessCreateTopics: CreateTopics of a diskless topic
// while the bucket stops answering: its claim (BecomeLeader), and the
// deletion of what the failed creation left, give up when Close begins.
func TestCloseDuringADisklessCreateTopics(t *testing.T) {
	drv := faultstore.Wrap(mem.New(), 0)
	var on atomic.Bool
	entered, release := stallUntil(drv, func(op objstore.Op, k string) bool { return on.Load() && strings.Contains(k, "events-") }, 0)
	defer release()
	store := objstore.New(drv, "mem://create", objstore.Options{MaxAttempts: 1, Timeout: 30 * time.Second})
	b, err := broker.Start(tieredOptions(t.TempDir(), store))
	if err != nil {
		t.Fatal(err)
	}
	cl := newClient(t, b.Addr())
	on.Store(true)
	go func() {
		req := kmsg.NewPtrCreateTopicsRequest()
		rt := kmsg.NewCreateTopicsRequestTopic()
		rt.Topic, rt.NumPartitions, rt.ReplicationFactor = "events", 1, 1
		for k, v := range disklessTopic() {
			c := kmsg.NewCreateTopicsRequestTopicConfig()
			c.Name, c.Value = k, kmsg.StringPtr(v)
			rt.Configs = append(rt.Configs, c)
		}
		req.Topics = append(req.Topics, rt)
		req.RequestWith(context.Background(), cl)
	}()
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the creation read nothing of the bucket")
	}
	closeWithin(t, b, release, "a diskless CreateTopics's claim")
}
