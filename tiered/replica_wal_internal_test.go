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
