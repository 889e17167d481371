package tiered_test

import (
	"testing"

	"github.com/tierlog/tierlog/objstore"
	"github.com/tierlog/tierlog/testing/objstoretest"
)

// TestReplicaReadyAfterSkippedSteps: a replica whose first steps each pass
// a number WAL gc removed has not followed its bucket yet, and says so
// (Ready, reads: a retryable ErrStorage), never nil with offsets that end
// at the segments' end (a consumer would reset its offset). (Found in
// review.)
func TestReplicaReadyAfterSkippedSteps(t *testing.T) {
	o := newVoidingOrigin(t, "mem://review-skip2")
	o.produce(3)
	o.voidOne()
	o.gc()
	replica := openReplica(t, objstore.New(&objstoretest.ReadOnly{Driver: o.inner}, "mem://review-skip2-r", objstore.Options{}))
	defer replica.Close()
	t.Logf("after Open's step: %+v", replica.Offsets())
	o.voidOne() // another void gone before the replica's next step
	o.gc()
	end := o.p.Offsets().LogEnd
	if err := replica.Ready(ctx); err != nil {
		t.Logf("Ready: %v (retryable: fine)", err)
		return
	}
	ro := replica.Offsets()
	t.Logf("Ready said nil; Offsets %+v, origin's acknowledged end %d, bucket segments end %d", ro, end, replica.Head().LastOffset()+1)
	if ro.HighWatermark == 0 || ro.LogEnd < replica.Head().LastOffset()+1 {
		t.Fatalf("Ready said nil (the replica has followed its bucket), but it serves nothing of the %d acknowledged offsets: %+v", end, ro)
	}
}
