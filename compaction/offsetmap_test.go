package compaction_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/tierlog/tierlog/compaction"
)

// TestOffsetMapAgainstModel puts random keys with rising offsets and checks
// every key against a plain Go map, across a Clear.
func TestOffsetMapAgainstModel(t *testing.T) {
	m, err := compaction.NewOffsetMap(24 * 10_000)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for round := 0; round < 2; round++ {
		model := map[string]int64{}
		for off := int64(0); off < 20_000; off++ {
			k := fmt.Sprintf("key-%d", rng.IntN(5_000))
			if err := m.Put([]byte(k), off); err != nil {
				t.Fatal(err)
			}
			model[k] = off
		}
		if m.Len() != len(model) || m.LatestOffset() != 19_999 {
			t.Fatalf("len %d latest %d, want %d and 19999", m.Len(), m.LatestOffset(), len(model))
		}
		for k, want := range model {
			if got, ok := m.Get([]byte(k)); !ok || got != want {
				t.Fatalf("Get(%s) = %d, %v; want %d", k, got, ok, want)
			}
		}
		if _, ok := m.Get([]byte("never-put")); ok {
			t.Fatal("a key never put was found")
		}
		m.Clear()
		if m.Len() != 0 || m.LatestOffset() != -1 {
			t.Fatal("Clear left entries")
		}
	}
}

// TestOffsetMapFull: past 90% of its slots the map refuses new keys, but
// still updates the keys it holds.
func TestOffsetMapFull(t *testing.T) {
	m, _ := compaction.NewOffsetMap(24 * 1000)
	if m.Capacity() != 900 {
		t.Fatalf("capacity %d, want 900", m.Capacity())
	}
	for i := 0; i < 900; i++ {
		if err := m.Put([]byte(fmt.Sprint(i)), int64(i)); err != nil {
			t.Fatalf("put %d: %v", i, err)
		}
	}
	if !m.Full() {
		t.Fatal("not full at capacity")
	}
	if err := m.Put([]byte("one more"), 1000); !errors.Is(err, compaction.ErrMapFull) {
		t.Fatalf("put past capacity: %v", err)
	}
	if err := m.Put([]byte("5"), 2000); err != nil {
		t.Fatalf("update of a held key when full: %v", err)
	}
	if got, _ := m.Get([]byte("5")); got != 2000 {
		t.Fatalf("updated offset %d", got)
	}
	if _, err := compaction.NewOffsetMap(10); err == nil {
		t.Fatal("a map smaller than its minimum was made")
	}
}

// TestOffsetMapMemoryWithinBudget measures the heap a full map takes.
func TestOffsetMapMemoryWithinBudget(t *testing.T) {
	const budget = 8 << 20
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	m, _ := compaction.NewOffsetMap(budget)
	for i := 0; !m.Full(); i++ {
		if err := m.Put([]byte(fmt.Sprintf("user-%d", i)), int64(i)); err != nil {
			t.Fatal(err)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	used := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	perKey := float64(m.MemoryBytes()) / float64(m.Len())
	t.Logf("%d keys in %d bytes of live heap (budget %d); %.1f bytes of table per key, %.2f probes per lookup",
		m.Len(), used, budget, perKey, m.ProbesPerLookup())
	if used > budget+64<<10 {
		t.Fatalf("the map holds %d bytes, over its %d-byte budget", used, budget)
	}
	if perKey > 24/0.9+0.01 {
		t.Fatalf("%.1f bytes per key", perKey)
	}
	runtime.KeepAlive(m)
}
