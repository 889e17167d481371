package broker

import (
	"errors"
	"fmt"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/tiered"
)

// TestErrorCode: the broker's own *kerr.Error passes through, wrapped or
// not; the backend's errors get backend.KafkaCode's code, a refused batch
// its class's (a timestamp out of range is INVALID_TIMESTAMP, not
// UNKNOWN_SERVER_ERROR).
func TestErrorCode(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want int16
	}{
		{"nil", nil, 0},
		{"kerr", kerr.CoordinatorNotAvailable, kerr.CoordinatorNotAvailable.Code},
		{"wrapped kerr", fmt.Errorf("group g: %w", kerr.IllegalGeneration), kerr.IllegalGeneration.Code},
		{"invalid timestamp", &backend.RejectedBatchError{Class: backend.ErrInvalidTimestamp, Index: -1, Cause: errors.New("record 0: timestamp 9e12 too far ahead")}, kerr.InvalidTimestamp.Code},
		{"not leader", fmt.Errorf("%w: t-0 (epoch 2)", tiered.ErrNotLeader), kerr.NotLeaderForPartition.Code},
		{"storage", fmt.Errorf("%w: fsync: i/o error", backend.ErrStorage), kerr.KafkaStorageError.Code},
		{"unknown", errors.New("something else"), kerr.UnknownServerError.Code},
	} {
		if got := errorCode(tc.err); got != tc.want {
			t.Errorf("%s: errorCode(%v) = %d, want %d", tc.name, tc.err, got, tc.want)
		}
	}
}
