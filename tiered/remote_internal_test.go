package tiered

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tierlog/tierlog/manifest"
	"github.com/tierlog/tierlog/record"
)

// TestObjectKeyIsTheKey: the caches' key of a segment's object builds
// the key the layout gives it, under any prefix.
func TestObjectKeyIsTheKey(t *testing.T) {
	seg := manifest.Segment{BaseOffset: 100, LastOffset: 199, ID: [8]byte{1, 2, 3, 4, 5, 6, 7, 0xef}}
	for _, prefix := range []string{"", "orders-0", "tl/orders-0", "tl/orders-0/"} {
		p := &Partition{prefix: prefix}
		for _, suffix := range manifest.AllSuffixes {
			if got, want := p.objectKey(seg, suffix).String(), p.layout().Segment(seg, suffix); got != want {
				t.Errorf("prefix %q suffix %s: objectKey builds %q, the layout %q", prefix, suffix, got, want)
			}
		}
	}
}

// walkRand returns a seeded random source (TIERLOG_WALK_SEED to replay),
// logging the seed.
func walkRand(t *testing.T) *rand.Rand {
	t.Helper()
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("TIERLOG_WALK_SEED"); s != "" {
		var err error
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("TIERLOG_WALK_SEED=%q: %v", s, err)
		}
	}
	t.Logf("seed %d (set TIERLOG_WALK_SEED to replay)", seed)
	return rand.New(rand.NewPCG(seed, 28))
}

// walkSegmentBytes returns n batches of 1 to 6 records from offset base, and
// where each starts.
func walkSegmentBytes(t *testing.T, rng *rand.Rand, base int64, n int) ([]byte, []int64) {
	t.Helper()
	var b record.Builder
	var data []byte
	var starts []int64
	off := base
	for i := range n {
		b.Reset(record.NewBatchHeader())
		k := 1 + rng.IntN(6)
		for j := range k {
			b.Append(1_700_000_000_000+int64(i), nil, fmt.Appendf(nil, "%d-%d-%s", i, j, strings.Repeat("v", rng.IntN(300))), nil)
		}
		batch, err := b.Build()
		if err != nil {
			t.Fatal(err)
		}
		batch.SetBaseOffset(off)
		starts = append(starts, int64(len(data)))
		data = append(data, batch...)
		off += int64(k)
	}
	return data, starts
}

// TestWalkedBatchesAreTheHeaders: what a chunk's walk on arrival keeps of
// a batch is what the batch's header says, read where a read's walk reads
// it, and a batch it calls ordered passes the order check against the
// batch before it; from every batch of the chunk on, whether a base
// offset in it was moved or not. The walk goes on to the first batch the
// chunk cuts or the order check fails.
func TestWalkedBatchesAreTheHeaders(t *testing.T) {
	rng := walkRand(t)
	const base = 1000
	for trial := range 300 {
		data, starts := walkSegmentBytes(t, rng, base, 30)
		last, _ := record.HeaderAt(data, starts[len(starts)-1], int64(len(data)))
		seg := manifest.Segment{BaseOffset: base, LastOffset: last.LastOffset, Size: int64(len(data))}
		what := fmt.Sprintf("trial %d", trial)
		if rng.IntN(3) > 0 {
			k := rng.IntN(len(starts))
			b := record.Batch(data[starts[k]:])
			nb := b.BaseOffset() + []int64{-8, -2, -1, 1, 2, 7, 1 << 40}[rng.IntN(7)]
			binary.BigEndian.PutUint64(data[starts[k]:], uint64(nb)) // outside the CRC
			what += fmt.Sprintf(", batch %d's base moved to %d", k, nb)
		}
		key := objectKey{prefix: "tl/orders-0", base: seg.BaseOffset, last: seg.LastOffset, suffix: manifest.LogSuffix}
		first := rng.IntN(len(starts))
		s := starts[first]
		chunkData := data[s : s+1+rng.Int64N(int64(len(data))-s)]
		what += fmt.Sprintf(", a chunk of %d bytes from position %d", len(chunkData), s)
		batches := walkBatches(chunkData, seg, key, s)

		// header returns the batch at position q of the object as a read's
		// walk reads it.
		header := func(q int64) (record.Entry, error) {
			e, err := record.HeaderAt(chunkData, q-s, int64(len(chunkData)))
			e.Position = q
			return e, err
		}
		want := 0 // the batches the walk must keep
		for j := first; j < len(starts); j++ {
			e, err := header(starts[j])
			if err != nil || j > first && checkOrder(e, mustHeader(t, header, starts[j-1]).LastOffset, seg, key, starts[j]) != nil {
				break
			}
			want++
		}
		if len(batches) != want {
			t.Fatalf("%s: the walk kept %d batches, want %d", what, len(batches), want)
		}
		for j := first; j < len(starts) && starts[j] < s+int64(len(chunkData)); j++ {
			from := starts[j]
			w := walkedFrom(batches, from-s, from)
			for k := j; k < len(starts) && starts[k] < s+int64(len(chunkData)); k++ {
				q := starts[k]
				e, known, ordered := w.batch(q - from)
				if known != (k-first < len(batches)) {
					t.Fatalf("%s: from position %d, the batch at %d known %v, the walk kept %d batches", what, from, q, known, len(batches))
				}
				if !known {
					continue
				}
				h := mustHeader(t, header, q)
				if e.Position != h.Position || e.Size != h.Size || e.Magic != h.Magic || e.BaseOffset != h.BaseOffset || e.LastOffset != h.LastOffset {
					t.Fatalf("%s: from position %d, the batch at %d: walked %+v, its header %+v", what, from, q, e, h)
				}
				if ordered != (k > j) {
					t.Fatalf("%s: from position %d, the batch at %d ordered %v", what, from, q, ordered)
				}
				if ordered {
					if err := checkOrder(h, mustHeader(t, header, starts[k-1]).LastOffset, seg, key, q); err != nil {
						t.Fatalf("%s: from position %d, the batch at %d called ordered: %v", what, from, q, err)
					}
				}
			}
		}
		// A position no batch starts at has none.
		if len(batches) > 0 {
			if w := walkedFrom(batches, 1, s+1); len(w.batches) != 0 {
				t.Fatalf("%s: the walk has batches from a position inside one", what)
			}
		}
	}
}

func mustHeader(t *testing.T, header func(int64) (record.Entry, error), q int64) record.Entry {
	t.Helper()
	e, err := header(q)
	if err != nil {
		t.Fatalf("the header at %d: %v", q, err)
	}
	return e
}

// TestReaderPoolTakesNoAllocation: taking a reader of the pool and
// returning it, as every remote read does, allocates nothing.
func TestReaderPoolTakesNoAllocation(t *testing.T) {
	r := NewReaderPool(2, 2)
	ctx := context.Background()
	if n := testing.AllocsPerRun(100, func() {
		release, err := r.acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		release()
	}); n != 0 {
		t.Errorf("acquire and release: %v allocations", n)
	}
	if n := testing.AllocsPerRun(100, func() {
		if release, ok := r.tryAcquire(); ok {
			release()
		}
	}); n != 0 {
		t.Errorf("tryAcquire and release: %v allocations", n)
	}
}

// TestWalkedBatchesCountedInTheChunk: what a chunk's walk on arrival
// keeps in memory is what the chunk cache counts of it. A window whose
// first batch is small (a transaction marker, a one-record append) and
// whose others are large holds a few batches, yet its list of them was
// sized for as many batches of the first's size as the window could hold.
func TestWalkedBatchesCountedInTheChunk(t *testing.T) {
	var b record.Builder
	var data []byte
	off := int64(0)
	for i := range 11 {
		b.Reset(record.NewBatchHeader())
		value := make([]byte, 100<<10)
		if i == 0 {
			value = nil // a small batch first
		}
		b.Append(1_700_000_000_000, nil, value, nil)
		batch, err := b.Build()
		if err != nil {
			t.Fatal(err)
		}
		batch.SetBaseOffset(off)
		data = append(data, batch...)
		off++
	}
	seg := manifest.Segment{BaseOffset: 0, LastOffset: off - 1, Size: int64(len(data))}
	key := objectKey{prefix: "tl/orders-0", base: seg.BaseOffset, last: seg.LastOffset, suffix: manifest.LogSuffix}
	ch := chunk{data: data, batches: walkBatches(data, seg, key, 0)}
	if len(ch.batches) != 11 {
		t.Fatalf("the walk kept %d batches, want 11", len(ch.batches))
	}
	held := int64(len(ch.data)) + int64(cap(ch.batches))*walkedBatchBytes
	if held > ch.size() {
		t.Fatalf("a chunk of %d bytes and %d walked batches holds %d bytes (a list of %d batches), the cache counts %d",
			len(ch.data), len(ch.batches), held, cap(ch.batches), ch.size())
	}
}
