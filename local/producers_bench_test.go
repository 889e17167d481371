package local_test

import (
	"encoding/binary"
	"io"
	"math/rand/v2"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/local"
	"github.com/tierlog/tierlog/record"
)

// The byte offsets of a v2 batch's CRC and base sequence.
const (
	offCRC          = 17
	offBaseSequence = 53
)

// BenchmarkAppendProducers16K appends the same 16 KiB batches of 100-byte
// records as a leader, without a producer (plain) and as 64 idempotent
// producers (idempotent), each batch continuing its producer's sequence.
// Both re-stamp every batch's base sequence and CRC before appending it,
// so the difference is the producer state's work. Target: idempotent >=
// 0.95x plain.
func BenchmarkAppendProducers16K(b *testing.B) {
	for _, idempotent := range []bool{false, true} {
		name := "plain"
		if idempotent {
			name = "idempotent"
		}
		b.Run(name, func(b *testing.B) {
			c, _ := backend.ParseConfig(map[string]string{"segment.bytes": strconv.Itoa(256 << 20), "retention.bytes": strconv.Itoa(512 << 20), "file.delete.delay.ms": "0"})
			l, err := local.Open(b.TempDir(), local.Options{Config: c, LogStartOffset: -1, HighWatermark: -1})
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			var rb record.Builder
			val := make([]byte, 100)
			const producers = 64
			bs := make([][]byte, producers)
			seqs := make([]int32, producers)
			for i := range bs {
				h := record.NewBatchHeader()
				if idempotent {
					h.ProducerID, h.ProducerEpoch, h.BaseSequence = int64(1000+i), 0, 0
				}
				rb.Reset(h)
				for rb.SizeWith(1, nil, val, nil) <= 16384 {
					rb.Append(1, nil, val, nil)
				}
				batch, _ := rb.Build()
				bs[i] = append([]byte(nil), batch...)
			}
			n := record.Batch(bs[0]).NumRecords()
			b.SetBytes(int64(len(bs[0])))
			i := 0
			for b.Loop() {
				p := i % producers
				batch := bs[p]
				record.Batch(batch).SetBaseOffset(0)
				if idempotent {
					binary.BigEndian.PutUint32(batch[offBaseSequence:], uint32(seqs[p]))
					seqs[p] += n
				}
				binary.BigEndian.PutUint32(batch[offCRC:], record.Batch(batch).ComputeCRC())
				if _, err := l.Append(ctx, batch, backend.AppendOptions{AssignOffsets: true}); err != nil {
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

// BenchmarkReadIsolation16K reads 1 MiB from random offsets of a 128 MiB
// log without transactions, into io.Discard: read_uncommitted
// (ReadHighWatermark) beside read_committed (ReadCommitted, which also
// looks up aborted transactions). Target: committed as fast as
// uncommitted.
func BenchmarkReadIsolation16K(b *testing.B) {
	c, _ := backend.ParseConfig(map[string]string{"segment.bytes": strconv.Itoa(32 << 20)})
	l, err := local.Open(filepath.Join(b.TempDir(), "orders-0"), local.Options{Config: c, LogStartOffset: -1, HighWatermark: -1})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	for _, batch := range batches16K(128 << 20 / 16384) {
		if _, err := l.Append(ctx, batch, backend.AppendOptions{AssignOffsets: true}); err != nil {
			b.Fatal(err)
		}
	}
	l.SetHighWatermark(l.Offsets().LogEnd)
	leo := l.Offsets().LogEnd
	for _, c := range []struct {
		name string
		iso  backend.Isolation
	}{{"uncommitted", backend.ReadHighWatermark}, {"committed", backend.ReadCommitted}} {
		b.Run(c.name, func(b *testing.B) {
			rng := rand.New(rand.NewPCG(5, 6))
			b.SetBytes(1 << 20)
			for b.Loop() {
				r, err := l.Read(ctx, rng.Int64N(leo), backend.ReadOptions{MaxBytes: 1 << 20, MinOneBatch: true, Isolation: c.iso})
				if err != nil {
					b.Fatal(err)
				}
				if _, err := r.WriteTo(io.Discard); err != nil {
					b.Fatal(err)
				}
				r.Close()
			}
		})
	}
}
