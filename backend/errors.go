package backend

import (
	"errors"
	"fmt"
)

// Sentinel errors; test them with errors.Is. Backends wrap them with the
// partition, offset, file or key that failed.
var (
	// ErrOffsetOutOfRange: a read or lookup asked for an offset outside
	// [LogStart, LogEnd]. Returned as an *OffsetOutOfRangeError.
	ErrOffsetOutOfRange = errors.New("backend: offset out of range")
	// ErrCorruptRecord: stored or appended bytes fail their checks (CRC,
	// size, magic). Appends of such batches write nothing.
	ErrCorruptRecord = errors.New("backend: corrupt record")
	// ErrInvalidRecord: a well-formed batch that cannot be appended here:
	// a follower batch that does not continue the log, an unsupported
	// magic, offsets out of order.
	ErrInvalidRecord = errors.New("backend: invalid record")
	// ErrRecordTooLarge: a batch larger than max.message.bytes. Kafka's
	// MESSAGE_TOO_LARGE (10).
	ErrRecordTooLarge = errors.New("backend: record too large")
	// ErrRecordListTooLarge: an append larger than segment.bytes. Kafka's
	// RECORD_LIST_TOO_LARGE (18).
	ErrRecordListTooLarge = errors.New("backend: record list too large")
	// ErrUnsupportedForMessageFormat: a leader append of a batch in a
	// message format older than v2. Kafka's UNSUPPORTED_FOR_MESSAGE_FORMAT
	// (43).
	ErrUnsupportedForMessageFormat = errors.New("backend: unsupported for message format")
	// ErrOffsetMovedToTieredStorage: a follower fetched an offset the
	// partition holds only in its bucket. Returned as an
	// *OffsetMovedToTieredStorageError. Kafka's
	// OFFSET_MOVED_TO_TIERED_STORAGE (109).
	ErrOffsetMovedToTieredStorage = errors.New("backend: offset moved to tiered storage")
	// ErrFenced: another writer owns the partition (a manifest commit lost
	// its conditional write); this one must stop writing.
	ErrFenced = errors.New("backend: fenced by another writer")
	// ErrNotFound: the partition, object or file does not exist.
	ErrNotFound = errors.New("backend: not found")
	// ErrClosed: the partition or backend was used after Close.
	ErrClosed = errors.New("backend: closed")
	// ErrInvalidName: a topic or partition that Kafka would not accept.
	ErrInvalidName = errors.New("backend: invalid topic or partition name")
	// ErrInvalidConfig: an unknown config key or a bad value.
	ErrInvalidConfig = errors.New("backend: invalid config")
	// ErrStorage: the disk (or the bucket, for remote data) failed: an
	// I/O error, a full disk, an fsync that failed. Kafka's
	// KAFKA_STORAGE_ERROR. A log whose fsync failed, or whose failed write
	// could not be undone, refuses writes with it until it is reopened.
	ErrStorage = errors.New("backend: storage error")

	// The producer-state errors below each map one to one to a Kafka
	// error code; appends that return them write nothing.

	// ErrOutOfOrderSequence: an idempotent producer's batch does not
	// continue the producer's sequence (a gap, a retry older than the
	// last five batches, or a new epoch not starting at 0). Kafka's
	// OUT_OF_ORDER_SEQUENCE_NUMBER (45).
	ErrOutOfOrderSequence = errors.New("backend: out of order sequence number")
	// ErrInvalidProducerEpoch: a batch or transaction marker carries a
	// producer epoch older than the one the partition has seen. Kafka's
	// INVALID_PRODUCER_EPOCH (47).
	ErrInvalidProducerEpoch = errors.New("backend: invalid producer epoch")
	// ErrInvalidTxnState: a producer wrote outside the transaction state
	// the partition knows (a non-transactional batch while its transaction
	// is open, or a transactional batch the coordinator has not verified).
	// Kafka's INVALID_TXN_STATE (48).
	ErrInvalidTxnState = errors.New("backend: invalid transaction state")
	// ErrTransactionCoordinatorFenced: a transaction marker carries a
	// coordinator epoch older than one the partition has seen (a zombie
	// coordinator). Kafka's TRANSACTION_COORDINATOR_FENCED (52).
	ErrTransactionCoordinatorFenced = errors.New("backend: transaction coordinator fenced")
)

// OffsetOutOfRangeError says which offset was asked for and the range the
// partition holds. It matches ErrOffsetOutOfRange.
type OffsetOutOfRangeError struct {
	Offset   int64
	LogStart int64
	LogEnd   int64
}

func (e *OffsetOutOfRangeError) Error() string {
	return fmt.Sprintf("backend: offset %d out of range [%d, %d]", e.Offset, e.LogStart, e.LogEnd)
}

// Unwrap lets errors.Is match ErrOffsetOutOfRange.
func (e *OffsetOutOfRangeError) Unwrap() error { return ErrOffsetOutOfRange }

// ConfigError names the config key that was wrong. It matches
// ErrInvalidConfig.
type ConfigError struct {
	Key    string
	Value  string
	Reason string
}

func (e *ConfigError) Error() string {
	if e.Value == "" {
		return fmt.Sprintf("backend: config %q: %s", e.Key, e.Reason)
	}
	return fmt.Sprintf("backend: config %q = %q: %s", e.Key, e.Value, e.Reason)
}

// Unwrap lets errors.Is match ErrInvalidConfig.
func (e *ConfigError) Unwrap() error { return ErrInvalidConfig }

// OffsetMovedToTieredStorageError says which offset a follower asked for
// and where the local log starts. It matches ErrOffsetMovedToTieredStorage.
type OffsetMovedToTieredStorageError struct {
	Offset        int64
	LocalLogStart int64
}

func (e *OffsetMovedToTieredStorageError) Error() string {
	return fmt.Sprintf("backend: offset %d moved to tiered storage (the local log starts at %d)", e.Offset, e.LocalLogStart)
}

// Unwrap lets errors.Is match ErrOffsetMovedToTieredStorage.
func (e *OffsetMovedToTieredStorageError) Unwrap() error { return ErrOffsetMovedToTieredStorage }
