package broker

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// maxPipelinedProduces bounds the Produces of one connection that wait
// for the high watermark beside the next requests: as many as a Kafka
// client sends at once (max.in.flight.requests.per.connection, 5 for an
// idempotent producer). Past it, reading the connection waits.
const maxPipelinedProduces = 5

// pipeline writes a connection's answers in order from its own goroutine
// while the connection reads and appends the next requests: each waits
// for its high watermark first.
type pipeline struct {
	c       *conn
	answers chan pipelined
	// pending and queued count the answers queued and not yet written:
	// drain waits on the one, busy reads the other.
	pending sync.WaitGroup
	queued  atomic.Int64
	out     []byte // the answer being written: the goroutine's own

}

// pipelined is one queued answer, and the request memory its request
// holds until it is answered (as Kafka counts a request in flight until
// its answer goes: queued.max.request.bytes).
type pipelined struct {
	req  *request
	a    appended
	held int64
}

// produce appends a Produce and answers it: at once when nothing waits,
// through the pipeline when its answer waits for the high watermark (or
// when earlier answers are still queued: answers stay in order).
func (c *conn) produce(ctx context.Context, req *request, r *kmsg.ProduceRequest) error {
	a, err := c.b.produceAppend(ctx, r)
	if errors.Is(err, errNoResponse) {
		return nil
	}
	if err != nil {
		return err
	}
	if len(a.waits) == 0 && !c.pipe.busy() {
		return c.writeResponse(req, a.resp)
	}
	if c.pipe == nil {
		c.pipe = &pipeline{c: c, answers: make(chan pipelined, maxPipelinedProduces-1)}
		go c.pipe.run()
	}
	c.pipe.pending.Add(1)
	c.pipe.queued.Add(1)
	held := c.held
	c.held = 0                                              // released once answered
	c.pipe.answers <- pipelined{req: req, a: a, held: held} // waits while the pipeline is full
	return nil
}

// run writes the queued answers in order, each once its wait is over. A
// failed write closes the connection, which ends its reads.
func (p *pipeline) run() {
	failed := false
	for q := range p.answers {
		resp := q.a.await(p.c.b)
		if !failed {
			if err := p.c.writeResponseWith(&p.out, q.req, resp); err != nil {
				failed = true
				p.c.nc.Close()
			}
		}
		p.c.b.mem.release(q.held)
		p.queued.Add(-1)
		p.pending.Done()
	}
}

// busy says whether answers are queued or being written (a nil pipeline
// has none).
func (p *pipeline) busy() bool { return p != nil && p.queued.Load() > 0 }

// drain waits until every queued answer is written.
func (p *pipeline) drain() {
	if p != nil {
		p.pending.Wait()
	}
}

// close ends the goroutine once the queued answers are written (or
// given up, the connection closed).
func (p *pipeline) close() {
	if p != nil {
		close(p.answers)
	}
}
