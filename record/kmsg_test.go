package record_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tierlog/tierlog/record"
)

// testRecord is one record as both encoders see it.
type testRecord struct {
	ts         int64
	key, value []byte
	headers    []record.Header
}

func randomRecords(rng *rand.Rand, n int) []testRecord {
	base := int64(1_788_026_072_512)
	out := make([]testRecord, n)
	for i := range out {
		r := testRecord{ts: base + int64(rng.IntN(100_000)) - 50_000}
		if rng.IntN(5) != 0 {
			r.key = fmt.Appendf(nil, "user-%d", rng.IntN(10_000))
		}
		switch rng.IntN(6) {
		case 0: // tombstone
		case 1:
			r.value = []byte{}
		default:
			r.value = bytes.Repeat([]byte{byte(rng.IntN(256))}, rng.IntN(2000))
		}
		for j := rng.IntN(4); j > 0; j-- {
			h := record.Header{Key: fmt.Appendf(nil, "h%d", j)}
			if rng.IntN(3) != 0 {
				h.Value = fmt.Appendf(nil, "v%d", rng.IntN(100))
			}
			r.headers = append(r.headers, h)
		}
		out[i] = r
	}
	return out
}

// kmsgBatch encodes recs the way franz-go's producer does: kmsg records,
// then the batch header, CRC-32C over attributes..end.
func kmsgBatch(recs []testRecord, codec int8, pid int64, epoch int16, seq int32, compress func([]byte) []byte) []byte {
	var raw []byte
	firstTs, maxTs := recs[0].ts, recs[0].ts
	for i, r := range recs {
		maxTs = max(maxTs, r.ts)
		kr := kmsg.Record{TimestampDelta64: r.ts - firstTs, OffsetDelta: int32(i), Key: r.key, Value: r.value}
		for _, h := range r.headers {
			kr.Headers = append(kr.Headers, kmsg.Header{Key: string(h.Key), Value: h.Value})
		}
		kr.Length = int32(len(kr.AppendTo(nil)) - 1) // varint(0) is one byte
		raw = kr.AppendTo(raw)
	}
	if compress != nil {
		raw = compress(raw)
	}
	b := kmsg.RecordBatch{
		FirstOffset: 0, PartitionLeaderEpoch: -1, Magic: 2, Attributes: int16(codec),
		LastOffsetDelta: int32(len(recs) - 1), FirstTimestamp: firstTs, MaxTimestamp: maxTs,
		ProducerID: pid, ProducerEpoch: epoch, FirstSequence: seq, NumRecords: int32(len(recs)), Records: raw,
	}
	b.Length = int32(len(raw) + record.BatchHeaderSize - record.LogOverhead)
	out := b.AppendTo(nil)
	binary.BigEndian.PutUint32(out[17:], crc32.Checksum(out[21:], crc32.MakeTable(crc32.Castagnoli)))
	return out
}

func tierlogBatch(t *testing.T, b *record.Builder, recs []testRecord, codec record.Codec, pid int64, epoch int16, seq int32) []byte {
	t.Helper()
	h := record.NewBatchHeader()
	h.Codec = codec
	h.ProducerID, h.ProducerEpoch, h.BaseSequence = pid, epoch, seq
	b.Reset(h)
	for _, r := range recs {
		b.Append(r.ts, r.key, r.value, r.headers)
	}
	batch, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	return append([]byte(nil), batch...)
}

func TestUncompressedIdenticalToKmsg(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	var b record.Builder
	for i := 0; i < 200; i++ {
		recs := randomRecords(rng, 1+rng.IntN(60))
		pid, epoch, seq := int64(-1), int16(-1), int32(-1)
		if i%2 == 1 {
			pid, epoch, seq = rng.Int64N(1<<40), int16(rng.IntN(100)), int32(rng.IntN(1<<30))
		}
		want := kmsgBatch(recs, 0, pid, epoch, seq, nil)
		got := tierlogBatch(t, &b, recs, record.None, pid, epoch, seq)
		if !bytes.Equal(got, want) {
			t.Fatalf("case %d: tierlog and kmsg differ\n got %x\nwant %x", i, got, want)
		}
	}
}

// TestCompressedCrossDecode: for every codec, tierlog decodes franz-go's
// batches and franz-go decodes tierlog's, to the same records.
func TestCompressedCrossDecode(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	var b record.Builder
	dec := kgo.DefaultDecompressor()
	codecs := []struct {
		c  record.Codec
		kc kgo.CompressionCodec
	}{
		{record.GZIP, kgo.GzipCompression()},
		{record.Snappy, kgo.SnappyCompression()},
		{record.LZ4, kgo.Lz4Compression()},
		{record.ZSTD, kgo.ZstdCompression()},
	}
	for _, cc := range codecs {
		comp, err := kgo.DefaultCompressor(cc.kc)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 20; i++ {
			recs := randomRecords(rng, 1+rng.IntN(200))
			if i == 0 {
				// More than one 32 KiB xerial block / 64 KiB lz4 block.
				recs = randomRecords(rand.New(rand.NewPCG(1, 1)), 400)
			}
			// franz-go writes, tierlog reads.
			var used kgo.CompressionCodecType
			theirs := kmsgBatch(recs, int8(cc.c), -1, -1, -1, func(raw []byte) []byte {
				var buf bytes.Buffer
				out, typ := comp.Compress(&buf, raw)
				used = typ
				return append([]byte(nil), out...)
			})
			if int8(used) != int8(cc.c) {
				t.Fatalf("%v: franz-go compressed with codec %d", cc.c, used)
			}
			checkRecords(t, cc.c.String()+" franz-go->tierlog", theirs, recs)

			// tierlog writes, franz-go reads.
			ours := record.Batch(tierlogBatch(t, &b, recs, cc.c, -1, -1, -1))
			raw, err := dec.Decompress(ours[record.BatchHeaderSize:], kgo.CompressionCodecType(cc.c))
			if err != nil {
				t.Fatalf("%v: franz-go cannot decompress tierlog's batch: %v", cc.c, err)
			}
			var want []byte
			for j, r := range recs {
				kr := kmsg.Record{TimestampDelta64: r.ts - recs[0].ts, OffsetDelta: int32(j), Key: r.key, Value: r.value}
				for _, h := range r.headers {
					kr.Headers = append(kr.Headers, kmsg.Header{Key: string(h.Key), Value: h.Value})
				}
				kr.Length = int32(len(kr.AppendTo(nil)) - 1)
				want = kr.AppendTo(want)
			}
			if !bytes.Equal(raw, want) {
				t.Fatalf("%v: franz-go decoded tierlog's batch to different records", cc.c)
			}
		}
	}
}

func checkRecords(t *testing.T, what string, batch []byte, recs []testRecord) {
	t.Helper()
	b, err := record.Parse(batch)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if err := b.Validate(); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	var it record.Iterator
	if err := it.Reset(b); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	i := 0
	for it.Next() {
		r, w := it.Record(), recs[i]
		if r.Offset != int64(i) || r.Timestamp != w.ts || !bytes.Equal(r.Key, w.key) || (r.Key == nil) != (w.key == nil) ||
			!bytes.Equal(r.Value, w.value) || (r.Value == nil) != (w.value == nil) || len(r.Headers) != len(w.headers) {
			t.Fatalf("%s: record %d differs", what, i)
		}
		for j, h := range r.Headers {
			if !bytes.Equal(h.Key, w.headers[j].Key) || !bytes.Equal(h.Value, w.headers[j].Value) || (h.Value == nil) != (w.headers[j].Value == nil) {
				t.Fatalf("%s: record %d header %d differs", what, i, j)
			}
		}
		i++
	}
	if it.Err() != nil || i != len(recs) {
		t.Fatalf("%s: %d records, err %v", what, i, it.Err())
	}
}
