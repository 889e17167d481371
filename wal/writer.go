package wal

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"hash/crc32"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/tierlog/tierlog/objstore"
)

// Defaults, with Inkless's names and meanings (inkless.produce.*).
const (
	// DefaultCommitInterval is produce.commit.interval.ms: an object is
	// uploaded at most this long after its first append.
	DefaultCommitInterval = 250 * time.Millisecond
	// DefaultBufferMaxBytes is produce.buffer.max.bytes: an object is
	// uploaded once it holds this many bytes.
	DefaultBufferMaxBytes = 8 << 20
	// MaxInFlight is the most objects a writer has in flight at once:
	// its numbers below its next minus MaxInFlight are all settled. It
	// is part of the protocol (frozen): Fence fills the gaps among a
	// writer's newest MaxInFlight numbers, and WAL gc keeps them.
	MaxInFlight = 4
)

// Options configure a Writer.
type Options struct {
	// Root is the bucket prefix the objects go under ("" for the top).
	Root string
	// CommitInterval: an object is uploaded at most this long after its
	// first append (default DefaultCommitInterval).
	CommitInterval time.Duration
	// BufferMaxBytes: an object is uploaded once it holds this many bytes
	// (default DefaultBufferMaxBytes). Best effort: one append is never
	// split, so an object may hold up to one append more.
	BufferMaxBytes int
	// MaxBufferedBytes bounds the bytes appended and not yet settled
	// (durable or failed), across the object being filled and those
	// being uploaded: Append waits past it (default
	// (InFlight + 1) × BufferMaxBytes).
	MaxBufferedBytes int
	// InFlight is how many objects may be uploaded at once (1 to
	// MaxInFlight; default MaxInFlight). Appends still settle in number order:
	// an object's appends settle after every lower number has.
	InFlight int
	// SettleBackoff is the wait between attempts to learn the outcome of
	// an upload whose answer was lost while the bucket stays unreachable
	// (default 1 s).
	SettleBackoff time.Duration
	// Logger receives a line for every fence met and every voided upload
	// (default: discard).
	Logger *slog.Logger
	// OnUpload, when set, is called after each object settles (metrics).
	OnUpload func(UploadEvent)
	// OnSettled, when set, is told of each partition's appends as they
	// settle: once per partition and object, in the order of the
	// partition's appends, with the Location where they are durable or
	// why they failed. It is called from the writer's goroutine, not
	// under its lock, and must not block for long: every partition's
	// uploads wait for it. Appends that went stale are not reported:
	// those a Reset or Forget dropped (their caller asked for it), and
	// those in objects above a failure of their partition (the caller
	// was told of that failure first). A fence met that names a
	// partition with no appends in its object is reported once, with
	// its FencedError and no Location.
	OnSettled func(tp TopicPartition, loc Location, err error)
}

// UploadEvent reports one settled object.
type UploadEvent struct {
	Key      string
	Sequence uint64
	Bytes    int
	Extents  int
	Took     time.Duration
	// Err is nil when the object is durable; else why its appends failed.
	Err error
}

// Validate checks the options and fills defaults.
func (o *Options) Validate() error {
	if o.CommitInterval < 0 || o.BufferMaxBytes < 0 || o.MaxBufferedBytes < 0 || o.SettleBackoff < 0 || o.InFlight < 0 {
		return fmt.Errorf("wal: negative option (commit interval %v, buffer max bytes %d, max buffered bytes %d, settle backoff %v, in flight %d)",
			o.CommitInterval, o.BufferMaxBytes, o.MaxBufferedBytes, o.SettleBackoff, o.InFlight)
	}
	if o.InFlight == 0 {
		o.InFlight = MaxInFlight
	}
	if o.InFlight > MaxInFlight {
		return fmt.Errorf("wal: %d objects in flight: at most %d", o.InFlight, MaxInFlight)
	}
	if o.CommitInterval == 0 {
		o.CommitInterval = DefaultCommitInterval
	}
	if o.BufferMaxBytes == 0 {
		o.BufferMaxBytes = DefaultBufferMaxBytes
	}
	if o.MaxBufferedBytes == 0 {
		o.MaxBufferedBytes = (o.InFlight + 1) * o.BufferMaxBytes
	}
	if o.MaxBufferedBytes < o.BufferMaxBytes {
		return fmt.Errorf("wal: max buffered bytes %d below buffer max bytes %d", o.MaxBufferedBytes, o.BufferMaxBytes)
	}
	if o.SettleBackoff == 0 {
		o.SettleBackoff = time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// Location is where an append became durable.
type Location struct {
	Writer   WriterID
	Sequence uint64
	Key      string
	// Extent is the partition's extent in the object: the append's
	// batches lie in it (with those of the partition's other appends
	// that went into the same object).
	Extent Extent
}

// Ack is the outcome of one append: Done is closed once it settles, and
// then Err is nil (durable: Location says where) or why it failed
// (ErrUploadFailed, ErrFenced, ErrPartitionFailed, ErrClosed). Every
// append of a partition that went into one object shares its Ack.
type Ack struct {
	done chan struct{}
	err  error
	loc  Location
}

// Done is closed when the append has settled.
func (a *Ack) Done() <-chan struct{} { return a.done }

// Err is the append's outcome, once Done is closed.
func (a *Ack) Err() error { <-a.done; return a.err }

// Location is where the append is durable, once Done is closed and Err is
// nil.
func (a *Ack) Location() Location { <-a.done; return a.loc }

// Wait waits for the append to settle or ctx to end.
func (a *Ack) Wait(ctx context.Context) error {
	select {
	case <-a.done:
		return a.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (a *Ack) settle(loc Location, err error) {
	a.loc, a.err = loc, err
	close(a.done)
}

// extentBuf is one partition's appends to an object being filled.
type extentBuf struct {
	data        []byte
	first, last int64
	ack         *Ack
	// epoch is the leader epoch the partition was led at (Lead) when
	// these appends were made: a fence at that epoch or above claims them.
	epoch int32
	// gen is the partition's generation when they were made: once it
	// moves on (a failure, Reset, Forget), they can no longer become
	// durable, landed or not.
	gen uint64
}

// object is an object being filled or uploaded.
type object struct {
	parts   map[TopicPartition]*extentBuf
	size    int
	started time.Time
	// seq is its number, given when it is taken for upload.
	seq uint64
	// put is closed once its put has an outcome (res, fence, etc.).
	put   chan struct{}
	res   outcome
	fence Footer
	// cause is why the put's outcome could not be learned (res unknown;
	// nil: the writer was stopped first).
	cause error
	key   string
	body  int
	f     Footer
	// settled is closed once every append in it has settled.
	settled chan struct{}
	// marks are the marks it carries, taken when it was numbered, and
	// markLeads the leadership each was made in (Writer.leadID).
	marks     []Mark
	markLeads []uint64
}

// partState is a partition the writer refuses appends for until Reset.
type partState struct {
	err error // ErrUploadFailed (wrapped), or ErrFenced (wrapped)
}

// Writer gathers the appends of many partitions into shared objects and
// uploads each with a create-only PUT at the writer's next sequence
// number; see the package doc for the protocol. It is safe for
// concurrent use. Appends of one partition settle in the order they were
// made, and an append never settles durable after an earlier append of
// its partition failed.
type Writer struct {
	store  *objstore.Store
	layout Layout
	id     WriterID
	opts   Options

	ctx    context.Context // the uploads'; cancelled by Close's deadline
	cancel context.CancelFunc
	kick   chan struct{} // cap 1: an object may be due
	done   chan struct{} // closed when run returns

	mu sync.Mutex
	// open is the object being filled (nil: none); inflight those being
	// uploaded or settled, in number order.
	open     *object
	inflight []*object
	// buffered is the bytes of open and inflight; space is closed and
	// replaced whenever it drops.
	buffered int
	space    chan struct{}
	// gen is each partition's generation, moved on by every failure,
	// Reset and Forget (see extentBuf.gen).
	gen map[TopicPartition]uint64
	// fencedAt is the highest epoch a fence met claimed each partition
	// at: its appends made at that epoch or below fail, in whatever
	// object above the fence they are.
	fencedAt map[TopicPartition]int32
	// refused holds the partitions whose appends fail until Reset.
	refused map[TopicPartition]partState
	// lead holds the leader epoch each partition was last led at (Lead):
	// a fence of an older epoch is stale for it.
	lead     map[TopicPartition]int32
	flushReq bool
	closing  bool
	// halted is why the writer stopped for good (nil: it runs), and
	// haltedAt the number whose outcome it could not learn: nothing
	// numbered above it settles durable, landed or not (it may hold a
	// fence). See halt.
	halted   error
	haltedAt uint64
	// tokens is the PUT budget (see next): refilled at 1 a commit
	// interval and 1 a BufferMaxBytes appended, at most 1; refilled is
	// when it was last refilled.
	tokens   float64
	refilled time.Time
	// seq is the next sequence number to give an object.
	seq uint64
	// marks are the marks not yet carried by an object in flight or
	// landed (Mark); sent the newest each partition has in a landed
	// object. Both hold at most one a partition.
	marks map[TopicPartition]pendingMark
	sent  map[TopicPartition]Mark
	// leadID tells each leadership of a partition from the next: given by
	// Lead to a partition not led, dropped by Forget (a partition deleted
	// and created anew may lead at the same epoch again).
	leadID     map[TopicPartition]uint64
	nextLeadID uint64
}

// pendingMark is a mark not yet in an object, and its leadership.
type pendingMark struct {
	m    Mark
	lead uint64
}

// NewWriter starts a writer with a new random id over store.
func NewWriter(store *objstore.Store, opts Options) (*Writer, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	var id WriterID
	if _, err := rand.Read(id[:]); err != nil {
		return nil, fmt.Errorf("wal: writer id: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	w := &Writer{
		store: store, layout: NewLayout(opts.Root), id: id, opts: opts,
		ctx: ctx, cancel: cancel,
		kick: make(chan struct{}, 1), done: make(chan struct{}),
		space: make(chan struct{}), refused: map[TopicPartition]partState{}, lead: map[TopicPartition]int32{}, gen: map[TopicPartition]uint64{}, fencedAt: map[TopicPartition]int32{}, seq: 1,
		marks: map[TopicPartition]pendingMark{}, sent: map[TopicPartition]Mark{}, leadID: map[TopicPartition]uint64{},
	}
	go w.run()
	return w, nil
}

// ID is the writer's id.
func (w *Writer) ID() WriterID { return w.id }

// Layout is the layout of the writer's keys.
func (w *Writer) Layout() Layout { return w.layout }

// NextSequence is the sequence number the next object will take: every
// object the writer has put or is putting is numbered below it.
func (w *Writer) NextSequence() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.seq
}

// Append adds batches of tp (one or more whole record batches, their
// offsets first..last, above every offset of tp appended before since
// the last Reset) to the object being filled, and returns its Ack. It
// waits while MaxBufferedBytes are buffered (or until ctx ends). It fails
// at once with ErrPartitionFailed or ErrFenced for a partition refused
// until Reset, and with ErrClosed after Close. The writer copies batches.
func (w *Writer) Append(ctx context.Context, tp TopicPartition, batches []byte, first, last int64) (*Ack, error) {
	if len(batches) == 0 || first < 0 || last < first || len(batches) > 1<<30 {
		return nil, fmt.Errorf("wal: append to %s of %d bytes at offsets %d..%d", tp, len(batches), first, last)
	}
	w.mu.Lock()
	for {
		if w.halted != nil {
			err := w.halted
			w.mu.Unlock()
			return nil, err
		}
		if w.closing {
			w.mu.Unlock()
			return nil, ErrClosed
		}
		if st, ok := w.refused[tp]; ok {
			w.mu.Unlock()
			return nil, fmt.Errorf("%w: %s: %w", ErrPartitionFailed, tp, st.err)
		}
		if w.buffered == 0 || w.buffered+len(batches) <= w.opts.MaxBufferedBytes {
			break
		}
		space := w.space
		w.mu.Unlock()
		select {
		case <-space:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		w.mu.Lock()
	}
	defer w.mu.Unlock()
	o := w.open
	if o == nil {
		o = &object{parts: map[TopicPartition]*extentBuf{}, started: time.Now(), settled: make(chan struct{})}
		w.open = o
		w.signal()
	}
	e := o.parts[tp]
	if e == nil {
		e = &extentBuf{first: first, last: -1, ack: &Ack{done: make(chan struct{})}, gen: w.gen[tp]}
		o.parts[tp] = e
	}
	if first <= e.last {
		return nil, fmt.Errorf("wal: append to %s at offset %d, not after its last %d", tp, first, e.last)
	}
	e.data = append(e.data, batches...)
	e.last, e.epoch = last, w.lead[tp]
	o.size += len(batches)
	w.tokens += float64(len(batches)) / float64(w.opts.BufferMaxBytes)
	w.buffered += len(batches)
	if o.size >= w.opts.BufferMaxBytes {
		w.signal()
	}
	return e.ack, nil
}

// signal wakes run. REQUIRES: mu held or not; never blocks.
func (w *Writer) signal() {
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// Reset lets tp append again after a failure or a fence: the caller has
// truncated tp back to its durable end, or leads it again under a new
// claim. Appends of tp not yet settled fail (ErrPartitionFailed): those
// still buffered at once, those in objects in flight when their objects
// settle, landed or not.
func (w *Writer) Reset(tp TopicPartition) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.dropLocked(tp, fmt.Errorf("%w: %s was reset", ErrPartitionFailed, tp))
	w.gen[tp]++
	delete(w.refused, tp)
}

// Lead says the caller now leads tp at epoch (it claimed it): tp's
// appends from now on are this leadership's, and tp appends again if it
// was refused. A fence names its partitions with the claimer's epoch and
// claims only appends made at that epoch or below: appends of a later
// leadership go past a fence left by a claim that this one superseded, or
// that lost, as Tail, given the leadership's epoch, reads past it. Lead
// keeps tp's buffered appends (a new epoch of the same leadership's log);
// a caller that rebuilds the partition's log calls Reset first.
func (w *Writer) Lead(tp TopicPartition, epoch int32) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.refused, tp)
	if _, ok := w.lead[tp]; !ok {
		w.nextLeadID++
		w.leadID[tp] = w.nextLeadID
	}
	w.lead[tp] = epoch
}

// Mark records that the caller acknowledged tp's records below end while
// it led tp at epoch (the epoch of the manifest commit that named this
// writer, at most the one of its last Lead of tp; see the Mark type): the next object put carries it, and when
// no append is due and no object is in flight, an object of marks alone
// is put once the PUT budget allows (at most one a CommitInterval), so a
// read replica following
// this writer learns of its last appends soon after they settle. A mark
// no newer than one tp has in flight or in the bucket is dropped: marks
// of an epoch only grow, and a newer epoch's win.
func (w *Writer) Mark(tp TopicPartition, epoch int32, end int64) {
	if epoch < 0 || end < 0 {
		return
	}
	m := Mark{TopicPartition: tp, Epoch: epoch, End: end}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closing || w.halted != nil || !w.ledAtLocked(m) || !newer(m, w.sent[tp]) || !newer(m, w.marks[tp].m) {
		return
	}
	w.marks[tp] = pendingMark{m: m, lead: w.leadID[tp]}
	if w.open == nil {
		w.signal()
	}
}

// ledAtLocked says whether m is of a leadership this writer has of its
// partition now (Lead, at m's epoch or later): a mark of a partition
// forgotten since, or of an older incarnation with a higher epoch (a
// partition deleted and created anew), is dropped. REQUIRES: mu.
func (w *Writer) ledAtLocked(m Mark) bool {
	le, ok := w.lead[m.TopicPartition]
	return ok && m.Epoch <= le
}

// newer says whether m says more than o (of the same partition; a zero o
// says nothing).
func newer(m, o Mark) bool {
	if o.Topic == "" {
		return true
	}
	return m.Epoch > o.Epoch || (m.Epoch == o.Epoch && m.End > o.End)
}

// takeMarksLocked gives o the pending marks. REQUIRES: mu.
func (w *Writer) takeMarksLocked(o *object) {
	if len(w.marks) == 0 {
		return
	}
	ms := make([]pendingMark, 0, len(w.marks))
	for _, pm := range w.marks {
		ms = append(ms, pm)
	}
	clear(w.marks)
	slices.SortFunc(ms, func(a, b pendingMark) int { return a.m.compare(b.m.TopicPartition) })
	for _, pm := range ms {
		o.marks = append(o.marks, pm.m)
		o.markLeads = append(o.markLeads, pm.lead)
	}
}

// marksSettled records what became of o's marks: in the bucket (landed),
// or pending again for the next object unless newer ones came since.
func (w *Writer) marksSettled(o *object, landed bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for i, m := range o.marks {
		tp := m.TopicPartition
		switch {
		case !w.ledAtLocked(m) || w.leadID[tp] != o.markLeads[i]:
			// Forgotten while in flight (and maybe led anew since): what
			// it says is no longer this writer's to keep.
		case landed:
			if newer(m, w.sent[tp]) {
				w.sent[tp] = m
			}
			if p, ok := w.marks[tp]; ok && !newer(p.m, m) {
				delete(w.marks, tp)
			}
		case !w.closing && w.halted == nil && newer(m, w.sent[tp]) && newer(m, w.marks[tp].m):
			w.marks[tp] = pendingMark{m: m, lead: o.markLeads[i]}
		}
	}
}

// claims says whether a fence at epoch claims appends made at dataEpoch.
func claims(fenceEpoch, dataEpoch int32) bool { return dataEpoch <= fenceEpoch }

// Forget fails tp's buffered appends (ErrPartitionFailed) and forgets
// the partition: it was closed or deleted, or this Backend no longer
// leads it.
func (w *Writer) Forget(tp TopicPartition) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.dropLocked(tp, fmt.Errorf("%w: %s was closed", ErrPartitionFailed, tp))
	w.gen[tp]++
	delete(w.refused, tp)
	delete(w.lead, tp)
	delete(w.fencedAt, tp)
	// Its marks go too: a partition deleted and created anew at a lower
	// epoch must not find the old one's newer-looking marks in the way.
	delete(w.sent, tp)
	delete(w.marks, tp)
	delete(w.leadID, tp)
}

// dropLocked fails tp's appends in the object being filled. REQUIRES: mu.
// It says whether there were any.
func (w *Writer) dropLocked(tp TopicPartition, err error) bool {
	if w.open == nil {
		return false
	}
	e, ok := w.open.parts[tp]
	if ok {
		delete(w.open.parts, tp)
		w.open.size -= len(e.data)
		w.releaseLocked(len(e.data))
		e.ack.settle(Location{}, err)
	}
	return ok
}

// releaseLocked takes n bytes off buffered and wakes waiting appends.
// REQUIRES: mu.
func (w *Writer) releaseLocked(n int) {
	if n == 0 {
		return
	}
	w.buffered -= n
	close(w.space)
	w.space = make(chan struct{})
}

// Flush uploads what is buffered now and waits until it has settled (or
// ctx ends). It returns nil when every append made before the call has
// settled, whatever their outcomes: each Ack has its own.
func (w *Writer) Flush(ctx context.Context) error {
	w.mu.Lock()
	var wait []chan struct{}
	for _, o := range append(slices.Clip(w.inflight), w.open) {
		if o != nil {
			wait = append(wait, o.settled)
		}
	}
	w.flushReq = w.open != nil
	w.mu.Unlock()
	w.signal()
	for _, c := range wait {
		select {
		case <-c:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// Close uploads what is buffered, waits for it to settle (until ctx
// ends: then the uploads in flight are abandoned and their appends fail with
// ErrClosed, their outcome unknown to this writer), and stops. Appends
// after Close fail with ErrClosed.
func (w *Writer) Close(ctx context.Context) error {
	w.mu.Lock()
	w.closing = true
	w.mu.Unlock()
	w.signal()
	select {
	case <-w.done:
		return nil
	case <-ctx.Done():
		w.cancel()
		<-w.done
		return ctx.Err()
	}
}

// run takes objects for upload as they fall due, numbers them in order,
// and puts up to InFlight at once; each settles after the one before it
// (finish), so appends settle in number order whatever order the puts
// land in. It returns after Close once everything has settled.
func (w *Writer) run() {
	defer close(w.done)
	defer w.cancel()
	var prev chan struct{} // the last object's settled; nil: none
	for {
		o := w.next()
		if o == nil {
			if prev != nil {
				<-prev
			}
			return
		}
		go func(o *object, prev chan struct{}) {
			w.upload(o)
			if prev != nil {
				<-prev
			}
			w.finish(o)
		}(o, prev)
		prev = o.settled
	}
}

// next waits until the object being filled is due (full, old enough,
// flushed or closing) and fewer than InFlight are in flight, numbers it
// and returns it; nil once closing with nothing left.
//
// Besides its size and age, an object is due as soon as the PUT budget
// has a whole PUT: the budget refills at one PUT a commit interval and one
// a BufferMaxBytes appended, holds at most one, and every upload spends
// one (going below zero when size, age, a flush or Close makes an object
// due first). So the PUT rate stays within 1 / CommitInterval +
// bytes / BufferMaxBytes, as with the interval alone, while an append
// that comes after a quiet spell is uploaded at once instead of waiting
// out the interval.
func (w *Writer) next() *object {
	for {
		w.mu.Lock()
		now := time.Now()
		if !w.refilled.IsZero() {
			w.tokens += float64(now.Sub(w.refilled)) / float64(w.opts.CommitInterval)
		}
		w.tokens, w.refilled = min(w.tokens, 1), now
		o := w.open
		wait := time.Duration(-1)
		if o == nil && (w.closing || w.halted != nil) {
			w.mu.Unlock()
			return nil
		}
		if o == nil && len(w.marks) > 0 && len(w.inflight) == 0 {
			// Marks and no append: an object of marks alone, once the
			// budget holds a whole PUT, and only with nothing in flight
			// (objects in flight settle first, and may bring newer marks).
			// Never above an object in flight: a fence that took the
			// marks' number first would name partitions of that object,
			// which would go again above it (finish) past the fence.
			if wait = time.Duration((1 - w.tokens) * float64(w.opts.CommitInterval)); wait <= 0 {
				o = &object{parts: map[TopicPartition]*extentBuf{}, started: now, settled: make(chan struct{})}
				w.takeLocked(o)
				w.mu.Unlock()
				return o
			}
		}
		if o != nil && len(w.inflight) < w.opts.InFlight {
			wait = min(w.opts.CommitInterval-now.Sub(o.started), time.Duration((1-w.tokens)*float64(w.opts.CommitInterval)))
			if o.size >= w.opts.BufferMaxBytes || w.flushReq || w.closing || wait <= 0 || len(o.parts) == 0 {
				w.open, w.flushReq = nil, false
				if len(o.parts) == 0 {
					// Every append in it was dropped: nothing to put.
					w.mu.Unlock()
					close(o.settled)
					continue
				}
				w.takeLocked(o)
				w.mu.Unlock()
				return o
			}
		}
		w.mu.Unlock()
		var timer *time.Timer
		var fire <-chan time.Time
		if wait > 0 {
			timer = time.NewTimer(wait)
			fire = timer.C
		}
		select {
		case <-w.kick:
		case <-fire:
		}
		if timer != nil {
			timer.Stop()
		}
	}
}

// takeLocked takes o for upload: it gets the pending marks and the next
// number, goes in flight, and spends a PUT of the budget. REQUIRES: mu.
func (w *Writer) takeLocked(o *object) {
	w.takeMarksLocked(o)
	o.seq, o.put = w.seq, make(chan struct{})
	w.seq++
	w.inflight = append(w.inflight, o)
	w.tokens = max(w.tokens-1, -1)
}

// outcome is what became of one put of an object.
type outcome int

const (
	landed  outcome = iota // the object is durable
	fenced                 // a fence holds the sequence number: see its footer
	voided                 // this writer voided the number: nothing landed
	unknown                // the writer stopped before it learned
)

// upload puts o at its number and records the outcome.
func (w *Writer) upload(o *object) {
	start := time.Now()
	o.key = w.layout.Key(w.id, o.seq)
	body, f := w.seal(o, o.seq)
	o.body, o.f = len(body), f
	o.res, o.fence, o.cause = w.put(o.key, o.seq, body, f)
	w.report(o.key, o.seq, len(body), len(f.Extents), start, o.outcomeErr())
	close(o.put)
}

// outcomeErr is why o's appends failed (nil when it landed).
func (o *object) outcomeErr() error {
	switch o.res {
	case landed:
		return nil
	case fenced:
		return ErrFenced
	case voided:
		return fmt.Errorf("%w: %s: its sequence number was voided", ErrUploadFailed, o.key)
	}
	if o.cause != nil {
		return fmt.Errorf("%w: %s: what the bucket holds at its number cannot be learned: %w", ErrHalted, o.key, o.cause)
	}
	return fmt.Errorf("%w: %s: the writer closed before the upload's outcome was known", ErrClosed, o.key)
}

// finish settles o's appends once every lower number has settled (the
// caller waits for that) and its put has an outcome.
//
//   - landed: each partition's appends are durable, unless the
//     partition failed (or was reset) after they were made, or a fence
//     met claims them: then they fail, landed or not.
//   - fenced: the partitions the fence claims fail with ErrFenced and
//     are refused until Lead. The object's other partitions go again at
//     the writer's next number if no object above this one is in flight;
//     otherwise they fail with ErrUploadFailed and are refused until
//     Reset (at a number above those, their appends would land after
//     later ones, or past a fence met only later).
//   - voided, or the writer closed first: every partition in it fails
//     and is refused until Reset.
//   - unknown: the same, and the writer halts at o's number (halt).
//
// Whatever its outcome, an object numbered above the one the writer
// halted at fails whole.
func (w *Writer) finish(o *object) {
	defer func() {
		w.mu.Lock()
		w.inflight = slices.DeleteFunc(w.inflight, func(x *object) bool { return x == o })
		w.mu.Unlock()
		close(o.settled)
		w.signal() // a slot is free
	}()
	for {
		<-o.put
		// Which partitions' appends went stale while o was in flight,
		// taken before this object's own failure moves any generation.
		stale := map[TopicPartition]bool{}
		w.mu.Lock()
		for tp, e := range o.parts {
			stale[tp] = e.gen != w.gen[tp]
		}
		halted, at := w.halted, w.haltedAt
		w.mu.Unlock()
		if halted != nil && o.seq > at {
			// The number below may hold a fence that claims these
			// partitions: a landed object above it is no proof.
			w.marksSettled(o, false)
			err := fmt.Errorf("%w: %s: the writer halted at number %d below it: %w", ErrUploadFailed, o.key, at, halted)
			for tp := range o.parts {
				w.fail(o, tp, err, stale[tp])
			}
			return
		}
		switch o.res {
		case landed:
			w.marksSettled(o, true)
			for _, e := range o.f.Extents {
				if !w.claimed(o, e.TopicPartition, stale[e.TopicPartition]) {
					w.settle(o, e.TopicPartition, Location{Writer: w.id, Sequence: o.seq, Key: o.key, Extent: e}, nil, stale[e.TopicPartition])
				}
			}
			return
		case fenced:
			w.metFence(o)
			for _, e := range o.f.Extents {
				tp := e.TopicPartition
				if !w.claimed(o, tp, stale[tp]) && stale[tp] {
					w.settle(o, tp, Location{}, fmt.Errorf("%w: %s", ErrUploadFailed, o.key), true)
				}
			}
			// The rest go again at the next number when no object is in
			// flight above this one (checked and numbered at once: an
			// object taken later is numbered after the new number).
			// Otherwise they fail: the new number would lie above
			// objects that hold later appends of the same partitions,
			// or a fence that claims them, met only after.
			w.mu.Lock()
			again := len(o.parts) > 0 && !w.aboveLocked(o)
			if again {
				o.seq, o.put = w.seq, make(chan struct{})
				w.seq++
			}
			w.mu.Unlock()
			if !again {
				w.marksSettled(o, false)
				for tp := range o.parts {
					w.fail(o, tp, fmt.Errorf("%w: %s: its number was fenced by a claim of other partitions while later objects were in flight", ErrUploadFailed, o.key), false)
				}
			}
			if !again {
				return
			}
			w.upload(o)
		default:
			w.marksSettled(o, false)
			err := o.outcomeErr()
			if o.res == unknown {
				w.halt(o, err)
			}
			for _, e := range o.f.Extents {
				w.fail(o, e.TopicPartition, err, stale[e.TopicPartition])
			}
			w.opts.Logger.Error("wal: upload failed", "key", o.key, "partitions", len(o.f.Extents), "err", err)
			return
		}
	}
}

// halt stops the writer for good at o's number, whose outcome it could
// not learn (err says why): the number may hold a fence that claims any
// of the writer's partitions, so no append numbered above it may settle
// durable (finish fails those objects whole, landed or not), and the
// writer takes no more. Appends buffered fail, later ones are refused
// with err, marks stop, puts in flight are cancelled, and run returns
// once every object has settled. finish calls it in number order, so the
// first halt is at the lowest such number.
func (w *Writer) halt(o *object, err error) {
	w.mu.Lock()
	if w.halted == nil {
		w.halted, w.haltedAt = err, o.seq
	}
	clear(w.marks)
	type drop struct {
		tp  TopicPartition
		err error
	}
	var drops []drop
	if w.open != nil {
		for tp := range w.open.parts {
			drops = append(drops, drop{tp, w.refuseLocked(tp, err)})
		}
	}
	w.mu.Unlock()
	w.cancel()
	w.signal()
	if w.opts.OnSettled != nil {
		for _, d := range drops {
			w.opts.OnSettled(d.tp, Location{}, d.err)
		}
	}
	if !errors.Is(err, ErrClosed) {
		w.opts.Logger.Error("wal: writer halted: nothing above this number can be acknowledged; a new writer must take over its partitions",
			"key", o.key, "sequence", o.seq, "err", err)
	}
}

// Halted is why the writer stopped for good, nil while it runs: it could
// not learn what the bucket holds at one of its numbers (the error
// wraps ErrHalted), or Close's deadline passed with a put in flight
// (ErrClosed). Every append then fails; its partitions need a new writer.
func (w *Writer) Halted() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.halted
}

// metFence records the fence that holds o's number: the epoch it claims
// each partition it names at, and a refusal of those the writer does not
// lead past it.
func (w *Writer) metFence(o *object) {
	for _, e := range o.fence.Extents {
		tp := e.TopicPartition
		w.mu.Lock()
		if fe, ok := w.fencedAt[tp]; !ok || fe < o.fence.FenceEpoch {
			w.fencedAt[tp] = o.fence.FenceEpoch
		}
		w.mu.Unlock()
		// Whether tp is led past the fence, and its refusal if not, in one
		// hold of the lock: a Lead in between must not be refused.
		w.mu.Lock()
		var dropErr, fenceErr error
		if le, ok := w.lead[tp]; !ok || claims(o.fence.FenceEpoch, le) {
			fenceErr = &FencedError{TopicPartition: tp, FenceEpoch: o.fence.FenceEpoch, DataEpoch: le, Key: o.key}
			dropErr = w.refuseLocked(tp, fenceErr)
		}
		_, inObject := o.parts[tp]
		w.mu.Unlock()
		if w.opts.OnSettled != nil {
			if dropErr != nil {
				w.opts.OnSettled(tp, Location{}, dropErr)
			} else if fenceErr != nil && !inObject {
				// Nothing else would tell the caller: its appends in
				// flight above went stale with the refusal.
				w.opts.OnSettled(tp, Location{}, fenceErr)
			}
		}
	}
	w.opts.Logger.Warn("wal: fenced", "key", o.key, "claimed", len(o.fence.Extents), "epoch", o.fence.FenceEpoch)
}

// aboveLocked says whether an object numbered above o is in flight.
// REQUIRES: mu.
func (w *Writer) aboveLocked(o *object) bool {
	for _, x := range w.inflight {
		if x.seq > o.seq {
			return true
		}
	}
	return false
}

// claimed fails tp's appends in o with ErrFenced when a fence met (in
// o, or below it) claims them, and says whether it did. An object above
// the fence may hold them: it was in flight when the fence landed.
func (w *Writer) claimed(o *object, tp TopicPartition, stale bool) bool {
	w.mu.Lock()
	x := o.parts[tp]
	fe, ok := w.fencedAt[tp]
	w.mu.Unlock()
	if !ok || !claims(fe, x.epoch) {
		return false
	}
	w.settle(o, tp, Location{}, &FencedError{TopicPartition: tp, FenceEpoch: fe, DataEpoch: x.epoch, Key: o.key}, stale)
	return true
}

// fail fails tp's appends in o with err and, unless they were stale
// already, refuses tp until Reset first (so the caller, told of the
// failure, finds it refused until it truncates and resets).
func (w *Writer) fail(o *object, tp TopicPartition, err error, stale bool) {
	if !stale {
		w.refuse(tp, err)
	}
	w.settle(o, tp, Location{}, err, stale)
}

func (w *Writer) report(key string, seq uint64, n, extents int, start time.Time, err error) {
	if w.opts.OnUpload != nil {
		w.opts.OnUpload(UploadEvent{Key: key, Sequence: seq, Bytes: n, Extents: extents, Took: time.Since(start), Err: err})
	}
}

// settle settles tp's appends in o and takes them out of it: durable at
// loc when err is nil and they are not stale (made before tp's last
// failure, Reset or Forget); else failed, with err, or with why they
// went stale. Only appends that were not stale are reported to
// OnSettled.
func (w *Writer) settle(o *object, tp TopicPartition, loc Location, err error, stale bool) {
	w.mu.Lock()
	e := o.parts[tp]
	if err == nil && !stale {
		// A Reset, Forget or fence since finish looked: they win.
		if e.gen != w.gen[tp] {
			stale = true
		} else if fe, ok := w.fencedAt[tp]; ok && claims(fe, e.epoch) {
			loc, err = Location{}, &FencedError{TopicPartition: tp, FenceEpoch: fe, DataEpoch: e.epoch, Key: o.key}
		}
	}
	if stale {
		cause := fmt.Errorf("%w: %s: it failed or was reset after these appends", ErrPartitionFailed, tp)
		if st, ok := w.refused[tp]; ok {
			cause = fmt.Errorf("%w: %s: %w", ErrPartitionFailed, tp, st.err)
		}
		if err == nil {
			loc, err = Location{}, cause
		}
	}
	delete(o.parts, tp)
	w.releaseLocked(len(e.data))
	w.mu.Unlock()
	if w.opts.OnSettled != nil && !stale {
		w.opts.OnSettled(tp, loc, err)
	}
	e.ack.settle(loc, err)
}

// refuse fails tp's appends in the object being filled and every later
// one until Reset, and makes those in flight stale: they follow offsets
// that did not become durable.
func (w *Writer) refuse(tp TopicPartition, err error) {
	w.mu.Lock()
	dropErr := w.refuseLocked(tp, err)
	w.mu.Unlock()
	if dropErr != nil && w.opts.OnSettled != nil {
		w.opts.OnSettled(tp, Location{}, dropErr)
	}
}

// refuseLocked is refuse under mu; it returns the error the appends it
// dropped from the object being filled failed with (nil: none), for the
// caller to report once it unlocks. REQUIRES: mu.
func (w *Writer) refuseLocked(tp TopicPartition, err error) error {
	dropErr := fmt.Errorf("%w: %s: %w", ErrPartitionFailed, tp, err)
	dropped := w.dropLocked(tp, dropErr)
	w.gen[tp]++
	if _, ok := w.refused[tp]; !ok {
		w.refused[tp] = partState{err: err}
	}
	if !dropped {
		return nil
	}
	return dropErr
}

// seal lays o out as an object at seq: its partitions' batches in
// partition order, then the footer.
func (w *Writer) seal(o *object, seq uint64) ([]byte, Footer) {
	tps := make([]TopicPartition, 0, len(o.parts))
	for tp := range o.parts {
		tps = append(tps, tp)
	}
	slices.SortFunc(tps, func(a, b TopicPartition) int { return a.compare(b) })
	f := Footer{Writer: w.id, Sequence: seq, CreatedMs: time.Now().UnixMilli(), Extents: make([]Extent, len(tps)), Marks: o.marks}
	body := make([]byte, 0, o.size+footerFixed+(len(tps)+len(o.marks))*64+trailerSize)
	for i, tp := range tps {
		e := o.parts[tp]
		f.Extents[i] = Extent{TopicPartition: tp, FirstOffset: e.first, LastOffset: e.last,
			Position: int64(len(body)), Size: int32(len(e.data)), CRC: crc32.Checksum(e.data, castagnoli)}
		body = append(body, e.data...)
	}
	return f.appendTo(body), f
}

// put puts body (whose footer is mine) at key create-only and learns
// what became of it. A put whose answer is an error may still have landed
// (or land later, from an attempt still on the wire): put then voids the
// number with a fence of its own, create-only, and whichever of the two
// the bucket holds is the outcome. It keeps trying while the bucket is
// unreachable, until Close's deadline. When the object that holds the
// number cannot be read as this writer's or as a fence for a reason a
// retry does not mend (ErrCorrupt, an object sealed by a store this one
// cannot open), the outcome is unknown, with that cause.
func (w *Writer) put(key string, seq uint64, body []byte, mine Footer) (outcome, Footer, error) {
	err := w.putOnce(key, body, objstore.PutOptions{IfNoneMatch: true})
	if err == nil {
		return landed, Footer{}, nil
	}
	var void []byte
	var voidFooter Footer
	for attempt := 0; ; attempt++ {
		if errors.Is(err, objstore.ErrPreconditionFailed) {
			res, f, etag, rerr := w.whose(key, int64(len(body)), mine, int64(len(void)), voidFooter)
			switch {
			case errors.Is(rerr, errForeign):
				return voided, Footer{}, nil
			case rerr != nil && w.ctx.Err() == nil && !errors.Is(rerr, objstore.ErrRetryable) && !errors.Is(rerr, objstore.ErrNotFound):
				return unknown, Footer{}, fmt.Errorf("read the object that holds it: %w", rerr)
			case rerr != nil:
				err = rerr
			case res == fenced:
				return res, f, nil
			default:
				// This writer's own object, data or void, whose put's
				// answer was lost: a read of it is no proof that it is
				// durable (an erasure-coded cluster short of its write
				// quorum shows such a version to some reads and not to
				// others); a put over it that is answered is.
				own := body
				if res == voided {
					own = void
				}
				if err = w.putOnce(key, own, objstore.PutOptions{IfMatch: etag}); err == nil {
					return res, f, nil
				}
			}
		}
		if w.ctx.Err() != nil {
			return unknown, Footer{}, nil
		}
		w.opts.Logger.Warn("wal: upload outcome unknown; voiding its sequence number", "key", key, "attempt", attempt, "err", err)
		if attempt > 0 {
			select {
			case <-time.After(w.opts.SettleBackoff):
			case <-w.ctx.Done():
				return unknown, Footer{}, nil
			}
		}
		if void == nil {
			voidFooter = Footer{Writer: w.id, Sequence: seq, CreatedMs: time.Now().UnixMilli(), Fence: true}
			void, _ = EncodeFence(voidFooter)
		}
		if err = w.putOnce(key, void, objstore.PutOptions{IfNoneMatch: true}); err == nil {
			return voided, Footer{}, nil
		}
	}
}

func (w *Writer) putOnce(key string, body []byte, opts objstore.PutOptions) error {
	opts.CRC32C, opts.HasCRC32C = crc32.Checksum(body, castagnoli), true
	_, err := w.store.Put(w.ctx, key, bytes.NewReader(body), int64(len(body)), opts)
	return err
}

// whose reads the footer of the object that holds key and says whose it
// is: this writer's data (mine, an object of size bytes: an earlier
// attempt landed), its own void (of voidSize bytes; 0: none put yet), or
// a fence. Footers are compared, not bodies: a footer holds the CRC-32C
// of every extent and the writer's clock at sealing.
func (w *Writer) whose(key string, size int64, mine Footer, voidSize int64, void Footer) (outcome, Footer, string, error) {
	f, info, err := ReadObjectFooter(w.ctx, w.store, key)
	if err != nil {
		return 0, Footer{}, "", err
	}
	switch {
	case info.Size == size && sameFooter(f, mine):
		return landed, f, info.ETag, nil
	case voidSize > 0 && info.Size == voidSize && sameFooter(f, void):
		return voided, f, info.ETag, nil
	case f.Fence:
		return fenced, f, info.ETag, nil
	}
	// Another writer's data under this writer's id: ids are random, so
	// this is damage. None of this object's appends is there: they fail
	// as if the number were voided.
	w.opts.Logger.Error("wal: a sequence number holds an object this writer did not put", "key", key, "writer", f.Writer, "sequence", f.Sequence)
	return voided, Footer{}, "", errForeign
}

// errForeign: the number holds an object this writer did not put.
var errForeign = errors.New("wal: foreign object")

func sameFooter(a, b Footer) bool {
	return a.Writer == b.Writer && a.Sequence == b.Sequence && a.CreatedMs == b.CreatedMs && a.Fence == b.Fence &&
		a.FenceEpoch == b.FenceEpoch && slices.Equal(a.Extents, b.Extents) && slices.Equal(a.Marks, b.Marks)
}
