package backend

import (
	"errors"
	"strconv"
)

// Kafka's error codes, the numbers a broker puts in a response's
// error_code: those the backend's errors map to. Each is Kafka's protocol
// (org.apache.kafka.common.protocol.Errors) and frozen by it; the comment
// is the code's name there.
const (
	CodeUnknownServerError           int16 = -1  // UNKNOWN_SERVER_ERROR
	CodeNone                         int16 = 0   // NONE
	CodeOffsetOutOfRange             int16 = 1   // OFFSET_OUT_OF_RANGE
	CodeCorruptMessage               int16 = 2   // CORRUPT_MESSAGE
	CodeUnknownTopicOrPartition      int16 = 3   // UNKNOWN_TOPIC_OR_PARTITION
	CodeNotLeaderOrFollower          int16 = 6   // NOT_LEADER_OR_FOLLOWER (NOT_LEADER_FOR_PARTITION before Kafka 2.7)
	CodeMessageTooLarge              int16 = 10  // MESSAGE_TOO_LARGE
	CodeInvalidTopicException        int16 = 17  // INVALID_TOPIC_EXCEPTION
	CodeRecordListTooLarge           int16 = 18  // RECORD_LIST_TOO_LARGE
	CodeInvalidTimestamp             int16 = 32  // INVALID_TIMESTAMP
	CodeInvalidConfig                int16 = 40  // INVALID_CONFIG
	CodeUnsupportedForMessageFormat  int16 = 43  // UNSUPPORTED_FOR_MESSAGE_FORMAT
	CodeOutOfOrderSequenceNumber     int16 = 45  // OUT_OF_ORDER_SEQUENCE_NUMBER
	CodeInvalidProducerEpoch         int16 = 47  // INVALID_PRODUCER_EPOCH
	CodeInvalidTxnState              int16 = 48  // INVALID_TXN_STATE
	CodeTransactionCoordinatorFenced int16 = 52  // TRANSACTION_COORDINATOR_FENCED
	CodeKafkaStorageError            int16 = 56  // KAFKA_STORAGE_ERROR
	CodeInvalidRecord                int16 = 87  // INVALID_RECORD
	CodeOffsetMovedToTieredStorage   int16 = 109 // OFFSET_MOVED_TO_TIERED_STORAGE
)

// kafkaCodeNames are the codes' names in Kafka's Errors, as its docs and
// tools print them.
var kafkaCodeNames = map[int16]string{
	CodeUnknownServerError:           "UNKNOWN_SERVER_ERROR",
	CodeNone:                         "NONE",
	CodeOffsetOutOfRange:             "OFFSET_OUT_OF_RANGE",
	CodeCorruptMessage:               "CORRUPT_MESSAGE",
	CodeUnknownTopicOrPartition:      "UNKNOWN_TOPIC_OR_PARTITION",
	CodeNotLeaderOrFollower:          "NOT_LEADER_OR_FOLLOWER",
	CodeMessageTooLarge:              "MESSAGE_TOO_LARGE",
	CodeInvalidTopicException:        "INVALID_TOPIC_EXCEPTION",
	CodeRecordListTooLarge:           "RECORD_LIST_TOO_LARGE",
	CodeInvalidTimestamp:             "INVALID_TIMESTAMP",
	CodeInvalidConfig:                "INVALID_CONFIG",
	CodeUnsupportedForMessageFormat:  "UNSUPPORTED_FOR_MESSAGE_FORMAT",
	CodeOutOfOrderSequenceNumber:     "OUT_OF_ORDER_SEQUENCE_NUMBER",
	CodeInvalidProducerEpoch:         "INVALID_PRODUCER_EPOCH",
	CodeInvalidTxnState:              "INVALID_TXN_STATE",
	CodeTransactionCoordinatorFenced: "TRANSACTION_COORDINATOR_FENCED",
	CodeKafkaStorageError:            "KAFKA_STORAGE_ERROR",
	CodeInvalidRecord:                "INVALID_RECORD",
	CodeOffsetMovedToTieredStorage:   "OFFSET_MOVED_TO_TIERED_STORAGE",
}

// KafkaCodeName returns the name Kafka gives code (NOT_LEADER_OR_FOLLOWER
// for 6), for the codes KafkaCode returns; any other code is "CODE_" and
// its number.
func KafkaCodeName(code int16) string {
	if n, ok := kafkaCodeNames[code]; ok {
		return n
	}
	return "CODE_" + strconv.Itoa(int(code))
}

// kafkaCodes is the mapping, checked in order: the first sentinel err
// matches gives its code. An error may match more than one (a
// RejectedBatchError matches its class and its cause; tierlog wraps a
// cause with %w beside the sentinel that classifies it), so a more
// specific sentinel comes before a more general one, and a class a client
// must act on (a corrupt batch, a refused producer) before the storage
// error that may have come with it.
var kafkaCodes = []struct {
	err  error
	code int16
}{
	// A follower's fetch below the local log start is also outside the
	// range it holds locally: moved, not out of range, should the two
	// ever come together.
	{ErrOffsetMovedToTieredStorage, CodeOffsetMovedToTieredStorage},
	{ErrOffsetOutOfRange, CodeOffsetOutOfRange},
	{ErrCorruptRecord, CodeCorruptMessage},
	{ErrInvalidRecord, CodeInvalidRecord},
	{ErrInvalidTimestamp, CodeInvalidTimestamp},
	{ErrRecordTooLarge, CodeMessageTooLarge},
	{ErrRecordListTooLarge, CodeRecordListTooLarge},
	{ErrUnsupportedForMessageFormat, CodeUnsupportedForMessageFormat},
	{ErrOutOfOrderSequence, CodeOutOfOrderSequenceNumber},
	{ErrInvalidProducerEpoch, CodeInvalidProducerEpoch},
	{ErrInvalidTxnState, CodeInvalidTxnState},
	{ErrTransactionCoordinatorFenced, CodeTransactionCoordinatorFenced},
	// A rolled-back bucket comes with ErrStorage: the same code, listed
	// so the sentinel has its own row.
	{ErrManifestRolledBack, CodeKafkaStorageError},
	{ErrStorage, CodeKafkaStorageError},
	// Another writer leads the partition (or the bucket's manifest says
	// so), this replica does not lead it, or does not at the epoch a
	// leader append stamped, or it is closing (moved away, deleted,
	// shutting down): the client refreshes its metadata and retries.
	{ErrFenced, CodeNotLeaderOrFollower},
	{ErrNotLeader, CodeNotLeaderOrFollower},
	{ErrWrongLeaderEpoch, CodeNotLeaderOrFollower},
	{ErrClosed, CodeNotLeaderOrFollower},
	{ErrNotFound, CodeUnknownTopicOrPartition},
	{ErrInvalidConfig, CodeInvalidConfig},
	{ErrInvalidName, CodeInvalidTopicException},
}

// KafkaCode returns the Kafka error code a broker answers err with: the
// code of the first of the backend's sentinels err matches (errors.Is),
// so an error wrapped with %w maps as its sentinel. nil is CodeNone; an
// error that matches none is CodeUnknownServerError. The one mapping of
// the backend's errors to Kafka's codes: docs/embedding.md's table is
// checked against it.
func KafkaCode(err error) int16 {
	if err == nil {
		return CodeNone
	}
	for _, m := range kafkaCodes {
		if errors.Is(err, m.err) {
			return m.code
		}
	}
	return CodeUnknownServerError
}
