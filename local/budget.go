package local

import (
	"sync"
	"sync/atomic"
)

// fileBudget bounds how many sealed segments keep their .log open (a
// descriptor, and possibly a mapping) across the logs that share it: a
// broker reading old data of many partitions would otherwise accumulate one
// descriptor per segment it ever read. Eviction is a clock (second chance):
// a segment used since the hand last passed is spared once. A segment a
// reader holds is never evicted; the next use reopens it.
type fileBudget struct {
	max int

	mu   sync.Mutex
	ring []*segFile // segments holding open files (segFile.ringAt: where)
	hand int

	evictions atomic.Int64
}

func newFileBudget(max int) *fileBudget {
	if max <= 0 {
		return nil
	}
	return &fileBudget{max: max}
}

// opened records that s opened its files, then evicts others while over
// budget. It must be called without s.mu held.
func (b *fileBudget) opened(s *segFile) {
	if b == nil {
		return
	}
	b.mu.Lock()
	b.addLocked(s)
	var victims []*segFile
	for tries := 0; len(b.ring) > b.max && tries < 2*len(b.ring); tries++ {
		if b.hand >= len(b.ring) {
			b.hand = 0
		}
		c := b.ring[b.hand]
		if c != s && !c.used.Swap(false) {
			victims = append(victims, c)
			b.removeLocked(b.hand) // the hand now points at the one moved there
			continue
		}
		b.hand++
	}
	b.mu.Unlock()
	for _, v := range victims {
		if v.closeIdleFiles() {
			b.evictions.Add(1)
			continue
		}
		// In use: keep it counted, it will close later; unless its last
		// reference went meanwhile (its files closed for good, or opened
		// again and counted anew).
		v.mu.Lock()
		b.mu.Lock()
		if v.budgeted && v.holdsFilesLocked() {
			b.addLocked(v)
		}
		b.mu.Unlock()
		v.mu.Unlock()
	}
}

// addLocked puts s in the ring, unless it is there. REQUIRES: b.mu held.
func (b *fileBudget) addLocked(s *segFile) {
	if i := s.ringAt; i >= 0 && i < len(b.ring) && b.ring[i] == s {
		return
	}
	s.ringAt = len(b.ring)
	b.ring = append(b.ring, s)
}

// removeLocked takes the segment at i out of the ring in constant time:
// the last one moves into its place (the clock's order is approximate
// anyway; every segment still meets the hand once a turn).
// REQUIRES: b.mu held.
func (b *fileBudget) removeLocked(i int) {
	last := len(b.ring) - 1
	b.ring[i].ringAt = -1
	if i != last {
		b.ring[i] = b.ring[last]
		b.ring[i].ringAt = i
	}
	b.ring[last] = nil
	b.ring = b.ring[:last]
}

// forget drops s (its files were closed for good).
func (b *fileBudget) forget(s *segFile) {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if i := s.ringAt; i >= 0 && i < len(b.ring) && b.ring[i] == s {
		b.removeLocked(i)
	}
}

// closeIdleFiles closes a sealed segment's .log descriptor, mapping and
// indexes when no reader holds it; it reports whether it did.
func (s *segFile) closeIdleFiles() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.refs.Load() != 1 || !s.sealed || !s.holdsFilesLocked() {
		return false
	}
	// A sealed segment's files do not change while it is closed (a
	// rebuilt or cleaned index is published anew, and checked again): the
	// check of its offset index against its log holds when it reopens.
	checked := s.checkedIndex
	s.closeFilesLocked()
	s.checkedIndex = checked
	return true
}
