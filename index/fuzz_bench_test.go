package index_test

import (
	"encoding/binary"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"testing"

	"github.com/tierlog/tierlog/index"
	"github.com/tierlog/tierlog/vfs"
)

// FuzzIndexLoad loads arbitrary bytes as both index kinds: no panic, the
// valid prefix keeps Kafka's order, and every lookup answers an entry of
// that prefix (or the documented miss).
func FuzzIndexLoad(f *testing.F) {
	f.Add([]byte{0, 0, 0, 3, 0, 0, 0x12, 0x7a, 0, 0, 0, 7, 0, 0, 0x25, 0x63}, int64(0), int64(5))
	f.Add(make([]byte, 36), int64(100), int64(-1))
	f.Fuzz(func(t *testing.T, data []byte, base int64, target int64) {
		if base < 0 {
			base = -base
		}
		base %= 1 << 62
		oi := index.NewOffsetIndexView(data, base)
		n := oi.Entries()
		if n*index.OffsetEntrySize > len(data) {
			t.Fatalf("%d entries over %d bytes", n, len(data))
		}
		for i := 1; i < n; i++ {
			a, b := oi.Entry(i-1), oi.Entry(i)
			if b.Offset <= a.Offset || b.Position <= a.Position {
				t.Fatalf("valid prefix out of order at %d: %+v then %+v", i, a, b)
			}
		}
		e := oi.Lookup(target)
		if e.Offset > target && !(e.Offset == base && e.Position == 0) {
			t.Fatalf("lookup %d returned %+v", target, e)
		}
		_ = oi.SanityCheck()

		ti := index.NewTimeIndexView(data, base)
		for i := 1; i < ti.Entries(); i++ {
			a, b := ti.Entry(i-1), ti.Entry(i)
			if b.Timestamp <= a.Timestamp || b.Offset < a.Offset {
				t.Fatalf("time prefix out of order at %d", i)
			}
		}
		te := ti.Lookup(target)
		if te.Timestamp > target && !(te.Timestamp == -1 && te.Offset == base) {
			t.Fatalf("time lookup %d returned %+v", target, te)
		}
		_ = ti.SanityCheck()
	})
}

// BenchmarkLookupFull10MiB looks up random offsets in a full 10 MiB offset
// index (1,310,720 entries), mmap'd, as the active segment's index is.
func BenchmarkLookupFull10MiB(b *testing.B) {
	dir := b.TempDir()
	oi, err := index.OpenOffsetIndex(vfs.Default, filepath.Join(dir, "00000000000000000000.index"), 0, 10<<20)
	if err != nil {
		b.Fatal(err)
	}
	defer oi.Close()
	for i := 0; !oi.IsFull(); i++ {
		if err := oi.Append(int64(i)*10+5, int32(i)*100+1); err != nil {
			b.Fatal(err)
		}
	}
	if oi.Entries() != 1310720 {
		b.Fatalf("%d entries", oi.Entries())
	}
	rng := rand.New(rand.NewPCG(1, 1))
	targets := make([]int64, 1<<16)
	for i := range targets {
		targets[i] = rng.Int64N(13107200)
	}
	b.ResetTimer()
	i := 0
	for b.Loop() {
		e := oi.Lookup(targets[i&(len(targets)-1)])
		if e.Offset > targets[i&(len(targets)-1)] {
			b.Fatal("wrong")
		}
		i++
	}
}

// BenchmarkLookupView10MiB is the same over a byte view (a remote index).
func BenchmarkLookupView10MiB(b *testing.B) {
	data := make([]byte, 10<<20)
	for i := 0; i < len(data)/8; i++ {
		binary.BigEndian.PutUint32(data[i*8:], uint32(i*10+5))
		binary.BigEndian.PutUint32(data[i*8+4:], uint32(i*100+1))
	}
	oi := index.NewOffsetIndexView(data, 0)
	rng := rand.New(rand.NewPCG(1, 1))
	targets := make([]int64, 1<<16)
	for i := range targets {
		targets[i] = rng.Int64N(13107200)
	}
	i := 0
	for b.Loop() {
		_ = oi.Lookup(targets[i&(len(targets)-1)])
		i++
	}
}

// BenchmarkBareBinarySearch10MiB is the machine's baseline in the same run:
// slices.BinarySearch over 1,310,720 int64 keys in Go memory, nothing else.
func BenchmarkBareBinarySearch10MiB(b *testing.B) {
	keys := make([]int64, 1310720)
	for i := range keys {
		keys[i] = int64(i)*10 + 5
	}
	rng := rand.New(rand.NewPCG(1, 1))
	targets := make([]int64, 1<<16)
	for i := range targets {
		targets[i] = rng.Int64N(13107200)
	}
	i, sink := 0, 0
	for b.Loop() {
		j, _ := slices.BinarySearch(keys, targets[i&(len(targets)-1)])
		sink += j
		i++
	}
	_ = sink
}
