package compaction

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"
)

// TestOffsetMapRobinHood fills small maps to capacity with hashes chosen
// to crowd a few home slots, many at the end of the table so that runs
// wrap to its start, and checks after each Put that every key put is
// found with its latest offset, that keys never put are not, and the
// table's invariant: each run is sorted by home slot and has no gap
// between a key's home and its slot.
func TestOffsetMapRobinHood(t *testing.T) {
	for _, slots := range []int{16, 17, 100, 1000} {
		for seed := range uint64(20) {
			rng := rand.New(rand.NewPCG(seed, uint64(slots)))
			m, err := NewOffsetMap(slots * slotSize)
			if err != nil {
				t.Fatal(err)
			}
			// Hashes of homes in a few hot spots, the last slot among them.
			hot := []uint64{^uint64(0), rng.Uint64(), rng.Uint64()}
			hash := func() keyHash {
				hi := rng.Uint64()
				if rng.IntN(4) != 0 {
					hi = hot[rng.IntN(len(hot))] - uint64(rng.IntN(3))<<56/uint64(slots)
				}
				return keyHash{hi, rng.Uint64()}
			}
			model := map[keyHash]int64{}
			var keys []keyHash
			for off := int64(0); ; off++ {
				h := hash()
				if len(keys) > 0 && rng.IntN(3) == 0 {
					h = keys[rng.IntN(len(keys))] // an update
				}
				err := m.put(h, off)
				if _, held := model[h]; !held && len(model) == m.Capacity() {
					if err != ErrMapFull {
						t.Fatalf("slots %d seed %d: a new key past capacity: %v", slots, seed, err)
					}
					break
				}
				if err != nil {
					t.Fatalf("slots %d seed %d: put: %v", slots, seed, err)
				}
				if _, held := model[h]; !held {
					keys = append(keys, h)
				}
				model[h] = off
				checkRuns(t, m)
				if m.Len() != len(model) {
					t.Fatalf("slots %d seed %d: len %d, model %d", slots, seed, m.Len(), len(model))
				}
				for k, want := range model {
					if got, ok := m.get(k); !ok || got != want {
						t.Fatalf("slots %d seed %d: get %x = %d, %v; want %d", slots, seed, k, got, ok, want)
					}
				}
				for range 10 {
					if k := hash(); model[k] == 0 {
						if _, ok := m.get(k); ok {
							t.Fatalf("slots %d seed %d: a key never put was found", slots, seed)
						}
					}
				}
			}
		}
	}
}

// checkRuns checks that every key sits at or after its home slot with no
// empty slot between, and that homes never go back along a run.
func checkRuns(t *testing.T, m *OffsetMap) {
	t.Helper()
	empty := func(i int) bool {
		s := m.tab[i*slotWords:]
		return s[0]|s[1]|s[2] == 0
	}
	for i := range m.slots {
		if empty(i) {
			continue
		}
		d := m.dist(i, m.tab[i*slotWords])
		for j := range d {
			if empty((i - 1 - j + m.slots) % m.slots) {
				t.Fatalf("slot %d holds a key %d slots from its home, past an empty slot", i, d)
			}
		}
		if next := (i + 1) % m.slots; !empty(next) && m.dist(next, m.tab[next*slotWords]) > d+1 {
			t.Fatalf("slot %d: the run goes back to an earlier home", next)
		}
	}
}

// BenchmarkOffsetMapBatched is BenchmarkOffsetMap's Put, GetHit and
// GetMiss through keyBatch, as the cleaner looks keys up: batchKeys keys
// hashed, their slots touched together, then probed. ns/op is per key.
func BenchmarkOffsetMapBatched(b *testing.B) {
	key := func(prefix string, i int) []byte { return fmt.Appendf(nil, "%s-%011d", prefix, i) }
	for _, load := range []float64{0.2, 0.9} {
		m, err := NewOffsetMap(DefaultMemoryBytes)
		if err != nil {
			b.Fatal(err)
		}
		n := int(float64(m.Capacity()) * load / 0.9)
		hit, miss := make([]keyHash, n), make([]keyHash, n)
		for i := range n {
			hit[i], miss[i] = hashKey(key("key", i)), hashKey(key("miss", i))
			if err := m.put(hit[i], int64(i)); err != nil {
				b.Fatal(err)
			}
		}
		// queue copies hashes (hashKey's cost is not what is measured; the
		// cleaner hashes each key as it queues it).
		var kb keyBatch
		queue := func(hs []keyHash, i int) {
			for kb.n = 0; kb.n < batchKeys; kb.n++ {
				kb.h[kb.n], kb.off[kb.n] = hs[(i+kb.n)%n], int64(n+i+kb.n)
			}
		}
		name := "load=" + strconv.FormatFloat(load, 'f', 1, 64)
		b.Run(name+"/Put", func(b *testing.B) {
			for i := 0; b.Loop(); i += batchKeys {
				queue(hit, i)
				if err := m.putBatch(&kb); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batchKeys), "ns/key")
		})
		for _, get := range []struct {
			name  string
			hs    []keyHash
			found bool
		}{{"GetHit", hit, true}, {"GetMiss", miss, false}} {
			b.Run(name+"/"+get.name, func(b *testing.B) {
				for i := 0; b.Loop(); i += batchKeys {
					queue(get.hs, i)
					m.touch(&kb)
					for j := range kb.n {
						if _, ok := m.get(kb.h[j]); ok != get.found {
							b.Fatalf("found %v, want %v", ok, get.found)
						}
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batchKeys), "ns/key")
			})
		}
	}
}
