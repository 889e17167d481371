package local_test

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/local"
	"github.com/tierlog/tierlog/record"
)

// The leader-side validation of local.Log beyond storagetest's clauses:
// what the errors carry, the bytes and indexes a rewritten append leaves,
// the stamping of timestamps, and the paths that keep the header checks.

var clock = time.UnixMilli(1_700_000_000_000)

// openAt opens a log in a new directory whose clock stands at clock.
func openAt(t *testing.T, c backend.Config) *local.Log {
	t.Helper()
	l, err := local.Open(t.TempDir(), local.Options{Config: c, Now: func() time.Time { return clock }, LogStartOffset: -1, HighWatermark: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// build builds a producer's batch of the given timestamps (keys "k", values
// of 40 bytes) with codec c.
func build(t *testing.T, c record.Codec, ts ...int64) []byte {
	t.Helper()
	var b record.Builder
	h := record.NewBatchHeader()
	h.Codec = c
	b.Reset(h)
	for _, x := range ts {
		b.Append(x, []byte("k"), bytes.Repeat([]byte("v"), 40), nil)
	}
	out, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	return append([]byte(nil), out...)
}

func times(n int, ts int64) []int64 {
	out := make([]int64, n)
	for i := range out {
		out[i] = ts
	}
	return out
}

func leaderAppend(l *local.Log, data []byte) (backend.AppendInfo, error) {
	return l.Append(ctx, data, backend.AppendOptions{AssignOffsets: true, LeaderEpoch: 3})
}

// storedAll returns every batch of the log, as stored.
func storedAll(t *testing.T, l *local.Log) []record.Batch {
	t.Helper()
	var out []record.Batch
	for off := l.Offsets().LogStart; off < l.Offsets().LogEnd; {
		r, err := l.Read(ctx, off, backend.ReadOptions{MaxBytes: 1 << 20, MinOneBatch: true})
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		if _, err := local.ReadAll(r, &buf); err != nil {
			t.Fatal(err)
		}
		sc := record.NewScanner(bytes.NewReader(buf.Bytes()), 0, int64(buf.Len()), record.ScanOptions{Validate: true})
		for sc.Next() {
			out = append(out, record.Batch(append([]byte(nil), sc.Entry().Data...)))
			off = sc.Entry().LastOffset + 1
		}
		if sc.Err() != nil {
			t.Fatal(sc.Err())
		}
	}
	return out
}

// gzipBatch wraps the records area of the uncompressed batch u in a gzip
// stream, as a producer with compression.type=gzip sends it.
func gzipBatch(t *testing.T, u []byte) []byte {
	t.Helper()
	var z bytes.Buffer
	w := gzip.NewWriter(&z)
	w.Write(u[record.BatchHeaderSize:])
	w.Close()
	out := append(append([]byte(nil), u[:record.BatchHeaderSize]...), z.Bytes()...)
	binary.BigEndian.PutUint32(out[8:], uint32(len(out)-record.LogOverhead))
	binary.BigEndian.PutUint16(out[21:], binary.BigEndian.Uint16(out[21:])|uint16(record.GZIP))
	binary.BigEndian.PutUint32(out[17:], record.CRC32C(out[21:]))
	return out
}

// TestLeaderValidationErrors: a refusal keeps the validator's detail, the
// record index and the base offset in its message, and a broker reads the
// per-record errors (Kafka's record_errors) and the validator's own error
// with errors.As.
func TestLeaderValidationErrors(t *testing.T) {
	l := openAt(t, cfg(t, "message.timestamp.before.max.ms", "1000"))
	now := clock.UnixMilli()

	// A compressed batch whose records do not parse once decompressed.
	u := build(t, record.None, now, now)
	u[65] = 120 // the first record's key length, 60, runs past the record
	binary.BigEndian.PutUint32(u[17:], record.CRC32C(u[21:]))
	_, err := leaderAppend(l, gzipBatch(t, u))
	var ve *record.ValidationError
	if !errors.Is(err, backend.ErrInvalidRecord) || !errors.As(err, &ve) || !errors.Is(ve, record.ErrBadRecord) {
		t.Fatalf("malformed records in a gzip batch: %v", err)
	}
	for _, want := range []string{"batch 0 at byte 0", "batch base offset 0", "at record 0", "key length"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q does not say %q", err, want)
		}
	}
	var rb *backend.RejectedBatchError
	if !errors.As(err, &rb) || rb.Index != 0 || rb.BaseOffset != 0 || rb.RecordErrors != 0 {
		t.Fatalf("%+v", rb)
	}

	// Timestamps: the limits are inclusive.
	before, after := now-1000, now+3600000
	if _, err := leaderAppend(l, build(t, record.None, before, after, now)); err != nil {
		t.Fatalf("timestamps at the limits: %v", err)
	}
	_, err = leaderAppend(l, build(t, record.None, before-1, now, after+1))
	if !errors.As(err, &rb) || rb.Class != backend.ErrInvalidTimestamp || rb.RecordErrors != 2 ||
		rb.Records[0].Index != 0 || rb.Records[1].Index != 2 || !strings.Contains(rb.Records[0].Message, "out of range") {
		t.Fatalf("timestamps one past the limits: %v (%+v)", err, rb)
	}
	if !errors.As(err, &ve) || len(ve.Records) != 2 {
		t.Fatalf("the validator's error is not reachable: %v", err)
	}
	if l.Offsets().LogEnd != 3 {
		t.Fatalf("log end %d, want 3", l.Offsets().LogEnd)
	}

	// A batch of a producer as it sends one has base offset 0; a batch
	// with another (a buffer already appended once, whose offset the
	// leader assigned in place) is refused.
	again := build(t, record.None, now)
	if _, err := leaderAppend(l, again); err != nil {
		t.Fatal(err)
	}
	if _, err := leaderAppend(l, again); !errors.Is(err, backend.ErrInvalidRecord) || !errors.Is(err, record.ErrBadOffsets) {
		t.Fatalf("a batch with base offset %d: %v", record.Batch(again).BaseOffset(), err)
	}
}

// TestLeaderRecompressionWrites: on a compression.type=lz4 topic the bytes
// written are the recompressed batches: the segment's size, the index
// entries' positions and AppendInfo.Bytes follow them, an append mixing
// codecs is written whole from a copy (the caller's bytes unchanged), and
// the leader's stamps land on the copy.
func TestLeaderRecompressionWrites(t *testing.T) {
	for _, tt := range []string{backend.CreateTime, backend.LogAppendTime} {
		t.Run(tt, func(t *testing.T) {
			l := openAt(t, cfg(t, "compression.type", "lz4", "index.interval.bytes", "0", "message.timestamp.type", tt))
			now := clock.UnixMilli()
			var written int64
			var infos []backend.AppendInfo
			for i := range 5 {
				data := append(append(build(t, record.None, times(20, now-int64(i))...), build(t, record.LZ4, times(7, now)...)...),
					build(t, record.Snappy, times(9, now+5)...)...)
				orig := append([]byte(nil), data...)
				info, err := leaderAppend(l, data)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(data, orig) {
					t.Fatal("a rewritten append changed the caller's bytes")
				}
				if info.Batches != 3 || info.Records != 36 || info.LastOffset-info.FirstOffset != 35 || info.Bytes >= len(data) {
					t.Fatalf("append %d: %+v for %d bytes produced", i, info, len(data))
				}
				if tt == backend.CreateTime && info.MaxTimestamp != now+5 {
					t.Fatalf("max timestamp %d, want %d", info.MaxTimestamp, now+5)
				}
				written += int64(info.Bytes)
				infos = append(infos, info)
			}
			if _, size := l.Size(); size != written {
				t.Fatalf("the log holds %d bytes; the appends said %d", size, written)
			}
			var pos int64
			stored := storedAll(t, l)
			if len(stored) != 15 {
				t.Fatalf("%d batches stored, want 15", len(stored))
			}
			for i, b := range stored {
				if b.Codec() != record.LZ4 || b.PartitionLeaderEpoch() != 3 || b.ComputeCRC() != b.CRC() {
					t.Fatalf("batch %d: codec %s, epoch %d, CRC ok %v", i, b.Codec(), b.PartitionLeaderEpoch(), b.ComputeCRC() == b.CRC())
				}
				info := infos[i/3]
				switch {
				case tt == backend.LogAppendTime && (b.TimestampType() != record.LogAppendTime || b.MaxTimestamp() != now || info.LogAppendTime != now):
					t.Fatalf("batch %d: %s at %d, append time %d; want LogAppendTime %d", i, b.TimestampType(), b.MaxTimestamp(), info.LogAppendTime, now)
				case tt == backend.CreateTime && b.TimestampType() != record.CreateTime:
					t.Fatalf("batch %d is %s", i, b.TimestampType())
				}
				// index.interval.bytes=0 indexes every batch after the
				// first: each entry points at the batch as written.
				lr, err := l.Lookup(b.LastOffset())
				if err != nil {
					t.Fatal(err)
				}
				if lr.BatchPosition != pos || lr.BatchSize != int64(len(b)) || (i > 0 && (lr.IndexOffset != b.LastOffset() || int64(lr.IndexPosition) != pos)) {
					t.Fatalf("batch %d at %d (%d bytes): lookup %+v", i, pos, len(b), lr)
				}
				pos += int64(len(b))
			}
			if got := len(readAll(t, l, 0)); got != 5*36 {
				t.Fatalf("%d records read back, want %d", got, 5*36)
			}
		})
	}
}

// TestLeaderStampsInPlace: a batch that needs no rewrite is written from
// the caller's bytes, stamped in place (the fast path: no copy); a
// CreateTime batch whose maxTimestamp is not its records' largest gets
// the right one, with a new CRC.
func TestLeaderStampsInPlace(t *testing.T) {
	l := openAt(t, cfg(t))
	now := clock.UnixMilli()
	if _, err := leaderAppend(l, build(t, record.None, now)); err != nil {
		t.Fatal(err)
	}
	data := build(t, record.None, now-10, now, now-5)
	binary.BigEndian.PutUint64(data[35:], uint64(now-10)) // maxTimestamp, wrong
	binary.BigEndian.PutUint32(data[17:], record.CRC32C(data[21:]))
	info, err := leaderAppend(l, data)
	if err != nil {
		t.Fatal(err)
	}
	b := record.Batch(data)
	if b.BaseOffset() != 1 || b.PartitionLeaderEpoch() != 3 || b.MaxTimestamp() != now || b.CRC() != b.ComputeCRC() {
		t.Fatalf("the caller's batch was not stamped in place: base %d epoch %d max ts %d", b.BaseOffset(), b.PartitionLeaderEpoch(), b.MaxTimestamp())
	}
	if info.MaxTimestamp != now || info.Bytes != len(data) {
		t.Fatalf("%+v", info)
	}
	stored := storedAll(t, l)
	if !bytes.Equal(stored[1], data) {
		t.Fatal("the stored batch is not the caller's stamped bytes")
	}
	if m := l.Metrics().AppendBytes.Load(); m != int64(len(stored[0])+len(data)) {
		t.Fatalf("AppendBytes %d", m)
	}
}

// TestFollowerAndCoordinatorKeepHeaderChecks: a follower's append is not
// decoded record by record (a follower trusts its leader, as Kafka's
// does): the header and CRC checks decide, so a batch a leader refuses
// for its records or timestamps is replicated as it is.
func TestFollowerAndCoordinatorKeepHeaderChecks(t *testing.T) {
	l := openAt(t, cfg(t, "cleanup.policy", "compact"))
	now := clock.UnixMilli()
	var b record.Builder
	b.Reset(record.NewBatchHeader())
	b.Append(now-100*3600000, nil, []byte("keyless and late"), nil)
	keyless, _ := b.Build()
	keyless = append(record.Batch(nil), keyless...)
	if _, err := leaderAppend(l, append([]byte(nil), keyless...)); !errors.Is(err, backend.ErrInvalidRecord) {
		t.Fatalf("leader: %v", err)
	}
	if _, err := l.Append(ctx, keyless, backend.AppendOptions{}); err != nil {
		t.Fatalf("follower: %v", err)
	}
	if l.Offsets().LogEnd != 1 {
		t.Fatalf("log end %d", l.Offsets().LogEnd)
	}
}
