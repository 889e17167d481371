package tiered_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
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

// kvPair is a key and a value (nil: a tombstone).
type kvPair struct {
	k string
	v []byte
}

// appendKV appends one batch of kvs; pid >= 0 makes it transactional.
func appendKV(t *testing.T, p backend.Partition, pid int64, kvs ...kvPair) backend.AppendInfo {
	t.Helper()
	var b record.Builder
	h := record.NewBatchHeader()
	if pid >= 0 {
		h.ProducerID, h.ProducerEpoch, h.BaseSequence, h.Transactional = pid, 0, 0, true
	}
	b.Reset(h)
	ts := time.Now().UnixMilli()
	for _, kv := range kvs {
		b.Append(ts, []byte(kv.k), kv.v, nil)
	}
	data, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	info, err := p.Append(ctx, append([]byte(nil), data...), backend.AppendOptions{AssignOffsets: true, LeaderEpoch: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.SetHighWatermark(p.Offsets().LogEnd); err != nil {
		t.Fatal(err)
	}
	return info
}

// appendMarker appends producer pid's COMMIT or ABORT marker.
func appendMarker(t *testing.T, p backend.Partition, pid int64, commit bool) {
	t.Helper()
	var b record.Builder
	m, err := b.BuildEndTxnMarker(record.EndTxnMarker{ProducerID: pid, CoordinatorEpoch: 1, Commit: commit, Timestamp: time.Now().UnixMilli()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Append(ctx, append([]byte(nil), m...), backend.AppendOptions{AssignOffsets: true, LeaderEpoch: 1, Coordinator: true}); err != nil {
		t.Fatal(err)
	}
	if err := p.SetHighWatermark(p.Offsets().LogEnd); err != nil {
		t.Fatal(err)
	}
}

// readValues reads p whole (read_uncommitted, as the cleaner's output is)
// and returns each key's last value seen ("<tombstone>" for a tombstone),
// and every record by offset.
func readValues(t *testing.T, p backend.Partition, iso backend.Isolation) map[string]string {
	t.Helper()
	out := map[string]string{}
	var it record.Iterator
	offs := p.Offsets()
	end := offs.HighWatermark
	if iso == backend.ReadCommitted {
		end = offs.LastStableOffset
	}
	aborted := map[int64][]int64{} // pid -> first offsets
	inAbort := map[int64]bool{}
	for off := offs.LogStart; off < end; {
		recs, err := p.Read(ctx, off, backend.ReadOptions{MaxBytes: 1 << 20, MinOneBatch: true, Isolation: iso})
		if err != nil {
			t.Fatalf("read at %d: %v", off, err)
		}
		var buf bytes.Buffer
		recs.WriteTo(&buf)
		if a, ok := recs.(backend.Aborted); ok {
			for _, x := range a.AbortedTransactions() {
				aborted[x.ProducerID] = append(aborted[x.ProducerID], x.FirstOffset)
			}
		}
		recs.Close()
		if buf.Len() == 0 {
			break
		}
		sc := record.NewScanner(bytes.NewReader(buf.Bytes()), 0, int64(buf.Len()), record.ScanOptions{Validate: true})
		for sc.Next() {
			e := sc.Entry()
			b := e.Batch()
			off = e.LastOffset + 1
			if b.IsControl() {
				delete(inAbort, b.ProducerID()) // Kafka's consumer: a marker ends it
				continue
			}
			if iso == backend.ReadCommitted && b.IsTransactional() {
				fs := aborted[b.ProducerID()]
				for len(fs) > 0 && fs[0] <= e.LastOffset {
					inAbort[b.ProducerID()] = true
					fs = fs[1:]
				}
				aborted[b.ProducerID()] = fs
				if inAbort[b.ProducerID()] {
					continue
				}
			}
			if err := it.Reset(b); err != nil {
				t.Fatal(err)
			}
			for it.Next() {
				r := it.Record()
				if r.Value == nil {
					out[string(r.Key)] = "<tombstone>"
				} else {
					out[string(r.Key)] = string(r.Value)
				}
			}
		}
		if sc.Err() != nil {
			t.Fatal(sc.Err())
		}
	}
	return out
}

func openCompacted(t *testing.T, kv ...string) (*tiered.Partition, *objstore.Store) {
	store := objstore.New(mem.New(), "mem://compacted", objstore.Options{})
	dir := filepath.Join(t.TempDir(), "orders-0")
	base := []string{"cleanup.policy", "compact", "remote.storage.enable", "true", "segment.bytes", "1048576",
		"local.retention.bytes", "0", "file.delete.delay.ms", "0", "min.cleanable.dirty.ratio", "0.01"}
	p := open(t, dir, store, 1, cfg(t, append(base, kv...)...))
	t.Cleanup(func() { p.Close() })
	return p, store
}

func rollAndOffload(t *testing.T, p *tiered.Partition) {
	t.Helper()
	if err := p.Roll(); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Offload(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestCompactCheckpointInsideSegment: a round whose map fills in the
// middle of a bucket segment puts its checkpoint there, so it must clean
// that segment too (as Kafka cleans every segment whose base is below
// the map's end): otherwise the segment's records below the checkpoint
// are never cleaned against each other, and once the tombstone's
// horizon passes, the value it deleted comes back.
func TestCompactCheckpointInsideSegment(t *testing.T) {
	p, _ := openCompacted(t, "delete.retention.ms", "0")
	// S0: k=V, k=tombstone, 12 other keys (14 keys fill the smallest map),
	// then a batch of 5 new keys the map cannot take.
	appendKV(t, p, -1, kvPair{"k", []byte("V")})
	appendKV(t, p, -1, kvPair{"k", nil})
	var many []kvPair
	for i := range 13 {
		many = append(many, kvPair{fmt.Sprintf("a%02d", i), []byte("x")})
	}
	appendKV(t, p, -1, many...)
	appendKV(t, p, -1, kvPair{"b0", []byte("x")}, kvPair{"b1", []byte("x")}, kvPair{"b2", []byte("x")}, kvPair{"b3", []byte("x")}, kvPair{"b4", []byte("x")})
	rollAndOffload(t, p)
	appendKV(t, p, -1, kvPair{"c", []byte("x")}) // S1
	rollAndOffload(t, p)
	if got := readValues(t, p, backend.ReadHighWatermark)["k"]; got != "<tombstone>" {
		t.Fatalf("before any round k reads %q", got)
	}
	m, err := compaction.NewOffsetMap(384) // the smallest: 14 keys
	if err != nil {
		t.Fatal(err)
	}
	for round := range 4 {
		time.Sleep(5 * time.Millisecond) // past every horizon set (delete.retention.ms 0)
		st, err := p.CompactRemote(ctx, tiered.CompactOptions{Force: true, Map: m, ScratchDir: t.TempDir()})
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		t.Logf("round %d: firstDirty %d end %d checkpoint %d replaced %d removed %d", round, st.FirstDirty, st.End, st.Checkpoint, st.SegmentsReplaced, st.RecordsRemoved)
		if got, ok := readValues(t, p, backend.ReadHighWatermark)["k"]; ok && got != "<tombstone>" {
			t.Fatalf("after round %d k reads %q: the tombstone went and the value it deleted came back", round, got)
		}
		appendKV(t, p, -1, kvPair{fmt.Sprintf("d%d", round), []byte("x")}) // a new dirty segment for the next round
		rollAndOffload(t, p)
	}
}

// TestCompactAbortMarkerInActiveSegment: a transaction's data lies in a
// bucket segment the bucket alone holds, its ABORT marker (and so its
// .txnindex entry) in the local active segment. The round must know the
// transaction aborted: mapped, the aborted record would remove the key's
// committed record, and a read_committed consumer would lose the key.
func TestCompactAbortMarkerInActiveSegment(t *testing.T) {
	p, _ := openCompacted(t)
	appendKV(t, p, -1, kvPair{"k", []byte("committed")})
	appendKV(t, p, 7, kvPair{"k", []byte("aborted")})
	if err := p.Roll(); err != nil { // S0 closes with the transaction open
		t.Fatal(err)
	}
	appendMarker(t, p, 7, false) // the ABORT marker, in the active segment
	if _, err := p.Offload(ctx); err != nil {
		t.Fatal(err)
	}
	if ls := p.LocalSegments(); len(ls) != 1 {
		t.Fatalf("local segments: %+v", ls)
	}
	if got := readValues(t, p, backend.ReadCommitted)["k"]; got != "committed" {
		t.Fatalf("before the round k reads %q", got)
	}
	st, err := p.CompactRemote(ctx, tiered.CompactOptions{Force: true, ScratchDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", st)
	if got, ok := readValues(t, p, backend.ReadCommitted)["k"]; got != "committed" {
		t.Fatalf("after the round a read_committed consumer reads k as %q (present %v): the aborted write hid the committed one", got, ok)
	}
}

// replicateTo appends the leader's batches in [from, to) to f, as a
// follower's fetches would.
func replicateTo(t *testing.T, leader, f backend.Partition, from, to int64) {
	t.Helper()
	for off := from; off < to; {
		r, err := leader.Read(ctx, off, backend.ReadOptions{MaxBytes: 1 << 20, MinOneBatch: true})
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		r.WriteTo(&buf)
		r.Close()
		if _, err := f.Append(ctx, buf.Bytes(), backend.AppendOptions{}); err != nil {
			t.Fatal(err)
		}
		off = r.(backend.OffsetRange).NextOffset()
	}
	if err := f.SetHighWatermark(f.Offsets().LogEnd); err != nil {
		t.Fatal(err)
	}
}

// TestCompactedFollowerLocalRetention: a follower (or a leader again
// after a change) may still hold segments the bucket's cleaner rewrote
// from the leader's side of the ownership rule. Its local retention must
// still delete them once it shows the bucket's copy is a cleaning of its
// own (every record there is its own at the same offset), or its disk
// keeps every segment from there on.
func TestCompactedFollowerLocalRetention(t *testing.T) {
	_, f, setFollower := compactedPair(t)
	setFollower("cleanup.policy", "compact") // local.retention.bytes 0
	before := len(f.LocalSegments())
	err := f.FollowerStep(ctx)
	if after := len(f.LocalSegments()); err != nil || after >= before {
		t.Fatalf("the follower's local retention after the leader's round: %v; %d of %d local segments kept", err, after, before)
	}
}

// TestCompactStatsCountWrittenOnly: a round over bucket segments that
// keep everything writes none of them, and its stats (and the
// CompactBytesRewritten metric) count no byte written.
func TestCompactStatsCountWrittenOnly(t *testing.T) {
	p, _ := openCompacted(t, "segment.bytes", "100")
	for i := range 4 {
		appendKV(t, p, -1, kvPair{fmt.Sprintf("k%d", i), []byte("v")})
		rollAndOffload(t, p)
	}
	st, err := p.CompactRemote(ctx, tiered.CompactOptions{Force: true, ScratchDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", st)
	if st.SegmentsWritten == 0 && (st.BytesWritten != 0 || p.Metrics().CompactBytesRewritten.Load() != 0) {
		t.Fatalf("no segment written, yet %d bytes counted written (metric %d)", st.BytesWritten, p.Metrics().CompactBytesRewritten.Load())
	}
}

// TestLocalCleanRacesTiering: a local cleaning round that began before
// the log became tiered must not replace closed segments uploaded
// meanwhile (local retention would then find the local copies are not
// the bucket's); local retention of the tiered log goes on.
func TestLocalCleanRacesTiering(t *testing.T) {
	store := objstore.New(mem.New(), "mem://clean-race", objstore.Options{})
	dir := filepath.Join(t.TempDir(), "orders-0")
	c := cfg(t, "cleanup.policy", "compact", "segment.bytes", "1048576", "file.delete.delay.ms", "0")
	l, err := local.Open(dir, local.Options{Config: c, LogStartOffset: -1, HighWatermark: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for _, v := range []string{"v1", "v2", "v3"} {
		appendKV(t, l, -1, kvPair{"k", []byte(v)})
		if err := l.Roll(); err != nil {
			t.Fatal(err)
		}
	}
	var p *tiered.Partition
	hook := func(ctx context.Context, n int) error {
		if p != nil {
			return nil
		}
		// The topic becomes tiered while the round runs; the copier uploads.
		var err error
		if p, err = tiered.Open(ctx, l, tiered.Options{Store: store, Prefix: "tl/orders-0", LeaderEpoch: 1}); err != nil {
			return err
		}
		_, err = p.Offload(ctx)
		return err
	}
	st, err := compaction.Clean(ctx, l, -1, compaction.Options{Throttle: hook})
	if !errors.Is(err, local.ErrSegmentsChanged) {
		t.Fatalf("a local round that the log's tiering overtook: %v, want local.ErrSegmentsChanged", err)
	}
	if p == nil {
		t.Fatal("the hook never ran")
	}
	t.Logf("local round: %+v", st)
	c2 := l.Config()
	c2.LocalRetentionBytes = 0
	if err := p.SetConfig(c2); err != nil {
		t.Fatal(err)
	}
	_, err = p.Offload(ctx)
	if err != nil || len(p.LocalSegments()) != 1 {
		t.Fatalf("local retention of a tiered compacted log: %v; %d local segments kept", err, len(p.LocalSegments()))
	}
}

// TestCompactStaleManifest: an upload and local retention landing while
// a round reads the manifest's parts leave it with a manifest that ends
// below the local log start: the offsets between are in neither the
// bucket segments the round knows nor the local log. Its checkpoint must
// not pass them, or the segment there is never mapped, its tombstone is
// later dropped as clean, and the value it deleted comes back.
func TestCompactStaleManifest(t *testing.T) {
	faults := faultstore.Wrap(mem.New(), 1)
	store := objstore.New(faults, "mem://compacted-stale", objstore.Options{})
	c := cfg(t, "cleanup.policy", "compact", "remote.storage.enable", "true", "segment.bytes", "1048576",
		"local.retention.bytes", "50", "file.delete.delay.ms", "0", "delete.retention.ms", "0")
	dir := filepath.Join(t.TempDir(), "orders-0")
	p := open(t, dir, store, 1, c)
	defer func() { p.Close() }()
	appendKV(t, p, -1, kvPair{"k", []byte("V")})
	rollAndOffload(t, p)
	for i := range 16 { // enough segments for the head to name a part
		appendKV(t, p, -1, kvPair{fmt.Sprintf("f%02d", i), []byte("x")})
		rollAndOffload(t, p)
	}
	appendKV(t, p, -1, kvPair{"k", nil}) // P: the tombstone, not uploaded yet
	if err := p.Roll(); err != nil {
		t.Fatal(err)
	}
	appendKV(t, p, -1, kvPair{"q", []byte("x")}) // Q
	if err := p.Roll(); err != nil {
		t.Fatal(err)
	}
	if len(manifestOf(t, p).Segments) != 17 || len(p.Head().Parts) == 0 {
		t.Fatal("setup")
	}
	// A restart: the parts are not in the caches (a broker's caches are
	// bounded; they need not hold them either).
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	p = open(t, dir, store, 1, c)
	if err := p.SetHighWatermark(p.Offsets().LogEnd); err != nil {
		t.Fatal(err)
	}
	var hookErr error
	ran := false
	h := faults.Add(faultstore.Rule{Op: objstore.OpGet, KeySuffix: ".part", Nth: 1, Fault: faultstore.Hook,
		Hook: func(objstore.Op, string) { ran = true; _, hookErr = p.Offload(ctx) }}) // the copier, meanwhile
	st, err := p.CompactRemote(ctx, tiered.CompactOptions{Force: true, ScratchDir: t.TempDir()})
	h.Remove()
	if err != nil || hookErr != nil {
		t.Fatalf("round: %v; offload: %v", err, hookErr)
	}
	t.Logf("hook ran %v; local segments %+v", ran, p.LocalSegments())
	t.Logf("racing round: firstDirty %d end %d checkpoint %d; local start %d", st.FirstDirty, st.End, st.Checkpoint, p.Offsets().LocalLogStart)
	for round := range 3 {
		time.Sleep(5 * time.Millisecond)
		appendKV(t, p, -1, kvPair{fmt.Sprintf("d%d", round), []byte("x")})
		rollAndOffload(t, p)
		if _, err := p.CompactRemote(ctx, tiered.CompactOptions{Force: true, ScratchDir: t.TempDir()}); err != nil {
			t.Fatal(err)
		}
		if got, ok := readValues(t, p, backend.ReadHighWatermark)["k"]; ok && got != "<tombstone>" {
			t.Fatalf("after round %d k reads %q: deleted, and back", round, got)
		}
	}
}
