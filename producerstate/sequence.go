package producerstate

import (
	"math"
)

// inSequence is Kafka's ProducerAppendInfo.inSequence: next follows last,
// wrapping from MaxInt32 to 0.
func inSequence(last, next int32) bool {
	return int64(next) == int64(last)+1 || (next == 0 && last == math.MaxInt32)
}

// decrementSequence is Kafka's DefaultRecordBatch.decrementSequence.
func decrementSequence(seq, dec int32) int32 {
	if seq < dec {
		return math.MaxInt32 - (dec - seq) + 1
	}
	return seq - dec
}
