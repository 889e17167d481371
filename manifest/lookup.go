package manifest

import "github.com/tierlog/tierlog/index"

// OffsetInIndex is step 2 of an offset lookup: the entry of the segment's
// remote offset index (its trimmed .index object, as fetched) with the
// largest offset <= offset, or (base, 0). It is the same code the local
// log uses.
func OffsetInIndex(s Segment, indexBytes []byte, offset int64) index.OffsetEntry {
	return index.NewOffsetIndexView(indexBytes, s.BaseOffset).Lookup(offset)
}

// TimestampInIndex looks ts up in the segment's remote time index: the
// entry with the largest timestamp <= ts, or (-1, base).
func TimestampInIndex(s Segment, timeIndexBytes []byte, ts int64) index.TimeEntry {
	return index.NewTimeIndexView(timeIndexBytes, s.BaseOffset).Lookup(ts)
}
