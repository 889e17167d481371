package tiered_test

import (
	"bytes"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/tierlog/tierlog/local"
	"github.com/tierlog/tierlog/manifest"
	"github.com/tierlog/tierlog/objstore"
	"github.com/tierlog/tierlog/objstore/mem"
	"github.com/tierlog/tierlog/tiered"
)

// TestGCKeepsObjectsPastARolledBackManifest: the bucket's manifest goes
// back to an older generation (a restored backup) while the objects the
// newer ones named stay. Nothing names them now, and they are older than
// the grace, but they hold offsets past the manifest's end: gc keeps them
// all and says so (ErrPastEnd naming them), removing them only when told.
func TestGCKeepsObjectsPastARolledBackManifest(t *testing.T) {
	store := objstore.New(mem.New(), "mem://rollback-gc", objstore.Options{})
	l, err := local.Open(filepath.Join(t.TempDir(), "orders-0"), local.Options{Config: cfg(t, "segment.bytes", "65536", "retention.ms", "-1"), LogStartOffset: -1, HighWatermark: -1})
	if err != nil {
		t.Fatal(err)
	}
	p, err := tiered.Open(ctx, l, tiered.Options{Store: store, Prefix: "tl/orders-0", LeaderEpoch: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	produce(t, p, 1000)
	if _, err := p.Offload(ctx); err != nil {
		t.Fatal(err)
	}
	old, err := store.ReadAll(ctx, "tl/orders-0/manifest", 0, -1)
	if err != nil {
		t.Fatal(err)
	}
	oldEnd := manifestOf(t, p).Segments[len(manifestOf(t, p).Segments)-1].LastOffset
	produce(t, p, 3000)
	if _, err := p.Offload(ctx); err != nil {
		t.Fatal(err)
	}
	newer := manifestOf(t, p)
	var past []string
	for _, s := range newer.Segments {
		if s.LastOffset > oldEnd {
			for _, suf := range s.Objects() {
				past = append(past, "tl/orders-0/"+s.Name(suf))
			}
		}
	}
	if len(past) == 0 {
		t.Fatal("the second offload uploaded nothing past the first's end")
	}
	if _, err := store.Put(ctx, "tl/orders-0/manifest", bytes.NewReader(old), int64(len(old)), objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	later := func() time.Time { return time.Now().Add(3 * time.Hour) }
	for _, dry := range []bool{true, false} {
		gone, err := tiered.GC(ctx, store, "tl/orders-0", tiered.GCOptions{DryRun: dry, Now: later})
		var pe *tiered.PastEndError
		if !errors.As(err, &pe) || !errors.Is(err, tiered.ErrPastEnd) || len(pe.Keys) != len(past) {
			t.Fatalf("gc (dry run %v) over a rolled-back manifest: %v (kept %v); want ErrPastEnd keeping the %d objects past offset %d", dry, err, pe, len(past), oldEnd)
		}
		for _, k := range gone {
			for _, want := range past {
				if k == want {
					t.Fatalf("gc (dry run %v) removed %s, past the manifest's end", dry, k)
				}
			}
		}
	}
	m, err := manifest.Decode(old)
	if err != nil {
		t.Fatal(err)
	}
	if missing := missingObjects(t, store, newer); len(missing) > 0 {
		t.Fatalf("objects the newer manifest named are gone: %v", missing)
	}
	if missing := missingObjects(t, store, m); len(missing) > 0 {
		t.Fatalf("objects the older manifest names are gone: %v", missing)
	}
	gone, err := tiered.GC(ctx, store, "tl/orders-0", tiered.GCOptions{Now: later, RemovePastEnd: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(gone) < len(past) {
		t.Fatalf("gc with RemovePastEnd removed %d objects, want at least the %d past the end", len(gone), len(past))
	}
	if missing := missingObjects(t, store, m); len(missing) > 0 {
		t.Fatalf("gc with RemovePastEnd removed objects the manifest names: %v", missing)
	}
}
