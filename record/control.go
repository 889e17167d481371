package record

import (
	"encoding/binary"
	"fmt"
)

// ControlType is the type of a control record, stored in its key.
type ControlType int16

// Control record types (frozen: Kafka's ControlRecordType ids).
const (
	ControlAbort          ControlType = 0
	ControlCommit         ControlType = 1
	ControlLeaderChange   ControlType = 2
	ControlSnapshotHeader ControlType = 3
	ControlSnapshotFooter ControlType = 4
	ControlKRaftVersion   ControlType = 5
	ControlKRaftVoters    ControlType = 6
	ControlUnknown        ControlType = -1
)

func (t ControlType) String() string {
	switch t {
	case ControlAbort:
		return "ABORT"
	case ControlCommit:
		return "COMMIT"
	case ControlLeaderChange:
		return "LEADER_CHANGE"
	case ControlSnapshotHeader:
		return "SNAPSHOT_HEADER"
	case ControlSnapshotFooter:
		return "SNAPSHOT_FOOTER"
	case ControlKRaftVersion:
		return "KRAFT_VERSION"
	case ControlKRaftVoters:
		return "KRAFT_VOTERS"
	}
	return "UNKNOWN"
}

// ControlKey returns the 4-byte key of a control record: int16 version 0,
// int16 type.
func ControlKey(t ControlType) []byte {
	k := make([]byte, 4)
	binary.BigEndian.PutUint16(k[2:], uint16(t))
	return k
}

// ParseControlKey returns the type in a control record's key, ControlUnknown
// for an unknown id, and an error for a key that is not a control key.
func ParseControlKey(key []byte) (ControlType, error) {
	if len(key) < 4 {
		return ControlUnknown, fmt.Errorf("%w: control key of %d bytes", ErrBadRecord, len(key))
	}
	if v := int16(binary.BigEndian.Uint16(key)); v < 0 {
		return ControlUnknown, fmt.Errorf("%w: control key version %d", ErrBadRecord, v)
	}
	t := ControlType(binary.BigEndian.Uint16(key[2:]))
	if t < ControlAbort || t > ControlKRaftVoters {
		return ControlUnknown, nil
	}
	return t, nil
}

// EndTxnMarkerValue returns the value of a COMMIT or ABORT marker: int16
// version 0, int32 coordinator epoch.
func EndTxnMarkerValue(coordinatorEpoch int32) []byte {
	v := make([]byte, 6)
	binary.BigEndian.PutUint32(v[2:], uint32(coordinatorEpoch))
	return v
}

// ParseEndTxnMarkerValue returns the coordinator epoch of a marker value.
func ParseEndTxnMarkerValue(v []byte) (coordinatorEpoch int32, err error) {
	if len(v) < 6 {
		return 0, fmt.Errorf("%w: end transaction marker value of %d bytes", ErrBadRecord, len(v))
	}
	if ver := int16(binary.BigEndian.Uint16(v)); ver < 0 {
		return 0, fmt.Errorf("%w: end transaction marker version %d", ErrBadRecord, ver)
	}
	return int32(binary.BigEndian.Uint32(v[2:])), nil
}

// EndTxnMarker describes a transaction COMMIT or ABORT marker batch.
type EndTxnMarker struct {
	BaseOffset           int64
	PartitionLeaderEpoch int32
	ProducerID           int64
	ProducerEpoch        int16
	CoordinatorEpoch     int32
	Commit               bool // false: ABORT
	Timestamp            int64
}

// BuildEndTxnMarker writes the control batch Kafka's
// MemoryRecords.writeEndTransactionalMarker writes for m, using b's buffers.
func (b *Builder) BuildEndTxnMarker(m EndTxnMarker) (Batch, error) {
	h := NewBatchHeader()
	h.BaseOffset = m.BaseOffset
	h.PartitionLeaderEpoch = m.PartitionLeaderEpoch
	h.ProducerID = m.ProducerID
	h.ProducerEpoch = m.ProducerEpoch
	h.Transactional = true
	h.Control = true
	b.Reset(h)
	t := ControlAbort
	if m.Commit {
		t = ControlCommit
	}
	b.Append(m.Timestamp, ControlKey(t), EndTxnMarkerValue(m.CoordinatorEpoch), nil)
	return b.Build()
}
