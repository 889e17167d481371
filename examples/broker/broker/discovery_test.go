package broker_test

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"testing"

	"github.com/tierlog/tierlog/examples/broker/broker"
	"github.com/tierlog/tierlog/objstore"
	"github.com/tierlog/tierlog/objstore/mem"
)

// TestReplicaDiscoveryListsLittle: a read replica finds every partition
// with a manifest, and lists a partition of many objects (a long remote
// log) for a page only, then skips past it: a bucket of two partitions
// of 20,000 objects each, the WAL's 3,000 objects and three small
// partitions (one without a manifest) costs a few requests, not one for
// every 1,000 keys; on a real S3 server too.
func TestReplicaDiscoveryListsLittle(t *testing.T) {
	t.Run("memory", func(t *testing.T) {
		discoveryCase(t, objstore.New(mem.New(), "mem://discovery", objstore.Options{}), 20_000)
	})
	// A real S3 server takes the listing's skip past a folder (a
	// start-after of the folder and U+10FFFF), with fewer objects.
	t.Run("versitygw", func(t *testing.T) { discoveryCase(t, s3Store(t), 1_200) })
}

func discoveryCase(t *testing.T, store *objstore.Store, big int) {
	ctx := context.Background()
	put := func(key string) {
		t.Helper()
		if _, err := store.Put(ctx, key, bytes.NewReader(nil), 0, objstore.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	segments := func(dir string, n int) {
		for i := range n {
			put(fmt.Sprintf("%s/%020d-%016x.log", dir, i*10, i))
		}
	}
	segments("tl/big-0", big)
	put("tl/big-0/manifest")
	segments("tl/big-1", big)
	put("tl/big-1/manifest")
	segments("tl/orphan-0", min(big, 2000)) // objects, no manifest
	for i := range min(big, 3000) {
		put(fmt.Sprintf("tl/wal/%016x/%020d", 7, i+1))
	}
	for _, p := range []string{"tl/small-0", "tl/small-2", "tl/zed-0"} {
		segments(p, 3)
		put(p + "/manifest")
	}
	put("tl/small-1/00000000000000000000-0000000000000001.log") // no manifest
	put("other/small-5/manifest")                               // another root

	before := store.Stats()
	got, err := broker.BucketPartitions(ctx, store, "tl")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int32{"big": 2, "small": 3, "zed": 1}
	if !maps.Equal(got, want) {
		t.Fatalf("found %v, want %v", got, want)
	}
	after := store.Stats()
	lists, heads := after.Requests[objstore.OpList]-before.Requests[objstore.OpList], after.Requests[objstore.OpHead]-before.Requests[objstore.OpHead]
	// Skipping: a page or two a long folder, a HEAD for each long
	// partition (listed whole, 2 x 20,000 big objects are 46 pages).
	if lists > 10 || heads > 3 {
		t.Fatalf("%d LISTs and %d HEADs to find 3 topics", lists, heads)
	}
	t.Logf("%d LISTs, %d HEADs", lists, heads)
}
