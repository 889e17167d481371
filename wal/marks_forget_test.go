package wal_test

import (
	"context"
	"testing"
	"time"

	"github.com/tierlog/tierlog/wal"
)

// TestForgetWithMarksInFlightSameEpoch: a partition deleted while its
// marks are in flight and created anew at the same epoch (a recreated
// Kafka topic starts at leader epoch 0 again) has its new marks put: the
// old ones, settling after, belong to a leadership that ended (Forget).
// (Found in review: the epoch alone could not tell them apart.)
func TestForgetWithMarksInFlightSameEpoch(t *testing.T) {
	s, d := memStore(t)
	w := newWriter(t, s, wal.Options{CommitInterval: 5 * time.Millisecond})
	ctx := context.Background()
	release := holdFirstPut(d)
	defer release()
	w.Lead(tpA, 0)
	w.Mark(tpA, 0, 100) // the old partition's, at epoch 0: held in flight
	waitFor(t, func() bool { return w.NextSequence() >= 2 })
	w.Forget(tpA)  // deleted
	w.Lead(tpA, 0) // created anew, claimed at epoch 0, before the old object settles
	release()
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	w.Mark(tpA, 0, 3) // the new partition's first acknowledged records
	time.Sleep(200 * time.Millisecond)
	if m, ok := markOf(footers(t, s, w), tpA); !ok || m.End != 3 {
		t.Fatalf("the new partition's mark (epoch 0, end 3) never went; newest in the bucket: epoch %d end %d", m.Epoch, m.End)
	}
}
