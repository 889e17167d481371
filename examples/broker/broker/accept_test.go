package broker_test

import (
	"net"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/tierlog/tierlog/examples/broker/broker"
)

// failingListener fails its first fails Accepts with err, as a listener
// does while the process is out of descriptors, then accepts.
type failingListener struct {
	net.Listener
	fails atomic.Int32
	err   error
}

func (l *failingListener) Accept() (net.Conn, error) {
	if l.fails.Add(-1) >= 0 {
		return nil, l.err
	}
	return l.Listener.Accept()
}

// TestAcceptRetriesTemporaryErrors: an accept that fails for want of
// descriptors (EMFILE, ENFILE) or with an aborted connection is retried
// after a backoff, as Kafka's Acceptor and Go's http.Server do; the
// broker answers the next client.
func TestAcceptRetriesTemporaryErrors(t *testing.T) {
	for _, errno := range []syscall.Errno{syscall.EMFILE, syscall.ENFILE, syscall.ECONNABORTED} {
		t.Run(errno.Error(), func(t *testing.T) {
			opts := testOptions(t.TempDir())
			var fl *failingListener
			broker.WrapListener(&opts, func(ln net.Listener) net.Listener {
				fl = &failingListener{Listener: ln, err: &net.OpError{Op: "accept", Net: "tcp", Err: errno}}
				fl.fails.Store(4)
				return fl
			})
			b := startBroker(t, opts)
			c := dialRaw(t, b.Addr())
			if resp := c.apiVersions(3); resp.ErrorCode != 0 {
				t.Fatalf("ApiVersions after %v accepts: error code %d", errno, resp.ErrorCode)
			}
			if n := fl.fails.Load(); n >= 0 {
				t.Fatalf("%d failing accepts left", n+1)
			}
		})
	}
}
