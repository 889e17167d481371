package broker_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tierlog/tierlog/examples/broker/broker"
	"github.com/tierlog/tierlog/objstore"
	"github.com/tierlog/tierlog/objstore/mem"
)

// TestTransactions commits some transactions and aborts others across
// three partitions: a read_committed consumer sees exactly the committed
// records, a read_uncommitted one everything; with a transaction left
// open, read_committed stops at the last stable offset.
func TestTransactions(t *testing.T) {
	t.Run("local", func(t *testing.T) { testTransactions(t, testOptions(t.TempDir()), nil) })
	// A diskless topic: the markers, the aborted transactions and the
	// last stable offset as on a local one, every batch in the bucket.
	t.Run("diskless", func(t *testing.T) {
		opts := tieredOptions(t.TempDir(), objstore.New(mem.New(), "mem://txn", objstore.Options{}))
		opts.RemoteLogManager["diskless.produce.commit.interval.ms"] = "10"
		testTransactions(t, opts, disklessTopic())
	})
}

func testTransactions(t *testing.T, opts broker.Options, cfg map[string]string) {
	b := startBroker(t, opts)
	admin := newClient(t, b.Addr())
	createTopic(t, admin, "txn", 3, cfg)
	prod := newClient(t, b.Addr(), kgo.TransactionalID("tx-1"), kgo.DefaultProduceTopic("txn"),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.TransactionTimeout(time.Minute))
	ctx := context.Background()
	var committed, all []string
	for txn := range 10 {
		if err := prod.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		commit := txn%2 == 0
		for i := range 30 {
			v := fmt.Sprintf("txn%d-%d-commit=%v", txn, i, commit)
			produceSync(t, prod, &kgo.Record{Partition: int32(i % 3), Value: []byte(v)})
			all = append(all, v)
			if commit {
				committed = append(committed, v)
			}
		}
		if err := prod.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
			t.Fatalf("end transaction %d: %v", txn, err)
		}
	}
	// 300 records and a marker per transaction and partition.
	end := int64(100 + 10)
	read := func(level kgo.IsolationLevel, n int) []string {
		cl := newClient(t, b.Addr(), kgo.ConsumeTopics("txn"), kgo.FetchIsolationLevel(level),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
		var out []string
		for _, r := range consumeN(t, cl, n, 30*time.Second) {
			out = append(out, string(r.Value))
		}
		// Nothing more arrives.
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		for _, r := range cl.PollFetches(ctx).Records() {
			out = append(out, string(r.Value))
		}
		sort.Strings(out)
		return out
	}
	sort.Strings(committed)
	sort.Strings(all)
	if got := read(kgo.ReadCommitted(), len(committed)); strings.Join(got, ",") != strings.Join(committed, ",") {
		t.Errorf("read_committed saw %d records, want the %d committed", len(got), len(committed))
	}
	if got := read(kgo.ReadUncommitted(), len(all)); strings.Join(got, ",") != strings.Join(all, ",") {
		t.Errorf("read_uncommitted saw %d records, want all %d", len(got), len(all))
	}

	// A transaction left open holds the last stable offset at its first
	// record.
	if err := prod.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	produceSync(t, prod, &kgo.Record{Partition: 0, Value: []byte("open-1")}, &kgo.Record{Partition: 0, Value: []byte("open-2")})
	if off, _ := listOffset(t, admin, "txn", -1, 1); off != end {
		t.Errorf("read_committed latest offset %d, want the open transaction's first offset %d", off, end)
	}
	if off, _ := listOffset(t, admin, "txn", -1, 0); off != end+2 {
		t.Errorf("read_uncommitted latest offset %d, want the high watermark %d", off, end+2)
	}
	if got := read(kgo.ReadCommitted(), len(committed)); len(got) != len(committed) {
		t.Errorf("read_committed with a transaction open saw %d records, want %d", len(got), len(committed))
	}
	if err := prod.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	if got := read(kgo.ReadCommitted(), len(committed)+2); len(got) != len(committed)+2 {
		t.Errorf("after the commit read_committed saw %d records, want %d", len(got), len(committed)+2)
	}
}
