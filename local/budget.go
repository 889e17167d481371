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
	ring []*segFile // segments holding open files, in opening order
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
	b.ring = append(b.ring, s)
	var victims []*segFile
	for tries := 0; len(b.ring)-len(victims) > b.max && tries < 2*len(b.ring); tries++ {
		if b.hand >= len(b.ring) {
			b.hand = 0
		}
		c := b.ring[b.hand]
		if c != s && !c.used.Swap(false) {
			victims = append(victims, c)
			b.ring = append(b.ring[:b.hand], b.ring[b.hand+1:]...)
			continue
		}
		b.hand++
	}
	b.mu.Unlock()
	for _, v := range victims {
		if !v.closeIdleFiles() {
			// In use: keep it counted, it will close later.
			b.mu.Lock()
			b.ring = append(b.ring, v)
			b.mu.Unlock()
		} else {
			b.evictions.Add(1)
		}
	}
}

// forget drops s (its files were closed for good).
func (b *fileBudget) forget(s *segFile) {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for i, c := range b.ring {
		if c == s {
			b.ring = append(b.ring[:i], b.ring[i+1:]...)
			if b.hand > i {
				b.hand--
			}
			return
		}
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
	s.closeFilesLocked()
	return true
}
