package tiered

import (
	"context"

	"github.com/tierlog/tierlog/manifest"
)

// CacheStats reports the remote caches' hits and misses.
type CacheStats struct {
	ChunkHits, ChunkMisses int64
	IndexHits, IndexMisses int64
	// ManifestHits and ManifestMisses count lookups of manifest parts'
	// segments (a miss reads the part from the disk cache or the bucket).
	ManifestHits, ManifestMisses int64
}

// CacheStats returns the counters of the caches the partition uses
// (shared with other partitions when Options.Caches was set).
func (p *Partition) CacheStats() CacheStats { return p.caches.Stats() }

// readAhead is a read-ahead in flight: the range [start, end) of the
// object key; done closes when it has landed in the chunk cache (or
// failed).
type readAhead struct {
	key        objectKey
	start, end int64
	done       chan struct{}
}

// prefetch reads ahead of a sequential consumer into the chunk cache, in
// the background, one read-ahead at a time: when the ranges cached after
// end of seg (and on into the next segment) do not hold want bytes, the
// next read's window (the window of the read that calls it), it fetches
// the range after them. The range is Options.PrefetchBytes, or two
// windows when that is larger, up to a quarter of the chunk cache: a
// consumer whose fetches are larger than the read-ahead (kgo's 4 MiB
// FetchMaxPartitionBytes against the 1 MiB default) would otherwise find
// too little cached, fetch its whole window again and discard the
// read-ahead's bytes. Two windows, not one: a read's window begins an
// index entry before its offset, inside the range the last read-ahead
// fetched, so a range of one window would make every read join (copy)
// two ranges; of two, every other read. It runs on an idle reader of the pool only: under
// load (every reader busy, reads queued) it is skipped, since the
// consumers' own reads keep the store busy and read-ahead would add
// requests and evict ranges not yet read. Close cancels it and waits for
// it.
func (p *Partition) prefetch(v view, seg manifest.Segment, end, want int64) {
	if p.opts.PrefetchBytes <= 0 || p.closed.Load() || !p.prefetching.CompareAndSwap(false, true) {
		return
	}
	key := p.objectKey(seg, manifest.LogSuffix)
	from := p.caches.chunks.reach(key, end)
	cached := from - end
	if from >= seg.Size {
		// The next segment, if the head or a part in memory has it: a
		// read-ahead loads no part.
		next, ok := p.cachedAfter(v.head, seg.LastOffset)
		if !ok || !v.inBucket(next.BaseOffset) {
			p.prefetching.Store(false)
			return
		}
		seg, key = next, p.objectKey(next, manifest.LogSuffix)
		from = p.caches.chunks.reach(key, 0)
		cached += from
	}
	if cached >= want || from >= seg.Size {
		p.prefetching.Store(false)
		return
	}
	release, ok := p.opts.Readers.tryAcquire()
	if !ok {
		p.prefetching.Store(false)
		return
	}
	n := min(seg.Size-from, max(p.opts.PrefetchBytes, min(2*want, p.caches.chunks.lru.max/4)))
	a := &readAhead{key: key, start: from, end: from + n, done: make(chan struct{})}
	p.ahead.Store(a)
	p.bg.Add(1)
	ahead := seg // the read-ahead's own copy: seg stays on the reader's stack
	go func() {
		defer p.bg.Done()
		defer p.prefetching.Store(false)
		defer release()
		ctx, cancel := context.WithTimeout(p.closing, p.store.Timeout())
		defer cancel()
		if data, err := p.store.ReadAll(ctx, key.String(), from, n); err == nil {
			p.caches.chunks.put(key, from, chunk{data: data}) // not walked: it starts anywhere
			p.prefetched.Add(1)
		}
		p.ahead.CompareAndSwap(a, nil)
		close(a.done)  // a read waiting for the range looks in the cache again
		if from == 0 { // a new segment: its index too
			p.remoteIndex(ctx, ahead, manifest.IndexSuffix)
		}
	}()
}
