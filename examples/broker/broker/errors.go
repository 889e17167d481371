package broker

import (
	"errors"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/tierlog/tierlog/backend"
)

// errorCode maps an error from the backend (or the broker) to the Kafka
// error code a client acts on: the one place that does. A *kerr.Error is
// the broker's own answer (a coordinator's, a request it refuses) and
// passes through; every other error is the backend's, which
// backend.KafkaCode maps (nil is 0).
func errorCode(err error) int16 {
	if ke := (*kerr.Error)(nil); errors.As(err, &ke) {
		return ke.Code
	}
	return backend.KafkaCode(err)
}
