package broker_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// rawConn is a client connection that writes kmsg requests by hand, for
// what a real client cannot show: a version kgo never sends, a
// connection's fate after an answer.
type rawConn struct {
	t    testing.TB
	nc   net.Conn
	corr int32
}

// rawWait bounds each read of a raw connection, so a broker that never
// answers fails the test instead of hanging it. It is no assertion of
// speed: a healthy broker answers in microseconds.
const rawWait = 20 * time.Second

func dialRaw(t testing.TB, addr string) *rawConn {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, rawWait)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	return &rawConn{t: t, nc: nc}
}

// send writes req at its set version, with a request header of the
// version kmsg says, and returns the correlation id.
func (c *rawConn) send(req kmsg.Request) int32 {
	c.t.Helper()
	if _, err := c.nc.Write(c.frame(req)); err != nil {
		c.t.Fatalf("write api key %d v%d: %v", req.Key(), req.GetVersion(), err)
	}
	return c.corr
}

// frame encodes req as the connection's next request.
func (c *rawConn) frame(req kmsg.Request) []byte {
	c.corr++
	buf := []byte{0, 0, 0, 0}
	buf = kbin.AppendInt16(buf, req.Key())
	buf = kbin.AppendInt16(buf, req.GetVersion())
	buf = kbin.AppendInt32(buf, c.corr)
	buf = kbin.AppendNullableString(buf, kmsg.StringPtr("raw-test"))
	if req.IsFlexible() {
		buf = append(buf, 0)
	}
	buf = req.AppendTo(buf)
	binary.BigEndian.PutUint32(buf, uint32(len(buf)-4))
	return buf
}

// recv reads the answer to req (sent last) into a response of the same
// version.
func (c *rawConn) recv(req kmsg.Request) (kmsg.Response, error) {
	c.nc.SetReadDeadline(time.Now().Add(rawWait))
	var size [4]byte
	if _, err := io.ReadFull(c.nc, size[:]); err != nil {
		return nil, err
	}
	body := make([]byte, binary.BigEndian.Uint32(size[:]))
	if _, err := io.ReadFull(c.nc, body); err != nil {
		return nil, err
	}
	if len(body) < 4 {
		return nil, errors.New("short response")
	}
	if corr := int32(binary.BigEndian.Uint32(body)); corr != c.corr {
		return nil, fmt.Errorf("correlation id %d, want %d", corr, c.corr)
	}
	body = body[4:]
	resp := req.ResponseKind()
	resp.SetVersion(req.GetVersion())
	if resp.IsFlexible() && req.Key() != 18 {
		body = body[1:] // the header's empty tag section
	}
	if err := resp.ReadFrom(body); err != nil {
		return nil, fmt.Errorf("parse response to api key %d v%d: %w", req.Key(), req.GetVersion(), err)
	}
	return resp, nil
}

// roundTrip sends req and returns its answer, failing the test when none
// comes.
func (c *rawConn) roundTrip(req kmsg.Request) kmsg.Response {
	c.t.Helper()
	c.send(req)
	resp, err := c.recv(req)
	if err != nil {
		c.t.Fatalf("api key %d v%d: no answer: %v", req.Key(), req.GetVersion(), err)
	}
	return resp
}

// apiVersions asks the broker's ApiVersions at version v.
func (c *rawConn) apiVersions(v int16) *kmsg.ApiVersionsResponse {
	c.t.Helper()
	req := kmsg.NewPtrApiVersionsRequest()
	req.SetVersion(v)
	if v >= 3 {
		req.ClientSoftwareName, req.ClientSoftwareVersion = "raw-test", "1"
	}
	return c.roundTrip(req).(*kmsg.ApiVersionsResponse)
}
