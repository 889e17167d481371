package tiered

import (
	"context"
	"math"
	"sort"

	"github.com/tierlog/tierlog/manifest"
)

// CacheStats reports the remote caches' hits and misses.
type CacheStats struct {
	ChunkHits, ChunkMisses int64
	IndexHits, IndexMisses int64
	// ManifestHits and ManifestMisses count lookups of manifest parts'
	// segments (a miss reads the part from the disk cache or the bucket).
	ManifestHits, ManifestMisses int64
	// ReadAheadWastedBytes counts the bytes read ahead that no read
	// reached before they were evicted, or fetched again by a read: a
	// chunk cache too small for the partitions reading side by side.
	ReadAheadWastedBytes int64
	// ReadJoinedBytes counts the bytes copied to answer reads that
	// crossed from one cached range into the next where the first did
	// not end at a batch's end (a read-ahead that could not start at a
	// batch: see rangeCache.aheadFrom). Such reads are answered from a
	// new buffer, not from the cache in place.
	ReadJoinedBytes int64
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
// the range after them, from a batch's start where the cache knows one
// (rangeCache.aheadFrom: then the range is walked as it lands, and a read
// crossing into it finds a batch's end where it starts), readAheadBytes
// long and within the cache's read-ahead budget (rangeCache.reserveAhead:
// half the cache for the bytes read ahead and not yet read, of every
// partition sharing it). It runs on an idle reader of the pool only:
// under load (every reader busy, reads queued) it is skipped, since the
// consumers' own reads keep the store busy and read-ahead would add
// requests and evict ranges not yet read. Close cancels it and waits for
// it.
func (p *Partition) prefetch(v view, seg manifest.Segment, end, want int64) {
	if p.opts.PrefetchBytes <= 0 || p.closed.Load() || !p.prefetching.CompareAndSwap(false, true) {
		return
	}
	chunks := p.caches.chunks
	key := p.objectKey(seg, manifest.LogSuffix)
	from, atBatch := chunks.aheadFrom(key, end)
	cached := from - end // < 0: it starts at the batch a window cut, before end
	if from >= seg.Size {
		// The next segment, if the head or a part in memory has it: a
		// read-ahead loads no part.
		next, ok := p.cachedAfter(v.head, seg.LastOffset)
		if !ok || !v.inBucket(next.BaseOffset) {
			p.prefetching.Store(false)
			return
		}
		seg, key = next, p.objectKey(next, manifest.LogSuffix)
		from, atBatch = chunks.aheadFrom(key, 0)
		cached += from
	}
	n, enough := readAheadBytes(want, cached, seg.Size-from, p.opts.PrefetchBytes, chunks.lru.max)
	if n == 0 {
		p.prefetching.Store(false)
		return
	}
	if atBatch {
		// Ending where a batch starts, so that the next starts there
		// with nothing fetched twice, where the index shows one (the
		// budget below may still cut it).
		n = p.toIndexedBatch(seg, from, n, enough, min(seg.Size-from, chunks.lru.max/4))
	}
	release, ok := p.opts.Readers.tryAcquire()
	if !ok {
		p.prefetching.Store(false)
		return
	}
	if n = chunks.reserveAhead(n); n < enough {
		// The budget left could not serve the next read.
		chunks.releaseAhead(n)
		release()
		p.prefetching.Store(false)
		return
	}
	a := &readAhead{key: key, start: from, end: from + n, done: make(chan struct{})}
	p.ahead.Store(a)
	p.bg.Add(1)
	ahead := seg // the read-ahead's own copy: seg stays on the reader's stack
	go func() {
		defer p.bg.Done()
		defer release()
		ctx, cancel := context.WithTimeout(p.closing, p.store.Timeout())
		defer cancel()
		if data, err := p.store.ReadAll(ctx, key.String(), from, n); err == nil {
			ch := chunk{data: data, atBatch: atBatch}
			if atBatch {
				// Walked as a read's window is, off the read's path: the
				// reads find its batches read and checked, and the next
				// read-ahead starts at a batch too.
				ch.batches = walkBatches(data, ahead, key, from)
			}
			chunks.putAhead(key, from, ch, n)
			p.prefetched.Add(1)
		} else {
			chunks.releaseAhead(n)
		}
		p.ahead.CompareAndSwap(a, nil)
		// Done before the reads hear of it: a read woken by done (or
		// finding the range cached) asks for the next read-ahead at
		// once, and found this one still running, so it was skipped and
		// the read after fetched its whole window again, the cached
		// part too. The index below may overlap the next read-ahead.
		p.prefetching.Store(false)
		close(a.done)  // a read waiting for the range looks in the cache again
		if from == 0 { // a new segment: its index too
			p.remoteIndex(ctx, ahead, manifest.IndexSuffix)
		}
	}()
}

// toIndexedBatch returns how many bytes of seg's .log from pos a
// read-ahead of n bytes, which must fetch at least enough and may fetch up
// to limit, fetches so that they end where a batch starts: at the last
// entry of the segment's remote offset index within n bytes (an entry's
// position is its append's first batch's), or, when that leaves fewer
// than enough (batches larger than the reader's window), at the first
// entry or the segment's end past enough, within limit. It is n when the
// index is not cached (a read-ahead fetches none), when n reaches the
// segment's end, when limit reaches past an index's int32 positions, or
// when no entry serves.
func (p *Partition) toIndexedBatch(seg manifest.Segment, pos, n, enough, limit int64) int64 {
	if pos+n >= seg.Size || pos+limit > math.MaxInt32 {
		return n
	}
	c, ok := p.caches.indexes.peek(p.objectKey(seg, manifest.IndexSuffix))
	if !ok || c.offsets == nil {
		return n
	}
	oi := c.offsets
	if e, ok := oi.LookupPosition(int32(pos + n)); ok && int64(e.Position)-pos >= enough {
		return int64(e.Position) - pos
	}
	// The first entry at or past enough.
	next := sort.Search(oi.Entries(), func(i int) bool { return int64(oi.Entry(i).Position) >= pos+enough })
	end := seg.Size
	if next < oi.Entries() {
		end = int64(oi.Entry(next).Position)
	}
	if m := end - pos; m >= enough && m <= limit {
		return m
	}
	return n
}

// readAheadBytes is how much a read-ahead fetches (n) after a read whose
// window was want bytes, when cached bytes after the read are cached
// already and left bytes of the object follow them; prefetch is
// Options.PrefetchBytes and cache the chunk cache's size, and the fewest
// bytes that would serve the next read (enough). n is 0 when the
// cache holds the next read's window already, or when what it could
// fetch would not serve that read: a read takes its window from the
// cache only when half of it is there (window), so a read-ahead that
// cannot reach half the window would be fetched again. A window ends at
// its object's end: near it, want is what is left.
//
// Otherwise n is prefetch, or two windows when that is larger (a
// consumer fetching 4 MiB a partition, against the 1 MiB default, would
// otherwise find too little cached, fetch its whole window again and
// discard the read-ahead's bytes), up to a quarter of the cache and what
// is left of the object. Two windows, not one: a read's window begins an
// index entry before its offset, inside the range the last read-ahead
// fetched, so with ranges of one window every read would cross from one
// range into the next (answered in two pieces, or copied into one window
// where no batch is known to end there); with two, every other read.
// cached is negative when the read-ahead starts before the read's end, at
// the batch its window cut.
func readAheadBytes(want, cached, left, prefetch, cache int64) (n, enough int64) {
	if left <= 0 {
		return 0, 0
	}
	want = min(want, cached+left) // a window ends at its object's end
	if cached >= want {
		return 0, 0
	}
	n = min(left, prefetch, cache/4)
	if w := min(want, cache/8); 2*w > n {
		n = min(left, 2*w)
	}
	enough = max(want-want/2-cached, 1)
	if n < enough {
		return 0, 0
	}
	return n, enough
}
