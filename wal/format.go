package wal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"slices"
	"strings"
)

// The object format (frozen; see the package doc for the diagram).
const (
	// Version is the object format version of an object with no marks:
	// what this package writes for one, and what every build reads.
	Version = 1
	// VersionMarks is the format of an object that carries marks (its
	// footer's extents are followed by them). Builds before it refuse
	// such an object with ErrCorrupt ("footer version 2"), naming it.
	VersionMarks = 2
	// trailerSize is the fixed tail of every object: the footer's length
	// (uint32) and the magic.
	trailerSize = 4 + len(magic)
	// footerFixed is the footer's bytes before its extents: version,
	// flags, writer id, sequence, created, extent count, fence epoch.
	footerFixed = 1 + 1 + IDLen + 8 + 8 + 4 + 4
	// MaxFooterSize caps the footer a reader will allocate for.
	MaxFooterSize = 16 << 20
	// MaxExtents caps the extents of one object.
	MaxExtents = 1 << 20
	// maxTopicLen is Kafka's topic name limit.
	maxTopicLen = 249
	// IDLen is the length of a writer id in bytes (16 hex digits in keys).
	IDLen = 8
)

var magic = [8]byte{'T', 'L', 'W', 'A', 'L', 0, 0, 1}

// Footer flags.
const (
	// flagFence marks a fence: an object with no data, put at a writer's
	// sequence number by someone else (or by the writer itself, to void a
	// sequence whose upload it could not confirm) so that the writer's
	// own put of that number fails.
	flagFence byte = 1 << 0
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Errors.
var (
	// ErrCorrupt: an object whose trailer, footer or extent does not
	// check (magic, lengths, CRC-32C, order).
	ErrCorrupt = errors.New("wal: corrupt object")
	// ErrFenced: the writer's partition was claimed by another writer (a
	// fence at one of its sequence numbers names it); nothing of its
	// appends from there on is acknowledged.
	ErrFenced = errors.New("wal: fenced by another writer")
	// ErrUploadFailed: an object could not be put, and its sequence number
	// was voided: none of its appends is durable. Retryable: the partition
	// truncates back to its durable end and a producer resends.
	ErrUploadFailed = errors.New("wal: upload failed")
	// ErrClosed: the writer was closed.
	ErrClosed = errors.New("wal: writer closed")
	// ErrHalted: the writer stopped for good because it could not learn
	// what the bucket holds at one of its sequence numbers (the object
	// there reads as neither its own nor a fence it can decode: another
	// broker's store seals objects this one cannot open, or the object is
	// damaged). That number may hold a fence, so nothing above it is
	// acknowledged, landed or not. A new writer takes over its
	// partitions (each claimed anew).
	ErrHalted = errors.New("wal: writer halted")
	// ErrPartitionFailed: an append to a partition whose earlier append
	// failed, before the partition was reset (Writer.Reset) to its
	// durable end. Retryable.
	ErrPartitionFailed = errors.New("wal: an earlier append of the partition failed")
)

// FencedError is why appends failed on a fence: the fence at Key claimed
// TopicPartition at FenceEpoch, and the appends were made while the
// writer led it at DataEpoch (Writer.Lead). It matches ErrFenced. A
// caller that leads the partition at a higher epoch now knows these
// appends were its older leadership's, discarded by its claim.
type FencedError struct {
	TopicPartition
	FenceEpoch, DataEpoch int32
	Key                   string
}

func (e *FencedError) Error() string {
	return fmt.Sprintf("%v: %s claimed at leader epoch %d (fence at %s; appends of leader epoch %d)", ErrFenced, e.TopicPartition, e.FenceEpoch, e.Key, e.DataEpoch)
}

func (e *FencedError) Unwrap() error { return ErrFenced }

// WriterID names a writer (one per open Backend): random, never reused.
type WriterID [IDLen]byte

// String is the id as 16 hex digits, as in keys.
func (id WriterID) String() string { return fmt.Sprintf("%016x", id[:]) }

// TopicPartition names a partition.
type TopicPartition struct {
	Topic     string
	Partition int32
}

func (tp TopicPartition) String() string { return fmt.Sprintf("%s-%d", tp.Topic, tp.Partition) }

func (tp TopicPartition) compare(o TopicPartition) int {
	if c := strings.Compare(tp.Topic, o.Topic); c != 0 {
		return c
	}
	return int(tp.Partition) - int(o.Partition)
}

// Extent is one partition's run of record batches in an object: the
// batches of its appends since the previous object, in offset order.
type Extent struct {
	TopicPartition
	// FirstOffset and LastOffset are the first batch's base offset and
	// the last batch's last offset.
	FirstOffset, LastOffset int64
	// Position and Size locate the batches in the object.
	Position int64
	Size     int32
	// CRC is the CRC-32C of the extent's bytes.
	CRC uint32
}

// Footer describes an object: who wrote it, at which sequence number,
// and where each partition's batches are; or, for a fence, whom it
// fences.
type Footer struct {
	Writer   WriterID
	Sequence uint64
	// CreatedMs is the writer's clock when the object was sealed.
	CreatedMs int64
	// Fence marks an object with no data that fences Writer at Sequence.
	// Extents of a fence name the partitions claimed (offsets 0, no
	// bytes); a fence with no extents voids the sequence number only.
	Fence bool
	// FenceEpoch is, for a fence, the leader epoch the claimer leads its
	// partitions at (0 for a void).
	FenceEpoch int32
	Extents    []Extent
	// Marks are the writer's acknowledged ends (format version 2; none in
	// a fence), sorted by partition, at most one each.
	Marks []Mark
}

// Mark is a writer's word that it acknowledged a partition's records up
// to End (exclusive) while it led the partition at Epoch, the epoch of
// the manifest commit that named it: every offset below End is final,
// in the log that the manifest naming the writer at Epoch and the
// writer's objects above that manifest's number make (an acknowledged
// record is never replaced). A read replica serves a diskless
// partition's tail up to the highest such mark; a claim does not need
// them.
type Mark struct {
	TopicPartition
	Epoch int32
	End   int64
}

// FindMark returns tp's mark in the footer.
func (f *Footer) FindMark(tp TopicPartition) (Mark, bool) {
	i, ok := slices.BinarySearchFunc(f.Marks, tp, func(m Mark, tp TopicPartition) int { return m.compare(tp) })
	if !ok {
		return Mark{}, false
	}
	return f.Marks[i], true
}

// Fences says whether the fence names tp.
func (f *Footer) Fences(tp TopicPartition) bool {
	_, ok := f.search(tp)
	return ok && f.Fence
}

// Find returns tp's extent in a data object.
func (f *Footer) Find(tp TopicPartition) (Extent, bool) {
	i, ok := f.search(tp)
	if !ok || f.Fence {
		return Extent{}, false
	}
	return f.Extents[i], true
}

// search finds tp among the extents (sorted by partition: validate).
func (f *Footer) search(tp TopicPartition) (int, bool) {
	return slices.BinarySearchFunc(f.Extents, tp, func(e Extent, tp TopicPartition) int { return e.compare(tp) })
}

// validate checks the footer against an object of dataSize data bytes.
func (f *Footer) validate(dataSize int64) error {
	if len(f.Extents) > MaxExtents {
		return fmt.Errorf("%w: %d extents, at most %d", ErrCorrupt, len(f.Extents), MaxExtents)
	}
	if f.Sequence == 0 || f.Sequence > MaxSequence {
		return fmt.Errorf("%w: sequence number %d", ErrCorrupt, f.Sequence)
	}
	pos := int64(0)
	for i, e := range f.Extents {
		if e.Topic == "" || len(e.Topic) > maxTopicLen || e.Partition < 0 {
			return fmt.Errorf("%w: extent %d names partition %q-%d", ErrCorrupt, i, e.Topic, e.Partition)
		}
		if i > 0 && f.Extents[i-1].compare(e.TopicPartition) >= 0 {
			return fmt.Errorf("%w: extent %d (%s) is not after extent %d (%s)", ErrCorrupt, i, e.TopicPartition, i-1, f.Extents[i-1].TopicPartition)
		}
		if f.Fence {
			if e.FirstOffset != 0 || e.LastOffset != 0 || e.Position != 0 || e.Size != 0 || e.CRC != 0 {
				return fmt.Errorf("%w: fence extent %d (%s) carries data", ErrCorrupt, i, e.TopicPartition)
			}
			continue
		}
		if e.FirstOffset < 0 || e.LastOffset < e.FirstOffset || e.Size <= 0 || e.Position != pos {
			return fmt.Errorf("%w: extent %d (%s) offsets %d..%d at %d size %d (expected position %d)",
				ErrCorrupt, i, e.TopicPartition, e.FirstOffset, e.LastOffset, e.Position, e.Size, pos)
		}
		pos += int64(e.Size)
	}
	if pos != dataSize {
		return fmt.Errorf("%w: extents cover %d bytes of %d", ErrCorrupt, pos, dataSize)
	}
	if len(f.Marks) > MaxExtents {
		return fmt.Errorf("%w: %d marks, at most %d", ErrCorrupt, len(f.Marks), MaxExtents)
	}
	if f.Fence && len(f.Marks) > 0 {
		return fmt.Errorf("%w: a fence carries %d marks", ErrCorrupt, len(f.Marks))
	}
	for i, m := range f.Marks {
		if m.Topic == "" || len(m.Topic) > maxTopicLen || m.Partition < 0 || m.Epoch < 0 || m.End < 0 {
			return fmt.Errorf("%w: mark %d names partition %q-%d at epoch %d, end %d", ErrCorrupt, i, m.Topic, m.Partition, m.Epoch, m.End)
		}
		if i > 0 && f.Marks[i-1].compare(m.TopicPartition) >= 0 {
			return fmt.Errorf("%w: mark %d (%s) is not after mark %d (%s)", ErrCorrupt, i, m.TopicPartition, i-1, f.Marks[i-1].TopicPartition)
		}
	}
	return nil
}

// MaxSequence is the largest sequence number (20 decimal digits in keys
// would allow more; 2^63-1 keeps them signed-safe).
const MaxSequence = math.MaxInt64

// AppendFooter appends the footer's encoding and the trailer to b: what
// follows the data of an object.
func (f *Footer) appendTo(b []byte) []byte {
	start := len(b)
	var flags byte
	if f.Fence {
		flags |= flagFence
	}
	version := byte(Version)
	if len(f.Marks) > 0 {
		version = VersionMarks
	}
	b = append(b, version, flags)
	b = append(b, f.Writer[:]...)
	b = binary.BigEndian.AppendUint64(b, f.Sequence)
	b = binary.BigEndian.AppendUint64(b, uint64(f.CreatedMs))
	b = binary.BigEndian.AppendUint32(b, uint32(f.FenceEpoch))
	b = binary.BigEndian.AppendUint32(b, uint32(len(f.Extents)))
	for _, e := range f.Extents {
		b = binary.BigEndian.AppendUint16(b, uint16(len(e.Topic)))
		b = append(b, e.Topic...)
		b = binary.BigEndian.AppendUint32(b, uint32(e.Partition))
		b = binary.BigEndian.AppendUint64(b, uint64(e.FirstOffset))
		b = binary.BigEndian.AppendUint64(b, uint64(e.LastOffset))
		b = binary.BigEndian.AppendUint64(b, uint64(e.Position))
		b = binary.BigEndian.AppendUint32(b, uint32(e.Size))
		b = binary.BigEndian.AppendUint32(b, e.CRC)
	}
	if len(f.Marks) > 0 {
		b = binary.BigEndian.AppendUint32(b, uint32(len(f.Marks)))
		for _, m := range f.Marks {
			b = binary.BigEndian.AppendUint16(b, uint16(len(m.Topic)))
			b = append(b, m.Topic...)
			b = binary.BigEndian.AppendUint32(b, uint32(m.Partition))
			b = binary.BigEndian.AppendUint32(b, uint32(m.Epoch))
			b = binary.BigEndian.AppendUint64(b, uint64(m.End))
		}
	}
	b = binary.BigEndian.AppendUint32(b, crc32.Checksum(b[start:], castagnoli))
	b = binary.BigEndian.AppendUint32(b, uint32(len(b)-start))
	return append(b, magic[:]...)
}

// EncodeFence returns the bytes of a fence object.
func EncodeFence(f Footer) ([]byte, error) {
	f.Fence, f.Marks = true, nil
	f.Extents = slices.Clone(f.Extents)
	for i := range f.Extents {
		f.Extents[i] = Extent{TopicPartition: f.Extents[i].TopicPartition}
	}
	slices.SortFunc(f.Extents, func(a, b Extent) int { return a.compare(b.TopicPartition) })
	f.Extents = slices.CompactFunc(f.Extents, func(a, b Extent) bool { return a.TopicPartition == b.TopicPartition })
	if err := f.validate(0); err != nil {
		return nil, err
	}
	return f.appendTo(nil), nil
}

// TrailerSize is the bytes at the end of every object that give its
// footer's length: read them (or more) first.
const TrailerSize = trailerSize

// FooterLen reads the trailer at the end of tail (the last bytes of an
// object of objSize bytes) and returns the length of the footer that
// precedes it, CRC included.
func FooterLen(tail []byte, objSize int64) (int, error) {
	if len(tail) < trailerSize || objSize < int64(trailerSize) {
		return 0, fmt.Errorf("%w: %d bytes, shorter than the %d-byte trailer", ErrCorrupt, objSize, trailerSize)
	}
	t := tail[len(tail)-trailerSize:]
	if [8]byte(t[4:]) != magic {
		return 0, fmt.Errorf("%w: bad magic % x (version %d expected)", ErrCorrupt, t[4:], Version)
	}
	n := int64(binary.BigEndian.Uint32(t))
	if n < int64(footerFixed+4) || n > MaxFooterSize || n > objSize-int64(trailerSize) {
		return 0, fmt.Errorf("%w: footer of %d bytes in an object of %d", ErrCorrupt, n, objSize)
	}
	return int(n), nil
}

// DecodeFooter decodes the footer from tail, the last bytes of an object
// of objSize bytes (at least the trailer and the footer it names; more
// of the object before them is ignored). It checks the footer's CRC-32C
// and that its extents tile the object's data.
func DecodeFooter(tail []byte, objSize int64) (Footer, error) {
	n, err := FooterLen(tail, objSize)
	if err != nil {
		return Footer{}, err
	}
	if len(tail) < n+trailerSize {
		return Footer{}, fmt.Errorf("%w: footer of %d bytes, %d given", ErrCorrupt, n, len(tail)-trailerSize)
	}
	fb := tail[len(tail)-trailerSize-n : len(tail)-trailerSize]
	body, stored := fb[:n-4], binary.BigEndian.Uint32(fb[n-4:])
	if got := crc32.Checksum(body, castagnoli); got != stored {
		return Footer{}, fmt.Errorf("%w: footer CRC-32C %08x, stored %08x", ErrCorrupt, got, stored)
	}
	if body[0] != Version && body[0] != VersionMarks {
		return Footer{}, fmt.Errorf("%w: footer version %d, this reader knows %d and %d", ErrCorrupt, body[0], Version, VersionMarks)
	}
	if body[1]&^flagFence != 0 {
		return Footer{}, fmt.Errorf("%w: unknown footer flags %#x", ErrCorrupt, body[1])
	}
	f := Footer{Fence: body[1]&flagFence != 0}
	p := body[2:]
	copy(f.Writer[:], p)
	p = p[IDLen:]
	f.Sequence = binary.BigEndian.Uint64(p)
	f.CreatedMs = int64(binary.BigEndian.Uint64(p[8:]))
	f.FenceEpoch = int32(binary.BigEndian.Uint32(p[16:]))
	count := binary.BigEndian.Uint32(p[20:])
	p = p[24:]
	// Each extent takes at least 2+1+36 bytes: cap the count by what the
	// footer holds before it sizes anything.
	const minExtent = 2 + 1 + 4 + 8 + 8 + 8 + 4 + 4
	if count > MaxExtents || int(count) > len(p)/minExtent {
		return Footer{}, fmt.Errorf("%w: %d extents in a footer of %d bytes", ErrCorrupt, count, n)
	}
	f.Extents = make([]Extent, count)
	for i := range f.Extents {
		if len(p) < 2 {
			return Footer{}, fmt.Errorf("%w: footer ends in extent %d", ErrCorrupt, i)
		}
		tl := int(binary.BigEndian.Uint16(p))
		if len(p) < 2+tl+36 {
			return Footer{}, fmt.Errorf("%w: footer ends in extent %d", ErrCorrupt, i)
		}
		e := &f.Extents[i]
		e.Topic = string(p[2 : 2+tl])
		p = p[2+tl:]
		e.Partition = int32(binary.BigEndian.Uint32(p))
		e.FirstOffset = int64(binary.BigEndian.Uint64(p[4:]))
		e.LastOffset = int64(binary.BigEndian.Uint64(p[12:]))
		e.Position = int64(binary.BigEndian.Uint64(p[20:]))
		e.Size = int32(binary.BigEndian.Uint32(p[28:]))
		e.CRC = binary.BigEndian.Uint32(p[32:])
		p = p[36:]
	}
	if body[0] == VersionMarks {
		var err error
		if f.Marks, p, err = decodeMarks(p); err != nil {
			return Footer{}, err
		}
	}
	if len(p) != 0 {
		return Footer{}, fmt.Errorf("%w: %d bytes after the footer's last extent", ErrCorrupt, len(p))
	}
	if err := f.validate(objSize - int64(n) - int64(trailerSize)); err != nil {
		return Footer{}, err
	}
	return f, nil
}

// decodeMarks decodes a version 2 footer's marks from p and returns the
// bytes after them. A version 2 footer carries at least one mark (the
// encoding of none is version 1's).
func decodeMarks(p []byte) ([]Mark, []byte, error) {
	if len(p) < 4 {
		return nil, nil, fmt.Errorf("%w: a version %d footer ends before its marks", ErrCorrupt, VersionMarks)
	}
	count := binary.BigEndian.Uint32(p)
	p = p[4:]
	const minMark = 2 + 1 + 4 + 4 + 8
	if count == 0 || count > MaxExtents || int(count) > len(p)/minMark {
		return nil, nil, fmt.Errorf("%w: %d marks in %d bytes", ErrCorrupt, count, len(p))
	}
	marks := make([]Mark, count)
	for i := range marks {
		if len(p) < 2 {
			return nil, nil, fmt.Errorf("%w: footer ends in mark %d", ErrCorrupt, i)
		}
		tl := int(binary.BigEndian.Uint16(p))
		if len(p) < 2+tl+16 {
			return nil, nil, fmt.Errorf("%w: footer ends in mark %d", ErrCorrupt, i)
		}
		m := &marks[i]
		m.Topic = string(p[2 : 2+tl])
		p = p[2+tl:]
		m.Partition = int32(binary.BigEndian.Uint32(p))
		m.Epoch = int32(binary.BigEndian.Uint32(p[4:]))
		m.End = int64(binary.BigEndian.Uint64(p[8:]))
		p = p[16:]
	}
	return marks, p, nil
}

// CheckExtent checks an extent's bytes against its CRC-32C.
func CheckExtent(e Extent, data []byte) error {
	if int64(len(data)) != int64(e.Size) {
		return fmt.Errorf("%w: extent of %s at %d: %d bytes, footer says %d", ErrCorrupt, e.TopicPartition, e.Position, len(data), e.Size)
	}
	if got := crc32.Checksum(data, castagnoli); got != e.CRC {
		return fmt.Errorf("%w: extent of %s at %d: CRC-32C %08x, footer says %08x", ErrCorrupt, e.TopicPartition, e.Position, got, e.CRC)
	}
	return nil
}
