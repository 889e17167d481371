package tiered_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/objstore"
	"github.com/tierlog/tierlog/objstore/mem"
	"github.com/tierlog/tierlog/testing/faultstore"
	"github.com/tierlog/tierlog/tiered"
	"github.com/tierlog/tierlog/wal"
)

// TestCompactedDisklessModel is the model test of a compacted diskless
// partition: two Backends over one bucket (their services quiet: every
// step is the test's), random keyed appends with tombstones and
// committed and aborted transactions acknowledged through the WAL,
// consolidation, local retention of the leader and the follower, rounds
// of the bucket's cleaner (forced or by ratio), rounds with a request
// failing at the k-th call (WAL writes aside: an append is acknowledged
// or not, never lost once acknowledged), leader changes between the
// Backends and a Backend losing its disk. After every step the leader serves only
// records given, at their offsets, unaltered, each key's latest among
// them, no offset twice; at the end the bucket holds every segment,
// cleaned.
func TestCompactedDisklessModel(t *testing.T) {
	for seed := range uint64(4) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { runCompactedDiskless(t, seed) })
	}
}

func runCompactedDiskless(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 13))
	faults := faultstore.Wrap(mem.New(), seed)
	store := objstore.New(faults, "mem://compacted-diskless", objstore.Options{})
	c := cfg(t, "cleanup.policy", "compact", "diskless.enable", "true", "segment.bytes", "1500", "local.retention.ms", "0",
		"delete.retention.ms", "86400000", "file.delete.delay.ms", "0", "min.cleanable.dirty.ratio", "0.01")
	dirs := [2]string{filepath.Join(t.TempDir(), "a"), filepath.Join(t.TempDir(), "b")}
	var backends [2]*tiered.Backend
	var parts [2]*tiered.Partition
	quiet := fastManager
	quiet.TaskInterval = time.Hour
	quiet.DisklessCommitInterval = 5 * time.Millisecond
	openAt := func(i int) {
		backends[i] = openTieredBackend(t, dirs[i], store, tiered.BackendOptions{Manager: quiet})
		p, err := backends[i].Open(ctx, "users", 0, c)
		if err != nil {
			t.Fatal(err)
		}
		parts[i] = p.(*tiered.Partition)
	}
	openAt(0)
	openAt(1)
	epoch := int32(1)
	leader := 0
	if err := parts[0].BecomeLeader(ctx, epoch); err != nil {
		t.Fatal(err)
	}
	if err := parts[1].BecomeFollower(ctx, epoch); err != nil {
		t.Fatal(err)
	}
	m := &compactModel{recs: map[int64]modelRecord{}}
	w := &compactWriter{t: t, rng: rng, model: m, keys: 30, epoch: &epoch}
	opts := tiered.CompactOptions{MemoryBytes: 1 << 20, ScratchDir: t.TempDir()}
	// ack flushes the leader: its appends are acknowledged, or, when the
	// WAL object holding them failed (a leader that leads again may find
	// its next object number fenced by an earlier claim), not: a
	// producer would send them again; the partition truncates them at its
	// next append, and the model forgets them.
	unacked := 0
	ack := func(what string) {
		p := parts[leader]
		err := p.Flush()
		if err == nil {
			return
		}
		if !errors.Is(err, backend.ErrStorage) {
			t.Fatalf("%s: flush: %v", what, err)
		}
		hw := p.Offsets().HighWatermark
		for off := range m.recs {
			if off >= hw {
				delete(m.recs, off)
			}
		}
		m.end = hw
		unacked++
	}
	changeLeader := func() {
		ack("before a leader change")
		epoch++
		if err := parts[leader].BecomeFollower(ctx, epoch); err != nil {
			t.Fatal(err)
		}
		leader = 1 - leader
		if err := parts[leader].BecomeLeader(ctx, epoch); err != nil {
			t.Fatal(err)
		}
	}
	rounds, failed, changes, losses := 0, 0, 0, 0
	for step := range 200 {
		p := parts[leader]
		what := ""
		switch op := rng.IntN(20); {
		case op < 10:
			what = "append"
			w.batch(p, 1+rng.IntN(12), false, false)
		case op < 12:
			what = "committed transaction"
			w.batch(p, 1+rng.IntN(6), true, true)
		case op < 13:
			what = "aborted transaction"
			w.batch(p, 1+rng.IntN(6), true, false)
		case op < 14:
			what = "consolidate"
			if rng.IntN(2) == 0 {
				if err := p.Roll(); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := p.Offload(ctx); err != nil {
				t.Fatalf("step %d: offload: %v", step, err)
			}
		case op < 15:
			what = "local retention"
			if _, err := p.ApplyRetention(ctx); err != nil {
				t.Fatalf("step %d: retention: %v", step, err)
			}
			if err := parts[1-leader].FollowerStep(ctx); err != nil {
				t.Fatalf("step %d: the follower's step: %v", step, err)
			}
		case op < 17:
			what = "compact"
			o := opts
			o.Force = rng.IntN(2) == 0
			st, err := p.CompactRemote(ctx, o)
			if err != nil {
				t.Fatalf("step %d: compact: %v", step, err)
			}
			if st.SegmentsReplaced > 0 {
				rounds++
			}
		case op < 18:
			what = "compact with a failing request, then a leader change"
			ack(what)                                 // every append settled: a fault fails no WAL write
			if _, err := p.Offload(ctx); err != nil { // something to clean
				t.Fatal(err)
			}
			if _, err := p.ApplyRetention(ctx); err != nil {
				t.Fatal(err)
			}
			k := 1 + rng.IntN(8)
			fault := []faultstore.Fault{faultstore.FailBefore, faultstore.FailAfter, faultstore.Permanent}[rng.IntN(3)]
			h := faults.Add(faultstore.Rule{Nth: k, Fault: fault,
				Match: func(_ objstore.Op, key string) bool { return !strings.Contains(key, "/"+wal.Dir+"/") }})
			o := opts
			o.Force = true
			if _, err := p.CompactRemote(ctx, o); err != nil || h.Fired() > 0 {
				failed++ // a fault fired (objstore may have retried it away)
			}
			h.Remove()
			// A lost commit may fence the writer: the next leader's claim
			// reconciles.
			changeLeader()
			changes++
		case op < 19:
			what = "leader change"
			changeLeader()
			changes++
		default:
			what = "the follower's Backend loses its disk"
			f := 1 - leader
			if err := backends[f].Close(); err != nil {
				t.Fatal(err)
			}
			if err := os.RemoveAll(dirs[f]); err != nil {
				t.Fatal(err)
			}
			openAt(f)
			if err := parts[f].BecomeFollower(ctx, epoch); err != nil {
				t.Fatal(err)
			}
			losses++
		}
		p = parts[leader]
		ack(fmt.Sprintf("step %d (%s)", step, what))
		t.Logf("step %d (%s): leader %d epoch %d %+v", step, what, leader, epoch, p.Offsets())
		checkCompacted(t, p, m, fmt.Sprintf("step %d (%s)", step, what))
	}
	if rounds == 0 || failed == 0 || changes == 0 || losses == 0 {
		t.Fatalf("%d rounds replaced segments, %d met a fault, %d leader changes, %d disks lost: the test tests too little", rounds, failed, changes, losses)
	}

	// Everything consolidated into the bucket, off the disk, and cleaned.
	p := parts[leader]
	w.batch(p, 1, false, false)
	ack("the end")
	w.batch(p, 1, false, false) // after a failed flush, truncates and appends again
	if err := p.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := p.Roll(); err != nil {
		t.Fatal(err)
	}
	var st tiered.CompactStats
	eventually(t, 20*time.Second, "the bucket never held every closed segment, cleaned", func() bool {
		if _, err := p.Offload(ctx); err != nil {
			return false
		}
		if _, err := p.ApplyRetention(ctx); err != nil {
			return false
		}
		var err error
		st, err = p.CompactRemote(ctx, tiered.CompactOptions{Force: true, ScratchDir: t.TempDir()})
		return err == nil && p.Head().CleanedTo() == p.Offsets().LocalLogStart && p.Offsets().LocalLogStart == m.end
	})
	got := checkCompacted(t, p, m, "the end")
	latest := m.latest()
	if len(got) != len(latest) {
		t.Fatalf("%d records read at the end, want one per key (%d): the bucket is not cleaned", len(got), len(latest))
	}
	t.Logf("%d records given, %d read at the end; %d rounds replaced segments, %d met a fault; %d leader changes, %d disks lost; %d flushes failed; last round %+v",
		len(m.recs), len(got), rounds, failed, changes, losses, unacked, st)
}

// TestCompactedDisklessByTheService: the tiering service consolidates a
// compacted diskless partition, lets local retention take its segments
// off the disk and cleans them in the bucket, with nothing asked of it;
// the partition serves each key's latest value throughout.
func TestCompactedDisklessByTheService(t *testing.T) {
	store := objstore.New(mem.New(), "mem://compacted-diskless-service", objstore.Options{})
	b := openDisklessBackend(t, filepath.Join(t.TempDir(), "logs"), store)
	pp, err := b.Open(ctx, "users", 0, cfg(t, "cleanup.policy", "compact", "diskless.enable", "true", "segment.bytes", "1500",
		"local.retention.ms", "0", "file.delete.delay.ms", "0", "min.cleanable.dirty.ratio", "0.01"))
	if err != nil {
		t.Fatal(err)
	}
	p := pp.(*tiered.Partition)
	if err := p.BecomeLeader(ctx, 1); err != nil {
		t.Fatal(err)
	}
	epoch := int32(1)
	m := &compactModel{recs: map[int64]modelRecord{}}
	w := &compactWriter{t: t, rng: rand.New(rand.NewPCG(8, 9)), model: m, keys: 10, epoch: &epoch}
	for range 60 {
		w.batch(p, 5, false, false)
	}
	if err := p.Flush(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the service never cleaned the partition in the bucket", func() bool {
		return p.Metrics().CompactSegmentsReplaced.Load() > 0 && p.Head().CleanedTo() > 0
	})
	got := checkCompacted(t, p, m, "after the service's rounds")
	if len(got) >= len(m.recs) {
		t.Fatalf("%d records read of the %d given: nothing was cleaned", len(got), len(m.recs))
	}
}
