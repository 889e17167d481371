package producerstate_test

import (
	"encoding/binary"
	"hash/crc32"
	"strconv"
	"testing"

	"github.com/tierlog/tierlog/producerstate"
	"github.com/tierlog/tierlog/record"
)

// setBatch rewrites a batch's base offset and base sequence in place, as
// a stream of appends would carry them (the CRC is not recomputed:
// Prepare does not check it; the log has before calling it).
func setBatch(b []byte, base int64, seq int32) {
	binary.BigEndian.PutUint64(b[0:], uint64(base))
	binary.BigEndian.PutUint32(b[53:], uint32(seq))
}

// BenchmarkAppendIdempotent is the per-append cost the producer state
// adds to a leader's append of one idempotent batch of 10 records:
// Prepare then Apply. Baseline: parsing the batch and reading the header
// fields the state reads, which the log does anyway.
func BenchmarkAppendIdempotent(b *testing.B) {
	var bld record.Builder
	batch := buildBatch(b, &bld, 0, spec{pid: 1, n: 10, ts: 1700000000000})
	b.Run("baseline-header", func(b *testing.B) {
		var sink int64
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			setBatch(batch, int64(i)*10, int32(i)*10)
			bt, err := record.Parse(batch)
			if err != nil {
				b.Fatal(err)
			}
			sink += bt.ProducerID() + int64(bt.ProducerEpoch()) + int64(bt.BaseSequence()) + int64(bt.LastSequence()) +
				bt.LastOffset() + bt.MaxTimestamp()
		}
		_ = sink
	})
	for _, producers := range []int{1, 1000} {
		b.Run("producers="+strconv.Itoa(producers), func(b *testing.B) {
			s := newState(b, producerstate.DefaultConfig())
			var p producerstate.Plan
			opts := producerstate.Options{Origin: producerstate.OriginClient}
			seqs := make([]int32, producers)
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				pid := i % producers
				binary.BigEndian.PutUint64(batch[43:], uint64(pid))
				setBatch(batch, int64(i)*10, seqs[pid])
				if err := s.Prepare(&p, batch, opts); err != nil || p.Duplicate {
					b.Fatal(err, p.Duplicate)
				}
				if err := s.Apply(&p); err != nil {
					b.Fatal(err)
				}
				seqs[pid] += 10
			}
		})
	}
}

// BenchmarkAppendTransaction is one transaction of one producer: a
// transactional batch (Prepare+Apply) and its COMMIT marker from the
// coordinator (Prepare+Apply, reading the marker record).
func BenchmarkAppendTransaction(b *testing.B) {
	var bld record.Builder
	batch := buildBatch(b, &bld, 0, spec{pid: 1, n: 10, txn: true, ts: 1700000000000})
	marker := buildMarker(b, &bld, 10, mspec{pid: 1, coord: 1, commit: true, ts: 1700000000000})
	s := newState(b, noVerify())
	var p producerstate.Plan
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		setBatch(batch, int64(i)*11, int32(i)*10)
		if err := s.Prepare(&p, batch, producerstate.Options{Origin: producerstate.OriginClient}); err != nil {
			b.Fatal(err)
		}
		if err := s.Apply(&p); err != nil {
			b.Fatal(err)
		}
		binary.BigEndian.PutUint64(marker, uint64(int64(i)*11+10))
		if err := s.Prepare(&p, marker, producerstate.Options{Origin: producerstate.OriginCoordinator}); err != nil || len(p.Completed) != 1 {
			b.Fatal(err)
		}
		if err := s.Apply(&p); err != nil {
			b.Fatal(err)
		}
		s.SetHighWatermark(p.NextOffset())
	}
}

// stateWith returns a State holding n idempotent producers, one batch each,
// and every tenth with an open transaction.
func stateWith(b *testing.B, n int) *producerstate.State {
	var bld record.Builder
	s := newState(b, noVerify())
	var buf []byte
	for i := 0; i < n; i++ {
		buf = append(buf, buildBatch(b, &bld, int64(i)*3, spec{pid: int64(1000 + i), epoch: 1, seq: 0, n: 3, txn: i%10 == 0, ts: 1700000000000})...)
	}
	var p producerstate.Plan
	if err := s.Prepare(&p, buf, producerstate.Options{Origin: producerstate.OriginReplication}); err != nil {
		b.Fatal(err)
	}
	if err := s.Apply(&p); err != nil {
		b.Fatal(err)
	}
	return s
}

// BenchmarkSnapshot10k encodes and loads the snapshot of 10,000 producers
// (470,010 bytes). Baseline: the CRC-32C of the same bytes, which both
// must compute.
func BenchmarkSnapshot10k(b *testing.B) {
	const n = 10000
	s := stateWith(b, n)
	data, off := s.Snapshot(nil)
	if len(data) != producerstate.SnapshotHeaderSize+n*producerstate.SnapshotEntrySize {
		b.Fatal(len(data))
	}
	b.Run("baseline-crc32c", func(b *testing.B) {
		tab := crc32.MakeTable(crc32.Castagnoli)
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			crc32.Checksum(data[6:], tab)
		}
	})
	b.Run("encode", func(b *testing.B) {
		buf := make([]byte, 0, len(data))
		b.SetBytes(int64(len(data)))
		b.ReportAllocs()
		for b.Loop() {
			buf, _ = s.Snapshot(buf[:0])
		}
	})
	b.Run("load", func(b *testing.B) {
		t := newState(b, noVerify())
		b.SetBytes(int64(len(data)))
		b.ReportAllocs()
		for b.Loop() {
			if err := t.Load(data, off, 1700000000000); err != nil {
				b.Fatal(err)
			}
		}
		if t.Len() != n {
			b.Fatal(t.Len())
		}
	})
}

// BenchmarkCollectAbortedTxns searches a .txnindex of 1,000 entries for a
// fetch range near its end.
func BenchmarkCollectAbortedTxns(b *testing.B) {
	var idx []byte
	for i := int64(0); i < 1000; i++ {
		idx = producerstate.AbortedTxn{ProducerID: i, FirstOffset: i * 10, LastOffset: i*10 + 5, LastStableOffset: i*10 + 6}.AppendTo(idx)
	}
	var dst []producerstate.AbortedTxn
	b.ReportAllocs()
	for b.Loop() {
		var complete bool
		var err error
		dst, complete, err = producerstate.CollectAbortedTxns(dst[:0], idx, 9900, 9950)
		if err != nil || !complete || len(dst) != 5 {
			b.Fatal(err, complete, len(dst))
		}
	}
}
