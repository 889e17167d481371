package s3server

import (
	"context"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// balancer is the load balancer a Cluster's clients talk to, as MinIO is
// deployed behind one: a TCP forwarder on loopback that hands each new
// connection to the next node in rotation (round robin). A node leaves
// the rotation when it is killed (its open connections then break, as a
// node's crash breaks them) and comes back once it has rejoined (see
// Node.Start), so no client talks to a node that does not yet reach its
// peers' drives. With no node in rotation a connection is closed at once.
type balancer struct {
	ln    net.Listener
	addrs []string // the nodes' host:port

	mu    sync.Mutex
	in    []bool // in rotation, by node
	next  int
	conns map[net.Conn]*link // open client and upstream connections
	done  bool
	wg    sync.WaitGroup
}

func newBalancer(addrs []string) (*balancer, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	b := &balancer{ln: ln, addrs: addrs, in: make([]bool, len(addrs)), conns: map[net.Conn]*link{}}
	for i := range b.in {
		b.in[i] = true
	}
	b.wg.Add(1)
	go b.accept()
	return b, nil
}

// endpoint is the balancer's URL.
func (b *balancer) endpoint() string { return "http://" + b.ln.Addr().String() }

func (b *balancer) accept() {
	defer b.wg.Done()
	for {
		c, err := b.ln.Accept()
		if err != nil {
			return // closed
		}
		b.wg.Add(1)
		go b.forward(c)
	}
}

// pick returns the next node in rotation, or -1.
func (b *balancer) pick() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	for range b.in {
		i := b.next
		b.next = (b.next + 1) % len(b.in)
		if b.in[i] {
			return i
		}
	}
	return -1
}

// link is a forwarded client connection and its node's: the node, and
// when a byte last went either way (UnixNano).
type link struct {
	node   int
	active atomic.Int64
}

// activeWriter notes on l each write it passes on.
type activeWriter struct {
	w io.Writer
	l *link
}

func (a activeWriter) Write(p []byte) (int, error) {
	a.l.active.Store(time.Now().UnixNano())
	n, err := a.w.Write(p)
	a.l.active.Store(time.Now().UnixNano())
	return n, err
}

func (b *balancer) forward(c net.Conn) {
	defer b.wg.Done()
	defer c.Close()
	i := b.pick()
	if i < 0 {
		return
	}
	up, err := net.Dial("tcp", b.addrs[i])
	if err != nil {
		return
	}
	defer up.Close()
	l := &link{node: i}
	l.active.Store(time.Now().UnixNano())
	if !b.track(l, c, up) {
		return
	}
	defer b.untrack(c, up)
	done := make(chan struct{}, 2)
	go func() { io.Copy(activeWriter{up, l}, c); done <- struct{}{} }()
	go func() { io.Copy(activeWriter{c, l}, up); done <- struct{}{} }()
	<-done // either side ended: end both
}

// track records a forwarded pair; false when the balancer is closed or
// the node left the rotation meanwhile.
func (b *balancer) track(l *link, conns ...net.Conn) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.done || !b.in[l.node] {
		return false
	}
	for _, c := range conns {
		b.conns[c] = l
	}
	return true
}

func (b *balancer) untrack(conns ...net.Conn) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, c := range conns {
		delete(b.conns, c)
	}
}

// leave takes node i out of the rotation and breaks its connections.
func (b *balancer) leave(i int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.in[i] = false
	for c, l := range b.conns {
		if l.node == i {
			c.Close()
		}
	}
}

// drain takes node i out of the rotation and closes each of its
// connections once no byte has gone either way on it for quiet (between
// two requests of a client, which retries a request on a connection
// closed before it wrote any), until none is left or ctx ends; it
// reports whether none is left.
func (b *balancer) drain(ctx context.Context, i int, quiet time.Duration) bool {
	b.mu.Lock()
	b.in[i] = false
	b.mu.Unlock()
	for {
		left := 0
		b.mu.Lock()
		for c, l := range b.conns {
			if l.node != i {
				continue
			}
			if time.Since(time.Unix(0, l.active.Load())) >= quiet {
				c.Close()
				continue
			}
			left++
		}
		b.mu.Unlock()
		if left == 0 {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(quiet / 4):
		}
	}
}

// join puts node i back into the rotation.
func (b *balancer) join(i int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.in[i] = true
}

// close stops accepting, breaks every connection and waits for the
// forwarders.
func (b *balancer) close() {
	b.mu.Lock()
	b.done = true
	b.ln.Close()
	for c := range b.conns {
		c.Close()
	}
	b.mu.Unlock()
	b.wg.Wait()
}
