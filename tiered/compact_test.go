package tiered_test

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/local"
	"github.com/tierlog/tierlog/objstore"
	"github.com/tierlog/tierlog/objstore/mem"
	"github.com/tierlog/tierlog/record"
	"github.com/tierlog/tierlog/testing/faultstore"
	"github.com/tierlog/tierlog/tiered"
)

// compactModel is what a compacted partition was given: every data
// record by offset, and which were of aborted transactions.
type compactModel struct {
	recs map[int64]modelRecord
	end  int64 // the log end after the last append
}

type modelRecord struct {
	key, value string
	tombstone  bool
	aborted    bool
}

// latest returns, per key, the offset of its last record that is not
// aborted data.
func (m *compactModel) latest() map[string]int64 {
	out := map[string]int64{}
	for off, r := range m.recs {
		if !r.aborted && off >= out[r.key] {
			out[r.key] = off
		}
	}
	return out
}

// compactWriter appends keyed batches to a compacted partition and keeps
// the model.
type compactWriter struct {
	t     *testing.T
	rng   *rand.Rand
	model *compactModel
	keys  int
	seq   int
	pid   int64
	epoch *int32 // the epoch the partition leads at
	b     record.Builder
}

// batch appends n records with keys drawn from the pool (one in ten a
// tombstone): plain, or as producer pid's transaction, which then commits
// or aborts.
func (w *compactWriter) batch(p backend.Partition, n int, txn, commit bool) {
	h := record.NewBatchHeader()
	pid := int64(-1)
	if txn {
		w.pid++
		pid = w.pid
		h.ProducerID, h.ProducerEpoch, h.BaseSequence, h.Transactional = pid, 0, 0, true
	}
	w.b.Reset(h)
	var recs []modelRecord
	ts := time.Now().UnixMilli()
	for range n {
		w.seq++
		k := fmt.Sprintf("key-%03d", w.rng.IntN(w.keys))
		r := modelRecord{key: k, value: fmt.Sprintf("%s@%d", k, w.seq)}
		var v []byte
		if w.rng.IntN(10) == 0 {
			r.tombstone = true
		} else {
			v = []byte(r.value)
		}
		w.b.Append(ts, []byte(k), v, nil)
		recs = append(recs, r)
	}
	data, err := w.b.Build()
	if err != nil {
		w.t.Fatal(err)
	}
	info, err := p.Append(ctx, append([]byte(nil), data...), backend.AppendOptions{AssignOffsets: true, LeaderEpoch: *w.epoch})
	if err != nil {
		w.t.Fatalf("append: %v", err)
	}
	for i, r := range recs {
		r.aborted = txn && !commit
		w.model.recs[info.FirstOffset+int64(i)] = r
	}
	if txn {
		marker, err := w.b.BuildEndTxnMarker(record.EndTxnMarker{ProducerID: pid, CoordinatorEpoch: 1, Commit: commit, Timestamp: ts})
		if err != nil {
			w.t.Fatal(err)
		}
		if _, err := p.Append(ctx, append([]byte(nil), marker...), backend.AppendOptions{AssignOffsets: true, LeaderEpoch: *w.epoch, Coordinator: true}); err != nil {
			w.t.Fatalf("append marker: %v", err)
		}
	}
	w.model.end = p.Offsets().LogEnd
	if err := p.SetHighWatermark(w.model.end); err != nil {
		w.t.Fatal(err)
	}
}

// readAllRecords reads p from its log start to its high watermark and
// returns each data record by offset, failing on an offset read twice or
// out of order.
func readAllRecords(t *testing.T, p backend.Partition) (map[int64]modelRecord, []int64) {
	t.Helper()
	out := map[int64]modelRecord{}
	var order []int64
	offs := p.Offsets()
	last := int64(-1)
	var it record.Iterator
	for off := offs.LogStart; off < offs.HighWatermark; {
		recs, err := p.Read(ctx, off, backend.ReadOptions{MaxBytes: 64 << 10, MinOneBatch: true, Isolation: backend.ReadHighWatermark})
		if err != nil {
			t.Fatalf("read at %d: %v", off, err)
		}
		var buf bytes.Buffer
		recs.WriteTo(&buf)
		recs.Close()
		if buf.Len() == 0 {
			break
		}
		sc := record.NewScanner(bytes.NewReader(buf.Bytes()), 0, int64(buf.Len()), record.ScanOptions{Validate: true})
		for sc.Next() {
			e := sc.Entry()
			if e.BaseOffset <= last {
				t.Fatalf("read at %d: a batch of offsets %d..%d after offset %d", off, e.BaseOffset, e.LastOffset, last)
			}
			b := e.Batch()
			if !b.IsControl() {
				if err := it.Reset(b); err != nil {
					t.Fatal(err)
				}
				for it.Next() {
					r := it.Record()
					if r.Offset <= last {
						t.Fatalf("offset %d read after %d", r.Offset, last)
					}
					last = r.Offset
					out[r.Offset] = modelRecord{key: string(r.Key), value: string(r.Value), tombstone: r.Value == nil}
					order = append(order, r.Offset)
				}
				if it.Err() != nil {
					t.Fatal(it.Err())
				}
			}
			last = e.LastOffset
			off = e.LastOffset + 1
		}
		if sc.Err() != nil {
			t.Fatalf("read at %d: %v", off, sc.Err())
		}
	}
	return out, order
}

// checkCompacted holds what p serves to the model: every record read is
// the one given at its offset, unaltered; the latest record of every key
// (aborted data aside) is there.
func checkCompacted(t *testing.T, p backend.Partition, m *compactModel, step string) map[int64]modelRecord {
	t.Helper()
	got, _ := readAllRecords(t, p)
	for off, r := range got {
		want, ok := m.recs[off]
		if !ok || want.key != r.key || want.tombstone != r.tombstone || (!r.tombstone && want.value != r.value) {
			t.Fatalf("%s: offset %d reads %+v; it was given %+v (known: %v)", step, off, r, want, ok)
		}
	}
	for k, off := range m.latest() {
		if _, ok := got[off]; !ok {
			t.Fatalf("%s: key %s's latest record (offset %d, %+v) is gone", step, k, off, m.recs[off])
		}
	}
	return got
}

// TestCompactedTieredModel is the model test of a compacted tiered
// partition: random keyed appends with tombstones, committed and aborted
// transactions, uploads, local retention, rounds of the bucket's cleaner
// (forced or by ratio), requests failing at the k-th call inside a round,
// and restarts at a new leader epoch. After every step, reading the
// partition from its start gives only records given at their offsets,
// unaltered, each key's latest one among them, no offset twice; at the
// end, with every segment in the bucket alone and cleaned, no record
// below the checkpoint is superseded by one the map saw.
func TestCompactedTieredModel(t *testing.T) {
	for seed := range uint64(3) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { runCompactedModel(t, seed) })
	}
}

func runCompactedModel(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 7))
	faults := faultstore.Wrap(mem.New(), seed)
	store := objstore.New(faults, "mem://compacted", objstore.Options{})
	dir := filepath.Join(t.TempDir(), "users-0")
	c := cfg(t, "cleanup.policy", "compact", "remote.storage.enable", "true", "segment.bytes", "1500",
		"local.retention.bytes", "4000", "delete.retention.ms", "86400000", "file.delete.delay.ms", "0")
	epoch := int32(1)
	p := open(t, dir, store, epoch, c)
	defer func() { p.Close() }()
	m := &compactModel{recs: map[int64]modelRecord{}}
	w := &compactWriter{t: t, rng: rng, model: m, keys: 40, epoch: &epoch}
	opts := tiered.CompactOptions{MemoryBytes: 1 << 20, ScratchDir: t.TempDir()}
	rounds, failed := 0, 0
	for step := range 300 {
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
		case op < 16:
			what = "offload"
			if _, err := p.Offload(ctx); err != nil {
				t.Fatalf("step %d: offload: %v", step, err)
			}
		case op < 18:
			what = "compact"
			o := opts
			o.Force = rng.IntN(2) == 0
			st, err := p.CompactRemote(ctx, o)
			if err != nil {
				t.Fatalf("step %d: compact: %v", step, err)
			}
			if st.Ran {
				rounds++
			}
		case op < 19:
			what = "compact with a failing request"
			k := 1 + rng.IntN(12)
			fault := []faultstore.Fault{faultstore.FailBefore, faultstore.FailAfter, faultstore.Permanent}[rng.IntN(3)]
			h := faults.Add(faultstore.Rule{Nth: k, Fault: fault})
			o := opts
			o.Force = true
			if _, err := p.CompactRemote(ctx, o); err != nil {
				failed++
			}
			h.Remove()
			// The writer may be fenced by its own lost commit: a restart
			// reconciles, as a broker's would.
			fallthrough
		default:
			what += ", restart at a new epoch"
			if err := p.Close(); err != nil {
				t.Fatal(err)
			}
			epoch++
			p = open(t, dir, store, epoch, c)
			if err := p.SetHighWatermark(p.Offsets().LogEnd); err != nil {
				t.Fatal(err)
			}
		}
		checkCompacted(t, p, m, fmt.Sprintf("step %d (%s)", step, what))
	}
	if rounds == 0 || failed == 0 {
		t.Fatalf("%d rounds ran, %d failed: the test tests too little", rounds, failed)
	}

	// Everything into the bucket alone, then cleaned.
	w.batch(p, 1, false, false)
	c2 := c
	c2.LocalRetentionBytes = 0
	if err := p.SetConfig(c2); err != nil {
		t.Fatal(err)
	}
	for range 2 { // a second pass uploads what the first rolled
		if _, err := p.Offload(ctx); err != nil {
			t.Fatal(err)
		}
	}
	st, err := p.CompactRemote(ctx, tiered.CompactOptions{Force: true, ScratchDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if !st.Ran || st.Checkpoint <= st.FirstDirty {
		t.Fatalf("the last round: %+v", st)
	}
	got := checkCompacted(t, p, m, "the end")
	// No record below the checkpoint is superseded by a record below the
	// mapped end, nor is aborted data.
	latestBelow := map[string]int64{}
	for off, r := range m.recs {
		if off < st.End && !r.aborted && off >= latestBelow[r.key] {
			latestBelow[r.key] = off
		}
	}
	offs := make([]int64, 0, len(got))
	for off := range got {
		offs = append(offs, off)
	}
	sort.Slice(offs, func(i, j int) bool { return offs[i] < offs[j] })
	for _, off := range offs {
		if off >= st.Checkpoint {
			break
		}
		r := m.recs[off]
		if r.aborted {
			t.Fatalf("aborted data at offset %d below the checkpoint %d", off, st.Checkpoint)
		}
		if l := latestBelow[r.key]; l > off {
			t.Fatalf("offset %d (%s) below the checkpoint %d is superseded by offset %d", off, r.key, st.Checkpoint, l)
		}
	}
	if mf := manifestOf(t, p); mf.CleanedTo != st.Checkpoint {
		t.Fatalf("the manifest's checkpoint is %d, the round's %d", mf.CleanedTo, st.Checkpoint)
	}
	t.Logf("%d records given, %d read at the end; %d rounds, %d failed; last round %+v", len(m.recs), len(got), rounds, failed, st)
}

// TestCompactedTopicAccepted: a compacted topic may be tiered (the
// bucket's cleaner cleans it), and a tiered one may become compacted, but
// not diskless (a topic is diskless or not from its creation; a diskless
// compacted one: compact_diskless_test.go). The local cleaner leaves a
// tiered log alone.
func TestCompactedTopicAccepted(t *testing.T) {
	store := objstore.New(mem.New(), "mem://compact", objstore.Options{})
	l, err := local.Open(filepath.Join(t.TempDir(), "users-0"), local.Options{Config: cfg(t, "cleanup.policy", "compact,delete")})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	p, err := tiered.Open(ctx, l, tiered.Options{Store: store, Prefix: "tl/users-0", LeaderEpoch: 1})
	if err != nil {
		t.Fatalf("tiered.Open of a compacted topic: %v", err)
	}
	if err := p.SetConfig(cfg(t, "remote.storage.enable", "true", "cleanup.policy", "compact", "diskless.enable", "true")); !errors.Is(err, backend.ErrInvalidConfig) {
		t.Fatalf("SetConfig(compact, diskless) of a classic partition: %v", err)
	}
	if err := p.SetConfig(cfg(t, "remote.storage.enable", "true", "cleanup.policy", "delete")); err != nil {
		t.Fatal(err)
	}
	if _, err := p.CompactRemote(ctx, tiered.CompactOptions{}); !errors.Is(err, backend.ErrInvalidConfig) {
		t.Fatalf("CompactRemote of a partition that is not compacted: %v", err)
	}
	if err := p.SetConfig(cfg(t, "remote.storage.enable", "true", "cleanup.policy", "compact")); err != nil {
		t.Fatalf("SetConfig(cleanup.policy=compact): %v", err)
	}
}

// TestCompactReplacedObjectsGoByGC: the objects of segments a round
// replaced stay while a kept manifest backup names them (a restore may
// take it) and within gc's grace; then gc removes them, and never an
// object the manifest names.
func TestCompactReplacedObjectsGoByGC(t *testing.T) {
	store := objstore.New(mem.New(), "mem://compact-gc", objstore.Options{})
	dir := filepath.Join(t.TempDir(), "users-0")
	c := cfg(t, "cleanup.policy", "compact", "remote.storage.enable", "true", "segment.bytes", "1500",
		"local.retention.bytes", "0", "file.delete.delay.ms", "0")
	epoch := int32(1)
	p := open(t, dir, store, epoch, c)
	defer p.Close()
	m := &compactModel{recs: map[int64]modelRecord{}}
	w := &compactWriter{t: t, rng: rand.New(rand.NewPCG(1, 2)), model: m, keys: 5, epoch: &epoch}
	for range 40 {
		w.batch(p, 8, false, false)
	}
	if _, err := p.Offload(ctx); err != nil {
		t.Fatal(err)
	}
	before := manifestOf(t, p)
	st, err := p.CompactRemote(ctx, tiered.CompactOptions{Force: true, MemoryBytes: 1 << 20, ScratchDir: t.TempDir()})
	if err != nil || st.SegmentsReplaced == 0 {
		t.Fatalf("compact: %+v, %v", st, err)
	}
	after := manifestOf(t, p)
	kept := map[string]bool{}
	for _, s := range after.Segments {
		for _, suf := range s.Objects() {
			kept["tl/orders-0/"+s.Name(suf)] = true
		}
	}
	var replaced []string
	for _, s := range before.Segments {
		for _, suf := range s.Objects() {
			if k := "tl/orders-0/" + s.Name(suf); !kept[k] {
				replaced = append(replaced, k)
			}
		}
	}
	if len(replaced) == 0 {
		t.Fatal("the round replaced no object")
	}
	exist := func() int {
		n := 0
		for _, k := range replaced {
			if _, err := store.Head(ctx, k); err == nil {
				n++
			}
		}
		return n
	}
	later := func() time.Time { return time.Now().Add(3 * time.Hour) }
	if _, err := tiered.GC(ctx, store, "tl/orders-0", tiered.GCOptions{Now: later}); err != nil {
		t.Fatal(err)
	}
	if n := exist(); n != len(replaced) {
		t.Fatalf("gc removed %d of the %d replaced objects while a kept backup names them", len(replaced)-n, len(replaced))
	}
	checkCompacted(t, p, m, "after the round")
	for range keptBackupsForTest {
		w.batch(p, 30, false, false)
		if _, err := p.Offload(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := tiered.GC(ctx, store, "tl/orders-0", tiered.GCOptions{}); err != nil {
		t.Fatal(err)
	}
	if n := exist(); n != len(replaced) {
		t.Fatalf("gc removed %d replaced objects within its grace", len(replaced)-n)
	}
	if _, err := tiered.GC(ctx, store, "tl/orders-0", tiered.GCOptions{Now: later}); err != nil {
		t.Fatal(err)
	}
	if n := exist(); n != 0 {
		t.Fatalf("%d of the %d replaced objects outlived gc once no backup named them", n, len(replaced))
	}
	if missing := missingObjects(t, store, manifestOf(t, p)); len(missing) > 0 {
		t.Fatalf("gc removed objects the manifest names: %v", missing)
	}
	checkCompacted(t, p, m, "after gc")
}

// keptBackupsForTest is how many commits later a manifest backup is gone
// (tiered's keptBackups).
const keptBackupsForTest = 2

// TestCompactedTieredTwoReplicas is the model test with a follower and
// leader changes: two partitions over one bucket, the follower appending
// what the leader appended (rolling where its own appends say), each
// doing its role's work (the leader uploads and cleans the bucket, the
// follower follows the manifest and applies local retention), and now
// and then the follower leading at the next epoch. After every step the
// leader serves what the model allows; at the end both replicas' local
// retention has deleted every closed segment the bucket holds, whoever
// cleaned it.
func TestCompactedTieredTwoReplicas(t *testing.T) {
	for seed := range uint64(2) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { runTwoReplicas(t, seed) })
	}
}

func runTwoReplicas(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 11))
	store := objstore.New(mem.New(), "mem://compacted-replicas", objstore.Options{})
	c := cfg(t, "cleanup.policy", "compact", "remote.storage.enable", "true", "segment.bytes", "1500",
		"local.retention.bytes", "3000", "delete.retention.ms", "86400000", "file.delete.delay.ms", "0")
	epoch := int32(1)
	leader := open(t, filepath.Join(t.TempDir(), "users-0"), store, epoch, c)
	follower := open(t, filepath.Join(t.TempDir(), "users-0"), store, 0, c)
	defer func() { leader.Close(); follower.Close() }()
	if err := follower.BecomeFollower(ctx, epoch); err != nil {
		t.Fatal(err)
	}
	m := &compactModel{recs: map[int64]modelRecord{}}
	w := &compactWriter{t: t, rng: rng, model: m, keys: 30, epoch: &epoch}
	opts := tiered.CompactOptions{MemoryBytes: 1 << 20, ScratchDir: t.TempDir(), Force: true}
	rounds, swaps := 0, 0
	for step := range 250 {
		what := ""
		switch op := rng.IntN(20); {
		case op < 10:
			what = "append"
			from := leader.Offsets().LogEnd
			w.batch(leader, 1+rng.IntN(10), rng.IntN(6) == 0, rng.IntN(2) == 0)
			replicateTo(t, leader, follower, from, leader.Offsets().LogEnd)
		case op < 13:
			what = "offload"
			if _, err := leader.Offload(ctx); err != nil {
				t.Fatalf("step %d: offload: %v", step, err)
			}
		case op < 16:
			what = "follower step"
			if err := follower.FollowerStep(ctx); err != nil {
				t.Fatalf("step %d: follower step: %v", step, err)
			}
		case op < 19:
			what = "compact"
			st, err := leader.CompactRemote(ctx, opts)
			if err != nil {
				t.Fatalf("step %d: compact: %v", step, err)
			}
			if st.SegmentsReplaced > 0 {
				rounds++
			}
		default:
			what = "leader change"
			epoch++
			if err := leader.BecomeFollower(ctx, epoch); err != nil {
				t.Fatal(err)
			}
			if err := follower.BecomeLeader(ctx, epoch); err != nil {
				t.Fatal(err)
			}
			leader, follower = follower, leader
			swaps++
		}
		checkCompacted(t, leader, m, fmt.Sprintf("step %d (%s)", step, what))
	}
	if rounds == 0 || swaps == 0 {
		t.Fatalf("%d rounds replaced segments, %d leader changes: the test tests too little", rounds, swaps)
	}
	// Everything in the bucket and cleaned, then local retention of both.
	from := leader.Offsets().LogEnd
	w.batch(leader, 1, false, false)
	replicateTo(t, leader, follower, from, leader.Offsets().LogEnd)
	c2 := c
	c2.LocalRetentionBytes = 0
	for _, p := range []*tiered.Partition{leader, follower} {
		if err := p.SetConfig(c2); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := leader.Offload(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := leader.CompactRemote(ctx, opts); err != nil {
		t.Fatal(err)
	}
	if err := follower.FollowerStep(ctx); err != nil {
		t.Fatalf("the follower's local retention: %v", err)
	}
	last := leader.Head().LastOffset()
	for name, p := range map[string]*tiered.Partition{"leader": leader, "follower": follower} {
		for _, s := range p.LocalSegments() {
			if !s.Active && s.NextOffset-1 <= last {
				t.Fatalf("the %s keeps local segment %d..%d, which the bucket holds (to %d): %+v", name, s.BaseOffset, s.NextOffset-1, last, p.LocalSegments())
			}
		}
	}
	checkCompacted(t, leader, m, "the end")
	t.Logf("%d records given; %d rounds replaced segments; %d leader changes", len(m.recs), rounds, swaps)
}
