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
//
// A read-only index holds no descriptor (index.Footprint): one small
// enough is read into memory at open, a larger one is mapped and its
// descriptor closed. So eviction keeps them: a segment read again after
// its eviction then opens only its .log, where reopening its offset index
// cost an open, an fstat, a read or an mmap (and a scan of every entry,
// a page fault a page, to find the valid ones and summarize them), a
// close and four allocations. Those indexes are bounded apart, by their
// bytes of memory and their count of mappings (a process has at most
// vm.max_map_count, 65,530 by default), with a clock of their own (kept);
// its hand drops a segment's read-only indexes, and its next use opens
// them again. A sealed segment's files do not change while the log holds
// it (a rebuilt or cleaned index is published anew), so a kept index is
// what its file holds.
type fileBudget struct {
	max int
	// maxIndexBytes and maxIndexMaps bound the read-only indexes in kept.
	maxIndexBytes int64
	maxIndexMaps  int

	// mu guards the fields below. It is never held while a segment's
	// files close; a victim a reader holds is counted again under its
	// segFile.mu, then mu (the one order the two are taken in).
	mu   sync.Mutex
	ring []*segFile // segments holding open files (segFile.ringAt: where)
	hand int
	// kept holds the segments holding read-only indexes, open or evicted
	// (segFile.keptAt: where; segFile.kept: their cost, summed in
	// keptCost).
	kept     []*segFile
	keptHand int
	keptCost keptCost

	evictions atomic.Int64
	// indexDrops counts segments whose read-only indexes the kept clock
	// dropped.
	indexDrops atomic.Int64
}

// keptCost is what read-only indexes count against their bound: bytes of
// memory and mappings.
type keptCost struct {
	bytes int64
	maps  int
}

// The default bounds of the read-only indexes a budget keeps: 8,192
// segments' worth of the largest index read into memory (8 KiB, 1,024
// entries), far more of the few entries a small segment has; and 8,192
// mappings, which with three a segment counted by a bound of 4,096 open
// files (a Backend's default) stays below a third of vm.max_map_count.
const (
	defaultIndexMemory   = 64 << 20
	defaultIndexMappings = 8192
)

func newFileBudget(max int) *fileBudget {
	if max <= 0 {
		return nil
	}
	return &fileBudget{max: max, maxIndexBytes: defaultIndexMemory, maxIndexMaps: defaultIndexMappings}
}

// overLocked says whether the kept indexes exceed their bounds.
// REQUIRES: b.mu held.
func (b *fileBudget) overLocked() bool {
	return b.keptCost.bytes > b.maxIndexBytes || b.keptCost.maps > b.maxIndexMaps
}

// opened records that s opened its files, then evicts others while over
// budget. It must be called without s.mu held.
func (b *fileBudget) opened(s *segFile) {
	if b == nil {
		return
	}
	b.mu.Lock()
	addTo(&b.ring, s, &s.ringAt)
	var room [2]*segFile // an open usually evicts one: no allocation
	victims := room[:0]
	for tries := 0; len(b.ring) > b.max && tries < 2*len(b.ring); tries++ {
		if b.hand >= len(b.ring) {
			b.hand = 0
		}
		c := b.ring[b.hand]
		if c != s && !c.used.Swap(false) {
			victims = append(victims, c)
			removeFrom(&b.ring, b.hand, func(s *segFile) *int { return &s.ringAt }) // the hand now points at the one moved there
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
		if v.budgeted && !v.left && v.holdsFilesLocked() {
			addTo(&b.ring, v, &v.ringAt)
		}
		b.mu.Unlock()
		v.mu.Unlock()
	}
}

// indexed records that s holds read-only indexes costing c, then drops
// others' while over the bounds. It must be called without s.mu held.
func (b *fileBudget) indexed(s *segFile, c keptCost) {
	if b == nil {
		return
	}
	b.mu.Lock()
	addTo(&b.kept, s, &s.keptAt)
	b.keptCost.bytes += c.bytes - s.kept.bytes
	b.keptCost.maps += c.maps - s.kept.maps
	s.kept = c
	var room [2]*segFile
	victims := room[:0]
	for tries := 0; b.overLocked() && tries < 2*len(b.kept); tries++ {
		if b.keptHand >= len(b.kept) {
			b.keptHand = 0
		}
		c := b.kept[b.keptHand]
		if c != s && !c.indexUsed.Swap(false) {
			victims = append(victims, c)
			b.keptCost.bytes -= c.kept.bytes
			b.keptCost.maps -= c.kept.maps
			c.kept = keptCost{}
			removeFrom(&b.kept, b.keptHand, func(s *segFile) *int { return &s.keptAt })
			continue
		}
		b.keptHand++
	}
	b.mu.Unlock()
	for _, v := range victims {
		if v.dropReadOnlyIndexes() {
			b.indexDrops.Add(1)
			continue
		}
		// A reader holds a mapped one: keep it counted, it will go
		// later; unless the segment's files closed for good meanwhile.
		v.mu.Lock()
		if c := v.keptCostLocked(); c != (keptCost{}) && !v.left {
			b.mu.Lock()
			addTo(&b.kept, v, &v.keptAt)
			b.keptCost.bytes += c.bytes - v.kept.bytes
			b.keptCost.maps += c.maps - v.kept.maps
			v.kept = c
			b.mu.Unlock()
		}
		v.mu.Unlock()
	}
}

// addTo puts s in ring, unless it is there (*at is its place, -1 when
// not). REQUIRES: b.mu held.
func addTo(ring *[]*segFile, s *segFile, at *int) {
	if i := *at; i >= 0 && i < len(*ring) && (*ring)[i] == s {
		return
	}
	*at = len(*ring)
	*ring = append(*ring, s)
}

// removeFrom takes the segment at i out of ring in constant time: the
// last one moves into its place (the clock's order is approximate anyway;
// every segment still meets the hand once a turn). at returns a segment's
// place field for this ring. REQUIRES: b.mu held.
func removeFrom(ring *[]*segFile, i int, at func(*segFile) *int) {
	r := *ring
	last := len(r) - 1
	*at(r[i]) = -1
	if i != last {
		r[i] = r[last]
		*at(r[i]) = i
	}
	r[last] = nil
	*ring = r[:last]
}

// forgetFiles drops s from the ring of open files (its files closed).
func (b *fileBudget) forgetFiles(s *segFile) {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.forgetFilesLocked(s)
}

// forgetFilesLocked is forgetFiles. REQUIRES: b.mu held.
func (b *fileBudget) forgetFilesLocked(s *segFile) {
	if i := s.ringAt; i >= 0 && i < len(b.ring) && b.ring[i] == s {
		removeFrom(&b.ring, i, func(s *segFile) *int { return &s.ringAt })
	}
}

// forget drops s from both rings (its files and indexes closed for good,
// or the segment leaving the log).
func (b *fileBudget) forget(s *segFile) {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.forgetFilesLocked(s)
	if i := s.keptAt; i >= 0 && i < len(b.kept) && b.kept[i] == s {
		removeFrom(&b.kept, i, func(s *segFile) *int { return &s.keptAt })
		b.keptCost.bytes -= s.kept.bytes
		b.keptCost.maps -= s.kept.maps
		s.kept = keptCost{}
	}
}

// closeIdleFiles closes a sealed segment's .log descriptor and mapping
// and the writer's indexes when no reader holds it; it reports whether it
// did. Its read-only indexes stay, and so does the check of its offset index
// against its log: a sealed segment's files do not change while it is
// closed (a rebuilt or cleaned index is published anew, and checked
// again), so the check holds when it reopens.
func (s *segFile) closeIdleFiles() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.refs.Load() != 1 || !s.sealed || s.left || !s.holdsFilesLocked() {
		return false
	}
	s.closeLocked(true)
	return true
}

// dropReadOnlyIndexes lets go of the segment's read-only indexes (the
// kept clock's victim); its next use opens them again, and checks the
// offset index against the log again (what is read from disk anew is
// checked anew). One held in memory is not closed: it holds only memory,
// and a reader may still use it. A mapped one is closed, unless a reader
// holds the segment: then all stay, and it reports false. Only a sealed
// segment's go: the log reads the last segment's indexes holding only
// its own reference (activate, the end after a clean shutdown).
func (s *segFile) dropReadOnlyIndexes() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.sealed || s.left || (s.refs.Load() != 1 && (mappedReadOnly(s.oi) || mappedReadOnly(s.ti))) {
		return false
	}
	if s.oi != nil && !writable(s.oi) {
		s.checkedIndex = false
	}
	if mappedReadOnly(s.oi) {
		s.oi.Close() // read-only: nothing to write back; an unmap error leaves nothing to do
	}
	if mappedReadOnly(s.ti) {
		s.ti.Close()
	}
	if s.oi != nil && !writable(s.oi) {
		s.oi = nil
	}
	if s.ti != nil && !writable(s.ti) {
		s.ti, s.tiBypassed = nil, false
	}
	return true
}
