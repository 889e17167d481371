package record

import (
	"encoding/binary"
	"math"
)

// BatchHeader holds the batch-level fields a Builder writes. Start from
// NewBatchHeader, which fills Kafka's "absent" values.
type BatchHeader struct {
	BaseOffset           int64
	PartitionLeaderEpoch int32
	Codec                Codec
	TimestampType        TimestampType
	Transactional        bool
	Control              bool
	ProducerID           int64
	ProducerEpoch        int16
	BaseSequence         int32
	// DeleteHorizon, when HasDeleteHorizon is set, is stored in
	// baseTimestamp with attribute bit 6 (the cleaner's tombstone horizon);
	// record timestamp deltas are then relative to it.
	DeleteHorizon    int64
	HasDeleteHorizon bool
}

// NewBatchHeader returns the header a non-idempotent producer writes:
// offset 0, no leader epoch, no producer id, epoch or sequence, CreateTime.
func NewBatchHeader() BatchHeader {
	return BatchHeader{
		PartitionLeaderEpoch: NoPartitionLeaderEpoch,
		ProducerID:           NoProducerID,
		ProducerEpoch:        NoProducerEpoch,
		BaseSequence:         NoSequence,
	}
}

// Builder writes v2 record batches byte-identical to Kafka's Java client for
// the same records and fields. Reuse one Builder: after the first batches it
// writes without allocating. It is not safe for concurrent use.
//
//	b.Reset(record.NewBatchHeader())
//	b.Append(ts, key, value, nil)
//	batch, err := b.Build()
type Builder struct {
	h         BatchHeader
	buf       []byte // header space + uncompressed records
	zbuf      []byte // header space + compressed records
	n         int32
	lastDelta int32
	override  int32 // lastOffsetDelta to write, or -1
	baseTs    int64
	maxTs     int64
	z         compressor
}

// Reset starts a new batch with header h, keeping the buffers.
func (b *Builder) Reset(h BatchHeader) {
	b.h = h
	if cap(b.buf) < BatchHeaderSize {
		b.buf = make([]byte, BatchHeaderSize, 16<<10)
	}
	b.buf = b.buf[:BatchHeaderSize]
	b.n = 0
	b.lastDelta = -1
	b.override = -1
	b.baseTs = NoTimestamp
	b.maxTs = NoTimestamp
	if h.HasDeleteHorizon {
		b.baseTs = h.DeleteHorizon
	}
}

// NumRecords returns how many records have been appended since Reset.
func (b *Builder) NumRecords() int { return int(b.n) }

// Size returns the uncompressed batch size so far.
func (b *Builder) Size() int { return len(b.buf) }

// SizeWith returns the uncompressed batch size if a record with these fields
// were appended next: the measure Kafka's producer uses to close a batch
// (batch.size) when the next record would not fit.
func (b *Builder) SizeWith(ts int64, key, value []byte, headers []Header) int {
	base := b.baseTs
	if b.n == 0 && !b.h.HasDeleteHorizon {
		base = ts
	}
	body := recordBodySize(ts-base, int64(b.lastDelta+1), key, value, headers)
	return len(b.buf) + varintSize(int64(body)) + body
}

// Append adds a record at the next offset delta (one past the last).
func (b *Builder) Append(ts int64, key, value []byte, headers []Header) {
	b.appendAt(b.lastDelta+1, ts, key, value, headers)
}

// AppendAt adds a record with an explicit offset delta, which must be
// greater than the last one (a cleaner rewrite keeps the original offsets
// and leaves gaps).
func (b *Builder) AppendAt(offsetDelta int32, ts int64, key, value []byte, headers []Header) error {
	if offsetDelta <= b.lastDelta {
		return batchErr(ErrInvalid, b.h.BaseOffset, "offset delta %d after %d", offsetDelta, b.lastDelta)
	}
	b.appendAt(offsetDelta, ts, key, value, headers)
	return nil
}

func (b *Builder) appendAt(delta int32, ts int64, key, value []byte, headers []Header) {
	if b.n == 0 && !b.h.HasDeleteHorizon {
		b.baseTs = ts
	}
	if b.n == 0 || ts > b.maxTs {
		b.maxTs = ts
	}
	body := recordBodySize(ts-b.baseTs, int64(delta), key, value, headers)
	p := b.buf
	p = appendVarint(p, int64(body))
	p = append(p, 0) // record attributes, unused
	p = appendVarint(p, ts-b.baseTs)
	p = appendVarint(p, int64(delta))
	p = appendVarBytes(p, key)
	p = appendVarBytes(p, value)
	p = appendVarint(p, int64(len(headers)))
	for _, h := range headers {
		p = appendVarBytes(p, h.Key)
		p = appendVarBytes(p, h.Value)
	}
	b.buf = p
	b.n++
	b.lastDelta = delta
}

// SetLastOffsetDelta makes the batch claim lastOffsetDelta d even when its
// last record has a smaller delta: the cleaner keeps a batch's original
// last offset after dropping records, as Kafka does.
func (b *Builder) SetLastOffsetDelta(d int32) { b.override = d }

// Build finishes the batch and returns its bytes, which stay valid until the
// next Reset or Build. An empty batch is an ErrInvalid error.
func (b *Builder) Build() (Batch, error) {
	if b.n == 0 {
		return nil, batchErr(ErrInvalid, b.h.BaseOffset, "a batch needs at least one record")
	}
	out := b.buf
	if b.h.Codec != None {
		if cap(b.zbuf) < BatchHeaderSize {
			b.zbuf = make([]byte, BatchHeaderSize, len(b.buf))
		}
		z, err := b.z.compress(b.zbuf[:BatchHeaderSize], b.h.Codec, b.buf[BatchHeaderSize:])
		if err != nil {
			return nil, batchErr(ErrInvalid, b.h.BaseOffset, "%s compression: %v", b.h.Codec, err)
		}
		b.zbuf = z
		out = z
	}
	if int64(len(out))-LogOverhead > math.MaxInt32 {
		return nil, batchErr(ErrInvalid, b.h.BaseOffset, "batch of %d bytes", len(out))
	}
	attrs := Attributes(b.h.Codec) & AttrCodecMask
	if b.h.TimestampType == LogAppendTime {
		attrs |= AttrLogAppendTime
	}
	if b.h.Transactional {
		attrs |= AttrTransactional
	}
	if b.h.Control {
		attrs |= AttrControl
	}
	if b.h.HasDeleteHorizon {
		attrs |= AttrDeleteHorizon
	}
	last := b.lastDelta
	if b.override > last {
		last = b.override
	}
	be := binary.BigEndian
	be.PutUint64(out[offBaseOffset:], uint64(b.h.BaseOffset))
	be.PutUint32(out[offLength:], uint32(len(out)-LogOverhead))
	be.PutUint32(out[offLeaderEpoch:], uint32(b.h.PartitionLeaderEpoch))
	out[offMagic] = 2
	be.PutUint16(out[offAttributes:], uint16(attrs))
	be.PutUint32(out[offLastOffsetDelta:], uint32(last))
	be.PutUint64(out[offBaseTimestamp:], uint64(b.baseTs))
	be.PutUint64(out[offMaxTimestamp:], uint64(b.maxTs))
	be.PutUint64(out[offProducerID:], uint64(b.h.ProducerID))
	be.PutUint16(out[offProducerEpoch:], uint16(b.h.ProducerEpoch))
	be.PutUint32(out[offBaseSequence:], uint32(b.h.BaseSequence))
	be.PutUint32(out[offRecordsCount:], uint32(b.n))
	be.PutUint32(out[offCRC:], CRC32C(out[offAttributes:]))
	return Batch(out), nil
}

// BuildEmpty writes a batch of zero records that keeps the header's
// offsets, producer fields and flags and claims lastOffsetDelta d: the
// cleaner's placeholder for a batch whose records were all removed but whose
// offsets must stay (Kafka's writeEmptyHeader: no compression, baseTimestamp
// -1, maxTimestamp maxTs). Appended records are ignored.
func (b *Builder) BuildEmpty(d int32, maxTs int64) Batch {
	out := b.buf[:BatchHeaderSize]
	attrs := Attributes(0)
	if b.h.TimestampType == LogAppendTime {
		attrs |= AttrLogAppendTime
	}
	if b.h.Transactional {
		attrs |= AttrTransactional
	}
	if b.h.Control {
		attrs |= AttrControl
	}
	be := binary.BigEndian
	be.PutUint64(out[offBaseOffset:], uint64(b.h.BaseOffset))
	be.PutUint32(out[offLength:], uint32(len(out)-LogOverhead))
	be.PutUint32(out[offLeaderEpoch:], uint32(b.h.PartitionLeaderEpoch))
	out[offMagic] = 2
	be.PutUint16(out[offAttributes:], uint16(attrs))
	be.PutUint32(out[offLastOffsetDelta:], uint32(d))
	be.PutUint64(out[offBaseTimestamp:], math.MaxUint64) // NoTimestamp, -1
	be.PutUint64(out[offMaxTimestamp:], uint64(maxTs))
	be.PutUint64(out[offProducerID:], uint64(b.h.ProducerID))
	be.PutUint16(out[offProducerEpoch:], uint16(b.h.ProducerEpoch))
	be.PutUint32(out[offBaseSequence:], uint32(b.h.BaseSequence))
	be.PutUint32(out[offRecordsCount:], 0)
	be.PutUint32(out[offCRC:], CRC32C(out[offAttributes:]))
	return Batch(out)
}

func recordBodySize(tsDelta, offDelta int64, key, value []byte, headers []Header) int {
	n := 1 + varintSize(tsDelta) + varintSize(offDelta) + varBytesSize(key) + varBytesSize(value) +
		varintSize(int64(len(headers)))
	for _, h := range headers {
		n += varBytesSize(h.Key) + varBytesSize(h.Value)
	}
	return n
}

func varBytesSize(b []byte) int {
	if b == nil {
		return 1
	}
	return varintSize(int64(len(b))) + len(b)
}

func appendVarBytes(p, b []byte) []byte {
	if b == nil {
		return appendVarint(p, -1)
	}
	p = appendVarint(p, int64(len(b)))
	return append(p, b...)
}
