// Package purgatory parks delayed operations until they can complete or
// their deadline passes: Kafka's DelayedOperationPurgatory, on a
// timingwheel.Timer. A broker parks a long-poll Fetch until enough bytes
// arrive, or an acks=-1 Produce until the high watermark passes it; the
// backend calls CheckAndComplete for a partition when its high watermark,
// last stable offset or log end moves.
//
// # Life of an operation
//
// TryCompleteElseWatch checks the operation (CanComplete); if it cannot
// complete yet, it is added to the watch list of each of its keys,
// checked once more (so a state change between the first check and the
// watch is not missed), and scheduled on the timer for its deadline. From
// then on it completes exactly once, in one of three ways:
//
//   - CheckAndComplete(key) for one of its keys finds CanComplete true:
//     OnComplete runs, on the goroutine that called CheckAndComplete;
//   - its deadline passes: OnExpiration runs, on the timer's goroutine;
//   - Close: OnExpiration runs, on the goroutine that called Close.
//
// An atomic flag, set under the operation's lock, guards completion: a
// check and the expiry racing each other never both run a callback. When
// an operation completes it leaves every watch list it is on, through an
// intrusive list node per key (O(keys of that operation), no scan of
// other keys), and its timer task is cancelled in O(1); a key whose list
// empties is forgotten. Memory is therefore bounded by the live
// operations: Kafka's periodic purge of completed operations is not
// needed.
//
// # Concurrency
//
// Every method MAY be called from any goroutine. An operation's methods
// run one at a time, under a lock of the operation's own, and MUST NOT
// call into the purgatory that holds it (hand such work to another
// goroutine). Lock order: an operation's lock, then a shard's lock, then
// the timer's; CheckAndComplete copies a key's list under the shard lock
// and checks the operations after releasing it.
package purgatory

import (
	"errors"
	"fmt"
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tierlog/tierlog/timingwheel"
)

// Errors a Purgatory returns, matched with errors.Is.
var (
	// ErrClosed: the purgatory was closed.
	ErrClosed = errors.New("purgatory: closed")
	// ErrNoKeys: TryCompleteElseWatch was given no key to watch.
	ErrNoKeys = errors.New("purgatory: an operation needs at least one key")
	// ErrInvalidOptions: an Options field is out of range; the error names it.
	ErrInvalidOptions = errors.New("purgatory: invalid options")
)

// An Operation is a request parked until it can complete or its deadline
// passes. The purgatory calls its methods one at a time (never two at
// once for one operation), each under the operation's lock; they MUST be
// quick and MUST NOT call into the purgatory.
type Operation interface {
	// CanComplete reports whether the operation can complete now (a
	// Fetch has its bytes, a Produce its acknowledgements). It MAY be
	// called any number of times until the operation completes, and never
	// after.
	CanComplete() bool
	// OnComplete runs once, when a CanComplete call returned true. Of
	// OnComplete and OnExpiration exactly one runs, once.
	OnComplete()
	// OnExpiration runs once, when the deadline passed (or the purgatory
	// closed) before the operation could complete.
	OnExpiration()
}

// DefaultShards is the number of shards of the key table by default.
const DefaultShards = 64

// Options configure a Purgatory.
type Options struct {
	// Shards splits the key table, each part under a lock of its own, to
	// spread contention between CheckAndComplete calls for different keys.
	// 0 means DefaultShards; otherwise 1 to 65536.
	Shards int
}

// Validate reports the first field out of range, wrapping
// ErrInvalidOptions.
func (o Options) Validate() error {
	if o.Shards < 0 || o.Shards > 1<<16 {
		return fmt.Errorf("%w: Shards %d is not in [1, 65536]", ErrInvalidOptions, o.Shards)
	}
	return nil
}

// Stats are a purgatory's counts, for metrics.
type Stats struct {
	Pending   int64  // operations watched: neither completed nor expired
	Keys      int64  // keys with at least one operation watching them
	Watches   int64  // (operation, key) pairs on the watch lists
	Completed uint64 // operations completed by a check, since New
	Expired   uint64 // operations expired, by their deadline or by Close
}

// A Purgatory holds operations keyed by K (a partition, say) until they
// complete or expire. Its methods MAY be called from any goroutine.
type Purgatory[K comparable] struct {
	timer  *timingwheel.Timer
	seed   maphash.Seed
	shards []shard[K]
	bufs   sync.Pool // *[]*entry[K]: CheckAndComplete's copies of a list

	gate    gate
	closeMu sync.Mutex // held by Close, so that a second Close waits for the first

	pending, keys, watches atomic.Int64
	completed, expired     atomic.Uint64
}

// shard is a part of the key table.
type shard[K comparable] struct {
	// mu guards byKey and the list fields of every watchers and node
	// reached from it.
	mu    sync.Mutex
	byKey map[K]*watchers[K]
	_     [48]byte // keep neighbouring shards' locks off one cache line
}

// watchers is the watch list of one key: the nodes of the operations
// watching it, oldest first.
type watchers[K comparable] struct {
	key        K
	sh         *shard[K]
	head, tail *node[K]
}

// node puts an operation on one key's list; an operation has one per key.
type node[K comparable] struct {
	e          *entry[K]
	w          *watchers[K] // nil when off the list
	prev, next *node[K]
}

// entry is a parked operation.
type entry[K comparable] struct {
	p    *Purgatory[K]
	op   Operation
	done atomic.Bool // the guard: set once, under mu, when the operation completes
	// mu is held while any method of op runs, and guards task and nodes.
	mu    sync.Mutex
	task  *timingwheel.Task
	nodes []node[K]
	one   [1]node[K] // nodes for the usual single key, without a second allocation
}

// New makes a Purgatory whose deadlines run on timer. The timer MUST
// outlive the purgatory: close the purgatory first.
func New[K comparable](timer *timingwheel.Timer, opts Options) (*Purgatory[K], error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if opts.Shards == 0 {
		opts.Shards = DefaultShards
	}
	p := &Purgatory[K]{timer: timer, seed: maphash.MakeSeed(), shards: make([]shard[K], opts.Shards)}
	for i := range p.shards {
		p.shards[i].byKey = make(map[K]*watchers[K])
	}
	p.bufs.New = func() any { return new([]*entry[K]) }
	p.gate.drained = make(chan struct{})
	return p, nil
}

func (p *Purgatory[K]) shardOf(key K) *shard[K] {
	return &p.shards[maphash.Comparable(p.seed, key)%uint64(len(p.shards))]
}

// TryCompleteElseWatch completes op now if it can (OnComplete runs on the
// caller's goroutine, and it returns true), or else watches it under each
// of keys until CheckAndComplete of one of them completes it or deadline
// (on the timer's clock) passes. A key given twice is watched twice.
//
// It returns ErrNoKeys without keys and ErrClosed after Close; an error
// wrapping timingwheel.ErrClosed if the timer was closed first. On error,
// op is not watched and none of its methods runs again.
func (p *Purgatory[K]) TryCompleteElseWatch(op Operation, deadline time.Time, keys ...K) (bool, error) {
	if len(keys) == 0 {
		return false, ErrNoKeys
	}
	if !p.gate.enter() {
		return false, ErrClosed
	}
	defer p.gate.leave()
	e := &entry[K]{p: p, op: op}
	e.mu.Lock()
	defer e.mu.Unlock()
	if op.CanComplete() {
		e.done.Store(true)
		p.completed.Add(1)
		op.OnComplete()
		return true, nil
	}
	e.nodes = e.one[:]
	if len(keys) > 1 {
		e.nodes = make([]node[K], len(keys))
	}
	for i, key := range keys {
		p.watch(e, &e.nodes[i], key)
	}
	p.pending.Add(1)
	// A key's state may have changed before the watch began: check again,
	// now that any later change will find the operation on its list.
	if op.CanComplete() {
		p.completeLocked(e)
		return true, nil
	}
	task, err := p.timer.Schedule(deadline, e.expire)
	if err != nil {
		p.finishLocked(e)
		return false, fmt.Errorf("purgatory: watch until %v: %w", deadline, err)
	}
	e.task = task
	return false, nil
}

// CheckAndComplete checks the operations watching key, oldest first, and
// completes those that can complete (their OnComplete runs on the
// caller's goroutine). It returns how many it completed; 0 after Close.
func (p *Purgatory[K]) CheckAndComplete(key K) int {
	if !p.gate.enter() {
		return 0
	}
	defer p.gate.leave()
	sh := p.shardOf(key)
	sh.mu.Lock()
	w := sh.byKey[key]
	if w == nil {
		sh.mu.Unlock()
		return 0
	}
	bufp := p.bufs.Get().(*[]*entry[K])
	list := (*bufp)[:0]
	for n := w.head; n != nil; n = n.next {
		list = append(list, n.e)
	}
	sh.mu.Unlock()
	completed := 0
	for _, e := range list {
		if e.tryComplete() {
			completed++
		}
	}
	clear(list)
	*bufp = list[:0]
	p.bufs.Put(bufp)
	return completed
}

// Stats reads the counts. Each is read atomically, the set is not: under
// load they may disagree by the operations in flight.
func (p *Purgatory[K]) Stats() Stats {
	return Stats{
		Pending:   p.pending.Load(),
		Keys:      p.keys.Load(),
		Watches:   p.watches.Load(),
		Completed: p.completed.Load(),
		Expired:   p.expired.Load(),
	}
}

// Close expires every pending operation: when Close returns, each has
// run OnExpiration (on the caller's goroutine) unless a check completed it
// first, and no call to TryCompleteElseWatch or CheckAndComplete is still
// running. Afterwards TryCompleteElseWatch returns ErrClosed and
// CheckAndComplete completes nothing. Expiring, rather than dropping,
// answers every parked request, so nothing waits on one forever. Close
// MUST NOT be called from an operation's method. It MAY be called more
// than once. It does not close the timer.
func (p *Purgatory[K]) Close() {
	p.closeMu.Lock()
	defer p.closeMu.Unlock()
	if !p.gate.close() {
		return
	}
	var list []*entry[K]
	for i := range p.shards {
		sh := &p.shards[i]
		sh.mu.Lock()
		for _, w := range sh.byKey {
			for n := w.head; n != nil; n = n.next {
				list = append(list, n.e)
			}
		}
		sh.mu.Unlock()
	}
	for _, e := range list {
		e.expire()
	}
}

// watch appends e's node n to key's list.
// REQUIRES: e.mu held.
func (p *Purgatory[K]) watch(e *entry[K], n *node[K], key K) {
	sh := p.shardOf(key)
	sh.mu.Lock()
	w := sh.byKey[key]
	if w == nil {
		w = &watchers[K]{key: key, sh: sh}
		sh.byKey[key] = w
		p.keys.Add(1)
	}
	n.e, n.w, n.prev = e, w, w.tail
	if w.tail != nil {
		w.tail.next = n
	} else {
		w.head = n
	}
	w.tail = n
	sh.mu.Unlock()
	p.watches.Add(1)
}

// finishLocked sets e's guard and takes it off every list and the timer.
// It reports false if e was already finished.
// REQUIRES: e.mu held.
func (p *Purgatory[K]) finishLocked(e *entry[K]) bool {
	if !e.done.CompareAndSwap(false, true) {
		return false
	}
	if e.task != nil {
		e.task.Cancel() // false when e is expiring: the task is firing
	}
	for i := range e.nodes {
		n := &e.nodes[i]
		w := n.w
		sh := w.sh
		sh.mu.Lock()
		if n.prev != nil {
			n.prev.next = n.next
		} else {
			w.head = n.next
		}
		if n.next != nil {
			n.next.prev = n.prev
		} else {
			w.tail = n.prev
		}
		n.prev, n.next, n.w = nil, nil, nil
		if w.head == nil && sh.byKey[w.key] == w {
			delete(sh.byKey, w.key)
			p.keys.Add(-1)
		}
		sh.mu.Unlock()
	}
	p.watches.Add(-int64(len(e.nodes)))
	p.pending.Add(-1)
	return true
}

// REQUIRES: e.mu held.
func (p *Purgatory[K]) completeLocked(e *entry[K]) {
	if p.finishLocked(e) {
		p.completed.Add(1)
		e.op.OnComplete()
	}
}

// tryComplete is CheckAndComplete's step for one operation.
func (e *entry[K]) tryComplete() bool {
	if e.done.Load() {
		return false // completed since the list was copied
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.done.Load() || !e.op.CanComplete() {
		return false
	}
	e.p.completeLocked(e)
	return true
}

// expire is the operation's timer callback, and Close's step.
func (e *entry[K]) expire() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.p.finishLocked(e) {
		e.p.expired.Add(1)
		e.op.OnExpiration()
	}
}

// gate lets calls in until close, and lets close wait for the calls in
// progress, without a lock on the calls' path.
type gate struct {
	state   atomic.Int64 // closedBit | the number of calls in progress
	once    sync.Once
	drained chan struct{} // closed when the count reaches 0 after close
}

const closedBit = 1 << 62

func (g *gate) enter() bool {
	if g.state.Add(1)&closedBit != 0 {
		g.leave()
		return false
	}
	return true
}

func (g *gate) leave() {
	if g.state.Add(-1) == closedBit {
		g.once.Do(func() { close(g.drained) })
	}
}

// close shuts the gate and waits for the calls in progress; it reports
// false if the gate was already shut.
func (g *gate) close() bool {
	for {
		v := g.state.Load()
		if v&closedBit != 0 {
			return false
		}
		if g.state.CompareAndSwap(v, v|closedBit) {
			if v == 0 {
				g.once.Do(func() { close(g.drained) })
			}
			<-g.drained
			return true
		}
	}
}
