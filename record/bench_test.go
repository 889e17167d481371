package record_test

import (
	"bytes"
	"hash/crc32"
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
