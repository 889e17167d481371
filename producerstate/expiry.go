package producerstate

import (
	"slices"
)

// OnLogStartIncremented is Kafka's onLogStartOffsetIncremented: completed
// transactions whose markers fall below the new log start offset are
// forgotten, and EndOffset is raised to it if below. Producers are kept
// (since KIP-360 Kafka retains a producer's state after its records are
// deleted, until it expires) and so are open transactions (the log raises
// the first unstable offset to the log start; see LastStableOffset).
func (s *State) OnLogStartIncremented(logStartOffset int64) {
	s.unreplicated = slices.DeleteFunc(s.unreplicated, func(d doneTxn) bool { return d.last < logStartOffset })
	if s.endOffset < logStartOffset {
		s.endOffset = logStartOffset
	}
}

func (s *State) expired(e *entry, now int64) bool {
	return e.txnFirst < 0 && now-e.lastTimestamp >= s.cfg.ProducerIDExpirationMs
}

// RemoveExpiredProducers is Kafka's removeExpiredProducers: it removes the
// producers without an open transaction whose last timestamp is at least
// producer.id.expiration.ms before now (ms), and verification guards that
// old, and returns how many producers it removed.
func (s *State) RemoveExpiredProducers(now int64) int {
	n := 0
	for pid, e := range s.producers {
		if s.expired(e, now) {
			delete(s.producers, pid)
			n++
		}
	}
	for pid, v := range s.verifications {
		if now-v.timestamp >= s.cfg.ProducerIDExpirationMs {
			delete(s.verifications, pid)
		}
	}
	s.gen++
	return n
}
