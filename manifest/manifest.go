// Package manifest is the per-partition list of segments held in a bucket:
// its encoding, its validation, and the lookups that find an offset or a
// timestamp in it (step 1 of the two-step lookup; step 2 is the segment's
// remote offset index, read through package index).
//
// # Bucket layout
//
//	<prefix>/<topic>-<partition>/manifest
//	<prefix>/<topic>-<partition>/<base 20d>-<last 20d>-<id>.log
//	<prefix>/<topic>-<partition>/<base 20d>-<last 20d>-<id>.index
//	<prefix>/<topic>-<partition>/<base 20d>-<last 20d>-<id>.timeindex
//	<prefix>/<topic>-<partition>/<base 20d>-<last 20d>-<id>.txnindex    when it has aborted transactions
//	<prefix>/<topic>-<partition>/<base 20d>-<last 20d>-<id>.snapshot    producer state at last+1
//	<prefix>/<topic>-<partition>/<base 20d>-<last 20d>-<id>.leader-epoch-checkpoint   epochs up to last
//	<prefix>/<topic>-<partition>/<id>.intent    an upload intent (JSON): the objects of an upload in flight
//	<prefix>/<topic>-<partition>/manifest.<generation 20d>    a committed generation's backup
//	<prefix>/<topic>-<partition>/<base 20d>-<last 20d>-<id>.part    a part of the manifest (version 3)
//
// What Kafka's LogSegmentData carries (KIP-405): the log, its three
// indexes, the producer snapshot at its end and the leader epochs up to its
// end, in the same file formats.
//
// Layout formats every one of these keys and parses them back (Kinds lists
// the kinds); nothing else builds or parses a key.
//
// <id> is 16 hex digits, new for every upload attempt, so a retried or
// racing upload never overwrites another's objects.
//
// # Encoding, version 3 (frozen once released; all integers big-endian or
// unsigned/zigzag varints as marked). Version 2 is version 3 without the
// part list (v3); version 1 also lacks the fields marked v2. All three are
// read, version 3 is written. The object at the manifest's key is the
// head: with version 3 it names parts, immutable objects holding older
// segments (layered.go has their layout and rules), and holds the
// segments after them.
//
//	"TLMF"             4 bytes magic
//	version            uint16 (2)
//	generation         uvarint  (incremented by every commit)
//	writerEpoch        varint   (leader epoch of the committing writer)
//	logStartOffset     varint   (the partition's remote log start)
//	flags              uvarint  (v2) bit 0: the partition is deleted (no
//	                   segments; its objects are being removed); bit 1: born
//	                   follows; bit 2: wal follows; bit 3: cleanedTo
//	                   follows; bit 4: lineage follows; other bits must
//	                   be 0 (a reader refuses a manifest with a bit it
//	                   does not know)
//	born               uvarint  (v2, only with flags bit 1) the generation
//	                   this incarnation of the partition started at
//	wal                (v2, only with flags bit 2) where a diskless
//	                   partition's data beyond its segments lies:
//	  writer           8 bytes  the WAL writer that leads it
//	  after            uvarint  its objects above this number may hold it
//	  count            uvarint  extents in earlier writers' objects, in
//	                   offset order, each:
//	    writer         8 bytes
//	    sequence       uvarint
//	    position       uvarint
//	    size           uvarint
//	    firstOffset    uvarint
//	    span           uvarint  (lastOffset - firstOffset)
//	    crc            uint32   CRC-32C of the extent's bytes
//	cleanedTo          uvarint  (only with flags bit 3) a compacted
//	                   partition's cleaner checkpoint in the bucket: the
//	                   segments below it were cleaned against every key
//	                   up to it
//	lineage            8 bytes  (only with flags bit 4; never all zero) the
//	                   partition incarnation's random identity
//	partCount          uvarint  (v3) the parts the head names, each (see
//	                   appendParts in layered.go): tier, id, the object's
//	                   offsets, segment count, bytes, CRC-32C and directory
//	                   size, the segments it skips, and its live segments'
//	                   first base, .log bytes, largest timestamp and epochs
//	count              uvarint
//	count segments, each (the first one's base from the last part's last):
//	  flags            byte     (bit 0: a gap precedes this segment)
//	  baseDelta        uvarint  (base - (previous last + 1); 0 unless gapped)
//	  span             uvarint  (last - base)
//	  maxTimestamp     varint   (delta from the previous segment's)
//	  size             uvarint  (.log bytes)
//	  records          uvarint
//	  leaderEpoch      varint   (delta from the previous segment's)
//	  uploadTimeMs     varint   (delta from the previous segment's)
//	  id               8 bytes
//	  indexSize        uvarint, timeIndexSize uvarint
//	  logCRC, indexCRC, timeIndexCRC   uint32 each (CRC-32C of the objects)
//	  epochCount       uvarint  (v2) the segment's leader epochs, each:
//	    epoch          varint   (delta from the previous one's; the first's from 0)
//	    start          uvarint  (delta from the previous start; the first's from base)
//	  txnIndexSize     uvarint  (v2) .txnindex bytes, 0: none; then, when not 0,
//	  txnIndexCRC      uint32
//	  snapshotSize     uvarint  (v2) producer snapshot bytes, 0: none; then
//	  snapshotCRC      uint32
//	  epochsSize       uvarint  (v2) leader-epoch-checkpoint bytes, 0: none; then
//	  epochsCRC        uint32
//	crc                uint32   CRC-32C of every byte before it
//
// The first segment's base is encoded as a delta from offset 0 (previous
// last = -1) and its timestamps, epoch and time as deltas from 0. At 100,000
// segments the segments' entries are about 4.5 MB.
package manifest

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"sort"
)

// Errors.
var (
	// ErrCorrupt means the bytes are not a valid manifest: bad magic, CRC,
	// truncation, or entries that break the ordering rules.
	ErrCorrupt = errors.New("manifest: corrupt manifest")
	// ErrUnsupportedVersion means a newer writer made it.
	ErrUnsupportedVersion = errors.New("manifest: unsupported version")
	// ErrInvalid means a manifest being built breaks a rule (overlap, a
	// segment out of order, an impossible size).
	ErrInvalid = errors.New("manifest: invalid manifest")
)

// Version is the encoding this package writes; it reads 1 to 3.
const Version = 3

var magic = [4]byte{'T', 'L', 'M', 'F'}

// The header flags: flagDeleted is Manifest.Deleted; flagBorn says a
// uvarint Manifest.Born follows the flags.
const (
	flagDeleted = 1
	flagBorn    = 2
	flagWAL     = 4
	flagCleaned = 8
	flagLineage = 16
	knownFlags  = flagDeleted | flagBorn | flagWAL | flagCleaned | flagLineage
)

// WAL is where a diskless partition's data beyond its segments lies (see
// package wal): in the objects of Writer numbered above After, and before
// them in Extents, read from earlier writers' objects when Writer claimed
// the partition.
type WAL struct {
	Writer  [8]byte
	After   uint64
	Extents []WALExtent
}

// WALExtent is a partition's extent in one WAL object.
type WALExtent struct {
	Writer                  [8]byte
	Sequence                uint64
	Position, Size          int64
	FirstOffset, LastOffset int64
	CRC                     uint32
}

// validate checks the extents' order.
func (w *WAL) validate() error {
	prev := int64(-1)
	for i, e := range w.Extents {
		if e.Sequence == 0 || e.Position < 0 || e.Size <= 0 || e.Size > math.MaxInt32 || e.FirstOffset <= prev || e.LastOffset < e.FirstOffset {
			return fmt.Errorf("%w: WAL extent %d (sequence %d, offsets %d..%d, size %d) out of order", ErrInvalid, i, e.Sequence, e.FirstOffset, e.LastOffset, e.Size)
		}
		prev = e.LastOffset
	}
	return nil
}

// minEntryBytes is the smallest encoded segment: flags, nine one-byte
// varints, the id and three CRCs. Used to cap the count before allocating.
const minEntryBytes = 1 + 7 + 8 + 2 + 12

// EpochStart is a leader epoch and the first offset written in it.
type EpochStart struct {
	Epoch       int32
	StartOffset int64
}

// Segment is one segment in the bucket.
type Segment struct {
	BaseOffset    int64
	LastOffset    int64
	MaxTimestamp  int64
	Size          int64 // .log bytes
	Records       int64
	LeaderEpoch   int32
	UploadTimeMs  int64
	ID            [8]byte // the upload attempt
	IndexSize     int64
	TimeIndexSize int64
	LogCRC        uint32
	IndexCRC      uint32
	TimeIndexCRC  uint32
	// Epochs are the leader epochs of the segment's records, each with the
	// first offset written in it, the first one's clamped to BaseOffset
	// (KIP-405's segment leader-epoch map). A version 1 manifest has none:
	// LeaderEpoch is then all it knows (the highest).
	Epochs []EpochStart
	// The optional objects: size 0 means the segment has none.
	TxnIndexSize, SnapshotSize, EpochsSize int64
	TxnIndexCRC, SnapshotCRC, EpochsCRC    uint32
}

// Suffixes of a segment's objects.
const (
	LogSuffix       = ".log"
	IndexSuffix     = ".index"
	TimeIndexSuffix = ".timeindex"
	TxnIndexSuffix  = ".txnindex"
	SnapshotSuffix  = ".snapshot"
	EpochsSuffix    = ".leader-epoch-checkpoint"
)

// AllSuffixes lists every suffix a segment's objects may have.
var AllSuffixes = []string{LogSuffix, IndexSuffix, TimeIndexSuffix, TxnIndexSuffix, SnapshotSuffix, EpochsSuffix}

// Objects lists the suffixes of the objects the segment has, the three
// always present first.
func (s Segment) Objects() []string {
	out := []string{LogSuffix, IndexSuffix, TimeIndexSuffix}
	if s.TxnIndexSize > 0 {
		out = append(out, TxnIndexSuffix)
	}
	if s.SnapshotSize > 0 {
		out = append(out, SnapshotSuffix)
	}
	if s.EpochsSize > 0 {
		out = append(out, EpochsSuffix)
	}
	return out
}

// Object returns the size and CRC-32C the manifest records for the
// object with suffix (0, 0 for one the segment does not have).
func (s Segment) Object(suffix string) (size int64, crc uint32) {
	switch suffix {
	case LogSuffix:
		return s.Size, s.LogCRC
	case IndexSuffix:
		return s.IndexSize, s.IndexCRC
	case TimeIndexSuffix:
		return s.TimeIndexSize, s.TimeIndexCRC
	case TxnIndexSuffix:
		return s.TxnIndexSize, s.TxnIndexCRC
	case SnapshotSuffix:
		return s.SnapshotSize, s.SnapshotCRC
	case EpochsSuffix:
		return s.EpochsSize, s.EpochsCRC
	}
	return 0, 0
}

// Name returns the object name (without the partition prefix) of the
// segment's file with suffix: <base 20d>-<last 20d>-<id><suffix>.
func (s Segment) Name(suffix string) string {
	return segmentName(s.BaseOffset, s.LastOffset, s.ID, suffix)
}

// Manifest is a partition's remote segments, sorted by base offset. A
// decoded (or encoded) Manifest may be read by many goroutines at once;
// changing one (Append) needs the caller's exclusive access.
type Manifest struct {
	Generation     uint64
	WriterEpoch    int32
	LogStartOffset int64
	// Deleted marks a partition whose deletion has begun (KIP-405's
	// DELETE_PARTITION_MARKED): it names no segment, its objects are being
	// removed, and no writer commits over it.
	Deleted bool
	// Born is the generation of the first manifest of this incarnation of
	// the partition: the one after the deleted manifest it started over
	// from (see tiered's claim), or 0 for a partition never deleted. A
	// writer that last read a generation below Born knew a deleted
	// incarnation of the partition, and must not write into this one.
	Born uint64
	// WAL is set for a diskless partition: where its data beyond its
	// segments lies.
	WAL *WAL
	// CleanedTo is a compacted partition's cleaner checkpoint in the
	// bucket (the first dirty offset of its next round; 0: none): every
	// segment below it was cleaned against a map of every key up to it.
	CleanedTo int64
	// Lineage is the random identity of this incarnation of the
	// partition, given by the writer that made its first manifest (or
	// by the first commit over a manifest without one) and carried by
	// every commit after. A partition directory records it, so a bucket
	// whose manifest carries another is another partition's, whatever
	// its generation: a wrong store URL or prefix. Zero: none yet.
	Lineage  [8]byte
	Segments []Segment
	// Parts are the part objects the head names (version 3), holding
	// Segments' first segments in order; the head holds the rest. Layer
	// sets them for a manifest about to be committed; nil: the head holds
	// every segment.
	Parts []Part

	// prefixMaxTs[i] is the largest MaxTimestamp of Segments[0..i]; it
	// makes the timestamp search a binary search. Built by Validate.
	prefixMaxTs []int64
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Validate checks the ordering rules: segments sorted by base offset, each
// base <= last, none overlapping, sizes sane, the log start within range.
// Gaps between segments are allowed (retention and compaction make them).
func (m *Manifest) Validate() error {
	prevLast := int64(-1)
	m.prefixMaxTs = make([]int64, 0, len(m.Segments)) // its own: a copied Manifest shares the old array
	maxTs := int64(math.MinInt64)
	for i, s := range m.Segments {
		switch {
		case s.BaseOffset < 0 || s.LastOffset < s.BaseOffset:
			return fmt.Errorf("%w: segment %d has offsets %d..%d", ErrInvalid, i, s.BaseOffset, s.LastOffset)
		case s.BaseOffset <= prevLast:
			return fmt.Errorf("%w: segment %d starts at %d, overlapping the previous one (ends at %d)", ErrInvalid, i, s.BaseOffset, prevLast)
		case s.Size <= 0 || s.Size > math.MaxInt32:
			return fmt.Errorf("%w: segment %d (base %d) has size %d", ErrInvalid, i, s.BaseOffset, s.Size)
		case s.Records < 0 || s.Records > s.LastOffset-s.BaseOffset+1:
			return fmt.Errorf("%w: segment %d (base %d) has %d records for offsets %d..%d", ErrInvalid, i, s.BaseOffset, s.Records, s.BaseOffset, s.LastOffset)
		case s.IndexSize < 0 || s.IndexSize%8 != 0 || s.TimeIndexSize < 0 || s.TimeIndexSize%12 != 0:
			return fmt.Errorf("%w: segment %d (base %d) has index sizes %d and %d", ErrInvalid, i, s.BaseOffset, s.IndexSize, s.TimeIndexSize)
		case s.TxnIndexSize < 0 || s.TxnIndexSize%34 != 0 || s.SnapshotSize < 0 || s.SnapshotSize > math.MaxInt32 || s.EpochsSize < 0 || s.EpochsSize > math.MaxInt32:
			return fmt.Errorf("%w: segment %d (base %d) has object sizes %d, %d and %d", ErrInvalid, i, s.BaseOffset, s.TxnIndexSize, s.SnapshotSize, s.EpochsSize)
		}
		for j, e := range s.Epochs {
			if (j == 0 && e.StartOffset != s.BaseOffset) || e.StartOffset > s.LastOffset || e.Epoch < 0 ||
				(j > 0 && (e.Epoch <= s.Epochs[j-1].Epoch || e.StartOffset <= s.Epochs[j-1].StartOffset)) {
				return fmt.Errorf("%w: segment %d (base %d): leader epoch %d from offset %d out of order", ErrInvalid, i, s.BaseOffset, e.Epoch, e.StartOffset)
			}
		}
		prevLast = s.LastOffset
		maxTs = max(maxTs, s.MaxTimestamp)
		m.prefixMaxTs = append(m.prefixMaxTs, maxTs)
	}
	if m.LogStartOffset < 0 || m.CleanedTo < 0 {
		return fmt.Errorf("%w: log start offset %d, cleaned to %d", ErrInvalid, m.LogStartOffset, m.CleanedTo)
	}
	if m.Born > m.Generation {
		return fmt.Errorf("%w: born at generation %d, after its own generation %d", ErrInvalid, m.Born, m.Generation)
	}
	if m.WAL != nil {
		if err := m.WAL.validate(); err != nil {
			return err
		}
	}
	if err := m.validateParts(); err != nil {
		return err
	}
	if m.Deleted && len(m.Segments) > 0 {
		return fmt.Errorf("%w: a deleted partition names %d segments", ErrInvalid, len(m.Segments))
	}
	if n := len(m.Segments); n > 0 && m.LogStartOffset > m.Segments[n-1].LastOffset+1 {
		return fmt.Errorf("%w: log start offset %d is past the last segment (ends at %d)", ErrInvalid, m.LogStartOffset, m.Segments[n-1].LastOffset)
	}
	return nil
}

// Encode validates m and returns its bytes: the head, which names
// m.Parts and holds the segments after them (all of them when m has no
// parts). The parts themselves are put by whoever made them (Layer).
func (m *Manifest) Encode() ([]byte, error) {
	if err := m.Validate(); err != nil {
		return nil, err
	}
	return encode(m, m.Parts, m.Segments[m.covered():]), nil
}

// encode lays out a head: m's header, parts and own (the segments after
// the parts').
func encode(m *Manifest, parts []Part, own []Segment) []byte {
	b := make([]byte, 0, 64+len(parts)*40+len(own)*48)
	b = append(b, magic[:]...)
	b = binary.BigEndian.AppendUint16(b, Version)
	b = binary.AppendUvarint(b, m.Generation)
	b = binary.AppendVarint(b, int64(m.WriterEpoch))
	b = binary.AppendVarint(b, m.LogStartOffset)
	var flags uint64
	if m.Deleted {
		flags |= flagDeleted
	}
	if m.Born > 0 {
		flags |= flagBorn
	}
	if m.WAL != nil {
		flags |= flagWAL
	}
	if m.CleanedTo > 0 {
		flags |= flagCleaned
	}
	if m.Lineage != ([8]byte{}) {
		flags |= flagLineage
	}
	b = binary.AppendUvarint(b, flags)
	if m.Born > 0 {
		b = binary.AppendUvarint(b, m.Born)
	}
	if m.WAL != nil {
		b = append(b, m.WAL.Writer[:]...)
		b = binary.AppendUvarint(b, m.WAL.After)
		b = binary.AppendUvarint(b, uint64(len(m.WAL.Extents)))
		for _, e := range m.WAL.Extents {
			b = append(b, e.Writer[:]...)
			b = binary.AppendUvarint(b, e.Sequence)
			b = binary.AppendUvarint(b, uint64(e.Position))
			b = binary.AppendUvarint(b, uint64(e.Size))
			b = binary.AppendUvarint(b, uint64(e.FirstOffset))
			b = binary.AppendUvarint(b, uint64(e.LastOffset-e.FirstOffset))
			b = binary.BigEndian.AppendUint32(b, e.CRC)
		}
	}
	if m.CleanedTo > 0 {
		b = binary.AppendUvarint(b, uint64(m.CleanedTo))
	}
	if m.Lineage != ([8]byte{}) {
		b = append(b, m.Lineage[:]...)
	}
	b = appendParts(b, parts)
	prevLast := int64(-1)
	if n := len(parts); n > 0 {
		prevLast = parts[n-1].LastOffset
	}
	b = appendSegments(b, own, prevLast)
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

// appendSegments appends the count and the segments, the first one's base
// encoded from prevLast (its timestamps, epoch and time from 0).
func appendSegments(b []byte, segs []Segment, prevLast int64) []byte {
	b = binary.AppendUvarint(b, uint64(len(segs)))
	prevTs, prevEpoch, prevTime := int64(0), int64(0), int64(0)
	for _, s := range segs {
		var flags byte
		if s.BaseOffset != prevLast+1 {
			flags |= 1
		}
		b = append(b, flags)
		b = binary.AppendUvarint(b, uint64(s.BaseOffset-(prevLast+1)))
		b = binary.AppendUvarint(b, uint64(s.LastOffset-s.BaseOffset))
		b = binary.AppendVarint(b, s.MaxTimestamp-prevTs)
		b = binary.AppendUvarint(b, uint64(s.Size))
		b = binary.AppendUvarint(b, uint64(s.Records))
		b = binary.AppendVarint(b, int64(s.LeaderEpoch)-prevEpoch)
		b = binary.AppendVarint(b, s.UploadTimeMs-prevTime)
		b = append(b, s.ID[:]...)
		b = binary.AppendUvarint(b, uint64(s.IndexSize))
		b = binary.AppendUvarint(b, uint64(s.TimeIndexSize))
		b = binary.BigEndian.AppendUint32(b, s.LogCRC)
		b = binary.BigEndian.AppendUint32(b, s.IndexCRC)
		b = binary.BigEndian.AppendUint32(b, s.TimeIndexCRC)
		b = binary.AppendUvarint(b, uint64(len(s.Epochs)))
		pe, ps := int64(0), s.BaseOffset
		for _, e := range s.Epochs {
			b = binary.AppendVarint(b, int64(e.Epoch)-pe)
			b = binary.AppendUvarint(b, uint64(e.StartOffset-ps))
			pe, ps = int64(e.Epoch), e.StartOffset
		}
		for _, o := range [][2]int64{{s.TxnIndexSize, int64(s.TxnIndexCRC)}, {s.SnapshotSize, int64(s.SnapshotCRC)}, {s.EpochsSize, int64(s.EpochsCRC)}} {
			b = binary.AppendUvarint(b, uint64(o[0]))
			if o[0] > 0 {
				b = binary.BigEndian.AppendUint32(b, uint32(o[1]))
			}
		}
		prevLast, prevTs, prevEpoch, prevTime = s.LastOffset, s.MaxTimestamp, int64(s.LeaderEpoch), s.UploadTimeMs
	}
	return b
}

// decoder reads varints from a byte slice, never past its end.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail(what string) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: %s", ErrCorrupt, what)
	}
}

func (d *decoder) uvarint(what string) uint64 {
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail(what)
		return 0
	}
	d.b = d.b[n:]
	return v
}

// int63 is a uvarint that must fit an int64.
func (d *decoder) int63(what string) int64 {
	v := d.uvarint(what)
	if v > math.MaxInt64 {
		d.fail(what + " out of range")
		return 0
	}
	return int64(v)
}

func (d *decoder) varint(what string) int64 {
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail(what)
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) bytes(n int, what string) []byte {
	if len(d.b) < n {
		d.fail(what)
		return make([]byte, n)
	}
	v := d.b[:n]
	d.b = d.b[n:]
	return v
}

// decodeV2 reads a segment's version 2 fields.
func (d *decoder) decodeV2(s *Segment) {
	n := d.uvarint("epoch count")
	if n > uint64(len(d.b)/2) {
		d.fail(fmt.Sprintf("%d epochs cannot fit in %d bytes", n, len(d.b)))
		return
	}
	pe, ps := int64(0), s.BaseOffset
	for j := uint64(0); j < n && d.err == nil; j++ {
		e := pe + d.varint("epoch")
		start := ps + d.int63("epoch start")
		if e < 0 || e > math.MaxInt32 || start < ps {
			d.fail("epoch out of range")
			return
		}
		s.Epochs = append(s.Epochs, EpochStart{Epoch: int32(e), StartOffset: start})
		pe, ps = e, start
	}
	sizes := []*int64{&s.TxnIndexSize, &s.SnapshotSize, &s.EpochsSize}
	crcs := []*uint32{&s.TxnIndexCRC, &s.SnapshotCRC, &s.EpochsCRC}
	for k := range sizes {
		*sizes[k] = d.int63("object size")
		if *sizes[k] > 0 {
			*crcs[k] = binary.BigEndian.Uint32(d.bytes(4, "object crc"))
		}
	}
}

// minWALExtentBytes is the smallest encoded WAL extent: the writer, five
// one-byte uvarints and the CRC.
const minWALExtentBytes = 8 + 5 + 4

// wal decodes the WAL record.
func (d *decoder) wal() *WAL {
	w := &WAL{}
	copy(w.Writer[:], d.bytes(8, "wal writer"))
	w.After = d.uvarint("wal after")
	n := d.uvarint("wal extent count")
	if n > uint64(len(d.b)/minWALExtentBytes) {
		d.fail(fmt.Sprintf("%d WAL extents cannot fit in %d bytes", n, len(d.b)))
		return w
	}
	for j := uint64(0); j < n && d.err == nil; j++ {
		var e WALExtent
		copy(e.Writer[:], d.bytes(8, "wal extent writer"))
		e.Sequence = d.uvarint("wal extent sequence")
		e.Position = d.int63("wal extent position")
		e.Size = d.int63("wal extent size")
		e.FirstOffset = d.int63("wal extent first offset")
		span := d.int63("wal extent span")
		if span > math.MaxInt64-e.FirstOffset {
			d.fail("wal extent span out of range")
		}
		e.LastOffset = e.FirstOffset + span
		e.CRC = binary.BigEndian.Uint32(d.bytes(4, "wal extent crc"))
		w.Extents = append(w.Extents, e)
	}
	return w
}

// header decodes the fields before the segment count.
func (d *decoder) header(version uint16) (*Manifest, error) {
	m := &Manifest{}
	m.Generation = d.uvarint("generation")
	we := d.varint("writer epoch")
	if we < math.MinInt32 || we > math.MaxInt32 {
		d.fail("writer epoch out of range")
	}
	m.WriterEpoch = int32(we)
	m.LogStartOffset = d.varint("log start offset")
	if version >= 2 {
		flags := d.uvarint("flags")
		if flags&^knownFlags != 0 {
			return nil, fmt.Errorf("%w: manifest flags 0x%x (this build knows 0x%x)", ErrUnsupportedVersion, flags, knownFlags)
		}
		m.Deleted = flags&flagDeleted != 0
		if flags&flagBorn != 0 {
			m.Born = d.uvarint("born")
		}
		if flags&flagWAL != 0 {
			m.WAL = d.wal()
		}
		if flags&flagCleaned != 0 {
			if m.CleanedTo = d.int63("cleaned to"); m.CleanedTo == 0 {
				d.fail("cleaned to 0 with its flag set")
			}
		}
		if flags&flagLineage != 0 {
			if copy(m.Lineage[:], d.bytes(8, "lineage")); m.Lineage == ([8]byte{}) {
				d.fail("a zero lineage with its flag set")
			}
		}
	}
	return m, nil
}

// Decode parses and validates a manifest that names no parts (every
// version 1 and 2 manifest, and a version 3 one whose segments all fit its
// head). A head that names parts is refused with ErrLayered: read it with
// DecodeLayered, which loads them, or DecodeHead.
func Decode(data []byte) (*Manifest, error) {
	h, err := DecodeHead(data)
	if err != nil {
		return nil, err
	}
	if len(h.Parts) > 0 {
		return nil, fmt.Errorf("%w: the head names %d parts", ErrLayered, len(h.Parts))
	}
	return h.Whole(nil)
}

// DecodeHead parses and checks a manifest's head alone: its header, the
// parts it names and its own segments, loading nothing.
func DecodeHead(data []byte) (*Head, error) {
	if len(data) < len(magic)+2+4 {
		return nil, fmt.Errorf("%w: %d bytes", ErrCorrupt, len(data))
	}
	if [4]byte(data[:4]) != magic {
		return nil, fmt.Errorf("%w: bad magic %q", ErrCorrupt, data[:4])
	}
	version := binary.BigEndian.Uint16(data[4:])
	if version < 1 || version > Version {
		return nil, fmt.Errorf("%w: version %d (this build reads 1 to %d)", ErrUnsupportedVersion, version, Version)
	}
	body, stored := data[:len(data)-4], binary.BigEndian.Uint32(data[len(data)-4:])
	if got := crc32.Checksum(body, castagnoli); got != stored {
		return nil, fmt.Errorf("%w: crc 0x%08x, computed 0x%08x", ErrCorrupt, stored, got)
	}
	d := &decoder{b: body[6:]}
	m, err := d.header(version)
	if err != nil {
		return nil, err
	}
	var parts []Part
	prevLast := int64(-1)
	if version >= 3 {
		parts = d.parts()
		if d.err != nil {
			return nil, d.err
		}
		if n := len(parts); n > 0 {
			prevLast = parts[n-1].LastOffset
		}
	}
	own := d.segments(version, prevLast)
	if d.err != nil {
		return nil, d.err
	}
	if len(d.b) != 0 {
		return nil, fmt.Errorf("%w: %d bytes after the last segment", ErrCorrupt, len(d.b))
	}
	h, err := newHead(m, parts, own)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	return h, nil
}

// segments decodes a count and the segments after it, the first one's
// base encoded from prevLast.
func (d *decoder) segments(version uint16, prevLast int64) []Segment {
	count := d.uvarint("segment count")
	if d.err != nil {
		return nil
	}
	if count > uint64(len(d.b)/minEntryBytes) {
		d.fail(fmt.Sprintf("%d segments cannot fit in %d bytes", count, len(d.b)))
		return nil
	}
	segs := make([]Segment, count)
	prevTs, prevEpoch, prevTime := int64(0), int64(0), int64(0)
	for i := range segs {
		s := &segs[i]
		flags := d.bytes(1, "flags")[0]
		delta := d.int63("base offset")
		if (delta != 0) != (flags&1 != 0) {
			d.fail(fmt.Sprintf("segment %d: a gap of %d offsets that its flags do not declare", i, delta))
		}
		if delta > math.MaxInt64-(prevLast+1) {
			d.fail(fmt.Sprintf("segment %d: base offset out of range", i))
		}
		s.BaseOffset = prevLast + 1 + delta
		span := d.int63("last offset")
		if span > math.MaxInt64-s.BaseOffset {
			d.fail(fmt.Sprintf("segment %d: offsets overflow", i))
		}
		s.LastOffset = s.BaseOffset + span
		s.MaxTimestamp = prevTs + d.varint("max timestamp")
		s.Size = d.int63("size")
		s.Records = d.int63("records")
		epoch := prevEpoch + d.varint("leader epoch")
		if epoch < math.MinInt32 || epoch > math.MaxInt32 {
			d.fail("leader epoch out of range")
		}
		s.LeaderEpoch = int32(epoch)
		s.UploadTimeMs = prevTime + d.varint("upload time")
		copy(s.ID[:], d.bytes(8, "id"))
		s.IndexSize = d.int63("index size")
		s.TimeIndexSize = d.int63("time index size")
		crcs := d.bytes(12, "object crcs")
		s.LogCRC, s.IndexCRC, s.TimeIndexCRC = binary.BigEndian.Uint32(crcs), binary.BigEndian.Uint32(crcs[4:]), binary.BigEndian.Uint32(crcs[8:])
		if version >= 2 {
			d.decodeV2(s)
		}
		if d.err != nil {
			d.err = fmt.Errorf("%w (segment %d)", d.err, i)
			return nil
		}
		prevLast, prevTs, prevEpoch, prevTime = s.LastOffset, s.MaxTimestamp, int64(s.LeaderEpoch), s.UploadTimeMs
	}
	return segs
}

// Find is step 1 of an offset lookup: the index of the segment holding
// offset (the last with base <= offset, if offset <= its last), or of the
// first segment after offset when offset falls in a gap. ok is false when
// offset is past the last segment or below the log start.
func (m *Manifest) Find(offset int64) (i int, ok bool) {
	if offset < m.LogStartOffset {
		return 0, false
	}
	segs := m.Segments
	i = sort.Search(len(segs), func(j int) bool { return segs[j].BaseOffset > offset }) - 1
	if i >= 0 && offset <= segs[i].LastOffset {
		return i, true
	}
	if i+1 < len(segs) {
		return i + 1, true // in a gap: the next segment holds the next records
	}
	return 0, false
}

// Holding returns the index of the segment whose offsets hold offset,
// whatever the log start (a segment the log start cut into still holds
// the offsets below it); ok is false when no segment does (offset in a
// gap, or outside every segment).
func (m *Manifest) Holding(offset int64) (i int, ok bool) {
	segs := m.Segments
	i = sort.Search(len(segs), func(j int) bool { return segs[j].BaseOffset > offset }) - 1
	if i >= 0 && offset <= segs[i].LastOffset {
		return i, true
	}
	return 0, false
}

// FindTimestamp returns the first segment whose MaxTimestamp is >= ts (the
// segment where a ListOffsets by time continues), by binary search over
// the running maximum. ok is false when no segment reaches ts.
func (m *Manifest) FindTimestamp(ts int64) (i int, ok bool) {
	if len(m.prefixMaxTs) != len(m.Segments) {
		m.Validate() // build the running maximum for a hand-made manifest
	}
	i = sort.Search(len(m.prefixMaxTs), func(j int) bool { return m.prefixMaxTs[j] >= ts })
	return i, i < len(m.Segments)
}

// Append adds s after the last segment, keeping the rules.
func (m *Manifest) Append(s Segment) error {
	if n := len(m.Segments); n > 0 && s.BaseOffset <= m.Segments[n-1].LastOffset {
		return fmt.Errorf("%w: segment %d..%d after one ending at %d", ErrInvalid, s.BaseOffset, s.LastOffset, m.Segments[n-1].LastOffset)
	}
	m.Segments = append(m.Segments, s)
	if err := m.Validate(); err != nil {
		m.Segments = m.Segments[:len(m.Segments)-1]
		m.Validate()
		return err
	}
	return nil
}

// Objects returns how many objects m's segments have in the bucket (every
// one each records: Segment.Objects) and their bytes; the manifest itself
// is not counted.
func (m *Manifest) Objects() (count int, bytes int64) {
	for _, s := range m.Segments {
		for _, suf := range s.Objects() {
			size, _ := s.Object(suf)
			count++
			bytes += size
		}
	}
	return count, bytes
}

// Size returns the bytes of all segments' logs.
func (m *Manifest) Size() int64 {
	var n int64
	for _, s := range m.Segments {
		n += s.Size
	}
	return n
}
