package compaction

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/local"
	"github.com/tierlog/tierlog/record"
)

// txnWriter appends a random mix of plain batches and transactional ones
// from three producers, ending transactions with COMMIT or ABORT markers
// at random (some stay open across rounds), and records what it wrote.
type txnWriter struct {
	l       *local.Log
	rng     *rand.Rand
	c       *clock
	keys    int
	open    map[int64][]int // producer -> indexes in written of its open transaction
	seq     map[int64]int32
	written []rec
	b       record.Builder
}

func newTxnWriter(l *local.Log, rng *rand.Rand, c *clock, keys int) *txnWriter {
	return &txnWriter{l: l, rng: rng, c: c, keys: keys, open: map[int64][]int{}, seq: map[int64]int32{}}
}

func (w *txnWriter) appendBatch(t testing.TB, batch []byte) backend.AppendInfo {
	t.Helper()
	// Markers come from the transaction coordinator.
	info, err := w.l.Append(context.Background(), batch, backend.AppendOptions{AssignOffsets: true, Coordinator: record.Batch(batch).IsControl()})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.l.SetHighWatermark(info.LastOffset + 1); err != nil {
		t.Fatal(err)
	}
	return info
}

// step appends one batch: plain (60%), transactional data (30%) or a
// marker ending an open transaction (10%).
func (w *txnWriter) step(t testing.TB) {
	t.Helper()
	switch p := w.rng.IntN(10); {
	case p < 6:
		w.written = append(w.written, appendRandom(t, w.l, w.rng, 1, w.keys, w.c, record.None)...)
	case p < 9:
		pid := int64(1 + w.rng.IntN(3))
		h := record.NewBatchHeader()
		h.Transactional, h.ProducerID, h.ProducerEpoch, h.BaseSequence = true, pid, 0, w.seq[pid]
		w.b.Reset(h)
		var recs []rec
		for range 1 + w.rng.IntN(3) {
			r := rec{key: fmt.Sprintf("key-%d", w.rng.IntN(w.keys)), hasKey: true}
			var v []byte
			if w.rng.IntN(8) == 0 {
				r.tomb = true
			} else {
				r.value = fmt.Sprintf("txn-%d-%d", pid, w.rng.Int64())
				v = []byte(r.value)
			}
			w.b.Append(w.c.now().UnixMilli(), []byte(r.key), v, nil)
			recs = append(recs, r)
		}
		batch, err := w.b.Build()
		if err != nil {
			t.Fatal(err)
		}
		info := w.appendBatch(t, batch)
		w.seq[pid] += int32(len(recs))
		for i := range recs {
			recs[i].offset = info.FirstOffset + int64(i)
			w.open[pid] = append(w.open[pid], len(w.written))
			w.written = append(w.written, recs[i])
		}
	default:
		for pid := range w.open {
			w.end(t, pid, w.rng.IntN(2) == 0)
			return
		}
	}
}

// end commits or aborts pid's open transaction.
func (w *txnWriter) end(t testing.TB, pid int64, commit bool) {
	t.Helper()
	m, err := w.b.BuildEndTxnMarker(record.EndTxnMarker{ProducerID: pid, Commit: commit, Timestamp: w.c.now().UnixMilli()})
	if err != nil {
		t.Fatal(err)
	}
	w.appendBatch(t, m)
	if !commit {
		for _, i := range w.open[pid] {
			w.written[i].aborted = true
		}
	}
	delete(w.open, pid)
}

// firstOpen is the first offset of a transaction still open.
func (w *txnWriter) firstOpen() int64 {
	first := int64(1 << 62)
	for _, idx := range w.open {
		first = min(first, w.written[idx[0]].offset)
	}
	return first
}

// markers counts the COMMIT and ABORT markers (with records) in l.
func markers(t *testing.T, l *local.Log) (commits, aborts int) {
	t.Helper()
	var it record.Iterator
	for off := l.Offsets().LogStart; off < l.Offsets().LogEnd; {
		rs, err := l.Read(context.Background(), off, backend.ReadOptions{MaxBytes: 1 << 20, MinOneBatch: true})
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		rs.WriteTo(&buf)
		rs.Close()
		data := buf.Bytes()
		if len(data) == 0 {
			checkNothingFrom(t, l, off)
			break
		}
		for len(data) > 0 {
			b, err := record.Parse(data)
			if err != nil {
				t.Fatal(err)
			}
			if b.IsControl() {
				switch typ, _ := markerType(&it, b); typ {
				case record.ControlCommit:
					commits++
				case record.ControlAbort:
					aborts++
				}
			}
			off, data = b.NextOffset(), data[b.Size():]
		}
	}
	return commits, aborts
}

// TestCleanModelTransactions is the model check with transactions: plain
// batches, committed and aborted transactions of three producers (some
// open across rounds), several rounds interleaved with appends. After each
// round, reading the log as a read_committed consumer gives the latest
// non-aborted value per key below the round's end, every record at its
// original offset; nothing at or after an open transaction is cleaned;
// markers go once their transaction's data has and their horizon passed.
func TestCleanModelTransactions(t *testing.T) {
	for _, tc := range []struct {
		name string
		keys int
		mem  int
	}{{"small-keyspace", 8, 1 << 20}, {"large-keyspace", 500, 1 << 20}, {"tiny-map", 200, 24 * 100}} {
		t.Run(tc.name, func(t *testing.T) {
			for seed := range uint64(4) {
				rng := rand.New(rand.NewPCG(seed, 11))
				c := &clock{t: time.UnixMilli(1_700_000_000_000)}
				l := openCompacted(t, t.TempDir(), c)
				w := newTxnWriter(l, rng, c, tc.keys)
				checkpoint := int64(-1)
				var aborted int64
				for round := range 8 {
					for range 100 + rng.IntN(200) {
						w.step(t)
					}
					c.add(time.Duration(rng.IntN(2*retentionMs)) * time.Millisecond)
					st, err := Clean(context.Background(), l, checkpoint, Options{MemoryBytes: tc.mem, Now: c.now})
					if err != nil {
						t.Fatalf("seed %d round %d: %v", seed, round, err)
					}
					if st.End > w.firstOpen() {
						t.Fatalf("seed %d round %d: cleaned to %d, past an open transaction at %d", seed, round, st.End, w.firstOpen())
					}
					if st.End > checkpoint {
						checkpoint = st.End
					}
					aborted += st.AbortedRemoved
					checkSegments(t, l, producerLasts(l), recopiedTo(st), fmt.Sprintf("seed %d round %d", seed, round))
					checkCleaned(t, readAll(t, l), w.written, checkpoint)
				}
				if aborted == 0 {
					t.Fatalf("seed %d: no aborted record removed; the test proves nothing", seed)
				}
				for pid := range w.open {
					w.end(t, pid, rng.IntN(2) == 0)
				}
				if err := l.Roll(); err != nil {
					t.Fatal(err)
				}
				// Data goes, then markers get their horizon, then they go.
				for range 3 {
					c.add(2 * retentionMs * time.Millisecond)
					cleanToEnd(t, l, tc.mem, c)
				}
				checkCleaned(t, readAll(t, l), w.written, l.Offsets().LogEnd)
				if _, aborts := markers(t, l); aborts != 0 {
					t.Fatalf("seed %d: %d ABORT markers outlived their transactions' data and horizon", seed, aborts)
				}
				if err := l.Close(); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// TestCleanTransactionsByRule walks Kafka's rules on a fixed log: aborted
// data goes whatever its key and hides nothing; its ABORT marker stays
// while the data is there, then gets a horizon, then goes; a COMMIT marker
// stays while its transaction's batches do; an open transaction stops the
// round.
func TestCleanTransactionsByRule(t *testing.T) {
	c := &clock{t: time.UnixMilli(1_700_000_000_000)}
	l := openCompacted(t, t.TempDir(), c, "segment.bytes", "1048576")
	defer l.Close()
	w := newTxnWriter(l, rand.New(rand.NewPCG(1, 1)), c, 1)
	plain := func(key, value string) {
		w.b.Reset(record.NewBatchHeader())
		w.b.Append(c.now().UnixMilli(), []byte(key), []byte(value), nil)
		batch, _ := w.b.Build()
		info := w.appendBatch(t, batch)
		w.written = append(w.written, rec{offset: info.FirstOffset, key: key, hasKey: true, value: value})
	}
	txn := func(pid int64, key, value string) {
		h := record.NewBatchHeader()
		h.Transactional, h.ProducerID, h.ProducerEpoch, h.BaseSequence = true, pid, 0, w.seq[pid]
		w.b.Reset(h)
		w.b.Append(c.now().UnixMilli(), []byte(key), []byte(value), nil)
		batch, _ := w.b.Build()
		info := w.appendBatch(t, batch)
		w.seq[pid]++
		w.open[pid] = append(w.open[pid], len(w.written))
		w.written = append(w.written, rec{offset: info.FirstOffset, key: key, hasKey: true, value: value})
	}
	plain("a", "a1")
	txn(1, "a", "a-aborted") // must not hide a1
	w.end(t, 1, false)
	txn(2, "b", "b-committed")
	w.end(t, 2, true)
	plain("c", "c1")
	if err := l.Roll(); err != nil {
		t.Fatal(err)
	}
	txn(3, "c", "c-open") // open: the next segment is not cleaned
	if err := l.Roll(); err != nil {
		t.Fatal(err)
	}
	openAt := w.firstOpen()

	clean := func() Stats {
		t.Helper()
		st, err := Clean(context.Background(), l, -1, Options{MemoryBytes: 1 << 20, Now: c.now})
		if err != nil {
			t.Fatal(err)
		}
		if st.End > openAt {
			t.Fatalf("cleaned to %d, past the open transaction at %d", st.End, openAt)
		}
		checkCleaned(t, readAll(t, l), w.written, st.End)
		return st
	}
	st := clean()
	if st.AbortedRemoved != 1 {
		t.Fatalf("round 1 removed %d aborted records, want 1", st.AbortedRemoved)
	}
	if commits, aborts := markers(t, l); commits != 1 || aborts != 1 {
		t.Fatalf("round 1: %d COMMIT and %d ABORT markers, want both kept", commits, aborts)
	}
	// Round 2: the ABORT marker's data is gone: it gets a horizon. The
	// COMMIT marker's batch is still there (b is its key's latest).
	c.add(time.Second)
	clean()
	if commits, aborts := markers(t, l); commits != 1 || aborts != 1 {
		t.Fatalf("round 2: %d COMMIT and %d ABORT markers, want both kept", commits, aborts)
	}
	// Round 3, past the horizon: the ABORT marker goes; the COMMIT stays.
	c.add(2 * retentionMs * time.Millisecond)
	if st := clean(); st.MarkersRemoved != 1 {
		t.Fatalf("round 3 removed %d markers, want 1", st.MarkersRemoved)
	}
	if commits, aborts := markers(t, l); commits != 1 || aborts != 0 {
		t.Fatalf("round 3: %d COMMIT and %d ABORT markers, want 1 and 0", commits, aborts)
	}
	// Commit the open transaction: now everything is cleanable, and c-open
	// supersedes c1.
	w.end(t, 3, true)
	if err := l.Roll(); err != nil {
		t.Fatal(err)
	}
	openAt = 1 << 62
	st = clean()
	if st.End != l.Offsets().LogEnd-0 && st.End < w.written[len(w.written)-1].offset {
		t.Fatalf("round 4 ended at %d", st.End)
	}
}

// TestGroupSegments: groups stop at segment.bytes, at either index's
// summed size, and at a 32-bit offset span; empty segments stand alone.
func TestGroupSegments(t *testing.T) {
	seg := func(base, next, size int64) local.SegmentInfo {
		return local.SegmentInfo{BaseOffset: base, NextOffset: next, Size: size}
	}
	sizes := map[int64][2]int64{0: {40, 12}, 10: {40, 12}, 20: {40, 24}, 30: {8, 12}, 50: {0, 0}, 60: {8, 12}}
	idx := func(s local.SegmentInfo) (int64, int64, error) { v := sizes[s.BaseOffset]; return v[0], v[1], nil }
	segs := []local.SegmentInfo{seg(0, 10, 100), seg(10, 20, 100), seg(20, 30, 100), seg(30, 50, 100), seg(50, 60, 0), seg(60, 1<<33, 100), seg(1<<33, 1<<33+5, 10)}
	shape := func(gs [][]local.SegmentInfo) string {
		var out []string
		for _, g := range gs {
			var bases []string
			for _, s := range g {
				bases = append(bases, fmt.Sprint(s.BaseOffset))
			}
			out = append(out, fmt.Sprint(bases))
		}
		return fmt.Sprint(out)
	}
	for _, c := range []struct {
		segBytes, indexBytes, end int64
		want                      string
	}{
		{1000, 1000, 1 << 40, "[[0 10 20 30 50] [60] [8589934592]]"}, // the span to 2^33 breaks the last group; the empty 50 joins
		{250, 1000, 1 << 40, "[[0 10] [20 30 50] [60] [8589934592]]"},
		{1000, 80, 1 << 40, "[[0 10] [20 30 50] [60] [8589934592]]"}, // offset index: 40+40 fits, +40 does not
		{1000, 1000, 25, "[[0 10 20]]"},                              // only segments below end
	} {
		groups, err := groupSegments(segs, c.end, c.segBytes, c.indexBytes, idx)
		if err != nil {
			t.Fatal(err)
		}
		got := shape(groups)
		if got != c.want {
			t.Errorf("segment.bytes %d, index bytes %d, end %d: %s, want %s", c.segBytes, c.indexBytes, c.end, got, c.want)
		}
	}
	// The time index alone can split a group.
	timeHeavy := func(local.SegmentInfo) (int64, int64, error) { return 8, 50, nil }
	groups, err := groupSegments(segs[:2], 1<<40, 1000, 80, timeHeavy)
	if err != nil {
		t.Fatal(err)
	}
	if got := shape(groups); got != "[[0] [10]]" {
		t.Errorf("time indexes of 50+50 bytes under 80: %s, want [[0] [10]]", got)
	}
}

// TestCleanKeepsProducersLastBatch: the last batch of a producer that
// still has state stays (emptied, its header kept) when every record in
// it is superseded, so that a log whose snapshots are lost rebuilds the
// producer's last sequence from the log and still finds a retry of it a
// duplicate (Kafka's rule); the previous batch of the same producer goes.
func TestCleanKeepsProducersLastBatch(t *testing.T) {
	dir := t.TempDir()
	c := &clock{t: time.UnixMilli(1_700_000_000_000)}
	l := openCompacted(t, dir, c)
	var b record.Builder
	idem := func(seq int32) []byte {
		h := record.NewBatchHeader()
		h.ProducerID, h.ProducerEpoch, h.BaseSequence = 77, 0, seq
		b.Reset(h)
		b.Append(c.now().UnixMilli(), []byte("a"), []byte(fmt.Sprintf("idem-%d", seq)), nil)
		out, _ := b.Build()
		return append([]byte(nil), out...)
	}
	appendOne := func(data []byte) backend.AppendInfo {
		info, err := l.Append(context.Background(), data, backend.AppendOptions{AssignOffsets: true})
		if err != nil {
			t.Fatal(err)
		}
		return info
	}
	appendOne(idem(0))
	last := idem(1)
	lastInfo := appendOne(append([]byte(nil), last...))
	for i := range 60 { // supersede key "a", and fill segments
		b.Reset(record.NewBatchHeader())
		b.Append(c.now().UnixMilli(), []byte("a"), []byte(fmt.Sprintf("plain-%d-%s", i, strings.Repeat("x", 100))), nil)
		out, _ := b.Build()
		appendOne(append([]byte(nil), out...))
	}
	if err := l.Roll(); err != nil {
		t.Fatal(err)
	}
	l.SetHighWatermark(l.Offsets().LogEnd)
	if _, err := Clean(context.Background(), l, -1, Options{Now: c.now}); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	// Lose every snapshot: the state comes back from the log alone.
	snaps, _ := filepath.Glob(filepath.Join(dir, "*"+local.SnapshotSuffix))
	for _, s := range snaps {
		os.Remove(s)
	}
	l = openCompacted(t, dir, c)
	defer l.Close()
	info, err := l.Append(context.Background(), last, backend.AppendOptions{AssignOffsets: true})
	if err != nil || !info.Duplicate || info.FirstOffset != lastInfo.FirstOffset {
		t.Fatalf("retry of the producer's last batch after cleaning and a reload: %+v, %v; want a duplicate of %d", info, err, lastInfo.FirstOffset)
	}
	if got := readAll(t, l); len(got) == 0 || got[0].offset == 0 {
		t.Fatalf("the producer's superseded first batch is still there: %+v", got[:min(3, len(got))])
	}
}
