package record_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/klauspost/compress/zstd"

	"github.com/tierlog/tierlog/record"
)

const nowMs = int64(1_700_000_000_000)

var allCodecs = []record.Codec{record.None, record.GZIP, record.Snappy, record.LZ4, record.ZSTD}

// validationClasses are the four classes a *ValidationError matches
// exactly one of, each a Kafka error code.
var validationClasses = []error{record.ErrCorrupt, record.ErrMessageTooLarge, record.ErrInvalidTimestamp, record.ErrInvalidRecord}

// rawRec is one record as a (possibly broken) producer encodes it.
type rawRec struct {
	tsDelta  int64
	offDelta int32
	key, val []byte
	headers  []record.Header
}

// encRecords encodes records with canonical varints, as Kafka's producer
// does.
func encRecords(recs ...rawRec) []byte {
	var out []byte
	for _, r := range recs {
		body := []byte{0}
		body = binary.AppendVarint(body, r.tsDelta)
		body = binary.AppendVarint(body, int64(r.offDelta))
		body = appendVB(body, r.key)
		body = appendVB(body, r.val)
		body = binary.AppendVarint(body, int64(len(r.headers)))
		for _, h := range r.headers {
			body = appendVB(body, h.Key)
			body = appendVB(body, h.Value)
		}
		out = binary.AppendVarint(out, int64(len(body)))
		out = append(out, body...)
	}
	return out
}

func appendVB(p, b []byte) []byte {
	if b == nil {
		return binary.AppendVarint(p, -1)
	}
	return append(binary.AppendVarint(p, int64(len(b))), b...)
}

// goodRecs returns n keyed records at offset deltas 0..n-1, timestamps now.
func goodRecs(n int) []rawRec {
	recs := make([]rawRec, n)
	for i := range recs {
		recs[i] = rawRec{offDelta: int32(i), key: fmt.Appendf(nil, "k%d", i), val: []byte("value")}
	}
	return recs
}

// hdr is a batch header a test writes field by field.
type hdr struct {
	base          int64
	magic         int8
	attrs         record.Attributes
	lastDelta     int32
	baseTs, maxTs int64
	pid           int64
	epoch         int16
	seq           int32
	count         int32
}

func clientHdr(n int) hdr {
	return hdr{magic: 2, lastDelta: int32(n - 1), baseTs: nowMs, maxTs: nowMs, pid: -1, epoch: -1, seq: -1, count: int32(n)}
}

// rawBatch assembles a batch from h and a records area (already
// compressed when h.attrs names a codec), with a length and a CRC computed
// over whatever it holds: a producer that checksums malformed records.
func rawBatch(h hdr, area []byte) record.Batch {
	be := binary.BigEndian
	b := make([]byte, record.BatchHeaderSize, record.BatchHeaderSize+len(area))
	be.PutUint64(b[0:], uint64(h.base))
	be.PutUint32(b[8:], uint32(record.BatchHeaderSize+len(area)-record.LogOverhead))
	be.PutUint32(b[12:], math.MaxUint32) // no leader epoch
	b[16] = byte(h.magic)
	be.PutUint16(b[21:], uint16(h.attrs))
	be.PutUint32(b[23:], uint32(h.lastDelta))
	be.PutUint64(b[27:], uint64(h.baseTs))
	be.PutUint64(b[35:], uint64(h.maxTs))
	be.PutUint64(b[43:], uint64(h.pid))
	be.PutUint16(b[51:], uint16(h.epoch))
	be.PutUint32(b[53:], uint32(h.seq))
	be.PutUint32(b[57:], uint32(h.count))
	b = append(b, area...)
	be.PutUint32(b[17:], record.CRC32C(b[21:]))
	return b
}

func zstdArea(t testing.TB, p []byte) []byte {
	t.Helper()
	enc, err := zstd.NewWriter(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer enc.Close()
	return enc.EncodeAll(p, nil)
}

// built returns a producer's batch of recs (offset deltas 0..n-1) built
// with the Builder and codec c.
func built(t testing.TB, c record.Codec, h record.BatchHeader, recs []rawRec) record.Batch {
	t.Helper()
	var b record.Builder
	h.Codec = c
	b.Reset(h)
	for _, r := range recs {
		b.Append(nowMs+r.tsDelta, r.key, r.val, r.headers)
	}
	out, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	return append(record.Batch(nil), out...)
}

// checkClass fails unless err matches kind and exactly the one class
// wantClass.
func checkClass(t *testing.T, err, kind, wantClass error) {
	t.Helper()
	if !errors.Is(err, kind) {
		t.Fatalf("error %v, want kind %v", err, kind)
	}
	var ve *record.ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("error %T %v is not a *ValidationError", err, err)
	}
	var matched []error
	for _, c := range validationClasses {
		if errors.Is(err, c) {
			matched = append(matched, c)
		}
	}
	if len(matched) != 1 || matched[0] != wantClass {
		t.Fatalf("error %v matches classes %v, want exactly %v", err, matched, wantClass)
	}
}

func opts(mod func(*record.LeaderOptions)) record.LeaderOptions {
	o := record.DefaultLeaderOptions()
	if mod != nil {
		mod(&o)
	}
	return o
}

func TestValidateForLeaderRules(t *testing.T) {
	three := encRecords(goodRecs(3)...)
	// A record whose key length is a 6-byte (non-canonical) varint: Go's
	// binary.Varint reads it, Kafka's readVarint refuses it.
	longVarint := []byte{0, 0, 0, 0x82, 0x80, 0x80, 0x80, 0x80, 0x00, 'k', 1, 0}
	longVarint = append([]byte{byte(len(longVarint) << 1)}, longVarint...)
	// A key length whose fifth varint byte has bits past 32.
	fifthByte := []byte{0, 0, 0, 0x82, 0x80, 0x80, 0x80, 0x10, 'k', 1, 0}
	fifthByte = append([]byte{byte(len(fifthByte) << 1)}, fifthByte...)
	// The record length varint never ends.
	endless := bytes.Repeat([]byte{0xff}, 12)
	// A record that claims one byte more than its fields, and has it.
	extraInRecord := []byte{0, 0, 0, 2, 'k', 1, 0, 0xaa}
	extraInRecord = append([]byte{byte(len(extraInRecord) << 1)}, extraInRecord...)
	negHeaders := []byte{0, 0, 0, 2, 'k', 1, 1} // header count -1
	negHeaders = append([]byte{byte(len(negHeaders) << 1)}, negHeaders...)
	nullHeaderKey := encRecords(rawRec{key: []byte("k"), headers: []record.Header{{Key: nil, Value: []byte("v")}}})
	shortRecord := []byte{40, 0, 0, 0, 2, 'k', 1, 0} // length 20, 7 bytes follow

	withDeltas := func(ds ...int32) []byte {
		recs := goodRecs(len(ds))
		for i := range recs {
			recs[i].offDelta = ds[i]
		}
		return encRecords(recs...)
	}
	h3 := clientHdr(3)
	h1 := clientHdr(1)
	with := func(h hdr, f func(*hdr)) hdr { f(&h); return h }

	keyless := goodRecs(4)
	keyless[1].key, keyless[3].key = nil, nil
	tsRecs := goodRecs(5)
	tsRecs[0].tsDelta = -1000      // at the before limit: accepted
	tsRecs[1].tsDelta = 500        // at the after limit: accepted
	tsRecs[2].tsDelta = -1001      // too old
	tsRecs[3].tsDelta = 501        // too new
	tsRecs[4].tsDelta = -1 - nowMs // NoTimestamp: never checked
	tsOpts := func(o *record.LeaderOptions) { o.TimestampBeforeMaxMs, o.TimestampAfterMaxMs = 1000, 500 }
	keyAndTs := goodRecs(3)
	keyAndTs[0].key = nil
	keyAndTs[0].tsDelta = 10_000 // key error only: Kafka checks the timestamp of a keyed record
	keyAndTs[2].tsDelta = 10_000

	var marker record.Builder
	control, err := marker.BuildEndTxnMarker(record.EndTxnMarker{ProducerID: 7, Commit: true, Timestamp: nowMs})
	if err != nil {
		t.Fatal(err)
	}
	control = append(record.Batch(nil), control...)

	cases := []struct {
		name  string
		batch record.Batch
		opts  func(*record.LeaderOptions)
		kind  error // nil: accepted
		class error
		index int32 // the ValidationError's Index; -2: not checked
		// recs lists the indexes of the per-record errors expected.
		recs []int32
		// crcOK says the header-only Batch.Validate accepts the batch:
		// what leader appends let through before.
		crcOK bool
	}{
		{name: "valid", batch: rawBatch(h3, three), crcOK: true},
		{name: "record length varint never ends", batch: rawBatch(h1, endless), kind: record.ErrBadRecord, class: record.ErrInvalidRecord, index: 0, crcOK: true},
		{name: "int32 varint of 6 bytes", batch: rawBatch(h1, longVarint), kind: record.ErrBadRecord, class: record.ErrInvalidRecord, index: 0, crcOK: true},
		{name: "int32 varint past 32 bits", batch: rawBatch(h1, fifthByte), kind: record.ErrBadRecord, class: record.ErrInvalidRecord, index: 0, crcOK: true},
		{name: "record runs past the batch", batch: rawBatch(h1, shortRecord), kind: record.ErrBadRecord, class: record.ErrInvalidRecord, index: 0, crcOK: true},
		{name: "bytes left inside a record", batch: rawBatch(h1, extraInRecord), kind: record.ErrBadRecord, class: record.ErrInvalidRecord, index: 0, crcOK: true},
		{name: "negative header count", batch: rawBatch(h1, negHeaders), kind: record.ErrBadRecord, class: record.ErrInvalidRecord, index: 0, crcOK: true},
		{name: "null header key", batch: rawBatch(h1, nullHeaderKey), kind: record.ErrBadRecord, class: record.ErrInvalidRecord, index: 0, crcOK: true},
		{name: "garbage after the last record", batch: rawBatch(h3, append(append([]byte(nil), three...), 0, 0, 0)), kind: record.ErrBadRecord, class: record.ErrInvalidRecord, index: -1, crcOK: true},
		{name: "count above the records", batch: rawBatch(with(h3, func(h *hdr) { h.count, h.lastDelta = 4, 3 }), three), kind: record.ErrBadRecord, class: record.ErrInvalidRecord, index: 3, crcOK: true},
		{name: "count below the records", batch: rawBatch(with(h3, func(h *hdr) { h.count, h.lastDelta = 2, 1 }), three), kind: record.ErrBadRecord, class: record.ErrInvalidRecord, index: -1, crcOK: true},
		{name: "count and last offset delta disagree", batch: rawBatch(with(h3, func(h *hdr) { h.lastDelta = 3 }), three), kind: record.ErrBadOffsets, class: record.ErrInvalidRecord, index: -1, crcOK: true},
		{name: "offset deltas skip", batch: rawBatch(h3, withDeltas(0, 2, 2)), kind: record.ErrBadOffsets, class: record.ErrInvalidRecord, index: 1, crcOK: true},
		{name: "offset deltas repeat", batch: rawBatch(h3, withDeltas(0, 0, 1)), kind: record.ErrBadOffsets, class: record.ErrInvalidRecord, index: 1, crcOK: true},
		{name: "offset deltas start at 1", batch: rawBatch(h3, withDeltas(1, 2, 3)), kind: record.ErrBadOffsets, class: record.ErrInvalidRecord, index: 0, crcOK: true},
		{name: "no records", batch: rawBatch(with(h1, func(h *hdr) { h.count, h.lastDelta = 0, -1 }), nil), kind: record.ErrBadOffsets, class: record.ErrInvalidRecord, index: -1},
		{name: "base offset not 0", batch: rawBatch(with(h3, func(h *hdr) { h.base = 42 }), three), kind: record.ErrBadOffsets, class: record.ErrInvalidRecord, index: -1, crcOK: true},
		{name: "control batch", batch: control, kind: record.ErrControlBatch, class: record.ErrInvalidRecord, index: -1, crcOK: true},
		{name: "producer id without a sequence", batch: rawBatch(with(h3, func(h *hdr) { h.pid, h.epoch = 5, 0 }), three), kind: record.ErrNoSequence, class: record.ErrInvalidRecord, index: -1, crcOK: true},
		{name: "idempotent batch", batch: rawBatch(with(h3, func(h *hdr) { h.pid, h.epoch, h.seq = 5, 0, 0 }), three), crcOK: true},
		{name: "magic 1", batch: rawBatch(with(h3, func(h *hdr) { h.magic = 1 }), three), kind: record.ErrLegacyMagic, class: record.ErrInvalidRecord, index: -1},
		{name: "magic 3", batch: rawBatch(with(h3, func(h *hdr) { h.magic = 3 }), three), kind: record.ErrBadMagic, class: record.ErrCorrupt, index: -1},
		{name: "crc mismatch", batch: func() record.Batch { b := rawBatch(h3, three); b[len(b)-1] ^= 1; return b }(), kind: record.ErrCRCMismatch, class: record.ErrCorrupt, index: -1},
		{name: "length field past the bytes", batch: rawBatch(h3, three)[:70], kind: record.ErrBadSize, class: record.ErrCorrupt, index: -1},
		{name: "shorter than a header", batch: rawBatch(h3, three)[:12], kind: record.ErrBadSize, class: record.ErrCorrupt, index: -1},
		{name: "unknown codec", batch: rawBatch(with(h3, func(h *hdr) { h.attrs = 5 }), three), kind: record.ErrUnknownCodec, class: record.ErrInvalidRecord, index: -1},
		{name: "compressed stream that does not decode", batch: rawBatch(with(h3, func(h *hdr) { h.attrs = record.Attributes(record.ZSTD) }), three), kind: record.ErrBadRecord, class: record.ErrInvalidRecord, index: -1, crcOK: true},
		{name: "compressed malformed record", batch: rawBatch(with(h1, func(h *hdr) { h.attrs = record.Attributes(record.ZSTD) }), zstdArea(t, longVarint)), kind: record.ErrBadRecord, class: record.ErrInvalidRecord, index: 0, crcOK: true},
		{name: "compressed offsets skip", batch: rawBatch(with(h3, func(h *hdr) { h.attrs = record.Attributes(record.ZSTD) }), zstdArea(t, withDeltas(0, 1, 5))), kind: record.ErrBadOffsets, class: record.ErrInvalidRecord, index: 2, crcOK: true},
		{name: "decompresses past the cap", batch: rawBatch(with(h3, func(h *hdr) { h.attrs = record.Attributes(record.ZSTD) }), zstdArea(t, three)), opts: func(o *record.LeaderOptions) { o.MaxDecompressedBytes = 8 }, kind: record.ErrTooLarge, class: record.ErrMessageTooLarge, index: -1, crcOK: true},
		{name: "larger than max.message.bytes", batch: rawBatch(h3, three), opts: func(o *record.LeaderOptions) { o.MaxMessageBytes = 70 }, kind: record.ErrMessageTooLarge, class: record.ErrMessageTooLarge, index: -1, crcOK: true},
		{name: "keyless records on a compacted topic", batch: rawBatch(clientHdr(4), encRecords(keyless...)), opts: func(o *record.LeaderOptions) { o.Compacted = true }, kind: record.ErrMissingKey, class: record.ErrInvalidRecord, index: -1, recs: []int32{1, 3}, crcOK: true},
		{name: "keyless records on a deleted topic", batch: rawBatch(clientHdr(4), encRecords(keyless...)), crcOK: true},
		{name: "empty key on a compacted topic", batch: rawBatch(h1, encRecords(rawRec{key: []byte{}})), opts: func(o *record.LeaderOptions) { o.Compacted = true }, crcOK: true},
		{name: "timestamps too old and too new", batch: rawBatch(clientHdr(5), encRecords(tsRecs...)), opts: tsOpts, kind: record.ErrInvalidTimestamp, class: record.ErrInvalidTimestamp, index: -1, recs: []int32{2, 3}, crcOK: true},
		{name: "timestamps within the limits", batch: rawBatch(clientHdr(2), encRecords(tsRecs[:2]...)), opts: tsOpts, crcOK: true},
		{name: "timestamps are not checked on a LogAppendTime topic", batch: rawBatch(clientHdr(5), encRecords(tsRecs...)),
			opts: func(o *record.LeaderOptions) { tsOpts(o); o.TimestampType = record.LogAppendTime }, crcOK: true},
		{name: "a key error hides the record's timestamp; a timestamp error makes the batch INVALID_TIMESTAMP", batch: rawBatch(h3, encRecords(keyAndTs...)),
			opts: func(o *record.LeaderOptions) { tsOpts(o); o.Compacted = true }, kind: record.ErrInvalidTimestamp, class: record.ErrInvalidTimestamp, index: -1, recs: []int32{0, 2}, crcOK: true},
		{name: "LogAppendTime from a producer on a LogAppendTime topic", batch: rawBatch(with(h3, func(h *hdr) { h.attrs = record.AttrLogAppendTime }), three),
			opts: func(o *record.LeaderOptions) { o.TimestampType = record.LogAppendTime }, kind: record.ErrInvalidTimestamp, class: record.ErrInvalidTimestamp, index: -1, recs: []int32{0, 1, 2}, crcOK: true},
		{name: "LogAppendTime from a producer in range on a CreateTime topic", batch: rawBatch(with(h3, func(h *hdr) { h.attrs = record.AttrLogAppendTime }), three), crcOK: true},
		{name: "LogAppendTime from a producer out of range on a CreateTime topic", batch: rawBatch(with(h3, func(h *hdr) { h.attrs, h.maxTs = record.AttrLogAppendTime, nowMs+2*3600000 }), three),
			kind: record.ErrInvalidTimestamp, class: record.ErrInvalidTimestamp, index: -1, recs: []int32{0, 1, 2}, crcOK: true},
		{name: "LogAppendTime without a timestamp on a CreateTime topic", batch: rawBatch(with(h3, func(h *hdr) { h.attrs, h.maxTs = record.AttrLogAppendTime, -1 }), three),
			kind: record.ErrInvalidTimestamp, class: record.ErrInvalidTimestamp, index: -1, recs: []int32{0, 1, 2}, crcOK: true},
	}
	var v record.Validator
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.batch.Validate() == nil; got != tc.crcOK && len(tc.batch) >= record.BatchHeaderSize {
				t.Fatalf("header-only Validate accepts: %v, want %v", got, tc.crcOK)
			}
			res, err := v.ValidateForLeader(tc.batch, nowMs, opts(tc.opts))
			if tc.kind == nil {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				if res.Rewritten || &res.Batch[0] != &tc.batch[0] || res.Records != tc.batch.NumRecords() {
					t.Fatalf("result %+v", res)
				}
				checkIterates(t, res.Batch, tc.batch)
				return
			}
			checkClass(t, err, tc.kind, tc.class)
			var ve *record.ValidationError
			errors.As(err, &ve)
			if tc.index != -2 && ve.Index != tc.index {
				t.Fatalf("index %d, want %d: %v", ve.Index, tc.index, err)
			}
			var got []int32
			for _, r := range ve.Records {
				got = append(got, r.Index)
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.recs) || ve.RecordErrors != len(tc.recs) {
				t.Fatalf("record errors at %v (%d), want %v: %v", got, ve.RecordErrors, tc.recs, err)
			}
			if err.Error() == "" {
				t.Fatal("empty message")
			}
		})
	}
}

// checkIterates fails unless the Iterator decodes accepted batch b with
// its count of records at its offsets, the same records as orig.
func checkIterates(t *testing.T, b, orig record.Batch) {
	t.Helper()
	got, err := decodeAll(b)
	if err != nil {
		t.Fatalf("accepted batch does not iterate: %v", err)
	}
	want, err := decodeAll(orig)
	if err != nil {
		t.Fatalf("original batch does not iterate: %v", err)
	}
	if len(got) != int(b.NumRecords()) {
		t.Fatalf("iterated %d records, count %d", len(got), b.NumRecords())
	}
	if len(got) != len(want) {
		t.Fatalf("%d records, the original has %d", len(got), len(want))
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("record %d: %s, originally %s", i, got[i], want[i])
		}
		if want := fmt.Sprintf("offset %d ", b.BaseOffset()+int64(i)); got[i][:len(want)] != want {
			t.Fatalf("record %d: %s", i, got[i])
		}
	}
}

// decodeAll renders every record of b as a comparable string.
func decodeAll(b record.Batch) ([]string, error) {
	var it record.Iterator
	if err := it.Reset(b); err != nil {
		return nil, err
	}
	var out []string
	for it.Next() {
		r := it.Record()
		s := fmt.Sprintf("offset %d ts %d seq %d key %q/%v value %q/%v headers", r.Offset, r.Timestamp, r.Sequence,
			r.Key, r.Key == nil, r.Value, r.Value == nil)
		for _, h := range r.Headers {
			s += fmt.Sprintf(" %q=%q/%v", h.Key, h.Value, h.Value == nil)
		}
		out = append(out, s)
	}
	return out, it.Err()
}

// TestValidateForLeaderStricterThanIterator: the Iterator decodes the
// 6-byte varint a leader refuses (Go reads it, Kafka does not), which is
// why the validator checks varint widths itself.
func TestValidateForLeaderStricterThanIterator(t *testing.T) {
	rec := []byte{0, 0, 0, 0x82, 0x80, 0x80, 0x80, 0x80, 0x00, 'k', 1, 0}
	rec = append([]byte{byte(len(rec) << 1)}, rec...)
	b := rawBatch(clientHdr(1), rec)
	if _, err := decodeAll(b); err != nil {
		t.Fatalf("the Iterator refuses it too (then this test is moot): %v", err)
	}
	if _, err := record.ValidateForLeader(b, nowMs, record.DefaultLeaderOptions()); !errors.Is(err, record.ErrBadRecord) {
		t.Fatalf("leader validation: %v", err)
	}
}

func TestValidateForLeaderEveryCodec(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	h := record.NewBatchHeader()
	h.ProducerID, h.ProducerEpoch, h.BaseSequence, h.Transactional = 99, 3, 17, true
	recs := randomRawRecs(rng, 300)
	var v record.Validator
	for _, c := range allCodecs {
		t.Run(c.String(), func(t *testing.T) {
			b := built(t, c, h, recs)
			res, err := v.ValidateForLeader(b, nowMs, record.DefaultLeaderOptions())
			if err != nil {
				t.Fatal(err)
			}
			if res.Rewritten || res.Records != 300 || res.MaxTimestamp != b.MaxTimestamp() {
				t.Fatalf("result: rewritten %v records %d max ts %d (header %d)", res.Rewritten, res.Records, res.MaxTimestamp, b.MaxTimestamp())
			}
			checkIterates(t, res.Batch, b)
			// The same batch on a topic whose compression.type is its own
			// codec is not rewritten either.
			if res, err = v.ValidateForLeader(b, nowMs, opts(func(o *record.LeaderOptions) { o.Compression = record.CompressWith(c) })); err != nil || res.Rewritten {
				t.Fatalf("compression.type %s: rewritten %v, %v", c, res.Rewritten, err)
			}
		})
	}
}

func randomRawRecs(rng *rand.Rand, n int) []rawRec {
	recs := make([]rawRec, n)
	for i := range recs {
		r := rawRec{offDelta: int32(i), tsDelta: int64(rng.IntN(2000)) - 1000}
		if rng.IntN(5) != 0 {
			r.key = fmt.Appendf(nil, "key-%d", rng.IntN(100))
		}
		if rng.IntN(10) != 0 {
			r.val = bytes.Repeat([]byte{byte('a' + rng.IntN(26))}, rng.IntN(200))
		}
		for j := rng.IntN(3); j > 0; j-- {
			var v []byte
			if rng.IntN(3) != 0 {
				v = []byte{byte(j)}
			}
			r.headers = append(r.headers, record.Header{Key: fmt.Appendf(nil, "h%d", j), Value: v})
		}
		recs[i] = r
	}
	return recs
}

// TestValidateForLeaderRecompresses: with compression.type naming another
// codec, the batch comes back recompressed, decoding to the same records,
// with its producer fields and attributes but the codec, and a valid CRC.
func TestValidateForLeaderRecompresses(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	h := record.NewBatchHeader()
	h.ProducerID, h.ProducerEpoch, h.BaseSequence, h.Transactional = 99, 3, 17, true
	recs := randomRawRecs(rng, 200)
	var v record.Validator
	for _, from := range allCodecs {
		for _, to := range allCodecs {
			if from == to {
				continue
			}
			t.Run(from.String()+"-to-"+to.String(), func(t *testing.T) {
				b := built(t, from, h, recs)
				// A producer's wrong maxTimestamp is corrected in the
				// rebuilt batch.
				binary.BigEndian.PutUint64(b[35:], uint64(nowMs-5000))
				binary.BigEndian.PutUint32(b[17:], b.ComputeCRC())
				o := opts(func(o *record.LeaderOptions) { o.Compression = record.CompressWith(to) })
				res, err := v.ValidateForLeader(b, nowMs, o)
				if err != nil {
					t.Fatal(err)
				}
				out := res.Batch
				if !res.Rewritten || out.Codec() != to {
					t.Fatalf("rewritten %v codec %v", res.Rewritten, out.Codec())
				}
				if err := out.Validate(); err != nil {
					t.Fatal(err)
				}
				if out.Attributes()&^record.AttrCodecMask != b.Attributes()&^record.AttrCodecMask ||
					out.ProducerID() != 99 || out.ProducerEpoch() != 3 || out.BaseSequence() != 17 ||
					out.BaseTimestamp() != b.BaseTimestamp() || out.LastOffsetDelta() != 199 || out.NumRecords() != 200 ||
					out.PartitionLeaderEpoch() != b.PartitionLeaderEpoch() {
					t.Fatalf("header fields changed: %x\nfrom %x", []byte(out[:61]), []byte(b[:61]))
				}
				if out.MaxTimestamp() != res.MaxTimestamp || res.MaxTimestamp == nowMs-5000 {
					t.Fatalf("max timestamp %d, records' largest %d", out.MaxTimestamp(), res.MaxTimestamp)
				}
				checkIterates(t, out, b)
				// The rebuilt batch passes again, untouched.
				again, err := v.ValidateForLeader(append(record.Batch(nil), out...), nowMs, o)
				if err != nil || again.Rewritten {
					t.Fatalf("revalidating the rebuilt batch: rewritten %v, %v", again.Rewritten, err)
				}
			})
		}
	}
}

func TestValidateForLeaderRecompressedTooLarge(t *testing.T) {
	vals := make([]rawRec, 50)
	for i := range vals {
		vals[i] = rawRec{offDelta: int32(i), val: bytes.Repeat([]byte("x"), 100)}
	}
	b := built(t, record.ZSTD, record.NewBatchHeader(), vals)
	_, err := record.ValidateForLeader(b, nowMs, opts(func(o *record.LeaderOptions) {
		o.Compression, o.MaxMessageBytes = record.CompressWith(record.None), int64(len(b))+100
	}))
	checkClass(t, err, record.ErrMessageTooLarge, record.ErrMessageTooLarge)
}

func TestValidateForLeaderMaxTimestamp(t *testing.T) {
	recs := goodRecs(3)
	recs[1].tsDelta = 70
	b := rawBatch(clientHdr(3), encRecords(recs...)) // maxTimestamp says now, the largest is now+70
	res, err := record.ValidateForLeader(b, nowMs, record.DefaultLeaderOptions())
	if err != nil {
		t.Fatal(err)
	}
	if res.MaxTimestamp != nowMs+70 {
		t.Fatalf("max timestamp %d", res.MaxTimestamp)
	}
	res.Batch.SetMaxTimestamp(res.MaxTimestamp)
	if err := res.Batch.Validate(); err != nil || res.Batch.MaxTimestamp() != nowMs+70 {
		t.Fatalf("after SetMaxTimestamp: %v, %d", err, res.Batch.MaxTimestamp())
	}
	crc := res.Batch.CRC()
	res.Batch.SetMaxTimestamp(nowMs + 70)
	if res.Batch.CRC() != crc {
		t.Fatal("SetMaxTimestamp to the same value rewrote the CRC")
	}
}

func TestLeaderOptions(t *testing.T) {
	d := record.DefaultLeaderOptions()
	if d.TimestampType != record.CreateTime || d.TimestampBeforeMaxMs != math.MaxInt64 || d.TimestampAfterMaxMs != 3600000 ||
		d.MaxMessageBytes != 1048588 || d.Compression != record.CompressionProducer || d.Compacted {
		t.Fatalf("defaults %+v", d)
	}
	for _, bad := range []func(*record.LeaderOptions){
		func(o *record.LeaderOptions) { o.TimestampBeforeMaxMs = -1 },
		func(o *record.LeaderOptions) { o.TimestampAfterMaxMs = -1 },
		func(o *record.LeaderOptions) { o.TimestampType = 2 },
		func(o *record.LeaderOptions) { o.MaxMessageBytes = -1 },
		func(o *record.LeaderOptions) { o.MaxDecompressedBytes = -1 },
		func(o *record.LeaderOptions) { o.Compression = record.CompressWith(7) },
	} {
		o := opts(bad)
		if err := o.Validate(); !errors.Is(err, record.ErrInvalid) {
			t.Fatalf("%+v: %v", o, err)
		}
		if _, err := record.ValidateForLeader(rawBatch(clientHdr(1), encRecords(goodRecs(1)...)), nowMs, o); !errors.Is(err, record.ErrInvalid) {
			t.Fatalf("ValidateForLeader with %+v: %v", o, err)
		}
	}
	for name, want := range map[string]string{"producer": "producer", "uncompressed": "uncompressed", "none": "", "gzip": "gzip",
		"snappy": "snappy", "lz4": "lz4", "zstd": "zstd", "brotli": ""} {
		c, err := record.ParseTopicCompression(name)
		if want == "" {
			if !errors.Is(err, record.ErrInvalid) {
				t.Fatalf("%q: %v", name, err)
			}
			continue
		}
		if err != nil || c.String() != want {
			t.Fatalf("%q: %v %v", name, c, err)
		}
	}
	if record.CompressionProducer.Target(record.LZ4) != record.LZ4 || record.CompressWith(record.GZIP).Target(record.LZ4) != record.GZIP {
		t.Fatal("Target")
	}
}

// TestValidateForLeaderAllocs: an uncompressed batch that needs no rewrite
// is validated without allocating; so, once the Validator's buffers and
// decoders exist, is a compressed one.
func TestValidateForLeaderAllocs(t *testing.T) {
	var v record.Validator
	o := record.DefaultLeaderOptions()
	o.Compacted = true
	recs := goodRecs(150)
	plain := built(t, record.None, record.NewBatchHeader(), recs)
	if n := testing.AllocsPerRun(100, func() {
		if _, err := v.ValidateForLeader(plain, nowMs, o); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Fatalf("%v allocations per uncompressed validation", n)
	}
	for _, c := range []record.Codec{record.GZIP, record.Snappy, record.LZ4, record.ZSTD} {
		b := built(t, c, record.NewBatchHeader(), recs)
		n := testing.AllocsPerRun(100, func() {
			if _, err := v.ValidateForLeader(b, nowMs, o); err != nil {
				t.Fatal(err)
			}
		})
		if n != 0 && !raceEnabled {
			t.Fatalf("%s: %v allocations per validation", c, n)
		}
	}
}

// FuzzValidateForLeader: leader validation never panics, never reads past
// the batch it is given (it gets a slice whose capacity ends there), never
// changes it, answers with exactly one class, and never accepts a batch the
// Iterator cannot decode: an accepted batch iterates to its count of
// records at offsets 0..count-1, with keys on a compacted topic and
// CreateTime timestamps within the limits, and a rewritten one to the same
// records. With fix set the harness makes the bytes a checksummed batch
// from offset 0, so the fuzzer reaches the records.
func FuzzValidateForLeader(f *testing.F) {
	rng := rand.New(rand.NewPCG(31, 32))
	for i, c := range allCodecs {
		b := built(f, c, record.NewBatchHeader(), randomRawRecs(rng, 5))
		f.Add([]byte(b), false, uint8(i<<2))
		f.Add([]byte(b), true, uint8(1|((i+1)%6)<<2))
	}
	f.Add([]byte(rawBatch(clientHdr(3), encRecords(goodRecs(3)...))), true, uint8(2))
	f.Add([]byte(rawBatch(clientHdr(1), []byte{0x18, 0, 0, 0, 0x82, 0x80, 0x80, 0x80, 0x80, 0, 'k', 1, 0})), true, uint8(0))
	f.Add([]byte(rawBatch(clientHdr(2), encRecords(rawRec{offDelta: 0, tsDelta: 1 << 40}, rawRec{offDelta: 1}))), true, uint8(0x80))
	var v record.Validator
	f.Fuzz(func(t *testing.T, data []byte, fix bool, flags uint8) {
		if fix && len(data) >= record.BatchHeaderSize {
			binary.BigEndian.PutUint64(data, 0)
			binary.BigEndian.PutUint32(data[8:], uint32(len(data)-record.LogOverhead))
			data[16] = 2
			binary.BigEndian.PutUint32(data[17:], record.CRC32C(data[21:]))
		}
		o := record.DefaultLeaderOptions()
		o.Compacted = flags&1 != 0
		if flags&2 != 0 {
			o.TimestampType = record.LogAppendTime
		}
		if c := (flags >> 2) & 7; c > 0 && c <= 5 {
			o.Compression = record.CompressWith(record.Codec(c - 1))
		}
		if flags&0x80 != 0 {
			o.TimestampBeforeMaxMs, o.TimestampAfterMaxMs = 1000, 1000
		}
		o.MaxDecompressedBytes = 1 << 20
		b := record.Batch(append(make([]byte, 0, len(data)), data...))
		res, err := v.ValidateForLeader(b, nowMs, o)
		if !bytes.Equal(b, data) {
			t.Fatal("validation changed the batch")
		}
		if err != nil {
			n := 0
			for _, c := range validationClasses {
				if errors.Is(err, c) {
					n++
				}
			}
			var ve *record.ValidationError
			if n != 1 || !errors.As(err, &ve) {
				t.Fatalf("error %v matches %d classes", err, n)
			}
			return
		}
		out := res.Batch
		if err := out.Validate(); err != nil {
			t.Fatalf("accepted batch fails Validate: %v", err)
		}
		if res.Rewritten != (out.Codec() != b.Codec()) || out.Codec() != o.Compression.Target(b.Codec()) {
			t.Fatalf("rewritten %v: codec %v from %v, compression.type %v", res.Rewritten, out.Codec(), b.Codec(), o.Compression)
		}
		var it record.Iterator
		if err := it.Reset(out); err != nil {
			t.Fatalf("accepted batch does not iterate: %v", err)
		}
		n := int32(0)
		maxTs := int64(-1)
		for it.Next() {
			r := it.Record()
			if r.Offset != int64(n) {
				t.Fatalf("record %d at offset %d", n, r.Offset)
			}
			if o.Compacted && r.Key == nil {
				t.Fatalf("record %d has no key on a compacted topic", n)
			}
			if o.TimestampType == record.CreateTime && r.Timestamp != -1 &&
				(nowMs-r.Timestamp > o.TimestampBeforeMaxMs || r.Timestamp-nowMs > o.TimestampAfterMaxMs) {
				t.Fatalf("record %d: timestamp %d out of range", n, r.Timestamp)
			}
			maxTs = max(maxTs, r.Timestamp)
			n++
		}
		if it.Err() != nil || n != out.NumRecords() || n != res.Records || out.LastOffsetDelta() != n-1 {
			t.Fatalf("accepted batch: %d records of %d (result %d), last delta %d, %v", n, out.NumRecords(), res.Records, out.LastOffsetDelta(), it.Err())
		}
		if maxTs != res.MaxTimestamp {
			t.Fatalf("max timestamp %d, records' %d", res.MaxTimestamp, maxTs)
		}
		if res.Rewritten {
			got, err1 := decodeAll(out)
			want, err2 := decodeAll(b)
			if err1 != nil || err2 != nil || fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("rewritten batch decodes to other records (%v, %v)", err1, err2)
			}
		}
	})
}
