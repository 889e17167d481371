package broker_test

import (
	"context"
	"crypto/rand"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tierlog/tierlog/objstore"
	"github.com/tierlog/tierlog/objstore/mem"
	"github.com/tierlog/tierlog/testing/faultstore"
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
