package producerstate

import (
	"errors"
	"fmt"
	"strings"
)

// Sentinel errors of this package; test them with errors.Is. The errors
// a producer's append is refused with are backend's (see AppendError).
var (
	// ErrCorruptSnapshot: bytes that are not a valid .snapshot file (short,
	// unknown version, CRC mismatch, a count that does not match the
	// length). Returned as a *FormatError. Kafka deletes such a snapshot
	// and falls back to the next older one.
	ErrCorruptSnapshot = errors.New("producerstate: corrupt producer snapshot")
	// ErrCorruptTxnIndex: bytes that are not a valid .txnindex (an entry
	// version other than 0, a partial trailing entry, an entry below the
	// segment's base offset). Returned as a *FormatError. Kafka rebuilds
	// such an index by recovering its segment.
	ErrCorruptTxnIndex = errors.New("producerstate: corrupt transaction index")
	// ErrTxnIndexOrder: an aborted transaction appended to a TxnIndex
	// whose last offset is not above the index's last entry's (Kafka's
	// TransactionIndex.append refuses it the same way).
	ErrTxnIndexOrder = errors.New("producerstate: transaction index entries out of order")
	// ErrStalePlan: Apply was given a plan that is not the last one
	// Prepare filled for this State, or the State changed since, or the
	// plan is a duplicate (nothing to apply). A bug in the caller.
	ErrStalePlan = errors.New("producerstate: stale append plan")
)

// FormatError says what is wrong in a .snapshot or .txnindex: which file
// kind, at which byte position, and why. It matches its Kind
// (ErrCorruptSnapshot or ErrCorruptTxnIndex) with errors.Is.
type FormatError struct {
	Kind   error
	Pos    int // byte position in the input where the problem is
	Detail string
}

func (e *FormatError) Error() string {
	return fmt.Sprintf("%s at byte %d: %s", e.Kind, e.Pos, e.Detail)
}

// Unwrap lets errors.Is match Kind.
func (e *FormatError) Unwrap() error { return e.Kind }

func snapErr(pos int, format string, args ...any) error {
	return &FormatError{Kind: ErrCorruptSnapshot, Pos: pos, Detail: fmt.Sprintf(format, args...)}
}

func txnErr(pos int, format string, args ...any) error {
	return &FormatError{Kind: ErrCorruptTxnIndex, Pos: pos, Detail: fmt.Sprintf(format, args...)}
}

// AppendError is why Prepare refused an append: one of backend's
// sentinels, each mapping one to one to a Kafka error code, with the
// producer, epochs, sequences and offsets involved.
//
//	Kind                                     Kafka error code
//	backend.ErrOutOfOrderSequence            OUT_OF_ORDER_SEQUENCE_NUMBER (45)
//	backend.ErrInvalidProducerEpoch          INVALID_PRODUCER_EPOCH (47)
//	backend.ErrInvalidTxnState               INVALID_TXN_STATE (48)
//	backend.ErrTransactionCoordinatorFenced  TRANSACTION_COORDINATOR_FENCED (52)
//	backend.ErrInvalidRecord                 INVALID_RECORD (87): a client-sent
//	                                         control batch, a producer id
//	                                         without a sequence, a control batch
//	                                         that is not a transaction marker
//	backend.ErrCorruptRecord                 CORRUPT_MESSAGE (2): a marker's
//	                                         record does not parse
//
// Fields that do not apply to Kind are left at -1.
type AppendError struct {
	Kind       error
	ProducerID int64
	// Offset is the base offset of the batch that failed, as assigned.
	Offset int64
	// Epoch is the batch's producer epoch; CurrentEpoch the partition's.
	Epoch, CurrentEpoch int16
	// FirstSeq and LastSeq are the batch's sequences; CurrentLastSeq is the
	// last sequence the partition holds for the producer.
	FirstSeq, LastSeq, CurrentLastSeq int32
	// CoordinatorEpoch is the marker's; CurrentCoordinatorEpoch the
	// partition's.
	CoordinatorEpoch, CurrentCoordinatorEpoch int32
	Detail                                    string
	// Cause is the underlying error, if any (a record decoding error).
	Cause error
}

func (e *AppendError) Error() string {
	var b strings.Builder
	b.WriteString(e.Kind.Error())
	fmt.Fprintf(&b, ": producer %d at offset %d", e.ProducerID, e.Offset)
	if e.Epoch != -1 || e.CurrentEpoch != -1 {
		fmt.Fprintf(&b, ", epoch %d (current %d)", e.Epoch, e.CurrentEpoch)
	}
	if e.FirstSeq != -1 || e.LastSeq != -1 || e.CurrentLastSeq != -1 {
		fmt.Fprintf(&b, ", sequences %d..%d (current last %d)", e.FirstSeq, e.LastSeq, e.CurrentLastSeq)
	}
	if e.CoordinatorEpoch != -1 || e.CurrentCoordinatorEpoch != -1 {
		fmt.Fprintf(&b, ", coordinator epoch %d (current %d)", e.CoordinatorEpoch, e.CurrentCoordinatorEpoch)
	}
	if e.Detail != "" {
		b.WriteString(": ")
		b.WriteString(e.Detail)
	}
	if e.Cause != nil {
		b.WriteString(": ")
		b.WriteString(e.Cause.Error())
	}
	return b.String()
}

// Unwrap lets errors.Is match Kind (and Cause, when set).
func (e *AppendError) Unwrap() []error {
	if e.Cause != nil {
		return []error{e.Kind, e.Cause}
	}
	return []error{e.Kind}
}

// newAppendError returns an AppendError of kind for a batch, with every
// optional field unset (-1).
func newAppendError(kind error, b *batchInfo, detail string) *AppendError {
	return &AppendError{
		Kind: kind, ProducerID: b.producerID, Offset: b.baseOffset,
		Epoch: b.epoch, CurrentEpoch: -1,
		FirstSeq: -1, LastSeq: -1, CurrentLastSeq: -1,
		CoordinatorEpoch: -1, CurrentCoordinatorEpoch: -1,
		Detail: detail,
	}
}
