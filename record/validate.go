package record

import (
	"encoding/binary"
	"fmt"
	"math"
	"strings"
)

// Leader validation: what Kafka's LogValidator (with UnifiedLog's
// analyzeAndValidateRecords and ProduceRequest.validateRecords before it)
// checks of a batch a client produces, before the leader writes it. The
// rules, the order they run in and the Kafka error code each maps to are
// in the package doc ("Leader appends").

// LeaderResult is what ValidateForLeader found in a batch it accepted.
type LeaderResult struct {
	// Batch is the batch to write: the one given, or, when Rewritten, the
	// same records recompressed with the topic's codec in the
	// Validator's buffer (valid until its next call).
	Batch     Batch
	Rewritten bool
	// Records is the number of records (the batch's count, checked).
	Records int32
	// MaxTimestamp is the largest record timestamp (every record's is
	// maxTimestamp in a batch flagged LogAppendTime), or NoTimestamp.
	// On a CreateTime topic it is what the batch's maxTimestamp field
	// must hold; Batch.SetMaxTimestamp corrects a producer's wrong one.
	MaxTimestamp int64
	// UncompressedBytes is the size of the records area once
	// decompressed.
	UncompressedBytes int
}

// RecordError is one record Kafka refuses without the batch being
// malformed: a missing key on a compacted topic or a timestamp out of
// range. Kafka returns them in the produce response (record_errors:
// batch_index and a message).
type RecordError struct {
	Index     int32 // the record's position in the batch (batch_index)
	Kind      error // ErrMissingKey or ErrInvalidTimestamp
	Timestamp int64 // the record's timestamp
	Detail    string
}

func (r RecordError) Error() string {
	return fmt.Sprintf("record %d: %s: %s", r.Index, r.Kind.Error(), r.Detail)
}

// ValidationError is why ValidateForLeader refused a batch. Kind is the
// specific sentinel; the error also matches exactly one class, which is
// the Kafka error code to answer with:
//
//	class                Kafka error code        Kinds
//	ErrCorrupt           CORRUPT_MESSAGE (2)     ErrBadSize, ErrBadMagic, ErrCRCMismatch
//	ErrMessageTooLarge   MESSAGE_TOO_LARGE (10)  ErrMessageTooLarge, ErrTooLarge
//	ErrInvalidTimestamp  INVALID_TIMESTAMP (32)  ErrInvalidTimestamp
//	ErrInvalidRecord     INVALID_RECORD (87)     ErrLegacyMagic, ErrUnknownCodec,
//	                                             ErrBadOffsets, ErrControlBatch,
//	                                             ErrNoSequence, ErrBadRecord,
//	                                             ErrMissingKey
//
// Note that here ErrBadRecord is of class ErrInvalidRecord, not
// ErrCorrupt as in a *BatchError: a record that does not parse under a
// valid CRC is what Kafka's InvalidRecordException reports.
type ValidationError struct {
	Kind       error
	BaseOffset int64 // the batch's base offset as stored; -1 when unreadable
	// Index is the record that failed (batch_index) for a record that does
	// not parse or breaks the offsets, -1 for batch-level failures.
	Index  int32
	Detail string
	// Records are the records refused one by one (at most 1000 of them;
	// RecordErrors counts them all), when Kind is ErrMissingKey or
	// ErrInvalidTimestamp. As in Kafka, the batch fails with
	// ErrInvalidTimestamp when any record's timestamp was refused.
	Records      []RecordError
	RecordErrors int
}

func (e *ValidationError) Error() string {
	var b strings.Builder
	b.WriteString(e.Kind.Error())
	if e.BaseOffset >= 0 {
		fmt.Fprintf(&b, " (batch base offset %d)", e.BaseOffset)
	}
	if e.Index >= 0 {
		fmt.Fprintf(&b, " at record %d", e.Index)
	}
	if e.Detail != "" {
		b.WriteString(": ")
		b.WriteString(e.Detail)
	}
	if e.RecordErrors > 0 {
		fmt.Fprintf(&b, ": %d record(s) refused", e.RecordErrors)
		for i, r := range e.Records {
			if i == 3 {
				b.WriteString(", …")
				break
			}
			b.WriteString("; ")
			b.WriteString(r.Error())
		}
	}
	return b.String()
}

// Unwrap returns the kind and its class.
func (e *ValidationError) Unwrap() []error {
	if c := validationClass(e.Kind); c != e.Kind {
		return []error{e.Kind, c}
	}
	return []error{e.Kind}
}

// validationClass maps a kind to the class (the Kafka error code) it is
// answered with.
func validationClass(kind error) error {
	switch kind {
	case ErrBadSize, ErrBadMagic, ErrCRCMismatch:
		return ErrCorrupt
	case ErrMessageTooLarge, ErrTooLarge:
		return ErrMessageTooLarge
	case ErrInvalidTimestamp:
		return ErrInvalidTimestamp
	}
	return ErrInvalidRecord
}

func invalid(kind error, base int64, index int32, format string, args ...any) *ValidationError {
	return &ValidationError{Kind: kind, BaseOffset: base, Index: index, Detail: fmt.Sprintf(format, args...)}
}

// Validator validates leader appends with reusable buffers: one per log,
// used under the log's writer lock. It is not safe for concurrent use. The
// zero value is ready.
type Validator struct {
	dec Decompressor
	z   compressor
	out []byte // the rewritten batch
}

// ValidateForLeader validates b with a Validator of its own (see
// Validator.ValidateForLeader); a log validating many batches should keep
// one Validator instead.
func ValidateForLeader(b Batch, now int64, opts LeaderOptions) (LeaderResult, error) {
	var v Validator
	return v.ValidateForLeader(b, now, opts)
}

// ValidateForLeader checks one batch a client produced, before the leader
// assigns its offsets, as Kafka's leader does (the rules are in the
// package doc), with now the broker's time in ms. It decodes every record,
// decompressing into the Validator's buffer, and never modifies b.
//
// On success the result's Batch is what to write: b itself, or b's
// records recompressed with the topic's codec when compression.type names
// a codec other than b's. A batch that needs no rewrite is validated
// without allocating: uncompressed always, compressed once the
// Validator's buffer and decoders exist.
//
// A batch Kafka refuses is a *ValidationError matching its Kind and one
// class (ErrCorrupt, ErrMessageTooLarge, ErrInvalidTimestamp or
// ErrInvalidRecord); options that fail LeaderOptions.Validate are an
// ErrInvalid error.
func (v *Validator) ValidateForLeader(b Batch, now int64, opts LeaderOptions) (LeaderResult, error) {
	if err := opts.Validate(); err != nil {
		return LeaderResult{}, err
	}
	if err := checkLeaderHeader(b, opts); err != nil {
		return LeaderResult{}, err
	}
	base := b.BaseOffset()
	codec := b.Codec()
	payload := []byte(b[BatchHeaderSize:])
	if codec != None {
		v.dec.Max = opts.MaxDecompressedBytes
		p, err := v.dec.Decompress(codec, payload)
		if err != nil {
			kind, detail := ErrBadRecord, err.Error()
			if be, ok := err.(*BatchError); ok {
				kind, detail = be.Kind, be.Detail
			}
			return LeaderResult{}, invalid(kind, base, -1, "%s", detail)
		}
		payload = p
	}
	res := LeaderResult{Batch: b, Records: b.NumRecords(), UncompressedBytes: len(payload)}
	var err error
	if res.MaxTimestamp, err = scanRecords(b, payload, now, &opts); err != nil {
		return LeaderResult{}, err
	}
	if target := opts.Compression.Target(codec); target != codec {
		out, err := v.recompress(b, payload, target, res.MaxTimestamp)
		if err != nil {
			return LeaderResult{}, err
		}
		if opts.MaxMessageBytes > 0 && int64(len(out)) > opts.MaxMessageBytes {
			return LeaderResult{}, invalid(ErrMessageTooLarge, base, -1,
				"recompressed with %s the batch is %d bytes; max.message.bytes is %d", target, len(out), opts.MaxMessageBytes)
		}
		res.Batch, res.Rewritten = out, true
	}
	return res, nil
}

// checkLeaderHeader runs the batch-level checks, in Kafka's order: the
// framing a request parser checks, magic 2 (produce v3+), base offset 0,
// max.message.bytes, the CRC, then LogValidator.validateBatch's rules.
func checkLeaderHeader(b Batch, opts LeaderOptions) error {
	if len(b) < HeaderSizeToMagic {
		return invalid(ErrBadSize, -1, -1, "%d bytes, fewer than the %d of a batch header up to its magic", len(b), HeaderSizeToMagic)
	}
	base := b.BaseOffset()
	if size := int64(b.Length()) + LogOverhead; size != int64(len(b)) {
		return invalid(ErrBadSize, base, -1, "length field says %d bytes, the batch given holds %d", size, len(b))
	}
	if b.Length() < MinLegacySize {
		return invalid(ErrBadSize, base, -1, "length %d is below the minimum %d", b.Length(), MinLegacySize)
	}
	switch m := b.Magic(); {
	case m < 0 || m > 2:
		return invalid(ErrBadMagic, base, -1, "magic %d", m)
	case m < 2:
		return invalid(ErrLegacyMagic, base, -1, "magic %d: a leader appends record batches v2 only", m)
	}
	if base != 0 {
		return invalid(ErrBadOffsets, base, -1, "a produced batch's base offset must be 0")
	}
	if opts.MaxMessageBytes > 0 && int64(len(b)) > opts.MaxMessageBytes {
		return invalid(ErrMessageTooLarge, base, -1, "batch of %d bytes; max.message.bytes is %d", len(b), opts.MaxMessageBytes)
	}
	if len(b) < BatchHeaderSize {
		return invalid(ErrBadSize, base, -1, "%d bytes is below the v2 minimum %d", len(b), BatchHeaderSize)
	}
	if stored, got := b.CRC(), b.ComputeCRC(); stored != got {
		return invalid(ErrCRCMismatch, base, -1, "stored 0x%08x, computed 0x%08x", stored, got)
	}
	if c := b.Codec(); c > ZSTD {
		return invalid(ErrUnknownCodec, base, -1, "codec id %d", int(c))
	}
	n, last := b.NumRecords(), b.LastOffsetDelta()
	switch {
	case int64(last)+1 <= 0:
		return invalid(ErrBadOffsets, base, -1, "last offset delta %d", last)
	case n <= 0:
		return invalid(ErrBadOffsets, base, -1, "record count %d", n)
	case int64(last)+1 != int64(n):
		return invalid(ErrBadOffsets, base, -1, "last offset delta %d does not match the record count %d", last, n)
	}
	if b.IsControl() {
		return invalid(ErrControlBatch, base, -1, "clients may not write control batches")
	}
	if b.ProducerID() >= 0 && b.BaseSequence() < 0 {
		return invalid(ErrNoSequence, base, -1, "producer id %d with base sequence %d", b.ProducerID(), b.BaseSequence())
	}
	return nil
}

// recompress writes b's header and its records area p (decompressed)
// compressed with c into v.out, with the codec bits, length, maxTimestamp
// (the records' largest, unless the batch is LogAppendTime) and CRC
// updated. Offsets, timestamps, producer fields and the other attributes
// are kept.
func (v *Validator) recompress(b Batch, p []byte, c Codec, maxTs int64) (Batch, error) {
	out := append(v.out[:0], b[:BatchHeaderSize]...)
	out, err := v.z.compress(out, c, p)
	if err != nil {
		return nil, invalid(ErrBadRecord, b.BaseOffset(), -1, "recompressing with %s: %v", c, err)
	}
	v.out = out
	if int64(len(out))-LogOverhead > math.MaxInt32 {
		return nil, invalid(ErrMessageTooLarge, b.BaseOffset(), -1, "recompressed with %s the batch is %d bytes", c, len(out))
	}
	attrs := b.Attributes()&^AttrCodecMask | Attributes(c)&AttrCodecMask
	be := binary.BigEndian
	be.PutUint32(out[offLength:], uint32(len(out)-LogOverhead))
	be.PutUint16(out[offAttributes:], uint16(attrs))
	if b.TimestampType() == CreateTime {
		be.PutUint64(out[offMaxTimestamp:], uint64(maxTs))
	}
	be.PutUint32(out[offCRC:], CRC32C(out[offAttributes:]))
	return Batch(out), nil
}
