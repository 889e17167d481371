package broker_test

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tierlog/tierlog/examples/broker/broker"
)

// TestLongPoll parks a fetch with a 10-minute MaxWait: a record produced
// meanwhile wakes it (Partition.Changed, then the purgatory's
// CheckAndComplete). Only a woken fetch can bring the record before the
// consumer gives up at 2 minutes, long before the wait ends: what is
// checked is that the record woke it, not how fast.
func TestLongPoll(t *testing.T) {
	b := startBroker(t, testOptions(t.TempDir()))
	prod := newClient(t, b.Addr())
	produceTo(t, prod, "poll", 0, 1)
	cons := newClient(t, b.Addr(), kgo.ConsumeTopics("poll"), kgo.ConsumeResetOffset(kgo.NewOffset().AtEnd()),
		kgo.FetchMaxWait(10*time.Minute))
	// Let the consumer reach the end and park its fetch.
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	cons.PollFetches(ctx)
	cancel()
	start := time.Now()
	produceTo(t, prod, "poll", 1, 1)
	got := consumeN(t, cons, 1, 2*time.Minute)
	t.Logf("offset %d arrived %v after it was produced", got[0].Offset, time.Since(start))
	if got[0].Offset != 1 {
		t.Fatalf("offset %d arrived, want offset 1", got[0].Offset)
	}
}

// TestTransactionAbortedOnRestart leaves a transaction open across a
// broker restart: the coordinator aborts it as it loads, the last stable
// offset moves past it, and the producer is fenced.
func TestTransactionAbortedOnRestart(t *testing.T) {
	opts := testOptions(t.TempDir())
	b, err := broker.Start(opts)
	if err != nil {
		t.Fatal(err)
	}
	prod := newClient(t, b.Addr(), kgo.TransactionalID("tx-restart"), kgo.DefaultProduceTopic("restart"))
	if err := prod.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	produceSync(t, prod, &kgo.Record{Value: []byte("open")})
	opts.Listen = b.Addr()
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	b = startBroker(t, opts)
	admin := newClient(t, b.Addr())
	if off, _ := listOffset(t, admin, "restart", -1, 1); off != 2 {
		t.Errorf("read_committed latest offset %d after the restart, want 2 (the record and its ABORT marker)", off)
	}
	if err := prod.EndTransaction(context.Background(), kgo.TryCommit); err == nil {
		t.Error("the old producer committed a transaction the coordinator aborted")
	}
}
