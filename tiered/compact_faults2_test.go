package tiered_test

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/compaction"
	"github.com/tierlog/tierlog/local"
	"github.com/tierlog/tierlog/objstore"
	"github.com/tierlog/tierlog/objstore/mem"
	"github.com/tierlog/tierlog/record"
	"github.com/tierlog/tierlog/testing/faultstore"
	"github.com/tierlog/tierlog/tiered"
)

// compactedPair: a leader at epoch 1 and a follower replicating it, each
// segment rolled at the same place on both; the leader offloads and
// runs a round of the bucket's cleaner.
func compactedPair(t *testing.T) (leader, f *tiered.Partition, fc func(kv ...string)) {
	store := objstore.New(mem.New(), "mem://compacted-pair", objstore.Options{})
	c := cfg(t, "cleanup.policy", "compact", "remote.storage.enable", "true", "segment.bytes", "1048576",
		"local.retention.bytes", "0", "file.delete.delay.ms", "0")
	leader = open(t, filepath.Join(t.TempDir(), "orders-0"), store, 1, c)
	t.Cleanup(func() { leader.Close() })
	fcfg := c
	fcfg.LocalRetentionBytes = -1
	f = open(t, filepath.Join(t.TempDir(), "orders-0"), store, 0, fcfg)
	t.Cleanup(func() { f.Close() })
	if err := f.BecomeFollower(ctx, 1); err != nil {
		t.Fatal(err)
	}
	step := func(kvs ...kvPair) {
		from := leader.Offsets().LogEnd
		appendKV(t, leader, -1, kvs...)
		replicateTo(t, leader, f, from, leader.Offsets().LogEnd)
		if err := leader.Roll(); err != nil {
			t.Fatal(err)
		}
		if err := f.Roll(); err != nil {
			t.Fatal(err)
		}
	}
	step(kvPair{"k", []byte("v1")})
	step(kvPair{"k", []byte("v2")})
	step(kvPair{"x", []byte("x")})
	if _, err := leader.Offload(ctx); err != nil {
		t.Fatal(err)
	}
	st, err := leader.CompactRemote(ctx, tiered.CompactOptions{Force: true, ScratchDir: t.TempDir()})
	if err != nil || st.SegmentsReplaced == 0 {
		t.Fatalf("compact: %+v, %v", st, err)
	}
	return leader, f, func(kv ...string) {
		nc := cfg(t, append([]string{"remote.storage.enable", "true", "segment.bytes", "1048576",
			"local.retention.bytes", "0", "file.delete.delay.ms", "0"}, kv...)...)
		if err := f.SetConfig(nc); err != nil {
			t.Fatal(err)
		}
	}
}

// TestCompactedPolicySwitchFollowerRetention: whether local retention
// may accept a cleaning of its copy is whether the bucket was cleaned
// there (the manifest's checkpoint), not the topic's current policy: a
// compacted topic switched to cleanup.policy=delete after the leader's
// round still lets every follower delete its pre-cleaning copies.
func TestCompactedPolicySwitchFollowerRetention(t *testing.T) {
	_, f, setCfg := compactedPair(t)
	setCfg("cleanup.policy", "delete")
	before := len(f.LocalSegments())
	err := f.FollowerStep(ctx)
	after := len(f.LocalSegments())
	t.Logf("follower step: %v; %d -> %d local segments", err, before, after)
	if errors.Is(err, tiered.ErrDiverged) || after >= before {
		t.Fatalf("after cleanup.policy compact->delete the follower's local retention stops: %v (%d of %d kept)", err, after, before)
	}
}

// TestCompactedDivergedCopyKept: the follower's segment [0..0] holds a
// record it wrote itself as leader at epoch 1 (key "secret", the only
// copy), which the leader at epoch 2 never had: the leader wrote x=1
// there, later superseded by x=2 at offset 1, so its cleaned bucket
// segment holds no record at offset 0. The bucket's copy is no cleaning
// of the follower's (their leader epochs differ there): local retention
// keeps the diverged copy for an operator to look at.
func TestCompactedDivergedCopyKept(t *testing.T) {
	store := objstore.New(mem.New(), "mem://compacted-pair-diverged", objstore.Options{})
	c := cfg(t, "cleanup.policy", "compact", "remote.storage.enable", "true", "segment.bytes", "1048576",
		"local.retention.bytes", "-1", "file.delete.delay.ms", "0")
	f := open(t, filepath.Join(t.TempDir(), "orders-0"), store, 1, c)
	defer f.Close()
	appendKV(t, f, -1, kvPair{"secret", []byte("only copy")}) // offset 0, epoch 1, never uploaded
	if err := f.Roll(); err != nil {
		t.Fatal(err)
	}
	lc := c
	lc.LocalRetentionBytes = 0
	leader := open(t, filepath.Join(t.TempDir(), "orders-0"), store, 2, lc)
	defer leader.Close()
	if err := f.BecomeFollower(ctx, 2); err != nil {
		t.Fatal(err)
	}
	appendKVAt(t, leader, 2, kvPair{"x", []byte("1")}) // offset 0: the leader's own history
	rollAndOffload(t, leader)
	for _, kv := range []kvPair{{"x", []byte("2")}, {"y", []byte("y")}} {
		from := leader.Offsets().LogEnd
		appendKVAt(t, leader, 2, kv)
		replicateTo(t, leader, f, from, leader.Offsets().LogEnd)
		rollAndOffload(t, leader)
		if err := f.Roll(); err != nil {
			t.Fatal(err)
		}
	}
	st, err := leader.CompactRemote(ctx, tiered.CompactOptions{Force: true, ScratchDir: t.TempDir()})
	if err != nil || st.SegmentsReplaced == 0 {
		t.Fatalf("compact: %+v, %v", st, err)
	}
	t.Logf("bucket after the round: %+v", manifestOf(t, leader).Segments)
	before := f.LocalSegments()
	fc := c
	fc.LocalRetentionBytes = 0
	if err := f.SetConfig(fc); err != nil {
		t.Fatal(err)
	}
	err = f.FollowerStep(ctx)
	after := f.LocalSegments()
	t.Logf("follower step: %v; local segments %+v -> %+v", err, before, after)
	if len(after) == 0 || after[0].BaseOffset > 0 {
		t.Fatalf("the follower's diverged segment 0 (key %q, written at epoch 1, never in the bucket) was deleted as a 'cleaning' of the bucket's epoch-2 history", "secret")
	}
}

func appendKVAt(t *testing.T, p backend.Partition, epoch int32, kvs ...kvPair) {
	t.Helper()
	var b record.Builder
	b.Reset(record.NewBatchHeader())
	for _, kv := range kvs {
		b.Append(time.Now().UnixMilli(), []byte(kv.k), kv.v, nil)
	}
	data, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Append(ctx, append([]byte(nil), data...), backend.AppendOptions{AssignOffsets: true, LeaderEpoch: epoch}); err != nil {
		t.Fatal(err)
	}
	if err := p.SetHighWatermark(p.Offsets().LogEnd); err != nil {
		t.Fatal(err)
	}
}

// TestCleanedCheckReadsOnce: the leader's round merges N small segments
// into one; a follower holding the N local copies shows each to be
// cleaned into it reading the merged bucket segment once for all of them
// (not once for each: quadratic in the local segments it spans).
func TestCleanedCheckReadsOnce(t *testing.T) {
	faults := faultstore.Wrap(mem.New(), 1)
	store := objstore.New(faults, "mem://cleaned-check-cost", objstore.Options{})
	c := cfg(t, "cleanup.policy", "compact", "remote.storage.enable", "true", "segment.bytes", "1048576",
		"local.retention.bytes", "0", "file.delete.delay.ms", "0")
	leader := open(t, filepath.Join(t.TempDir(), "orders-0"), store, 1, c)
	defer leader.Close()
	fc := c
	fc.LocalRetentionBytes = -1
	f := open(t, filepath.Join(t.TempDir(), "orders-0"), store, 0, fc)
	defer f.Close()
	if err := f.BecomeFollower(ctx, 1); err != nil {
		t.Fatal(err)
	}
	const n = 16
	val := []byte(strings.Repeat("v", 1000))
	for i := range n {
		var kvs []kvPair
		kvs = append(kvs, kvPair{"hot", val}) // superseded by the next segment's: every group changes
		for j := range 50 {
			kvs = append(kvs, kvPair{fmt.Sprintf("k%02d-%02d", i, j), val})
		}
		from := leader.Offsets().LogEnd
		appendKV(t, leader, -1, kvs...)
		replicateTo(t, leader, f, from, leader.Offsets().LogEnd)
		if err := leader.Roll(); err != nil {
			t.Fatal(err)
		}
		if err := f.Roll(); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := leader.Offload(ctx); err != nil {
		t.Fatal(err)
	}
	st, err := leader.CompactRemote(ctx, tiered.CompactOptions{Force: true, ScratchDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	m := manifestOf(t, leader)
	t.Logf("round: replaced %d, merged %d; bucket segments now %d, first %d..%d %d bytes", st.SegmentsReplaced, st.Merged, len(m.Segments), m.Segments[0].BaseOffset, m.Segments[0].LastOffset, m.Segments[0].Size)
	var localBytes int64
	for _, s := range f.LocalSegments() {
		localBytes += s.Size
	}
	gets := 0
	faults.Add(faultstore.Rule{Op: objstore.OpGet, KeySuffix: ".log", Every: 1, Fault: faultstore.Hook,
		Hook: func(objstore.Op, string) { gets++ }})
	fc.LocalRetentionBytes = 0
	if err := f.SetConfig(fc); err != nil {
		t.Fatal(err)
	}
	v0 := f.Metrics().VerifyBytes.Load()
	if err := f.FollowerStep(ctx); err != nil {
		t.Fatal(err)
	}
	read := f.Metrics().VerifyBytes.Load() - v0
	t.Logf("follower: %d local bytes in %d segments verified by %d GETs of .log objects reading %d bytes (%.1fx)", localBytes, n, gets, read, float64(read)/float64(localBytes))
	if read > 2*localBytes {
		t.Fatalf("verifying %d local bytes read %d bytes of the bucket (%d GETs): whole merged segment per local segment", localBytes, read, gets)
	}
}

// TestCompactedLocallyCleanedFollower: a compacted topic with
// transactions becomes tiered. Before that, each replica's own local
// cleaner ran (Kafka's replicas clean independently); the follower's
// removed a COMMIT marker past its horizon, the leader's had not run.
// The bucket's cleaner keeps every marker (compaction.Filter), so the
// bucket holds a record (the marker) the follower's copy lacks: the two
// are still cleanings of one log, and the follower's local retention
// deletes its copy.
func TestCompactedLocallyCleanedFollower(t *testing.T) {
	faults := faultstore.Wrap(mem.New(), 1)
	store := objstore.New(faults, "mem://compacted-pair-markers", objstore.Options{})
	c := cfg(t, "cleanup.policy", "compact", "segment.bytes", "1048576", "file.delete.delay.ms", "0", "delete.retention.ms", "0")
	openLocal := func() *local.Log {
		l, err := local.Open(filepath.Join(t.TempDir(), "orders-0"), local.Options{Config: c, LogStartOffset: -1, HighWatermark: -1})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	ll, fl := openLocal(), openLocal()
	seg := func(write func()) {
		from := ll.Offsets().LogEnd
		write()
		replicateTo(t, ll, fl, from, ll.Offsets().LogEnd)
		if err := ll.Roll(); err != nil {
			t.Fatal(err)
		}
		if err := fl.Roll(); err != nil {
			t.Fatal(err)
		}
	}
	seg(func() {
		appendKV(t, ll, 7, kvPair{"k", []byte("a")})
		appendMarker(t, ll, 7, true)
	})
	seg(func() { appendKV(t, ll, -1, kvPair{"k", []byte("b")}) })
	seg(func() { appendKV(t, ll, -1, kvPair{"z", []byte("z")}) })
	for range 3 { // the follower's own local cleaner, before tiering
		time.Sleep(5 * time.Millisecond)
		st, err := compaction.Clean(ctx, fl, -1, compaction.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("follower's local round: removed %d, markers removed %d", st.RecordsRemoved, st.MarkersRemoved)
	}
	tc := c
	tc.RemoteStorageEnable, tc.LocalRetentionBytes = true, 0
	if err := ll.SetConfig(tc); err != nil {
		t.Fatal(err)
	}
	fcfg := tc
	fcfg.LocalRetentionBytes = -1
	if err := fl.SetConfig(fcfg); err != nil {
		t.Fatal(err)
	}
	leader, err := tiered.Open(ctx, ll, tiered.Options{Store: store, Prefix: "tl/orders-0", LeaderEpoch: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer leader.Close()
	f, err := tiered.Open(ctx, fl, tiered.Options{Store: store, Prefix: "tl/orders-0"})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.BecomeFollower(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := leader.Offload(ctx); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		time.Sleep(5 * time.Millisecond)
		st, err := leader.CompactRemote(ctx, tiered.CompactOptions{Force: true, ScratchDir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("bucket round: removed %d, replaced %d", st.RecordsRemoved, st.SegmentsReplaced)
	}
	fcfg.LocalRetentionBytes = 0
	if err := f.SetConfig(fcfg); err != nil {
		t.Fatal(err)
	}
	gets := 0
	faults.Add(faultstore.Rule{Op: objstore.OpGet, KeySuffix: ".log", Every: 1, Fault: faultstore.Hook,
		Hook: func(objstore.Op, string) { gets++ }})
	for pass := range 3 {
		before := len(f.LocalSegments())
		gets = 0
		err := f.FollowerStep(ctx)
		t.Logf("pass %d: %v; %d -> %d local segments; %d GETs of .log objects", pass, err, before, len(f.LocalSegments()), gets)
		if pass == 2 && err != nil {
			t.Fatalf("the follower's local retention stays stopped: %v", err)
		}
	}
}

// TestCompactDryRunWritesNothing: a dry run on a leader of a new epoch
// writes nothing, not even the claim of the bucket a round makes before
// it plans.
func TestCompactDryRunWritesNothing(t *testing.T) {
	p, _ := openCompacted(t)
	appendKV(t, p, -1, kvPair{"k", []byte("1")})
	rollAndOffload(t, p)
	appendKV(t, p, -1, kvPair{"k", []byte("2")})
	rollAndOffload(t, p)
	appendKV(t, p, -1, kvPair{"z", []byte("z")})
	rollAndOffload(t, p)
	if err := p.BecomeLeader(ctx, 2); err != nil {
		t.Fatal(err)
	}
	gen := p.Head().Generation()
	st, err := p.CompactRemote(ctx, tiered.CompactOptions{Force: true, DryRun: true, ScratchDir: t.TempDir()})
	t.Logf("dry run: %+v, %v", st, err)
	if g := p.Head().Generation(); g != gen {
		t.Fatalf("a dry run moved the manifest from generation %d to %d", gen, g)
	}
}

// TestCompactDryRunAtAnotherEpoch: a dry run of a partition opened at
// epoch 0 (as tools open one) over a manifest a broker committed at
// epoch 1 reports; it is not fenced, for it claims nothing.
func TestCompactDryRunAtAnotherEpoch(t *testing.T) {
	store := objstore.New(mem.New(), "mem://compact-dry-epoch", objstore.Options{})
	dir := filepath.Join(t.TempDir(), "orders-0")
	c := cfg(t, "cleanup.policy", "compact", "remote.storage.enable", "true", "segment.bytes", "1048576", "file.delete.delay.ms", "0")
	p := open(t, dir, store, 1, c)
	appendKV(t, p, -1, kvPair{"k", []byte("1")})
	rollAndOffload(t, p)
	appendKV(t, p, -1, kvPair{"k", []byte("2")})
	rollAndOffload(t, p)
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	tool := open(t, dir, store, 0, c)
	defer tool.Close()
	st, err := tool.CompactRemote(ctx, tiered.CompactOptions{Force: true, DryRun: true, ScratchDir: t.TempDir()})
	if err != nil {
		t.Fatalf("tierctl compact --store --dry-run: %v (%+v)", err, st)
	}
}

// TestCompactAbortMarkerRacesLocalRetention: a copier upload plus local
// retention during a round (here during its GET of an earlier segment's
// .txnindex) deletes the local segment holding an ABORT marker. The round
// must still know the transaction aborted (it reads the local .txnindex
// files before the local start and the manifest, and the bucket's below
// that start): otherwise its aborted write is mapped and the committed
// one removed.
func TestCompactAbortMarkerRacesLocalRetention(t *testing.T) {
	faults := faultstore.Wrap(mem.New(), 1)
	store := objstore.New(faults, "mem://compacted-pair-abort-race", objstore.Options{})
	c := cfg(t, "cleanup.policy", "compact", "remote.storage.enable", "true", "segment.bytes", "1048576",
		"local.retention.bytes", "0", "file.delete.delay.ms", "0")
	p := open(t, filepath.Join(t.TempDir(), "orders-0"), store, 1, c)
	defer p.Close()
	appendKV(t, p, 8, kvPair{"j", []byte("aborted8")}) // A: an aborted transaction, with its marker
	appendMarker(t, p, 8, false)
	if err := p.Roll(); err != nil {
		t.Fatal(err)
	}
	appendKV(t, p, -1, kvPair{"k", []byte("committed")}) // B
	appendKV(t, p, 7, kvPair{"k", []byte("aborted")})
	if err := p.Roll(); err != nil {
		t.Fatal(err)
	}
	for i := range 16 {
		appendKV(t, p, -1, kvPair{fmt.Sprintf("f%02d", i), []byte("x")})
		if err := p.Roll(); err != nil {
			t.Fatal(err)
		}
	}
	appendMarker(t, p, 7, false)              // pid 7's ABORT, in the active segment
	if _, err := p.Offload(ctx); err != nil { // A, B and the fillers: the bucket's alone now
		t.Fatal(err)
	}
	if err := p.Roll(); err != nil { // the marker's segment: closed, local, not uploaded
		t.Fatal(err)
	}
	t.Logf("before: local %+v offsets %+v", p.LocalSegments(), p.Offsets())
	var hookErr error
	ran := false
	h := faults.Add(faultstore.Rule{Op: objstore.OpGet, KeySuffix: ".txnindex", Nth: 1, Fault: faultstore.Hook,
		Hook: func(objstore.Op, string) { ran = true; _, hookErr = p.Offload(ctx) }}) // the copier, meanwhile
	m, err := compaction.NewOffsetMap(384) // 14 keys
	if err != nil {
		t.Fatal(err)
	}
	st, err := p.CompactRemote(ctx, tiered.CompactOptions{Force: true, Map: m, ScratchDir: t.TempDir()})
	h.Remove()
	if err != nil || hookErr != nil {
		t.Fatalf("round: %v; offload: %v", err, hookErr)
	}
	t.Logf("hook ran %v; after: local %+v; round: end %d checkpoint %d removed %d", ran, p.LocalSegments(), st.End, st.Checkpoint, st.RecordsRemoved)
	if got, ok := readValues(t, p, backend.ReadCommitted)["k"]; got != "committed" {
		t.Fatalf("after the round a read_committed consumer reads k as %q (present %v): the aborted write removed the committed one", got, ok)
	}
}

// TestCompactDryRunCountsNothing: a dry run reports what a round would
// rewrite, and the partition's metrics count no round, byte or segment.
func TestCompactDryRunCountsNothing(t *testing.T) {
	p, _ := openCompacted(t)
	for _, v := range []string{"1", "2", "3"} {
		appendKV(t, p, -1, kvPair{"k", []byte(v)})
		rollAndOffload(t, p)
	}
	st, err := p.CompactRemote(ctx, tiered.CompactOptions{Force: true, DryRun: true, ScratchDir: t.TempDir()})
	if err != nil || st.SegmentsReplaced == 0 {
		t.Fatalf("dry run: %+v, %v", st, err)
	}
	m := p.Metrics()
	if m.CompactRounds.Load() != 0 || m.CompactBytesRewritten.Load() != 0 || m.CompactSegmentsReplaced.Load() != 0 || m.CompactMerges.Load() != 0 {
		t.Fatalf("a dry run counted: rounds %d, bytes %d, replaced %d, merges %d", m.CompactRounds.Load(),
			m.CompactBytesRewritten.Load(), m.CompactSegmentsReplaced.Load(), m.CompactMerges.Load())
	}
}

// TestCompactDirtyState: each pass of the bucket's cleaner, a round or
// not, records what it found (the metrics' dirty bytes and ratio): the
// bucket's own segments dirty before a round, clean after it; a dry run
// records nothing.
func TestCompactDirtyState(t *testing.T) {
	p, _ := openCompacted(t, "min.cleanable.dirty.ratio", "1")
	if _, ok := p.Dirty(); ok {
		t.Fatal("a dirty state before any pass")
	}
	for _, v := range []string{"1", "2", "3"} {
		appendKV(t, p, -1, kvPair{"k", []byte(v)})
		rollAndOffload(t, p)
	}
	if _, err := p.CompactRemote(ctx, tiered.CompactOptions{DryRun: true, Force: true, ScratchDir: t.TempDir()}); err != nil {
		t.Fatal(err)
	}
	if _, ok := p.Dirty(); ok {
		t.Fatal("a dry run recorded a dirty state")
	}
	appendKV(t, p, -1, kvPair{"k", []byte("4")}) // a local record
	// The ratio holds the next pass back.
	st, err := p.CompactRemote(ctx, tiered.CompactOptions{ScratchDir: t.TempDir()})
	if err != nil || st.Ran {
		t.Fatalf("a pass under the ratio: %+v, %v", st, err)
	}
	d, ok := p.Dirty()
	if !ok || d.BucketDirty == 0 || d.BucketClean != 0 || d.Ratio != 1 || d.Local == 0 {
		t.Fatalf("before a round: %+v, %v", d, ok)
	}
	if _, err := p.CompactRemote(ctx, tiered.CompactOptions{Force: true, ScratchDir: t.TempDir()}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.CompactRemote(ctx, tiered.CompactOptions{ScratchDir: t.TempDir()}); err != nil {
		t.Fatal(err)
	}
	if d, ok := p.Dirty(); !ok || d.BucketDirty != 0 || d.BucketClean == 0 || d.Ratio != 0 {
		t.Fatalf("after a round: %+v, %v", d, ok)
	}
}
