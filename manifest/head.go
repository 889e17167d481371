package manifest

import (
	"bytes"
	"fmt"
	"slices"
)

// Head is a manifest's head as stored: the header, the parts it names,
// and the segments after them (its own). It is what a partition keeps of
// its committed manifest: a layered manifest's segments in parts are
// loaded only when asked for (Whole), so a partition of any length holds
// a head of bounded size (at most Fanout-1 parts a tier, LeafSegments
// segments of its own, and the MaxTier parts).
//
// A Head is immutable: many goroutines may read one at once, and its
// Parts and Own must not be changed. Edit returns a changed copy.
type Head struct {
	m     *Manifest // the header fields (Segments and Parts nil)
	Parts []Part
	Own   []Segment
	// whole is the whole manifest of a head that names no part: its own
	// segments are all of them.
	whole *Manifest
}

// newHead builds a head from a header (whose Segments and Parts it
// ignores), its parts (in order, each sound) and its own segments, and
// checks what the head alone can show.
func newHead(hdr *Manifest, parts []Part, own []Segment) (*Head, error) {
	m := *hdr
	m.Segments, m.Parts, m.prefixMaxTs = nil, nil, nil
	h := &Head{m: &m, Parts: parts, Own: own}
	if len(parts) == 0 {
		h.Parts = nil
	}
	// Its own segments, with the header's fields against them, checked
	// as a manifest of those alone (the parts' order is checked as they
	// decode, or by the Validate of the whole manifest they came from).
	w := m
	w.Segments = own
	if err := w.Validate(); err != nil {
		return nil, err
	}
	if n := len(parts); n > 0 {
		last := parts[n-1].LastOffset
		switch {
		case m.Deleted:
			return nil, fmt.Errorf("%w: a deleted partition names %d parts", ErrInvalid, n)
		case len(own) == 0 && m.LogStartOffset > last+1:
			return nil, fmt.Errorf("%w: log start offset %d is past the last segment (ends at %d)", ErrInvalid, m.LogStartOffset, last)
		case len(own) > 0 && own[0].BaseOffset <= last:
			return nil, fmt.Errorf("%w: the head's first segment (base %d) overlaps its last part (ends at %d)", ErrInvalid, own[0].BaseOffset, last)
		}
		return h, nil
	}
	h.whole = &w
	return h, nil
}

// Head returns m's head: its header, its parts (Layer set them; none when
// it has not run) and the segments after them, copied, so the head keeps
// nothing of m's segments alive.
func (m *Manifest) Head() (*Head, error) {
	if err := m.Validate(); err != nil {
		return nil, err
	}
	return newHead(m, slices.Clone(m.Parts), slices.Clone(m.Segments[m.covered():]))
}

// Generation is the head's generation.
func (h *Head) Generation() uint64 { return h.m.Generation }

// WriterEpoch is the leader epoch that committed the head.
func (h *Head) WriterEpoch() int32 { return h.m.WriterEpoch }

// LogStartOffset is the head's log start.
func (h *Head) LogStartOffset() int64 { return h.m.LogStartOffset }

// Deleted says whether the partition's deletion has begun.
func (h *Head) Deleted() bool { return h.m.Deleted }

// Born is the generation this incarnation of the partition began at
// (Manifest.Born).
func (h *Head) Born() uint64 { return h.m.Born }

// CleanedTo is the bucket's cleaner checkpoint (Manifest.CleanedTo).
func (h *Head) CleanedTo() int64 { return h.m.CleanedTo }

// Lineage is the partition incarnation's identity (Manifest.Lineage).
func (h *Head) Lineage() [8]byte { return h.m.Lineage }

// WAL is where a diskless partition's data past its segments lies (nil:
// not diskless). It must not be changed.
func (h *Head) WAL() *WAL { return h.m.WAL }

// Layered says whether the head names parts: its whole manifest takes
// loading them (Whole).
func (h *Head) Layered() bool { return len(h.Parts) > 0 }

// LastOffset returns the offset of the manifest's last segment, or -1
// when it has none.
func (h *Head) LastOffset() int64 {
	if n := len(h.Own); n > 0 {
		return h.Own[n-1].LastOffset
	}
	if n := len(h.Parts); n > 0 {
		return h.Parts[n-1].LastOffset
	}
	return -1
}

// FirstOffset returns the base offset of the manifest's first segment,
// or -1 when it has none.
func (h *Head) FirstOffset() int64 {
	if len(h.Parts) > 0 {
		return h.Parts[0].BaseOffset
	}
	if len(h.Own) > 0 {
		return h.Own[0].BaseOffset
	}
	return -1
}

// Count returns how many segments the manifest names, from the head
// alone.
func (h *Head) Count() int {
	n := len(h.Own)
	for _, p := range h.Parts {
		n += p.Segments
	}
	return n
}

// Size returns the bytes of all the manifest's segments' logs, from the
// head alone (each part's reference carries its sum).
func (h *Head) Size() int64 {
	var n int64
	for _, p := range h.Parts {
		n += p.Size
	}
	for _, s := range h.Own {
		n += s.Size
	}
	return n
}

// Whole returns the whole manifest: each part's live segments (load
// returns them: the segments of the part's object from its Skip on, as
// DecodePart does, or a copy held already), checked against its
// reference, then the head's own. A head that names no part returns its
// manifest without calling load. The result is the caller's, but may be
// shared with other callers of Whole: it must not be changed.
func (h *Head) Whole(load func(Part) ([]Segment, error)) (*Manifest, error) {
	if h.whole != nil {
		return h.whole, nil
	}
	m := *h.m
	// Grown as the parts load: the counts the head claims are not room
	// to reserve before a part has shown them.
	m.Segments = make([]Segment, 0, len(h.Own))
	for i, p := range h.Parts {
		segs, err := load(p)
		if err != nil {
			return nil, fmt.Errorf("manifest: part %d (%s): %w", i, p.Name(), err)
		}
		if err := p.check(segs); err != nil {
			return nil, err
		}
		m.Segments = append(m.Segments, segs...)
	}
	m.Segments = append(m.Segments, h.Own...)
	m.Parts = h.Parts
	if err := m.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	return &m, nil
}

// Encode returns the head's bytes: what Encode of its whole manifest
// returns, without loading a part.
func (h *Head) Encode() []byte { return encode(h.m, h.Parts, h.Own) }

// SameLog says whether h and o describe the same log: they differ at
// most in generation and writer epoch (a claim at a new epoch), naming
// the same parts and segments with the same log start, incarnation and
// WAL.
func (h *Head) SameLog(o *Head) bool {
	a, b := *h.m, *o.m
	a.Generation, a.WriterEpoch = 0, 0
	b.Generation, b.WriterEpoch = 0, 0
	return bytes.Equal(encode(&a, h.Parts, h.Own), encode(&b, o.Parts, o.Own))
}

// Edit returns a copy of the head with its header changed by f (which
// may set the header's fields, never Segments or Parts), checked as
// newHead checks a head.
func (h *Head) Edit(f func(*Manifest)) (*Head, error) {
	m := *h.m
	f(&m)
	return newHead(&m, h.Parts, h.Own)
}
