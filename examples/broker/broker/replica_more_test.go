package broker_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tierlog/tierlog/examples/broker/broker"
	"github.com/tierlog/tierlog/objstore"
	"github.com/tierlog/tierlog/objstore/mem"
	"github.com/tierlog/tierlog/testing/objstoretest"
)

// noWritesDriver fails and records every write (objstoretest.ReadOnly);
// once block is set its List blocks until its context ends, telling
// listing when it starts and ended with the context's error.
type noWritesDriver struct {
	objstoretest.ReadOnly
	block   atomic.Bool
	listing chan struct{}
	ended   chan error
}

func (d *noWritesDriver) List(ctx context.Context, prefix, after string, limit int) ([]objstore.ObjectInfo, bool, error) {
	if d.block.Load() {
		d.listing <- struct{}{}
		<-ctx.Done()
		d.ended <- ctx.Err()
		return nil, false, ctx.Err()
	}
	return d.Driver.List(ctx, prefix, after, limit)
}

// replicaOrigin starts an origin broker on a mem bucket with a tiered
// topic "orders" holding a few records, and returns the bucket's driver.
func replicaOrigin(t *testing.T) *mem.Driver {
	t.Helper()
	inner := mem.New()
	store := objstore.New(inner, "mem://origin", objstore.Options{})
	origin := startBroker(t, tieredOptions(t.TempDir(), store))
	admin := newClient(t, origin.Addr())
	createTopic(t, admin, "orders", 1, tieredTopic(16<<10))
	prod := newClient(t, origin.Addr(), kgo.DefaultProduceTopic("orders"))
	if err := prod.ProduceSync(context.Background(), &kgo.Record{Value: []byte("x")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := store.Head(context.Background(), "broker/orders-0/manifest"); err == nil {
			return inner
		}
		if time.Now().After(deadline) {
			t.Fatal("the origin wrote no manifest")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestReadReplicaRefusesTransactions: a transactional producer on the replica
// may add a replica topic's partition to its transaction
// (AddPartitionsToTxn is not refused); its produce is refused, and then
// the abort cannot write its marker there: the transaction never ends.
func TestReadReplicaRefusesTransactions(t *testing.T) {
	inner := replicaOrigin(t)
	ro := &noWritesDriver{ReadOnly: objstoretest.ReadOnly{Driver: inner}}
	ropts := testOptions(t.TempDir())
	ropts.ReadReplicaOf, ropts.ReadReplicaPrefix = objstore.New(ro, "mem://origin-replica", objstore.Options{}), "broker"
	ropts.ReplicaDiscoveryInterval = 100 * time.Millisecond
	replica := startBroker(t, ropts)
	if replica.Partition("orders", 0) == nil {
		t.Fatal("the replica does not serve orders")
	}
	cl := newClient(t, replica.Addr())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	init := kmsg.NewPtrInitProducerIDRequest()
	init.TransactionalID, init.TransactionTimeoutMillis = kmsg.StringPtr("tx-r"), 60000
	ir, err := init.RequestWith(ctx, cl)
	if err != nil || ir.ErrorCode != 0 {
		t.Fatalf("InitProducerID: %v %v", err, ir)
	}
	add := kmsg.NewPtrAddPartitionsToTxnRequest()
	add.TransactionalID, add.ProducerID, add.ProducerEpoch = "tx-r", ir.ProducerID, ir.ProducerEpoch
	at := kmsg.NewAddPartitionsToTxnRequestTopic()
	at.Topic, at.Partitions = "orders", []int32{0}
	add.Topics = append(add.Topics, at)
	ar, err := add.RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	if code := ar.Topics[0].Partitions[0].ErrorCode; code != kerr.PolicyViolation.Code {
		t.Fatalf("AddPartitionsToTxn of a replica topic: %v; want POLICY_VIOLATION", kerr.ErrorForCode(code))
	}
	end := kmsg.NewPtrEndTxnRequest()
	end.TransactionalID, end.ProducerID, end.ProducerEpoch, end.Commit = "tx-r", ir.ProducerID, ir.ProducerEpoch, false
	er, err := end.RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	if er.ErrorCode != 0 {
		t.Errorf("EndTxn(abort) of a transaction holding a replica partition: %v", kerr.ErrorForCode(er.ErrorCode))
	}
	ir2, err := init.RequestWith(ctx, cl)
	if err != nil || ir2.ErrorCode != 0 {
		t.Errorf("InitProducerID again for the same transactional id: %v %v", err, kerr.ErrorForCode(ir2.ErrorCode))
	}
	ro.Check(t)
}

// TestReadReplicaMaxPartitions: partitions found in the bucket are
// opened without Options.MaxPartitions.
func TestReadReplicaMaxPartitions(t *testing.T) {
	inner := replicaOrigin(t)
	store := objstore.New(inner, "mem://origin", objstore.Options{})
	data, err := store.ReadAll(context.Background(), "broker/orders-0/manifest", 0, -1)
	if err != nil {
		t.Fatal(err)
	}
	// A manifest of partition 60 of another topic (a copy: its content
	// does not matter for the count).
	if _, err := store.Put(context.Background(), "broker/wide-60/manifest", bytesReader(data), int64(len(data)), objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	ropts := testOptions(t.TempDir())
	ropts.ReadReplicaOf, ropts.ReadReplicaPrefix = objstore.New(&noWritesDriver{ReadOnly: objstoretest.ReadOnly{Driver: inner}}, "mem://origin-replica", objstore.Options{}), "broker"
	ropts.MaxPartitions = 20
	replica := startBroker(t, ropts)
	n := 0
	for i := int32(0); i < 100; i++ {
		if replica.Partition("wide", i) != nil {
			n++
		}
	}
	if n > 20 {
		t.Errorf("the replica serves %d partitions of one topic, past MaxPartitions 20", n)
	}
}

// replicaOf is the options of a replica broker of the origin's bucket
// (inner) through ro, discovering and stepping every interval.
func replicaOf(t *testing.T, ro *noWritesDriver, interval time.Duration) broker.Options {
	ropts := testOptions(t.TempDir())
	ropts.ReadReplicaOf, ropts.ReadReplicaPrefix = objstore.New(ro, "mem://origin-replica", objstore.Options{}), "broker"
	ropts.RemoteLogManager = map[string]string{"remote.log.manager.task.interval.ms": fmt.Sprint(interval.Milliseconds())}
	ropts.ReplicaDiscoveryInterval = interval
	return ropts
}

// TestReadReplicaCloseCancelsDiscovery: Close cancels a discovery whose
// listing of the bucket hangs, rather than wait for its deadline.
func TestReadReplicaCloseCancelsDiscovery(t *testing.T) {
	inner := replicaOrigin(t)
	ro := &noWritesDriver{ReadOnly: objstoretest.ReadOnly{Driver: inner}, listing: make(chan struct{}, 1), ended: make(chan error, 1)}
	replica, err := startReplicaNoCleanup(replicaOf(t, ro, 50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ro.block.Store(true)
	<-ro.listing // a discovery is in its List now
	if err := replica.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-ro.ended; !errors.Is(err, context.Canceled) {
		t.Fatalf("the discovery's listing ended with %v; want it cancelled by Close", err)
	}
}

// TestReadReplicaNeverWrites: fetches, ListOffsets, a refused
// produce, AlterConfigs, DeleteRecords and Close of a replica broker
// write nothing to the bucket.
func TestReadReplicaNeverWrites(t *testing.T) {
	inner := replicaOrigin(t)
	ro := &noWritesDriver{ReadOnly: objstoretest.ReadOnly{Driver: inner}}
	replica, err := startReplicaNoCleanup(replicaOf(t, ro, 50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	cl := newClient(t, replica.Addr())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	alter := kmsg.NewPtrIncrementalAlterConfigsRequest()
	rr := kmsg.NewIncrementalAlterConfigsRequestResource()
	rr.ResourceType, rr.ResourceName = kmsg.ConfigResourceTypeTopic, "orders"
	c := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
	c.Name, c.Value, c.Op = "retention.ms", kmsg.StringPtr("1"), kmsg.IncrementalAlterConfigOpSet
	rr.Configs = append(rr.Configs, c)
	alter.Resources = append(alter.Resources, rr)
	if resp, err := alter.RequestWith(ctx, cl); err != nil || resp.Resources[0].ErrorCode != kerr.PolicyViolation.Code {
		t.Fatalf("IncrementalAlterConfigs on a replica topic: %v %+v; want POLICY_VIOLATION", err, resp)
	}
	del := kmsg.NewPtrDeleteRecordsRequest()
	dt := kmsg.NewDeleteRecordsRequestTopic()
	dt.Topic = "orders"
	dp := kmsg.NewDeleteRecordsRequestTopicPartition()
	dp.Offset = 0
	dt.Partitions = append(dt.Partitions, dp)
	del.Topics = append(del.Topics, dt)
	if resp, err := del.RequestWith(ctx, cl); err != nil || resp.Topics[0].Partitions[0].ErrorCode != kerr.PolicyViolation.Code {
		t.Fatalf("DeleteRecords on a replica topic: %v %+v; want POLICY_VIOLATION", err, resp)
	}
	time.Sleep(300 * time.Millisecond)
	if err := replica.Close(); err != nil {
		t.Fatal(err)
	}
	ro.Check(t)
}

// TestReadReplicaSkipsDeletedTopics: a topic the origin deleted keeps
// its manifest (marked deleted) in the bucket; a replica started after
// serves it as an empty topic, and lists it in Metadata.
func TestReadReplicaSkipsDeletedTopics(t *testing.T) {
	inner := mem.New()
	store := objstore.New(inner, "mem://origin", objstore.Options{})
	origin := startBroker(t, tieredOptions(t.TempDir(), store))
	admin := newClient(t, origin.Addr())
	createTopic(t, admin, "gone", 1, tieredTopic(16<<10))
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := store.Head(context.Background(), "broker/gone-0/manifest"); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no manifest")
		}
		time.Sleep(20 * time.Millisecond)
	}
	del := kmsg.NewPtrDeleteTopicsRequest()
	del.TopicNames = []string{"gone"}
	dt := kmsg.NewDeleteTopicsRequestTopic()
	dt.Topic = kmsg.StringPtr("gone")
	del.Topics = append(del.Topics, dt)
	if resp, err := del.RequestWith(context.Background(), admin); err != nil || resp.Topics[0].ErrorCode != 0 {
		t.Fatalf("delete: %v %v", err, resp)
	}
	ropts := testOptions(t.TempDir())
	ropts.ReadReplicaOf, ropts.ReadReplicaPrefix = objstore.New(&noWritesDriver{ReadOnly: objstoretest.ReadOnly{Driver: inner}}, "mem://origin-replica", objstore.Options{}), "broker"
	replica := startBroker(t, ropts)
	if replica.Partition("gone", 0) != nil {
		t.Errorf("the replica serves a topic its origin deleted")
	}
}

func bytesReader(b []byte) io.ReadSeeker { return bytes.NewReader(b) }

func startReplicaNoCleanup(o broker.Options) (*broker.Broker, error) { return broker.Start(o) }
