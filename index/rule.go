package index

import "fmt"

// Indexer applies Kafka's sparse-index rule (LogSegment.append) to a
// segment's offset and time index pair, and tracks the segment's largest
// timestamp the way the segment does.
//
// Per append (one call to Append) at most one entry is added: when the bytes
// appended since the previous entry, not counting this append, exceed
// IntervalBytes, the offset index gets (last offset of this append, position
// where this append starts) and the time index gets (largest timestamp so
// far, the offset that goes with it). A leader appends batch by batch; a
// follower appends a fetched chunk of many batches at once and so indexes
// more sparsely, as Kafka does.
type Indexer struct {
	Offsets       *OffsetIndex
	Times         *TimeIndex
	IntervalBytes int64

	bytesSinceLastEntry int64
	maxTimestamp        int64 // -1 until a timestamped append
	offsetOfMaxTs       int64
}

// NewIndexer returns an Indexer over an empty segment's indexes.
func NewIndexer(offsets *OffsetIndex, times *TimeIndex, intervalBytes int64) *Indexer {
	return &Indexer{Offsets: offsets, Times: times, IntervalBytes: intervalBytes, maxTimestamp: -1, offsetOfMaxTs: -1}
}

// Restore sets the state of a reopened segment: the bytes appended since
// its last index entry, and its largest timestamp with the offset that goes
// with it (-1, -1 when unknown).
func (x *Indexer) Restore(bytesSinceLastEntry, maxTimestamp, offsetOfMaxTs int64) {
	x.bytesSinceLastEntry, x.maxTimestamp, x.offsetOfMaxTs = bytesSinceLastEntry, maxTimestamp, offsetOfMaxTs
}

// Append records one append of size bytes that starts at position, whose
// last offset is lastOffset, whose largest timestamp is maxTimestamp, and
// whose shallowOffsetOfMaxTs is the last offset of the earliest batch in it
// that carries maxTimestamp.
func (x *Indexer) Append(position, size, lastOffset, maxTimestamp, shallowOffsetOfMaxTs int64) error {
	if position < 0 || position > 1<<31-1 {
		return fmt.Errorf("%w: position %d does not fit an index entry", ErrInvalidOffset, position)
	}
	if maxTimestamp > x.maxTimestamp {
		x.maxTimestamp, x.offsetOfMaxTs = maxTimestamp, shallowOffsetOfMaxTs
	}
	if x.bytesSinceLastEntry > x.IntervalBytes {
		if err := x.Offsets.Append(lastOffset, int32(position)); err != nil {
			return err
		}
		if err := x.Times.MaybeAppend(x.maxTimestamp, x.offsetOfMaxTs, false); err != nil {
			return err
		}
		x.bytesSinceLastEntry = 0
	}
	x.bytesSinceLastEntry += size
	return nil
}

// Reserve backs the index slots an append of n batches may fill (one entry
// per batch at most, plus the time index's roll entry), so the append's
// index updates cannot fail for want of disk space once its bytes are
// written.
func (x *Indexer) Reserve(n int) error {
	if err := x.Offsets.Reserve(n); err != nil {
		return err
	}
	return x.Times.Reserve(n + 1)
}

// Roll adds the final time index entry that Kafka writes when a segment
// becomes inactive or is closed (maybeAppend(maxTimestampSoFar,
// offsetOfMaxTimestampSoFar, skipFullCheck=true)). It does not trim.
func (x *Indexer) Roll() error {
	if x.maxTimestamp < 0 {
		return nil
	}
	return x.Times.MaybeAppend(x.maxTimestamp, x.offsetOfMaxTs, true)
}

// MaxTimestamp returns the largest timestamp appended and its offset, or
// (-1, -1) when none.
func (x *Indexer) MaxTimestamp() (ts, offset int64) { return x.maxTimestamp, x.offsetOfMaxTs }

// BytesSinceLastEntry returns the byte counter the rule compares.
func (x *Indexer) BytesSinceLastEntry() int64 { return x.bytesSinceLastEntry }
