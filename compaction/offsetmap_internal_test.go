package compaction

import (
	"math/rand/v2"
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
