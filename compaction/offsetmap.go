// Package compaction is tierlog's key-compacting log cleaner, with Kafka's
// semantics: Clean runs one round over a local.Log (map the dirty
// section's keys to their latest offsets in a bounded OffsetMap, recopy
// the closed segments keeping the latest record per key, swap them in
// crash-safely), and a Cleaner runs rounds in the background for a
// local.Backend, recording its progress in cleaner-offset-checkpoint.
package compaction

import (
	"errors"
	"fmt"
	"math/bits"

	"github.com/zeebo/xxh3"
)

// Offset map layout: an open-addressing table of 24-byte slots, each three
// words, the 128-bit XXH3 hash of a record key and the offset of its
// latest record:
//
//	slot i: | hash high 64 | hash low 64 | offset | (uint64 each)
//
// An all-zero slot is empty (a key hashing to zero with offset 0 would be
// taken for one: a 2^-128 chance, that of any collision). A key's home
// slot is its hash's high word scaled to the table (hi × slots / 2^64), and
// collisions probe linearly on, so a lookup reads one run of consecutive
// slots, usually one or two cache lines, that the processor's prefetcher
// follows, where Kafka's probes jump across the table (a cache miss each).
// Insertion is Robin Hood's: a run stays sorted by home slot, a new key
// going before the first key whose home is past its own and the rest of
// the run moving one slot on. A lookup can then stop at that key too, so
// one for a key never put (as most of a clean section's keys are) reads
// as few slots as one that finds its key, instead of running to the end
// of the run, which at Kafka's 0.9 load factor averages 50 slots.
//
// Kafka hashes keys with MD5; nothing requires it here, as the map lives
// in memory for one round and no hash is stored or compared across
// processes. XXH3-128 (github.com/zeebo/xxh3, a port that matches the
// reference implementation's fixed output) is a 128-bit hash designed for
// distribution, not secrecy, about 25 times faster than MD5 on short keys.
// A keyed or cryptographic hash would buy nothing against a hostile
// producer: crafting an MD5 collision is practical too, and a producer
// that can write to the topic can delete any key with a tombstone anyway.
const (
	slotWords = 3
	slotSize  = slotWords * 8
	maxLoad   = 0.9 // Kafka's log.cleaner.io.buffer.load.factor
	minMemory = slotSize * 16
)

// ErrMapFull is returned by Put once the map holds as many keys as its
// load factor allows; the cleaner then cleans what it has mapped and
// continues from there in the next round (never an error for the log).
var ErrMapFull = errors.New("compaction: offset map full")

// OffsetMap maps record keys to the latest offset seen for them, in a
// fixed memory budget set at creation (Kafka's dedupe buffer): 24 bytes
// per slot, at most 90% of the slots used. Keys are stored as their hash,
// so two keys with the same hash share a slot (2^-128 per pair). It is not
// safe for concurrent use.
type OffsetMap struct {
	tab        []uint64 // slotWords a slot
	slots      int
	entries    int
	maxEntries int
	latest     int64 // the largest offset Put (Kafka's latestOffset)
	lookups    int64
	probes     int64
	sink       uint64 // what touch loaded, so that the loads are not elided
}

// NewOffsetMap returns a map using memoryBytes for its table (rounded down
// to whole slots).
func NewOffsetMap(memoryBytes int) (*OffsetMap, error) {
	if memoryBytes < minMemory {
		return nil, fmt.Errorf("compaction: offset map memory %d is below the minimum %d", memoryBytes, minMemory)
	}
	slots := memoryBytes / slotSize
	return &OffsetMap{tab: make([]uint64, slots*slotWords), slots: slots, maxEntries: int(float64(slots) * maxLoad), latest: -1}, nil
}

// keyHash is a key's XXH3-128.
type keyHash struct{ hi, lo uint64 }

func hashKey(key []byte) keyHash {
	h := xxh3.Hash128(key)
	return keyHash{h.Hi, h.Lo}
}

// home is the first slot to probe for a hash whose high word is hi.
func (m *OffsetMap) home(hi uint64) int {
	s, _ := bits.Mul64(hi, uint64(m.slots))
	return int(s)
}

// dist is how far slot i is past the home slot of hi, wrapping at the end
// of the table.
func (m *OffsetMap) dist(i int, hi uint64) int {
	d := i - m.home(hi)
	if d < 0 {
		d += m.slots
	}
	return d
}

// Put records offset as the latest for key. It fails with ErrMapFull when
// key is new and the map is at its load limit.
func (m *OffsetMap) Put(key []byte, offset int64) error {
	return m.put(hashKey(key), offset)
}

func (m *OffsetMap) put(h keyHash, offset int64) error {
	m.lookups++
	tab, i, d := m.tab, m.home(h.hi), 0
	for ; ; d++ {
		s := tab[i*slotWords : i*slotWords+slotWords : i*slotWords+slotWords]
		if s[0] == h.hi && s[1] == h.lo {
			s[2] = uint64(offset)
			m.probes += int64(d + 1)
			m.latest = max(m.latest, offset)
			return nil
		}
		if s[0]|s[1]|s[2] == 0 || m.dist(i, s[0]) < d {
			break // key is not in the map; it goes in slot i
		}
		if i++; i == m.slots {
			i = 0
		}
	}
	m.probes += int64(d + 1)
	if m.entries >= m.maxEntries {
		return ErrMapFull
	}
	// Put the key in slot i and move the rest of the run one slot on. The
	// table is never full (maxEntries < slots), so an empty slot ends it.
	x0, x1, x2 := h.hi, h.lo, uint64(offset)
	for {
		s := tab[i*slotWords : i*slotWords+slotWords : i*slotWords+slotWords]
		empty := s[0]|s[1]|s[2] == 0
		s[0], s[1], s[2], x0, x1, x2 = x0, x1, x2, s[0], s[1], s[2]
		if empty {
			break
		}
		if i++; i == m.slots {
			i = 0
		}
	}
	m.entries++
	m.latest = max(m.latest, offset)
	return nil
}

// Get returns the latest offset recorded for key.
func (m *OffsetMap) Get(key []byte) (int64, bool) {
	return m.get(hashKey(key))
}

func (m *OffsetMap) get(h keyHash) (int64, bool) {
	m.lookups++
	tab, i := m.tab, m.home(h.hi)
	for d := 0; ; d++ {
		s := tab[i*slotWords : i*slotWords+slotWords : i*slotWords+slotWords]
		if s[0] == h.hi && s[1] == h.lo {
			m.probes += int64(d + 1)
			return int64(s[2]), true
		}
		if s[0]|s[1]|s[2] == 0 || m.dist(i, s[0]) < d {
			m.probes += int64(d + 1)
			return 0, false
		}
		if i++; i == m.slots {
			i = 0
		}
	}
}

// batchKeys is how many keys a keyBatch holds: enough cache misses to
// overlap, few enough that the lines they bring stay in the L1 cache
// until the lookups read them.
const batchKeys = 32

// A keyBatch is up to batchKeys hashed keys, each with an offset and the
// caller's index, queued so that the map can load all their slots before
// probing for any (touch).
type keyBatch struct {
	n   int
	h   [batchKeys]keyHash
	off [batchKeys]int64
	at  [batchKeys]int
}

// add queues key and reports whether the batch is now full.
func (b *keyBatch) add(key []byte, offset int64, at int) bool {
	b.h[b.n], b.off[b.n], b.at[b.n] = hashKey(key), offset, at
	b.n++
	return b.n == batchKeys
}

// touch loads the first two cache lines of each hash's home slot, so that
// the cache misses of a batch of lookups overlap: the map is far larger
// than the caches, nearly every lookup misses, and one lookup after
// another would wait for each miss in turn. The loads do not depend on
// each other, so the processor has many in flight at once. (Go has no
// prefetch instruction; loads whose values are discarded do the same.)
func (m *OffsetMap) touch(b *keyBatch) {
	var x uint64
	last := len(m.tab) - 1
	for _, h := range b.h[:b.n] {
		w := m.home(h.hi) * slotWords
		x += m.tab[w] + m.tab[min(w+8, last)] // the next line holds the rest of the run
	}
	m.sink = x
}

// putBatch puts b's keys, in order, and empties b. On an error the keys
// before the one that failed are in the map.
func (m *OffsetMap) putBatch(b *keyBatch) error {
	m.touch(b)
	n := b.n
	b.n = 0
	for i := range n {
		if err := m.put(b.h[i], b.off[i]); err != nil {
			return err
		}
	}
	return nil
}

// SetLatestOffset raises the latest offset (the cleaner advances it past
// records without keys and to segment ends, as Kafka does).
func (m *OffsetMap) SetLatestOffset(offset int64) { m.latest = max(m.latest, offset) }

// LatestOffset is the largest offset recorded, or -1.
func (m *OffsetMap) LatestOffset() int64 { return m.latest }

// Len returns how many keys the map holds.
func (m *OffsetMap) Len() int { return m.entries }

// Full reports whether a new key would be refused.
func (m *OffsetMap) Full() bool { return m.entries >= m.maxEntries }

// Capacity returns how many keys fit.
func (m *OffsetMap) Capacity() int { return m.maxEntries }

// MemoryBytes returns the table's size.
func (m *OffsetMap) MemoryBytes() int { return len(m.tab) * 8 }

// Utilization is the fraction of the key capacity in use.
func (m *OffsetMap) Utilization() float64 { return float64(m.entries) / float64(m.maxEntries) }

// ProbesPerLookup is the average count of slots a Put or Get read, a
// measure of collisions.
func (m *OffsetMap) ProbesPerLookup() float64 {
	if m.lookups == 0 {
		return 0
	}
	return float64(m.probes) / float64(m.lookups)
}

// Clear empties the map for the next round, keeping its memory.
func (m *OffsetMap) Clear() {
	clear(m.tab)
	m.entries, m.latest, m.lookups, m.probes = 0, -1, 0, 0
}
