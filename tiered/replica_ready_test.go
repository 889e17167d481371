package tiered_test

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/tierlog/tierlog/objstore"
	"github.com/tierlog/tierlog/objstore/mem"
	"github.com/tierlog/tierlog/testing/faultstore"
	"github.com/tierlog/tierlog/testing/objstoretest"
	"github.com/tierlog/tierlog/tiered"
)

// TestReplicaReadyAfterSkippedSteps: a replica whose first steps each pass
// a number WAL gc removed has not followed its bucket yet, and says so
// (Ready, reads: a retryable ErrStorage), never nil with offsets that end
// at the segments' end (a consumer would reset its offset). (Found in
// review.)
func TestReplicaReadyAfterSkippedSteps(t *testing.T) {
	inner := mem.New()
	faulty := faultstore.Wrap(inner, 1)
	store := objstore.New(faulty, "mem://review-skip2", objstore.Options{MaxAttempts: 1})
	a := openDisklessBackend(t, filepath.Join(t.TempDir(), "a"), store)
	origin := openDiskless(t, a, 1)
	produce := func(n int) {
		t.Helper()
		for range n {
			eventually(t, 10*time.Second, "an append never settled", func() bool {
				_, err := appendOne(t, origin, 1, "x")
				return err == nil && origin.Flush() == nil
			})
		}
	}
	voidAndGC := func() {
		t.Helper()
		rule := faulty.Add(faultstore.Rule{Op: objstore.OpPut, KeyContains: "/_wal/", Nth: 1, Fault: faultstore.FailBefore})
		appendOne(t, origin, 1, "x")
		origin.Flush()
		rule.Remove()
		produce(10)
		later := func() time.Time { return time.Now().Add(time.Hour) }
		objs, err := tiered.GCWAL(ctx, store, "tl", tiered.WALGCOptions{Grace: time.Nanosecond, Force: true, Now: later})
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, o := range objs {
			if o.Remove {
				n++
			}
		}
		if n == 0 {
			t.Fatal("gc removed nothing")
		}
	}
	produce(3)
	voidAndGC()
	replica := openReplica(t, objstore.New(&objstoretest.ReadOnly{Driver: inner}, "mem://review-skip2-r", objstore.Options{}))
	defer replica.Close()
	t.Logf("after Open's step: %+v", replica.Offsets())
	voidAndGC() // another void gone before the replica's next step
	end := origin.Offsets().LogEnd
	if err := replica.Ready(ctx); err != nil {
		t.Logf("Ready: %v (retryable: fine)", err)
		return
	}
	o := replica.Offsets()
	t.Logf("Ready said nil; Offsets %+v, origin's acknowledged end %d, bucket segments end %d", o, end, replica.Head().LastOffset()+1)
	if o.HighWatermark == 0 || o.LogEnd < replica.Head().LastOffset()+1 {
		t.Fatalf("Ready said nil (the replica has followed its bucket), but it serves nothing of the %d acknowledged offsets: %+v", end, o)
	}
}
