package record

import (
	"encoding/binary"
	"hash/crc32"
)

// Format constants (frozen: Kafka's record batch v2 and legacy layouts).
const (
	LogOverhead       = 12 // baseOffset int64 + length int32
	HeaderSizeToMagic = 17 // LogOverhead + partitionLeaderEpoch + magic
	BatchHeaderSize   = 61 // RECORD_BATCH_OVERHEAD
	MinLegacySize     = 14 // RECORD_OVERHEAD_V0: the smallest legal size field

	offBaseOffset      = 0
	offLength          = 8
	offLeaderEpoch     = 12
	offMagic           = 16
	offCRC             = 17
	offAttributes      = 21
	offLastOffsetDelta = 23
	offBaseTimestamp   = 27
	offMaxTimestamp    = 35
	offProducerID      = 43
	offProducerEpoch   = 51
	offBaseSequence    = 53
	offRecordsCount    = 57

	// NoTimestamp, NoProducerID, NoProducerEpoch, NoSequence and
	// NoPartitionLeaderEpoch are Kafka's "absent" values.
	NoTimestamp            int64 = -1
	NoProducerID           int64 = -1
	NoProducerEpoch        int16 = -1
	NoSequence             int32 = -1
	NoPartitionLeaderEpoch int32 = -1
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// CRC32C returns the CRC-32C (Castagnoli) of b, the checksum of batch v2.
func CRC32C(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }

// Attributes is the attributes field of a v2 batch.
type Attributes int16

// Attribute bits.
const (
	AttrCodecMask     Attributes = 0x07
	AttrLogAppendTime Attributes = 0x08
	AttrTransactional Attributes = 0x10
	AttrControl       Attributes = 0x20
	AttrDeleteHorizon Attributes = 0x40
)

// Codec returns the compression codec bits.
func (a Attributes) Codec() Codec { return Codec(a & AttrCodecMask) }

// TimestampType returns CreateTime or LogAppendTime.
func (a Attributes) TimestampType() TimestampType {
	if a&AttrLogAppendTime != 0 {
		return LogAppendTime
	}
	return CreateTime
}

// TimestampType says who stamped a batch's timestamps.
type TimestampType int8

// Timestamp types, named as kafka-dump-log prints them.
const (
	CreateTime    TimestampType = 0
	LogAppendTime TimestampType = 1
)

func (t TimestampType) String() string {
	if t == LogAppendTime {
		return "LogAppendTime"
	}
	return "CreateTime"
}

// Batch is a view over exactly one v2 record batch's bytes. Accessors read
// fields in place and never copy; they assume len(b) >= BatchHeaderSize,
// which Parse and Validate guarantee.
type Batch []byte

// Parse returns the first batch in buf as a Batch view sized by its length
// field. It checks only what it needs to slice safely: enough bytes for the
// header, magic 2, and a length that fits in buf. Call Validate for the CRC.
func Parse(buf []byte) (Batch, error) {
	if len(buf) < HeaderSizeToMagic {
		return nil, batchErr(ErrTornTail, -1, "%d bytes, need at least %d", len(buf), HeaderSizeToMagic)
	}
	base := int64(binary.BigEndian.Uint64(buf[offBaseOffset:]))
	length := int32(binary.BigEndian.Uint32(buf[offLength:]))
	if magic := int8(buf[offMagic]); magic != 2 {
		return nil, batchErr(ErrBadMagic, base, "magic %d, want 2", magic)
	}
	if length < BatchHeaderSize-LogOverhead {
		return nil, batchErr(ErrBadSize, base, "length %d is below the minimum %d", length, BatchHeaderSize-LogOverhead)
	}
	size := int64(length) + LogOverhead
	if size > int64(len(buf)) {
		return nil, batchErr(ErrTornTail, base, "batch of %d bytes runs past the %d bytes given", size, len(buf))
	}
	return Batch(buf[:size]), nil
}

func (b Batch) BaseOffset() int64 { return int64(binary.BigEndian.Uint64(b[offBaseOffset:])) }
func (b Batch) Length() int32     { return int32(binary.BigEndian.Uint32(b[offLength:])) }
func (b Batch) PartitionLeaderEpoch() int32 {
	return int32(binary.BigEndian.Uint32(b[offLeaderEpoch:]))
}
func (b Batch) Magic() int8                  { return int8(b[offMagic]) }
func (b Batch) CRC() uint32                  { return binary.BigEndian.Uint32(b[offCRC:]) }
func (b Batch) Attributes() Attributes       { return Attributes(binary.BigEndian.Uint16(b[offAttributes:])) }
func (b Batch) LastOffsetDelta() int32       { return int32(binary.BigEndian.Uint32(b[offLastOffsetDelta:])) }
func (b Batch) LastOffset() int64            { return b.BaseOffset() + int64(b.LastOffsetDelta()) }
func (b Batch) NextOffset() int64            { return b.LastOffset() + 1 }
func (b Batch) BaseTimestamp() int64         { return int64(binary.BigEndian.Uint64(b[offBaseTimestamp:])) }
func (b Batch) MaxTimestamp() int64          { return int64(binary.BigEndian.Uint64(b[offMaxTimestamp:])) }
func (b Batch) ProducerID() int64            { return int64(binary.BigEndian.Uint64(b[offProducerID:])) }
func (b Batch) ProducerEpoch() int16         { return int16(binary.BigEndian.Uint16(b[offProducerEpoch:])) }
func (b Batch) BaseSequence() int32          { return int32(binary.BigEndian.Uint32(b[offBaseSequence:])) }
func (b Batch) NumRecords() int32            { return int32(binary.BigEndian.Uint32(b[offRecordsCount:])) }
func (b Batch) Codec() Codec                 { return b.Attributes().Codec() }
func (b Batch) TimestampType() TimestampType { return b.Attributes().TimestampType() }
func (b Batch) IsTransactional() bool        { return b.Attributes()&AttrTransactional != 0 }
func (b Batch) IsControl() bool              { return b.Attributes()&AttrControl != 0 }
func (b Batch) HasDeleteHorizon() bool       { return b.Attributes()&AttrDeleteHorizon != 0 }
func (b Batch) Size() int                    { return len(b) }

// LastSequence is baseSequence + lastOffsetDelta with Kafka's wraparound, or
// NoSequence when the batch has none.
func (b Batch) LastSequence() int32 {
	seq := b.BaseSequence()
	if seq == NoSequence {
		return NoSequence
	}
	return incrementSequence(seq, b.LastOffsetDelta())
}

// DeleteHorizon returns the delete horizon in ms and true when bit 6 is set;
// the field is stored in baseTimestamp.
func (b Batch) DeleteHorizon() (int64, bool) {
	if !b.HasDeleteHorizon() {
		return 0, false
	}
	return b.BaseTimestamp(), true
}

// ComputeCRC returns the CRC-32C over attributes..end.
func (b Batch) ComputeCRC() uint32 { return CRC32C(b[offAttributes:]) }

// Validate checks the batch as Kafka's ensureValid does, plus the header
// invariants a reader relies on: size and length agree, magic 2, a known
// codec, a sane record count and last offset delta, and the CRC-32C.
// It does not decompress or parse records (the CRC covers them).
func (b Batch) Validate() error {
	if len(b) < BatchHeaderSize {
		base := int64(-1)
		if len(b) >= 8 {
			base = int64(binary.BigEndian.Uint64(b))
		}
		return batchErr(ErrBadSize, base, "%d bytes is below the v2 minimum %d", len(b), BatchHeaderSize)
	}
	base := b.BaseOffset()
	if int64(b.Length())+LogOverhead != int64(len(b)) {
		return batchErr(ErrBadSize, base, "length field says %d bytes, view holds %d", int64(b.Length())+LogOverhead, len(b))
	}
	if m := b.Magic(); m != 2 {
		return batchErr(ErrBadMagic, base, "magic %d, want 2", m)
	}
	if stored, got := b.CRC(), b.ComputeCRC(); stored != got {
		return batchErr(ErrCRCMismatch, base, "stored 0x%08x, computed 0x%08x", stored, got)
	}
	if c := b.Codec(); c > ZSTD {
		return batchErr(ErrUnknownCodec, base, "codec id %d", int(c))
	}
	if n, d := b.NumRecords(), b.LastOffsetDelta(); n < 0 || d < 0 {
		return batchErr(ErrBadRecord, base, "records count %d, last offset delta %d", n, d)
	}
	if b.Codec() == None && int64(b.NumRecords())*minRecordSize > int64(len(b)-BatchHeaderSize) {
		return batchErr(ErrBadRecord, base, "%d records cannot fit in %d bytes", b.NumRecords(), len(b)-BatchHeaderSize)
	}
	return nil
}

// SetBaseOffset rewrites baseOffset in place. The field is outside the CRC,
// so the batch stays valid (Kafka's setLastOffset does the same).
func (b Batch) SetBaseOffset(off int64) { binary.BigEndian.PutUint64(b[offBaseOffset:], uint64(off)) }

// SetPartitionLeaderEpoch stamps the leader epoch in place (outside the CRC).
func (b Batch) SetPartitionLeaderEpoch(e int32) {
	binary.BigEndian.PutUint32(b[offLeaderEpoch:], uint32(e))
}

// SetLogAppendTime sets the LogAppendTime attribute and maxTimestamp to ts,
// then recomputes the CRC, as Kafka's broker does for topics with
// message.timestamp.type=LogAppendTime.
func (b Batch) SetLogAppendTime(ts int64) {
	attrs := b.Attributes() | AttrLogAppendTime
	binary.BigEndian.PutUint16(b[offAttributes:], uint16(attrs))
	binary.BigEndian.PutUint64(b[offMaxTimestamp:], uint64(ts))
	binary.BigEndian.PutUint32(b[offCRC:], b.ComputeCRC())
}

// SetMaxTimestamp sets maxTimestamp to ts and recomputes the CRC, unless
// the field already holds ts (then nothing is written): the leader's
// correction of a CreateTime batch whose maxTimestamp is not its records'
// largest (LeaderResult.MaxTimestamp), as Kafka's setMaxTimestamp does.
// The timestamp type is kept.
func (b Batch) SetMaxTimestamp(ts int64) {
	if b.MaxTimestamp() == ts {
		return
	}
	binary.BigEndian.PutUint64(b[offMaxTimestamp:], uint64(ts))
	binary.BigEndian.PutUint32(b[offCRC:], b.ComputeCRC())
}

func incrementSequence(seq, delta int32) int32 {
	if seq > (1<<31-1)-delta {
		return delta - ((1<<31 - 1) - seq) - 1
	}
	return seq + delta
}
