package tiered_test

import (
	"math/rand/v2"
	"path/filepath"
	"testing"
	"time"

	"github.com/tierlog/tierlog/objstore"
	"github.com/tierlog/tierlog/objstore/mem"
	"github.com/tierlog/tierlog/tiered"
)

// TestCompactBudgetExhausted: with the bucket's cleaner's I/O budget
// exhausted (a byte a second: a round stalls in its first batch), the
// service goes on uploading another partition's segments, and the
// compacted partition itself takes appends, serves reads and uploads
// meanwhile: the round holds neither partition's lock while it reads.
func TestCompactBudgetExhausted(t *testing.T) {
	store := objstore.New(mem.New(), "mem://compact-budget", objstore.Options{})
	m := fastManager
	m.CompactBytesPerSecond = 1
	b := openTieredBackend(t, filepath.Join(t.TempDir(), "logs"), store, tiered.BackendOptions{Manager: m})
	compacted, err := b.Open(ctx, "users", 0, cfg(t, "cleanup.policy", "compact", "remote.storage.enable", "true", "segment.bytes", "1500",
		"local.retention.bytes", "0", "file.delete.delay.ms", "0", "min.cleanable.dirty.ratio", "0.01"))
	if err != nil {
		t.Fatal(err)
	}
	cp := compacted.(*tiered.Partition)
	if err := cp.BecomeLeader(ctx, 1); err != nil {
		t.Fatal(err)
	}
	plain, err := b.Open(ctx, "orders", 0, cfg(t, tieredCfg...))
	if err != nil {
		t.Fatal(err)
	}
	pp := plain.(*tiered.Partition)
	if err := pp.BecomeLeader(ctx, 1); err != nil {
		t.Fatal(err)
	}
	epoch := int32(1)
	m2 := &compactModel{recs: map[int64]modelRecord{}}
	w := &compactWriter{t: t, rng: rand.New(rand.NewPCG(5, 6)), model: m2, keys: 10, epoch: &epoch}
	for range 60 {
		w.batch(cp, 5, false, false)
	}
	// The service uploads them, and its first round stalls on its budget.
	eventually(t, 30*time.Second, "a round of the bucket's cleaner under way", func() bool {
		segs, _ := cp.RemoteSize()
		return segs > 3 && (cp.Metrics().CompactRunning.Load() > 0)
	})
	// Meanwhile: the other partition's segments upload, and the
	// compacted one appends, reads and uploads.
	produce(t, pp, 2000)
	eventually(t, 30*time.Second, "the other partition's segments in the bucket", func() bool {
		lag, _ := pp.CopyLag()
		return lag == 0 && pp.Offsets().TieredEnd > 0
	})
	before := cp.Offsets().TieredEnd
	for range 20 {
		w.batch(cp, 5, false, false)
	}
	eventually(t, 30*time.Second, "the compacted partition's new segments in the bucket", func() bool {
		return cp.Offsets().TieredEnd > before
	})
	checkCompacted(t, cp, m2, "during the stalled round")
	if !(cp.Metrics().CompactRunning.Load() > 0) {
		t.Fatal("the stalled round ended: the budget was not held")
	}
	if n := cp.Metrics().CompactRounds.Load(); n != 0 {
		t.Fatalf("%d rounds ended within a budget of a byte a second", n)
	}
}
