package broker_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tierlog/tierlog/examples/broker/broker"
	"github.com/tierlog/tierlog/testing/crashchild"
	"github.com/tierlog/tierlog/testing/faultproxy"
)

// freePort returns a loopback address no one listens on (a moment ago).
func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// checkOnce consumes topic-0 from the start and checks that values
// 0..n-1 (value(i)) each appear exactly once, in order.
func checkOnce(t *testing.T, addr, topic string, n int) {
	t.Helper()
	cons := newClient(t, addr, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	got := consumeN(t, cons, n, time.Minute)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	got = append(got, cons.PollFetches(ctx).Records()...)
	if len(got) != n {
		t.Fatalf("%d records in the log, %d produced", len(got), n)
	}
	for i, r := range got {
		if string(r.Value) != string(value(i)) {
			t.Fatalf("offset %d holds %q, want %q: a record lost or duplicated", r.Offset, r.Value, value(i))
		}
	}
}

// TestProduceRetries cuts the producer's connections mid-produce
// (toxiproxy between kgo and the broker): after kgo's retries every record
// is in the log once, in order. Retried batches that the broker had
// appended are answered as duplicates with their original offsets.
func TestProduceRetries(t *testing.T) {
	n := recordsPerCase(100_000)
	// freePort's port may be taken again before the broker listens on it
	// (another test's): another port then.
	var proxy *faultproxy.Proxy
	for attempt := 0; ; attempt++ {
		brokerAddr := freePort(t)
		proxy = faultproxy.Start(t, brokerAddr)
		opts := testOptions(t.TempDir())
		opts.Listen, opts.Advertise = brokerAddr, proxy.Addr
		b, err := broker.Start(opts)
		if errors.Is(err, syscall.EADDRINUSE) && attempt < 5 {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := b.Close(); err != nil {
				t.Errorf("close broker: %v", err)
			}
		})
		break
	}
	prod := newClient(t, proxy.Addr, kgo.DefaultProduceTopic("retries"), kgo.ProducerLinger(0),
		kgo.MaxBufferedRecords(2000), kgo.ProducerBatchMaxBytes(16<<10))
	// The producer id first: kgo gives up on InitProducerID when its
	// connection keeps closing right after the request (it suspects
	// missing SASL); the test is about the produce requests.
	produceSync(t, prod, &kgo.Record{Value: value(0)})
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	cuts := 0
	for i := 1; i < n; i++ {
		wg.Add(1)
		prod.Produce(context.Background(), &kgo.Record{Value: value(i)}, func(_ *kgo.Record, err error) {
			defer wg.Done()
			if err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		})
		if i%(n/10) == 0 {
			// Cut every connection while this tenth is in flight: each
			// toxic change restarts the proxy, closing its connections,
			// and limit_data cuts a request in the middle of its body.
			name := proxy.Add(t, faultproxy.Toxic{Type: "limit_data", Stream: faultproxy.Upstream, Attributes: map[string]any{"bytes": 30_000}})
			time.Sleep(10 * time.Millisecond)
			proxy.Remove(t, name)
			cuts += 2
		}
	}
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("%d records failed; the first: %v", len(errs), errs[0])
	}
	t.Logf("%d records produced through %d connection cuts", n, cuts)
	checkOnce(t, proxy.Addr, "retries", n)
}

// childRoles are the children this test binary runs (crashchild.Dispatch
// in TestMain).
var childRoles = map[string]crashchild.Role{"broker": brokerChild, "diskless-broker": disklessBrokerChild}

// brokerChild is the broker as a child process, for TestKillDuringProduce:
// it serves the log directory args[0] on args[1] until it is killed.
func brokerChild(args []string) int {
	return serveUntilKilled(broker.Options{Listen: args[1], Dir: args[0]})
}

// serveUntilKilled starts a broker with opts, says where it listens, and
// serves until the process is killed.
func serveUntilKilled(opts broker.Options) int {
	b, err := broker.Start(opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Printf("listening on %s\n", b.Addr())
	for {
		time.Sleep(time.Hour) // until SIGKILL
	}
}

// startChild starts the broker in a child process and waits until it
// listens. A failed test logs the child's output.
func startChild(t *testing.T, dir, addr string) *crashchild.Child {
	t.Helper()
	return startRole(t, "broker", dir, addr)
}

// startRole starts the child of role (childRoles) with args and waits
// until it listens. A failed test logs the child's output.
func startRole(t *testing.T, role string, args ...string) *crashchild.Child {
	t.Helper()
	c := crashchild.Start(t, role, args, crashchild.Options{})
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the child broker's output:\n%s", c.Output())
		}
	})
	if _, err := c.WaitLine("listening on", time.Minute); err != nil {
		t.Fatalf("the child broker did not start: %v", err)
	}
	return c
}

// TestKillDuringProduce SIGKILLs the broker (a child process) while kgo
// produces with acks=-1 to a topic with flush.messages=1: after a restart
// every acknowledged record is there.
func TestKillDuringProduce(t *testing.T) {
	dir, addr := t.TempDir(), freePort(t)
	child := startChild(t, dir, addr)
	admin := newClient(t, addr)
	createTopic(t, admin, "durable", 1, map[string]string{"flush.messages": "1"})
	prod := newClient(t, addr, kgo.DefaultProduceTopic("durable"), kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.RecordDeliveryTimeout(5*time.Second), kgo.ProducerLinger(0))
	pr := startProducing(prod, nil)
	for pr.count() < 5000 {
		time.Sleep(time.Millisecond)
	}
	// Kill while the producer is still sending.
	child.Kill()
	if exit := child.Wait(); !exit.Killed() {
		t.Fatalf("the child broker was not killed: %v", exit)
	}
	beforeKill := pr.count()
	// Restart: the producer's records in flight are retried against the
	// recovered log (idempotence keeps them once).
	startChild(t, dir, addr)
	sent := pr.finish()
	prod.Close()
	n := pr.count()
	cons := newClient(t, addr, kgo.ConsumeTopics("durable"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	found := map[int]bool{}
	for _, r := range consumeN(t, cons, n, time.Minute) {
		v, _ := strconv.Atoi(string(r.Value))
		found[v] = true
	}
	missing := 0
	for v := range pr.acked {
		if !found[v] {
			missing++
		}
	}
	if missing > 0 {
		t.Fatalf("%d of %d acknowledged records missing after SIGKILL and restart", missing, n)
	}
	t.Logf("%d records sent, %d acknowledged before the SIGKILL, %d in all: every one there after the restart", sent, beforeKill, n)
}

// producer produces the records 0, 1, 2, ... (their values the numbers)
// until finish, and records which were acknowledged.
type producer struct {
	mu      sync.Mutex
	acked   map[int]bool // read after finish
	wg      sync.WaitGroup
	stop    chan struct{}
	stopped chan int
}

// startProducing starts producing through prod; pause, when set, is
// called after each record is handed to the client.
func startProducing(prod *kgo.Client, pause func(i int)) *producer {
	p := &producer{acked: map[int]bool{}, stop: make(chan struct{}), stopped: make(chan int)}
	go func() {
		i := 0
		defer func() { p.stopped <- i }()
		for ; ; i++ {
			select {
			case <-p.stop:
				return
			default:
			}
			p.wg.Add(1)
			prod.Produce(context.Background(), &kgo.Record{Value: []byte(strconv.Itoa(i))}, func(r *kgo.Record, err error) {
				defer p.wg.Done()
				if err == nil {
					n, _ := strconv.Atoi(string(r.Value))
					p.mu.Lock()
					p.acked[n] = true
					p.mu.Unlock()
				}
			})
			if pause != nil {
				pause(i)
			}
		}
	}()
	return p
}

// count is how many records were acknowledged so far.
func (p *producer) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.acked)
}

// finish stops producing, waits for every record's outcome and returns
// how many were sent.
func (p *producer) finish() int {
	close(p.stop)
	sent := <-p.stopped
	p.wg.Wait()
	return sent
}
