package local

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math/rand/v2"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/producerstate"
	"github.com/tierlog/tierlog/vfs"
)

// Options open a Log. The zero value opens with Kafka's default config,
// treating the directory as not cleanly shut down (every segment from
// offset 0 is validated).
type Options struct {
	Config backend.Config
	// RecoveryPoint is the offset up to which the log is known durable
	// (from recovery-point-offset-checkpoint); segments from the one
	// holding it onwards are validated on an unclean open.
	RecoveryPoint int64
	// CleanShutdown skips recovery (the log dir had .kafka_cleanshutdown).
	CleanShutdown bool
	// Cleaned says a log cleaner has replaced segments of the log before
	// (the log dir's cleaner-offset-checkpoint names it): its segments may
	// end before the next one's base whatever cleanup.policy says now, and
	// neither a read nor recovery takes that for damage.
	Cleaned bool
	// LogStartOffset and HighWatermark come from the log dir's checkpoints;
	// -1 when unknown.
	LogStartOffset int64
	HighWatermark  int64
	// Now is the clock (default time.Now), for retention and segment.ms.
	Now func() time.Time
	// Logger receives recovery and retention events (default: discard).
	Logger *slog.Logger
	// ReadOnly opens an existing directory without changing a byte of it
	// (for tools pointed at a live broker's files): no recovery, no index
	// rebuilds on disk, no checkpoint writes. A torn tail is not served;
	// every method that writes returns ErrReadOnly.
	ReadOnly bool
	// MaxOpenSegmentFiles bounds how many closed segments keep their .log
	// open at once, descriptor and mapping, and the writer's index
	// mappings (default DefaultMaxOpenSegmentFiles; -1: no bound); the
	// least recently used close first and reopen on their next use. Their
	// read-only indexes, which hold no descriptor, outlive the close under
	// a bound of their own: 64 MiB of memory and 8,192 mappings. A Backend
	// shares the bounds across its logs.
	MaxOpenSegmentFiles int
	budget              *fileBudget // set by a Backend: shared by its logs
	// sched and background are set by a Backend: its scheduler for the
	// log's deadlines, and whether flush.ms and retention run on it (see
	// the package doc, "Background work"). A log opened alone makes a
	// scheduler on first need, for its .deleted files only.
	sched      *scheduler
	background bool
	// truncated, set by a Backend, runs after a TruncateTo that removed
	// records, with no lock of the log held: it writes the checkpoints.
	truncated func() error

	// Metrics receives the log's counters (default: a Metrics of its own;
	// a Backend passes the one its logs share). See Log.Metrics.
	Metrics *Metrics

	// TopicID, when set, is the topic's id (Kafka's base64url UUID) kept
	// in partition.metadata: written when the file is absent, and checked
	// when present (a directory of another topic with the same name is an
	// ErrTopicIDMismatch). Empty leaves the file alone.
	TopicID string

	// FS is the filesystem (default vfs.Default, the operating system's).
	// Tests pass testing/faultfs to inject disk faults.
	FS vfs.FS

	// ProducerState holds the broker settings the producer state follows
	// (producer.id.expiration.ms, transaction.max.timeout.ms,
	// transaction.partition.verification.enable). The zero value is
	// Kafka's defaults but for verification, which is off (a broker that
	// verifies transactions with its coordinator turns it on).
	ProducerState producerstate.Config
}

// ErrTopicIDMismatch means partition.metadata names another topic id than
// the one the log was opened with (the topic was deleted and recreated).
var ErrTopicIDMismatch = errors.New("local: topic id mismatch")

// ErrReadOnly is returned by writes to a Log opened with Options.ReadOnly.
var ErrReadOnly = errors.New("local: log opened read-only")

// DefaultMaxOpenSegmentFiles is the bound on a log's closed segments
// holding open files when it is opened alone (a Backend shares its own
// bound, BackendOptions.MaxOpenSegmentFiles, across its logs). A segment
// counted holds up to a descriptor and three mappings, and the read-only
// indexes kept besides at most 8,192, so the default stays far below
// Linux's vm.max_map_count of 65,530 mappings a process.
const DefaultMaxOpenSegmentFiles = 1024

// Log is one partition on local disk; it implements backend.Partition.
//
// Concurrency (the lock order is in the package doc): one writer at a time
// (Append, TruncateTo, retention, Flush, Close serialize on mu); readers
// never take mu: they load the segment list and the offsets atomically and
// hold a segment reference while reading.
type Log struct {
	dir     string
	segOpts segmentOptions
	now     func() time.Time
	logger  *slog.Logger
	metrics *Metrics

	readOnly  bool
	truncated func() error // Options.truncated
	cfg       atomic.Pointer[backend.Config]
	segs      atomic.Pointer[[]*segFile] // sorted by base; the last takes appends
	// tsMu guards tsDir, the timestamp lookups' directory of the segment
	// list's largest timestamps (timestamps.go). Taken before a
	// segment's mu.
	tsMu          sync.Mutex
	tsDir         *tsDirectory
	logStart      atomic.Int64
	hw            atomic.Int64
	leo           atomic.Int64
	recoveryPoint atomic.Int64
	// rpMu orders a roll's background flush, which raises recoveryPoint
	// to the rolled segment's end, against a truncation, which lowers it
	// (setEndLocked): a raise after a truncation would claim records
	// appended since the truncation are durable.
	rpMu        sync.Mutex
	rpLowered   int64 // guarded by rpMu: truncations that lowered the point
	closed      atomic.Bool
	truncations atomic.Int64 // TruncateTo calls that removed records
	// remoteStart is the partition's log start when offsets below the
	// local log live elsewhere (in a bucket); -1 when the local log start
	// is the partition's. See RemoteLogStart.
	remoteStart atomic.Int64
	// failed is set when a write could not be completed or undone, or an
	// fsync failed: the page cache may have dropped written bytes, so the
	// log refuses writes until it is reopened (and recovered).
	failed atomic.Pointer[error]

	// lso is the last stable offset (see backend.Offsets).
	lso atomic.Int64

	changeMu sync.Mutex
	changeCh chan struct{} // closed at the next change of the offsets; nil until asked for

	mu sync.Mutex // the writer lock; guards the fields below
	// act is the writable last segment; nil until the first write after a
	// clean open (see activeForWriteLocked).
	act *activeSegment
	// ps is the producer state (producers.go); plan is reused by every
	// append, snapBuf by every snapshot.
	ps      *producerstate.State
	plan    producerstate.Plan
	snapBuf []byte
	// snapChanges counts the snapshot files written and removed, so a
	// listing of the directory taken while the log opens stands for its
	// snapshots only while no write or removal came after it.
	snapChanges int64
	// rebuilt lists the segments recovery rewrote while the log opens (the
	// producer state's replay writes their .txnindex again).
	rebuilt map[int64]bool
	dirty   bool // something was written since the last flush
	// newDir is set while the partition directory's own entry (Open
	// created it) is not yet durable: the next flush syncs its parent.
	newDir    bool
	epochs    epochCache
	role      logRole // what the latest BecomeLeader or BecomeFollower said
	leadEpoch int32   // the epoch the log leads at, when role is leading
	unflushed int64   // records appended since the last flush
	lastFlush time.Time
	pending   []*pendingDelete // retired segments' files, oldest first
	dl        logDeadlines     // the log's timed work (deadlines.go)
	bg        sync.WaitGroup   // background flushes after rolls

	flushErrMu sync.Mutex
	flushErr   error // first error of a background flush
}

// pendingDelete is a retired segment's .deleted files, removed once
// file.delete.delay.ms has passed since retired.
type pendingDelete struct {
	paths   []string
	retired time.Time
}

var _ backend.Partition = (*Log)(nil)

// Open opens (creating when needed) the partition log in dir, resolving
// files left by an interrupted operation and, unless opts.CleanShutdown,
// validating every batch from the recovery point and truncating a torn or
// corrupt tail.
func Open(dir string, opts Options) (_ *Log, err error) {
	if opts.Config.SegmentBytes == 0 {
		opts.Config = backend.DefaultConfig()
	}
	if err := opts.Config.Validate(); err != nil {
		return nil, err
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Metrics == nil {
		opts.Metrics = new(Metrics)
	}
	if opts.FS == nil {
		opts.FS = vfs.Default
	}
	if opts.ProducerState == (producerstate.Config{}) {
		opts.ProducerState = producerstate.DefaultConfig()
		opts.ProducerState.TransactionVerification = false
	}
	ps, err := producerstate.New(opts.ProducerState)
	if err != nil {
		return nil, err
	}
	if opts.ReadOnly {
		if st, err := opts.FS.Stat(dir); err != nil || !st.IsDir() {
			return nil, fmt.Errorf("%w: partition directory %s", backend.ErrNotFound, dir)
		}
	}
	newDir := false
	if !opts.ReadOnly {
		if _, err := opts.FS.Stat(dir); errors.Is(err, fs.ErrNotExist) {
			newDir = true
		}
		if err := opts.FS.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("local: create %s: %w", dir, err)
		}
	}
	l := &Log{readOnly: opts.ReadOnly, truncated: opts.truncated, dir: dir, now: opts.Now, ps: ps, logger: opts.Logger.With("dir", dir), metrics: opts.Metrics, newDir: newDir,
		segOpts: segmentOptions{fs: &entryFS{FS: opts.FS, dir: dir}, dir: dir, maxIndexBytes: int(opts.Config.SegmentIndexBytes),
			intervalBytes: opts.Config.IndexIntervalBytes, budget: opts.budget, logger: opts.Logger.With("dir", dir)},
	}
	l.storeConfig(opts.Config)
	l.segOpts.cleaned.Store(opts.Cleaned)
	l.remoteStart.Store(-1)
	l.dl.sched, l.dl.background = opts.sched, opts.background
	if l.segOpts.budget == nil {
		max := opts.MaxOpenSegmentFiles
		if max == 0 {
			max = DefaultMaxOpenSegmentFiles
		}
		l.segOpts.budget = newFileBudget(max)
	}
	l.lastFlush = l.now()
	defer func() {
		if err != nil {
			l.closeSegments()
		}
	}()
	if err := l.load(opts); err != nil {
		return nil, err
	}
	l.startDeadlines()
	return l, nil
}

// Dir returns the partition directory.
func (l *Log) Dir() string { return l.dir }

// Config returns the log's config.
func (l *Log) Config() backend.Config { return *l.cfg.Load() }

// GapsAllowed says whether the log's closed segments may hold gaps in
// their offsets (a batch's next offset below the next batch's base, a
// segment ending before the next one's base): it is compacted, or a log
// cleaner has replaced segments of it before (Options.Cleaned), whatever
// cleanup.policy says now.
func (l *Log) GapsAllowed() bool { return l.segOpts.gapsAllowed() }

// ReadOnly says whether the log was opened with Options.ReadOnly.
func (sg Segments) ReadOnly() bool { return sg.l.readOnly }

func (l *Log) storeConfig(c backend.Config) {
	l.cfg.Store(&c)
	l.segOpts.compact.Store(c.Compact())
}

// SetConfig applies a topic config change to the open log, as Kafka
// applies a topic's new config to its open log: retention, flush and roll
// settings apply from the next append or retention pass (the flush.ms,
// retention.ms and file.delete.delay.ms deadlines are rescheduled at
// once); segment.bytes, segment.index.bytes and index.interval.bytes from
// the next segment.
func (l *Log) SetConfig(c backend.Config) error {
	if err := c.Validate(); err != nil {
		return err
	}
	if err := l.checkWritable(); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	old := l.cfg.Load()
	if old.RemoteStorageEnable && !c.RemoteStorageEnable {
		// Its old offsets may live only in a bucket, and its local
		// retention is the tiered layer's: Kafka refuses this too.
		return &backend.ConfigError{Key: "remote.storage.enable", Value: "false", Reason: "a tiered log cannot stop being tiered (" + l.dir + ")"}
	}
	if old.DisklessEnable != c.DisklessEnable {
		// A diskless log's recent offsets are durable only in WAL
		// objects; a classic one's only on this disk (KIP-1150 fixes it
		// at creation too).
		return &backend.ConfigError{Key: "diskless.enable", Value: strconv.FormatBool(c.DisklessEnable), Reason: "a topic is diskless or not from its creation (" + l.dir + ")"}
	}
	l.storeConfig(c)
	// New segments only: an active segment keeps the index size and
	// interval it was created with (its files are sized already).
	l.segOpts.maxIndexBytes, l.segOpts.intervalBytes = int(c.SegmentIndexBytes), c.IndexIntervalBytes
	l.configChangedLocked(old, &c)
	return nil
}

func (l *Log) segments() []*segFile { return *l.segs.Load() }

// setSegments publishes a new segment list, its capacity cut to its
// length: a roll appends in place (publishSegments), and a list that lost
// segments from its end would otherwise let that append write over a slot
// an older list, still in a reader's hands, shows.
// REQUIRES: l.mu held, or the log not yet shared.
func (l *Log) setSegments(s []*segFile) { l.publishSegments(slices.Clip(s)) }

// publishSegments publishes s as it is. A roll passes the current list
// with one segment appended in place. That is safe: no list a reader may
// hold extends past the current one's end on the same array (setSegments
// leaves a list no spare capacity, and a roll's lists only grow), so the
// slot the append writes is in no reader's list. A roll then copies
// nothing, where a log of 100,000 segments copied 800 KB a roll.
// REQUIRES: l.mu held, or the log not yet shared.
func (l *Log) publishSegments(s []*segFile) {
	l.segs.Store(&s)
	l.segmentsChangedLocked(s)
}

// segmentWithBase returns the index in segs of the segment whose base is
// base, or -1 (segs is sorted by base).
func segmentWithBase(segs []*segFile, base int64) int {
	i, found := slices.BinarySearchFunc(segs, base, func(s *segFile, base int64) int { return cmp.Compare(s.base, base) })
	if !found {
		return -1
	}
	return i
}

// jitter draws Kafka's per-segment roll jitter.
func (l *Log) jitter() int64 {
	cfg := l.cfg.Load()
	if cfg.SegmentJitterMs <= 0 {
		return 0
	}
	return rand.Int64N(min(cfg.SegmentJitterMs, cfg.SegmentMs))
}

// Offsets returns the partition's offsets.
func (l *Log) Offsets() backend.Offsets {
	ls := l.logStart.Load()
	return backend.Offsets{LogStart: ls, LocalLogStart: ls, HighWatermark: l.hw.Load(), LastStableOffset: l.lso.Load(), LogEnd: l.leo.Load(),
		TieredEnd: -1} // a local log has no bucket; a tiered partition sets its own
}

// Changed returns a channel closed the next time the log end, the high
// watermark or the last stable offset moves, or the log closes; see
// backend.Partition.
func (l *Log) Changed() <-chan struct{} {
	l.changeMu.Lock()
	defer l.changeMu.Unlock()
	if l.changeCh == nil {
		l.changeCh = make(chan struct{})
		if l.closed.Load() {
			close(l.changeCh)
			ch := l.changeCh
			l.changeCh = nil
			return ch
		}
	}
	return l.changeCh
}

// notifyChanged wakes what waits on Changed, and re-arms the deadlines a
// change can bring (a flush for what was appended). It is called with l.mu
// held or the log not yet shared (from publishLSO), or by Close once the
// log is closed.
func (l *Log) notifyChanged() {
	if !l.closed.Load() {
		l.offsetsChangedLocked()
	}
	l.wakeWaiters()
}

// NotifyChanged wakes what waits on Changed. A wrapper whose Offsets add
// one of its own (a tiered partition's TieredEnd) calls it when that moves.
func (sg Segments) NotifyChanged() { sg.l.wakeWaiters() }

// wakeWaiters closes the channel Changed returned, if any.
func (l *Log) wakeWaiters() {
	l.changeMu.Lock()
	if l.changeCh != nil {
		close(l.changeCh)
		l.changeCh = nil
	}
	l.changeMu.Unlock()
}

// RemoteLogStart returns the partition's log start when offsets below the
// local log live elsewhere (a tiered partition's bucket), as the log was
// opened with (log-start-offset-checkpoint holds the partition's log
// start) or as SetRemoteLogStart last set it; ok is false when the local
// log start is the partition's.
func (sg Segments) RemoteLogStart() (offset int64, ok bool) {
	l := sg.l
	v := l.remoteStart.Load()
	return v, v >= 0
}

// SetRemoteLogStart records the partition's log start when offsets below
// the local log live elsewhere (-1: none). A Backend writes it into
// log-start-offset-checkpoint in place of the local log start, so a reopen
// knows the partition begins below its local files.
func (sg Segments) SetRemoteLogStart(offset int64) { sg.l.remoteStart.Store(max(offset, -1)) }

// checkpointLogStart is what log-start-offset-checkpoint records: the
// partition's log start.
func (l *Log) checkpointLogStart() int64 {
	ls := l.logStart.Load()
	if rs := l.remoteStart.Load(); rs >= 0 && rs < ls {
		return rs
	}
	return ls
}

// RecoveryPoint returns the offset below which every byte is durable.
func (l *Log) RecoveryPoint() int64 { return l.recoveryPoint.Load() }

// SetHighWatermark records the broker's high watermark, clamped to
// [LogStart, LogEnd].
func (l *Log) SetHighWatermark(hw int64) error {
	if err := l.checkWritable(); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	hw = min(max(hw, l.logStart.Load()), l.leo.Load())
	if hw == l.hw.Load() {
		return nil // nothing moved: Changed does not fire
	}
	l.hw.Store(hw)
	l.ps.SetHighWatermark(hw)
	l.publishLSO()
	return nil
}

func (l *Log) closedErr() error { return fmt.Errorf("%w: %s", backend.ErrClosed, l.dir) }

// checkWritable returns why the log cannot be written, if it cannot:
// ErrClosed, ErrReadOnly, or the storage error that failed it.
func (l *Log) checkWritable() error {
	if l.closed.Load() {
		return l.closedErr()
	}
	if l.readOnly {
		return fmt.Errorf("%w: %s", ErrReadOnly, l.dir)
	}
	if p := l.failed.Load(); p != nil {
		return *p
	}
	return nil
}

// fail marks the log failed by cause (an fsync error, or a write that
// could not be undone) and returns the error every write returns from now
// on: backend.ErrStorage, wrapping cause.
func (l *Log) fail(cause error) error {
	err := fmt.Errorf("%w: %s refuses writes until it is reopened: %w", backend.ErrStorage, l.dir, cause)
	if l.failed.CompareAndSwap(nil, &err) {
		l.logger.Error("log failed: writes refused until it is reopened", "err", cause)
		return err
	}
	return *l.failed.Load()
}

// SegmentInfo describes a segment, for tools and the layers above.
type SegmentInfo struct {
	BaseOffset int64
	// NextOffset is the next segment's base offset, or the log end for the
	// last segment: the segment holds offsets below it.
	NextOffset int64
	Size       int64
	Active     bool   // the last segment, the one appends go to
	Path       string // the .log, for display: read segments through OpenSegment
}

// SegmentInfos lists the segments.
func (l *Log) SegmentInfos() []SegmentInfo {
	segs := l.segments()
	out := make([]SegmentInfo, len(segs))
	leo := l.leo.Load()
	for i, s := range segs {
		next := leo
		if i+1 < len(segs) {
			next = segs[i+1].base
		}
		out[i] = SegmentInfo{BaseOffset: s.base, NextOffset: next, Size: s.size.Load(), Active: i == len(segs)-1, Path: s.logPath}
	}
	return out
}

// acquireSegmentFor returns the segment holding offset (the last with base
// <= offset), with a reader reference, and its index in the list. It fails
// with ErrClosed once the log is closed (its segments can no longer be
// acquired), and with an OffsetOutOfRangeError once the log start passed
// offset.
func (l *Log) acquireSegmentFor(offset int64) (*segFile, []*segFile, int, error) {
	for {
		if l.closed.Load() {
			return nil, nil, 0, l.closedErr()
		}
		segs := l.segments()
		i := sort.Search(len(segs), func(i int) bool { return segs[i].base > offset }) - 1
		if i < 0 {
			i = 0
		}
		if segs[i].acquire() {
			// Retention raises the log start before it drops segments: a
			// list without the segment holding offset (offset below its
			// first segment) comes with a log start above offset. The
			// caller checked the log start before; it may have moved.
			if ls := l.logStart.Load(); offset < ls {
				segs[i].release()
				return nil, nil, 0, &backend.OffsetOutOfRangeError{Offset: offset, LogStart: ls, LogEnd: l.leo.Load()}
			}
			return segs[i], segs, i, nil
		}
		runtime.Gosched() // a writer is swapping the segment list
	}
}

// Close flushes, writes the final time index entry of the active segment,
// trims its indexes, removes files awaiting deletion and releases the
// segments (their files close when the last reader is done).
func (l *Log) Close() error {
	if l.closed.Swap(true) {
		return nil
	}
	defer l.notifyChanged()
	if l.readOnly {
		l.closeSegments()
		return nil
	}
	l.stopDeadlines()
	defer l.closeDeadlines()
	l.mu.Lock()
	defer l.mu.Unlock()
	var err error
	if l.failed.Load() == nil {
		// The producer state at the log end, so the next open loads it
		// instead of replaying (durable with the flush's directory sync;
		// one lost to a crash is only a longer replay).
		l.ps.SetEndOffset(l.leo.Load())
		wrote, serr := l.writeSnapshot(false)
		if serr != nil {
			l.logger.Warn("could not write the producer snapshot at close", "err", serr)
		}
		l.dirty = l.dirty || wrote
		err = l.flushLocked()
	}
	l.bg.Wait()
	if ferr := l.takeFlushErr(); err == nil {
		err = ferr
	}
	if l.act != nil {
		if aerr := l.act.close(); err == nil {
			err = aerr
		}
		l.act = nil
	}
	for _, p := range l.pending {
		l.removeAll(p.paths) // no longer needed by anyone
	}
	l.pending = nil
	l.closeSegments()
	if f := l.failed.Load(); f != nil && err == nil {
		err = *f
	}
	return err
}

func (l *Log) closeSegments() {
	if p := l.segs.Load(); p != nil {
		for _, s := range *p {
			s.release()
		}
	}
	if l.act != nil {
		l.act.closeFiles()
		l.act = nil
	}
}

// checkCtx returns ctx's error, wrapped.
func checkCtx(ctx context.Context) error {
	if ctx == nil {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("local: %w", err)
	}
	return nil
}
