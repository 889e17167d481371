package compaction

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"time"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/internal/ratelimit"
	"github.com/tierlog/tierlog/local"
)

// CleanerOptions configure a background Cleaner (Kafka's log.cleaner.*).
type CleanerOptions struct {
	// Threads cleaning at once (log.cleaner.threads, default 1).
	Threads int
	// MemoryBytes is the offset map memory across threads
	// (log.cleaner.dedupe.buffer.size, default DefaultMemoryBytes).
	MemoryBytes int
	// IOBytesPerSecond caps the bytes read and written by all threads
	// together (log.cleaner.io.max.bytes.per.second; 0: no cap).
	IOBytesPerSecond int64
	// Backoff is the sleep when no log needs cleaning
	// (log.cleaner.backoff.ms, default 15s), cut short when a log will
	// breach its max.compaction.lag.ms sooner: a thread wakes for that.
	// It is also how long a log whose round failed is skipped, doubled
	// for each failure in a row up to MaxFailedBackoff.
	Backoff time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Logger receives one line per round and errors (default: discard).
	Logger *slog.Logger
}

// CleanerStats are a Cleaner's totals since it was created, and its last
// round.
type CleanerStats struct {
	Rounds       int64
	Errors       int64
	BytesRead    int64
	BytesWritten int64
	Removed      int64 // records removed
	Last         Stats // the last round that cleaned something
	LastLog      string
	LastError    error
	// Uncleanable is how many logs the cleaner skips now because their
	// last round failed (Kafka's uncleanable partitions): each is tried
	// again after a wait that doubles with every failure in a row, from
	// Backoff up to MaxFailedBackoff.
	Uncleanable int
}

// MaxFailedBackoff is the longest a log whose rounds keep failing waits
// before the cleaner tries it again.
const MaxFailedBackoff = time.Hour

// Cleaner cleans the compacted partitions of a local.Backend in the
// background: each pass picks the dirtiest eligible log (dirty ratio above
// min.cleanable.dirty.ratio, or max.compaction.lag.ms breached), cleans
// it, and records the new first dirty offset in the log dir's
// cleaner-offset-checkpoint (Kafka's file and format).
type Cleaner struct {
	b    *local.Backend
	opts CleanerOptions
	lim  *ratelimit.Limiter

	mu         sync.Mutex
	checkpoint map[local.TopicPartition]int64
	busy       map[local.TopicPartition]bool
	// stuck holds the log end of logs whose last round cleaned nothing
	// (an open transaction at their first dirty offset): they are not
	// picked again until their log end moves.
	stuck map[local.TopicPartition]int64
	// failed holds the logs whose last round (or look at their dirty
	// segments) failed: skipped until retryAt, so a log that fails the
	// same way every time neither spins a thread nor keeps the others
	// from being cleaned.
	failed map[local.TopicPartition]failure
	stats  CleanerStats
	// nextDue is the earliest moment a log not cleaned yet breaches
	// max.compaction.lag.ms, as the last pass that found nothing to do
	// saw it; zero when none will. An idle thread wakes then, not only
	// after Backoff.
	nextDue time.Time
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	maps    chan *OffsetMap
}

// failure is a log's failures in a row, and when it is tried again.
type failure struct {
	n       int
	retryAt time.Time
}

// failLocked records that a round of tp failed: it is skipped until a
// wait that doubles with each failure in a row. REQUIRES: c.mu.
func (c *Cleaner) failLocked(tp local.TopicPartition) time.Time {
	f := c.failed[tp]
	f.n++
	wait := c.opts.Backoff
	for i := 1; i < f.n && wait < MaxFailedBackoff; i++ {
		wait *= 2
	}
	f.retryAt = c.opts.Now().Add(min(wait, MaxFailedBackoff))
	c.failed[tp] = f
	return f.retryAt
}

// NewCleaner returns a stopped Cleaner for b, reading its checkpoint.
func NewCleaner(b *local.Backend, opts CleanerOptions) (*Cleaner, error) {
	if opts.Threads <= 0 {
		opts.Threads = 1
	}
	if opts.MemoryBytes == 0 {
		opts.MemoryBytes = DefaultMemoryBytes
	}
	if opts.Backoff <= 0 {
		opts.Backoff = 15 * time.Second
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	cp, err := local.ReadOffsetCheckpoint(filepath.Join(b.Dir(), local.CleanerCheckpoint))
	if err != nil {
		return nil, err
	}
	c := &Cleaner{b: b, opts: opts, lim: ratelimit.New(opts.IOBytesPerSecond), checkpoint: cp,
		busy: map[local.TopicPartition]bool{}, stuck: map[local.TopicPartition]int64{}, failed: map[local.TopicPartition]failure{}, maps: make(chan *OffsetMap, opts.Threads)}
	for range opts.Threads {
		m, err := NewOffsetMap(opts.MemoryBytes / opts.Threads)
		if err != nil {
			return nil, err
		}
		c.maps <- m
	}
	return c, nil
}

// Start runs the cleaner threads until Stop.
func (c *Cleaner) Start() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cancel != nil {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	c.cancel = cancel
	for range c.opts.Threads {
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			for ctx.Err() == nil {
				cleaned, err := c.RunOnce(ctx)
				if err != nil && ctx.Err() == nil {
					c.opts.Logger.Error("log cleaner", "err", err)
				}
				if cleaned {
					continue
				}
				t := time.NewTimer(c.idleWait())
				select {
				case <-ctx.Done():
				case <-t.C:
				}
				t.Stop()
			}
		}()
	}
}

// Stop stops the threads, aborting rounds in progress (their cleaned
// files are discarded; the logs are unchanged), and waits for them.
func (c *Cleaner) Stop() {
	c.mu.Lock()
	cancel := c.cancel
	c.cancel = nil
	c.mu.Unlock()
	if cancel != nil {
		cancel()
		c.wg.Wait()
	}
}

// idleWait is how long a thread that found nothing to clean sleeps:
// Backoff, or less when a log breaches max.compaction.lag.ms sooner.
func (c *Cleaner) idleWait() time.Duration {
	c.mu.Lock()
	due := c.nextDue
	c.mu.Unlock()
	if due.IsZero() {
		return c.opts.Backoff
	}
	return min(max(due.Sub(c.opts.Now()), 0), c.opts.Backoff)
}

// Stats returns the totals so far.
func (c *Cleaner) Stats() CleanerStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := c.stats
	now := c.opts.Now()
	for _, f := range c.failed {
		if now.Before(f.retryAt) {
			st.Uncleanable++
		}
	}
	return st
}

// candidate is a log eligible for cleaning.
type candidate struct {
	tp    local.TopicPartition
	l     *local.Log
	ratio float64
}

// RunOnce cleans the dirtiest eligible log once and reports whether there
// was one.
func (c *Cleaner) RunOnce(ctx context.Context) (bool, error) {
	m := <-c.maps
	defer func() { c.maps <- m }()
	cand := c.grab()
	if cand == nil {
		return false, nil
	}
	defer func() {
		c.mu.Lock()
		delete(c.busy, cand.tp)
		c.mu.Unlock()
	}()
	c.mu.Lock()
	first := c.checkpoint[cand.tp] // a missing entry reads 0: Clean starts at the log start
	c.mu.Unlock()
	var throttle func(context.Context, int) error
	if c.lim != nil {
		throttle = c.lim.Wait
	}
	st, err := Clean(ctx, cand.l, first, Options{Map: m, Now: c.opts.Now, Throttle: throttle})
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stats.Rounds++
	if err != nil {
		c.stats.Errors++
		c.stats.LastError = err
		if ctx.Err() != nil {
			return true, err // stopped: not the log's fault
		}
		retry := c.failLocked(cand.tp)
		return true, fmt.Errorf("clean %s (skipped until %s): %w", cand.tp, retry.Format(time.RFC3339), err)
	}
	delete(c.failed, cand.tp)
	if st.End == st.FirstDirty {
		// Nothing was cleanable after all (an open transaction holds the
		// last stable offset there): wait for the log to move on.
		c.stuck[cand.tp] = cand.l.Offsets().LogEnd
		return true, nil
	}
	delete(c.stuck, cand.tp)
	c.stats.BytesRead += st.BytesRead
	c.stats.BytesWritten += st.BytesWritten
	c.stats.Removed += st.RecordsRemoved
	c.stats.Last, c.stats.LastLog = st, cand.tp.String()
	c.checkpoint[cand.tp] = st.End
	if err := local.WriteOffsetCheckpoint(c.b.Dir(), local.CleanerCheckpoint, c.checkpoint); err != nil {
		return true, err
	}
	c.opts.Logger.Info("cleaned", "partition", cand.tp.String(), "firstDirty", st.FirstDirty, "end", st.End,
		"bytesRead", st.BytesRead, "bytesWritten", st.BytesWritten, "removed", st.RecordsRemoved,
		"keys", st.Keys, "ratio", st.Ratio(), "duration", st.Duration)
	return true, nil
}

// grab picks the dirtiest eligible log no other thread is cleaning and
// marks it busy (nil: none). A log whose dirty segments cannot be read
// is skipped as a failed round's is.
func (c *Cleaner) grab() *candidate {
	now := c.opts.Now()
	var best *candidate
	var nextDue time.Time // the earliest max.compaction.lag.ms breach to come
	defer func() {
		if best != nil {
			return // the thread cleans and passes again at once
		}
		c.mu.Lock()
		c.nextDue = nextDue
		c.mu.Unlock()
	}()
	for _, l := range c.b.Logs() {
		cfg := l.Config()
		if !cfg.Compact() || cfg.RemoteStorageEnable {
			continue // not compacted, or cleaned in the bucket (Clean)
		}
		tp, err := local.ParsePartitionDirName(filepath.Base(l.Dir()))
		if err != nil {
			continue
		}
		c.mu.Lock()
		busy, cp := c.busy[tp], c.checkpoint[tp]
		stuckAt, stuck := c.stuck[tp]
		f, failed := c.failed[tp]
		c.mu.Unlock()
		if busy || (stuck && l.Offsets().LogEnd == stuckAt) || (failed && now.Before(f.retryAt)) {
			continue
		}
		first := firstDirtyOf(l, cp)
		segs := closedSegments(l)
		dirty, err := DirtySegments(l, segs, first, now)
		if err != nil {
			if errors.Is(err, backend.ErrClosed) {
				continue
			}
			// This log only: the others are still cleaned.
			c.mu.Lock()
			c.stats.Errors++
			c.stats.LastError = err
			retry := c.failLocked(tp)
			c.mu.Unlock()
			c.opts.Logger.Error("log cleaner: read a log's dirty segments", "partition", tp.String(), "retry", retry, "err", err)
			continue
		}
		if len(dirty) == 0 {
			continue
		}
		ratio := DirtyRatio(segs, dirty)
		due := false
		if cfg.MaxCompactionLagMs > 0 && cfg.MaxCompactionLagMs < 1<<62 {
			ts, err := l.Segments().LargestTimestamp(dirty[0].BaseOffset)
			due = err == nil && ts >= 0 && ts < now.UnixMilli()-cfg.MaxCompactionLagMs
			if err == nil && ts >= 0 && !due {
				// Due once now - lag > ts.
				if at := time.UnixMilli(ts + cfg.MaxCompactionLagMs + 1); nextDue.IsZero() || at.Before(nextDue) {
					nextDue = at
				}
			}
		}
		if ratio <= cfg.MinCleanableDirtyRatio && !due {
			continue
		}
		if due {
			ratio = 2 // overdue logs go first
		}
		if best == nil || ratio > best.ratio {
			best = &candidate{tp: tp, l: l, ratio: ratio}
		}
	}
	if best != nil {
		c.mu.Lock()
		if c.busy[best.tp] {
			best = nil
		} else {
			c.busy[best.tp] = true
		}
		c.mu.Unlock()
	}
	return best
}
