package tiered

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/local"
	"github.com/tierlog/tierlog/manifest"
	"github.com/tierlog/tierlog/objstore"
	"github.com/tierlog/tierlog/objstore/seal"
	"github.com/tierlog/tierlog/wal"
)

// BackendOptions configure a Backend.
type BackendOptions struct {
	// Store is the bucket. Each partition's objects live under
	// "<Prefix>/<topic>-<partition>/" (Prefix may be empty). tierctl names
	// a partition's objects by its --store URL's path and --partition, so
	// a Backend opened with Prefix "tierlog" on s3://my-bucket is reached
	// as --store s3://my-bucket/tierlog: the Prefix goes into the URL.
	Store  *objstore.Store
	Prefix string
	// Local tunes the local log directory (its RemoteStorage is set).
	Local local.BackendOptions
	// Manager is the tiering service's configuration: Kafka's
	// remote.log.manager.* and remote.log.reader.* (ParseManagerConfig
	// reads them from a broker's properties, ignoring Kafka's other
	// keys); zero fields take Kafka's defaults.
	Manager ManagerConfig
	// IndexCacheBytes and ChunkCacheBytes bound the memory of remote reads,
	// for all partitions together (default 64 MiB each; ChunkCacheBytes
	// -1 disables the chunk cache). See CacheOptions.
	IndexCacheBytes int64
	ChunkCacheBytes int64
	// ManifestCacheBytes bounds the manifest parts' segments kept in
	// memory for all partitions together (default 64 MiB): each partition
	// keeps its manifest's head, a few KiB at any length. See
	// CacheOptions.
	ManifestCacheBytes int64
	// PrefetchBytes and CommitWindow are each partition's; see Options.
	PrefetchBytes int64
	CommitWindow  time.Duration
	// GCInterval is how often the service collects the garbage of each
	// partition it leads (default 1 hour; -1: never), with GC's rules and
	// GC's options (Grace at least MinGCGrace).
	GCInterval time.Duration
	GC         GCOptions
	// Metrics receives every partition's counters (default: the
	// Backend's own, see Backend.Metrics).
	Metrics *Metrics
	Logger  *slog.Logger
	// Now is the clock (default time.Now).
	Now func() time.Time
	// ReadReplica makes every tiered partition (remote.storage.enable=
	// true) a read replica of the bucket's (another cluster's partitions
	// under Prefix): served from the bucket alone, following its
	// manifests each task interval, writing nothing to the bucket (see
	// replica.go; a diskless topic's tail from the origin's WAL:
	// replica_wal.go); writes to it are refused, and Delete removes only
	// the replica's own files. Other partitions stay
	// local and writable (a broker's __consumer_offsets).
	ReadReplica bool
}

// Backend is a log directory whose topics with remote.storage.enable=true
// keep their closed segments in a bucket; it implements backend.Backend.
// Other topics are local (a *local.Log). A background service does
// Kafka's RemoteLogManager's work: it uploads the segments of the
// partitions this broker leads once they lie below the last stable offset,
// applies remote retention, follows the bucket as a follower, collects
// garbage, and serves remote reads through a bounded reader pool.
//
// Opening needs no bucket: with the bucket unreachable the Backend opens
// and serves local data, remote reads and uploads fail with a retryable
// backend.ErrStorage, and the service catches up when the bucket returns.
// A tiered partition neither uploads nor applies remote retention until the
// broker calls BecomeLeader on it.
type Backend struct {
	local *local.Backend
	store *objstore.Store
	// sealing is the store that seals (a seal.Driver's Sealing), nil when
	// Store has no key ring; plain, with a Store that seals only the
	// topics that ask (seal.Options.Selective), the plaintext one. See
	// storeFor.
	sealing, plain *objstore.Store
	prefix         string
	opts           BackendOptions
	logger         *slog.Logger
	metrics        *Metrics

	caches  *Caches
	quota   *Quota
	readers *ReaderPool

	mu     sync.Mutex
	parts  map[backend.TopicPartition]*Partition // the tiered partitions open
	closed bool
	// wal is the WAL writer of the diskless partitions, started with the
	// first of them and replaced once it halts (guarded by walMu, a
	// leaf); dlParts the diskless partitions its acknowledgements go to
	// (guarded by dlMu, a leaf).
	walMu     sync.Mutex
	wal       *wal.Writer
	walClosed bool // Close took the writer: no new one starts
	dlMu      sync.Mutex
	dlParts   map[wal.TopicPartition]*Partition

	svc *service
}

var _ backend.Backend = (*Backend)(nil)

// RemoteIndexCacheDir is where a Backend keeps fetched remote indexes, and
// the manifest parts it put or read, in its log directory (Kafka's name).
const RemoteIndexCacheDir = "remote-log-index-cache"

// OpenBackend opens (creating when needed) the log directory dir, locking
// it against a second process, and starts the tiering service. It reads no
// object: partitions attach to the bucket when first needed.
func OpenBackend(dir string, opts BackendOptions) (*Backend, error) {
	if opts.Store == nil {
		return nil, fmt.Errorf("tiered: OpenBackend: no store")
	}
	opts.Manager = opts.Manager.withDefaults()
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Metrics == nil {
		opts.Metrics = new(Metrics)
	}
	if opts.GCInterval == 0 {
		opts.GCInterval = time.Hour
	}
	opts.Local.RemoteStorage = true
	if opts.Local.Now == nil {
		opts.Local.Now = opts.Now
	}
	if opts.Local.Logger == nil {
		opts.Local.Logger = opts.Logger
	}
	lb, err := local.OpenBackend(dir, opts.Local)
	if err != nil {
		return nil, err
	}
	b := &Backend{local: lb, store: opts.Store, sealing: sealingStore(opts.Store), plain: plainStore(opts.Store), prefix: strings.Trim(opts.Prefix, "/"), opts: opts, logger: opts.Logger.With("logdir", dir),
		metrics: opts.Metrics, parts: map[backend.TopicPartition]*Partition{}, dlParts: map[wal.TopicPartition]*Partition{},
		caches: NewCaches(CacheOptions{IndexBytes: opts.IndexCacheBytes, ChunkBytes: opts.ChunkCacheBytes, ManifestBytes: opts.ManifestCacheBytes,
			IndexDir: filepath.Join(dir, RemoteIndexCacheDir), IndexDiskBytes: opts.Manager.IndexFileCacheBytes}),
		quota:   NewQuota(opts.Manager.CopyBytesPerSecond),
		readers: NewReaderPool(opts.Manager.ReaderThreads, opts.Manager.ReaderMaxPendingTasks)}
	b.svc = newService(b)
	// Read replicas share one listing of a WAL writer within half a
	// step's interval (replica_wal.go).
	b.caches.walLists.fresh = b.svc.cfg.TaskInterval / 2
	return b, nil
}

// sealingStore is the store of the objects store seals: store itself
// when it seals every object, nil when it seals none.
func sealingStore(store *objstore.Store) *objstore.Store {
	sd, err := seal.Sealed(store)
	switch {
	case err != nil:
		return nil
	case sd.Selective():
		return store.WithDriver(sd.Sealing())
	}
	return store
}

// plainStore is the store of the objects a store that seals only the
// topics that ask leaves in plaintext (nil for another store).
func plainStore(store *objstore.Store) *objstore.Store {
	if sd, err := seal.Sealed(store); err == nil && sd.Selective() {
		return store.WithDriver(sd.Inner())
	}
	return nil
}

// PartitionStore returns the store to read and write the partition
// under prefix through, for a tool that opens one partition: store
// itself, unless store seals only the topics that ask
// (seal.Options.Selective, a URL's seal=topics); then the sealing one
// when the partition's manifest is sealed, else the plaintext one, so
// that a partition keeps the kind it was created with. sealed says the
// partition's topic asks for sealing (remote.storage.seal.enable=true):
// a partition with no manifest yet is then created sealed, and one
// whose manifest is not sealed, or a store that cannot seal, is an
// ErrInvalidConfig.
func PartitionStore(ctx context.Context, store *objstore.Store, prefix string, sealed bool) (*objstore.Store, error) {
	return partitionStoreOf(ctx, store, plainStore(store), sealingStore(store), prefix, sealed)
}

// partitionStoreOf is PartitionStore with store's plaintext and sealing
// stores given (a Backend keeps them).
func partitionStoreOf(ctx context.Context, store, plain, sealing *objstore.Store, prefix string, sealed bool) (*objstore.Store, error) {
	refuse := func(why string) error {
		return &backend.ConfigError{Key: "remote.storage.seal.enable", Value: "true", Reason: prefix + ": " + why}
	}
	switch {
	case sealed && sealing == nil:
		return nil, refuse(fmt.Sprintf("the store %s has no key ring to seal with (give its URL key-file=PATH)", store.Name()))
	case plain == nil:
		return store, nil // every object sealed, or none
	}
	exists, isSealed, err := sealedPartition(ctx, plain, prefix)
	switch {
	case err != nil:
		return nil, err
	case isSealed || (sealed && !exists):
		return sealing, nil
	case sealed:
		return nil, refuse("the partition's manifest in the bucket is not sealed: a topic is sealed or not from its creation")
	}
	return plain, nil
}

// sealedPartition reads the first bytes of the manifest under prefix
// through plain to say whether there is one and whether it is sealed.
func sealedPartition(ctx context.Context, plain *objstore.Store, prefix string) (exists, sealed bool, err error) {
	key := manifest.NewLayout(prefix).Manifest()
	front, err := plain.ReadAll(ctx, key, 0, 8)
	switch {
	case errors.Is(err, objstore.ErrNotFound) && !errors.Is(err, objstore.ErrBucketNotFound):
		return false, false, nil
	case err != nil:
		return false, false, fmt.Errorf("tiered: %s: is the partition sealed? %w", key, err)
	}
	return true, seal.LooksSealed(front), nil
}

// partitionStore is the store of the partition under prefix, of the
// kind its manifest is (PartitionStore): what its topic config says may
// not be (a partition refused for it is still deleted).
func (b *Backend) partitionStore(ctx context.Context, prefix string) (*objstore.Store, error) {
	return partitionStoreOf(ctx, b.store, b.plain, b.sealing, prefix, false)
}

// storeFor is the store of a partition of a topic with cfg: the sealing
// one for a topic with remote.storage.seal.enable=true, or for every
// topic when Store seals every object.
func (b *Backend) storeFor(tp backend.TopicPartition, cfg backend.Config) (*objstore.Store, error) {
	switch {
	case b.sealing != nil && (cfg.SealEnable || b.plain == nil):
		return b.sealing, nil
	case b.plain != nil && b.opts.ReadReplica:
		// A read replica learns its topics from the bucket, not their
		// configs: it reads a partition of either kind (and writes
		// nothing), but a topic it is told is sealed.
		return b.store, nil
	case cfg.SealEnable:
		return nil, b.noKeyRing(tp.String() + ": ")
	case b.plain != nil:
		return b.plain, nil
	}
	return b.store, nil
}

// CheckConfig reports whether the Backend can hold a topic of cfg, as
// Open would refuse it before any I/O: remote.storage.seal.enable=true
// needs a store that can seal. A broker checks a topic config change
// with it before it applies it to the partitions (a local topic takes
// the change now and opens tiered later).
func (b *Backend) CheckConfig(cfg backend.Config) error {
	if cfg.SealEnable && b.sealing == nil {
		return b.noKeyRing("")
	}
	return nil
}

// noKeyRing refuses remote.storage.seal.enable=true on a Backend whose
// store cannot seal.
func (b *Backend) noKeyRing(what string) error {
	return &backend.ConfigError{Key: "remote.storage.seal.enable", Value: "true",
		Reason: what + "the bucket's store " + b.store.Name() + " has no key ring to seal with (give its URL key-file=PATH, with seal=topics to seal only the topics that ask; docs/operators.md, Sealed buckets)"}
}

// walStore is the store of the diskless WAL objects: they hold many
// topics' records, so a Backend that can seal seals them all.
func (b *Backend) walStore() *objstore.Store {
	if b.sealing != nil {
		return b.sealing
	}
	return b.store
}

// Store returns the bucket.
func (b *Backend) Store() *objstore.Store { return b.store }

// Local returns the local log directory underneath.
func (b *Backend) Local() *local.Backend { return b.local }

// Metrics returns the counters every tiered partition records into.
func (b *Backend) Metrics() *Metrics { return b.metrics }

// Caches returns the remote read caches the partitions share.
func (b *Backend) Caches() *Caches { return b.caches }

// Readers returns the remote reader pool the partitions share.
func (b *Backend) Readers() *ReaderPool { return b.readers }

// PartitionPrefix is the key prefix of tp's objects.
func (b *Backend) PartitionPrefix(tp backend.TopicPartition) string {
	return manifest.PartitionLayout(b.prefix, tp.Topic, tp.Partition).Prefix()
}

// Partitions lists the partitions in the log directory; see
// backend.Backend.
func (b *Backend) Partitions(ctx context.Context) ([]backend.TopicPartition, error) {
	return b.local.Partitions(ctx)
}

// Open returns the partition, opening or creating it: a *Partition when
// cfg has remote.storage.enable=true, else the *local.Log. Opening an open
// partition returns the same one with cfg applied; a local topic whose
// config turns remote storage on becomes tiered from then on (its old
// segments upload once below the last stable offset), while a tiered one
// cannot turn it off (Kafka refuses that too).
func (b *Backend) Open(ctx context.Context, topic string, partition int32, cfg backend.Config) (backend.Partition, error) {
	bp, replica, err := b.open(ctx, backend.TopicPartition{Topic: topic, Partition: partition}, cfg)
	if err != nil || replica == nil {
		return bp, err
	}
	// A read replica opened now catches up (if the bucket answers; else at
	// its first read or lookup, or the service's next step: until then it
	// answers with a retryable storage error). Outside Backend.mu: its
	// requests must not hold up Close, or other Opens, for a store's bound.
	err = replica.Attach(ctx)
	if err == nil {
		err = replica.ReplicaStep(ctx)
	}
	if errors.Is(err, backend.ErrClosed) {
		return nil, err // closed meanwhile: by Close, or a Delete
	}
	if err != nil {
		b.opts.Logger.Warn("read replica: could not follow the bucket at open; the service tries again", "partition", replica.prefix, "err", err)
	}
	return bp, nil
}

// open is Open under Backend.mu; replica is the read replica it opened
// (nil: none, or open already), for Open to catch up.
func (b *Backend) open(ctx context.Context, tp backend.TopicPartition, cfg backend.Config) (_ backend.Partition, replica *Partition, _ error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	prev := b.parts[tp]
	bp, err := b.openLocked(ctx, tp, cfg)
	if err != nil {
		return nil, nil, err
	}
	if p, ok := bp.(*Partition); ok && p != prev && p.opts.ReadReplica {
		replica = p
	}
	return bp, replica, nil
}

// openLocked opens tp (see Open). REQUIRES: b.mu.
func (b *Backend) openLocked(ctx context.Context, tp backend.TopicPartition, cfg backend.Config) (backend.Partition, error) {
	if b.closed {
		return nil, fmt.Errorf("%w: tiered backend %s", backend.ErrClosed, b.local.Dir())
	}
	if p, ok := b.parts[tp]; ok && !p.closed.Load() {
		// An offline partition (rollback.go) stays open, refusing: its
		// SetConfig returns why.
		if err := p.SetConfig(cfg); err != nil {
			return nil, err
		}
		return p, nil
	}
	if cfg.DisklessEnable {
		cfg.RemoteStorageEnable = true // implied: a diskless topic's segments consolidate into the bucket
	}
	// Before the log takes cfg: a refused sealing leaves an open log as
	// it was.
	var store *objstore.Store
	if cfg.RemoteStorageEnable || cfg.SealEnable {
		var err error
		if store, err = b.storeFor(tp, cfg); err != nil {
			return nil, err
		}
	}
	l, err := b.local.OpenLog(ctx, tp.Topic, tp.Partition, cfg)
	if err != nil {
		return nil, err
	}
	if isReplicaDir(l.Dir()) && (!b.opts.ReadReplica || !cfg.RemoteStorageEnable) {
		// A read replica's copy of another cluster's records: never a
		// partition's own.
		dir := l.Dir()
		l.Close()
		return nil, fmt.Errorf("%w: %s holds a read replica's copy of another cluster's records (%s): open it as a read replica, or remove the directory %s "+
			"(only a copy: Delete would delete the partition in the bucket this Backend is given)",
			backend.ErrInvalidConfig, tp, ReplicaMarker, dir)
	}
	if !cfg.RemoteStorageEnable {
		return l, nil
	}
	opts := b.partitionOptions(tp)
	opts.Store = store
	if b.plain != nil {
		opts.selective = &selectiveSeal{sealed: opts.Store == b.sealing, either: b.store}
	}
	if opts.ReadReplica {
		if o := l.Offsets(); o.LogEnd > o.LogStart && !isReplicaDir(l.Dir()) {
			l.Close()
			return nil, fmt.Errorf("%w: %s holds records of its own (offsets %d to %d): a read replica serves the bucket's; delete the partition first",
				backend.ErrInvalidConfig, tp, o.LogStart, o.LogEnd-1)
		}
	}
	if cfg.DisklessEnable && !opts.ReadReplica {
		// A read replica follows the origin's WAL (replica_wal.go); it
		// has no writer.
		if opts.dl, err = b.disklessLocked(tp); err != nil {
			l.Close()
			return nil, err
		}
	}
	p, err := Open(ctx, l, opts)
	if err != nil {
		if opts.dl != nil {
			opts.dl.closed()
		}
		return nil, err
	}
	if opts.dl != nil {
		b.dlMu.Lock()
		b.dlParts[opts.dl.tp] = p
		b.dlMu.Unlock()
	}
	b.parts[tp] = p
	return p, nil
}

// disklessLocked is the WAL state of a diskless partition tp, the
// Backend's writer started if it was not. REQUIRES: b.mu.
func (b *Backend) disklessLocked(tp backend.TopicPartition) (*diskless, error) {
	w, err := b.walWriter()
	if err != nil {
		return nil, err
	}
	d := &diskless{tp: walTP(tp), renew: b.walWriter}
	d.w.Store(w)
	d.closed = func() {
		b.dlMu.Lock()
		if b.dlParts[d.tp] != nil && b.dlParts[d.tp].dl == d {
			delete(b.dlParts, d.tp)
		}
		b.dlMu.Unlock()
	}
	return d, nil
}

// walWriter is the Backend's WAL writer: started with its first diskless
// partition, and started anew once it has halted (wal.ErrHalted: it
// could not learn what the bucket holds at one of its numbers). Each
// diskless partition moves to the new one at its next leader change
// (claimLocked), which claims the partition for it. Guarded by walMu.
func (b *Backend) walWriter() (*wal.Writer, error) {
	b.walMu.Lock()
	defer b.walMu.Unlock()
	if b.walClosed {
		return nil, fmt.Errorf("%w: the Backend is closed: no WAL writer starts", backend.ErrClosed)
	}
	old := b.wal
	if old != nil && old.Halted() == nil {
		return old, nil
	}
	var w *wal.Writer
	var ready sync.WaitGroup // the callback's w is set before any append settles
	ready.Add(1)
	w, err := wal.NewWriter(b.walStore(), wal.Options{Root: b.prefix, CommitInterval: b.opts.Manager.DisklessCommitInterval,
		BufferMaxBytes: b.opts.Manager.DisklessBufferMaxBytes, InFlight: min(b.opts.Manager.DisklessUploadsInFlight, wal.MaxInFlight),
		Logger: b.logger, OnSettled: func(tp wal.TopicPartition, loc wal.Location, err error) {
			ready.Wait()
			b.settled(w, tp, loc, err)
		}})
	ready.Done()
	if err != nil {
		return nil, err
	}
	b.wal = w
	if old == nil {
		b.logger.Info("diskless: WAL writer started", "writer", w.ID(), "prefix", w.Layout().Prefix())
		return w, nil
	}
	// The halted writer needs no Close: it takes nothing more, and its
	// goroutines end once what it had in flight has settled.
	b.metrics.WALWritersHalted.Add(1)
	b.logger.Warn("diskless: WAL writer started in place of one that halted; its partitions are claimed for the new one",
		"writer", w.ID(), "halted", old.ID(), "err", old.Halted())
	return w, nil
}

// settled passes the WAL writer from's word on a partition's appends to
// it, unless the partition has moved to another writer since.
func (b *Backend) settled(from *wal.Writer, tp wal.TopicPartition, loc wal.Location, err error) {
	b.dlMu.Lock()
	p := b.dlParts[tp]
	b.dlMu.Unlock()
	if p != nil {
		p.settled(from, loc, err)
	}
}

// partitionOptions are the Options of tp's Partition: shared caches,
// quota, reader pool and metrics, opened without the bucket and with no
// role until the broker gives one.
func (b *Backend) partitionOptions(tp backend.TopicPartition) Options {
	return Options{Store: b.store, Prefix: b.PartitionPrefix(tp), Caches: b.caches, UploadQuota: b.quota, Readers: b.readers,
		Metrics: b.metrics, Logger: b.opts.Logger.With("partition", tp.String()), Now: b.opts.Now,
		PrefetchBytes: b.opts.PrefetchBytes, CommitWindow: b.opts.CommitWindow, OpenWithoutBucket: true, noRole: true,
		onWork: b.svc.wake, ReadReplica: b.opts.ReadReplica, walStore: b.walStore()}
}

// TieredPartitions returns the tiered partitions open now, and forgets
// those the broker closed (the service asks every TaskInterval, so a
// closed partition is held no longer than that).
func (b *Backend) TieredPartitions() []*Partition {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]*Partition, 0, len(b.parts))
	for tp, p := range b.parts {
		switch {
		case p.closed.Load():
			delete(b.parts, tp)
		case p.Offline() == nil:
			out = append(out, p)
		}
		// An offline partition (rollback.go) has no work until it is
		// reopened: it deletes and uploads nothing.
	}
	return out
}

// Delete closes the partition and removes its data. A tiered partition's
// bucket data goes too (KIP-405's partition deletion): first its manifest
// is committed as deleted, so no writer can commit over it and a crash
// leaves a deletion to finish rather than a partition; then the local
// directory and the objects under its prefix (the deleted manifest stays,
// see removeObjects). The bucket is read first (one GET): with it
// unreachable Delete fails with a retryable backend.ErrStorage and removes
// nothing. A read replica's Delete (BackendOptions.ReadReplica) removes
// only its own files.
func (b *Backend) Delete(ctx context.Context, topic string, partition int32) error {
	tp := backend.TopicPartition{Topic: topic, Partition: partition}
	if _, err := local.PartitionDirName(topic, partition); err != nil {
		return err
	}
	if b.opts.ReadReplica {
		// The bucket is the origin's: a replica forgets its own copy of
		// the partition (its local files) and touches nothing there.
		b.mu.Lock()
		p := b.parts[tp]
		delete(b.parts, tp)
		b.mu.Unlock()
		if p != nil {
			p.Close()
		}
		return b.local.Delete(ctx, topic, partition)
	}
	b.mu.Lock()
	p := b.parts[tp]
	delete(b.parts, tp)
	b.mu.Unlock()
	prefix := b.PartitionPrefix(tp)
	epoch := int32(0)
	if p != nil {
		epoch = p.epoch.Load()
		p.Close()
	}
	// The bucket first: it must say deleted before anything goes. The
	// head alone tells (a part lost does not stop a deletion).
	store, err := b.partitionStore(ctx, prefix)
	if err != nil {
		return storageError(ctx, fmt.Errorf("tiered: delete %s: cannot tell whether the bucket holds it: %w", tp, err))
	}
	ps := &Partition{store: store, prefix: prefix}
	h, etag, err := ps.readHead(ctx)
	if err != nil {
		return storageError(ctx, fmt.Errorf("tiered: delete %s: cannot tell whether the bucket holds it: %w", tp, err))
	}
	tiered := etag != ""
	wasDeleted, gen := false, uint64(0)
	if tiered {
		wasDeleted, gen = h.Deleted(), h.Generation()
	}
	if tiered {
		if gen, err = b.markDeleted(ctx, store, prefix, epoch); err != nil {
			return fmt.Errorf("tiered: delete %s: %w", tp, err)
		}
	}
	lerr := b.local.Delete(ctx, topic, partition)
	if lerr != nil && !errors.Is(lerr, backend.ErrNotFound) {
		return lerr
	}
	if tiered {
		// A Delete repeated after one that could not remove every object
		// (the manifest was deleted already) finishes the job.
		if err := b.removeObjects(ctx, store, prefix, gen); err != nil {
			return fmt.Errorf("tiered: delete %s: the partition is deleted, but not all its objects yet (a later Delete finishes): %w", tp, err)
		}
		if !wasDeleted {
			return nil // the bucket held the partition even if no local log did
		}
	}
	return lerr
}

// markDeleted commits the manifest under prefix as deleted and returns
// its generation.
func (b *Backend) markDeleted(ctx context.Context, store *objstore.Store, prefix string, epoch int32) (uint64, error) {
	ps := &Partition{store: store, prefix: prefix}
	for attempt := 0; ; attempt++ {
		h, etag, err := ps.readHead(ctx)
		if err != nil {
			return 0, storageError(ctx, err)
		}
		if etag == "" {
			return 0, nil
		}
		if h.Deleted() {
			return h.Generation(), nil
		}
		next := &manifest.Manifest{Generation: h.Generation() + 1, WriterEpoch: max(h.WriterEpoch(), epoch), Deleted: true,
			LogStartOffset: max(h.LogStartOffset(), h.LastOffset()+1), Lineage: h.Lineage()}
		data, err := next.Encode()
		if err != nil {
			return 0, err
		}
		_, err = store.Put(ctx, ps.layout().Manifest(), bytes.NewReader(data), int64(len(data)), objstore.PutOptions{IfMatch: etag})
		if err == nil {
			b.logger.Info("partition marked deleted in the bucket", "prefix", prefix, "generation", next.Generation)
			return next.Generation, nil
		}
		if !errors.Is(err, objstore.ErrPreconditionFailed) || attempt >= 5 {
			return 0, storageError(ctx, err)
		}
	}
}

// removeObjects deletes every object under a deleted partition's prefix
// (its manifest backups too: no incarnation restores another's) but its
// manifest, which stays as the deletion's record: a writer from
// before the deletion finds it and is refused, while a new, empty
// partition of the same name starts over from it (see claimLocked).
//
// gen is the deleted manifest's generation. The manifest is read again
// after the listing: if it moved on, a new partition of the same name
// claimed it, and the listing may hold its objects; nothing is removed
// then (the new partition's gc removes what the deleted one left). A new
// partition claims before it uploads, so an object of it in the listing
// means its claim is visible to the second read.
func (b *Backend) removeObjects(ctx context.Context, store *objstore.Store, prefix string, gen uint64) error {
	var keys []string
	l := manifest.NewLayout(prefix)
	manifestKey := l.Manifest()
	if err := store.List(ctx, l.ListPrefix(), func(o objstore.ObjectInfo) bool {
		if o.Key != manifestKey {
			keys = append(keys, o.Key)
		}
		return true
	}); err != nil {
		return err
	}
	ps := &Partition{store: store, prefix: prefix}
	h, etag, err := ps.readHead(ctx)
	if err != nil {
		return err
	}
	if etag == "" || !h.Deleted() || h.Generation() != gen {
		now := uint64(0)
		if h != nil {
			now = h.Generation()
		}
		b.logger.Info("a new partition of the deleted one's name claimed the bucket; its gc removes what is left", "prefix", prefix,
			"deleted_generation", gen, "generation", now)
		return nil
	}
	return store.Delete(ctx, keys...)
}

// Close stops the service (an upload in flight is cancelled and removes
// what it left, or leaves its intent naming it for gc), closes every
// partition and writes the log directory's checkpoints and clean-shutdown
// marker.
func (b *Backend) Close() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	parts := b.parts
	b.mu.Unlock()
	b.walMu.Lock()
	w := b.wal
	b.walClosed = true
	b.walMu.Unlock()
	b.svc.stop()
	var errs []error
	if w != nil {
		// What the diskless partitions appended goes to the bucket
		// first, within the store's bound.
		ctx, cancel := context.WithTimeout(context.Background(), b.store.Bound())
		if err := w.Close(ctx); err != nil {
			errs = append(errs, fmt.Errorf("tiered: close the WAL writer: %w", err))
		}
		cancel()
	}
	for tp, p := range parts {
		if err := p.Close(); err != nil {
			errs = append(errs, fmt.Errorf("tiered: close %s: %w", tp, err))
		}
	}
	errs = append(errs, b.local.Close())
	b.caches.clear()
	return errors.Join(errs...)
}
