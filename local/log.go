package local

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/record"
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
	// MaxOpenSegmentFiles bounds how many closed segments keep their files
	// open at once (0: no bound); the least recently used close first and
	// reopen on their next use. A Backend shares one bound across its logs.
	MaxOpenSegmentFiles int
	budget              *fileBudget // set by a Backend: shared by its logs

	// Metrics receives the log's counters (default: a Metrics of its own;
	// a Backend passes the one its logs share). See Log.Metrics.
	Metrics *Metrics

	// TopicID, when set, is the topic's id (Kafka's base64url UUID) kept
	// in partition.metadata: written when the file is absent, and checked
	// when present (a directory of another topic with the same name is an
	// ErrTopicIDMismatch). Empty leaves the file alone.
	TopicID string
}

// ErrTopicIDMismatch means partition.metadata names another topic id than
// the one the log was opened with (the topic was deleted and recreated).
var ErrTopicIDMismatch = errors.New("local: topic id mismatch")

// ErrReadOnly is returned by writes to a Log opened with Options.ReadOnly.
var ErrReadOnly = errors.New("local: log opened read-only")

// Log is one partition on local disk; it implements backend.Partition.
//
// Concurrency: one writer at a time (Append, TruncateTo, retention, Flush,
// Close serialize on mu); readers never take mu: they load the segment
// list and offsets atomically and hold a segment reference while reading.
type Log struct {
	dir     string
	cfg     backend.Config
	segOpts segmentOptions
	now     func() time.Time
	logger  *slog.Logger
	metrics *Metrics

	readOnly      bool
	segs          atomic.Pointer[[]*segment] // sorted by base; last is active
	logStart      atomic.Int64
	hw            atomic.Int64
	leo           atomic.Int64
	recoveryPoint atomic.Int64
	closed        atomic.Bool
	truncations   atomic.Int64 // TruncateTo calls that removed records

	mu         sync.Mutex // the writer lock; guards the fields below
	dirty      bool       // something was written since the last flush
	epochs     []EpochEntry
	unflushed  int64 // records appended since the last flush
	lastFlush  time.Time
	pending    []*pendingDelete
	bg         sync.WaitGroup // background flushes after rolls
	flushErr   error          // first error of a background flush
	flushErrMu sync.Mutex
}

type pendingDelete struct {
	paths []string
	timer *time.Timer
	done  atomic.Bool
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
	if opts.ReadOnly {
		if st, err := os.Stat(dir); err != nil || !st.IsDir() {
			return nil, fmt.Errorf("%w: partition directory %s", backend.ErrNotFound, dir)
		}
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("local: create %s: %w", dir, err)
	}
	l := &Log{readOnly: opts.ReadOnly,
		dir: dir, cfg: opts.Config, now: opts.Now, logger: opts.Logger.With("dir", dir), metrics: opts.Metrics,
		segOpts: segmentOptions{maxIndexBytes: int(opts.Config.SegmentIndexBytes), intervalBytes: opts.Config.IndexIntervalBytes,
			budget: opts.budget},
	}
	if l.segOpts.budget == nil {
		l.segOpts.budget = newFileBudget(opts.MaxOpenSegmentFiles)
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
	return l, nil
}

// Dir returns the partition directory.
func (l *Log) Dir() string { return l.dir }

// Config returns the log's config.
func (l *Log) Config() backend.Config { return l.cfg }

func (l *Log) segments() []*segment { return *l.segs.Load() }

func (l *Log) setSegments(s []*segment) { l.segs.Store(&s) }

func (l *Log) active() *segment {
	s := l.segments()
	return s[len(s)-1]
}

// jitter draws Kafka's per-segment roll jitter.
func (l *Log) jitter() int64 {
	if l.cfg.SegmentJitterMs <= 0 {
		return 0
	}
	return rand.Int64N(min(l.cfg.SegmentJitterMs, l.cfg.SegmentMs))
}

// load resolves leftover files, opens the segments and recovers them.
func (l *Log) load(opts Options) error {
	if l.readOnly {
		return l.loadReadOnly(opts)
	}
	if err := l.removeTempFilesAndSwap(); err != nil {
		return err
	}
	ents, err := os.ReadDir(l.dir)
	if err != nil {
		return fmt.Errorf("local: read %s: %w", l.dir, err)
	}
	type files struct{ log, idx, tidx bool }
	found := map[int64]*files{}
	for _, e := range ents {
		if e.IsDir() {
			continue
		}
		base, suffix, err := ParseFileName(e.Name())
		if err != nil {
			continue
		}
		f := found[base]
		if f == nil {
			f = &files{}
			found[base] = f
		}
		switch suffix {
		case LogSuffix:
			f.log = true
		case IndexSuffix:
			f.idx = true
		case TimeIndexSuffix:
			f.tidx = true
		}
	}
	var segs []*segment
	for base, f := range found {
		if !f.log {
			// Orphan index files: Kafka deletes them.
			for _, suf := range []string{IndexSuffix, TimeIndexSuffix, TxnIndexSuffix} {
				if err := os.Remove(filepath.Join(l.dir, FileName(base, suf))); err != nil && !errors.Is(err, fs.ErrNotExist) {
					return fmt.Errorf("local: remove orphan index: %w", err)
				}
			}
			l.logger.Info("removed index files without a log", "base", base)
			continue
		}
		st, err := os.Stat(filepath.Join(l.dir, FileName(base, LogSuffix)))
		if err != nil {
			return fmt.Errorf("local: %w", err)
		}
		s := newSegment(l.dir, base, st.Size(), &l.segOpts, st.ModTime())
		segs = append(segs, s)
		if !f.idx || !f.tidx {
			// Rebuilt lazily when first needed, or below when recovering.
			l.logger.Info("segment index missing; it will be rebuilt", "base", base)
		}
	}
	sort.Slice(segs, func(i, j int) bool { return segs[i].base < segs[j].base })
	logStart := max(opts.LogStartOffset, 0)
	if len(segs) == 0 {
		s, err := createSegment(l.dir, logStart, &l.segOpts, l.now(), l.jitter())
		if err != nil {
			return err
		}
		l.setSegments([]*segment{s})
		l.leo.Store(logStart)
	} else {
		l.setSegments(segs)
		if err := l.recover(opts); err != nil {
			return err
		}
	}
	segs = l.segments()
	for _, s := range segs[:len(segs)-1] {
		s.sealed = true // not shared yet: no lock needed
	}
	leo := l.leo.Load()
	logStart = max(logStart, segs[0].base)
	if logStart > leo {
		logStart = leo
	}
	l.logStart.Store(logStart)
	hw := opts.HighWatermark
	if hw < logStart {
		hw = logStart
	}
	l.hw.Store(min(hw, leo))
	l.recoveryPoint.Store(leo)
	if err := l.checkTopicID(opts.TopicID); err != nil {
		return err
	}
	return l.loadEpochs()
}

// checkTopicID keeps partition.metadata as Kafka does.
func (l *Log) checkTopicID(id string) error {
	if id == "" {
		return nil
	}
	have, err := ReadPartitionMetadata(filepath.Join(l.dir, PartitionMetadataFile))
	if err != nil {
		return err
	}
	if have == "" {
		return WritePartitionMetadata(l.dir, id)
	}
	if have != id {
		return fmt.Errorf("%w: %s holds topic id %s, opened as %s", ErrTopicIDMismatch, l.dir, have, id)
	}
	return nil
}

// removeTempFilesAndSwap is Kafka's removeTempFilesAndCollectSwapFiles plus
// the swap completion: *.deleted and checkpoint *.tmp files go; *.cleaned
// files go, and with them any *.swap at or above the lowest cleaned offset
// (an interrupted cleaning); the remaining *.swap files replace the
// segments they cover.
func (l *Log) removeTempFilesAndSwap() error {
	ents, err := os.ReadDir(l.dir)
	if err != nil {
		return fmt.Errorf("local: read %s: %w", l.dir, err)
	}
	rm := func(name string) error {
		if err := os.Remove(filepath.Join(l.dir, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("local: remove %s: %w", name, err)
		}
		return nil
	}
	minCleaned := int64(-1)
	var swaps []string
	for _, e := range ents {
		name := e.Name()
		switch {
		case strings.HasSuffix(name, DeletedSuffix), strings.HasSuffix(name, ".tmp"):
			if err := rm(name); err != nil {
				return err
			}
		case strings.HasSuffix(name, CleanedSuffix):
			if base, _, err := ParseFileName(name); err == nil && (minCleaned < 0 || base < minCleaned) {
				minCleaned = base
			}
			if err := rm(name); err != nil {
				return err
			}
		case strings.HasSuffix(name, SwapSuffix):
			swaps = append(swaps, name)
		}
	}
	var keep []string
	for _, name := range swaps {
		base, _, err := ParseFileName(name)
		if err != nil {
			continue
		}
		if minCleaned >= 0 && base >= minCleaned {
			if err := rm(name); err != nil {
				return err
			}
			continue
		}
		keep = append(keep, name)
	}
	// A .log.swap replaces every segment whose base lies in [swap base,
	// swap next offset).
	for _, name := range keep {
		if !strings.HasSuffix(name, LogSuffix+SwapSuffix) {
			continue
		}
		base, _, _ := ParseFileName(name)
		next, err := nextOffsetOfFile(filepath.Join(l.dir, name), base)
		if err != nil {
			return err
		}
		for _, e := range ents {
			b, suf, err := ParseFileName(e.Name())
			if err != nil || b < base || b >= next {
				continue
			}
			if suf == LogSuffix || suf == IndexSuffix || suf == TimeIndexSuffix || suf == TxnIndexSuffix {
				if err := rm(e.Name()); err != nil {
					return err
				}
			}
		}
	}
	for _, name := range keep {
		if err := os.Rename(filepath.Join(l.dir, name), filepath.Join(l.dir, strings.TrimSuffix(name, SwapSuffix))); err != nil {
			return fmt.Errorf("local: complete swap of %s: %w", name, err)
		}
		l.logger.Info("completed an interrupted segment swap", "file", name)
	}
	if len(keep) > 0 {
		return syncDir(l.dir)
	}
	return nil
}

// nextOffsetOfFile scans a .log file's headers for one past its last offset.
func nextOffsetOfFile(path string, base int64) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, fmt.Errorf("local: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return 0, err
	}
	next := base
	sc := record.NewScanner(f, 0, st.Size(), record.ScanOptions{HeadersOnly: true})
	for sc.Next() {
		next = sc.Entry().LastOffset + 1
	}
	return next, nil
}

// recover validates segments from the recovery point (unless the shutdown
// was clean) and prepares the last segment for appends.
func (l *Log) recover(opts Options) error {
	segs := l.segments()
	last := len(segs) - 1
	if !opts.CleanShutdown {
		rp := max(opts.RecoveryPoint, 0)
		from := 0
		for i, s := range segs {
			if s.base <= rp {
				from = i
			}
		}
		for i := from; i <= last; i++ {
			s := segs[i]
			s.mu.Lock()
			res, err := s.rebuildLocked(i == last)
			s.mu.Unlock()
			if err != nil {
				return err
			}
			if res.truncated > 0 {
				l.logger.Warn("truncated a torn or corrupt segment tail", "base", s.base, "bytes", res.truncated, "cause", res.corruption)
			}
			if res.truncated > 0 && i < last {
				// Everything after a damaged segment is unreliable:
				// Kafka deletes it.
				for _, later := range segs[i+1:] {
					if _, err := later.renameDeleted(); err != nil {
						return err
					}
					later.release()
					l.removeDeletedFiles(later)
				}
				segs = segs[:i+1]
				l.setSegments(segs)
				s.mu.Lock()
				err := s.activateLocked()
				s.mu.Unlock()
				if err != nil {
					return err
				}
				last = i
			}
			if i == last {
				// As a reloaded Kafka segment: the byte counter of the
				// index rule starts at zero.
				s.mu.Lock()
				s.ix.Restore(0, res.maxTs, res.offsetOfMaxTs)
				s.mu.Unlock()
				l.leo.Store(res.nextOffset)
				l.setRollingTs(s)
				return nil
			}
		}
	}
	// Clean shutdown: find the log end from the last segment's index. Its
	// indexes are made writable (expanded to segment.index.bytes) on the
	// first append, not here: most of a broker's partitions are idle at
	// start, and the expansion costs a few hundred microseconds each.
	s := segs[last]
	next, firstTs, whole, err := l.scanTail(s)
	if err != nil {
		return err
	}
	if !whole {
		// Marked clean, yet the last segment does not end on a whole
		// batch: recover it rather than append after garbage.
		l.logger.Warn("the last segment of a cleanly shut down log has a damaged tail; recovering it", "base", s.base)
		s.mu.Lock()
		res, err := s.rebuildLocked(true)
		if err == nil {
			s.ix.Restore(0, res.maxTs, res.offsetOfMaxTs)
		}
		s.mu.Unlock()
		if err != nil {
			return err
		}
		l.leo.Store(res.nextOffset)
		l.setRollingTs(s)
		return nil
	}
	l.leo.Store(next)
	if firstTs == -2 {
		l.setRollingTs(s)
	} else {
		s.mu.Lock()
		s.rollingBasedTs, s.jitterMs = firstTs, l.jitter()
		s.mu.Unlock()
	}
	return nil
}

// activeForWrite returns the last segment, made writable if this is the
// first write since the log was opened. REQUIRES: l.mu held.
func (l *Log) activeForWrite() (*segment, error) {
	s := l.active()
	s.mu.Lock()
	active := s.active
	s.mu.Unlock()
	if active {
		return s, nil
	}
	// The largest timestamp so far: the time index's last entry (its roll
	// entry, written at the last clean close).
	ts, err := s.largestTimestamp()
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	off := s.offsetOfMaxTs
	if ts < 0 {
		ts, off = -1, -1
	}
	if err := s.activateLocked(); err != nil {
		return nil, err
	}
	s.ix.Restore(0, ts, off)
	return s, nil
}

// scanTail reads the active segment's batch headers after its last index
// entry: the log end offset and the largest timestamp (with the time
// index's last entry), as Kafka's readNextOffset and loadLargestTimestamp.
func (l *Log) scanTail(s *segment) (next, firstTs int64, whole bool, err error) {
	oi, err := s.offsetIndex()
	if err != nil {
		return 0, 0, false, err
	}
	start := int64(oi.LastEntry().Position)
	size := s.size.Load()
	next, firstTs = s.base, -1
	end := start
	err = s.walkHeaders(start, size, func(e *record.Entry) bool {
		if e.Position == 0 && e.Magic == 2 {
			firstTs = e.MaxTimestamp
		}
		next = e.LastOffset + 1
		end = e.Position + e.Size
		return true
	})
	if err != nil && !errors.Is(err, backend.ErrCorruptRecord) {
		return 0, 0, false, err
	}
	if start > 0 {
		firstTs = -2 // not seen: read the first header
	}
	return next, firstTs, err == nil && end == size, nil
}

// setRollingTs loads the first batch's max timestamp, the segment.ms clock.
func (l *Log) setRollingTs(s *segment) {
	ts := int64(-1)
	if s.size.Load() > 0 {
		hdr := make([]byte, record.BatchHeaderSize)
		if s.size.Load() >= record.BatchHeaderSize && s.readAt(hdr, 0) == nil && hdr[16] == 2 {
			ts = record.Batch(hdr).MaxTimestamp()
		}
	}
	s.mu.Lock()
	s.rollingBasedTs = ts
	s.jitterMs = l.jitter()
	s.mu.Unlock()
}

// loadEpochs reads leader-epoch-checkpoint, or rebuilds the cache from the
// batches when the file is missing or damaged, then fits it to the log.
func (l *Log) loadEpochs() error {
	path := filepath.Join(l.dir, LeaderEpochCheckpoint)
	epochs, exists, err := readLeaderEpochFile(path)
	rebuilt := false
	if err != nil {
		l.logger.Warn("leader epoch checkpoint unreadable; rebuilding it from the log", "err", err)
		rebuilt = true
	} else if !exists {
		rebuilt = true // missing: rebuild once and write it, so the next open need not scan
	}
	if rebuilt {
		if epochs, err = l.scanEpochs(); err != nil {
			return err
		}
	}
	l.epochs = fitEpochs(epochs, l.logStart.Load(), l.leo.Load())
	if !rebuilt && slices.Equal(l.epochs, epochs) {
		return nil // unchanged: no write (and no fsync) on the open path
	}
	return WriteLeaderEpochCheckpoint(l.dir, l.epochs)
}

// scanEpochs reads every v2 batch header for its leader epoch.
func (l *Log) scanEpochs() ([]EpochEntry, error) {
	var out []EpochEntry
	for _, s := range l.segments() {
		f, err := s.file()
		if err != nil {
			return nil, err
		}
		sc := record.NewScanner(f, 0, s.size.Load(), record.ScanOptions{HeadersOnly: true})
		for sc.Next() {
			e := sc.Entry()
			if e.Magic != 2 {
				continue
			}
			pe := e.Batch().PartitionLeaderEpoch()
			if pe >= 0 && (len(out) == 0 || pe > out[len(out)-1].Epoch) {
				out = append(out, EpochEntry{Epoch: pe, StartOffset: e.BaseOffset})
			}
		}
	}
	return out, nil
}

// fitEpochs drops entries at or past leo and clamps the first entry to
// logStart (Kafka's truncateFromEnd / truncateFromStart).
func fitEpochs(epochs []EpochEntry, logStart, leo int64) []EpochEntry {
	var out []EpochEntry
	for _, e := range epochs {
		if e.StartOffset >= leo && len(out) > 0 {
			break
		}
		if e.StartOffset >= leo {
			break
		}
		out = append(out, e)
	}
	// Keep the last entry starting at or below logStart, moved to logStart.
	first := 0
	for i, e := range out {
		if e.StartOffset <= logStart {
			first = i
		}
	}
	out = append([]EpochEntry(nil), out[first:]...)
	if len(out) > 0 && out[0].StartOffset < logStart {
		out[0].StartOffset = logStart
	}
	return out
}

// LeaderEpochs returns a copy of the leader epoch cache.
func (l *Log) LeaderEpochs() []EpochEntry {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]EpochEntry(nil), l.epochs...)
}

// EndOffsetForEpoch answers OffsetForLeaderEpoch: the largest epoch <=
// epoch, and the start offset of the epoch after it (or the log end). found
// is false when epoch is below every cached epoch.
func (l *Log) EndOffsetForEpoch(epoch int32) (foundEpoch int32, endOffset int64, found bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := len(l.epochs) - 1; i >= 0; i-- {
		if l.epochs[i].Epoch <= epoch {
			end := l.leo.Load()
			if i+1 < len(l.epochs) {
				end = l.epochs[i+1].StartOffset
			}
			return l.epochs[i].Epoch, end, true
		}
	}
	return -1, -1, false
}

// Offsets returns the partition's offsets.
func (l *Log) Offsets() backend.Offsets {
	ls := l.logStart.Load()
	return backend.Offsets{LogStart: ls, LocalLogStart: ls, HighWatermark: l.hw.Load(), LogEnd: l.leo.Load()}
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
	l.hw.Store(min(max(hw, l.logStart.Load()), l.leo.Load()))
	return nil
}

func (l *Log) closedErr() error { return fmt.Errorf("%w: %s", backend.ErrClosed, l.dir) }

// SegmentInfo describes a segment, for tools and the tiered layer.
type SegmentInfo struct {
	BaseOffset int64
	// NextOffset is the next segment's base offset, or the log end for the
	// last segment: the segment holds offsets below it.
	NextOffset int64
	Size       int64
	Active     bool   // the last segment, the one appends go to
	Path       string // the .log
	// IndexPath and TimeIndexPath are the segment's index files; a closed
	// segment's are trimmed to their entries.
	IndexPath, TimeIndexPath string
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
		out[i] = SegmentInfo{BaseOffset: s.base, NextOffset: next, Size: s.size.Load(), Active: i == len(segs)-1,
			Path: s.path(LogSuffix), IndexPath: s.path(IndexSuffix), TimeIndexPath: s.path(TimeIndexSuffix)}
	}
	return out
}

// acquireSegmentFor returns the segment holding offset (the last with base
// <= offset), with a reader reference, and its index in the list. It fails
// with ErrClosed once the log is closed (its segments can no longer be
// acquired).
func (l *Log) acquireSegmentFor(offset int64) (*segment, []*segment, int, error) {
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
			return segs[i], segs, i, nil
		}
		runtime.Gosched() // a writer is swapping the segment list
	}
}

// Flush makes every appended byte durable and advances the recovery point.
func (l *Log) Flush() error {
	if err := l.checkWritable(); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.flushLocked()
}

// flushLocked fsyncs the segments at or after the recovery point.
// REQUIRES: l.mu held.
func (l *Log) flushLocked() error {
	leo := l.leo.Load()
	rp := l.recoveryPoint.Load()
	if !l.dirty && rp == leo {
		return l.takeFlushErr() // nothing new: no fsync
	}
	start := time.Now()
	segs := l.segments()
	var errs []error
	for i, s := range segs {
		next := leo
		if i+1 < len(segs) {
			next = segs[i+1].base
		}
		if next <= rp && i+1 < len(segs) {
			continue
		}
		errs = append(errs, s.flush())
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if err := syncDir(l.dir); err != nil {
		return err
	}
	l.recoveryPoint.Store(leo)
	l.unflushed = 0
	l.dirty = false
	l.lastFlush = l.now()
	l.metrics.Flushes.Add(1)
	l.metrics.FlushLatency.Since(start)
	return l.takeFlushErr()
}

func (l *Log) takeFlushErr() error {
	l.flushErrMu.Lock()
	defer l.flushErrMu.Unlock()
	err := l.flushErr
	l.flushErr = nil
	return err
}

// Close flushes, writes the final time index entry of the active segment,
// trims its indexes, removes files awaiting deletion and releases the
// segments (their files close when the last reader is done).
func (l *Log) Close() error {
	if l.closed.Swap(true) {
		return nil
	}
	if l.readOnly {
		l.closeSegments()
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	err := l.flushLocked()
	l.bg.Wait()
	if ferr := l.takeFlushErr(); err == nil {
		err = ferr
	}
	if aerr := l.active().onBecomeInactive(); err == nil {
		err = aerr
	}
	for _, p := range l.pending {
		if p.timer.Stop() {
			removeAll(p.paths)
		}
	}
	l.pending = nil
	l.closeSegments()
	return err
}

func (l *Log) closeSegments() {
	if p := l.segs.Load(); p != nil {
		for _, s := range *p {
			s.release()
		}
	}
}

func removeAll(paths []string) {
	for _, p := range paths {
		os.Remove(p)
	}
}

// removeDeletedFiles schedules the unlinking of a segment's .deleted files
// after file.delete.delay.ms. REQUIRES: l.mu held (or the log not shared).
func (l *Log) removeDeletedFiles(s *segment) {
	paths := []string{}
	for _, suf := range []string{LogSuffix, IndexSuffix, TimeIndexSuffix, TxnIndexSuffix} {
		paths = append(paths, s.path(suf)+DeletedSuffix)
	}
	if l.cfg.FileDeleteDelayMs == 0 {
		removeAll(paths)
		return
	}
	p := &pendingDelete{paths: paths}
	p.timer = time.AfterFunc(l.cfg.FileDeleteDelay(), func() {
		removeAll(paths)
		p.done.Store(true)
	})
	kept := l.pending[:0]
	for _, q := range l.pending {
		if !q.done.Load() {
			kept = append(kept, q)
		}
	}
	l.pending = append(kept, p)
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
