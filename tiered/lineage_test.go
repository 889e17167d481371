package tiered_test

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/local"
	"github.com/tierlog/tierlog/objstore"
	"github.com/tierlog/tierlog/objstore/mem"
	"github.com/tierlog/tierlog/tiered"
)

// TestWrongBucketRefused: a partition directory pointed at another bucket
// holding a partition of the same name, at a higher generation (a wrong
// store URL), refuses its manifest: the partition is offline, naming both
// lineages, writes nothing to that bucket and deletes nothing on disk; a
// tool's read-only view refuses it the same way. Before manifests carried
// a lineage, the higher generation was adopted as this partition's own.
func TestWrongBucketRefused(t *testing.T) {
	c := cfg(t, tieredCfg...)
	right := objstore.New(mem.New(), "mem://right", objstore.Options{})
	wrong := objstore.New(mem.New(), "mem://wrong", objstore.Options{})
	dir := filepath.Join(t.TempDir(), "orders-0")
	p := open(t, dir, right, 1, c)
	produce(t, p, 1000)
	if _, err := p.Offload(ctx); err != nil {
		t.Fatal(err)
	}
	mine := manifestOf(t, p)
	if mine.Lineage == ([8]byte{}) {
		t.Fatal("the partition's first manifest has no lineage")
	}
	if st, ok, err := local.ReadTierState(dir); err != nil || !ok || st.Lineage != mine.Lineage {
		t.Fatalf("the directory recorded %+v (%v, %v); want lineage %x", st, ok, err, mine.Lineage)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}

	// Another cluster's partition of the same name, further along.
	other := open(t, filepath.Join(t.TempDir(), "orders-0"), wrong, 1, c)
	for range 4 {
		produce(t, other, 1000)
		if err := other.Roll(); err != nil {
			t.Fatal(err)
		}
		if _, err := other.Offload(ctx); err != nil {
			t.Fatal(err)
		}
	}
	theirs := manifestOf(t, other)
	if theirs.Generation <= mine.Generation || theirs.Lineage == mine.Lineage {
		t.Fatalf("the other bucket's manifest: generation %d, lineage %x; this one's %d, %x", theirs.Generation, theirs.Lineage, mine.Generation, mine.Lineage)
	}
	if err := other.Close(); err != nil {
		t.Fatal(err)
	}
	key := "tl/orders-0/manifest"
	before := objectBytes(t, wrong, key)
	files := segmentFiles(t, dir)

	l, err := local.Open(dir, local.Options{Config: c, LogStartOffset: -1, HighWatermark: -1})
	if err != nil {
		t.Fatal(err)
	}
	p, err = tiered.Open(ctx, l, tiered.Options{Store: wrong, Prefix: "tl/orders-0", LeaderEpoch: 2})
	if err == nil {
		defer p.Close()
		err = p.Attach(ctx)
		_, _ = p.Offload(ctx)
		_, _ = p.ApplyRetention(ctx)
	} else {
		l.Close()
	}
	if !errors.Is(err, backend.ErrManifestRolledBack) || !strings.Contains(err.Error(), "another partition's") ||
		!strings.Contains(err.Error(), hex.EncodeToString(mine.Lineage[:])) || !strings.Contains(err.Error(), hex.EncodeToString(theirs.Lineage[:])) {
		t.Fatalf("a directory over another partition's bucket: %v; want it refused, naming both lineages", err)
	}
	if !bytes.Equal(objectBytes(t, wrong, key), before) {
		t.Fatal("the refused partition wrote to the other bucket's manifest")
	}
	if l := lost(files, segmentFiles(t, dir)); len(l) > 0 {
		t.Fatalf("the refused partition deleted %v", l)
	}

	// A tool's read-only view.
	ro, err := local.Open(dir, local.Options{Config: c, ReadOnly: true, LogStartOffset: -1, HighWatermark: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	if rp, err := tiered.Open(ctx, ro, tiered.Options{Store: wrong, Prefix: "tl/orders-0"}); err == nil {
		_, err = rp.Read(ctx, 0, backend.ReadOptions{MaxBytes: 1 << 10})
		rp.Close()
		if !strings.Contains(fmt.Sprint(err), "another partition's") {
			t.Fatalf("a read-only view over another partition's bucket read: %v", err)
		}
	} else if !strings.Contains(err.Error(), "another partition's") {
		t.Fatalf("a read-only view over another partition's bucket: %v", err)
	}

	// The right bucket still opens.
	l, err = local.Open(dir, local.Options{Config: c, LogStartOffset: -1, HighWatermark: -1})
	if err != nil {
		t.Fatal(err)
	}
	p, err = tiered.Open(ctx, l, tiered.Options{Store: right, Prefix: "tl/orders-0", LeaderEpoch: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if _, err := p.Offload(ctx); err != nil {
		t.Fatalf("the right bucket: %v", err)
	}
}
