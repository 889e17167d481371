package producerstate

import (
	"encoding/binary"
	"fmt"
)

// Transaction index format constants (frozen: Kafka's AbortedTxn).
const (
	TxnIndexEntrySize = 34
	TxnIndexVersion   = 0
	TxnIndexSuffix    = ".txnindex"
)

// AbortedTxn is one .txnindex entry: an aborted transaction of a producer,
// from its first offset to the offset of its ABORT marker, and the last
// stable offset of the partition when the marker was appended.
type AbortedTxn struct {
	ProducerID       int64
	FirstOffset      int64
	LastOffset       int64 // the ABORT marker's offset
	LastStableOffset int64
}

// AppendTo appends the 34-byte encoding of a to dst.
func (a AbortedTxn) AppendTo(dst []byte) []byte {
	dst = binary.BigEndian.AppendUint16(dst, TxnIndexVersion)
	dst = binary.BigEndian.AppendUint64(dst, uint64(a.ProducerID))
	dst = binary.BigEndian.AppendUint64(dst, uint64(a.FirstOffset))
	dst = binary.BigEndian.AppendUint64(dst, uint64(a.LastOffset))
	return binary.BigEndian.AppendUint64(dst, uint64(a.LastStableOffset))
}

// DecodeAbortedTxn decodes the entry in the first 34 bytes of b. It fails
// when b is shorter or the entry's version is not 0. (Kafka reads only the
// version's first byte and accepts anything not above 0; tierlog wants the
// int16 Kafka writes, 0.)
func DecodeAbortedTxn(b []byte) (AbortedTxn, error) {
	if len(b) < TxnIndexEntrySize {
		return AbortedTxn{}, txnErr(0, "%d bytes, an entry is %d", len(b), TxnIndexEntrySize)
	}
	return decodeTxnEntry(b, 0)
}

// decodeTxnEntry decodes the entry at byte pos of data, which holds at
// least pos+34 bytes.
func decodeTxnEntry(data []byte, pos int) (AbortedTxn, error) {
	b := data[pos : pos+TxnIndexEntrySize]
	if v := int16(binary.BigEndian.Uint16(b)); v != TxnIndexVersion {
		return AbortedTxn{}, txnErr(pos, "unexpected aborted transaction version %d (want %d)", v, TxnIndexVersion)
	}
	return AbortedTxn{
		ProducerID:       int64(binary.BigEndian.Uint64(b[2:])),
		FirstOffset:      int64(binary.BigEndian.Uint64(b[10:])),
		LastOffset:       int64(binary.BigEndian.Uint64(b[18:])),
		LastStableOffset: int64(binary.BigEndian.Uint64(b[26:])),
	}, nil
}

// DecodeTxnIndex decodes every entry of a .txnindex. Unlike Kafka, which
// stops reading before a partial trailing entry, it reports one as
// corruption (a torn append; appending after it would misalign every later
// entry).
func DecodeTxnIndex(data []byte) ([]AbortedTxn, error) {
	if r := len(data) % TxnIndexEntrySize; r != 0 {
		return nil, txnErr(len(data)-r, "partial trailing entry of %d bytes", r)
	}
	out := make([]AbortedTxn, 0, len(data)/TxnIndexEntrySize)
	for pos := 0; pos < len(data); pos += TxnIndexEntrySize {
		a, err := decodeTxnEntry(data, pos)
		if err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	return out, nil
}

// CollectAbortedTxns appends to dst the aborted transactions of the index
// bytes data that overlap the fetch range [fetchOffset, upperBoundOffset):
// entries with LastOffset >= fetchOffset and FirstOffset <
// upperBoundOffset, in index order (Kafka's
// TransactionIndex.collectAbortedTxns). complete reports that the search
// may stop at this segment: an entry with LastStableOffset >=
// upperBoundOffset was seen (the scan stops there). Otherwise the log
// continues with the next segment's index. Like Kafka, it reads whole
// entries only and ignores a partial trailing one.
func CollectAbortedTxns(dst []AbortedTxn, data []byte, fetchOffset, upperBoundOffset int64) (out []AbortedTxn, complete bool, err error) {
	for pos := 0; pos+TxnIndexEntrySize <= len(data); pos += TxnIndexEntrySize {
		a, err := decodeTxnEntry(data, pos)
		if err != nil {
			return dst, false, err
		}
		if a.LastOffset >= fetchOffset && a.FirstOffset < upperBoundOffset {
			dst = append(dst, a)
		}
		if a.LastStableOffset >= upperBoundOffset {
			return dst, true, nil
		}
	}
	return dst, false, nil
}

// SanityCheckTxnIndex checks a segment's .txnindex as Kafka's
// TransactionIndex.sanityCheck does: every entry's version is 0 and its
// LastOffset is not below the segment's base offset. It also refuses a
// partial trailing entry, which Kafka skips over. A failed check means the
// log recovers the segment, rebuilding the index.
func SanityCheckTxnIndex(data []byte, baseOffset int64) error {
	if r := len(data) % TxnIndexEntrySize; r != 0 {
		return txnErr(len(data)-r, "partial trailing entry of %d bytes", r)
	}
	for pos := 0; pos < len(data); pos += TxnIndexEntrySize {
		a, err := decodeTxnEntry(data, pos)
		if err != nil {
			return err
		}
		if a.LastOffset < baseOffset {
			return txnErr(pos, "last offset %d of aborted transaction of producer %d is below the segment's base offset %d",
				a.LastOffset, a.ProducerID, baseOffset)
		}
	}
	return nil
}

// TruncateTxnIndex returns the length the index bytes data keep when the
// log is truncated to offset (offsets >= offset removed): everything
// before the first entry whose LastOffset >= offset, or len(data) when no
// entry is (Kafka's TransactionIndex.truncateTo).
func TruncateTxnIndex(data []byte, offset int64) (int, error) {
	for pos := 0; pos+TxnIndexEntrySize <= len(data); pos += TxnIndexEntrySize {
		a, err := decodeTxnEntry(data, pos)
		if err != nil {
			return 0, err
		}
		if a.LastOffset >= offset {
			return pos, nil
		}
	}
	return len(data), nil
}

// TxnIndexFileName returns the name of the transaction index of the
// segment at baseOffset: 20 digits and ".txnindex".
func TxnIndexFileName(baseOffset int64) string {
	return paddedOffset(baseOffset) + TxnIndexSuffix
}

// TxnIndex is an in-memory copy of one segment's .txnindex: the bytes the
// log writes through its own file seam, with Kafka's append rule (entries'
// LastOffset strictly increases). Kafka creates the file only when the
// first entry is appended; Len() == 0 says there is nothing to create.
// A TxnIndex is not safe for concurrent use.
type TxnIndex struct {
	baseOffset int64
	data       []byte
}

// NewTxnIndex returns the index of the segment at baseOffset holding data
// (nil for a segment without a .txnindex file), checked with
// SanityCheckTxnIndex. It keeps a copy of data.
func NewTxnIndex(baseOffset int64, data []byte) (*TxnIndex, error) {
	if err := SanityCheckTxnIndex(data, baseOffset); err != nil {
		return nil, err
	}
	return &TxnIndex{baseOffset: baseOffset, data: append([]byte(nil), data...)}, nil
}

// BaseOffset is the base offset of the index's segment.
func (x *TxnIndex) BaseOffset() int64 { return x.baseOffset }

// Len returns the number of entries.
func (x *TxnIndex) Len() int { return len(x.data) / TxnIndexEntrySize }

// Bytes returns the index's bytes; they alias the index until its next
// change.
func (x *TxnIndex) Bytes() []byte { return x.data }

// Append adds a and returns its 34 bytes, which the log appends to the
// file. a.LastOffset must be above the last entry's (ErrTxnIndexOrder
// otherwise; Kafka's check, which tierlog also applies to an index read
// back from disk).
func (x *TxnIndex) Append(a AbortedTxn) ([]byte, error) {
	if n := len(x.data); n >= TxnIndexEntrySize {
		last := int64(binary.BigEndian.Uint64(x.data[n-TxnIndexEntrySize+18:]))
		if a.LastOffset <= last {
			return nil, fmt.Errorf("%w: last offset %d is not above the index's last %d (segment %d)",
				ErrTxnIndexOrder, a.LastOffset, last, x.baseOffset)
		}
	}
	start := len(x.data)
	x.data = a.AppendTo(x.data)
	return x.data[start:], nil
}

// Collect is CollectAbortedTxns over the index.
func (x *TxnIndex) Collect(dst []AbortedTxn, fetchOffset, upperBoundOffset int64) ([]AbortedTxn, bool) {
	// The index was sanity-checked and only Append adds to it: no entry
	// can fail to decode.
	out, complete, _ := CollectAbortedTxns(dst, x.data, fetchOffset, upperBoundOffset)
	return out, complete
}

// Entries returns every entry.
func (x *TxnIndex) Entries() []AbortedTxn {
	out, _ := DecodeTxnIndex(x.data)
	return out
}

// TruncateTo removes the entries whose LastOffset >= offset and returns
// the index's new size in bytes, the length the log truncates the file to.
func (x *TxnIndex) TruncateTo(offset int64) int {
	n, _ := TruncateTxnIndex(x.data, offset)
	x.data = x.data[:n]
	return n
}

// Reset removes every entry (Kafka truncates the file to 0 when it
// recovers the segment).
func (x *TxnIndex) Reset() { x.data = x.data[:0] }
