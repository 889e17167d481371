package record

import "fmt"

// maxRecordErrors caps the RecordError list of a ValidationError (the
// total is still counted): a batch of millions of keyless records must not
// cost a record error each.
const maxRecordErrors = 1000

// scanRecords decodes every record of the records area p (decompressed)
// of batch b as Kafka's DefaultRecord.readFrom does, and checks each
// record's offset delta, key and timestamp. It returns the largest record
// timestamp. It allocates only to report an error.
func scanRecords(b Batch, p []byte, now int64, o *LeaderOptions) (int64, error) {
	base, n := b.BaseOffset(), b.NumRecords()
	baseTs := b.BaseTimestamp()
	appendTime := b.TimestampType() == LogAppendTime
	maxTs := NoTimestamp
	var rerr *ValidationError
	pos := 0
	for i := int32(0); i < n; i++ {
		tsDelta, offsetDelta, hasKey, next := nextRecord(p, pos)
		if next < 0 {
			return 0, invalid(ErrBadRecord, base, i, "%s", recordProblem(p[pos:]))
		}
		pos = next
		if offsetDelta != i {
			return 0, invalid(ErrBadOffsets, base, i, "offset delta %d, want %d", offsetDelta, i)
		}
		ts := baseTs + tsDelta // wraps as Java's long does
		if appendTime {
			ts = b.MaxTimestamp()
		}
		if ts > maxTs {
			maxTs = ts
		}
		// Kafka's validateKey, then (only for a record with a key or on a
		// topic that is not compacted) validateTimestamp.
		if o.Compacted && !hasKey {
			rerr = addRecordError(rerr, base, RecordError{Index: i, Kind: ErrMissingKey, Timestamp: ts,
				Detail: "a compacted topic cannot accept a record without a key"})
			continue
		}
		if o.TimestampType == CreateTime && ts != NoTimestamp {
			if diff := now - ts; diff > o.TimestampBeforeMaxMs || -diff > o.TimestampAfterMaxMs {
				rerr = addRecordError(rerr, base, RecordError{Index: i, Kind: ErrInvalidTimestamp, Timestamp: ts,
					Detail: fmt.Sprintf("timestamp %d is out of range; it should be within [%d, %d]",
						ts, now-o.TimestampBeforeMaxMs, now+o.TimestampAfterMaxMs)})
			}
		} else if appendTime {
			rerr = addRecordError(rerr, base, RecordError{Index: i, Kind: ErrInvalidTimestamp, Timestamp: ts,
				Detail: "the producer set the timestamp type to LogAppendTime"})
		}
	}
	if pos != len(p) {
		return 0, invalid(ErrBadRecord, base, -1, "%d bytes after the last of %d records", len(p)-pos, n)
	}
	if rerr != nil {
		return 0, rerr
	}
	return maxTs, nil
}

// addRecordError adds r to the error being collected, making it first.
// The batch fails with ErrInvalidTimestamp if any record's timestamp was
// refused, else with ErrMissingKey (Kafka's processRecordErrors).
func addRecordError(e *ValidationError, base int64, r RecordError) *ValidationError {
	if e == nil {
		e = &ValidationError{Kind: r.Kind, BaseOffset: base, Index: -1}
	}
	if r.Kind == ErrInvalidTimestamp {
		e.Kind = ErrInvalidTimestamp
	}
	if len(e.Records) < maxRecordErrors {
		e.Records = append(e.Records, r)
	}
	e.RecordErrors++
	return e
}

// nextRecord decodes the record at p[pos:]. It returns the position after
// the record, negative when the record does not parse: a varint that is
// too long or does not end, an int32 field past int32 (Kafka reads int32
// varints of at most 5 bytes), a length or count that is negative or runs
// past the record, a null header key, or bytes left in the record after
// its last header.
//
// This is the leader's hot loop: one- and two-byte varints (nearly all of
// a typical record's) are decoded inline by fastVarint, the rest by
// readVarint32Slow and readVarint64Slow.
func nextRecord(p []byte, pos int) (tsDelta int64, offsetDelta int32, hasKey bool, next int) {
	length, at := fastVarint(p, pos)
	if at < 0 {
		length, at = readVarint32Slow(p, pos)
	}
	if at < 0 || length < minRecordSize-1 || int64(length) > int64(len(p)-at) {
		return 0, 0, false, -1
	}
	end := at + int(length)
	body := p[:end]
	pos = at + 1 // after the attributes (unused)
	v, at := fastVarint(body, pos)
	if at >= 0 {
		tsDelta = int64(v)
	} else if tsDelta, at = readVarint64Slow(body, pos); at < 0 {
		return 0, 0, false, -1
	}
	if offsetDelta, pos = fastVarint(body, at); pos < 0 {
		if offsetDelta, pos = readVarint32Slow(body, at); pos < 0 {
			return 0, 0, false, -1
		}
	}
	// The key's length and bytes, then the value's.
	if v, at = fastVarint(body, pos); at < 0 {
		v, at = readVarint32Slow(body, pos)
	}
	if at < 0 || v < -1 || int64(v) > int64(end-at) {
		return 0, 0, false, -1
	}
	hasKey = v >= 0
	pos = at + max(int(v), 0)
	if v, at = fastVarint(body, pos); at < 0 {
		v, at = readVarint32Slow(body, pos)
	}
	if at < 0 || v < -1 || int64(v) > int64(end-at) {
		return 0, 0, false, -1
	}
	pos = at + max(int(v), 0)
	if pos+1 == end && body[pos] == 0 {
		return tsDelta, offsetDelta, hasKey, end // no headers
	}
	count, pos := readVarint32Slow(body, pos)
	if pos < 0 || count < 0 || int64(count) > int64(end-pos) {
		return 0, 0, false, -1
	}
	for j := int32(0); j < count; j++ {
		if v, pos = readVarint32Slow(body, pos); pos < 0 || v < 0 || int64(v) > int64(end-pos) {
			return 0, 0, false, -1 // a null or malformed header key
		}
		pos += int(v)
		if v, pos = readVarint32Slow(body, pos); pos < 0 || v < -1 || int64(v) > int64(end-pos) {
			return 0, 0, false, -1
		}
		pos += max(int(v), 0)
	}
	if pos != end {
		return 0, 0, false, -1
	}
	return tsDelta, offsetDelta, hasKey, end
}

// recordProblem says why nextRecord refused the record at the start of p
// (the error path only).
func recordProblem(p []byte) string {
	length, n := varint32(p)
	switch {
	case n <= 0:
		return "record length is not a well-formed varint"
	case length < minRecordSize-1:
		return fmt.Sprintf("record length %d is below the minimum %d", length, minRecordSize-1)
	case int(length) > len(p)-n:
		return fmt.Sprintf("record of %d bytes runs past the %d left", length, len(p)-n)
	}
	body := p[n : n+int(length)][1:]
	if _, n = varint64(body); n <= 0 {
		return "timestamp delta is not a well-formed varlong"
	}
	body = body[n:]
	if _, n = varint32(body); n <= 0 {
		return "offset delta is not a well-formed varint"
	}
	body = body[n:]
	var ok bool
	if _, body, ok = skipVarBytes(body); !ok {
		return "key length is malformed or runs past the record"
	}
	if _, body, ok = skipVarBytes(body); !ok {
		return "value length is malformed or runs past the record"
	}
	count, n := varint32(body)
	if n <= 0 || count < 0 || int(count) > len(body)-n {
		return fmt.Sprintf("header count %d is malformed or larger than the record", count)
	}
	body = body[n:]
	for j := int32(0); j < count; j++ {
		var kl int32
		if kl, body, ok = skipVarBytes(body); !ok || kl < 0 {
			return fmt.Sprintf("header %d key is null, malformed or runs past the record", j)
		}
		if _, body, ok = skipVarBytes(body); !ok {
			return fmt.Sprintf("header %d value is malformed or runs past the record", j)
		}
	}
	return fmt.Sprintf("%d bytes left in the record after its last header", len(body))
}

// skipVarBytes reads an int32 varint length (-1: null) and skips that many
// bytes.
func skipVarBytes(p []byte) (length int32, rest []byte, ok bool) {
	l, n := varint32(p)
	if n <= 0 || l < -1 || int(l) > len(p)-n {
		return 0, p, false
	}
	if l < 0 {
		return l, p[n:], true
	}
	return l, p[n+int(l):], true
}
