package producerstate

// StartVerification is Kafka's UnifiedLog.maybeStartTransactionVerification:
// before a transactional produce request whose producer has no open
// transaction here, the broker gets a guard, asks the coordinator whether
// the partition is in the producer's transaction, and on a yes passes the
// guard in Options.VerificationGuard. It returns NoGuard when the producer
// already has an open transaction (no verification needed). Calling it
// again for the producer returns the same guard, lowering the recorded
// lowest sequence (or taking a higher epoch's); Prepare refuses sequences
// above it. A transactional batch or marker of the producer drops the
// guard; RemoveExpiredProducers drops guards older than
// producer.id.expiration.ms.
func (s *State) StartVerification(pid int64, seq int32, epoch int16, now int64) VerificationGuard {
	if s.HasOngoingTransaction(pid) {
		return NoGuard
	}
	s.gen++
	v := s.verifications[pid]
	if v == nil {
		s.lastGuard++
		v = &verification{timestamp: now, guard: s.lastGuard, lowestSeq: seq, epoch: epoch}
		s.verifications[pid] = v
		return v.guard
	}
	if epoch == v.epoch && seq < v.lowestSeq {
		v.lowestSeq = seq
	}
	if epoch > v.epoch {
		v.epoch, v.lowestSeq = epoch, seq
	}
	return v.guard
}

// VerificationGuard returns the producer's current guard, NoGuard if none.
func (s *State) VerificationGuard(pid int64) VerificationGuard {
	if v := s.verifications[pid]; v != nil {
		return v.guard
	}
	return NoGuard
}
