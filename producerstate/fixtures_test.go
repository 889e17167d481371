package producerstate_test

import (
	"bytes"
	"reflect"
	"testing"

	"github.com/tierlog/tierlog/producerstate"
	"github.com/tierlog/tierlog/record"
	"github.com/tierlog/tierlog/testing/fixtures"
)

// replayLog replays every batch of a Kafka-written .log as a recovery (or
// a follower) would: a header-only scan, control batches read whole.
func replayLog(t *testing.T, s *producerstate.State, data []byte) {
	t.Helper()
	sc := record.NewScanner(bytes.NewReader(data), 0, int64(len(data)), record.ScanOptions{Validate: true})
	n := 0
	for sc.Next() {
		if _, _, err := s.Replay(sc.Entry().Batch()); err != nil {
			t.Fatalf("batch %d: %v", n, err)
		}
		n++
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
}

// TestFixtureIdempotentLogs replays the idempotent batches of two real
// Kafka partitions and checks the producers Kafka would hold. The
// expected values are read off the batches (tierctl dump shows them):
//
//   - ldi-poc TestTopicPatient-0: three single-record batches at offsets
//     0, 1, 2 from producers 1, 2, 3, each epoch 0, base sequence 0.
//   - kafka-starter-windows test-0 (Kafka 3.4.0): 28 batches of producer
//     0, epoch 0, base sequence == base offset, offsets 0..96, 1 to 17
//     records each; the last five are [86], [87], [88..94], [95], [96],
//     so Kafka holds last sequence 96 at offset 96.
func TestFixtureIdempotentLogs(t *testing.T) {
	t.Run("TestTopicPatient-0", func(t *testing.T) {
		s := newState(t, producerstate.DefaultConfig())
		replayLog(t, s, fixtures.Read(t, "ldi-poc/TestTopicPatient-0/00000000000000000000.log"))
		want := []producerstate.ProducerInfo{
			{ProducerID: 1, Epoch: 0, CoordinatorEpoch: -1, LastTimestamp: 1769792698283, CurrentTxnFirstOffset: -1,
				Batches: []producerstate.BatchMetadata{{LastSeq: 0, OffsetDelta: 0, LastOffset: 0, Timestamp: 1769792698283}}},
			{ProducerID: 2, Epoch: 0, CoordinatorEpoch: -1, LastTimestamp: 1769793423115, CurrentTxnFirstOffset: -1,
				Batches: []producerstate.BatchMetadata{{LastSeq: 0, OffsetDelta: 0, LastOffset: 1, Timestamp: 1769793423115}}},
			{ProducerID: 3, Epoch: 0, CoordinatorEpoch: -1, LastTimestamp: 1769793578165, CurrentTxnFirstOffset: -1,
				Batches: []producerstate.BatchMetadata{{LastSeq: 0, OffsetDelta: 0, LastOffset: 2, Timestamp: 1769793578165}}},
		}
		if got := s.Producers(); !reflect.DeepEqual(got, want) {
			t.Fatalf("producers\n got %+v\nwant %+v", got, want)
		}
		if s.EndOffset() != 3 {
			t.Fatal(s.EndOffset())
		}
		// The snapshot Kafka would write at 3: 10 + 3×46 bytes.
		snap, off := s.Snapshot(nil)
		if off != 3 || len(snap) != 148 {
			t.Fatalf("snapshot at %d of %d bytes", off, len(snap))
		}
	})
	t.Run("test-0", func(t *testing.T) {
		s := newState(t, producerstate.DefaultConfig())
		replayLog(t, s, fixtures.Read(t, "kafka-starter-windows/kafka-logs/test-0/00000000000000000000.log"))
		// The last five batches of producer 0 (first offset = first
		// sequence, as the fixtures README says).
		want := []producerstate.ProducerInfo{{
			ProducerID: 0, Epoch: 0, CoordinatorEpoch: -1, LastTimestamp: 1679680569372, CurrentTxnFirstOffset: -1,
			Batches: []producerstate.BatchMetadata{
				{LastSeq: 86, OffsetDelta: 0, LastOffset: 86, Timestamp: 1679679141251},
				{LastSeq: 87, OffsetDelta: 0, LastOffset: 87, Timestamp: 1679680060006},
				{LastSeq: 94, OffsetDelta: 6, LastOffset: 94, Timestamp: 1679680063810},
				{LastSeq: 95, OffsetDelta: 0, LastOffset: 95, Timestamp: 1679680063967},
				{LastSeq: 96, OffsetDelta: 0, LastOffset: 96, Timestamp: 1679680569372},
			},
		}}
		if got := s.Producers(); !reflect.DeepEqual(got, want) {
			t.Fatalf("producers\n got %+v\nwant %+v", got, want)
		}
		if s.EndOffset() != 97 {
			t.Fatal(s.EndOffset())
		}
		// As the leader, a client's retry of [88..94] is a duplicate and
		// the next batch must start at sequence 97.
		l := &tlog{t: t, s: s, end: 97}
		if o := l.produce(client(), spec{pid: 0, seq: 88, n: 7}); !o.dup || o.first != 88 || o.last != 94 {
			t.Fatalf("retry: %+v", o)
		}
		if o := l.produce(client(), spec{pid: 0, seq: 97, n: 2}); o.err != nil || o.first != 97 {
			t.Fatalf("next: %+v", o)
		}
	})
}

// TestFixtureEmptySnapshot: Kafka's 10-byte snapshot of __consumer_offsets-6
// at offset 13 loads, re-encodes byte for byte, and is what replaying the
// partition's .log (13 batches without a producer id) produces.
func TestFixtureEmptySnapshot(t *testing.T) {
	const name = "00000000000000000013.snapshot"
	data := fixtures.Read(t, "ldi-poc/__consumer_offsets-6/"+name)
	off, ok := producerstate.ParseSnapshotFileName(name)
	if !ok || off != 13 || producerstate.SnapshotFileName(off) != name {
		t.Fatal(off, ok)
	}
	entries, err := producerstate.DecodeSnapshot(data)
	if err != nil || len(entries) != 0 {
		t.Fatal(entries, err)
	}
	if again := producerstate.EncodeSnapshot(nil, entries); !bytes.Equal(again, data) {
		t.Fatalf("re-encoded %x, file %x", again, data)
	}
	s := newState(t, producerstate.DefaultConfig())
	if err := s.Load(data, off, 0); err != nil || s.Len() != 0 || s.EndOffset() != 13 {
		t.Fatal(err, s.Len(), s.EndOffset())
	}
	if snap, at := s.Snapshot(nil); !bytes.Equal(snap, data) || at != 13 {
		t.Fatalf("state snapshot %x at %d", snap, at)
	}

	r := newState(t, producerstate.DefaultConfig())
	replayLog(t, r, fixtures.Read(t, "ldi-poc/__consumer_offsets-6/00000000000000000000.log"))
	if snap, at := r.Snapshot(nil); !bytes.Equal(snap, data) || at != 13 {
		t.Fatalf("replayed snapshot %x at %d", snap, at)
	}
}
