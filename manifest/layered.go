package manifest

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"slices"
)

// The layered manifest (version 3).
//
// A manifest that held every segment in one object was rewritten whole by
// every commit: the bytes a partition PUT over its life grew as the square
// of its segments. Version 3 splits it. The head (the object at the
// manifest's key, committed by the conditional PUT as before) holds the
// newest segments and names parts: immutable objects, each a run of older
// segments, written once and never changed, with each part's offsets,
// timestamps, epochs and sizes in the head.
//
// Parts come in tiers. A tier 0 part holds LeafSegments segments; a tier t
// part holds Fanout times a tier t-1 part's, up to MaxTier. A commit whose
// head holds more than LeafSegments segments of its own moves the oldest
// ones into tier 0 parts; Fanout parts of one tier in a row at the head's
// end become one part of the next (a merge, written from the segments,
// not from the parts). The head thus names at most Fanout-1 parts of each
// tier below MaxTier and one MaxTier part per Fanout^MaxTier ×
// LeafSegments segments: like a counter in base Fanout. A commit PUTs the
// head and, when it crosses a tier, the one new part the carry makes.
//
// A cut at the front (retention, a new log start that drops segments) does
// not rewrite the part it cuts into: the head's reference skips the part's
// first segments (Part.Skip), and a part whose segments are all gone is no
// longer named. gc removes an object no head names (nor any kept backup's).
//
// A part is laid out for ranged reads: blocks of BlockSegments segments,
// then a directory of the blocks, then a CRC-32C of everything before it.
// The head records the part's size and its directory's, so a reader can
// fetch the directory, then one block.

// The shape of the layers.
const (
	// LeafSegments is how many segments a tier 0 part holds, and how many
	// the head keeps of its own before it moves them into one.
	LeafSegments = 16
	// Fanout is how many parts of one tier make a part of the next.
	Fanout = 16
	// MaxTier is the highest tier: its parts hold
	// LeafSegments × Fanout^MaxTier = 65,536 segments.
	MaxTier = 3
	// BlockSegments is how many segments one block of a part holds.
	BlockSegments = 256
)

// TierSegments returns how many segments a part of tier t holds when
// written.
func TierSegments(t int) int {
	n := LeafSegments
	for range t {
		n *= Fanout
	}
	return n
}

// ErrLayered means a head names parts, and the caller read it as a whole
// manifest (Decode): read it with DecodeLayered.
var ErrLayered = errors.New("manifest: the head names parts")

// PartSuffix ends the name of a part object.
const PartSuffix = ".part"

var partMagic = [4]byte{'T', 'L', 'M', 'P'}

// partVersion is the encoding of a part object this package writes
// (version 2: its directory carries its own CRC-32C, so a reader that
// fetches the directory alone can check it; version 1's did not, and is
// read whole); its segments are encoded as a version 3 head's
// (partSegmentsVersion,
// pinned: a later head version does not change a part's).
const (
	partVersion         = 2
	partSegmentsVersion = 3
	// checkedDirMarker begins a version 2 part's directory: a byte a
	// version 1 directory (a block count of at least 1) never begins
	// with, then the directory's version.
	checkedDirMarker  = 0
	checkedDirVersion = 1
)

// Part is a head's reference to a part object, and what the head knows of
// its segments.
type Part struct {
	Tier int
	ID   [8]byte
	// The object: the offsets of its first and last segments (its key's),
	// how many segments it holds, its bytes and their CRC-32C, and the
	// size of its block directory (the bytes before its last 4).
	ObjectBase, ObjectLast int64
	ObjectSegments         int
	Bytes                  int64
	CRC                    uint32
	DirSize                int64
	// Skip is how many of the object's first segments are no longer the
	// partition's (cut by retention or a new log start).
	Skip int
	// The segments the manifest still has: Segments of them, from
	// BaseOffset to LastOffset (the object's last), Size .log bytes in
	// all, the largest MaxTimestamp, the first one's first leader epoch
	// and the last one's LeaderEpoch.
	Segments               int
	BaseOffset, LastOffset int64
	Size                   int64
	MaxTimestamp           int64
	FirstEpoch, LastEpoch  int32
}

// Name returns the part object's name: <object base 20d>-<object last
// 20d>-<id>.part.
func (p Part) Name() string { return segmentName(p.ObjectBase, p.ObjectLast, p.ID, PartSuffix) }

// DecodeLayered parses a manifest's head and builds the whole manifest,
// loading each part it names through load (which returns the part's live
// segments: DecodePart of its bytes, or a copy held already).
func DecodeLayered(data []byte, load func(Part) ([]Segment, error)) (*Manifest, error) {
	h, err := DecodeHead(data)
	if err != nil {
		return nil, err
	}
	return h.Whole(load)
}

// check says whether live (the segments of a part's object from Skip on)
// are what the reference says.
func (p Part) check(live []Segment) error {
	if len(live) != p.Segments || len(live) == 0 {
		return fmt.Errorf("%w: part %s holds %d segments after the %d it skips, its reference says %d", ErrCorrupt, p.Name(), len(live), p.Skip, p.Segments)
	}
	want := p
	want.summarize(live)
	if want.BaseOffset != p.BaseOffset || want.LastOffset != p.LastOffset || want.Size != p.Size ||
		want.MaxTimestamp != p.MaxTimestamp || want.FirstEpoch != p.FirstEpoch || want.LastEpoch != p.LastEpoch {
		return fmt.Errorf("%w: part %s does not hold what its reference says", ErrCorrupt, p.Name())
	}
	return nil
}

// summarize sets the live fields from segs (the part's segments after
// Skip).
func (p *Part) summarize(segs []Segment) {
	p.Segments = len(segs)
	p.BaseOffset, p.LastOffset = segs[0].BaseOffset, segs[len(segs)-1].LastOffset
	p.Size, p.MaxTimestamp = 0, math.MinInt64
	for _, s := range segs {
		p.Size += s.Size
		p.MaxTimestamp = max(p.MaxTimestamp, s.MaxTimestamp)
	}
	p.FirstEpoch = segs[0].LeaderEpoch
	if len(segs[0].Epochs) > 0 {
		p.FirstEpoch = segs[0].Epochs[0].Epoch
	}
	p.LastEpoch = segs[len(segs)-1].LeaderEpoch
}

// minPartRefBytes is the smallest encoded reference: the tier, the id,
// eleven one-byte varints and the CRC.
const minPartRefBytes = 1 + 8 + 11 + 4

// appendParts appends the count and the references.
func appendParts(b []byte, parts []Part) []byte {
	b = binary.AppendUvarint(b, uint64(len(parts)))
	prevLast, prevTs, prevEpoch := int64(-1), int64(0), int64(0)
	for _, p := range parts {
		b = append(b, byte(p.Tier))
		b = append(b, p.ID[:]...)
		b = binary.AppendUvarint(b, uint64(p.ObjectBase-(prevLast+1)))
		b = binary.AppendUvarint(b, uint64(p.ObjectLast-p.ObjectBase))
		b = binary.AppendUvarint(b, uint64(p.ObjectSegments))
		b = binary.AppendUvarint(b, uint64(p.Bytes))
		b = binary.BigEndian.AppendUint32(b, p.CRC)
		b = binary.AppendUvarint(b, uint64(p.DirSize))
		b = binary.AppendUvarint(b, uint64(p.Skip))
		b = binary.AppendUvarint(b, uint64(p.BaseOffset-p.ObjectBase))
		b = binary.AppendUvarint(b, uint64(p.Size))
		b = binary.AppendVarint(b, p.MaxTimestamp-prevTs)
		b = binary.AppendVarint(b, int64(p.FirstEpoch)-prevEpoch)
		b = binary.AppendVarint(b, int64(p.LastEpoch)-int64(p.FirstEpoch))
		prevLast, prevTs, prevEpoch = p.ObjectLast, p.MaxTimestamp, int64(p.LastEpoch)
	}
	return b
}

// parts decodes a count and the references after it.
func (d *decoder) parts() []Part {
	count := d.uvarint("part count")
	if d.err != nil {
		return nil
	}
	if count > uint64(len(d.b)/minPartRefBytes) {
		d.fail(fmt.Sprintf("%d parts cannot fit in %d bytes", count, len(d.b)))
		return nil
	}
	parts := make([]Part, count)
	prevLast, prevTs, prevEpoch := int64(-1), int64(0), int64(0)
	for i := range parts {
		p := &parts[i]
		p.Tier = int(d.bytes(1, "part tier")[0])
		copy(p.ID[:], d.bytes(8, "part id"))
		delta := d.int63("part base")
		span := d.int63("part span")
		p.ObjectSegments = int(min(d.int63("part segments"), math.MaxInt32))
		p.Bytes = d.int63("part bytes")
		p.CRC = binary.BigEndian.Uint32(d.bytes(4, "part crc"))
		p.DirSize = d.int63("part directory size")
		p.Skip = int(min(d.int63("part skip"), math.MaxInt32))
		liveDelta := d.int63("part live base")
		p.Size = d.int63("part size")
		p.MaxTimestamp = prevTs + d.varint("part max timestamp")
		first := prevEpoch + d.varint("part first epoch")
		last := first + d.varint("part last epoch")
		if d.err != nil {
			d.err = fmt.Errorf("%w (part %d)", d.err, i)
			return nil
		}
		if delta > math.MaxInt64-(prevLast+1) || span > math.MaxInt64-(prevLast+1+delta) || liveDelta > span ||
			first < 0 || first > math.MaxInt32 || last < first || last > math.MaxInt32 {
			d.fail(fmt.Sprintf("part %d: offsets or epochs out of range", i))
			return nil
		}
		p.ObjectBase = prevLast + 1 + delta
		p.ObjectLast = p.ObjectBase + span
		p.BaseOffset, p.LastOffset = p.ObjectBase+liveDelta, p.ObjectLast
		p.Segments = p.ObjectSegments - p.Skip
		p.FirstEpoch, p.LastEpoch = int32(first), int32(last)
		if err := p.validate(); err != nil {
			d.err = fmt.Errorf("%w: %w", ErrCorrupt, err)
			return nil
		}
		prevLast, prevTs, prevEpoch = p.ObjectLast, p.MaxTimestamp, last
	}
	return parts
}

// validate checks a reference on its own.
func (p Part) validate() error {
	switch {
	case p.Tier < 0 || p.Tier > MaxTier:
		return fmt.Errorf("%w: part %s of tier %d (at most %d)", ErrInvalid, p.Name(), p.Tier, MaxTier)
	case p.ObjectSegments < 1 || p.ObjectSegments > TierSegments(p.Tier) || p.Skip < 0 || p.Skip >= p.ObjectSegments || p.Segments != p.ObjectSegments-p.Skip:
		return fmt.Errorf("%w: part %s holds %d segments and skips %d (tier %d holds at most %d)", ErrInvalid, p.Name(), p.ObjectSegments, p.Skip, p.Tier, TierSegments(p.Tier))
	case p.ObjectBase < 0 || p.BaseOffset < p.ObjectBase || p.LastOffset != p.ObjectLast || p.BaseOffset > p.LastOffset || p.ObjectLast-p.ObjectBase+1 < int64(p.ObjectSegments):
		return fmt.Errorf("%w: part %s has offsets %d..%d, live from %d", ErrInvalid, p.Name(), p.ObjectBase, p.ObjectLast, p.BaseOffset)
	case p.Size < int64(p.Segments) || p.Bytes <= 4 || p.DirSize <= 0 || p.DirSize > p.Bytes-4:
		return fmt.Errorf("%w: part %s has sizes %d, %d and %d", ErrInvalid, p.Name(), p.Size, p.Bytes, p.DirSize)
	}
	return nil
}

// HeadSegments returns how many of m.Segments the head holds (those after
// its parts').
func (m *Manifest) HeadSegments() int { return len(m.Segments) - m.covered() }

// covered returns how many of m.Segments its parts hold.
func (m *Manifest) covered() int {
	n := 0
	for _, p := range m.Parts {
		n += p.Segments
	}
	return n
}

// validateParts checks that m.Parts hold m.Segments' first segments, in
// order, each reference on its own sound. (That each part object holds
// what its reference says is checked when it is loaded, and Layer makes
// references from the segments.)
func (m *Manifest) validateParts() error {
	at := 0
	prevLast := int64(-1)
	for i, p := range m.Parts {
		if err := p.validate(); err != nil {
			return err
		}
		if p.ObjectBase <= prevLast || at+p.Segments > len(m.Segments) ||
			m.Segments[at].BaseOffset != p.BaseOffset || m.Segments[at+p.Segments-1].LastOffset != p.LastOffset {
			return fmt.Errorf("%w: part %d (%s, offsets %d..%d) does not hold the manifest's segments %d to %d", ErrInvalid, i, p.Name(), p.BaseOffset, p.LastOffset, at, at+p.Segments-1)
		}
		prevLast = p.ObjectLast
		at += p.Segments
	}
	return nil
}

// PartObject is a part Layer made: its reference and its bytes, to be put
// (create-only) before the head that names it is committed.
type PartObject struct {
	Part
	Data []byte
}

// Layer sets m.Parts for m.Segments, reusing the parts of prev (the
// manifest m replaces; nil for none) that still hold the same segments,
// and returns the parts it made. See the notes at the top of the file for
// the shape; newID returns a fresh id for each new part.
func (m *Manifest) Layer(prev *Manifest, newID func() [8]byte) ([]PartObject, error) {
	type entry struct {
		tier  int
		start int   // in m.Segments
		count int   // segments
		old   *Part // the reused reference (its Skip and live fields adjusted), or nil for a new part
	}
	segs := m.Segments
	var es []entry
	j := 0
	if prev != nil {
		at := 0
		front := true
		for i := range prev.Parts {
			p := prev.Parts[i]
			run := prev.Segments[at : at+p.Segments]
			at += p.Segments
			if j+len(run) <= len(segs) && sameSegments(run, segs[j:j+len(run)]) {
				es = append(es, entry{tier: p.Tier, start: j, count: len(run), old: &p})
				j += len(run)
				front = false
				continue
			}
			if !front || len(segs) == 0 {
				break // changed in the middle: what follows is written anew
			}
			if run[len(run)-1].LastOffset < segs[0].BaseOffset {
				continue // cut whole
			}
			k, found := slices.BinarySearchFunc(run, segs[0].BaseOffset, func(s Segment, off int64) int { return cmp.Compare(s.BaseOffset, off) })
			if !found || len(run)-k > len(segs) || !sameSegments(run[k:], segs[:len(run)-k]) {
				break
			}
			p.Skip += k // cut into: skip the gone segments
			p.summarize(run[k:])
			es = append(es, entry{tier: p.Tier, start: 0, count: len(run) - k, old: &p})
			j = len(run) - k
			front = false
		}
	}
	// The rest: the head's own, the oldest moved into tier 0 parts while
	// it holds more than LeafSegments.
	for len(segs)-j > LeafSegments {
		es = append(es, entry{tier: 0, start: j, count: LeafSegments})
		j += LeafSegments
	}
	tiers := make([]int, len(es))
	for i, e := range es {
		tiers[i] = e.tier
	}
	merged := make([]entry, 0, len(es))
	for _, r := range carries(tiers) {
		if r.to-r.from == 1 {
			merged = append(merged, es[r.from])
			continue
		}
		e := entry{tier: r.tier, start: es[r.from].start}
		for _, c := range es[r.from:r.to] {
			e.count += c.count
		}
		merged = append(merged, e)
	}
	es = merged
	var made []PartObject
	m.Parts = m.Parts[:0:0]
	for _, e := range es {
		if e.old != nil {
			m.Parts = append(m.Parts, *e.old)
			continue
		}
		id := newID()
		po, err := encodePart(e.tier, id, segs[e.start:e.start+e.count])
		if err != nil {
			return nil, err
		}
		made = append(made, po)
		m.Parts = append(m.Parts, po.Part)
	}
	if err := m.Validate(); err != nil {
		m.Parts = nil
		return nil, err
	}
	return made, nil
}

// tierRun is what carries makes of its input: entries from to to (one,
// or the Fanout^k a merge made one) as one part of tier.
type tierRun struct{ tier, from, to int }

// carries applies the layers' carries to parts of the given tiers, in
// order: Fanout parts of tier t in a row after the last part of a higher
// tier become one of tier t+1, tier by tier up to MaxTier (a counter in
// base Fanout). Parts of lower tiers left at the front by a cut stay
// where they are.
func carries(tiers []int) []tierRun {
	rs := make([]tierRun, len(tiers))
	for i, t := range tiers {
		rs[i] = tierRun{tier: t, from: i, to: i + 1}
	}
	for t := 0; t < MaxTier; t++ {
		for {
			from := len(rs)
			for from > 0 && rs[from-1].tier <= t {
				from--
			}
			for from < len(rs) && rs[from].tier < t {
				from++
			}
			n := 0
			for from+n < len(rs) && rs[from+n].tier == t {
				n++
			}
			if n < Fanout {
				break
			}
			rs = slices.Replace(rs, from, from+Fanout, tierRun{tier: t + 1, from: rs[from].from, to: rs[from+Fanout-1].to})
		}
	}
	return rs
}

// Append returns the head of h's manifest with segs appended after its
// last segment and its log start set to logStart, layered as Layer lays
// out the whole manifest (byte for byte, given the same new ids), and the
// parts it made. It reads only what a carry merges: the live segments of
// the parts a merge takes (through load) and the head's own; the
// generation, writer epoch and WAL are h's (a commit sets them with
// Edit).
func (h *Head) Append(segs []Segment, logStart int64, load func(Part) ([]Segment, error), newID func() [8]byte) (*Head, []PartObject, error) {
	hdr := *h.m
	hdr.LogStartOffset = logStart
	own := append(slices.Clip(h.Own), segs...)
	// Check the new segments against the head's before laying them out.
	check := hdr
	check.Segments = own
	if err := check.Validate(); err != nil {
		return nil, nil, err
	}
	if n := len(h.Parts); n > 0 && len(own) > 0 && own[0].BaseOffset <= h.Parts[n-1].LastOffset {
		return nil, nil, fmt.Errorf("%w: a segment at base %d after the last part (ends at %d)", ErrInvalid, own[0].BaseOffset, h.Parts[n-1].LastOffset)
	}
	type entry struct {
		tier int
		part *Part     // an existing part
		segs []Segment // a new part's segments
	}
	var es []entry
	for i := range h.Parts {
		es = append(es, entry{tier: h.Parts[i].Tier, part: &h.Parts[i]})
	}
	j := 0
	for len(own)-j > LeafSegments {
		es = append(es, entry{tier: 0, segs: own[j : j+LeafSegments]})
		j += LeafSegments
	}
	tiers := make([]int, len(es))
	for i, e := range es {
		tiers[i] = e.tier
	}
	var parts []Part
	var made []PartObject
	for _, r := range carries(tiers) {
		if r.to-r.from == 1 && es[r.from].part != nil {
			parts = append(parts, *es[r.from].part)
			continue
		}
		var run []Segment
		for _, e := range es[r.from:r.to] {
			if e.part == nil {
				run = append(run, e.segs...)
				continue
			}
			live, err := load(*e.part)
			if err != nil {
				return nil, nil, err
			}
			run = append(run, live...)
		}
		po, err := encodePart(r.tier, newID(), run)
		if err != nil {
			return nil, nil, err
		}
		made = append(made, po)
		parts = append(parts, po.Part)
	}
	next, err := newHead(&hdr, parts, slices.Clone(own[j:]))
	if err != nil {
		return nil, nil, err
	}
	return next, made, nil
}

// sameSegments says whether a and b are the same segments, field by field.
func sameSegments(a, b []Segment) bool {
	return slices.EqualFunc(a, b, func(x, y Segment) bool {
		return x.BaseOffset == y.BaseOffset && x.LastOffset == y.LastOffset && x.ID == y.ID && x.MaxTimestamp == y.MaxTimestamp &&
			x.Size == y.Size && x.Records == y.Records && x.LeaderEpoch == y.LeaderEpoch && x.UploadTimeMs == y.UploadTimeMs &&
			x.IndexSize == y.IndexSize && x.TimeIndexSize == y.TimeIndexSize && x.LogCRC == y.LogCRC && x.IndexCRC == y.IndexCRC &&
			x.TimeIndexCRC == y.TimeIndexCRC && x.TxnIndexSize == y.TxnIndexSize && x.SnapshotSize == y.SnapshotSize &&
			x.EpochsSize == y.EpochsSize && x.TxnIndexCRC == y.TxnIndexCRC && x.SnapshotCRC == y.SnapshotCRC &&
			x.EpochsCRC == y.EpochsCRC && slices.Equal(x.Epochs, y.Epochs)
	})
}

// encodePart lays segs out as a part object of tier t:
//
//	"TLMP"          4 bytes magic
//	version         uint16 (1)
//	tier            byte
//	blocks          each: a segment count and the segments, as in the
//	                head, the first one's base from -1
//	directory       0x00 and 0x01 (a checked directory, version 1),
//	                uvarint count, then each block's: offset, size,
//	                segments, base offset, last offset (uvarints),
//	                max timestamp (varint), CRC-32C (uint32); then
//	                the CRC-32C (uint32) of the directory's bytes
//	                before it
//	crc             uint32 CRC-32C of every byte before it
//
// (A version 1 part's directory lacks the two leading bytes and its own
// CRC.)
func encodePart(t int, id [8]byte, segs []Segment) (PartObject, error) {
	if len(segs) == 0 || len(segs) > TierSegments(t) {
		return PartObject{}, fmt.Errorf("%w: a part of tier %d with %d segments", ErrInvalid, t, len(segs))
	}
	b := append(make([]byte, 0, 16+len(segs)*50), partMagic[:]...)
	b = binary.BigEndian.AppendUint16(b, partVersion)
	b = append(b, byte(t))
	dir := []byte{checkedDirMarker, checkedDirVersion}
	blocks := (len(segs) + BlockSegments - 1) / BlockSegments
	dir = binary.AppendUvarint(dir, uint64(blocks))
	for i := 0; i < len(segs); i += BlockSegments {
		blk := segs[i:min(i+BlockSegments, len(segs))]
		start := len(b)
		b = appendSegments(b, blk, -1)
		maxTs := int64(math.MinInt64)
		for _, s := range blk {
			maxTs = max(maxTs, s.MaxTimestamp)
		}
		dir = binary.AppendUvarint(dir, uint64(start))
		dir = binary.AppendUvarint(dir, uint64(len(b)-start))
		dir = binary.AppendUvarint(dir, uint64(len(blk)))
		dir = binary.AppendUvarint(dir, uint64(blk[0].BaseOffset))
		dir = binary.AppendUvarint(dir, uint64(blk[len(blk)-1].LastOffset))
		dir = binary.AppendVarint(dir, maxTs)
		dir = binary.BigEndian.AppendUint32(dir, crc32.Checksum(b[start:], castagnoli))
	}
	dir = binary.BigEndian.AppendUint32(dir, crc32.Checksum(dir, castagnoli))
	b = append(b, dir...)
	b = binary.BigEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
	p := Part{Tier: t, ID: id, ObjectBase: segs[0].BaseOffset, ObjectLast: segs[len(segs)-1].LastOffset, ObjectSegments: len(segs),
		Bytes: int64(len(b)), CRC: crc32.Checksum(b, castagnoli), DirSize: int64(len(dir))}
	p.summarize(segs)
	return PartObject{Part: p, Data: b}, nil
}

// DecodePart parses a part object's bytes against its reference: its
// size, CRC-32C and shape, and every block. It returns the live segments:
// those after the reference's Skip.
func DecodePart(p Part, data []byte) ([]Segment, error) {
	if err := p.validate(); err != nil {
		return nil, err
	}
	if int64(len(data)) != p.Bytes {
		return nil, fmt.Errorf("%w: part %s has %d bytes, its reference says %d", ErrCorrupt, p.Name(), len(data), p.Bytes)
	}
	if got := crc32.Checksum(data, castagnoli); got != p.CRC {
		return nil, fmt.Errorf("%w: part %s has CRC-32C 0x%08x, its reference says 0x%08x", ErrCorrupt, p.Name(), got, p.CRC)
	}
	if len(data) < 4+2+1+4 || [4]byte(data[:4]) != partMagic {
		return nil, fmt.Errorf("%w: part %s: bad magic", ErrCorrupt, p.Name())
	}
	v := binary.BigEndian.Uint16(data[4:])
	if v < 1 || v > partVersion {
		return nil, fmt.Errorf("%w: part %s: version %d (this build reads 1 to %d)", ErrUnsupportedVersion, p.Name(), v, partVersion)
	}
	body := data[:len(data)-4]
	if got := crc32.Checksum(body, castagnoli); got != binary.BigEndian.Uint32(data[len(data)-4:]) {
		return nil, fmt.Errorf("%w: part %s: its own CRC does not match", ErrCorrupt, p.Name())
	}
	if int(data[6]) != p.Tier || p.DirSize > int64(len(body)-7) {
		return nil, fmt.Errorf("%w: part %s: tier %d or directory size %d is not its reference's", ErrCorrupt, p.Name(), data[6], p.DirSize)
	}
	off, n := p.DirRange()
	blocks, err := decodeDirectory(p, body[off:off+n], v)
	if err != nil {
		return nil, err
	}
	segs := make([]Segment, 0, p.ObjectSegments)
	for _, b := range blocks {
		blk, err := b.decode(p, body[b.Offset:b.Offset+b.Size])
		if err != nil {
			return nil, err
		}
		segs = append(segs, blk...)
	}
	check := &Manifest{Segments: segs}
	if err := check.Validate(); err != nil {
		return nil, fmt.Errorf("%w: part %s: %w", ErrCorrupt, p.Name(), err)
	}
	live := segs[p.Skip:]
	if err := p.check(live); err != nil {
		return nil, err
	}
	if p.Skip > 0 {
		// Its own array: a cache that holds the live segments must not
		// keep the skipped ones alive.
		live = slices.Clone(live)
	}
	return live, nil
}

// partHeaderBytes is what a part object holds before its first block:
// the magic, the version and the tier.
const partHeaderBytes = 4 + 2 + 1

// Block is one block of a part object, as the part's directory records
// it: a reader that fetched the directory (Part.DirRange) reads the one
// block it needs (Offset, Size) instead of the whole part.
type Block struct {
	Offset, Size           int64 // its bytes in the part object
	First, Segments        int   // the object's index of its first segment, and its count
	BaseOffset, LastOffset int64
	MaxTimestamp           int64
	CRC                    uint32
}

// DirRange returns where a part object's block directory lies: the
// DirSize bytes before its last 4.
func (p Part) DirRange() (offset, size int64) { return p.Bytes - 4 - p.DirSize, p.DirSize }

// ErrUncheckedDirectory means a part's directory carries no CRC-32C of
// its own (a version 1 part): read the part whole, which its object's
// CRC-32C covers.
var ErrUncheckedDirectory = errors.New("manifest: the part's directory carries no checksum of its own (a version 1 part): read it whole")

// DecodePartDirectory parses a part's block directory (the bytes at
// DirRange), checks its own CRC-32C, and checks it against the
// reference: blocks laid out one after the other from the object's
// header to the directory, holding the object's segments in order, from
// its first offset to its last. A block's own bytes are checked when it
// is decoded (Block.LiveSegments). A version 1 part's directory is
// ErrUncheckedDirectory.
func DecodePartDirectory(p Part, dir []byte) ([]Block, error) {
	if err := p.validate(); err != nil {
		return nil, err
	}
	return decodeDirectory(p, dir, 0)
}

// decodeDirectory is DecodePartDirectory for a part of the given version
// (its object's CRC-32C checked by the caller), or of a version not known
// (0: the directory was read alone).
func decodeDirectory(p Part, dir []byte, version uint16) ([]Block, error) {
	if int64(len(dir)) != p.DirSize {
		return nil, fmt.Errorf("%w: part %s: a directory of %d bytes, its reference says %d", ErrCorrupt, p.Name(), len(dir), p.DirSize)
	}
	switch {
	case version == 1:
	case (len(dir) < 2+1+4 || dir[0] != checkedDirMarker) && version == 0:
		return nil, fmt.Errorf("part %s: %w", p.Name(), ErrUncheckedDirectory)
	case len(dir) < 2+1+4 || dir[0] != checkedDirMarker:
		return nil, fmt.Errorf("%w: part %s: a version %d part whose directory is not marked as checked", ErrCorrupt, p.Name(), version)
	case dir[1] != checkedDirVersion:
		return nil, fmt.Errorf("%w: part %s: directory version %d (this build reads %d)", ErrUnsupportedVersion, p.Name(), dir[1], checkedDirVersion)
	case crc32.Checksum(dir[:len(dir)-4], castagnoli) != binary.BigEndian.Uint32(dir[len(dir)-4:]):
		return nil, fmt.Errorf("%w: part %s: its block directory does not match its CRC-32C", ErrCorrupt, p.Name())
	default:
		dir = dir[2 : len(dir)-4]
	}
	dd := &decoder{b: dir}
	n := dd.uvarint("block count")
	if dd.err != nil || n == 0 || n > uint64(p.ObjectSegments) {
		return nil, fmt.Errorf("%w: part %s: %d blocks", ErrCorrupt, p.Name(), n)
	}
	blocksEnd, _ := p.DirRange()
	blocks := make([]Block, n)
	at, first, prevLast := int64(partHeaderBytes), 0, int64(-1)
	for i := range blocks {
		b := &blocks[i]
		b.Offset, b.Size, b.Segments = dd.int63("block offset"), dd.int63("block size"), int(min(dd.int63("block segments"), math.MaxInt32))
		b.BaseOffset, b.LastOffset = dd.int63("block base"), dd.int63("block last")
		b.MaxTimestamp = dd.varint("block max timestamp")
		b.CRC = binary.BigEndian.Uint32(dd.bytes(4, "block crc"))
		if dd.err != nil {
			return nil, fmt.Errorf("%w: part %s: %w", ErrCorrupt, p.Name(), dd.err)
		}
		b.First = first
		if b.Offset != at || b.Size <= 0 || b.Size > blocksEnd-at || b.Segments <= 0 || b.Segments > p.ObjectSegments-first ||
			b.BaseOffset <= prevLast || b.LastOffset < b.BaseOffset || b.LastOffset-b.BaseOffset+1 < int64(b.Segments) {
			return nil, fmt.Errorf("%w: part %s: block %d (at %d, %d bytes, %d segments, offsets %d..%d) is not where or what its directory can say",
				ErrCorrupt, p.Name(), i, b.Offset, b.Size, b.Segments, b.BaseOffset, b.LastOffset)
		}
		at += b.Size
		first += b.Segments
		prevLast = b.LastOffset
	}
	if len(dd.b) != 0 || at != blocksEnd || first != p.ObjectSegments ||
		blocks[0].BaseOffset != p.ObjectBase || blocks[len(blocks)-1].LastOffset != p.ObjectLast {
		return nil, fmt.Errorf("%w: part %s: its directory does not hold the object's %d segments (offsets %d..%d)",
			ErrCorrupt, p.Name(), p.ObjectSegments, p.ObjectBase, p.ObjectLast)
	}
	return blocks, nil
}

// LiveSegments decodes block b of part p from its bytes (the Size bytes
// at Offset) and returns its segments the part still has: those at or
// after the reference's Skip (none when the block lies wholly before
// it). The block is checked against its CRC and its directory entry.
func (b Block) LiveSegments(p Part, data []byte) ([]Segment, error) {
	segs, err := b.decode(p, data)
	if err != nil {
		return nil, err
	}
	check := &Manifest{Segments: segs}
	if err := check.Validate(); err != nil {
		return nil, fmt.Errorf("%w: part %s: block at %d: %w", ErrCorrupt, p.Name(), b.Offset, err)
	}
	skip := min(max(p.Skip-b.First, 0), len(segs))
	live := segs[skip:]
	if len(live) > 0 && b.First+skip == p.Skip && live[0].BaseOffset != p.BaseOffset {
		return nil, fmt.Errorf("%w: part %s: its first live segment starts at %d, its reference says %d", ErrCorrupt, p.Name(), live[0].BaseOffset, p.BaseOffset)
	}
	if skip > 0 {
		live = slices.Clone(live) // the skipped segments are not kept alive by the live ones
	}
	return live, nil
}

// decode parses block b's bytes and checks them against its directory
// entry.
func (b Block) decode(p Part, data []byte) ([]Segment, error) {
	if int64(len(data)) != b.Size || crc32.Checksum(data, castagnoli) != b.CRC {
		return nil, fmt.Errorf("%w: part %s: block at %d (%d bytes) does not match its directory's size or CRC-32C", ErrCorrupt, p.Name(), b.Offset, b.Size)
	}
	bd := &decoder{b: data}
	blk := bd.segments(partSegmentsVersion, -1)
	if bd.err != nil {
		return nil, fmt.Errorf("part %s, block at %d: %w", p.Name(), b.Offset, bd.err)
	}
	if len(bd.b) != 0 || len(blk) == 0 || len(blk) != b.Segments || blk[0].BaseOffset != b.BaseOffset || blk[len(blk)-1].LastOffset != b.LastOffset {
		return nil, fmt.Errorf("%w: part %s: block at %d does not hold what its directory says", ErrCorrupt, p.Name(), b.Offset)
	}
	got := int64(math.MinInt64)
	for _, s := range blk {
		got = max(got, s.MaxTimestamp)
	}
	if got != b.MaxTimestamp {
		return nil, fmt.Errorf("%w: part %s: block at %d's largest timestamp is not its directory's", ErrCorrupt, p.Name(), b.Offset)
	}
	return blk, nil
}
