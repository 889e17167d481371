package tiered_test

import (
	"path/filepath"
	"testing"

	"github.com/tierlog/tierlog/objstore"
	"github.com/tierlog/tierlog/objstore/mem"
)

// TestTieredEndFiresChanged: an upload's commit moves Offsets().TieredEnd
// to the offset after the manifest's last one and fires Changed by itself
// (the high watermark moved before it, so nothing else would wake a
// waiter); an Offload with nothing to upload fires nothing. A
// DeleteRecordsBefore past the bucket's end leaves the tiered end where
// the bucket ends.
func TestTieredEndFiresChanged(t *testing.T) {
	store := objstore.New(mem.New(), "mem://tieredend", objstore.Options{})
	p := open(t, filepath.Join(t.TempDir(), "orders-0"), store, 1, cfg(t, "segment.bytes", "16384", "retention.ms", "-1"))
	defer p.Close()
	produce(t, p, 500) // and the high watermark to the log end
	if o := p.Offsets(); o.TieredEnd != 0 {
		t.Fatalf("tiered end %d before any upload (offsets %+v)", o.TieredEnd, o)
	}
	ch := p.Changed()
	if n, err := p.Offload(ctx); err != nil || n == 0 {
		t.Fatalf("Offload = %d, %v", n, err)
	}
	select {
	case <-ch:
	default:
		t.Fatal("an upload's commit moved the tiered end without firing Changed")
	}
	segs := manifestOf(t, p).Segments
	end := segs[len(segs)-1].LastOffset + 1
	if o := p.Offsets(); o.TieredEnd != end || end >= o.LogEnd {
		t.Fatalf("tiered end %d after the upload, want %d, the manifest's last offset + 1 (offsets %+v)", o.TieredEnd, end, o)
	}
	ch = p.Changed()
	if _, err := p.Offload(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ch:
		t.Fatal("an Offload with nothing to upload fired Changed")
	default:
	}
	if err := p.DeleteRecordsBefore(ctx, end+5); err != nil {
		t.Fatal(err)
	}
	if o := p.Offsets(); o.TieredEnd != end || o.LogStart != end+5 {
		t.Fatalf("after DeleteRecordsBefore(%d): %+v; want the tiered end still %d", end+5, o, end)
	}
}
