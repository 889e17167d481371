package record

import "math"

// minRecordSize is the smallest encoded v2 record: one byte each for length,
// attributes, timestampDelta, offsetDelta, keyLength, valueLength and
// headersCount.
const minRecordSize = 7

// Header is one record header. A nil Value is a null header value.
type Header struct {
	Key   []byte
	Value []byte
}

// Record is one decoded record. Key, Value and header slices alias the batch
// (or the iterator's decompression buffer) and are valid until the
// iterator's next Reset; copy them to keep them.
type Record struct {
	Offset     int64
	Timestamp  int64
	Attributes int8
	Key        []byte // nil: null key
	Value      []byte // nil: null value, a tombstone
	Headers    []Header
	// Sequence is the producer sequence of the record (baseSequence +
	// offsetDelta with wraparound), or NoSequence.
	Sequence int32
}

// Iterator walks the records of one batch or legacy entry. The zero value is
// ready to use; reuse one Iterator across batches to reuse its buffers.
//
//	var it record.Iterator
//	if err := it.Reset(entry); err != nil { ... }
//	for it.Next() { rec := it.Record() ... }
//	if err := it.Err(); err != nil { ... }
type Iterator struct {
	// Decompressor decompresses compressed payloads; set its Max to change
	// the cap on decompressed bytes.
	Decompressor Decompressor

	// v2 state
	base       int64
	baseTs     int64
	appendTime int64 // LogAppendTime batches: every record's timestamp; else -1
	baseSeq    int32
	data       []byte
	left       int32
	lastDelta  int32

	// legacy state
	legacy legacyIter

	isLegacy bool
	rec      Record
	err      error
	headers  []Header
}

// Reset starts iterating the records of entry, which holds one v2 batch or
// one legacy (magic 0/1) entry as Parse, ParseLegacy or a Scanner return it.
// It decompresses the payload if needed; it does not check the CRC (call
// Validate first for untrusted bytes).
func (it *Iterator) Reset(entry []byte) error {
	it.err = nil
	it.left = 0
	it.isLegacy = false
	if len(entry) < HeaderSizeToMagic {
		it.err = batchErr(ErrBadSize, -1, "entry of %d bytes", len(entry))
		return it.err
	}
	if entry[offMagic] < 2 {
		it.isLegacy = true
		le, err := ParseLegacy(entry)
		if err != nil {
			it.err = err
			return err
		}
		it.err = it.legacy.reset(le, &it.Decompressor)
		return it.err
	}
	b, err := Parse(entry)
	if err != nil {
		it.err = err
		return err
	}
	if len(b) < BatchHeaderSize {
		it.err = batchErr(ErrBadSize, b.BaseOffset(), "%d bytes is below the v2 minimum %d", len(b), BatchHeaderSize)
		return it.err
	}
	it.base = b.BaseOffset()
	it.baseTs = b.BaseTimestamp()
	it.appendTime = -1
	if b.TimestampType() == LogAppendTime {
		it.appendTime = b.MaxTimestamp()
	}
	it.baseSeq = b.BaseSequence()
	it.left = b.NumRecords()
	it.lastDelta = b.LastOffsetDelta()
	if it.left < 0 {
		it.err = batchErr(ErrBadRecord, it.base, "records count %d", it.left)
		return it.err
	}
	payload := b[BatchHeaderSize:]
	if c := b.Codec(); c != None {
		payload, err = it.Decompressor.Decompress(c, payload)
		if err != nil {
			it.left = 0
			var be *BatchError
			if asBatchErr(err, &be) {
				be.BaseOffset = it.base
			}
			it.err = err
			return err
		}
	}
	it.data = payload
	if int64(it.left)*minRecordSize > int64(len(payload)) {
		it.err = batchErr(ErrBadRecord, it.base, "%d records cannot fit in %d bytes", it.left, len(payload))
		it.left = 0
		return it.err
	}
	return nil
}

// Next decodes the next record and reports whether there is one. After the
// last record it checks that the batch holds no trailing bytes.
func (it *Iterator) Next() bool {
	if it.err != nil {
		return false
	}
	if it.isLegacy {
		ok, err := it.legacy.next(&it.rec)
		it.err = err
		return ok
	}
	if it.left == 0 {
		if len(it.data) != 0 {
			it.err = batchErr(ErrBadRecord, it.base, "%d bytes after the last record", len(it.data))
			it.data = nil
		}
		return false
	}
	it.left--
	if err := it.decode(); err != nil {
		it.err = err
		it.left = 0
		return false
	}
	return true
}

// SkipTo moves past the records before offset without decoding their
// keys, values and headers, so that the next Next returns the first record
// at or after offset: finding one record in a batch reads three varints of
// each record before it. It stops early at a record whose length,
// timestamp delta or offset delta Next would refuse (skipFast reads the
// common record's, head any other, as Next does), which the next Next
// then reports; the keys, values and headers it skips are not checked.
// Legacy (magic 0/1) entries are not skipped.
func (it *Iterator) SkipTo(offset int64) {
	if it.err != nil || it.isLegacy {
		return
	}
	for it.left > 0 {
		if end, delta, ok := skipFast(it.data); ok {
			if it.base+int64(delta) >= offset {
				return
			}
			it.data = it.data[end:]
			it.left--
			continue
		}
		_, _, delta, _, rest, err := it.head(it.data)
		if err != nil || it.base+int64(delta) >= offset {
			return
		}
		it.data = rest
		it.left--
	}
}

// skipFast reads the framing of the record at the start of p as head
// does, for the common record only: its length, timestamp delta and
// offset delta each a varint of one or two bytes. It returns the record's
// end and its offset delta; ok is false for any other record (longer
// varints, or one head would refuse), which head then reads. A finding
// of one record costs the three varints and no slice of its body.
func skipFast(p []byte) (end int, offDelta int32, ok bool) {
	length, at := fastVarint(p, 0)
	if at < 0 || length < minRecordSize-1 || int(length) > len(p)-at {
		return 0, 0, false
	}
	end = at + int(length)
	body := p[:end]
	_, at = fastVarint(body, at+1) // after the attributes: the timestamp delta
	if at < 0 {
		return 0, 0, false
	}
	offDelta, at = fastVarint(body, at)
	return end, offDelta, at >= 0
}

// FirstAtOrAfter resets the iterator to entry and returns its first record
// with a timestamp at or after ts and an offset at or after start (a
// timestamp lookup's answer inside one batch); found is false when it has
// none. Errors are Reset's and Err's.
func (it *Iterator) FirstAtOrAfter(entry []byte, ts, start int64) (offset, timestamp int64, found bool, err error) {
	if err := it.Reset(entry); err != nil {
		return 0, 0, false, err
	}
	for it.Next() {
		if r := it.Record(); r.Timestamp >= ts && r.Offset >= start {
			return r.Offset, r.Timestamp, true, nil
		}
	}
	return 0, 0, false, it.Err()
}

// Record returns the current record; valid until the next call to Next.
func (it *Iterator) Record() *Record { return &it.rec }

// Err returns the error that stopped iteration, or nil at a clean end.
func (it *Iterator) Err() error { return it.err }

// head reads the framing of the record at the start of p, as decode and
// SkipTo read every record: its length, attributes, timestamp delta and
// offset delta. It returns them with the rest of the record's body (from
// the key length on) and the bytes after the record.
func (it *Iterator) head(p []byte) (attrs int8, tsDelta int64, offDelta int32, body, rest []byte, err error) {
	length, n := varint64(p)
	if n <= 0 || length < minRecordSize-1 || length > math.MaxInt32 {
		return 0, 0, 0, nil, nil, batchErr(ErrBadRecord, it.base, "record length varint %d (n=%d)", length, n)
	}
	p = p[n:]
	if int64(len(p)) < length {
		return 0, 0, 0, nil, nil, batchErr(ErrBadRecord, it.base, "record of %d bytes runs past the %d left", length, len(p))
	}
	body, rest = p[:length], p[length:]
	attrs = int8(body[0])
	body = body[1:]
	tsDelta, n = varint64(body)
	if n <= 0 {
		return 0, 0, 0, nil, nil, batchErr(ErrBadRecord, it.base, "timestamp delta")
	}
	body = body[n:]
	d, n := varint64(body)
	if n <= 0 || d < math.MinInt32 || d > math.MaxInt32 {
		return 0, 0, 0, nil, nil, batchErr(ErrBadRecord, it.base, "offset delta")
	}
	return attrs, tsDelta, int32(d), body[n:], rest, nil
}

func (it *Iterator) decode() error {
	attrs, tsDelta, offDelta, body, rest, err := it.head(it.data)
	if err != nil {
		return err
	}
	it.data = rest

	r := &it.rec
	r.Attributes = attrs
	r.Offset = it.base + int64(offDelta)
	if it.appendTime >= 0 {
		r.Timestamp = it.appendTime
	} else {
		r.Timestamp = it.baseTs + tsDelta
	}
	r.Sequence = NoSequence
	if it.baseSeq != NoSequence {
		r.Sequence = incrementSequence(it.baseSeq, offDelta)
	}
	var ok bool
	if r.Key, body, ok = readVarBytes(body); !ok {
		return batchErr(ErrBadRecord, it.base, "key at offset %d", r.Offset)
	}
	if r.Value, body, ok = readVarBytes(body); !ok {
		return batchErr(ErrBadRecord, it.base, "value at offset %d", r.Offset)
	}
	count, n := varint64(body)
	if n <= 0 || count < 0 || count > int64(len(body)) {
		return batchErr(ErrBadRecord, it.base, "header count %d at offset %d", count, r.Offset)
	}
	body = body[n:]
	it.headers = it.headers[:0]
	for i := int64(0); i < count; i++ {
		var h Header
		if h.Key, body, ok = readVarBytes(body); !ok || h.Key == nil {
			return batchErr(ErrBadRecord, it.base, "header %d key at offset %d", i, r.Offset)
		}
		if h.Value, body, ok = readVarBytes(body); !ok {
			return batchErr(ErrBadRecord, it.base, "header %d value at offset %d", i, r.Offset)
		}
		it.headers = append(it.headers, h)
	}
	r.Headers = it.headers
	if len(body) != 0 {
		return batchErr(ErrBadRecord, it.base, "record at offset %d has %d bytes past its last header", r.Offset, len(body))
	}
	return nil
}

// readVarBytes reads a varint length (-1 = null) and that many bytes.
func readVarBytes(p []byte) (v, rest []byte, ok bool) {
	l, n := varint64(p)
	if n <= 0 || l < -1 || l > int64(len(p)-n) {
		return nil, p, false
	}
	p = p[n:]
	if l < 0 {
		return nil, p, true
	}
	return p[:l:l], p[l:], true
}

func asBatchErr(err error, target **BatchError) bool {
	be, ok := err.(*BatchError)
	if ok {
		*target = be
	}
	return ok
}
