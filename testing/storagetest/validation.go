package storagetest

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/record"
)

// Leader-side validation, as Kafka's LogValidator: a leader append of a
// client's batch decodes every record and refuses what Kafka's leader
// refuses, with Kafka's error classes, writing nothing; the topic's
// compression.type is applied.

// vrec is one record of a hand-built batch.
type vrec struct {
	ts         int64
	key, value []byte
}

// buildBatch builds a batch of recs with codec c, as a producer sends it.
func buildBatch(t *testing.T, c record.Codec, recs ...vrec) []byte {
	t.Helper()
	var b record.Builder
	h := record.NewBatchHeader()
	h.Codec = c
	b.Reset(h)
	for _, r := range recs {
		b.Append(r.ts, r.key, r.value, nil)
	}
	out, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	return append([]byte(nil), out...)
}

// resum recomputes a batch's CRC after its bytes were changed: what a
// buggy producer that checksums its own bad encoding sends.
func resum(b []byte) []byte {
	binary.BigEndian.PutUint32(b[17:], record.CRC32C(b[21:]))
	return b
}

// refused appends data as a client's leader append and checks it fails
// with want, leaving the partition's offsets as they were. It returns the
// error.
func refused(t *testing.T, p backend.Partition, what string, data []byte, want error) error {
	t.Helper()
	before := p.Offsets()
	_, err := p.Append(ctx, data, backend.AppendOptions{AssignOffsets: true, LeaderEpoch: 1})
	if !errors.Is(err, want) {
		t.Fatalf("%s: err %v, want %v", what, err, want)
	}
	for _, other := range []error{backend.ErrCorruptRecord, backend.ErrInvalidRecord, backend.ErrInvalidTimestamp, backend.ErrRecordTooLarge} {
		if other != want && errors.Is(err, other) {
			t.Fatalf("%s: err %v matches %v as well as %v: the classes map one to one onto Kafka's codes", what, err, other, want)
		}
	}
	if after := p.Offsets(); after != before {
		t.Fatalf("%s: a refused append moved the offsets from %+v to %+v", what, before, after)
	}
	return err
}

// rejected returns the *backend.RejectedBatchError in err, failing the
// test when there is none.
func rejected(t *testing.T, what string, err error) *backend.RejectedBatchError {
	t.Helper()
	var rb *backend.RejectedBatchError
	if !errors.As(err, &rb) {
		t.Fatalf("%s: %v is not a *backend.RejectedBatchError", what, err)
	}
	return rb
}

// leaderOK appends data as a client's leader append and returns its info.
func leaderOK(t *testing.T, p backend.Partition, what string, data []byte) backend.AppendInfo {
	t.Helper()
	info, err := p.Append(ctx, data, backend.AppendOptions{AssignOffsets: true, LeaderEpoch: 1})
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return info
}

// testLeaderValidation: a batch whose records do not parse is refused even
// when its CRC was computed over the bad bytes (issue 15, bug 3: such a
// batch was appended and consumers failed to decode it), and so are a
// client's control batches; nothing of a refused append is written, also
// when the bad batch follows a good one in the same append.
func testLeaderValidation(t *testing.T, h Harness) {
	p := h.Open(t, Config(t))
	defer p.Close()
	now := time.Now().UnixMilli()
	var m model
	good := buildBatch(t, record.None, vrec{now, []byte("a"), []byte("1")}, vrec{now, []byte("b"), []byte("2")}, vrec{now, []byte("c"), []byte("3")})
	info := leaderOK(t, p, "a good batch", append([]byte(nil), good...))
	for i, r := range []string{"a1", "b2", "c3"} {
		m.recs = append(m.recs, rec{offset: info.FirstOffset + int64(i), ts: now, key: []byte(r[:1]), value: []byte(r[1:])})
	}

	// The first record's key length, at byte 65 (length, attributes,
	// timestamp delta and offset delta take a byte each), says 60 bytes:
	// it runs past the record.
	keyPastRecord := append([]byte(nil), good...)
	if keyPastRecord[65] != 2 {
		t.Fatalf("the test's batch layout changed: byte 65 is %d, not the key length 1", keyPastRecord[65])
	}
	keyPastRecord[65] = 120 // zigzag(60)
	// The count says 3 records (and the last offset delta 2) but the
	// records area holds 2.
	long := bytes.Repeat([]byte("x"), 40)
	short := buildBatch(t, record.None, vrec{now, []byte("a"), long}, vrec{now, []byte("b"), long})
	binary.BigEndian.PutUint32(short[57:], 3)
	binary.BigEndian.PutUint32(short[23:], 2)
	// Bytes after the last record (the length field counts them).
	trailing := append(append([]byte(nil), good...), 0, 0, 0)
	binary.BigEndian.PutUint32(trailing[8:], uint32(len(trailing)-12))
	// The second record's offset delta is 5.
	badDelta := append([]byte(nil), good...)
	second := 61 + 1 + int(good[61]>>1)
	if badDelta[second+3] != 2 {
		t.Fatalf("the test's batch layout changed: byte %d is %d, not the offset delta 1", second+3, badDelta[second+3])
	}
	badDelta[second+3] = 10
	for _, c := range []struct {
		name string
		data []byte
	}{
		{"a key running past its record", resum(keyPastRecord)},
		{"fewer records than the count", resum(short)},
		{"bytes after the last record", resum(trailing)},
		{"a record offset delta out of sequence", resum(badDelta)},
	} {
		if err := record.Batch(c.data).Validate(); err != nil {
			t.Fatalf("%s: the batch's header and CRC do not check (%v): the case would prove nothing", c.name, err)
		}
		err := refused(t, p, c.name, append([]byte(nil), c.data...), backend.ErrInvalidRecord)
		if rb := rejected(t, c.name, err); rb.Batch != 0 || rb.Position != 0 || rb.Class != backend.ErrInvalidRecord {
			t.Fatalf("%s: %+v; want batch 0 at byte 0, class ErrInvalidRecord", c.name, rb)
		}
		// After a good batch in the same append: nothing of it is written.
		err = refused(t, p, c.name+" after a good batch", append(append([]byte(nil), good...), c.data...), backend.ErrInvalidRecord)
		if rb := rejected(t, c.name, err); rb.Batch != 1 || rb.Position != len(good) {
			t.Fatalf("%s after a good batch: batch %d at byte %d; want batch 1 at byte %d", c.name, rb.Batch, rb.Position, len(good))
		}
	}

	// Only the transaction coordinator writes control batches: a client's
	// COMMIT marker (with or without a producer id) is refused.
	var b record.Builder
	for _, pid := range []int64{7, record.NoProducerID} {
		marker, err := b.BuildEndTxnMarker(record.EndTxnMarker{ProducerID: pid, ProducerEpoch: 0, CoordinatorEpoch: 1, Commit: true, Timestamp: now})
		if err != nil {
			t.Fatal(err)
		}
		refused(t, p, fmt.Sprintf("a client's COMMIT marker of producer %d", pid), append([]byte(nil), marker...), backend.ErrInvalidRecord)
	}
	sameRecords(t, "after refused appends", readFrom(t, p, 0, 0), m.recs)
}

// testLeaderTimestamps: on a CreateTime topic a record's timestamp must lie
// within [now - message.timestamp.before.max.ms, now +
// message.timestamp.after.max.ms] (-1, no timestamp, is not checked);
// a batch with records outside is refused with ErrInvalidTimestamp, naming
// each record refused (Kafka's record_errors). A LogAppendTime topic does
// not check them: it stamps its own time.
func testLeaderTimestamps(t *testing.T, h Harness) {
	p := h.Open(t, Config(t, "message.timestamp.before.max.ms", "3600000"))
	now := time.Now().UnixMilli()
	const hour = 3600000
	v := []byte("v")
	leaderOK(t, p, "records within the limits", buildBatch(t, record.None,
		vrec{now, v, v}, vrec{now - hour/2, v, v}, vrec{now + hour/2, v, v}, vrec{record.NoTimestamp, v, v}))
	for _, c := range []struct {
		name  string
		codec record.Codec
		ts    []int64
		bad   []int32
	}{
		{"a record two hours old", record.None, []int64{now, now - 2*hour, now}, []int32{1}},
		{"a record two hours ahead (after.max.ms defaults to one hour)", record.None, []int64{now + 2*hour}, []int32{0}},
		{"two records out of range, compressed", record.LZ4, []int64{now - 3*hour, now, now + 3*hour}, []int32{0, 2}},
	} {
		recs := make([]vrec, len(c.ts))
		for i, ts := range c.ts {
			recs[i] = vrec{ts, v, v}
		}
		err := refused(t, p, c.name, buildBatch(t, c.codec, recs...), backend.ErrInvalidTimestamp)
		rb := rejected(t, c.name, err)
		if rb.RecordErrors != len(c.bad) || len(rb.Records) != len(c.bad) {
			t.Fatalf("%s: %d record errors (%d listed), want %d", c.name, rb.RecordErrors, len(rb.Records), len(c.bad))
		}
		for i, want := range c.bad {
			if rb.Records[i].Index != want || rb.Records[i].Message == "" {
				t.Fatalf("%s: record error %d is %+v, want index %d with a message", c.name, i, rb.Records[i], want)
			}
		}
	}

	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	q := h.Open(t, Config(t, "message.timestamp.type", "LogAppendTime", "message.timestamp.before.max.ms", "0", "message.timestamp.after.max.ms", "0"))
	defer q.Close()
	if _, err := q.Append(ctx, buildBatch(t, record.None, vrec{now - 100*hour, v, v}, vrec{now + 100*hour, v, v}), backend.AppendOptions{AssignOffsets: true}); err != nil {
		t.Fatalf("a LogAppendTime topic checked the producer's timestamps: %v", err)
	}
}

// testLeaderCompression: compression.type other than producer stores
// every batch a client appends with that codec (a leader recompresses, as
// Kafka's does); readers decode the same records, at the same offsets;
// AppendInfo.Bytes is the size written; a batch too large once
// recompressed is refused with ErrRecordTooLarge.
func testLeaderCompression(t *testing.T, h Harness) {
	var p backend.Partition
	defer func() { p.Close() }()
	var m model
	for _, c := range []struct {
		topic string
		want  record.Codec
	}{{"lz4", record.LZ4}, {"uncompressed", record.None}, {"zstd", record.ZSTD}, {"producer", -1}} {
		if p != nil {
			if err := p.Close(); err != nil {
				t.Fatal(err)
			}
		}
		// The partition reopens with each compression.type in turn.
		p = h.Open(t, Config(t, "compression.type", c.topic, "segment.bytes", "8192", "index.interval.bytes", "512"))
		now := time.Now().UnixMilli()
		for i, codec := range []record.Codec{record.None, record.GZIP, record.Snappy, record.LZ4, record.ZSTD, record.None, record.LZ4} {
			var recs []vrec
			for j := range 1 + i*7 {
				r := rec{ts: now + int64(j), key: fmt.Appendf(nil, "k-%d-%d", i, j), value: bytes.Repeat([]byte{byte('a' + j%26)}, 20+j*3)}
				recs = append(recs, vrec{r.ts, r.key, r.value})
				m.recs = append(m.recs, r)
			}
			info := leaderOK(t, p, fmt.Sprintf("a %s batch", codec), buildBatch(t, codec, recs...))
			for j := range recs {
				m.recs[len(m.recs)-len(recs)+j].offset = info.FirstOffset + int64(j)
			}
			want := c.want
			if want < 0 {
				want = codec
			}
			stored := storedBatches(t, p, info.FirstOffset)
			if len(stored) == 0 || stored[0].BaseOffset() != info.FirstOffset {
				t.Fatalf("no batch read back at %d", info.FirstOffset)
			}
			if got := stored[0]; got.Codec() != want || got.NumRecords() != int32(len(recs)) || info.Bytes != len(got) {
				t.Fatalf("a %s batch on a compression.type=%s topic is stored as %s with %d records in %d bytes (AppendInfo.Bytes %d); want %s with %d records",
					codec, c.topic, got.Codec(), got.NumRecords(), len(got), info.Bytes, want, len(recs))
			}
		}
	}
	commitAll(t, p)
	sameRecords(t, "read back", readFrom(t, p, 0, 0), m.recs)
	for _, r := range m.recs {
		sameRecords(t, fmt.Sprintf("read at %d", r.offset), readFrom(t, p, r.offset, 1)[:1], []rec{r})
	}

	// 200 records of 500 equal bytes: a few KiB with zstd, 100 KiB and
	// more uncompressed.
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	p = h.Open(t, Config(t, "compression.type", "uncompressed", "max.message.bytes", "20000"))
	var recs []vrec
	for range 200 {
		recs = append(recs, vrec{time.Now().UnixMilli(), []byte("k"), bytes.Repeat([]byte("z"), 500)})
	}
	data := buildBatch(t, record.ZSTD, recs...)
	if len(data) > 20000 {
		t.Fatalf("the zstd batch is %d bytes: the case would prove nothing", len(data))
	}
	refused(t, p, "a batch past max.message.bytes once recompressed", data, backend.ErrRecordTooLarge)
}

// storedBatches reads the batches stored from offset (one read).
func storedBatches(t *testing.T, p backend.Partition, offset int64) []record.Batch {
	t.Helper()
	r, err := p.Read(ctx, offset, backend.ReadOptions{MaxBytes: 1 << 20, MinOneBatch: true})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var buf bytes.Buffer
	if _, err := r.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	var out []record.Batch
	sc := record.NewScanner(bytes.NewReader(buf.Bytes()), 0, int64(buf.Len()), record.ScanOptions{Validate: true})
	for sc.Next() {
		out = append(out, record.Batch(append([]byte(nil), sc.Entry().Data...)))
	}
	if sc.Err() != nil {
		t.Fatal(sc.Err())
	}
	return out
}

// testCompactedKeys (harnesses that compact): every record of a compacted
// topic needs a key; a batch with keyless records is refused with
// ErrInvalidRecord naming each of them.
func testCompactedKeys(t *testing.T, h Harness) {
	if _, ok := h.(Compactor); !ok {
		t.Skip("the harness opens no compacted partitions")
	}
	p := h.Open(t, Config(t, "cleanup.policy", "compact"))
	defer p.Close()
	now := time.Now().UnixMilli()
	leaderOK(t, p, "keyed records", buildBatch(t, record.None, vrec{now, []byte("k"), []byte("v")}, vrec{now, []byte("k"), nil}))
	for _, codec := range []record.Codec{record.None, record.Snappy} {
		err := refused(t, p, "keyless records on a compacted topic", buildBatch(t, codec,
			vrec{now, []byte("k"), []byte("v")}, vrec{now, nil, []byte("v")}, vrec{now, []byte("k"), nil}, vrec{now, nil, nil}), backend.ErrInvalidRecord)
		rb := rejected(t, "keyless records", err)
		if rb.RecordErrors != 2 || len(rb.Records) != 2 || rb.Records[0].Index != 1 || rb.Records[1].Index != 3 {
			t.Fatalf("keyless records (%s): record errors %+v (%d); want records 1 and 3", codec, rb.Records, rb.RecordErrors)
		}
	}
	if o := p.Offsets(); o.LogEnd != 2 {
		t.Fatalf("log end %d after refused appends, want 2", o.LogEnd)
	}
}
