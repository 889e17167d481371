package record

import (
	"errors"
	"fmt"
)

// Sentinel errors. Test for them with errors.Is; the errors returned by this
// package wrap them with the position and offset that failed.
var (
	// ErrCorrupt is the class of every error that means the bytes are damaged:
	// a bad size, an unknown magic, a CRC mismatch, a record that does not
	// parse, offsets out of order. A *BatchError of kind ErrCRCMismatch,
	// ErrBadSize, ErrBadMagic, ErrBadRecord or ErrOffsetOrder also matches
	// ErrCorrupt. A *ValidationError (a leader append) classes its kinds by
	// the Kafka error code instead: there a record that does not parse is
	// ErrInvalidRecord.
	ErrCorrupt = errors.New("record: corrupt batch")
	// ErrCRCMismatch means the stored checksum does not match the bytes.
	ErrCRCMismatch = errors.New("record: crc mismatch")
	// ErrBadSize means a declared length is impossible: below the format's
	// minimum, or inconsistent with the bytes given.
	ErrBadSize = errors.New("record: bad size")
	// ErrBadMagic means the magic byte is not 0, 1 or 2.
	ErrBadMagic = errors.New("record: unknown magic")
	// ErrBadRecord means a record inside a batch does not parse: a length
	// that runs past the batch, a negative header count, trailing bytes.
	ErrBadRecord = errors.New("record: malformed record")
	// ErrOffsetOrder means an entry's offsets do not rise strictly past
	// the last offset of the entry before it, or its last offset lies
	// below its base: a base offset moved (it is outside the CRC), or
	// entries out of place. It is a corruption kind.
	ErrOffsetOrder = errors.New("record: offsets out of order")
	// ErrTornTail means a file ends inside an entry: fewer than 17 bytes
	// are left, or the entry's declared size runs past the end. It is what
	// an interrupted append leaves behind, not corruption.
	ErrTornTail = errors.New("record: torn tail")
	// ErrUnknownCodec means the attributes name a compression codec that
	// Kafka does not define (or zstd below magic 2).
	ErrUnknownCodec = errors.New("record: unknown compression codec")
	// ErrTooLarge means decompressing a batch would exceed the configured
	// cap on decompressed bytes.
	ErrTooLarge = errors.New("record: decompressed batch too large")
	// ErrInvalid means the caller asked for something the format cannot
	// hold: a relative offset past int32, too many records, a bad option.
	ErrInvalid = errors.New("record: invalid input")

	// The errors below are those of a leader append (ValidateForLeader,
	// returned as a *ValidationError). Four of them are classes, one per
	// Kafka error code the batch is refused with: ErrCorrupt
	// (CORRUPT_MESSAGE), ErrMessageTooLarge (MESSAGE_TOO_LARGE),
	// ErrInvalidTimestamp (INVALID_TIMESTAMP) and ErrInvalidRecord
	// (INVALID_RECORD); every ValidationError matches exactly one.

	// ErrInvalidRecord is the class of a batch that is well framed and
	// checksummed but that Kafka's leader refuses: Kafka's INVALID_RECORD.
	ErrInvalidRecord = errors.New("record: invalid record")
	// ErrInvalidTimestamp means a record's CreateTime timestamp is outside
	// [now - message.timestamp.before.max.ms, now +
	// message.timestamp.after.max.ms], or the producer flagged the batch
	// LogAppendTime where Kafka refuses that: Kafka's INVALID_TIMESTAMP.
	ErrInvalidTimestamp = errors.New("record: invalid timestamp")
	// ErrMessageTooLarge means a batch is larger than max.message.bytes
	// (as produced, or once recompressed); it is also the class of
	// ErrTooLarge in a leader append: Kafka's MESSAGE_TOO_LARGE.
	ErrMessageTooLarge = errors.New("record: message too large")
	// ErrLegacyMagic means a leader append holds a magic 0 or 1 message
	// set: Kafka's produce requests v3+ carry record batches v2 only.
	ErrLegacyMagic = errors.New("record: legacy magic in a leader append")
	// ErrBadOffsets means a produced batch's offsets are not a client's:
	// a base offset other than 0, a record count of 0 or less, a last
	// offset delta that is not count-1, or record offset deltas that are
	// not exactly 0, 1, … count-1.
	ErrBadOffsets = errors.New("record: bad offsets in a produced batch")
	// ErrControlBatch means a client produced a control batch; only the
	// transaction coordinator writes them.
	ErrControlBatch = errors.New("record: control batch from a client")
	// ErrNoSequence means a batch carries a producer id but no base
	// sequence.
	ErrNoSequence = errors.New("record: producer id without a sequence")
	// ErrMissingKey means a record of a compacted topic has a null key.
	ErrMissingKey = errors.New("record: record without a key on a compacted topic")
)

// BatchError reports what failed in one batch (or legacy entry) and where.
// It matches its Kind with errors.Is, and ErrCorrupt when Kind is one of the
// corruption kinds.
type BatchError struct {
	Kind       error // one of the sentinels above
	Position   int64 // file position of the batch; -1 when unknown
	BaseOffset int64 // the batch's base offset as stored; -1 when unreadable
	Detail     string
}

func (e *BatchError) Error() string {
	where := ""
	if e.Position >= 0 {
		where = fmt.Sprintf(" at position %d", e.Position)
	}
	if e.BaseOffset >= 0 {
		where += fmt.Sprintf(" (base offset %d)", e.BaseOffset)
	}
	if e.Detail == "" {
		return e.Kind.Error() + where
	}
	return e.Kind.Error() + where + ": " + e.Detail
}

// Unwrap returns the kind and, for corruption kinds, ErrCorrupt.
func (e *BatchError) Unwrap() []error {
	switch e.Kind {
	case ErrCRCMismatch, ErrBadSize, ErrBadMagic, ErrBadRecord, ErrOffsetOrder:
		return []error{e.Kind, ErrCorrupt}
	}
	return []error{e.Kind}
}

func batchErr(kind error, base int64, format string, args ...any) *BatchError {
	return &BatchError{Kind: kind, Position: -1, BaseOffset: base, Detail: fmt.Sprintf(format, args...)}
}

// AtPosition returns err with its position set when it is a *BatchError
// whose position is unknown; other errors come back unchanged.
func AtPosition(err error, pos int64) error {
	var be *BatchError
	if errors.As(err, &be) && be.Position < 0 {
		c := *be
		c.Position = pos
		return &c
	}
	return err
}
