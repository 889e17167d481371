package tiered

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"unsafe"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/internal/ratelimit"
	"github.com/tierlog/tierlog/manifest"
	"github.com/tierlog/tierlog/wal"
)

// What a broker's tiered partitions share: the remote read caches, the
// upload quota and the remote reader pool. A Backend makes one of each and
// hands them to every partition it opens, so memory, upload bandwidth and
// concurrent remote reads are bounded per broker, not per partition. A
// Partition opened without them makes its own.

// Caches are the remote read caches: remote indexes (in memory and,
// optionally, on disk) and ranges of remote .log objects. Keys are object
// keys, which name their partition and upload, so partitions share one
// safely.
type Caches struct {
	indexes *lru[objectKey, cachedIndex] // remote index objects
	disk    *diskCache                   // nil: none
	chunks  *rangeCache
	// parts are manifest parts' live segments (see segs.go): a
	// partition keeps its manifest's head only.
	parts *lru[partKey, []manifest.Segment]
	// dirs are large parts' block directories, by object (dirKey).
	dirs *lru[partKey, []manifest.Block]
	// footers are WAL objects' footers a read replica read, by key;
	// walLists the listings of WAL writers it follows (replica_wal.go).
	footers  *lru[string, wal.Footer]
	walLists walLists
}

// CacheOptions size Caches.
type CacheOptions struct {
	// IndexBytes bounds the remote indexes kept in memory (default 64 MiB).
	IndexBytes int64
	// ChunkBytes bounds the ranges of remote .log objects kept in memory,
	// so repeated and read-ahead reads cost no GET (default 64 MiB; -1
	// disables it, and read-ahead with it). Read-ahead fetched and not
	// yet read takes at most half of it, each read-ahead a quarter.
	ChunkBytes int64
	// IndexDir, when set, keeps fetched remote indexes, and the manifest
	// parts put or read, on disk too, within IndexDiskBytes (default 1
	// GiB, Kafka's remote.log.index.file.cache.total.size.bytes), so a
	// restarted broker does not fetch them again. The files are written
	// behind the reads (up to 16 MiB waits; a put past that is dropped):
	// whoever made the Caches calls Flush before the process exits.
	IndexDir       string
	IndexDiskBytes int64
	// ManifestBytes bounds the manifest parts' segments kept in memory
	// (default 64 MiB): a partition keeps its manifest's head (a few KiB
	// at any length), and the segments of its parts only while they are
	// in here.
	ManifestBytes int64
	// WALFooterBytes bounds the WAL objects' footers read replicas of
	// diskless topics keep (default 32 MiB; a footer naming 10,000
	// partitions takes about 1 MiB), so each footer is read once for all
	// the partitions it names. Nothing else uses it.
	WALFooterBytes int64
}

// NewCaches returns empty caches sized by o.
func NewCaches(o CacheOptions) *Caches {
	if o.IndexBytes <= 0 {
		o.IndexBytes = 64 << 20
	}
	if o.ChunkBytes == 0 {
		o.ChunkBytes = 64 << 20
	}
	// An offset index's parsed view adds its summary (one key per 32
	// entries, about 3% of the bytes), not counted.
	if o.ManifestBytes <= 0 {
		o.ManifestBytes = 64 << 20
	}
	if o.WALFooterBytes <= 0 {
		o.WALFooterBytes = 32 << 20
	}
	c := &Caches{indexes: newLRU[objectKey](o.IndexBytes, func(c cachedIndex) int64 { return int64(len(c.data)) }, nil),
		chunks: newRangeCache(o.ChunkBytes), parts: newLRU[partKey](o.ManifestBytes, partBytes, nil),
		dirs:    newLRU[partKey](max(o.ManifestBytes/8, 1<<20), func(b []manifest.Block) int64 { return 64 + int64(len(b))*int64(unsafe.Sizeof(manifest.Block{})) }, nil),
		footers: newLRU[string](o.WALFooterBytes, footerBytes, nil)}
	if o.IndexDir != "" {
		if o.IndexDiskBytes <= 0 {
			o.IndexDiskBytes = 1 << 30
		}
		c.disk = openDiskCache(o.IndexDir, o.IndexDiskBytes)
	}
	return c
}

// Stats returns the caches' hit and miss counters.
func (c *Caches) Stats() CacheStats {
	return CacheStats{
		ChunkHits: c.chunks.lru.hits.Load(), ChunkMisses: c.chunks.lru.misses.Load(),
		IndexHits: c.indexes.hits.Load(), IndexMisses: c.indexes.misses.Load(),
		ManifestHits: c.parts.hits.Load(), ManifestMisses: c.parts.misses.Load(),
		ReadAheadWastedBytes: c.chunks.wasted.Load(), ReadJoinedBytes: c.chunks.joined.Load(),
	}
}

// ManifestBytes returns about how many bytes the manifest parts'
// segments held in memory take.
func (c *Caches) ManifestBytes() int64 {
	c.parts.mu.Lock()
	defer c.parts.mu.Unlock()
	return c.parts.size
}

// Bytes returns the bytes the in-memory caches hold now.
func (c *Caches) Bytes() (indexes, chunks int64) {
	c.indexes.mu.Lock()
	indexes = c.indexes.size
	c.indexes.mu.Unlock()
	c.chunks.lru.mu.Lock()
	chunks = c.chunks.lru.size
	c.chunks.lru.mu.Unlock()
	return indexes, chunks
}

// Flush waits until the disk cache (CacheOptions.IndexDir) has written
// what was put in it so far, so a restart finds it. A Backend flushes its
// Caches when it closes, and a partition the caches it made; a broker
// that made Caches with NewCaches and handed them to partitions calls
// Flush after it closed them.
func (c *Caches) Flush() { c.disk.flush() }

// clear drops everything held in memory, after the disk cache's writes.
func (c *Caches) clear() {
	c.Flush()
	c.indexes.clear()
	c.chunks.lru.clear()
	c.parts.clear()
	c.dirs.clear()
	c.footers.clear()
}

// segmentBytes is about what one decoded segment holds in memory: the
// struct and a one-entry epoch map.
const segmentBytes = int64(unsafe.Sizeof(manifest.Segment{})) + int64(unsafe.Sizeof(manifest.EpochStart{})) + 8

// partBytes is about what a part's segments hold in memory.
func partBytes(segs []manifest.Segment) int64 { return 64 + int64(len(segs))*segmentBytes }

// Quota is an upload byte rate shared by every partition that holds it:
// Kafka's remote.log.manager.copy.max.bytes.per.second, one broker-wide
// cap.
type Quota struct {
	lim *ratelimit.Limiter // nil: no cap
}

// NewQuota returns a quota of bytesPerSecond (<= 0: no cap).
func NewQuota(bytesPerSecond int64) *Quota { return &Quota{lim: ratelimit.New(bytesPerSecond)} }

// ErrRemoteReadsBusy means a remote read found the reader pool and its
// queue full (Kafka's remote.log.reader.max.pending.tasks): it was not
// attempted. It matches backend.ErrStorage (KAFKA_STORAGE_ERROR, which
// clients retry); Kafka answers UNKNOWN_SERVER_ERROR here.
var ErrRemoteReadsBusy = errors.New("tiered: remote reader pool and queue full")

// ReaderPool bounds the remote reads in flight (Kafka's
// remote.log.reader.threads) and those waiting for one
// (remote.log.reader.max.pending.tasks): a burst of cold fetches queues,
// and past the queue fails at once, instead of opening a GET each and
// holding their bytes at the same time.
type ReaderPool struct {
	slots      chan struct{}
	waiting    atomic.Int64 // reads in flight or queued
	maxWaiting int64
	rejected   atomic.Int64
	release    func() // returns a reader; made once, so taking one allocates nothing
}

// NewReaderPool returns a pool of threads concurrent remote reads with
// maxPending more queued (defaults, for values <= 0: Kafka's 10 and 100).
func NewReaderPool(threads, maxPending int) *ReaderPool {
	if threads <= 0 {
		threads = 10
	}
	if maxPending <= 0 {
		maxPending = 100
	}
	r := &ReaderPool{slots: make(chan struct{}, threads), maxWaiting: int64(threads + maxPending)}
	r.release = func() { <-r.slots; r.waiting.Add(-1) }
	return r
}

// acquire takes a reader, queueing while all are busy; it fails with
// ErrRemoteReadsBusy when the queue is full too, and with ctx's error when
// ctx ends first. release returns the reader.
func (r *ReaderPool) acquire(ctx context.Context) (release func(), err error) {
	if r == nil {
		return func() {}, nil
	}
	if r.waiting.Add(1) > r.maxWaiting {
		r.waiting.Add(-1)
		r.rejected.Add(1)
		return nil, fmt.Errorf("%w: %w (%d reading, %d queued)", backend.ErrStorage, ErrRemoteReadsBusy, cap(r.slots), r.maxWaiting-int64(cap(r.slots)))
	}
	select {
	case r.slots <- struct{}{}:
		return r.release, nil
	case <-ctx.Done():
		r.waiting.Add(-1)
		return nil, ctx.Err()
	}
}

// tryAcquire takes a reader only if one is idle and no read waits for
// one: read-ahead uses it, so that it runs on spare capacity only and
// never delays a read a consumer waits on (under load, every reader is
// busy with those, and read-ahead would only add requests). A nil pool
// always has room.
func (r *ReaderPool) tryAcquire() (release func(), ok bool) {
	if r == nil {
		return func() {}, true
	}
	if r.waiting.Add(1) > int64(cap(r.slots)) {
		r.waiting.Add(-1)
		return nil, false
	}
	select {
	case r.slots <- struct{}{}:
		return r.release, true
	default:
		r.waiting.Add(-1)
		return nil, false
	}
}

// ReaderStats says how busy a pool is.
type ReaderStats struct {
	Reading, Queued int
	Rejected        int64 // reads refused with ErrRemoteReadsBusy, ever
}

// Stats returns the pool's load now.
func (r *ReaderPool) Stats() ReaderStats {
	reading := len(r.slots)
	return ReaderStats{Reading: reading, Queued: max(int(r.waiting.Load())-reading, 0), Rejected: r.rejected.Load()}
}
