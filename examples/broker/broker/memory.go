package broker

import (
	"math/bits"
	"sync"
)

// requestMemory bounds the bytes of the requests in flight across
// connections (Kafka's queued.max.request.bytes, its Processor's memory
// pool): a connection takes a request's size before it allocates and
// reads the body, and gives it back once the request is answered. A
// connection that finds too little waits, its body unread in the socket
// (Kafka mutes the channel), so a flood of large requests holds at most
// the bound, not the sum of their sizes.
type requestMemory struct {
	limit int64 // < 0: no bound
	mu    sync.Mutex
	cond  sync.Cond
	// guarded by mu
	used, peak int64
	waiting    int
	closed     bool
}

func newRequestMemory(limit int64) *requestMemory {
	m := &requestMemory{limit: limit}
	m.cond.L = &m.mu
	return m
}

// acquire takes n bytes, waiting while the bound would be passed; it
// returns what it took, to give back with release. A request larger than
// the bound takes the whole bound (it waits for every other request to
// be done), so it is served, alone. It returns false once the broker is
// closing.
func (m *requestMemory) acquire(n int64) (int64, bool) {
	if m.limit >= 0 {
		n = min(n, m.limit)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for !m.closed && m.limit >= 0 && m.used+n > m.limit {
		m.waiting++
		m.cond.Wait()
		m.waiting--
	}
	if m.closed {
		return 0, false
	}
	m.used += n
	m.peak = max(m.peak, m.used)
	return n, true
}

// release gives back n bytes taken by acquire.
func (m *requestMemory) release(n int64) {
	if n == 0 {
		return
	}
	m.mu.Lock()
	m.used -= n
	m.mu.Unlock()
	m.cond.Broadcast()
}

// close wakes every waiter: the broker is closing.
func (m *requestMemory) close() {
	m.mu.Lock()
	m.closed = true
	m.mu.Unlock()
	m.cond.Broadcast()
}

// Stats are a broker's connection and request figures at one moment.
type Stats struct {
	// Connections is the client connections open.
	Connections int
	// Requests counts the requests read since Start (each is answered,
	// unless its connection closes first).
	Requests int64
	// RequestBytesInFlight is the bytes of the requests read and not yet
	// answered, across connections (at most
	// Options.QueuedMaxRequestBytes); PeakRequestBytes its largest value
	// since Start.
	RequestBytesInFlight, PeakRequestBytes int64
	// WaitingForMemory is the connections waiting to read a request
	// until RequestBytesInFlight has room for it.
	WaitingForMemory int
	// ConnectionBufferBytes is the request and response buffers
	// the connections hold between requests (a quiet connection holds
	// none).
	ConnectionBufferBytes int64
}

// Stats returns the broker's connection and request figures.
func (b *Broker) Stats() Stats {
	b.mem.mu.Lock()
	st := Stats{RequestBytesInFlight: b.mem.used, PeakRequestBytes: b.mem.peak, WaitingForMemory: b.mem.waiting}
	b.mem.mu.Unlock()
	b.mu.RLock()
	st.Connections = len(b.conns)
	b.mu.RUnlock()
	st.Requests = b.requests.Load()
	st.ConnectionBufferBytes = b.bufferBytes.Load()
	return st
}

// bodyPool holds request buffers larger than keepBufferBytes between
// requests. A connection gives such a buffer back once its request is
// answered and takes one for its next large request, so a client
// producing 4 MiB requests reuses a few buffers instead of allocating
// (and zeroing) 4 MiB a request, while an idle connection holds none.
// What the pool holds is the runtime's to free (a sync.Pool is emptied
// over two collections without use); what is in flight stays bounded by
// requestMemory.
//
// Sizes are rounded up to a class, four a doubling (at most a quarter
// more than asked), so requests of similar size share buffers.
type bodyPool struct {
	classes [bodyClasses]sync.Pool // of *[]byte
}

// bodyClasses covers keepBufferBytes (1 MiB) up to maxRequestBytes
// (100 MiB, under 128 MiB): seven doublings of four classes.
const bodyClasses = 7 * 4

// bodyClass returns the class of a buffer for n bytes (n above
// keepBufferBytes, at most maxRequestBytes) and the class's size.
func bodyClass(n int) (class, size int) {
	e := bits.Len(uint(n-1)) - 1 // 1<<e < n <= 1<<(e+1)
	step := 1 << e / 4
	q := (n + step - 1) / step // 5..8
	return (e-bits.Len(keepBufferBytes)+1)*4 + q - 5, q * step
}

// get returns a buffer of length n from the pool, or a new one (at or
// below keepBufferBytes, always a new one).
func (p *bodyPool) get(n int) []byte {
	if n <= keepBufferBytes {
		return make([]byte, n)
	}
	class, size := bodyClass(n)
	if b, ok := p.classes[class].Get().(*[]byte); ok {
		return (*b)[:n]
	}
	return make([]byte, n, size)
}

// put gives b, from get, back to the pool.
func (p *bodyPool) put(b []byte) {
	if cap(b) <= keepBufferBytes {
		return
	}
	class, size := bodyClass(cap(b))
	if size != cap(b) {
		return // not one of the pool's
	}
	b = b[:0]
	p.classes[class].Put(&b)
}
