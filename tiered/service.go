package tiered

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/compaction"
	"github.com/tierlog/tierlog/internal/ratelimit"
	"github.com/tierlog/tierlog/objstore/seal"
)

// The tiering service: a Backend's RemoteLogManager.
//
// Copiers (ManagerConfig.CopierThreads) take partitions from one FIFO of
// partitions with segments to upload; a partition is in it at most once.
// Each turn uploads one segment, or up to four small ones (within 128
// MiB) committed together, one upload at a time (CopyTurn), and, if more
// wait, puts the partition back at the end: a partition with a long
// backlog takes one turn per round, and every other partition waits at
// most one round of turns. Every upload goes through the broker-wide
// quota.
//
// A partition is queued when the broker moves its high watermark past a
// closed segment the bucket lacks (SetHighWatermark, BecomeLeader), and by
// the periodic pass every TaskInterval, which also hands each partition's
// other work to the expiration pool: remote retention for a leader, the
// manifest and local retention for a follower, attaching a partition
// opened while the bucket was unreachable, and gc every GCInterval. A
// failed task is retried after a backoff that doubles up to
// RetryBackoffMax.

// service runs a Backend's background work.
type service struct {
	b      *Backend
	cfg    ManagerConfig
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	queue   []*Partition // partitions waiting for a copier turn, FIFO
	queued  map[*Partition]bool
	state   map[*Partition]*taskState
	wakeup  chan struct{} // capacity 1: the queue has work
	tasks   chan func()   // the expiration pool's work
	running map[*Partition]bool
	// walGC is when the WAL objects were last collected (the first pass
	// waits one interval, as a partition's gc does); walGCRunning says a
	// collection is on the pool.
	walGC        time.Time
	walGCRunning bool
	// compactMap is the bucket's cleaner's offset map, made at the first
	// round; taking it from the channel is the right to run a round (one
	// at a time for the Backend). compactLim is the cleaner's I/O budget.
	compactMap chan *compaction.OffsetMap
	compactLim *ratelimit.Limiter
}

// taskState is the service's memory of one partition.
type taskState struct {
	failures  int       // consecutive failed copy turns
	notBefore time.Time // no copy turn before (backoff)
	lastGC    time.Time
	// attachLogged and attachAt are the attach failure last logged and
	// when: the same one is logged again only after repeatLogAfter.
	attachLogged string
	attachAt     time.Time
}

// repeatLogAfter is how long a partition's unchanged attach failure goes
// unlogged: a broker of 10,000 partitions whose bucket is down would
// otherwise log 10,000 lines each task interval.
const repeatLogAfter = 10 * time.Minute

// logAttach reports whether p's attach failure msg is to be logged now:
// when it differs from the last one logged, or that one is older than
// repeatLogAfter. A success (msg "") forgets it, and reports whether a
// failure was logged (so that the recovery is too).
func (s *service) logAttach(p *Partition, msg string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stateLocked(p)
	if msg == "" {
		was := st.attachLogged != ""
		st.attachLogged = ""
		return was
	}
	now := time.Now()
	if msg == st.attachLogged && now.Sub(st.attachAt) < repeatLogAfter {
		return false
	}
	st.attachLogged, st.attachAt = msg, now
	return true
}

func newService(b *Backend) *service {
	s := &service{b: b, cfg: b.opts.Manager, queued: map[*Partition]bool{}, state: map[*Partition]*taskState{},
		wakeup: make(chan struct{}, 1), tasks: make(chan func()), running: map[*Partition]bool{},
		compactMap: make(chan *compaction.OffsetMap, 1), compactLim: ratelimit.New(b.opts.Manager.CompactBytesPerSecond)}
	s.compactMap <- nil // made at the first round
	s.ctx, s.cancel = context.WithCancel(context.Background())
	for range s.cfg.CopierThreads {
		s.wg.Add(1)
		go s.copier()
	}
	for range s.cfg.ExpirationThreads {
		s.wg.Add(1)
		go s.expirer()
	}
	s.wg.Add(1)
	go s.periodic()
	return s
}

// stop cancels every task and waits for the goroutines.
func (s *service) stop() {
	s.cancel()
	s.wg.Wait()
}

// wake queues p for a copier turn if it leads and has a segment to upload
// (cheap: a binary search of its segments), or has yet to claim the bucket
// for its epoch (which fences the previous leader); see
// Partition.SetHighWatermark and BecomeLeader.
func (s *service) wake(p *Partition) {
	if s.ctx.Err() != nil || !p.IsLeader() || (!p.hasCopyWork() && !p.needsClaim()) {
		return
	}
	s.enqueue(p)
}

func (s *service) enqueue(p *Partition) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.queued[p] {
		return
	}
	s.queued[p] = true
	s.queue = append(s.queue, p)
	select {
	case s.wakeup <- struct{}{}:
	default:
	}
}

// next takes the first partition of the queue whose backoff has passed,
// waiting for one.
func (s *service) next() (*Partition, bool) {
	for {
		s.mu.Lock()
		now := time.Now()
		for i, p := range s.queue {
			if st := s.state[p]; st != nil && now.Before(st.notBefore) {
				continue
			}
			s.queue = append(s.queue[:i:i], s.queue[i+1:]...)
			delete(s.queued, p)
			if len(s.queue) > 0 {
				select { // let another copier look too
				case s.wakeup <- struct{}{}:
				default:
				}
			}
			s.mu.Unlock()
			return p, true
		}
		wait := time.Duration(-1)
		for _, p := range s.queue {
			if st := s.state[p]; st != nil {
				if d := st.notBefore.Sub(now); wait < 0 || d < wait {
					wait = d
				}
			}
		}
		s.mu.Unlock()
		var timer *time.Timer
		var fired <-chan time.Time
		if wait >= 0 {
			timer = time.NewTimer(wait)
			fired = timer.C
		}
		select {
		case <-s.ctx.Done():
		case <-s.wakeup:
		case <-fired:
		}
		if timer != nil {
			timer.Stop()
		}
		if s.ctx.Err() != nil {
			return nil, false
		}
	}
}

// copier runs copy turns until the service stops.
func (s *service) copier() {
	defer s.wg.Done()
	for {
		p, ok := s.next()
		if !ok {
			return
		}
		_, more, err := p.CopyTurn(s.ctx)
		s.mu.Lock()
		st := s.stateLocked(p)
		switch {
		case err == nil:
			st.failures = 0
		case errors.Is(err, backend.ErrClosed) || errors.Is(err, ErrNotLeader) || errors.Is(err, backend.ErrFenced) ||
			errors.Is(err, backend.ErrManifestRolledBack) || s.ctx.Err() != nil:
			// Nothing to retry: the partition went, is not this broker's
			// to upload, or is offline until reopened (rollback.go).
			more = false
		default:
			st.failures++
			st.notBefore = time.Now().Add(s.backoff(st.failures))
			s.b.logger.Warn("tiering: copy failed; retrying after a backoff", "prefix", p.prefix, "failures", st.failures,
				"retry_in", time.Until(st.notBefore).Round(time.Millisecond), "err", err)
			more = true
		}
		s.mu.Unlock()
		if more {
			s.enqueue(p)
		}
	}
}

func (s *service) stateLocked(p *Partition) *taskState {
	st := s.state[p]
	if st == nil {
		st = &taskState{}
		s.state[p] = st
	}
	return st
}

// backoff is Kafka's exponential backoff with jitter for the n-th failure.
func (s *service) backoff(n int) time.Duration {
	d := s.cfg.RetryBackoff
	for i := 1; i < n && d < s.cfg.RetryBackoffMax; i++ {
		d *= 2
	}
	d = min(d, s.cfg.RetryBackoffMax)
	j := 1 + s.cfg.RetryJitter*(2*rand.Float64()-1)
	return time.Duration(float64(d) * j)
}

// expirer runs the expiration pool's tasks.
func (s *service) expirer() {
	defer s.wg.Done()
	for {
		select {
		case <-s.ctx.Done():
			return
		case task := <-s.tasks:
			task()
		}
	}
}

// periodic looks at every tiered partition each TaskInterval.
func (s *service) periodic() {
	defer s.wg.Done()
	t := time.NewTicker(s.cfg.TaskInterval)
	defer t.Stop()
	for {
		s.pass()
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
		}
	}
}

// pass queues what each partition needs: a copier turn for a leader with
// segments waiting; remote retention (and gc when due) for a leader, the
// manifest and local retention for a follower, attaching for one opened
// while the bucket was unreachable. It forgets closed partitions.
func (s *service) pass() {
	parts := s.b.TieredPartitions()
	live := make(map[*Partition]bool, len(parts))
	for _, p := range parts {
		live[p] = true
	}
	s.mu.Lock()
	for p := range s.state {
		if !live[p] {
			delete(s.state, p)
		}
	}
	s.mu.Unlock()
	s.walGCPass()
	for _, p := range parts {
		if s.ctx.Err() != nil {
			return
		}
		s.wake(p)
		if !s.startTask(p) {
			continue // its previous task is still running
		}
		select {
		case s.tasks <- func() { defer s.endTask(p); s.maintain(p) }:
		case <-s.ctx.Done():
			s.endTask(p)
			return
		}
	}
}

func (s *service) startTask(p *Partition) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.running[p] {
		return false
	}
	s.running[p] = true
	return true
}

func (s *service) endTask(p *Partition) {
	s.mu.Lock()
	delete(s.running, p)
	s.mu.Unlock()
}

// maintain is one partition's periodic task, on the expiration pool.
func (s *service) maintain(p *Partition) {
	ctx := s.ctx
	log := s.b.logger.With("prefix", p.prefix)
	if !p.Attached() {
		if err := p.Attach(ctx); err != nil {
			// A refused manifest was logged as the partition went offline.
			switch {
			case ctx.Err() != nil || errors.Is(err, backend.ErrClosed) || errors.Is(err, backend.ErrManifestRolledBack):
			case !s.logAttach(p, err.Error()):
				// Logged already, unchanged.
			case errors.Is(err, backend.ErrInvalidConfig) || errors.Is(err, seal.ErrNotSealed) || errors.Is(err, seal.ErrSealedObject):
				// The topic's config, or the store URL's sealing, does
				// not fit what the bucket holds (remote.storage.seal.enable,
				// diskless.enable, key-file=, seal=): nothing is uploaded
				// until it does.
				log.Error("tiering: the partition's config does not fit its objects in the bucket; local data is served, nothing is uploaded", "err", err)
			default:
				log.Warn("tiering: the bucket is unreachable; local data is served meanwhile", "err", err)
			}
			return
		}
		if s.logAttach(p, "") {
			log.Info("tiering: attached to the bucket")
		}
	}
	var err error
	switch {
	case p.IsLeader():
		_, err = p.ApplyRetention(ctx)
		if err == nil && s.b.opts.GCInterval > 0 && p.man.Load().etag != "" && s.gcDue(p) {
			var gone []string
			gone, err = GC(ctx, p.store, p.prefix, s.b.opts.GC)
			if len(gone) > 0 {
				log.Info("tiering: gc removed unreferenced objects", "objects", len(gone))
			}
		}
		if err == nil && p.local.Config().Compact() {
			// After gc: a round that keeps failing holds up no gc.
			err = s.compact(ctx, p)
		}
	case p.opts.ReadReplica:
		err = p.ReplicaStep(ctx)
	case p.role.Load() == roleFollower:
		err = p.FollowerStep(ctx)
	}
	switch {
	case err == nil || ctx.Err() != nil || errors.Is(err, backend.ErrClosed) || errors.Is(err, ErrNotLeader):
	case errors.Is(err, ErrPastEnd):
		log.Error("tiering: gc kept objects past the manifest's end that nothing names (has the bucket gone back in time?)", "err", err)
	default:
		log.Warn("tiering: periodic task failed; the next pass retries", "err", err)
	}
}

// compact runs a round of the bucket's cleaner on p (a leader of a
// compacted partition) when no other partition's round holds the map; it
// runs when the dirty share of p's bucket segments passes
// min.cleanable.dirty.ratio. Rounds run on the expiration pool, one at a
// time, within their own I/O budget: uploads and reads of every
// partition go on meanwhile.
func (s *service) compact(ctx context.Context, p *Partition) error {
	var m *compaction.OffsetMap
	select {
	case m = <-s.compactMap:
	default:
		return nil // another partition's round: the next pass
	}
	defer func() { s.compactMap <- m }()
	if m == nil {
		var err error
		if m, err = compaction.NewOffsetMap(s.cfg.CompactMemoryBytes); err != nil {
			return err
		}
	}
	o := CompactOptions{Map: m}
	if s.cfg.CompactBytesPerSecond > 0 {
		o.Throttle = s.compactLim.Wait
	}
	st, err := p.CompactRemote(ctx, o)
	if err == nil && st.Ran {
		s.b.logger.Info("tiering: cleaned the bucket's segments", "prefix", p.prefix, "replaced", st.SegmentsReplaced,
			"written", st.SegmentsWritten, "removed", st.RecordsRemoved, "bytesRead", st.BytesRead, "bytesWritten", st.BytesWritten,
			"checkpoint", st.Checkpoint, "took", st.Duration)
	}
	return err
}

// walGCPass queues a collection of the Backend's WAL objects (walgc.go)
// every GCInterval, once the Backend has diskless partitions.
func (s *service) walGCPass() {
	s.b.walMu.Lock()
	hasWAL := s.b.wal != nil
	s.b.walMu.Unlock()
	if !hasWAL || s.b.opts.GCInterval <= 0 {
		return
	}
	s.mu.Lock()
	now := time.Now()
	if s.walGC.IsZero() {
		s.walGC = now
	}
	due := !s.walGCRunning && now.Sub(s.walGC) >= s.b.opts.GCInterval
	if due {
		s.walGC, s.walGCRunning = now, true
	}
	s.mu.Unlock()
	if !due {
		return
	}
	task := func() {
		defer func() { s.mu.Lock(); s.walGCRunning = false; s.mu.Unlock() }()
		objs, err := GCWAL(s.ctx, s.b.walStore(), s.b.prefix, WALGCOptions{Grace: s.b.opts.GC.Grace, Force: s.b.opts.GC.Force, Manifests: s.b.store})
		removed := 0
		for _, o := range objs {
			if o.Remove {
				removed++
			}
		}
		if removed > 0 {
			s.b.logger.Info("diskless: gc removed WAL objects no partition needs", "objects", removed)
		}
		if err != nil && s.ctx.Err() == nil {
			s.b.logger.Warn("diskless: WAL gc failed; the next interval retries", "err", err)
		}
	}
	select {
	case s.tasks <- task:
	case <-s.ctx.Done():
	}
}

// gcDue says whether p's gc is due, and if so records it as done now.
func (s *service) gcDue(p *Partition) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stateLocked(p)
	if now := time.Now(); st.lastGC.IsZero() || now.Sub(st.lastGC) >= s.b.opts.GCInterval {
		if st.lastGC.IsZero() {
			// The first gc of a partition waits one interval: a broker
			// restarting often would otherwise list every prefix each time.
			st.lastGC = now
			return false
		}
		st.lastGC = now
		return true
	}
	return false
}
