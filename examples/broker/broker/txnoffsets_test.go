package broker_test

import (
	"context"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestTxnOffsetCommit drives the coordinator's offset path with raw
// requests: a transaction's offset commit is invisible (and unstable for
// RequireStable) until EndTxn commits it, and gone if it aborts.
func TestTxnOffsetCommit(t *testing.T) {
	b := startBroker(t, testOptions(t.TempDir()))
	cl := newClient(t, b.Addr())
	ctx := context.Background()
	createTopic(t, cl, "in", 1, nil)
	init := kmsg.NewPtrInitProducerIDRequest()
	init.TransactionalID, init.TransactionTimeoutMillis = kmsg.StringPtr("tx-offsets"), 60_000
	ir, err := init.RequestWith(ctx, cl)
	if err != nil || ir.ErrorCode != 0 {
		t.Fatalf("InitProducerID: %v %v", err, kerr.ErrorForCode(ir.ErrorCode))
	}
	commitAt := func(offset int64, commit bool) {
		t.Helper()
		add := kmsg.NewPtrAddOffsetsToTxnRequest()
		add.TransactionalID, add.ProducerID, add.ProducerEpoch, add.Group = "tx-offsets", ir.ProducerID, ir.ProducerEpoch, "g-txn"
		if r, err := add.RequestWith(ctx, cl); err != nil || r.ErrorCode != 0 {
			t.Fatalf("AddOffsetsToTxn: %v %v", err, kerr.ErrorForCode(r.ErrorCode))
		}
		toc := kmsg.NewPtrTxnOffsetCommitRequest()
		toc.TransactionalID, toc.Group, toc.ProducerID, toc.ProducerEpoch = "tx-offsets", "g-txn", ir.ProducerID, ir.ProducerEpoch
		rt := kmsg.NewTxnOffsetCommitRequestTopic()
		rt.Topic = "in"
		rp := kmsg.NewTxnOffsetCommitRequestTopicPartition()
		rp.Partition, rp.Offset = 0, offset
		rt.Partitions = append(rt.Partitions, rp)
		toc.Topics = append(toc.Topics, rt)
		if r, err := toc.RequestWith(ctx, cl); err != nil || r.Topics[0].Partitions[0].ErrorCode != 0 {
			t.Fatalf("TxnOffsetCommit: %v %+v", err, r)
		}
		if off, code := fetchOffset(t, cl, true); code != kerr.UnstableOffsetCommit.Code {
			t.Errorf("RequireStable with a commit pending: offset %d code %d, want UNSTABLE_OFFSET_COMMIT", off, code)
		}
		end := kmsg.NewPtrEndTxnRequest()
		end.TransactionalID, end.ProducerID, end.ProducerEpoch, end.Commit = "tx-offsets", ir.ProducerID, ir.ProducerEpoch, commit
		if r, err := end.RequestWith(ctx, cl); err != nil || r.ErrorCode != 0 {
			t.Fatalf("EndTxn: %v %v", err, kerr.ErrorForCode(r.ErrorCode))
		}
	}
	commitAt(42, true)
	if off, code := fetchOffset(t, cl, true); off != 42 || code != 0 {
		t.Errorf("after the commit: offset %d code %d, want 42", off, code)
	}
	commitAt(99, false)
	if off, code := fetchOffset(t, cl, true); off != 42 || code != 0 {
		t.Errorf("after an aborted commit: offset %d code %d, want still 42", off, code)
	}
}

func fetchOffset(t *testing.T, cl *kgo.Client, stable bool) (int64, int16) {
	t.Helper()
	req := kmsg.NewPtrOffsetFetchRequest()
	req.Group, req.RequireStable = "g-txn", stable
	rt := kmsg.NewOffsetFetchRequestTopic()
	rt.Topic, rt.Partitions = "in", []int32{0}
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(context.Background(), cl)
	if err != nil {
		t.Fatal(err)
	}
	p := resp.Topics[0].Partitions[0]
	return p.Offset, p.ErrorCode
}
