package producerstate

import (
	"fmt"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/record"
)

// Marker is what the producer state needs of a transaction marker: the
// first record of a COMMIT or ABORT control batch.
type Marker struct {
	Type             record.ControlType // record.ControlCommit or record.ControlAbort
	CoordinatorEpoch int32
	Timestamp        int64 // the marker record's timestamp
}

// Aborted reports whether m is an ABORT marker.
func (m Marker) Aborted() bool { return m.Type == record.ControlAbort }

// ReadMarker reads the transaction marker in control batch b, which must
// hold the whole batch (its first record is decoded, decompressing if
// needed; the CRC is not checked). ok is false, with no error, for a control
// batch without records: the cleaner empties a marker's batch once its
// transaction is gone, and Kafka then skips it. A record that does not
// parse is an error matching record.ErrCorrupt; a control record that is
// not COMMIT or ABORT (Kafka's EndTransactionMarker refuses it) matches
// backend.ErrInvalidRecord.
func ReadMarker(b record.Batch) (m Marker, ok bool, err error) {
	var it record.Iterator
	return readMarker(&it, b)
}

func readMarker(it *record.Iterator, b record.Batch) (Marker, bool, error) {
	if len(b) < record.BatchHeaderSize || !b.IsControl() {
		return Marker{}, false, fmt.Errorf("producerstate: %w: not a control batch", backend.ErrInvalidRecord)
	}
	if err := it.Reset(b); err != nil {
		return Marker{}, false, fmt.Errorf("producerstate: control batch at offset %d: %w", b.BaseOffset(), err)
	}
	if !it.Next() {
		if err := it.Err(); err != nil {
			return Marker{}, false, fmt.Errorf("producerstate: control batch at offset %d: %w", b.BaseOffset(), err)
		}
		return Marker{}, false, nil
	}
	r := it.Record()
	t, err := record.ParseControlKey(r.Key)
	if err != nil {
		return Marker{}, false, fmt.Errorf("producerstate: control batch at offset %d: %w", b.BaseOffset(), err)
	}
	if t != record.ControlCommit && t != record.ControlAbort {
		return Marker{}, false, fmt.Errorf("producerstate: %w: control batch at offset %d holds a %s record, not a transaction marker",
			backend.ErrInvalidRecord, b.BaseOffset(), t)
	}
	ce, err := record.ParseEndTxnMarkerValue(r.Value)
	if err != nil {
		return Marker{}, false, fmt.Errorf("producerstate: marker at offset %d: %w", b.BaseOffset(), err)
	}
	return Marker{Type: t, CoordinatorEpoch: ce, Timestamp: r.Timestamp}, true, nil
}
