package producerstate

import (
	"slices"

	"github.com/tierlog/tierlog/record"
)

// SetHighWatermark tells the state the partition's high watermark moved
// (Kafka's onHighWatermarkUpdated): completed transactions whose markers
// are now below it stop holding the first unstable offset back.
func (s *State) SetHighWatermark(hw int64) {
	s.unreplicated = slices.DeleteFunc(s.unreplicated, func(d doneTxn) bool { return d.last < hw })
}

// FirstUndecidedOffset is the first offset of the oldest open transaction.
func (s *State) FirstUndecidedOffset() (int64, bool) {
	if len(s.ongoing) == 0 {
		return 0, false
	}
	return s.ongoing[0].first, true
}

// FirstUnstableOffset is Kafka's: the first offset of the oldest
// transaction that is open, or completed with its marker not yet below
// the high watermark; false when there is none.
func (s *State) FirstUnstableOffset() (int64, bool) {
	first, ok := s.FirstUndecidedOffset()
	if len(s.unreplicated) > 0 && (!ok || s.unreplicated[0].first < first) {
		return s.unreplicated[0].first, true
	}
	return first, ok
}

// LastStableOffset is the partition's last stable offset as Kafka's
// UnifiedLog computes it: the first unstable offset (raised to the log
// start offset) when it is below the high watermark, else the high
// watermark. read_committed fetches stop there.
func (s *State) LastStableOffset(highWatermark, logStartOffset int64) int64 {
	if fuo, ok := s.FirstUnstableOffset(); ok {
		fuo = max(fuo, logStartOffset)
		if fuo < highWatermark {
			return fuo
		}
	}
	return highWatermark
}

// OpenTransactions returns the open transactions by first offset.
func (s *State) OpenTransactions() []OpenTxn {
	out := make([]OpenTxn, 0, len(s.ongoing))
	for _, t := range s.ongoing {
		out = append(out, s.openTxn(t))
	}
	return out
}

func (s *State) openTxn(t txnRef) OpenTxn {
	o := OpenTxn{ProducerID: t.pid, FirstOffset: t.first, Epoch: record.NoProducerEpoch, LastTimestamp: record.NoTimestamp}
	if e := s.producers[t.pid]; e != nil {
		o.Epoch, o.LastTimestamp = e.epoch, e.lastTimestamp
	}
	return o
}

// HungTransactions lists the open transactions whose producer has written
// nothing for longer than timeoutMs at time now (ms), by first offset:
// what Kafka's tooling calls hanging transactions, judged as Kafka does by
// the producer's last timestamp. The state never aborts them; an operator
// or the coordinator does. Kafka's own threshold is
// TransactionMaxTimeoutMs + LateTransactionBufferMs.
func (s *State) HungTransactions(now, timeoutMs int64) []OpenTxn {
	var out []OpenTxn
	for _, t := range s.ongoing {
		if o := s.openTxn(t); now-o.LastTimestamp > timeoutMs {
			out = append(out, o)
		}
	}
	return out
}

// HasLateTransaction is Kafka's ProducerStateManager.hasLateTransaction:
// the oldest open transaction's producer last wrote more than
// TransactionMaxTimeoutMs + LateTransactionBufferMs before now.
func (s *State) HasLateTransaction(now int64) bool {
	if len(s.ongoing) == 0 {
		return false
	}
	ts := s.openTxn(s.ongoing[0]).LastTimestamp
	return ts > 0 && now-ts > s.cfg.TransactionMaxTimeoutMs+LateTransactionBufferMs
}
