package record_test

import (
	"bytes"
	"errors"
	"os"
	"testing"

	"github.com/tierlog/tierlog/record"
	"github.com/tierlog/tierlog/testing/fixtures"
)

// fixtureLogs lists every log file in shared/fixtures/kafka with the counts
// its README gives.
var fixtureLogs = []struct {
	path                 string
	entries, records     int
	firstOffset, lastOff int64
	magic                int8
	firstEntryIsControl  bool
	firstControlType     record.ControlType
	legacyWrapperOffsets []int64 // first few compressed wrapper offsets
}{
	{path: "ldi-poc/__consumer_offsets-6/00000000000000000000.log", entries: 13, records: 13, firstOffset: 0, lastOff: 12, magic: 2},
	{path: "ldi-poc/TestTopicPatient-0/00000000000000000000.log", entries: 3, records: 3, firstOffset: 0, lastOff: 2, magic: 2},
	{path: "ldi-poc/__cluster_metadata-0/00000000000000000000.log", entries: 4814, records: 4929, firstOffset: 0, lastOff: 4928, magic: 2,
		firstEntryIsControl: true, firstControlType: record.ControlLeaderChange},
	{path: "kafka-starter-windows/kafka-logs/test-0/00000000000000000000.log", entries: 28, records: 97, firstOffset: 0, lastOff: 96, magic: 2},
	{path: "kafka-starter-windows/kafka-logs/__consumer_offsets-36/00000000000000000000.log", entries: 1, records: 1, firstOffset: 0, lastOff: 0, magic: 2},
	{path: "kafkalite-legacy/tests/test-data/fs-data/numbers-0/00000000000000000000.log", entries: 11394, records: 11394, firstOffset: 0, lastOff: 11393, magic: 0},
	{path: "kafkalite-legacy/tests/test-data/fs-data/hamlet-gzip-0/00000000000000000000.log", entries: 22, records: 5382, firstOffset: 0, lastOff: 5381, magic: 0,
		legacyWrapperOffsets: []int64{253, 507}},
	{path: "codecrafters-cluster-metadata.log", entries: 2, records: 3, firstOffset: 1, lastOff: 3, magic: 2},
}

func TestFixturesDecodeAndValidate(t *testing.T) {
	for _, fx := range fixtureLogs {
		t.Run(fx.path, func(t *testing.T) {
			data := fixtures.Read(t, fx.path)
			s := record.NewScanner(bytes.NewReader(data), 0, int64(len(data)), record.ScanOptions{Validate: true})
			var it record.Iterator
			entries, records := 0, 0
			next := fx.firstOffset
			var wrappers []int64
			for s.Next() {
				e := s.Entry()
				if e.Magic != fx.magic {
					t.Fatalf("entry %d: magic %d, want %d", entries, e.Magic, fx.magic)
				}
				if entries == 0 && fx.firstEntryIsControl {
					if !e.Batch().IsControl() {
						t.Fatalf("first batch is not a control batch")
					}
				}
				if e.Magic < 2 && record.LegacyEntry(e.Data).Codec() != record.None {
					wrappers = append(wrappers, e.LastOffset)
				}
				if err := it.Reset(e.Data); err != nil {
					t.Fatalf("entry %d: %v", entries, err)
				}
				for it.Next() {
					r := it.Record()
					if r.Offset != next {
						t.Fatalf("record offset %d, want %d", r.Offset, next)
					}
					if records == 0 && fx.firstEntryIsControl {
						ct, err := record.ParseControlKey(r.Key)
						if err != nil || ct != fx.firstControlType {
							t.Fatalf("first control record: type %v, err %v; want %v", ct, err, fx.firstControlType)
						}
					}
					next++
					records++
				}
				if err := it.Err(); err != nil {
					t.Fatalf("entry %d: %v", entries, err)
				}
				if e.LastOffset != next-1 {
					t.Fatalf("entry %d: last offset %d, records end at %d", entries, e.LastOffset, next-1)
				}
				entries++
			}
			if err := s.Err(); err != nil {
				t.Fatalf("scan: %v", err)
			}
			if s.ValidEnd() != int64(len(data)) {
				t.Fatalf("scan stopped at %d of %d bytes", s.ValidEnd(), len(data))
			}
			if entries != fx.entries || records != fx.records || next-1 != fx.lastOff {
				t.Fatalf("got %d entries, %d records, last offset %d; want %d, %d, %d",
					entries, records, next-1, fx.entries, fx.records, fx.lastOff)
			}
			for i, w := range fx.legacyWrapperOffsets {
				if i >= len(wrappers) || wrappers[i] != w {
					t.Fatalf("legacy wrapper offsets %v, want prefix %v", wrappers[:min(len(wrappers), 4)], fx.legacyWrapperOffsets)
				}
			}
		})
	}
}

// TestFixturesRebuildByteIdentical decodes every v2 batch Kafka wrote and
// rebuilds it with the Builder from its decoded fields and records: the
// bytes must come out identical, CRC included.
func TestFixturesRebuildByteIdentical(t *testing.T) {
	var b record.Builder
	var it record.Iterator
	for _, fx := range fixtureLogs {
		if fx.magic != 2 {
			continue
		}
		t.Run(fx.path, func(t *testing.T) {
			data := fixtures.Read(t, fx.path)
			s := record.NewScanner(bytes.NewReader(data), 0, int64(len(data)), record.ScanOptions{Validate: true})
			n := 0
			for s.Next() {
				orig := s.Entry().Batch()
				h := record.NewBatchHeader()
				h.BaseOffset = orig.BaseOffset()
				h.PartitionLeaderEpoch = orig.PartitionLeaderEpoch()
				h.Codec = orig.Codec()
				h.TimestampType = orig.TimestampType()
				h.Transactional = orig.IsTransactional()
				h.Control = orig.IsControl()
				h.ProducerID = orig.ProducerID()
				h.ProducerEpoch = orig.ProducerEpoch()
				h.BaseSequence = orig.BaseSequence()
				b.Reset(h)
				if err := it.Reset(orig); err != nil {
					t.Fatal(err)
				}
				for it.Next() {
					r := it.Record()
					if err := b.AppendAt(int32(r.Offset-orig.BaseOffset()), r.Timestamp, r.Key, r.Value, r.Headers); err != nil {
						t.Fatal(err)
					}
				}
				got, err := b.Build()
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got, orig) {
					t.Fatalf("batch %d at offset %d differs:\n got %x\nwant %x", n, orig.BaseOffset(), got[:min(len(got), 80)], []byte(orig[:min(len(orig), 80)]))
				}
				n++
			}
			if s.Err() != nil {
				t.Fatal(s.Err())
			}
		})
	}
}

// TestFixtureCorruptionDetected flips bytes of a real Kafka log and expects
// the scanner to stop with a corruption error at the damaged batch.
func TestFixtureCorruptionDetected(t *testing.T) {
	data := fixtures.Read(t, "ldi-poc/__consumer_offsets-6/00000000000000000000.log")
	pos := bytes.Index(data, []byte("DEVSmile")) // inside the first batch's records
	if pos < 0 {
		t.Fatal("fixture changed: marker not found")
	}
	bad := append([]byte(nil), data...)
	bad[pos] ^= 0x01
	s := record.NewScanner(bytes.NewReader(bad), 0, int64(len(bad)), record.ScanOptions{Validate: true})
	if s.Next() {
		t.Fatal("damaged first batch was returned")
	}
	var be *record.BatchError
	if !errors.Is(s.Err(), record.ErrCRCMismatch) || !errors.Is(s.Err(), record.ErrCorrupt) || !errors.As(s.Err(), &be) || be.Position != 0 {
		t.Fatalf("err = %v, want a CRC mismatch at position 0", s.Err())
	}
	if _, err := os.Stat(fixtures.Path(t, "ldi-poc/__consumer_offsets-6/00000000000000000000.log")); err != nil {
		t.Fatal(err)
	}
}
