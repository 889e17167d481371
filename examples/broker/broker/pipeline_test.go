package broker_test

import (
	"encoding/binary"
	"io"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tierlog/tierlog/examples/broker/broker"
)

// recvCorr reads one answer off c and returns its correlation id.
func recvCorr(t *testing.T, c *rawConn) int32 {
	t.Helper()
	c.nc.SetReadDeadline(time.Now().Add(rawWait))
	var size [4]byte
	if _, err := io.ReadFull(c.nc, size[:]); err != nil {
		t.Fatal(err)
	}
	body := make([]byte, binary.BigEndian.Uint32(size[:]))
	if _, err := io.ReadFull(c.nc, body); err != nil || len(body) < 4 {
		t.Fatalf("read an answer: %v (%d bytes)", err, len(body))
	}
	return int32(binary.BigEndian.Uint32(body))
}

// TestProducePipelined: Produces of one connection whose answers wait for
// the high watermark are all appended while the first waits (a producer
// with several requests in flight keeps moving), and every answer comes
// in the order of the requests, a Metadata request's after them.
func TestProducePipelined(t *testing.T) {
	b := startBroker(t, testOptions(t.TempDir()))
	createTopic(t, newClient(t, b.Addr()), "pipe", 1, nil)
	broker.HoldHighWatermark(b, "pipe", 0, true)
	c := dialRaw(t, b.Addr())
	var sent []int32
	for range 3 {
		sent = append(sent, c.send(produceRequest("pipe", -1, bigBatch(t, 1000))))
	}
	meta := kmsg.NewPtrMetadataRequest()
	meta.SetVersion(9)
	sent = append(sent, c.send(meta))
	waitFor(t, 30*time.Second, "the three produces appended while the first waits", func() bool {
		return b.Partition("pipe", 0).Offsets().LogEnd == 3
	})
	c.nc.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	var one [1]byte
	if n, _ := c.nc.Read(one[:]); n > 0 {
		t.Fatal("an answer came before the high watermark moved")
	}
	broker.HoldHighWatermark(b, "pipe", 0, false)
	for i, want := range sent {
		if got := recvCorr(t, c); got != want {
			t.Fatalf("answer %d has correlation id %d, want %d: out of order", i, got, want)
		}
	}
}
