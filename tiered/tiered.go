package tiered

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/internal/ratelimit"
	"github.com/tierlog/tierlog/local"
	"github.com/tierlog/tierlog/manifest"
	"github.com/tierlog/tierlog/objstore"
	"github.com/tierlog/tierlog/objstore/seal"
	"github.com/tierlog/tierlog/producerstate"
)

// ManifestName is the manifest's object name under the partition prefix
// (manifest.ManifestName; manifest.Layout formats every key).
const ManifestName = manifest.ManifestName

// Options configure a Partition.
type Options struct {
	// Store is the bucket; Prefix the partition's key prefix
	// ("<prefix>/<topic>-<partition>").
	Store  *objstore.Store
	Prefix string
	// LeaderEpoch is the epoch this partition leads at from Open, written
	// into the manifests it commits; a manifest committed by a higher
	// epoch fences it. (A Backend's partitions open with no role instead,
	// until the broker calls BecomeLeader or BecomeFollower.)
	LeaderEpoch int32
	// OpenWithoutBucket opens without reading the manifest, so a broker
	// starts and serves local data while the bucket is unreachable. The
	// partition attaches to the bucket (one GET) at its first remote read,
	// upload or other change, and until then remote reads fail with a
	// retryable backend.ErrStorage.
	OpenWithoutBucket bool
	// IndexCacheBytes bounds the remote indexes kept in memory (default
	// 64 MiB).
	IndexCacheBytes int64
	// ChunkCacheBytes bounds the remote log ranges kept in memory, so
	// repeated reads cost no GET (default 64 MiB; -1 disables it).
	ChunkCacheBytes int64
	// ManifestCacheBytes bounds the manifest parts' segments kept in
	// memory (default 64 MiB; see CacheOptions.ManifestBytes).
	ManifestCacheBytes int64
	// IndexCacheDir, when set, keeps fetched remote indexes on disk too,
	// within IndexCacheDiskBytes (default 1 GiB), so a restarted broker
	// does not fetch them again.
	IndexCacheDir       string
	IndexCacheDiskBytes int64
	// UploadBytesPerSecond caps the partition's upload rate (0: none).
	UploadBytesPerSecond int64
	// UploadConcurrency is how many segments Offload uploads at once
	// (default 4). Offload commits them with one manifest write per
	// group of up to four times that many: beyond UploadConcurrency,
	// only while the group stays within 1 GiB, starting within a
	// quarter of the CommitWindow from the group's intent and stopped
	// (to go in the next group) if still uploading at half of it.
	UploadConcurrency int
	// PrefetchBytes is how much a remote read fetches ahead, in the
	// background, for the next sequential read, across segment borders
	// (default 1 MiB; -1 disables read-ahead). A read asking for more
	// (a fetch's partition bytes) fetches twice as much ahead as it
	// asked for, so the next reads of that size find their windows
	// cached. A read-ahead takes at most a quarter of the chunk cache,
	// and all the partitions' read-ahead not yet read at most half; one
	// that could not bring half the next read's window into the cache
	// within those bounds (a read takes the cache only then) is not
	// fetched.
	PrefetchBytes int64
	// CommitWindow bounds the time from an upload's intent to the commit
	// naming its objects (default DefaultCommitWindow): an upload that
	// takes longer is given up (ErrCommitWindow) and retried, because gc
	// may remove its objects after that. See GC.
	CommitWindow time.Duration
	// Now is the clock for local retention, upload intents and their
	// commit window (default time.Now).
	Now    func() time.Time
	Logger *slog.Logger
	// Metrics receives the partition's counters; share one across a
	// broker's partitions (default: one of the partition's own).
	Metrics *Metrics
	// Caches, when set, are the remote read caches to use, shared with
	// other partitions (a Backend shares one across the broker); the
	// cache sizes above then do not apply. Without it the partition makes
	// its own.
	Caches *Caches
	// UploadQuota, when set, is an upload rate shared with other
	// partitions (Kafka's remote.log.manager.copy.max.bytes.per.second),
	// applied on top of UploadBytesPerSecond.
	UploadQuota *Quota
	// Readers, when set, bounds the remote reads in flight and queued,
	// shared with other partitions (Kafka's remote.log.reader.threads and
	// remote.log.reader.max.pending.tasks). Without it remote reads are
	// not bounded beyond the caller's own concurrency.
	Readers *ReaderPool
	// OnUploadProgress, when set, is called as Offload sends segment data
	// with the bytes of .log files sent since its last call (a retried
	// put does not count its bytes again). Calls come from several
	// goroutines when segments upload in parallel. For progress displays.
	OnUploadProgress func(n int64)
	// ReadReplica opens the partition as a read replica of the bucket's
	// (another cluster's) partition: it serves reads from the bucket
	// alone, follows its manifest (ReplicaStep) and writes nothing to the
	// bucket; writes to it fail with ErrReadReplica. See replica.go.
	ReadReplica bool

	// noRole opens the partition neither leader nor follower (a Backend's).
	noRole bool
	// dl, when set, makes the partition diskless (a Backend's, for
	// diskless.enable=true; diskless.go).
	dl *diskless
	// onWork, when set, is told when the partition may have a segment to
	// upload (its high watermark moved; it became leader).
	onWork func(*Partition)
	// walStore, when set, is the store of the diskless WAL objects
	// (default Store): a Backend that seals only the topics that ask
	// seals every WAL object.
	walStore *objstore.Store
	// selective, set by a Backend that seals only the topics that ask,
	// says whether this partition's topic asks (readHeadBytes).
	selective *selectiveSeal
}

// selectiveSeal is a partition's kind in a Backend that seals only the
// topics that ask (seal.Options.Selective): sealed when its topic has
// remote.storage.seal.enable=true. either reads both kinds of object.
type selectiveSeal struct {
	sealed bool
	either *objstore.Store
}

// Partition is a local log whose old segments also live in a bucket. It
// implements backend.Partition.
type Partition struct {
	local  *local.Log
	segs   local.Segments // local's face for the tiers (segment handles, the remote log start)
	store  *objstore.Store
	prefix string
	opts   Options
	// tiers is the stack reads walk, oldest offsets first (tiers.go).
	tiers []tier
	// dl is a diskless partition's WAL state (nil for the others).
	dl *diskless

	mu   sync.Mutex // serializes Offload and manifest changes
	man  atomic.Pointer[manifestState]
	fenc atomic.Pointer[fencing]
	// compactMu serializes rounds of the bucket's cleaner (compact.go),
	// which take mu only to commit; dirty is what its last pass found.
	compactMu sync.Mutex
	dirty     atomic.Pointer[DirtyState]
	// attached says the manifest was read (see Options.OpenWithoutBucket);
	// attachMu serializes the reading, and a caller whose ctx ends stops
	// waiting for it.
	attached atomic.Bool
	attachMu ctxMutex
	// rwal is a read replica's view of a diskless partition's WAL
	// (replica_wal.go). Guarded by mu.
	rwal *replicaWAL
	// rlocal: a read replica's local log holds only records this
	// process read from the bucket (replica_wal.go). Guarded by mu.
	rlocal bool
	// replicaSynced: a read replica followed its bucket at least once
	// (replica.go's replicaReady).
	replicaSynced atomic.Bool
	// reborn says the manifest was a deleted partition's when this one
	// attached, and its local log had never held a record (its log end 0)
	// when it was opened or when it attached: it is a new partition of the
	// deleted one's name, and may start over from the deleted manifest
	// (see claimLocked). A partition whose local log held records then,
	// even one retention emptied at a later offset, may be the deleted
	// one (a broker that missed the deletion, or a Delete cut short): it
	// is refused.
	reborn      atomic.Bool
	openedEmpty bool // the local log's end was 0 at Open; set before p is shared
	// epoch is the leader epoch the partition leads or follows at; role
	// says which (roleNone until told).
	epoch atomic.Int32
	role  atomic.Int32
	// claimed is the leader epoch this writer has written into the
	// bucket's manifest (-1: none yet): until it is the current one, the
	// next change claims the bucket first. Written with mu held.
	claimed atomic.Int32
	// unknown is a manifest whose commit may or may not have happened (the
	// answer was lost); the next change reconciles it first. Guarded by mu.
	unknown *manifest.Head
	// partsRead are the ids of the parts checkPartsLocked has read.
	// Guarded by mu.
	partsRead map[[8]byte]struct{}
	// backupDue is a committed generation whose backup is not written yet
	// (backup.go): nothing is deleted on its strength until it is.
	// Guarded by mu.
	backupDue *pendingBackup
	// verified holds the local segments known to be in the bucket as they
	// are on disk (see bucketHoldsLocked). Guarded by mu.
	verified map[int64]verifiedSegment
	// rec is what the partition last knew of its bucket, and whether it
	// refused a manifest that went back in time (rollback.go).
	rec bucketRecord

	caches      *Caches
	ownCaches   bool                 // made by this partition: Close clears them
	uploadRate  []*ratelimit.Limiter // the partition's cap, the shared quota
	prefetching atomic.Bool
	ahead       atomic.Pointer[readAhead] // the read-ahead in flight, if any
	prefetched  atomic.Int64
	metrics     *Metrics

	// closed is set by Close; closing is cancelled by it, which stops
	// read-ahead and an Offload, ApplyRetention or commit in flight; bg
	// counts the read-ahead goroutine.
	closed      atomic.Bool
	closing     context.Context
	stopClosing context.CancelFunc
	bg          sync.WaitGroup
}

// manifestState is a committed manifest and the ETag to replace it with.
type manifestState struct {
	head *manifest.Head
	etag string // "" when no manifest exists yet
	// first is the manifest's first segment once a retention pass
	// loaded it (firstSegment): an idle partition's passes load nothing.
	first atomic.Pointer[manifest.Segment]
}

// The roles of a partition.
const (
	roleNone int32 = iota
	roleLeader
	roleFollower
)

// fencing is why a writer was fenced, and by which epoch.
type fencing struct {
	err   error
	epoch int32 // the writer epoch that fenced this one
}

var _ backend.Tiered = (*Partition)(nil)

// Open reads the partition's manifest (one GET; none with
// OpenWithoutBucket) and wraps l, leading at opts.LeaderEpoch.
func Open(ctx context.Context, l *local.Log, opts Options) (*Partition, error) {
	if opts.Store == nil {
		return nil, fmt.Errorf("tiered: no store")
	}
	if sd, err := seal.Sealed(opts.Store); err == nil && sd.Selective() && opts.selective == nil {
		// It would write a sealed partition's objects in plaintext,
		// and read plaintext objects slipped into one.
		return nil, fmt.Errorf("%w: tiered: %s: the store %s seals only the topics that ask (seal=topics): open the partition through a Backend, or through the store tiered.PartitionStore returns",
			backend.ErrInvalidConfig, opts.Prefix, opts.Store.Name())
	}
	if cfg := l.Config(); !cfg.RemoteStorageEnable {
		// The local log learns it is tiered: its time and size retention
		// become this layer's, which deletes only what the bucket holds.
		// (A read-only log deletes nothing.)
		cfg.RemoteStorageEnable = true
		if err := l.SetConfig(cfg); err != nil && !errors.Is(err, local.ErrReadOnly) {
			return nil, err
		}
	}
	if opts.UploadConcurrency <= 0 {
		opts.UploadConcurrency = 4
	}
	if opts.PrefetchBytes == 0 {
		opts.PrefetchBytes = 1 << 20
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.CommitWindow <= 0 {
		opts.CommitWindow = DefaultCommitWindow
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Metrics == nil {
		opts.Metrics = new(Metrics)
	}
	p := &Partition{metrics: opts.Metrics, local: l, segs: l.Segments(), store: opts.Store, prefix: opts.Prefix, opts: opts, caches: opts.Caches, dl: opts.dl}
	p.tiers = []tier{bucketTier{p}, localTier{p}}
	if p.caches == nil {
		p.caches, p.ownCaches = NewCaches(CacheOptions{IndexBytes: opts.IndexCacheBytes, ChunkBytes: opts.ChunkCacheBytes,
			ManifestBytes: opts.ManifestCacheBytes, IndexDir: opts.IndexCacheDir, IndexDiskBytes: opts.IndexCacheDiskBytes}), true
	}
	if lim := ratelimit.New(opts.UploadBytesPerSecond); lim != nil {
		p.uploadRate = append(p.uploadRate, lim)
	}
	if opts.UploadQuota != nil && opts.UploadQuota.lim != nil {
		p.uploadRate = append(p.uploadRate, opts.UploadQuota.lim)
	}
	p.closing, p.stopClosing = context.WithCancel(context.Background())
	p.claimed.Store(-1)
	p.openedEmpty = l.Offsets().LogEnd == 0
	p.epoch.Store(opts.LeaderEpoch)
	// A read-only local log (a tool's) makes a reader: no role, so it
	// never takes the bucket's writer for a rival.
	switch {
	case opts.ReadReplica:
		p.role.Store(roleFollower) // and never more
	case !opts.noRole && !l.Segments().ReadOnly():
		p.role.Store(roleLeader)
	}
	// Until attached, the manifest is an empty one (the local log keeps the
	// log start its checkpoint recorded).
	p.man.Store(noManifest())
	if err := p.loadRecord(); err != nil {
		return nil, err
	}
	if !opts.OpenWithoutBucket {
		if err := p.attach(ctx); err != nil {
			return nil, err
		}
		if opts.ReadReplica {
			if err := p.ReplicaStep(ctx); err != nil {
				return nil, err
			}
		}
	}
	return p, nil
}

// layout is the key layout of the partition's objects.
func (p *Partition) layout() manifest.Layout { return manifest.NewLayout(p.prefix) }

// wal is the store of the diskless WAL objects.
func (p *Partition) wal() *objstore.Store {
	if p.opts.walStore != nil {
		return p.opts.walStore
	}
	return p.store
}

// Head returns the committed manifest's head (see manifest.Head): its
// header, the parts it names and its newest segments, with no I/O.
func (p *Partition) Head() *manifest.Head { return p.man.Load().head }

// Manifest returns the committed manifest whole, its parts' segments
// loaded (from memory, the disk cache or the bucket; see segs.go). It
// must not be changed.
func (p *Partition) Manifest(ctx context.Context) (*manifest.Manifest, error) {
	return p.whole(ctx, p.Head())
}

// Prefix returns the partition's key prefix in the bucket.
func (p *Partition) Prefix() string { return p.prefix }

// Roll closes the local tier's active segment (if it holds data) and
// starts a new one at the log end: the closed segment uploads once it is
// wholly below the last stable offset. Segments also close by size
// (segment.bytes), age (segment.ms) and the idle roll.
func (p *Partition) Roll() error {
	if err := p.checkOpen(); err != nil {
		return err
	}
	if err := p.notReplica(); err != nil {
		return err
	}
	if err := p.local.Roll(); err != nil {
		return err
	}
	if p.opts.onWork != nil {
		p.opts.onWork(p)
	}
	return nil
}

// LocalSegments describes the local tier's segments, oldest first (the
// bucket's are Manifest().Segments).
func (p *Partition) LocalSegments() []local.SegmentInfo { return p.local.SegmentInfos() }

// LeaderEpochs returns the partition's leader epochs over every tier,
// each with the first offset written in it, oldest first: the bucket's
// (from the committed manifest's head; a part is read only where a
// leader change fell in it) then the local log's.
func (p *Partition) LeaderEpochs(ctx context.Context) ([]local.EpochEntry, error) {
	return p.epochs(ctx, p.view())
}

// LatestLeaderEpoch returns the largest leader epoch the partition holds
// records of, or -1: the local log's, else the committed manifest's last
// segment's (from its head: no I/O, and no bucket needed).
func (p *Partition) LatestLeaderEpoch() int32 {
	latest := p.local.LatestLeaderEpoch()
	h := p.Head()
	if n := len(h.Own); n > 0 {
		latest = max(latest, h.Own[n-1].LeaderEpoch)
	} else if n := len(h.Parts); n > 0 {
		latest = max(latest, h.Parts[n-1].LastEpoch)
	}
	return latest
}

// Producers returns the producer state's producers (Kafka's
// DescribeProducers): the local log's, which carries the state of every
// producer the partition remembers.
func (p *Partition) Producers() []producerstate.ProducerInfo { return p.local.Producers() }

// Append appends to the local log. A leader append of a partition that
// leads (BecomeLeader, or Open with Options.LeaderEpoch) is stamped with
// the epoch it leads at (backend.AppendOptions.EpochAt).
func (p *Partition) Append(ctx context.Context, batches []byte, opts backend.AppendOptions) (backend.AppendInfo, error) {
	if err := p.checkOpen(); err != nil {
		return backend.AppendInfo{}, err
	}
	if err := p.notReplica(); err != nil {
		return backend.AppendInfo{}, err
	}
	if opts.AssignOffsets && p.role.Load() == roleLeader {
		epoch, err := opts.EpochAt(p.epoch.Load())
		if err != nil {
			return backend.AppendInfo{}, fmt.Errorf("%w (%s)", err, p.local.Dir())
		}
		opts.LeaderEpoch = epoch
	}
	if p.dl != nil {
		return p.appendDiskless(ctx, batches, opts)
	}
	return p.local.Append(ctx, batches, opts)
}

// SetHighWatermark sets the local log's high watermark.
func (p *Partition) SetHighWatermark(hw int64) error {
	if err := p.checkOpen(); err != nil {
		return err
	}
	if err := p.notReplica(); err != nil {
		return err
	}
	if p.dl != nil {
		// Held below the durable end (diskless.go).
		p.dl.wantHW.Store(hw)
		p.applyHW()
	} else if err := p.local.SetHighWatermark(hw); err != nil {
		return err
	}
	if p.opts.onWork != nil {
		p.opts.onWork(p)
	}
	return nil
}

// hasCopyWork says whether a closed segment below the last stable offset
// holds offsets the bucket lacks: one binary search of the local
// segments, no allocation.
func (p *Partition) hasCopyWork() bool {
	s, ok := p.segs.SpanAfter(p.Head().LastOffset())
	return ok && !s.Active && s.NextOffset <= p.local.Offsets().LastStableOffset
}

// TruncateTo truncates the local log. Offsets the bucket holds were
// committed (below the high watermark when they were offloaded) and are
// never truncated: the bucket would otherwise hold records the log no
// longer has, and new appends would reuse their offsets.
func (p *Partition) TruncateTo(offset int64) error {
	if err := p.checkOpen(); err != nil {
		return err
	}
	if err := p.notReplica(); err != nil {
		return err
	}
	if offset < p.local.Offsets().LogEnd {
		// What the bucket holds must be known first.
		ctx, cancel := context.WithTimeout(p.closing, p.store.Timeout())
		err := p.attach(ctx)
		cancel()
		if err != nil {
			return fmt.Errorf("tiered: truncate to %d: %w", offset, err)
		}
	}
	if last := p.Head().LastOffset(); last >= 0 && offset <= last {
		return fmt.Errorf("%w: truncate to %d: offsets up to %d are offloaded and committed", backend.ErrInvalidRecord, offset, last)
	}
	if d := p.dl; d != nil && offset < p.local.Offsets().LogEnd {
		// The local log of a diskless partition is a cache: cut, it no
		// longer holds what the durable end says, and the next claim
		// makes it from the bucket again.
		d.mu.Lock()
		defer d.mu.Unlock()
		d.rebuilt.Store(false)
		d.pending.Store(false)
		// Should it lead, its next append first resets the writer (what
		// it has in flight can no longer become durable) and cuts back.
		d.failed.Store(true)
		d.ownMu.Lock()
		if d.durable.Load() > offset {
			d.durable.Store(offset)
		}
		d.ownMu.Unlock()
	}
	return p.local.TruncateTo(offset)
}

// DeleteRecordsBefore raises the log start offset, locally and (when the
// offset falls in the bucket's range) in the manifest.
func (p *Partition) DeleteRecordsBefore(ctx context.Context, offset int64) error {
	if err := p.checkOpen(); err != nil {
		return err
	}
	if err := p.notReplica(); err != nil {
		return err
	}
	v := p.view()
	o := v.offsets()
	if offset > o.HighWatermark {
		return &backend.OffsetOutOfRangeError{Offset: offset, LogStart: o.LogStart, LogEnd: o.HighWatermark}
	}
	defer p.notifyTieredEnd(o.TieredEnd) // with no segment in the bucket, it is the log start
	if p.role.Load() != roleLeader {
		// A follower follows the leader's log start (the manifest's, and
		// the one the leader's fetch responses carry) locally only.
		if offset > p.local.Offsets().LogStart {
			if err := p.noteLogStart(offset); err != nil {
				return err
			}
			return p.local.DeleteRecordsBefore(ctx, offset)
		}
		return nil
	}
	ctx, done, err := p.beginLeaderChange(ctx)
	if err != nil {
		return err
	}
	defer done()
	st := p.man.Load()
	if last := st.head.LastOffset(); last >= 0 && offset > st.head.LogStartOffset() {
		prev, err := p.whole(ctx, st.head)
		if err != nil {
			return err
		}
		next := *prev
		next.Segments = append([]manifest.Segment(nil), prev.Segments...)
		next.LogStartOffset = min(offset, last+1)
		if err := p.commitLocked(ctx, st, prev, &next); err != nil {
			return err
		}
	}
	if err := p.ensureBackupLocked(ctx); err != nil {
		return err // the local log follows at the next change (fitLocalStartLocked)
	}
	if offset > p.local.Offsets().LogStart {
		// Recorded first: past the bucket's end, only the record says
		// why the local log starts above the bucket (see rollback.go).
		if err := p.noteLogStart(offset); err != nil {
			return err
		}
		if err := p.local.DeleteRecordsBefore(ctx, offset); err != nil {
			return err
		}
		p.adopt(p.man.Load()) // the bucket may end below the new local start now
	}
	return nil
}

// Changed is the local log's: every offset a broker waits on moves there.
func (p *Partition) Changed() <-chan struct{} { return p.local.Changed() }

// SetConfig applies a topic config change. A tiered partition cannot
// stop being tiered (its old offsets live only in the bucket), as in
// Kafka; it may become a compacted one (the bucket's cleaner cleans it,
// compact.go), diskless or not.
func (p *Partition) SetConfig(cfg backend.Config) error {
	if err := p.checkOpen(); err != nil {
		return err
	}
	if cfg.DisklessEnable {
		cfg.RemoteStorageEnable = true // implied
	}
	if !cfg.RemoteStorageEnable {
		return &backend.ConfigError{Key: "remote.storage.enable", Value: "false",
			Reason: "a tiered partition cannot stop being tiered (" + p.local.Dir() + ")"}
	}
	if err := p.checkSealConfig(cfg); err != nil {
		return err
	}
	return p.local.SetConfig(cfg)
}

// checkSealConfig refuses a remote.storage.seal.enable the partition's
// objects cannot follow: a change where it decides their kind (a Backend
// that seals only the topics that ask: the bucket holds them sealed or
// not from the topic's creation), or true with a store that cannot seal.
// Where every object is sealed whatever the topic says, it may change.
func (p *Partition) checkSealConfig(cfg backend.Config) error {
	s := p.opts.selective
	v := strconv.FormatBool(cfg.SealEnable)
	switch {
	case s != nil && cfg.SealEnable != s.sealed:
		kind := "not sealed"
		if s.sealed {
			kind = "sealed"
		}
		return &backend.ConfigError{Key: "remote.storage.seal.enable", Value: v,
			Reason: "a tiered topic is sealed or not from its creation: its objects in the bucket are " + kind + " (" + p.local.Dir() + ")"}
	case s == nil && cfg.SealEnable:
		if _, err := seal.Sealed(p.store); err != nil {
			return &backend.ConfigError{Key: "remote.storage.seal.enable", Value: v,
				Reason: fmt.Sprintf("the bucket's store %s has no key ring to seal with (%s)", p.store.Name(), p.local.Dir())}
		}
	}
	return nil
}

// Ready is nil once the partition answers from its whole log: a read
// replica once it has followed its bucket, a diskless leader once it has
// claimed its epoch (it tries now if due). Until then its Offsets may end
// short of what the bucket holds, and Read, OffsetForTimestamp and
// EndOffsetForEpoch answer the retryable backend.ErrStorage Ready
// returns. A broker that answers from Offsets alone (ListOffsets of the
// last stable offset) asks it first.
func (p *Partition) Ready(ctx context.Context) error {
	if err := p.replicaReady(ctx); err != nil {
		return err
	}
	return p.disklessReady(ctx)
}

// EndOffsetForEpoch answers OffsetsForLeaderEpoch over both tiers: the
// bucket's segments keep their leader-epoch maps in the manifest, the
// local log its epoch cache.
func (p *Partition) EndOffsetForEpoch(ctx context.Context, epoch int32) (int32, int64, bool, error) {
	if err := p.checkOpen(); err != nil {
		return -1, -1, false, err
	}
	if err := p.Ready(ctx); err != nil {
		return -1, -1, false, err
	}
	if local := p.local.LeaderEpochs(); len(local) > 0 && epoch >= local[0].Epoch {
		// The local epochs answer: every epoch from the first local one on
		// has its records, or its start, on the local disk. (A broker asks
		// for its latest epoch this way without the bucket.)
		return p.local.EndOffsetForEpoch(ctx, epoch)
	}
	v, err := p.attachedView(ctx) // epochs of offsets only the bucket holds are in the manifest
	if err != nil {
		return -1, -1, false, err
	}
	epochs, err := p.epochs(ctx, v)
	if err != nil {
		return -1, -1, false, err
	}
	leo := v.local.LogEnd
	for i := len(epochs) - 1; i >= 0; i-- {
		if epochs[i].Epoch <= epoch {
			end := leo
			if i+1 < len(epochs) {
				end = epochs[i+1].StartOffset
			}
			return epochs[i].Epoch, end, true, nil
		}
	}
	return -1, -1, false, nil
}

// Flush flushes the local log.
func (p *Partition) Flush() error {
	if err := p.checkOpen(); err != nil {
		return err
	}
	if p.dl != nil {
		return p.flushDiskless()
	}
	return p.local.Flush()
}

// Close closes the tiered layer, then the local log: read-ahead stops, an
// Offload, ApplyRetention or DeleteRecordsBefore in flight is cancelled
// (an upload it leaves uncommitted is gc's, by its intent), the caches are
// dropped, and every call after it returns backend.ErrClosed.
func (p *Partition) Close() error {
	if p.closed.Swap(true) {
		return nil
	}
	p.stopClosing()
	p.mu.Lock() // wait out a change in flight
	if p.dl != nil {
		p.dl.mu.Lock() // no append between its check and the writer
		p.dl.writer().Forget(p.dl.tp)
		p.dl.mu.Unlock()
		if p.dl.closed != nil {
			p.dl.closed()
		}
	}
	p.bg.Wait()
	if p.ownCaches {
		p.caches.clear()
	}
	p.mu.Unlock()
	return p.local.Close()
}

// checkOpen returns backend.ErrClosed after Close, and the RollbackError
// of a partition that went offline (see rollback.go).
func (p *Partition) checkOpen() error {
	if err := p.checkNotClosed(); err != nil {
		return err
	}
	return p.Offline()
}

// checkNotClosed returns backend.ErrClosed after Close. Leadership changes
// check only this: an offline partition takes its role (and stays
// offline), so one partition refusing its bucket does not stop the broker
// from taking up the others.
func (p *Partition) checkNotClosed() error {
	if p.closed.Load() {
		return fmt.Errorf("%w: tiered partition %s", backend.ErrClosed, p.layout().ListPrefix())
	}
	return nil
}

// memRecords are batches read from the bucket, held in memory: data, then
// rest, the batches that follow them in the next cached range (lent in
// place, not joined into one buffer; usually nil).
type memRecords struct {
	data    []byte
	rest    []byte
	next    int64
	aborted []backend.AbortedTxn // a read_committed read's
}

// WriteTo writes the batches, both pieces in one vectored write where w
// takes one (a socket).
func (r *memRecords) WriteTo(w io.Writer) (int64, error) {
	if len(r.rest) == 0 {
		n, err := w.Write(r.data)
		return int64(n), err
	}
	bufs := net.Buffers{r.data, r.rest}
	return bufs.WriteTo(w)
}

// View lends the bytes in place (backend.Viewer): a cached read's are the
// chunk cache's, which never change. Records in two pieces are copied
// into one for fn.
func (r *memRecords) View(fn func(p []byte) error) error {
	if len(r.rest) == 0 {
		return fn(r.data[:len(r.data):len(r.data)])
	}
	return fn(slices.Concat(r.data, r.rest))
}

var _ backend.Viewer = (*memRecords)(nil)

func (r *memRecords) Len() int64        { return int64(len(r.data) + len(r.rest)) }
func (r *memRecords) Close() error      { return nil }
func (r *memRecords) NextOffset() int64 { return r.next }

// AbortedTransactions implements backend.Aborted.
func (r *memRecords) AbortedTransactions() []backend.AbortedTxn { return r.aborted }
