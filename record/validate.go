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

// Kafka's defaults for the topic settings LeaderOptions carries.
const (
	// DefaultTimestampBeforeMaxMs is message.timestamp.before.max.ms's
	// default: no limit on how old a CreateTime timestamp may be
	// (Long.MAX_VALUE since KIP-937, Kafka 3.6).
	DefaultTimestampBeforeMaxMs int64 = math.MaxInt64
	// DefaultTimestampAfterMaxMs is message.timestamp.after.max.ms's
	// default since Kafka 4.0 (KIP-1030, KAFKA-16368): one hour. Kafka 3.6
	// to 3.9 defaulted to Long.MAX_VALUE.
	DefaultTimestampAfterMaxMs int64 = 3600000
	// DefaultMaxMessageBytes is max.message.bytes's default (1 MiB plus
	// the 12-byte log overhead).
	DefaultMaxMessageBytes int64 = 1048588
)

// maxRecordErrors caps the RecordError list of a ValidationError (the
// total is still counted): a batch of millions of keyless records must not
// cost a record error each.
const maxRecordErrors = 1000

// TopicCompression is a topic's compression.type. The zero value is
// "producer": batches keep the codec their producer chose. Any other value
// names the codec the topic stores; a batch with another codec is
// recompressed, as Kafka's leader does.
type TopicCompression struct {
	codec Codec
	fixed bool
}

// CompressionProducer is compression.type=producer, the zero value.
var CompressionProducer = TopicCompression{}

// CompressWith returns the compression.type that stores every batch with c.
func CompressWith(c Codec) TopicCompression { return TopicCompression{codec: c, fixed: true} }

// ParseTopicCompression maps a compression.type value (producer,
// uncompressed, gzip, snappy, lz4, zstd) to a TopicCompression.
func ParseTopicCompression(name string) (TopicCompression, error) {
	switch name {
	case "producer":
		return CompressionProducer, nil
	case "uncompressed":
		return CompressWith(None), nil
	case "none":
		// ParseCodec's name for it; Kafka's compression.type says
		// "uncompressed".
	default:
		if c, err := ParseCodec(name); err == nil {
			return CompressWith(c), nil
		}
	}
	return TopicCompression{}, fmt.Errorf("%w: compression.type %q (want producer, uncompressed, gzip, snappy, lz4 or zstd)", ErrInvalid, name)
}

// Target returns the codec a batch compressed with c is stored with.
func (t TopicCompression) Target(c Codec) Codec {
	if t.fixed {
		return t.codec
	}
	return c
}

// String returns the compression.type value.
func (t TopicCompression) String() string {
	switch {
	case !t.fixed:
		return "producer"
	case t.codec == None:
		return "uncompressed"
	}
	return t.codec.String()
}

// LeaderOptions are the topic settings a leader append is validated
// against. Start from DefaultLeaderOptions: the zero value's timestamp
// limits are 0 ms, which accepts only timestamps equal to now.
type LeaderOptions struct {
	// Compacted says cleanup.policy includes compact: every record needs
	// a key.
	Compacted bool
	// TimestampType is message.timestamp.type. CreateTime checks each
	// record's timestamp against the two limits below; LogAppendTime does
	// not (the log stamps its own time), and refuses batches whose
	// producer set LogAppendTime.
	TimestampType TimestampType
	// TimestampBeforeMaxMs (message.timestamp.before.max.ms) is how far
	// before now a CreateTime timestamp may be; TimestampAfterMaxMs
	// (message.timestamp.after.max.ms) how far after. Both >= 0.
	TimestampBeforeMaxMs int64
	TimestampAfterMaxMs  int64
	// Compression is compression.type.
	Compression TopicCompression
	// MaxMessageBytes is max.message.bytes: the largest batch accepted,
	// checked on the batch as produced and again on a recompressed one.
	// 0 means no limit.
	MaxMessageBytes int64
	// MaxDecompressedBytes caps the records of one compressed batch once
	// decompressed (a batch past it is refused as too large); 0 means
	// DefaultMaxDecompressed. Kafka has no such cap: it streams.
	MaxDecompressedBytes int
}

// DefaultLeaderOptions returns Kafka 4.0's topic defaults: delete policy,
// CreateTime, no limit before now, one hour after now, compression.type
// producer, max.message.bytes 1048588.
func DefaultLeaderOptions() LeaderOptions {
	return LeaderOptions{
		TimestampType:        CreateTime,
		TimestampBeforeMaxMs: DefaultTimestampBeforeMaxMs,
		TimestampAfterMaxMs:  DefaultTimestampAfterMaxMs,
		MaxMessageBytes:      DefaultMaxMessageBytes,
	}
}

// Validate reports options Kafka would not accept, as an ErrInvalid error.
func (o LeaderOptions) Validate() error {
	switch {
	case o.TimestampType != CreateTime && o.TimestampType != LogAppendTime:
		return fmt.Errorf("%w: timestamp type %d", ErrInvalid, o.TimestampType)
	case o.TimestampBeforeMaxMs < 0:
		return fmt.Errorf("%w: message.timestamp.before.max.ms %d is negative", ErrInvalid, o.TimestampBeforeMaxMs)
	case o.TimestampAfterMaxMs < 0:
		return fmt.Errorf("%w: message.timestamp.after.max.ms %d is negative", ErrInvalid, o.TimestampAfterMaxMs)
	case o.Compression.fixed && (o.Compression.codec < None || o.Compression.codec > ZSTD):
		return fmt.Errorf("%w: compression codec id %d", ErrInvalid, int(o.Compression.codec))
	case o.MaxMessageBytes < 0:
		return fmt.Errorf("%w: max.message.bytes %d is negative", ErrInvalid, o.MaxMessageBytes)
	case o.MaxDecompressedBytes < 0:
		return fmt.Errorf("%w: max decompressed bytes %d is negative", ErrInvalid, o.MaxDecompressedBytes)
	}
	return nil
}

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

// scanRecords decodes every record of the records area p (decompressed)
// of batch b as Kafka's DefaultRecord.readFrom does, and checks each
// record's offset delta, key and timestamp. It returns the largest record
// timestamp. It allocates only to report an error.
func scanRecords(b Batch, p []byte, now int64, o *LeaderOptions) (int64, error) {
	base, n := b.BaseOffset(), b.NumRecords()
	baseTs := b.BaseTimestamp()
	appendTime := b.TimestampType() == LogAppendTime
	maxTs := NoTimestamp
	var rerr *ValidationError
	pos := 0
	for i := int32(0); i < n; i++ {
		tsDelta, offsetDelta, hasKey, next := nextRecord(p, pos)
		if next < 0 {
			return 0, invalid(ErrBadRecord, base, i, "%s", recordProblem(p[pos:]))
		}
		pos = next
		if offsetDelta != i {
			return 0, invalid(ErrBadOffsets, base, i, "offset delta %d, want %d", offsetDelta, i)
		}
		ts := baseTs + tsDelta // wraps as Java's long does
		if appendTime {
			ts = b.MaxTimestamp()
		}
		if ts > maxTs {
			maxTs = ts
		}
		// Kafka's validateKey, then (only for a record with a key or on a
		// topic that is not compacted) validateTimestamp.
		if o.Compacted && !hasKey {
			rerr = addRecordError(rerr, base, RecordError{Index: i, Kind: ErrMissingKey, Timestamp: ts,
				Detail: "a compacted topic cannot accept a record without a key"})
			continue
		}
		if o.TimestampType == CreateTime && ts != NoTimestamp {
			if diff := now - ts; diff > o.TimestampBeforeMaxMs || -diff > o.TimestampAfterMaxMs {
				rerr = addRecordError(rerr, base, RecordError{Index: i, Kind: ErrInvalidTimestamp, Timestamp: ts,
					Detail: fmt.Sprintf("timestamp %d is out of range; it should be within [%d, %d]",
						ts, now-o.TimestampBeforeMaxMs, now+o.TimestampAfterMaxMs)})
			}
		} else if appendTime {
			rerr = addRecordError(rerr, base, RecordError{Index: i, Kind: ErrInvalidTimestamp, Timestamp: ts,
				Detail: "the producer set the timestamp type to LogAppendTime"})
		}
	}
	if pos != len(p) {
		return 0, invalid(ErrBadRecord, base, -1, "%d bytes after the last of %d records", len(p)-pos, n)
	}
	if rerr != nil {
		return 0, rerr
	}
	return maxTs, nil
}

// addRecordError adds r to the error being collected, making it first.
// The batch fails with ErrInvalidTimestamp if any record's timestamp was
// refused, else with ErrMissingKey (Kafka's processRecordErrors).
func addRecordError(e *ValidationError, base int64, r RecordError) *ValidationError {
	if e == nil {
		e = &ValidationError{Kind: r.Kind, BaseOffset: base, Index: -1}
	}
	if r.Kind == ErrInvalidTimestamp {
		e.Kind = ErrInvalidTimestamp
	}
	if len(e.Records) < maxRecordErrors {
		e.Records = append(e.Records, r)
	}
	e.RecordErrors++
	return e
}

// nextRecord decodes the record at p[pos:]. It returns the position after
// the record, negative when the record does not parse: a varint that is
// too long or does not end, an int32 field past int32 (Kafka reads int32
// varints of at most 5 bytes), a length or count that is negative or runs
// past the record, a null header key, or bytes left in the record after
// its last header.
//
// This is the leader's hot loop: one- and two-byte varints (nearly all of
// a typical record's) are decoded inline by fastVarint, the rest by
// readVarint32Slow and readVarint64Slow.
func nextRecord(p []byte, pos int) (tsDelta int64, offsetDelta int32, hasKey bool, next int) {
	length, at := fastVarint(p, pos)
	if at < 0 {
		length, at = readVarint32Slow(p, pos)
	}
	if at < 0 || length < minRecordSize-1 || int64(length) > int64(len(p)-at) {
		return 0, 0, false, -1
	}
	end := at + int(length)
	body := p[:end]
	pos = at + 1 // after the attributes (unused)
	v, at := fastVarint(body, pos)
	if at >= 0 {
		tsDelta = int64(v)
	} else if tsDelta, at = readVarint64Slow(body, pos); at < 0 {
		return 0, 0, false, -1
	}
	if offsetDelta, pos = fastVarint(body, at); pos < 0 {
		if offsetDelta, pos = readVarint32Slow(body, at); pos < 0 {
			return 0, 0, false, -1
		}
	}
	// The key's length and bytes, then the value's.
	if v, at = fastVarint(body, pos); at < 0 {
		v, at = readVarint32Slow(body, pos)
	}
	if at < 0 || v < -1 || int64(v) > int64(end-at) {
		return 0, 0, false, -1
	}
	hasKey = v >= 0
	pos = at + max(int(v), 0)
	if v, at = fastVarint(body, pos); at < 0 {
		v, at = readVarint32Slow(body, pos)
	}
	if at < 0 || v < -1 || int64(v) > int64(end-at) {
		return 0, 0, false, -1
	}
	pos = at + max(int(v), 0)
	if pos+1 == end && body[pos] == 0 {
		return tsDelta, offsetDelta, hasKey, end // no headers
	}
	count, pos := readVarint32Slow(body, pos)
	if pos < 0 || count < 0 || int64(count) > int64(end-pos) {
		return 0, 0, false, -1
	}
	for j := int32(0); j < count; j++ {
		if v, pos = readVarint32Slow(body, pos); pos < 0 || v < 0 || int64(v) > int64(end-pos) {
			return 0, 0, false, -1 // a null or malformed header key
		}
		pos += int(v)
		if v, pos = readVarint32Slow(body, pos); pos < 0 || v < -1 || int64(v) > int64(end-pos) {
			return 0, 0, false, -1
		}
		pos += max(int(v), 0)
	}
	if pos != end {
		return 0, 0, false, -1
	}
	return tsDelta, offsetDelta, hasKey, end
}

// fastVarint decodes the one- or two-byte zigzag varint at p[pos:], pos
// >= 0, and returns it with the position after it; the position is
// negative when the varint is longer or is among p's last two bytes (the
// caller then takes its slow path). Small enough to inline.
func fastVarint(p []byte, pos int) (int32, int) {
	if uint(pos+1) >= uint(len(p)) {
		return 0, -1
	}
	u := uint32(p[pos])
	if u >= 0x80 {
		if p[pos+1] >= 0x80 {
			return 0, -1
		}
		u = u&0x7f | uint32(p[pos+1])<<7
		pos++
	}
	return int32(u>>1) ^ -int32(u&1), pos + 1
}

// readVarint32Slow reads the int32 varint at p[pos:] (see varint32) and
// returns it with the position after it, or a negative position.
func readVarint32Slow(p []byte, pos int) (int32, int) {
	if pos < 0 || pos >= len(p) {
		return 0, -1
	}
	v, n := varint32(p[pos:])
	if n <= 0 {
		return 0, -1
	}
	return v, pos + n
}

// readVarint64Slow reads the varlong at p[pos:] and returns it with the
// position after it, or a negative position.
func readVarint64Slow(p []byte, pos int) (int64, int) {
	if pos < 0 || pos >= len(p) {
		return 0, -1
	}
	v, n := binary.Varint(p[pos:])
	if n <= 0 {
		return 0, -1
	}
	return v, pos + n
}

// recordProblem says why nextRecord refused the record at the start of p
// (the error path only).
func recordProblem(p []byte) string {
	length, n := varint32(p)
	switch {
	case n <= 0:
		return "record length is not a well-formed varint"
	case length < minRecordSize-1:
		return fmt.Sprintf("record length %d is below the minimum %d", length, minRecordSize-1)
	case int(length) > len(p)-n:
		return fmt.Sprintf("record of %d bytes runs past the %d left", length, len(p)-n)
	}
	body := p[n : n+int(length)][1:]
	if _, n = varint64(body); n <= 0 {
		return "timestamp delta is not a well-formed varlong"
	}
	body = body[n:]
	if _, n = varint32(body); n <= 0 {
		return "offset delta is not a well-formed varint"
	}
	body = body[n:]
	var ok bool
	if _, body, ok = skipVarBytes(body); !ok {
		return "key length is malformed or runs past the record"
	}
	if _, body, ok = skipVarBytes(body); !ok {
		return "value length is malformed or runs past the record"
	}
	count, n := varint32(body)
	if n <= 0 || count < 0 || int(count) > len(body)-n {
		return fmt.Sprintf("header count %d is malformed or larger than the record", count)
	}
	body = body[n:]
	for j := int32(0); j < count; j++ {
		var kl int32
		if kl, body, ok = skipVarBytes(body); !ok || kl < 0 {
			return fmt.Sprintf("header %d key is null, malformed or runs past the record", j)
		}
		if _, body, ok = skipVarBytes(body); !ok {
			return fmt.Sprintf("header %d value is malformed or runs past the record", j)
		}
	}
	return fmt.Sprintf("%d bytes left in the record after its last header", len(body))
}

// skipVarBytes reads an int32 varint length (-1: null) and skips that many
// bytes.
func skipVarBytes(p []byte) (length int32, rest []byte, ok bool) {
	l, n := varint32(p)
	if n <= 0 || l < -1 || int(l) > len(p)-n {
		return 0, p, false
	}
	if l < 0 {
		return l, p[n:], true
	}
	return l, p[n+int(l):], true
}

// varint32 decodes a zigzag varint Kafka reads as an int32
// (ByteUtils.readVarint): at most 5 bytes, and here a value that fits in
// 32 bits (Kafka drops the extra bits of a fifth byte above 0x0f; such a
// varint is refused). n <= 0 when p does not hold one.
func varint32(p []byte) (int32, int) {
	if len(p) > 1 && p[0] >= 0x80 && p[1] < 0x80 {
		u := uint32(p[0]&0x7f) | uint32(p[1])<<7
		return int32(u>>1) ^ -int32(u&1), 2
	}
	var u uint32
	for i := 0; i < 5 && i < len(p); i++ {
		c := p[i]
		if i == 4 {
			if c > 0x0f {
				return 0, -1
			}
			u |= uint32(c) << 28
			return int32(u>>1) ^ -int32(u&1), 5
		}
		u |= uint32(c&0x7f) << (7 * i)
		if c < 0x80 {
			return int32(u>>1) ^ -int32(u&1), i + 1
		}
	}
	return 0, 0
}

// varint64 decodes a zigzag varlong (at most 10 bytes, as Kafka's
// readVarlong reads).
func varint64(p []byte) (int64, int) {
	if len(p) > 0 && p[0] < 0x80 {
		u := uint64(p[0])
		return int64(u>>1) ^ -int64(u&1), 1
	}
	return binary.Varint(p)
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
