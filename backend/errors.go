package backend

import (
	"errors"
	"fmt"
)

// Sentinel errors; test them with errors.Is. Backends wrap them with the
// partition, offset, file or key that failed. Each maps to the Kafka error
// code its comment names (KafkaCode).
var (
	// ErrOffsetOutOfRange: a read or lookup asked for an offset outside
	// [LogStart, LogEnd]. Returned as an *OffsetOutOfRangeError. Kafka's
	// OFFSET_OUT_OF_RANGE (1).
	ErrOffsetOutOfRange = errors.New("backend: offset out of range")
	// ErrCorruptRecord: stored or appended bytes fail their checks (CRC,
	// size, magic). Appends of such batches write nothing. Kafka's
	// CORRUPT_MESSAGE (2).
	ErrCorruptRecord = errors.New("backend: corrupt record")
	// ErrInvalidRecord: a well-formed batch that cannot be appended here:
	// a follower batch that does not continue the log, offsets out of
	// order; in a leader append, what Kafka's leader refuses of a
	// client's batch (records that do not parse, a control batch, a
	// record without a key on a compacted topic, a magic other than 2,
	// …). Kafka's INVALID_RECORD (87).
	ErrInvalidRecord = errors.New("backend: invalid record")
	// ErrInvalidTimestamp: a leader append holds a CreateTime record whose
	// timestamp is outside [now - message.timestamp.before.max.ms, now +
	// message.timestamp.after.max.ms], or, on a LogAppendTime topic, a
	// batch its producer flagged LogAppendTime. Kafka's INVALID_TIMESTAMP
	// (32).
	ErrInvalidTimestamp = errors.New("backend: invalid timestamp")
	// ErrRecordTooLarge: a batch larger than max.message.bytes (in a
	// leader append, also once recompressed to the topic's
	// compression.type). Kafka's MESSAGE_TOO_LARGE (10).
	ErrRecordTooLarge = errors.New("backend: record too large")
	// ErrRecordListTooLarge: an append larger than segment.bytes. Kafka's
	// RECORD_LIST_TOO_LARGE (18).
	ErrRecordListTooLarge = errors.New("backend: record list too large")
	// ErrUnsupportedForMessageFormat: a follower's or the coordinator's
	// append of a batch in a message format older than v2 (a leader
	// append of one from a client is ErrInvalidRecord, as Kafka's produce
	// path answers). Kafka's UNSUPPORTED_FOR_MESSAGE_FORMAT (43).
	ErrUnsupportedForMessageFormat = errors.New("backend: unsupported for message format")
	// ErrOffsetMovedToTieredStorage: a follower fetched an offset the
	// partition holds only in its bucket. Returned as an
	// *OffsetMovedToTieredStorageError. Kafka's
	// OFFSET_MOVED_TO_TIERED_STORAGE (109).
	ErrOffsetMovedToTieredStorage = errors.New("backend: offset moved to tiered storage")
	// ErrFenced: another writer owns the partition (a manifest commit lost
	// its conditional write); this one must stop writing. Kafka's
	// NOT_LEADER_OR_FOLLOWER (6): the client finds the new leader.
	ErrFenced = errors.New("backend: fenced by another writer")
	// ErrWrongLeaderEpoch: a leader append (AssignOffsets) whose
	// LeaderEpoch is not the epoch the partition leads at (its latest
	// BecomeLeader; 0 stands for that epoch), or a leader append to a
	// partition told it follows. Nothing is appended: stamping another
	// epoch would make the batches and the epoch cache disagree, or move
	// the cache past the next leader's epoch. Kafka answers a produce to
	// a replica that does not lead at the epoch with NOT_LEADER_OR_FOLLOWER
	// (6); a produce carries no epoch to be FENCED_LEADER_EPOCH for.
	ErrWrongLeaderEpoch = errors.New("backend: wrong leader epoch for a leader append")
	// ErrNotLeader: a change only the partition's leader makes (an upload
	// to the bucket, remote retention, a new log start in the bucket) was
	// asked of a replica that does not lead it (tiered.ErrNotLeader wraps
	// it). Kafka's NOT_LEADER_OR_FOLLOWER (6).
	ErrNotLeader = errors.New("backend: not the partition's leader")
	// ErrNotFound: the partition, object or file does not exist. Kafka's
	// UNKNOWN_TOPIC_OR_PARTITION (3).
	ErrNotFound = errors.New("backend: not found")
	// ErrClosed: the partition or backend was used after Close (moved
	// away, deleted, shutting down). Kafka's NOT_LEADER_OR_FOLLOWER (6):
	// the client refreshes its metadata and retries.
	ErrClosed = errors.New("backend: closed")
	// ErrInvalidName: a topic or partition that Kafka would not accept.
	// Kafka's INVALID_TOPIC_EXCEPTION (17).
	ErrInvalidName = errors.New("backend: invalid topic or partition name")
	// ErrInvalidConfig: an unknown config key or a bad value. Kafka's
	// INVALID_CONFIG (40).
	ErrInvalidConfig = errors.New("backend: invalid config")
	// ErrStorage: the disk (or the bucket, for remote data) failed: an
	// I/O error, a full disk, an fsync that failed. Kafka's
	// KAFKA_STORAGE_ERROR (56). A log whose fsync failed, or whose failed write
	// could not be undone, refuses writes with it until it is reopened.
	ErrStorage = errors.New("backend: storage error")
	// ErrManifestRolledBack: a tiered partition's bucket went back in
	// time (a restored backup, a versioning rollback, a failover to a
	// lagging replica): its manifest is older than the one the partition
	// last committed or adopted, or leaves a hole below the local log,
	// or moves the log start with nothing to explain it. The partition
	// is offline (it deletes nothing, locally or in the bucket, and its
	// log start stays) until an operator accepts the bucket explicitly
	// (tierctl manifest accept). Returned together with ErrStorage:
	// Kafka's KAFKA_STORAGE_ERROR (56).
	ErrManifestRolledBack = errors.New("backend: the bucket's manifest went back in time")

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

// RejectedBatchError says which batch of a leader append was refused and
// why, with the records refused one by one: what a broker answers a
// produce request with (error_code from Class, error_message from Error,
// record_errors from Records). It matches Class (ErrCorruptRecord,
// ErrRecordTooLarge, ErrInvalidTimestamp or ErrInvalidRecord) and Cause
// (the local backend's is a *record.ValidationError).
type RejectedBatchError struct {
	Class error
	// Batch is the refused batch's index in the append, from 0;
	// Position its first byte in the append; BaseOffset its base offset
	// as the producer sent it.
	Batch      int
	Position   int
	BaseOffset int64
	// Index is the record (from 0, in the batch) that stopped the
	// validation, one that does not parse or breaks the offsets; -1 when
	// the batch is refused as a whole or record by record (Records).
	Index int32
	// Records are the records refused one by one, a timestamp out of
	// range or a missing key (Kafka's record_errors; at most 1000 of
	// them). RecordErrors counts them all.
	Records      []RecordError
	RecordErrors int
	Cause        error
}

// RecordError is one refused record of a batch: Kafka's record_errors
// entry (batch_index, batch_index_error_message).
type RecordError struct {
	Index   int32 // the record's index in its batch, from 0
	Message string
}

func (e *RejectedBatchError) Error() string {
	return fmt.Sprintf("%v: batch %d at byte %d of the append: %v", e.Class, e.Batch, e.Position, e.Cause)
}

// Unwrap lets errors.Is match Class and errors.As find Cause.
func (e *RejectedBatchError) Unwrap() []error { return []error{e.Class, e.Cause} }
