package tiered

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/tierlog/tierlog/objstore"
	"github.com/tierlog/tierlog/objstore/mem"
	"github.com/tierlog/tierlog/testing/faultstore"
	"github.com/tierlog/tierlog/wal"
)

// One listing of a writer serves every replica partition that follows it
// while fresh; an older one, or one that began above what is asked, is
// listed again.
func TestWALListsShareOneListing(t *testing.T) {
	ctx := context.Background()
	d := faultstore.Wrap(mem.New(), 1)
	lists := d.Add(faultstore.Rule{Op: objstore.OpList, Every: 1, Fault: faultstore.Hook, Hook: func(objstore.Op, string) {}})
	store := objstore.New(d, "mem://lists", objstore.Options{})
	defer store.Close()
	l := wal.NewLayout("tl")
	w := wal.WriterID{7}
	for seq := uint64(1); seq <= 5; seq++ {
		b, _ := wal.EncodeFence(wal.Footer{Writer: w, Sequence: seq})
		if _, err := store.Put(ctx, l.Key(w, seq), bytes.NewReader(b), int64(len(b)), objstore.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	c := walLists{fresh: time.Second}
	now := time.Unix(1000, 0)
	seqs := func(after uint64, at time.Time) []uint64 {
		t.Helper()
		objs, err := c.list(ctx, store, l, w, after, at)
		if err != nil {
			t.Fatal(err)
		}
		var out []uint64
		for _, o := range objs {
			out = append(out, o.seq)
		}
		return out
	}
	if got := seqs(1, now); len(got) != 4 || got[0] != 2 {
		t.Fatalf("above 1: %v", got)
	}
	if got := seqs(3, now.Add(time.Millisecond)); len(got) != 2 || got[0] != 4 || lists.Fired() != 1 {
		t.Fatalf("above 3 from the fresh listing: %v, %d LISTs", got, lists.Fired())
	}
	if got := seqs(0, now.Add(2*time.Millisecond)); len(got) != 5 || lists.Fired() != 2 {
		t.Fatalf("above 0 (below the listing's start): %v, %d LISTs", got, lists.Fired())
	}
	if got := seqs(4, now.Add(2*time.Second)); len(got) != 1 || lists.Fired() != 3 {
		t.Fatalf("above 4 once stale: %v, %d LISTs", got, lists.Fired())
	}
}

// TestReplicaSkipsRemovedFinalExtent: a number below the writer's newest
// four that is missing is skipped as settled, and WAL gc may have removed
// the object holding a partition's final extent (consolidated past in a
// manifest newer than the replica's) while an older object still holds a
// failed copy of the same offsets (kept for another partition). The
// chain of what was read then holds the failed bytes below the mark: the
// skip is recorded, and followWALLocked serves nothing until a step whose
// manifest was read after it. (Found in review: the replica served the
// failed copy.)
func TestReplicaSkipsRemovedFinalExtent(t *testing.T) {
	ctx := context.Background()
	store := objstore.New(mem.New(), "mem://review-skip", objstore.Options{})
	defer store.Close()
	w, err := wal.NewWriter(store, wal.Options{Root: "tl", CommitInterval: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close(ctx)
	tp := wal.TopicPartition{Topic: "t", Partition: 0}
	x := wal.TopicPartition{Topic: "x", Partition: 0}
	w.Lead(tp, 1)
	w.Lead(x, 1)
	put := func(p wal.TopicPartition, data string, first, last int64) wal.Location {
		t.Helper()
		a, err := w.Append(ctx, p, []byte(data), first, last)
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		if err := a.Wait(ctx); err != nil {
			t.Fatal(err)
		}
		return a.Location()
	}
	// Object 1: tp 10..19 that the origin then failed (modelled by a
	// Reset: the caller truncated back to 10), beside x's records.
	a1, _ := w.Append(ctx, tp, []byte("OLD-failed"), 10, 19)
	put(x, "x1", 0, 0)
	a1.Wait(ctx)
	w.Reset(tp)
	// Object 2: tp 10..19 again, other records: acknowledged.
	final := put(tp, "NEW-final!", 10, 19)
	w.Mark(tp, 1, 20)
	for i := int64(1); i <= 6; i++ {
		put(x, "x", i, i)
	}
	// WAL gc removes object 2 (tp consolidated past 19 in a manifest the
	// replica has not read yet; x keeps object 1).
	if err := store.Delete(ctx, final.Key); err != nil {
		t.Fatal(err)
	}
	p := &Partition{store: store, caches: NewCaches(CacheOptions{}), opts: Options{Now: time.Now}}
	r := &replicaWAL{writer: w.ID(), epoch: 1, acked: -1}
	if err := p.readWriterObjects(ctx, w.Layout(), tp, r); err != nil {
		t.Fatal(err)
	}
	if !r.skipped {
		t.Fatal("the replica read past a number gc removed and did not record the skip: it would serve its chain from this step's manifest")
	}
	// What it would have served from this step's manifest: the failed
	// copy (the reason for the rule).
	failed := false
	for _, sp := range wal.Chain(10, r.own) {
		if sp.From < max(int64(10), r.acked) && sp.Sequence != final.Sequence {
			failed = true
		}
	}
	if !failed {
		t.Fatal("the test's chain holds no failed copy below the mark: it tested nothing")
	}
}
