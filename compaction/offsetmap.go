// Package compaction is tierlog's key-compacting log cleaner, with Kafka's
// semantics: Clean runs one round over a local.Log (map the dirty
// section's keys to their latest offsets in a bounded OffsetMap, recopy
// the closed segments keeping the latest record per key, swap them in
// crash-safely), and a Cleaner runs rounds in the background for a
// local.Backend, recording its progress in cleaner-offset-checkpoint.
package compaction

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/zeebo/xxh3"
)

// Offset map layout (Kafka's SkimpyOffsetMap, with another hash): an
// open-addressing table of 24-byte slots, each the 16-byte XXH3-128 of a
// record key and the int64 offset of its latest record. An all-zero slot
// is empty.
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
	hashSize  = 16
	slotSize  = hashSize + 8
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
	data       []byte
	slots      int
	entries    int
	maxEntries int
	latest     int64 // the largest offset Put (Kafka's latestOffset)
	lookups    int64
	probes     int64
}

// NewOffsetMap returns a map using memoryBytes for its table (rounded down
// to whole slots).
func NewOffsetMap(memoryBytes int) (*OffsetMap, error) {
	if memoryBytes < minMemory {
		return nil, fmt.Errorf("compaction: offset map memory %d is below the minimum %d", memoryBytes, minMemory)
	}
	slots := memoryBytes / slotSize
	return &OffsetMap{data: make([]byte, slots*slotSize), slots: slots, maxEntries: int(float64(slots) * maxLoad), latest: -1}, nil
}

// slotFor returns the slot index of the i-th probe for hash, Kafka's probe
// sequence: a 4-byte window of the hash, sliding, then linear steps.
func (m *OffsetMap) slotFor(hash *[hashSize]byte, attempt int) int {
	at := min(attempt, hashSize-4)
	probe := int64(int32(binary.BigEndian.Uint32(hash[at:]))) + int64(max(0, attempt-hashSize+4))
	if probe < 0 {
		probe = -probe
	}
	return int(probe % int64(m.slots))
}

func (m *OffsetMap) slot(i int) []byte { return m.data[i*slotSize : (i+1)*slotSize] }

func isEmpty(s []byte) bool {
	_ = s[slotSize-1]
	le := binary.LittleEndian
	return le.Uint64(s)|le.Uint64(s[8:])|le.Uint64(s[16:]) == 0
}

// Put records offset as the latest for key. It fails with ErrMapFull when
// key is new and the map is at its load limit.
func (m *OffsetMap) Put(key []byte, offset int64) error {
	hash := xxh3.Hash128(key).Bytes()
	m.lookups++
	for attempt := 0; ; attempt++ {
		m.probes++
		s := m.slot(m.slotFor(&hash, attempt))
		if isEmpty(s) {
			if m.entries >= m.maxEntries {
				return ErrMapFull
			}
			copy(s, hash[:])
			binary.BigEndian.PutUint64(s[hashSize:], uint64(offset))
			m.entries++
			break
		}
		if [hashSize]byte(s[:hashSize]) == hash {
			binary.BigEndian.PutUint64(s[hashSize:], uint64(offset))
			break
		}
	}
	m.latest = max(m.latest, offset)
	return nil
}

// Get returns the latest offset recorded for key.
func (m *OffsetMap) Get(key []byte) (int64, bool) {
	hash := xxh3.Hash128(key).Bytes()
	m.lookups++
	for attempt := 0; attempt < m.slots+hashSize; attempt++ {
		m.probes++
		s := m.slot(m.slotFor(&hash, attempt))
		if isEmpty(s) {
			return 0, false
		}
		if [hashSize]byte(s[:hashSize]) == hash {
			return int64(binary.BigEndian.Uint64(s[hashSize:])), true
		}
	}
	return 0, false
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
func (m *OffsetMap) MemoryBytes() int { return len(m.data) }

// Utilization is the fraction of the key capacity in use.
func (m *OffsetMap) Utilization() float64 { return float64(m.entries) / float64(m.maxEntries) }

// ProbesPerLookup is the average probe count, a measure of collisions.
func (m *OffsetMap) ProbesPerLookup() float64 {
	if m.lookups == 0 {
		return 0
	}
	return float64(m.probes) / float64(m.lookups)
}

// Clear empties the map for the next round, keeping its memory.
func (m *OffsetMap) Clear() {
	clear(m.data)
	m.entries, m.latest, m.lookups, m.probes = 0, -1, 0, 0
}
