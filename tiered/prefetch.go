package tiered

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/tierlog/tierlog/manifest"
)

// rangeCache keeps byte ranges of remote .log objects in memory within a
// byte budget (least recently used out first): repeated reads of the same
// data cost no GET, and read-ahead lands here.
type rangeCache struct {
	mu      sync.Mutex
	max     int64
	size    int64
	byKey   map[string][]*rangeEntry
	clock   int64
	entries int

	hits, misses atomic.Int64
}

type rangeEntry struct {
	key   string
	start int64
	data  []byte
	used  int64
}

func newRangeCache(max int64) *rangeCache {
	return &rangeCache{max: max, byKey: map[string][]*rangeEntry{}}
}

// get returns the cached bytes of key from pos to the end of the cached
// range holding pos, if any.
func (c *rangeCache) get(key string, pos int64) ([]byte, bool) {
	if c.max <= 0 {
		return nil, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	// Of the ranges holding pos, the one reaching furthest.
	var best *rangeEntry
	for _, e := range c.byKey[key] {
		if pos >= e.start && pos < e.start+int64(len(e.data)) &&
			(best == nil || e.start+int64(len(e.data)) > best.start+int64(len(best.data))) {
			best = e
		}
	}
	if best == nil {
		c.misses.Add(1)
		return nil, false
	}
	c.clock++
	best.used = c.clock
	c.hits.Add(1)
	return best.data[pos-best.start:], true
}

// has reports whether pos of key is cached, without counting a hit.
func (c *rangeCache) has(key string, pos int64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, e := range c.byKey[key] {
		if pos >= e.start && pos < e.start+int64(len(e.data)) {
			return true
		}
	}
	return false
}

func (c *rangeCache) put(key string, start int64, data []byte) {
	if c.max <= 0 || int64(len(data)) > c.max || len(data) == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.clock++
	c.byKey[key] = append(c.byKey[key], &rangeEntry{key: key, start: start, data: data, used: c.clock})
	c.size += int64(len(data))
	c.entries++
	for c.size > c.max {
		// Evict the least recently used range (a scan: the cache holds a
		// few hundred ranges at most).
		var victim *rangeEntry
		for _, es := range c.byKey {
			for _, e := range es {
				if victim == nil || e.used < victim.used {
					victim = e
				}
			}
		}
		es := c.byKey[victim.key]
		for i, e := range es {
			if e == victim {
				c.byKey[victim.key] = append(es[:i], es[i+1:]...)
				break
			}
		}
		if len(c.byKey[victim.key]) == 0 {
			delete(c.byKey, victim.key)
		}
		c.size -= int64(len(victim.data))
		c.entries--
	}
}

// CacheStats reports the remote caches' hits and misses.
type CacheStats struct {
	ChunkHits, ChunkMisses int64
	IndexHits, IndexMisses int64
}

// CacheStats returns the caches' counters.
func (p *Partition) CacheStats() CacheStats {
	return CacheStats{ChunkHits: p.chunks.hits.Load(), ChunkMisses: p.chunks.misses.Load(),
		IndexHits: p.indexes.hits.Load(), IndexMisses: p.indexes.misses.Load()}
}

// prefetch reads the range after end of seg (or the start of the next
// segment) into the chunk cache in the background, one at a time, so a
// sequential consumer finds its next read there.
func (p *Partition) prefetch(seg manifest.Segment, end int64) {
	if p.opts.PrefetchBytes <= 0 || !p.prefetching.CompareAndSwap(false, true) {
		return
	}
	m := p.Manifest()
	if end >= seg.Size {
		i, ok := m.Find(seg.LastOffset + 1)
		if !ok || m.Segments[i].BaseOffset >= p.local.Offsets().LogStart {
			p.prefetching.Store(false)
			return
		}
		seg, end = m.Segments[i], 0
	}
	key := p.key(seg.Name(manifest.LogSuffix))
	if p.chunks.has(key, end) {
		p.prefetching.Store(false)
		return
	}
	go func() {
		defer p.prefetching.Store(false)
		n := min(seg.Size-end, p.opts.PrefetchBytes)
		ctx, cancel := context.WithTimeout(context.Background(), p.store.Timeout())
		defer cancel()
		if data, err := p.store.ReadAll(ctx, key, end, n); err == nil {
			p.chunks.put(key, end, data)
			p.prefetched.Add(1)
		}
		if end == 0 { // a new segment: its index too
			p.remoteIndex(ctx, seg, manifest.IndexSuffix)
		}
	}()
}
