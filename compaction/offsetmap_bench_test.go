package compaction_test

import (
	"fmt"
	"strconv"
	"testing"

	"github.com/tierlog/tierlog/compaction"
)

// flatKeys returns n distinct 16-byte keys, "<prefix>-%0*d", in one
// buffer (a slice of slices would weigh more than the map under test).
func flatKeys(prefix string, n int) (key func(i int) []byte) {
	const size = 16
	buf := make([]byte, 0, n*size)
	for i := range n {
		k := fmt.Appendf(nil, "%s-%0*d", prefix, size-1-len(prefix), i)
		buf = append(buf, k...)
	}
	return func(i int) []byte { return buf[i*size : (i+1)*size : (i+1)*size] }
}

// BenchmarkOffsetMap measures Put and Get in the cleaner's default 128 MiB
// map at two loads: 0.2 (the 1 GiB BenchmarkClean: 1M keys) and 0.9 (a
// full map, Kafka's load factor). Put updates keys already held (as most
// of a dirty section's records do); GetHit finds held keys; GetMiss looks
// up keys never put (the clean section's keys that the dirty section does
// not update). Keys are visited in order; their hashes scatter them.
func BenchmarkOffsetMap(b *testing.B) {
	for _, load := range []float64{0.2, 0.9} {
		m, err := compaction.NewOffsetMap(compaction.DefaultMemoryBytes)
		if err != nil {
			b.Fatal(err)
		}
		n := int(float64(m.Capacity()) * load / 0.9)
		key := flatKeys("key", n)
		miss := flatKeys("miss", n)
		for i := range n {
			if err := m.Put(key(i), int64(i)); err != nil {
				b.Fatal(err)
			}
		}
		name := "load=" + strconv.FormatFloat(load, 'f', 1, 64)
		b.Run(name+"/Put", func(b *testing.B) {
			i := 0
			for b.Loop() {
				if err := m.Put(key(i%n), int64(n+i)); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
		b.Run(name+"/GetHit", func(b *testing.B) {
			i := 0
			for b.Loop() {
				if _, ok := m.Get(key(i % n)); !ok {
					b.Fatal("a key put is missing")
				}
				i++
			}
		})
		b.Run(name+"/GetMiss", func(b *testing.B) {
			i := 0
			for b.Loop() {
				if _, ok := m.Get(miss(i % n)); ok {
					b.Fatal("a key never put was found")
				}
				i++
			}
		})
	}
}

// BenchmarkOffsetMapFill fills an 8 MiB map to its capacity with new keys,
// reporting the time per key and the probes per Put of the last fill.
func BenchmarkOffsetMapFill(b *testing.B) {
	m, err := compaction.NewOffsetMap(8 << 20)
	if err != nil {
		b.Fatal(err)
	}
	key := flatKeys("key", m.Capacity())
	for b.Loop() {
		m.Clear()
		for i := range m.Capacity() {
			if err := m.Put(key(i), int64(i)); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(m.Capacity()), "ns/key")
	b.ReportMetric(m.ProbesPerLookup(), "probes/lookup")
}
