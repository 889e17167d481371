package local

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/timingwheel"
	"github.com/tierlog/tierlog/vfs"
)

// BackendOptions tune a Backend.
type BackendOptions struct {
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Logger receives events (default: discard).
	Logger *slog.Logger
	// BackgroundInterval, when > 0, turns on the background work Kafka's
	// LogManager does, and is the interval of its checkpoint writes (one
	// task for the whole directory; Kafka writes the recovery point
	// checkpoint every 60 s). Each open partition's flush.ms and
	// retention.ms deadlines then run on the Backend's timing wheel at
	// their own time, not at this interval: a flush when flush.ms has
	// passed since the last one with something unflushed, a retention
	// check when the oldest segment passes retention.ms (and after each
	// roll for retention.bytes). 0 leaves flush.ms, retention and
	// checkpoints to the caller (Flush, DeleteOldSegments, Checkpoint).
	// The removal of .deleted files after file.delete.delay.ms runs
	// either way. See the package doc, "Background work".
	BackgroundInterval time.Duration
	// Timer is the timing wheel the Backend schedules its deadlines on;
	// nil makes one (timingwheel.New with Now as its clock), closed by
	// Close. A Timer given here MUST read the same clock as Now, and the
	// Backend does not close it (close it after the Backend). Tests pass a
	// timingwheel.Manual's Timer and fire what is due with Advance; a
	// broker may share its own wheel (its purgatory's).
	Timer *timingwheel.Timer
	// MaxOpenSegmentFiles bounds, across all partitions, how many closed
	// segments keep their files open (default 4096; -1: no bound).
	MaxOpenSegmentFiles int
	// TopicID, when set, returns a topic's id (Kafka's base64url UUID) for
	// partition.metadata; see Options.TopicID.
	TopicID func(topic string) string
	// FS is the filesystem (default vfs.Default); see Options.FS.
	FS vfs.FS
	// RemoteStorage says a tiered layer manages this directory
	// (tiered.Backend sets it): topics with remote.storage.enable=true may
	// open here, and the layer applies their time and size retention.
	// Without it opening one is an ErrInvalidConfig, as Kafka refuses such
	// a topic on a broker without remote storage: nothing would ever apply
	// its retention.
	RemoteStorage bool
}

// Backend is a log directory holding many partitions in Kafka's layout,
// with Kafka's checkpoint files; it implements backend.Backend. Partitions
// open on first use, so opening a directory of 10,000 partitions reads only
// its checkpoint files.
type Backend struct {
	dir    string
	opts   BackendOptions
	logger *slog.Logger
	lock   io.Closer
	clean  bool // the directory was shut down cleanly last time
	budget *fileBudget
	// metrics is shared by every log the backend opens.
	metrics Metrics

	mu       sync.Mutex
	logs     map[TopicPartition]*Log
	recovery map[TopicPartition]int64
	starts   map[TopicPartition]int64
	hws      map[TopicPartition]int64
	// cleaned names the logs a cleaner has replaced segments of (the
	// cleaner-offset-checkpoint's partitions, and those cleaned since).
	cleaned map[TopicPartition]int64
	closed  bool

	// sched runs the deadlines of the open logs and the checkpoint task
	// (deadlines.go). checkpoint and its task are the checkpoint
	// writes' (BackgroundInterval > 0); the task is touched only by
	// OpenBackend and the work's runs, one at a time.
	sched          *scheduler
	checkpoint     work
	checkpointTask *timingwheel.Task
}

var _ backend.Backend = (*Backend)(nil)

// OpenBackend opens (creating when needed) the log directory dir, locking it
// against a second process.
func OpenBackend(dir string, opts BackendOptions) (b *Backend, err error) {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.FS == nil {
		opts.FS = vfs.Default
	}
	fsys := opts.FS
	if err := fsys.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("local: create log dir: %w", err)
	}
	lock, err := fsys.Lock(filepath.Join(dir, LockFile))
	if errors.Is(err, vfs.ErrLocked) {
		return nil, fmt.Errorf("local: log dir %s is in use by another process (%s is locked): %w", dir, LockFile, err)
	}
	if err != nil {
		return nil, fmt.Errorf("local: lock %s: %w", dir, err)
	}
	if opts.MaxOpenSegmentFiles == 0 {
		opts.MaxOpenSegmentFiles = 4096
	}
	b = &Backend{dir: dir, opts: opts, logger: opts.Logger.With("logdir", dir), lock: lock, logs: map[TopicPartition]*Log{},
		budget: newFileBudget(opts.MaxOpenSegmentFiles)}
	defer func() {
		if err != nil {
			lock.Close()
		}
	}()
	marker := filepath.Join(dir, CleanShutdownFile)
	if _, err := fsys.Stat(marker); err == nil {
		b.clean = true
		if err := fsys.Remove(marker); err != nil {
			return nil, fmt.Errorf("local: remove %s: %w", marker, err)
		}
		if err := fsys.SyncDir(dir); err != nil {
			return nil, fmt.Errorf("local: fsync dir %s: %w", dir, err)
		}
	}
	read := func(name string) map[TopicPartition]int64 {
		m, err := readOffsetCheckpoint(fsys, filepath.Join(dir, name))
		if err != nil {
			// Kafka treats an unreadable checkpoint as empty: every log
			// is then recovered from its start.
			b.logger.Warn("checkpoint unreadable; treating it as empty", "file", name, "err", err)
			return map[TopicPartition]int64{}
		}
		return m
	}
	b.recovery, b.starts, b.hws = read(RecoveryPointCheckpoint), read(LogStartCheckpoint), read(ReplicationCheckpoint)
	b.cleaned = read(CleanerCheckpoint)
	if b.sched, err = newScheduler(opts.Timer, opts.Now, deadlineWorkers); err != nil {
		return nil, fmt.Errorf("local: %w", err)
	}
	if opts.BackgroundInterval > 0 {
		b.checkpoint.run = b.checkpointAndRearm
		b.armCheckpoint()
	}
	return b, nil
}

// Dir returns the log directory.
func (b *Backend) Dir() string { return b.dir }

// Open returns the partition's log, opening or creating it; see
// backend.Backend. The config applies from this open on.
func (b *Backend) Open(ctx context.Context, topic string, partition int32, cfg backend.Config) (backend.Partition, error) {
	return b.OpenLog(ctx, topic, partition, cfg)
}

// CheckConfig reports whether the directory can hold a topic of cfg, as
// OpenLog would refuse it: remote.storage.enable, diskless.enable and
// remote.storage.seal.enable need a bucket, which a directory opened
// without BackendOptions.RemoteStorage has none of. A broker checks a
// topic config change with it before it applies it to the partitions,
// which would otherwise take it and fail to open at the next start.
func (b *Backend) CheckConfig(cfg backend.Config) error {
	if b.opts.RemoteStorage {
		return nil
	}
	const noBucket = " (a broker without a bucket; a tierlog embedding opens it with tiered.OpenBackend)"
	switch {
	case cfg.RemoteStorageEnable:
		return &backend.ConfigError{Key: "remote.storage.enable", Value: "true", Reason: "this log directory has no tiered storage" + noBucket}
	case cfg.DisklessEnable:
		return &backend.ConfigError{Key: "diskless.enable", Value: "true", Reason: "a diskless topic's appends are durable in a bucket: this log directory has none" + noBucket}
	case cfg.SealEnable:
		return &backend.ConfigError{Key: "remote.storage.seal.enable", Value: "true", Reason: "a sealed topic's objects are sealed in a bucket: this log directory has none" + noBucket}
	}
	return nil
}

// OpenLog is Open returning the concrete *Log.
func (b *Backend) OpenLog(ctx context.Context, topic string, partition int32, cfg backend.Config) (*Log, error) {
	if err := checkCtx(ctx); err != nil {
		return nil, err
	}
	name, err := PartitionDirName(topic, partition)
	if err != nil {
		return nil, err
	}
	if err := b.CheckConfig(cfg); err != nil {
		return nil, err
	}
	tp := TopicPartition{Topic: topic, Partition: partition}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, fmt.Errorf("%w: log dir %s", backend.ErrClosed, b.dir)
	}
	if l, ok := b.logs[tp]; ok {
		if !l.closed.Load() {
			// The config given applies to the open log, as a topic config
			// change applies to Kafka's open log.
			if err := l.SetConfig(cfg); err != nil {
				return nil, err
			}
			return l, nil
		}
		// Closed by its own Close: what it had then is newer than the
		// checkpoint maps (a DeleteRecordsBefore, the high watermark).
		b.recovery[tp], b.starts[tp], b.hws[tp] = l.RecoveryPoint(), l.checkpointLogStart(), l.Offsets().HighWatermark
		if l.segOpts.cleaned.Load() {
			b.cleaned[tp] = 0
		}
	}
	opts := Options{Config: cfg, CleanShutdown: b.clean, RecoveryPoint: 0, LogStartOffset: -1, HighWatermark: -1,
		Now: b.opts.Now, Logger: b.opts.Logger, budget: b.budget, Metrics: &b.metrics, FS: b.opts.FS,
		sched: b.sched, background: b.opts.BackgroundInterval > 0, truncated: b.Checkpoint}
	if b.opts.TopicID != nil {
		opts.TopicID = b.opts.TopicID(topic)
	}
	if rp, ok := b.recovery[tp]; ok {
		opts.RecoveryPoint = rp
	} else {
		opts.CleanShutdown = false // never checkpointed: validate everything
	}
	if v, ok := b.starts[tp]; ok {
		opts.LogStartOffset = v
	}
	if v, ok := b.hws[tp]; ok {
		opts.HighWatermark = v
	}
	_, opts.Cleaned = b.cleaned[tp]
	l, err := Open(filepath.Join(b.dir, name), opts)
	if err != nil {
		return nil, fmt.Errorf("local: open %s: %w", tp, err)
	}
	b.logs[tp] = l
	return l, nil
}

// Logs returns the partitions open now (a log cleaner's work list).
func (b *Backend) Logs() []*Log {
	b.mu.Lock()
	defer b.mu.Unlock()
	logs := make([]*Log, 0, len(b.logs))
	for _, l := range b.logs {
		if !l.closed.Load() {
			logs = append(logs, l)
		}
	}
	return logs
}

// Partitions lists the partition directories in the log dir; see
// backend.Backend.
func (b *Backend) Partitions(ctx context.Context) ([]TopicPartition, error) {
	if err := checkCtx(ctx); err != nil {
		return nil, err
	}
	ents, err := b.opts.FS.ReadDir(b.dir)
	if err != nil {
		return nil, fmt.Errorf("local: %w", err)
	}
	var out []TopicPartition
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		if tp, err := ParsePartitionDirName(e.Name()); err == nil {
			out = append(out, tp)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Topic != out[j].Topic {
			return out[i].Topic < out[j].Topic
		}
		return out[i].Partition < out[j].Partition
	})
	return out, nil
}

// SetCheckpoints records a partition's recovery point and log start as if
// its log had checkpointed them, and writes the checkpoint files: for a
// partition directory written whole and made durable behind the log's
// back (a restore from a bucket), which the next OpenLog then trusts up to
// recoveryPoint instead of validating every segment from offset 0 (and
// dropping, as Kafka's recovery does, the producer snapshots that hold
// producers whose records retention removed). Refused while the partition
// is open.
func (b *Backend) SetCheckpoints(topic string, partition int32, recoveryPoint, logStart int64) error {
	tp := TopicPartition{Topic: topic, Partition: partition}
	b.mu.Lock()
	defer b.mu.Unlock()
	if l, ok := b.logs[tp]; ok && !l.closed.Load() {
		return fmt.Errorf("local: set the checkpoints of %s: it is open", tp)
	}
	delete(b.logs, tp)
	b.recovery[tp], b.starts[tp] = recoveryPoint, logStart
	delete(b.hws, tp)
	return b.checkpointLocked()
}

// MergeCheckpoints is SetCheckpoints for a log directory no Backend has
// open (the caller holds its lock, LockFile), through fsys (nil:
// vfs.Default): it merges the partition's log start, then its recovery
// point, into the directory's checkpoint files (each written whole and
// durable; a crash between the two leaves a recovery point that is not
// trusted yet, never one without its log start).
func MergeCheckpoints(fsys vfs.FS, logDir string, tp TopicPartition, recoveryPoint, logStart int64) error {
	if fsys == nil {
		fsys = vfs.Default
	}
	for _, c := range []struct {
		name  string
		value int64
	}{{LogStartCheckpoint, logStart}, {RecoveryPointCheckpoint, recoveryPoint}} {
		m, err := readOffsetCheckpoint(fsys, filepath.Join(logDir, c.name))
		if err != nil {
			return err
		}
		m[tp] = c.value
		if err := writeOffsetCheckpoint(fsys, logDir, c.name, m); err != nil {
			return err
		}
	}
	return nil
}

// Delete closes the partition and removes its directory.
func (b *Backend) Delete(ctx context.Context, topic string, partition int32) error {
	if err := checkCtx(ctx); err != nil {
		return err
	}
	name, err := PartitionDirName(topic, partition)
	if err != nil {
		return err
	}
	tp := TopicPartition{Topic: topic, Partition: partition}
	b.mu.Lock()
	defer b.mu.Unlock()
	if l, ok := b.logs[tp]; ok {
		l.Close()
		delete(b.logs, tp)
	}
	delete(b.recovery, tp)
	delete(b.starts, tp)
	delete(b.hws, tp)
	delete(b.cleaned, tp)
	dir := filepath.Join(b.dir, name)
	fsys := b.opts.FS
	if _, err := fsys.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%w: partition %s", backend.ErrNotFound, tp)
	}
	// Rename first (Kafka's "-delete" suffix) so a crash mid-removal
	// never leaves a half-deleted partition that looks live.
	doomed := dir + "." + fmt.Sprint(b.opts.Now().UnixNano()) + "-delete"
	if err := fsys.Rename(dir, doomed); err != nil {
		return fmt.Errorf("local: delete %s: %w", tp, err)
	}
	if err := fsys.SyncDir(b.dir); err != nil {
		return fmt.Errorf("local: fsync dir %s: %w", b.dir, err)
	}
	if err := fsys.RemoveAll(doomed); err != nil {
		return fmt.Errorf("local: delete %s: %w", tp, err)
	}
	return b.checkpointLocked()
}

// Checkpoint writes the recovery point, log start and high watermark
// checkpoints for every partition.
func (b *Backend) Checkpoint() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.checkpointLocked()
}

// checkpointLocked merges the open logs' offsets into the checkpoint maps
// (partitions not opened this session keep their last values) and writes
// them. REQUIRES: b.mu held.
func (b *Backend) checkpointLocked() error {
	for tp, l := range b.logs {
		o := l.Offsets()
		b.recovery[tp] = l.RecoveryPoint()
		b.starts[tp] = l.checkpointLogStart()
		b.hws[tp] = o.HighWatermark
	}
	return errors.Join(
		writeOffsetCheckpoint(b.opts.FS, b.dir, RecoveryPointCheckpoint, b.recovery),
		writeOffsetCheckpoint(b.opts.FS, b.dir, LogStartCheckpoint, b.starts),
		writeOffsetCheckpoint(b.opts.FS, b.dir, ReplicationCheckpoint, b.hws),
	)
}

// armCheckpoint schedules the next checkpoint writes BackgroundInterval
// from now.
func (b *Backend) armCheckpoint() {
	now := b.opts.Now()
	b.sched.arm(&b.checkpointTask, now.Add(b.opts.BackgroundInterval), now, &b.checkpoint, dueCheckpoint)
}

// checkpointAndRearm is the checkpoint task's work, on a pool goroutine.
func (b *Backend) checkpointAndRearm(dueKind) {
	if err := b.Checkpoint(); err != nil {
		b.logger.Error("checkpoint", "err", err)
	}
	b.armCheckpoint()
}

// Close closes every partition, writes the checkpoints and the clean
// shutdown marker, and unlocks the directory.
func (b *Backend) Close() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	b.mu.Unlock()
	b.sched.stop(&b.checkpoint) // a run in progress takes b.mu
	cancelTask(b.checkpointTask)
	defer b.sched.close() // after the logs, which stop their work first
	b.mu.Lock()
	defer b.mu.Unlock()
	var errs []error
	for tp, l := range b.logs {
		if err := l.Close(); err != nil {
			errs = append(errs, fmt.Errorf("local: close %s: %w", tp, err))
		}
	}
	errs = append(errs, b.checkpointLocked())
	if err := errors.Join(errs...); err != nil {
		// Without the marker the next open recovers: the safe choice
		// after a failed close.
		b.lock.Close()
		return err
	}
	err := vfs.WriteFileAtomic(b.opts.FS, b.dir, CleanShutdownFile, []byte(`{"version":0,"brokerEpoch":-1}`))
	b.lock.Close()
	return err
}
