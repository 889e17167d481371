package s3server

import (
	"io"
	"net"
	"sync"
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
	conns map[net.Conn]int // open client and upstream connections -> node
	done  bool
	wg    sync.WaitGroup
}

func newBalancer(addrs []string) (*balancer, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	b := &balancer{ln: ln, addrs: addrs, in: make([]bool, len(addrs)), conns: map[net.Conn]int{}}
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
	if !b.track(i, c, up) {
		return
	}
	defer b.untrack(c, up)
	done := make(chan struct{}, 2)
	go func() { io.Copy(up, c); done <- struct{}{} }()
	go func() { io.Copy(c, up); done <- struct{}{} }()
	<-done // either side ended: end both
}

// track records a forwarded pair; false when the balancer is closed or
// the node left the rotation meanwhile.
func (b *balancer) track(i int, conns ...net.Conn) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.done || !b.in[i] {
		return false
	}
	for _, c := range conns {
		b.conns[c] = i
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
	for c, n := range b.conns {
		if n == i {
			c.Close()
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
