package record_test

import (
	"bytes"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"testing"

	"github.com/tierlog/tierlog/record"
)

// batch16K builds a ~16 KiB batch of 100-byte records, the shape a Kafka
// producer hands a broker with batch.size=16384.
func batch16K(b testing.TB) record.Batch {
	var bl record.Builder
	bl.Reset(record.NewBatchHeader())
	val := bytes.Repeat([]byte("v"), 100)
	for bl.SizeWith(1, nil, val, nil) <= 16384 {
		bl.Append(1, nil, val, nil)
	}
	out, err := bl.Build()
	if err != nil {
		b.Fatal(err)
	}
	return append(record.Batch(nil), out...)
}

// BenchmarkValidate16K and BenchmarkCRC32CBare16K run side by side: the
// first validates a 16 KiB batch, the second is the bare checksum of the
// same bytes (the target: Validate at >= 90% of the bare speed).
func BenchmarkValidate16K(b *testing.B) {
	batch := batch16K(b)
	b.SetBytes(int64(len(batch)))
	for b.Loop() {
		if err := batch.Validate(); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkCRC32CBare16K(b *testing.B) {
	batch := batch16K(b)
	tab := crc32.MakeTable(crc32.Castagnoli)
	b.SetBytes(int64(len(batch)))
	var sink uint32
	for b.Loop() {
		sink += crc32.Checksum(batch[21:], tab)
	}
	_ = sink
}

func BenchmarkBuild16K(b *testing.B) {
	var bl record.Builder
	val := bytes.Repeat([]byte("v"), 100)
	b.ReportAllocs()
	for b.Loop() {
		bl.Reset(record.NewBatchHeader())
		for bl.SizeWith(1, nil, val, nil) <= 16384 {
			bl.Append(1, nil, val, nil)
		}
		out, _ := bl.Build()
		b.SetBytes(int64(len(out)))
	}
}

func BenchmarkIterate16K(b *testing.B) {
	batch := batch16K(b)
	var it record.Iterator
	b.SetBytes(int64(len(batch)))
	b.ReportAllocs()
	for b.Loop() {
		_ = it.Reset(batch)
		for it.Next() {
		}
	}
}

func BenchmarkBuildCompressed16K(b *testing.B) {
	for _, c := range []record.Codec{record.GZIP, record.Snappy, record.LZ4, record.ZSTD} {
		b.Run(c.String(), func(b *testing.B) {
			var bl record.Builder
			h := record.NewBatchHeader()
			h.Codec = c
			val := bytes.Repeat([]byte("value-"), 17)
			b.SetBytes(16384)
			for b.Loop() {
				bl.Reset(h)
				for bl.SizeWith(1, nil, val, nil) <= 16384 {
					bl.Append(1, nil, val, nil)
				}
				if _, err := bl.Build(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// leaderBatch16K builds a ~16 KiB (uncompressed) batch of 100-byte
// JSON-like values with codec c, which lz4 compresses about 2.5 to 1.
func leaderBatch16K(b testing.TB, c record.Codec) record.Batch {
	var bl record.Builder
	h := record.NewBatchHeader()
	h.Codec = c
	bl.Reset(h)
	rng := rand.New(rand.NewPCG(1, 2))
	events := []string{"click", "view", "purchase", "login", "logout", "search"}
	ts := int64(1_700_000_000_000)
	for {
		val := fmt.Appendf(nil, `{"user":"u%05d","event":"%s","amount":%d.%02d,"session":"%016x"`,
			rng.IntN(100000), events[rng.IntN(len(events))], rng.IntN(1000), rng.IntN(100), rng.Uint64())
		for len(val) < 99 {
			val = append(val, ' ')
		}
		val = append(val[:99], '}')
		if bl.SizeWith(ts, nil, val, nil) > 16384 {
			break
		}
		bl.Append(ts, nil, val, nil)
	}
	out, err := bl.Build()
	if err != nil {
		b.Fatal(err)
	}
	return append(record.Batch(nil), out...)
}

// BenchmarkLeaderValidate16K: a leader's full validation of a 16 KiB batch
// of 100-byte records (every record decoded, lz4 decompressed), beside
// Batch.Validate of the same bytes (the header and the CRC: what leader
// appends checked before). Bytes are the uncompressed batch's in both.
func BenchmarkLeaderValidate16K(b *testing.B) {
	const now = int64(1_700_000_000_000)
	raw := leaderBatch16K(b, record.None)
	for _, c := range []record.Codec{record.None, record.LZ4} {
		batch := leaderBatch16K(b, c)
		b.Run(c.String()+"/crc", func(b *testing.B) {
			b.SetBytes(int64(len(raw)))
			b.ReportAllocs()
			for b.Loop() {
				if err := batch.Validate(); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(c.String()+"/leader", func(b *testing.B) {
			var v record.Validator
			o := record.DefaultLeaderOptions()
			b.SetBytes(int64(len(raw)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := v.ValidateForLeader(batch, now, o); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(len(batch)), "batch-bytes")
			b.ReportMetric(float64(batch.NumRecords()), "records")
		})
	}
	// The rewrite Kafka does when compression.type names another codec.
	b.Run("none-to-lz4/leader", func(b *testing.B) {
		var v record.Validator
		o := record.DefaultLeaderOptions()
		o.Compression = record.CompressWith(record.LZ4)
		b.SetBytes(int64(len(raw)))
		b.ReportAllocs()
		for b.Loop() {
			if _, err := v.ValidateForLeader(raw, now, o); err != nil {
				b.Fatal(err)
			}
		}
	})
}
