package local_test

import (
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/local"
	"github.com/tierlog/tierlog/record"
)

// BenchmarkLeaderValidation16K measures what leader-side validation
// (record.Validator.ValidateForLeader, every record decoded) costs an
// append of 16 KiB batches (16 KiB of records before compression; 100-byte
// values of words, so lz4 halves them), beside the header-only path of
// the same bytes: a follower's append, which checks each batch's header
// and CRC only. Page cache, no fsync; MB/s counts the records' bytes.
//
//	header-only  a follower append (base offset set to the log end)
//	validated    a client's leader append, compression.type=producer
//	recompress   a client's leader append of the uncompressed batches to a
//	             compression.type=lz4 topic (lz4 only: each batch is
//	             compressed before it is written)
func BenchmarkLeaderValidation16K(b *testing.B) {
	for _, codec := range []record.Codec{record.None, record.LZ4} {
		bs, raw := wordBatches16K(b, 64, codec)
		for _, mode := range []string{"header-only", "validated", "recompress"} {
			if mode == "recompress" && codec == record.None {
				continue
			}
			b.Run(codec.String()+"/"+mode, func(b *testing.B) {
				topic := "producer"
				data := bs
				if mode == "recompress" {
					topic = "lz4"
					data, _ = wordBatches16K(b, 64, record.None)
				}
				c, err := backend.ParseConfig(map[string]string{"segment.bytes": strconv.Itoa(256 << 20), "retention.bytes": strconv.Itoa(512 << 20),
					"file.delete.delay.ms": "0", "compression.type": topic})
				if err != nil {
					b.Fatal(err)
				}
				l, err := local.Open(b.TempDir(), local.Options{Config: c, LogStartOffset: -1, HighWatermark: -1})
				if err != nil {
					b.Fatal(err)
				}
				defer l.Close()
				b.SetBytes(raw)
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					batch := record.Batch(data[i&63])
					var err error
					if mode == "header-only" {
						batch.SetBaseOffset(l.Offsets().LogEnd)
						_, err = l.Append(ctx, batch, backend.AppendOptions{})
					} else {
						batch.SetBaseOffset(0) // as a producer sends it
						_, err = l.Append(ctx, batch, backend.AppendOptions{AssignOffsets: true})
					}
					if err != nil {
						b.Fatal(err)
					}
					i++
					if i%16384 == 0 {
						l.SetHighWatermark(l.Offsets().LogEnd)
						if _, err := l.DeleteOldSegments(); err != nil {
							b.Fatal(err)
						}
					}
				}
			})
		}
	}
}

// wordBatches16K returns n batches, each of 16 KiB of records (100-byte
// values of random words, keyed, timestamped now) compressed with c, and
// the records' bytes per batch.
func wordBatches16K(b *testing.B, n int, c record.Codec) ([][]byte, int64) {
	b.Helper()
	rng := rand.New(rand.NewPCG(16, 16))
	words := strings.Fields("alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november oscar papa quebec romeo sierra tango uniform victor whiskey xray yankee zulu")
	var bl record.Builder
	out := make([][]byte, n)
	var raw int64
	now := time.Now().UnixMilli()
	for i := range out {
		h := record.NewBatchHeader()
		h.Codec = c
		bl.Reset(h)
		for k := 0; ; k++ {
			var v []byte
			for len(v) < 100 {
				v = append(append(v, words[rng.IntN(len(words))]...), ' ')
			}
			key := []byte("key-" + strconv.Itoa(k))
			if bl.SizeWith(now, key, v[:100], nil) > 16384 {
				break
			}
			bl.Append(now, key, v[:100], nil)
		}
		raw = int64(bl.Size())
		batch, err := bl.Build()
		if err != nil {
			b.Fatal(err)
		}
		out[i] = append([]byte(nil), batch...)
	}
	return out, raw
}
