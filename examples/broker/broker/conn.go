package broker

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// maxRequestBytes caps a request's size before it sizes an allocation
// (Kafka's socket.request.max.bytes, 100 MiB).
const maxRequestBytes = 100 << 20

// conn is one client connection. Requests run one at a time, in order,
// and are answered in order. The response to one is written before the
// next is read, as Kafka's broker mutes a connection while a request is
// in flight, with one exception: a Produce whose answer waits for the high
// watermark (acks=-1, or a diskless topic's acks=1) is appended and then
// waits beside the next requests, up to maxPipelinedProduces of them, its
// answer written in turn by the connection's answerer (pipeline.go): a
// producer with several requests in flight (kgo sends up to five) keeps
// them moving while each waits for its replicas, or for the bucket. A
// request other than a Produce waits until every earlier answer is
// written. A request is
// read straight from the socket, its size and then its body, with no
// read buffer: a connection waiting for request memory holds nothing
// but the four bytes of the size, so a flood of connections costs the
// bound and not a buffer each.
type conn struct {
	b    *Broker
	nc   net.Conn
	body []byte // the request being handled; reused, so handlers copy what they keep
	out  []byte // the response being written
	held int64  // the bytes of requestMemory the request holds
	// pipe answers the Produces that wait beside the next requests (nil
	// until the first).
	pipe *pipeline
	// counted is what the connection's buffers add to
	// Broker.bufferBytes.
	counted int64
}

// count updates Broker.bufferBytes with the buffers the connection holds
// now.
func (c *conn) count() {
	n := int64(cap(c.body) + cap(c.out))
	c.b.bufferBytes.Add(n - c.counted)
	c.counted = n
}

// keepBufferBytes is the largest request or response buffer a connection
// keeps for the next request; a larger one is dropped once its request
// is answered, so an idle connection holds no more.
const keepBufferBytes = 1 << 20

// request is a parsed request with its header.
type request struct {
	key      int16
	version  int16
	corr     int32
	clientID string
	kreq     kmsg.Request
	// badVersion: an ApiVersions request of a version this broker does
	// not speak, answered with version 0 and UNSUPPORTED_VERSION.
	badVersion bool
}

var (
	// errNoResponse is returned by a handler whose request has no
	// response (a Produce with acks=0).
	errNoResponse = errors.New("broker: no response")
	// errBadRequest is a request the broker cannot serve: an unknown api
	// key, a version outside the range ApiVersions says, a size out of
	// bounds, a body that does not parse. The connection is closed, as
	// Kafka closes it, and the close is logged at warn.
	errBadRequest = errors.New("broker: request not served")
)

func (b *Broker) serveConn(nc net.Conn) {
	defer nc.Close()
	c := &conn{b: b, nc: nc}
	defer func() {
		c.done()
		c.b.bufferBytes.Add(-c.counted)
	}()
	ctx := b.life
	defer func() { c.pipe.close() }()
	for {
		c.done()
		req, err := c.read()
		if err != nil {
			var ne net.Error
			switch {
			case errors.As(err, &ne) && ne.Timeout():
				b.logger.Debug("closing idle connection", "remote", nc.RemoteAddr().String(), "idle", b.opts.ConnectionsMaxIdle)
			case errors.Is(err, errBadRequest):
				b.logger.Warn("closing connection", "remote", nc.RemoteAddr().String(), "err", err)
			case !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed):
				b.logger.Debug("connection closed", "remote", nc.RemoteAddr().String(), "err", err)
			}
			return
		}
		b.requests.Add(1)
		if pr, ok := req.kreq.(*kmsg.ProduceRequest); ok {
			err = c.produce(ctx, req, pr)
			if err != nil {
				b.logger.Debug("closing connection", "remote", nc.RemoteAddr().String(), "key", req.key, "err", err)
				return
			}
			continue
		}
		c.pipe.drain() // every earlier answer goes first
		if f, ok := req.kreq.(*kmsg.FetchRequest); ok {
			err = b.fetch(ctx, c, req, f)
		} else {
			var resp kmsg.Response
			resp, err = b.handle(ctx, c, req)
			if errors.Is(err, errNoResponse) {
				continue
			}
			if err == nil {
				err = c.writeResponse(req, resp)
			}
		}
		if err != nil {
			b.logger.Debug("closing connection", "remote", nc.RemoteAddr().String(), "key", req.key, "err", err)
			return
		}
	}
}

// remoteHost is the client's address without the port (DescribeGroups'
// client host).
func (c *conn) remoteHost() string {
	host, _, err := net.SplitHostPort(c.nc.RemoteAddr().String())
	if err != nil {
		return c.nc.RemoteAddr().String()
	}
	return "/" + host
}

// done ends the request being handled: its memory goes back to the
// pool, a large request buffer goes back to Broker.bodies, and a large
// response buffer is dropped.
func (c *conn) done() {
	c.b.mem.release(c.held)
	c.held = 0
	if cap(c.body) > keepBufferBytes {
		c.b.bodies.put(c.body)
		c.body = nil
	}
	if cap(c.out) > keepBufferBytes {
		c.out = nil
	}
	c.count()
}

// quietRelease is how long a connection waits for its next request
// before it gives its buffers back (Kafka allocates a request's buffer
// for the request alone): a thousand idle connections hold no buffers,
// and a busy one keeps reusing its own.
const quietRelease = time.Second

// readSize reads the next request's size. It waits ConnectionsMaxIdle
// at most, from now, for all four bytes; a connection that holds buffers
// and gets nothing for quietRelease drops them (request, response) and
// goes on waiting, so a thousand idle connections hold none and a busy
// one keeps reusing its own. With ConnectionsMaxIdle at or below
// quietRelease the idle close comes first.
func (c *conn) readSize() (uint32, error) {
	var size [4]byte
	idle := c.idleDeadline()
	got := 0
	if c.counted > 0 && (c.b.opts.ConnectionsMaxIdle < 0 || c.b.opts.ConnectionsMaxIdle > quietRelease) {
		c.nc.SetReadDeadline(time.Now().Add(quietRelease))
		n, err := io.ReadFull(c.nc, size[:])
		got = n
		var ne net.Error
		switch {
		case err == nil:
			return binary.BigEndian.Uint32(size[:]), nil
		case errors.As(err, &ne) && ne.Timeout():
			c.body, c.out = nil, nil
			c.count()
		default:
			return 0, err
		}
	}
	c.nc.SetReadDeadline(idle)
	if _, err := io.ReadFull(c.nc, size[got:]); err != nil {
		return 0, err
	}
	return binary.BigEndian.Uint32(size[:]), nil
}

// idleDeadline is when a connection idle from now is closed (zero:
// never).
func (c *conn) idleDeadline() time.Time {
	if c.b.opts.ConnectionsMaxIdle < 0 {
		return time.Time{}
	}
	return time.Now().Add(c.b.opts.ConnectionsMaxIdle)
}

// armWrite bounds the write of an answer: one that makes no progress for
// ConnectionsMaxIdle (a client that reads nothing) fails, and the
// connection closes.
func (c *conn) armWrite() { c.nc.SetWriteDeadline(c.idleDeadline()) }

// read reads and parses the next request. It waits ConnectionsMaxIdle
// at most for the request to begin, and for each part of it; before it
// reads the body it takes the body's size from the broker's request
// memory (Options.QueuedMaxRequestBytes), waiting for room.
func (c *conn) read() (*request, error) {
	n, err := c.readSize()
	if err != nil {
		return nil, err
	}
	if n > maxRequestBytes || n < 8 {
		return nil, fmt.Errorf("%w: a request of %d bytes (min 8, max %d)", errBadRequest, n, maxRequestBytes)
	}
	held, ok := c.b.mem.acquire(int64(n))
	if !ok {
		return nil, net.ErrClosed
	}
	c.held = held
	c.nc.SetReadDeadline(c.idleDeadline())
	switch {
	case cap(c.body) >= int(n):
		c.body = c.body[:n]
	case n > keepBufferBytes:
		c.body = c.b.bodies.get(int(n))
	default:
		c.body = make([]byte, n)
	}
	c.count()
	if _, err := io.ReadFull(c.nc, c.body); err != nil {
		return nil, err
	}
	rd := kbin.Reader{Src: c.body}
	req := &request{key: rd.Int16(), version: rd.Int16(), corr: rd.Int32()}
	if cid := rd.UnsafeNullableString(); cid != nil {
		req.clientID = string(*cid)
	}
	if !rd.Ok() {
		return nil, fmt.Errorf("%w: short request header", errBadRequest)
	}
	req.kreq = kmsg.RequestForKey(req.key)
	if req.kreq == nil {
		return nil, fmt.Errorf("%w: unknown api key %d", errBadRequest, req.key)
	}
	if !supported(req.key, req.version) {
		if req.key == apiVersionsKey {
			// Kafka answers an ApiVersions it cannot parse with
			// version 0 and UNSUPPORTED_VERSION, so the client can
			// retry with a version both sides know.
			req.version, req.badVersion = 0, true
			req.kreq.SetVersion(0)
			return req, nil
		}
		return nil, fmt.Errorf("%w: api key %d version %d not supported (client %q)", errBadRequest, req.key, req.version, req.clientID)
	}
	req.kreq.SetVersion(req.version)
	if req.kreq.IsFlexible() {
		kmsg.SkipTags(&rd)
	}
	if err := req.kreq.ReadFrom(rd.Src); err != nil {
		return nil, fmt.Errorf("%w: parse api key %d version %d: %w", errBadRequest, req.key, req.version, err)
	}
	return req, nil
}

// writeResponse frames and writes resp as the answer to req.
func (c *conn) writeResponse(req *request, resp kmsg.Response) error {
	return c.writeResponseWith(&c.out, req, resp)
}

// writeResponseWith is writeResponse framing into *out (the pipeline's
// goroutine has a buffer of its own).
func (c *conn) writeResponseWith(out *[]byte, req *request, resp kmsg.Response) error {
	resp.SetVersion(req.version)
	buf := append((*out)[:0], 0, 0, 0, 0)
	buf = kbin.AppendInt32(buf, req.corr)
	// Flexible responses carry a header tag section, but ApiVersions'
	// header is always version 0 (a client must read it before it knows
	// what the broker speaks).
	if resp.IsFlexible() && req.key != apiVersionsKey {
		buf = append(buf, 0)
	}
	buf = resp.AppendTo(buf)
	binary.BigEndian.PutUint32(buf, uint32(len(buf)-4))
	*out = buf
	c.armWrite()
	_, err := c.nc.Write(buf)
	return err
}
