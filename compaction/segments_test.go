package compaction

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/local"
	"github.com/tierlog/tierlog/record"
)

// roundWriter writes rounds that rewrite every key of a small key set, in
// batches of a few records, from producers with ids (idempotent, with
// sequences) and without (-1): by the next round every batch of the last
// one holds only superseded records.
type roundWriter struct {
	l       *local.Log
	rng     *rand.Rand
	c       *clock
	keys    int
	seq     map[int64]int32
	last    map[int64]int64 // producer id -> last offset of its last batch
	written []rec
	b       record.Builder
}

func (w *roundWriter) round(t *testing.T, n int) {
	t.Helper()
	perm := w.rng.Perm(w.keys)
	for len(perm) > 0 {
		pid := int64(-1)
		if p := w.rng.IntN(4); p > 0 {
			pid = int64(p)
		}
		h := record.NewBatchHeader()
		if pid >= 0 {
			h.ProducerID, h.ProducerEpoch, h.BaseSequence = pid, 0, w.seq[pid]
		}
		w.b.Reset(h)
		k := min(len(perm), 1+w.rng.IntN(6))
		var recs []rec
		for _, key := range perm[:k] {
			r := rec{key: fmt.Sprintf("key-%d", key), hasKey: true, value: fmt.Sprintf("round-%d-%d", n, w.rng.Int64())}
			w.b.Append(w.c.now().UnixMilli(), []byte(r.key), []byte(r.value), nil)
			recs = append(recs, r)
		}
		perm = perm[k:]
		batch, err := w.b.Build()
		if err != nil {
			t.Fatal(err)
		}
		info, err := w.l.Append(context.Background(), batch, backend.AppendOptions{AssignOffsets: true})
		if err != nil {
			t.Fatal(err)
		}
		if err := w.l.SetHighWatermark(info.LastOffset + 1); err != nil {
			t.Fatal(err)
		}
		if pid >= 0 {
			w.seq[pid] += int32(k)
			w.last[pid] = info.LastOffset
		}
		for i := range recs {
			recs[i].offset = info.FirstOffset + int64(i)
		}
		w.written = append(w.written, recs...)
	}
}

// recopiedTo is where a round with stats st recopied the segments up to
// (-1 when it cleaned nothing).
func recopiedTo(st Stats) int64 {
	if st.End > st.FirstDirty {
		return st.End
	}
	return -1
}

// producerLasts is, per producer with state in l, the last offset of its
// last batch (what the model tests without their own producer model check
// empty batches against).
func producerLasts(l *local.Log) map[int64]int64 {
	out := map[int64]int64{}
	for _, pr := range l.Producers() {
		if off := pr.LastOffset(); off >= 0 {
			out[pr.ProducerID] = off
		}
	}
	return out
}

// checkSegments checks every closed segment of l: its batches lie within
// its own range [base, next segment's base), their offsets rise, and,
// below recopied (where the last clean recopied the segments; -1 when it
// recopied none), a batch with no records is the last batch of a producer
// with an id (the only empty batch a clean keeps, as Kafka's does); and
// that each producer's last batch is still there.
func checkSegments(t *testing.T, l *local.Log, last map[int64]int64, recopied int64, when string) {
	t.Helper()
	segs := l.SegmentInfos()
	found := map[int64]bool{}
	prev := int64(-1)
	for i, s := range segs[:len(segs)-1] {
		next := segs[i+1].BaseOffset
		h, err := l.Segments().OpenSegment(s.BaseOffset)
		if err != nil {
			t.Fatalf("%s: %v", when, err)
		}
		sc := record.NewScanner(h, 0, h.Size(), record.ScanOptions{Validate: true})
		for sc.Next() {
			e := sc.Entry()
			b := e.Batch()
			switch {
			case e.BaseOffset < s.BaseOffset || e.LastOffset >= next:
				t.Fatalf("%s: segment %d holds the batch of offsets %d..%d, outside its range [%d, %d)",
					when, s.BaseOffset, e.BaseOffset, e.LastOffset, s.BaseOffset, next)
			case e.BaseOffset <= prev:
				t.Fatalf("%s: segment %d: the batch at %d follows one ending at %d", when, s.BaseOffset, e.BaseOffset, prev)
			case b.NumRecords() == 0 && s.BaseOffset < recopied && (b.ProducerID() < 0 || last[b.ProducerID()] != e.LastOffset):
				t.Fatalf("%s: segment %d keeps an empty batch %d..%d of producer %d (its last batch ends at %d)",
					when, s.BaseOffset, e.BaseOffset, e.LastOffset, b.ProducerID(), last[b.ProducerID()])
			}
			prev = e.LastOffset
			if b.ProducerID() >= 0 && last[b.ProducerID()] == e.LastOffset {
				found[b.ProducerID()] = true
			}
		}
		err = sc.Err()
		h.Close()
		if err != nil {
			t.Fatalf("%s: segment %d: %v", when, s.BaseOffset, err)
		}
	}
	for pid, off := range last {
		if off < segs[len(segs)-1].BaseOffset && !found[pid] {
			t.Fatalf("%s: the last batch of producer %d (ending at %d) is gone", when, pid, off)
		}
	}
}

// TestCleanSmallSegmentsModel: many small segments, rounds that supersede
// every batch of the round before, producers with and without ids, and
// cleans that go over already cleaned segments again (from the
// checkpoint, and from the log start). After every clean, every segment
// holds only batches of its own range, empty batches are only producers'
// last ones, and a read from the start returns the model's records.
// A clean used to keep each group's last batch, emptied, whatever its
// producer: a log of segments of one empty batch each, which a consumer
// (librdkafka) took for a message too large to fetch.
func TestCleanSmallSegmentsModel(t *testing.T) {
	for seed := range uint64(6) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 21))
			c := &clock{t: time.UnixMilli(1_700_000_000_000)}
			l := openCompacted(t, t.TempDir(), c, "segment.bytes", "1024", "min.cleanable.dirty.ratio", "0.01")
			defer l.Close()
			w := &roundWriter{l: l, rng: rng, c: c, keys: 20 + rng.IntN(40), seq: map[int64]int32{}, last: map[int64]int64{}}
			checkpoint := int64(-1)
			for round := range 12 {
				w.round(t, round)
				if rng.IntN(3) == 0 {
					if err := l.Roll(); err != nil {
						t.Fatal(err)
					}
				}
				from := checkpoint
				if rng.IntN(4) == 0 {
					from = -1 // the whole log again
				}
				st, err := Clean(context.Background(), l, from, Options{MemoryBytes: 1 << 20, Now: c.now})
				if err != nil {
					t.Fatalf("round %d: %v", round, err)
				}
				if from == checkpoint {
					checkpoint = st.End
				}
				when := fmt.Sprintf("round %d (clean from %d to %d)", round, from, st.End)
				checkSegments(t, l, w.last, recopiedTo(st), when)
				checkCleaned(t, readAll(t, l), w.written, st.End)
			}
			if err := l.Roll(); err != nil {
				t.Fatal(err)
			}
			cleanToEnd(t, l, 1<<20, c)
			checkSegments(t, l, w.last, l.Offsets().LogEnd, "after cleaning to the end")
			checkCleaned(t, readAll(t, l), w.written, l.Offsets().LogEnd)
		})
	}
}
