package broker

import (
	"errors"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/tiered"
)

// errorCode maps an error from the backend (or the broker) to the Kafka
// error code a client acts on: the one place that does. nil is 0.
func errorCode(err error) int16 {
	var ke *kerr.Error
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ke):
		return ke.Code
	case errors.Is(err, backend.ErrOffsetOutOfRange):
		return kerr.OffsetOutOfRange.Code
	case errors.Is(err, backend.ErrCorruptRecord):
		return kerr.CorruptMessage.Code
	case errors.Is(err, backend.ErrInvalidRecord):
		return kerr.InvalidRecord.Code
	case errors.Is(err, backend.ErrRecordTooLarge):
		return kerr.MessageTooLarge.Code
	case errors.Is(err, backend.ErrRecordListTooLarge):
		return kerr.RecordListTooLarge.Code
	case errors.Is(err, backend.ErrUnsupportedForMessageFormat):
		return kerr.UnsupportedForMessageFormat.Code
	case errors.Is(err, backend.ErrOffsetMovedToTieredStorage):
		return kerr.OffsetMovedToTieredStorage.Code
	case errors.Is(err, backend.ErrOutOfOrderSequence):
		return kerr.OutOfOrderSequenceNumber.Code
	case errors.Is(err, backend.ErrInvalidProducerEpoch):
		return kerr.InvalidProducerEpoch.Code
	case errors.Is(err, backend.ErrInvalidTxnState):
		return kerr.InvalidTxnState.Code
	case errors.Is(err, backend.ErrTransactionCoordinatorFenced):
		return kerr.TransactionCoordinatorFenced.Code
	case errors.Is(err, backend.ErrStorage):
		return kerr.KafkaStorageError.Code
	case errors.Is(err, backend.ErrFenced), errors.Is(err, backend.ErrClosed), errors.Is(err, tiered.ErrNotLeader),
		errors.Is(err, backend.ErrWrongLeaderEpoch):
		// Another writer leads the partition (or the bucket's manifest
		// says so), this node does not lead it at the epoch it stamped,
		// or it is closing: the client refreshes its metadata and retries.
		return kerr.NotLeaderForPartition.Code
	case errors.Is(err, backend.ErrNotFound):
		return kerr.UnknownTopicOrPartition.Code
	case errors.Is(err, backend.ErrInvalidConfig):
		return kerr.InvalidConfig.Code
	case errors.Is(err, backend.ErrInvalidName):
		return kerr.InvalidTopicException.Code
	}
	return kerr.UnknownServerError.Code
}
