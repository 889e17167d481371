package broker_test

import (
	"bytes"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tierlog/tierlog/examples/broker/broker"
	"github.com/tierlog/tierlog/record"
)

// waitFor polls cond until it holds, failing the test after within (a
// bound on a hung broker, not a measure of speed).
func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, within)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// bigBatch is a record batch of one record of n bytes.
func bigBatch(t *testing.T, n int) []byte {
	t.Helper()
	var bld record.Builder
	bld.Reset(record.NewBatchHeader())
	bld.Append(time.Now().UnixMilli(), nil, bytes.Repeat([]byte{'x'}, n), nil)
	bt, err := bld.Build()
	if err != nil {
		t.Fatal(err)
	}
	return append([]byte(nil), bt...)
}

// produceRequest is a Produce v9 of one batch to topic-0.
func produceRequest(topic string, acks int16, batch []byte) *kmsg.ProduceRequest {
	req := kmsg.NewPtrProduceRequest()
	req.SetVersion(9)
	req.Acks, req.TimeoutMillis = acks, 120000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Records = batch
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	return req
}

// TestIdleConnectionClosed: a connection that sends nothing for
// ConnectionsMaxIdle is closed (Kafka's connections.max.idle.ms); one
// that keeps sending requests is not.
func TestIdleConnectionClosed(t *testing.T) {
	opts := testOptions(t.TempDir())
	opts.ConnectionsMaxIdle = 2 * time.Second
	b := startBroker(t, opts)
	idle, active := dialRaw(t, b.Addr()), dialRaw(t, b.Addr())
	idle.apiVersions(3)
	closed := make(chan error, 1)
	go func() {
		var one [1]byte
		idle.nc.SetReadDeadline(time.Now().Add(time.Minute))
		_, err := idle.nc.Read(one[:])
		closed <- err
	}()
	for {
		select {
		case err := <-closed:
			if !errors.Is(err, io.EOF) {
				t.Fatalf("idle connection: %v, want closed by the broker (EOF)", err)
			}
			active.apiVersions(3) // still served
			return
		case <-time.After(100 * time.Millisecond):
			active.apiVersions(3)
		}
	}
}

// TestRequestBytesBounded: requests in flight across connections hold at
// most QueuedMaxRequestBytes (Kafka's queued.max.request.bytes): a
// connection whose request does not fit waits, its body unread, until
// another request is done. Forty connections' 900 KiB produces parked
// in the purgatory (the high watermark held) under a 2 MiB bound: two in
// flight, thirty-eight waiting, holding no buffer while they wait (the
// connections' buffers together stay within the bound, a few bytes of
// answers aside); all answered once the watermark moves.
func TestRequestBytesBounded(t *testing.T) {
	const bound = 2 << 20
	opts := testOptions(t.TempDir())
	opts.QueuedMaxRequestBytes = bound
	b := startBroker(t, opts)
	createTopic(t, newClient(t, b.Addr()), "held", 1, nil)
	broker.HoldHighWatermark(b, "held", 0, true)
	batch := bigBatch(t, 900<<10)
	var conns []*rawConn
	var reqs []*kmsg.ProduceRequest
	const clients = 40
	for range clients {
		c := dialRaw(t, b.Addr())
		req := produceRequest("held", -1, batch)
		c.send(req)
		conns, reqs = append(conns, c), append(reqs, req)
	}
	waitFor(t, time.Minute, "38 requests waiting for memory", func() bool { return b.Stats().WaitingForMemory == clients-2 })
	st := b.Stats()
	if st.RequestBytesInFlight > bound || st.PeakRequestBytes > bound {
		t.Fatalf("in flight %d bytes, peak %d: past the bound %d", st.RequestBytesInFlight, st.PeakRequestBytes, bound)
	}
	if st.RequestBytesInFlight < 2*int64(len(batch)) {
		t.Fatalf("in flight %d bytes, want two requests of over %d", st.RequestBytesInFlight, len(batch))
	}
	if slack := int64(clients * 256); st.ConnectionBufferBytes > bound+slack {
		t.Fatalf("the connections hold %d bytes of buffers with %d waiting: past the bound %d (+%d of answers)", st.ConnectionBufferBytes, st.WaitingForMemory, bound, slack)
	}
	broker.HoldHighWatermark(b, "held", 0, false)
	for i, c := range conns {
		resp, err := c.recv(reqs[i])
		if err != nil {
			t.Fatalf("produce %d: %v", i, err)
		}
		if code := resp.(*kmsg.ProduceResponse).Topics[0].Partitions[0].ErrorCode; code != 0 {
			t.Fatalf("produce %d: error code %d", i, code)
		}
	}
	waitFor(t, time.Minute, "the requests' memory released", func() bool { return b.Stats().RequestBytesInFlight == 0 })
	if peak := b.Stats().PeakRequestBytes; peak > bound {
		t.Fatalf("peak %d bytes in flight, past the bound %d", peak, bound)
	}
}

// TestSlowReaderBounded: a client that sends Fetch after Fetch and never
// reads the answers gets at most the answers the socket holds: the
// broker reads a connection's next request only after its answer to the
// last is written, and a write that makes no progress for
// ConnectionsMaxIdle closes the connection.
func TestSlowReaderBounded(t *testing.T) {
	opts := testOptions(t.TempDir())
	opts.ConnectionsMaxIdle = 2 * time.Second
	b := startBroker(t, opts)
	prod := dialRaw(t, b.Addr())
	createTopic(t, newClient(t, b.Addr()), "big", 1, nil)
	for range 8 {
		req := produceRequest("big", 1, bigBatch(t, 900<<10))
		if code := prod.roundTrip(req).(*kmsg.ProduceResponse).Topics[0].Partitions[0].ErrorCode; code != 0 {
			t.Fatalf("produce: error code %d", code)
		}
	}
	prod.nc.Close()
	waitFor(t, time.Minute, "only the slow reader's connection left", func() bool { return b.Stats().Connections <= 1 })
	before := b.Stats().Requests
	const fetches = 200
	slow := dialRaw(t, b.Addr())
	var all []byte
	for range fetches {
		req := kmsg.NewPtrFetchRequest()
		req.SetVersion(11)
		req.MaxBytes, req.ReplicaID = 8<<20, -1
		rt := kmsg.NewFetchRequestTopic()
		rt.Topic = "big"
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.PartitionMaxBytes, rp.CurrentLeaderEpoch = 8<<20, -1
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		all = append(all, slow.frame(req)...)
	}
	// The write blocks once the broker stops reading; it fails when the
	// broker closes the connection.
	go slow.nc.Write(all)
	waitFor(t, time.Minute, "the slow reader's connection closed", func() bool {
		st := b.Stats()
		return st.Requests > before && st.Connections == 0
	})
	if served := b.Stats().Requests - before; served >= fetches {
		t.Fatalf("%d of %d fetches answered to a client that read none", served, fetches)
	}
}

// TestIdleConnectionsHoldNoBuffers: connections that each sent a large
// request and went quiet give their buffers back once they have been
// quiet for a moment (well before ConnectionsMaxIdle closes them): ten
// idle connections hold no request or response buffer, whatever they
// sent.
func TestIdleConnectionsHoldNoBuffers(t *testing.T) {
	b := startBroker(t, testOptions(t.TempDir()))
	createTopic(t, newClient(t, b.Addr()), "idle", 1, nil)
	batch := bigBatch(t, 900<<10)
	var conns []*rawConn
	for range 10 {
		c := dialRaw(t, b.Addr())
		if code := c.roundTrip(produceRequest("idle", 1, batch)).(*kmsg.ProduceResponse).Topics[0].Partitions[0].ErrorCode; code != 0 {
			t.Fatalf("produce: error code %d", code)
		}
		conns = append(conns, c)
	}
	waitFor(t, time.Minute, "the idle connections' buffers released", func() bool { return b.Stats().ConnectionBufferBytes == 0 })
	// They still serve.
	for _, c := range conns {
		c.apiVersions(3)
	}
}

// TestConnectionFloodIdle: two thousand connections that each sent a
// request and went idle hold no buffers once quiet, and are all closed
// after ConnectionsMaxIdle; the broker serves a new client afterwards.
func TestConnectionFloodIdle(t *testing.T) {
	const flood = 2000
	opts := testOptions(t.TempDir())
	opts.ConnectionsMaxIdle = 6 * time.Second // the buffers go after a second
	b := startBroker(t, opts)
	var conns []net.Conn
	defer func() {
		for _, nc := range conns {
			nc.Close()
		}
	}()
	req := kmsg.NewPtrApiVersionsRequest()
	req.SetVersion(3)
	req.ClientSoftwareName, req.ClientSoftwareVersion = "flood", "1"
	frame := (&rawConn{t: t}).frame(req)
	for i := range flood {
		nc, err := net.Dial("tcp", b.Addr())
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		conns = append(conns, nc)
		if _, err := nc.Write(frame); err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
	}
	waitFor(t, time.Minute, "the idle flood connected, holding no buffers", func() bool {
		st := b.Stats()
		return st.Connections == flood && st.ConnectionBufferBytes == 0
	})
	waitFor(t, time.Minute, "the idle flood closed", func() bool { return b.Stats().Connections == 0 })
	dialRaw(t, b.Addr()).apiVersions(3)
}
