package producerstate

import (
	"slices"

	"github.com/tierlog/tierlog/record"
)

// Snapshot appends the .snapshot encoding of the state to dst, producers
// by id, and returns it with the offset it describes (EndOffset), which
// names the file. As in Kafka, each producer's entry keeps only its last
// batch, with the producer's last timestamp as that batch's timestamp.
func (s *State) Snapshot(dst []byte) (data []byte, offset int64) {
	s.pids = s.pids[:0]
	for pid := range s.producers {
		s.pids = append(s.pids, pid)
	}
	slices.Sort(s.pids)
	start := len(dst)
	dst = slices.Grow(dst, SnapshotHeaderSize+len(s.pids)*SnapshotEntrySize)
	dst = appendSnapshotHeader(dst, len(s.pids))
	for _, pid := range s.pids {
		e := s.producers[pid]
		se := SnapshotEntry{
			ProducerID: pid, Epoch: e.epoch,
			LastSequence: record.NoSequence, LastOffset: -1, OffsetDelta: 0,
			Timestamp: e.lastTimestamp, CoordinatorEpoch: e.coordEpoch,
			CurrentTxnFirstOffset: e.txnFirst,
		}
		if e.nb > 0 {
			last := &e.batches[e.nb-1]
			se.LastSequence, se.LastOffset, se.OffsetDelta = last.LastSeq, last.LastOffset, last.OffsetDelta
		}
		dst = appendSnapshotEntry(dst, &se)
	}
	finishSnapshot(dst[start:])
	return dst, s.endOffset
}

// Load replaces the state with the snapshot data describing the log up to
// offset, as Kafka loads one: producers expired at now (ms) are dropped;
// each kept producer's last batch (when LastOffset >= 0) is the only one
// retained, so only a retry of that batch is found as a duplicate until
// more are appended; open transactions are rebuilt from
// CurrentTxnFirstOffset (>= 0); completed transactions awaiting the high
// watermark are forgotten (Kafka assumes offset <= the high watermark).
// On error (ErrCorruptSnapshot) the state is unchanged.
func (s *State) Load(data []byte, offset, now int64) error {
	n, err := checkSnapshot(data)
	if err != nil {
		return err
	}
	slab := make([]entry, n)
	producers := make(map[int64]*entry, n)
	s.ongoing = s.ongoing[:0]
	for i := 0; i < n; i++ {
		se := snapshotEntryAt(data, i)
		e := &slab[i]
		*e = entry{
			epoch: se.Epoch, coordEpoch: se.CoordinatorEpoch,
			lastTimestamp: se.Timestamp, txnFirst: -1,
		}
		if se.CurrentTxnFirstOffset >= 0 {
			e.txnFirst = se.CurrentTxnFirstOffset
		}
		if s.expired(e, now) {
			continue
		}
		if se.LastOffset >= 0 {
			e.batches[0] = BatchMetadata{LastSeq: se.LastSequence, OffsetDelta: se.OffsetDelta, LastOffset: se.LastOffset, Timestamp: se.Timestamp}
			e.nb = 1
		}
		producers[se.ProducerID] = e
	}
	for pid, e := range producers {
		if e.txnFirst >= 0 {
			s.ongoing = append(s.ongoing, txnRef{first: e.txnFirst, pid: pid})
		}
	}
	slices.SortFunc(s.ongoing, func(a, b txnRef) int { return cmp64(a.first, b.first) })
	s.producers = producers
	s.unreplicated = s.unreplicated[:0]
	s.endOffset = offset
	s.gen++
	return nil
}
