package tiered

import (
	"container/list"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/tierlog/tierlog/manifest"
)

// lru is the one cache type of the tiered layer: entries with a size in
// bytes, the least recently used evicted first once the sizes pass max.
// onEvict, when set, runs for each entry evicted or replaced (under the
// cache's lock: it must be quick and must not call back into the cache).
// It is safe for concurrent use.
type lru[K comparable, V any] struct {
	mu      sync.Mutex
	max     int64
	size    int64
	items   map[K]*list.Element
	order   list.List // of *lruItem[K, V], most recent first
	sizeOf  func(V) int64
	onEvict func(K, V)

	hits, misses atomic.Int64
}

type lruItem[K comparable, V any] struct {
	key  K
	val  V
	size int64
}

func newLRU[K comparable, V any](max int64, sizeOf func(V) int64, onEvict func(K, V)) *lru[K, V] {
	return &lru[K, V]{max: max, items: map[K]*list.Element{}, sizeOf: sizeOf, onEvict: onEvict}
}

// get returns the value under key, marking it recently used.
func (c *lru[K, V]) get(key K) (V, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.items[key]
	if !ok {
		c.misses.Add(1)
		var zero V
		return zero, false
	}
	c.hits.Add(1)
	c.order.MoveToFront(e)
	return e.Value.(*lruItem[K, V]).val, true
}

// peek returns the value under key, counting no hit or miss and leaving
// its recency as it was.
func (c *lru[K, V]) peek(key K) (V, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.items[key]; ok {
		return e.Value.(*lruItem[K, V]).val, true
	}
	var zero V
	return zero, false
}

// put stores val under key (replacing an older value), then evicts the
// least recently used entries while over budget. A value larger than the
// whole budget is not kept.
func (c *lru[K, V]) put(key K, val V) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.putLocked(key, val)
}

// putLocked is put; it returns key's element (nil: val was not kept) and
// whether it is new. REQUIRES: c.mu held.
func (c *lru[K, V]) putLocked(key K, val V) (elem *list.Element, added bool) {
	size := c.sizeOf(val)
	if size > c.max {
		return nil, false
	}
	if e, ok := c.items[key]; ok {
		// Replaced in place: the key stays, so it is not evicted (an
		// eviction's callback would undo the put: remove the disk cache's
		// new file, or forget the range cache's start).
		it := e.Value.(*lruItem[K, V])
		c.size += size - it.size
		it.val, it.size = val, size
		c.order.MoveToFront(e)
		c.evictLocked()
		return e, false
	}
	e := c.order.PushFront(&lruItem[K, V]{key: key, val: val, size: size})
	c.items[key] = e
	c.size += size
	c.evictLocked()
	return e, true
}

// evictLocked evicts the least recently used entries while the sizes
// pass max. REQUIRES: c.mu held.
func (c *lru[K, V]) evictLocked() {
	for c.size > c.max {
		c.removeLocked(c.order.Back())
	}
}

// remove drops key.
func (c *lru[K, V]) remove(key K) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.items[key]; ok {
		c.removeLocked(e)
	}
}

// clear drops everything (calling onEvict for each).
func (c *lru[K, V]) clear() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for c.order.Len() > 0 {
		c.removeLocked(c.order.Back())
	}
}

func (c *lru[K, V]) removeLocked(e *list.Element) {
	it := c.order.Remove(e).(*lruItem[K, V])
	delete(c.items, it.key)
	c.size -= it.size
	if c.onEvict != nil {
		c.onEvict(it.key, it.val)
	}
}

// objectKey names one of a segment's objects in the caches by what its
// key is made of (the partition's prefix, the segment's offsets and
// upload, the suffix), so that a read served from them builds no key;
// String builds it, for a GET or an error. Two objectKeys are equal
// exactly when their keys are.
type objectKey struct {
	prefix     string // the partition's manifest.Layout prefix
	base, last int64
	id         [8]byte
	suffix     string
}

// objectKey is the cache key of seg's object with suffix.
func (p *Partition) objectKey(seg manifest.Segment, suffix string) objectKey {
	return objectKey{prefix: p.layout().Prefix(), base: seg.BaseOffset, last: seg.LastOffset, id: seg.ID, suffix: suffix}
}

// String is the object's key in the bucket.
func (k objectKey) String() string {
	return manifest.NewLayout(k.prefix).Segment(manifest.Segment{BaseOffset: k.base, LastOffset: k.last, ID: k.id}, k.suffix)
}

// rangeKey names a cached range of a remote .log object.
type rangeKey struct {
	object objectKey
	start  int64
}

// rangeCache keeps ranges of remote .log objects: repeated reads of the
// same data cost no GET, and read-ahead lands here. A range is found by
// any position inside it.
type rangeCache struct {
	lru *lru[rangeKey, chunk]
	// ranges lists, per object, the lru's elements of its cached ranges
	// (a few per object): a lookup by position scans them. Guarded by
	// lru.mu.
	ranges map[objectKey][]*list.Element
	// The read-ahead budget: bytes read ahead and not yet read, in flight
	// or cached, stay within half the cache, so that partitions reading
	// ahead side by side leave room for each other's ranges (what is
	// read ahead past that is fetched by the reads themselves).
	// unread maps each read-ahead range not yet read to the budget it
	// holds: its bytes past the furthest a read reached in it, at most
	// what was reserved. ahead is what they hold and the read-aheads' in
	// flight. Guarded by lru.mu.
	unread map[rangeKey]int64
	ahead  int64
	// wasted counts the bytes read ahead and evicted unread, or fetched
	// again by a read whose range replaced them.
	wasted atomic.Int64
	// joined counts the bytes span copied joining consecutive ranges
	// into one window.
	joined atomic.Int64
}

// chunk is a cached range: its bytes and, for a range fetched from a
// batch's start (atBatch: a read's window; a read-ahead that
// rangeCache.aheadFrom started at one), the batches its walk on arrival
// read and checked (see walkBatches; none when the range ends inside its
// first batch or the walk stopped at its first header, or when it starts
// where no batch is known to start). All are immutable once cached.
type chunk struct {
	data    []byte
	batches []walkedBatch
	atBatch bool
}

// size is what a chunk holds: its bytes and its walked batches' list, as
// allocated.
func (c chunk) size() int64 { return int64(len(c.data)) + int64(cap(c.batches))*walkedBatchBytes }

// edge is where the chunk's walked batches end in it: 0 when none was
// walked, len(c.data) when the chunk ends at a batch's end.
func (c chunk) edge() int64 {
	if len(c.batches) == 0 {
		return 0
	}
	return int64(c.batches[len(c.batches)-1].end)
}

func newRangeCache(max int64) *rangeCache {
	c := &rangeCache{ranges: map[objectKey][]*list.Element{}, unread: map[rangeKey]int64{}}
	c.lru = newLRU(max, chunk.size, func(k rangeKey, ch chunk) {
		s := slices.DeleteFunc(c.ranges[k.object], func(e *list.Element) bool { return rangeOf(e).key.start == k.start })
		if len(s) == 0 {
			delete(c.ranges, k.object)
		} else {
			c.ranges[k.object] = s
		}
		c.dropUnreadLocked(k)
	})
	return c
}

// reserveAhead takes up to n bytes of the read-ahead budget (half the
// cache) and returns how many it took: n, fewer, or 0 when it is spent.
func (c *rangeCache) reserveAhead(n int64) int64 {
	c.lru.mu.Lock()
	defer c.lru.mu.Unlock()
	n = max(min(n, c.lru.max/2-c.ahead), 0)
	c.ahead += n
	return n
}

// releaseAhead gives back n bytes reserved for a read-ahead that failed.
func (c *rangeCache) releaseAhead(n int64) {
	c.lru.mu.Lock()
	defer c.lru.mu.Unlock()
	c.ahead -= n
}

// putAhead caches a read-ahead's range, which holds reserved bytes of
// the budget until a read uses it or it is evicted.
func (c *rangeCache) putAhead(object objectKey, start int64, ch chunk, reserved int64) {
	c.lru.mu.Lock()
	defer c.lru.mu.Unlock()
	k := rangeKey{object, start}
	if !c.putLocked(k, ch) {
		c.ahead -= reserved
		return
	}
	c.unread[k] = reserved
}

// readToLocked records that a read took the cached range e up to
// position to of its object: the budget its bytes before to held
// returns. REQUIRES: c.lru.mu held.
func (c *rangeCache) readToLocked(e *list.Element, to int64) {
	it := rangeOf(e)
	held, ok := c.unread[it.key]
	if !ok {
		return
	}
	held = min(held, max(it.key.start+int64(len(it.val.data))-to, 0))
	c.ahead -= c.unread[it.key] - held
	if held == 0 {
		delete(c.unread, it.key)
	} else {
		c.unread[it.key] = held
	}
}

// dropUnreadLocked forgets the range k, evicted or replaced: what it
// held of the budget returns, and counts as wasted.
// REQUIRES: c.lru.mu held.
func (c *rangeCache) dropUnreadLocked(k rangeKey) {
	if held, ok := c.unread[k]; ok {
		delete(c.unread, k)
		c.ahead -= held
		c.wasted.Add(held)
	}
}

// findLocked returns the cached range of object holding pos that reaches
// furthest. REQUIRES: c.lru.mu held.
func (c *rangeCache) findLocked(object objectKey, pos int64) (*list.Element, int64) {
	var best *list.Element
	var bestStart, bestEnd int64
	for _, e := range c.ranges[object] {
		it := rangeOf(e)
		s, end := it.key.start, it.key.start+int64(len(it.val.data))
		if s <= pos && pos < end && (best == nil || end > bestEnd) {
			best, bestStart, bestEnd = e, s, end
		}
	}
	return best, bestStart
}

// rangeOf is the cached range of the lru's element e.
func rangeOf(e *list.Element) *lruItem[rangeKey, chunk] { return e.Value.(*lruItem[rangeKey, chunk]) }

// span returns up to n cached bytes of object from pos, and what the walk
// of the range holding pos read of its batches from pos on, when a batch
// starts there. The bytes are the range holding pos, lent in place, when
// it holds n of them. When it holds fewer and its walk reached a batch's
// end that another cached range holds (a read-ahead starts at a batch,
// see aheadFrom), they are the whole batches up to that end, still in
// place, and more is true: the reader goes on from there in the next
// range. Otherwise the ranges that follow are joined to it, copied into
// one window, until n bytes or a gap (the walk covers none of the bytes
// joined). It counts no hit or miss: the caller decides whether what it
// got serves.
func (c *rangeCache) span(object objectKey, pos, n int64) (data []byte, w walked, more bool) {
	c.lru.mu.Lock()
	defer c.lru.mu.Unlock()
	e, data, w := c.lendLocked(object, pos, n)
	if e == nil || int64(len(data)) >= n {
		return data, w, false
	}
	if k := w.edge(); k > 0 {
		if next, _ := c.findLocked(object, pos+k); next != nil && next != e {
			// The range counts as read to its end (lendLocked): the
			// reader reads what it holds past k from the next range.
			return data[:k], w, true
		}
	}
	var out []byte
	for int64(len(data)) < n {
		next, nextStart := c.findLocked(object, pos+int64(len(data)))
		if next == nil {
			break
		}
		c.lru.order.MoveToFront(next)
		if out == nil {
			out = append(make([]byte, 0, n), data...)
		}
		tail := rangeOf(next).val.data[pos+int64(len(out))-nextStart:]
		out = append(out, tail[:min(int64(len(tail)), n-int64(len(out)))]...)
		data = out
		c.readToLocked(next, pos+int64(len(out)))
	}
	if out != nil {
		c.joined.Add(int64(len(out)))
	}
	return data, w, false
}

// lend returns the cached bytes of object from pos, in place, as far as
// the range holding pos goes (perhaps fewer than n, the most the caller
// reads of them), and what its walk read of its batches from pos on.
func (c *rangeCache) lend(object objectKey, pos, n int64) ([]byte, walked) {
	c.lru.mu.Lock()
	defer c.lru.mu.Unlock()
	_, data, w := c.lendLocked(object, pos, n)
	return data, w
}

// lendLocked is lend; it also returns the range's element (nil: pos is
// not cached). REQUIRES: c.lru.mu held.
func (c *rangeCache) lendLocked(object objectKey, pos, n int64) (*list.Element, []byte, walked) {
	e, start := c.findLocked(object, pos)
	if e == nil {
		return nil, nil, walked{}
	}
	c.lru.order.MoveToFront(e)
	ch := rangeOf(e).val
	data := ch.data[pos-start:]
	c.readToLocked(e, pos+min(n, int64(len(data))))
	return e, data, walkedFrom(ch.batches, pos-start, pos)
}

// refetchBytes is what a read-ahead may fetch again of a cached range, at
// least, to start at a batch (aheadFrom).
const refetchBytes = 64 << 10

// aheadFrom returns where a read-ahead of object after pos starts: where
// the cached ranges from pos, one after another with no gap, end (pos
// when none holds it or ends there), and whether a batch starts there
// (atBatch; an object's start is one). When the last of those ranges was
// walked on arrival and a window cut its last batch, the read-ahead
// starts at that batch instead, fetching the part cached again when that
// is at most refetchBytes or half the range, whichever is larger (all of
// a range that holds no whole batch, such as a batch header a read
// fetched to check the batch after its answer, within refetchBytes): the
// range it caches then starts at a batch and is walked on arrival, and a
// read crossing from one range into the next finds a batch's end there,
// so span need not copy them into one window.
// A read-ahead from a batch also ends at one where the segment's offset
// index is cached (toIndexedBatch), so only a read's own window, or a
// read-ahead past what the index showed, leaves a batch to fetch again.
func (c *rangeCache) aheadFrom(object objectKey, pos int64) (from int64, atBatch bool) {
	c.lru.mu.Lock()
	defer c.lru.mu.Unlock()
	last, _ := c.findLocked(object, pos)
	if last == nil && pos > 0 {
		last, _ = c.findLocked(object, pos-1) // a range ending at pos: its batches may end there
	}
	for e := last; e != nil; e, _ = c.findLocked(object, pos) {
		last = e
		pos = max(pos, rangeOf(e).key.start+int64(len(rangeOf(e).val.data)))
	}
	if last == nil {
		return pos, pos == 0
	}
	it := rangeOf(last)
	size, edge := int64(len(it.val.data)), it.val.edge()
	switch {
	case !it.val.atBatch:
		return pos, false
	case edge == size:
		return pos, true
	case size-edge <= max(size/2, refetchBytes):
		return it.key.start + edge, true // edge 0: the range's start
	}
	return pos, false
}

func (c *rangeCache) put(object objectKey, start int64, ch chunk) {
	c.lru.mu.Lock()
	defer c.lru.mu.Unlock()
	c.putLocked(rangeKey{object, start}, ch)
}

// putLocked caches ch at k and reports whether it was kept. A range put
// over a read-ahead's at the same start fetched its bytes again: what the
// read-ahead's held counts as wasted. REQUIRES: c.lru.mu held.
func (c *rangeCache) putLocked(k rangeKey, ch chunk) bool {
	if ch.size() > c.lru.max || len(ch.data) == 0 {
		return false
	}
	c.dropUnreadLocked(k)
	e, added := c.lru.putLocked(k, ch)
	if added {
		c.ranges[k.object] = append(c.ranges[k.object], e)
	}
	return e != nil
}

// diskCache keeps fetched remote indexes in a directory within a byte
// budget (Kafka's remote-log-index-cache), so a restart does not fetch them
// again. Files are named after their object keys. The directory is listed
// once, at open; from then on the lru tracks the files and removes what it
// evicts.
//
// A put is written by a goroutine of its own, not the caller's: a read or
// a retention pass that fetched a part or an index has what it needs in
// memory, and a file created in a directory of thousands costs more than
// the fetch (a leader's first retention pass over 10,000 partitions spent
// most of its time there). Up to diskCachePending bytes wait; a put beyond
// that is dropped, as a cache may. The goroutine runs while puts wait and
// exits when none do; flush waits for it.
type diskCache struct {
	dir   string
	files *lru[string, int64] // file name -> size

	mu           sync.Mutex
	queue        []diskWrite
	queued       int64  // bytes in queue
	writing      bool   // the writer goroutine runs
	puts, writes uint64 // puts queued, and of them written (or given up), so far
	wrote        *sync.Cond
}

// diskWrite is a put waiting to be written.
type diskWrite struct {
	key  string
	data []byte
}

// diskCachePending bounds the bytes of puts waiting to be written.
const diskCachePending = 16 << 20

func openDiskCache(dir string, max int64) *diskCache {
	c := &diskCache{dir: dir}
	c.wrote = sync.NewCond(&c.mu)
	c.files = newLRU(max, func(n int64) int64 { return n }, func(name string, _ int64) {
		os.Remove(filepath.Join(dir, name))
	})
	if ents, err := os.ReadDir(dir); err == nil {
		for _, e := range ents {
			if info, err := e.Info(); err == nil && !e.IsDir() && !strings.HasSuffix(e.Name(), ".tmp") {
				c.files.put(e.Name(), info.Size())
			}
		}
	}
	return c
}

func (c *diskCache) name(key string) string { return strings.ReplaceAll(key, "/", "%") }

// getRange returns n bytes of key's file from off, if the file is there
// and long enough (what it holds is checked by the caller: a part's
// directory and blocks carry their own CRC-32C).
func (c *diskCache) getRange(key string, off, n int64) ([]byte, bool) {
	if c == nil {
		return nil, false
	}
	name := c.name(key)
	if _, ok := c.files.get(name); !ok {
		return nil, false
	}
	f, err := os.Open(filepath.Join(c.dir, name))
	if err != nil {
		c.files.remove(name)
		return nil, false
	}
	defer f.Close()
	b := make([]byte, n)
	if _, err := f.ReadAt(b, off); err != nil {
		return nil, false
	}
	return b, true
}

func (c *diskCache) get(key string) ([]byte, bool) {
	if c == nil {
		return nil, false
	}
	name := c.name(key)
	if _, ok := c.files.get(name); !ok {
		return nil, false
	}
	b, err := os.ReadFile(filepath.Join(c.dir, name))
	if err != nil {
		c.files.remove(name)
		return nil, false
	}
	return b, true
}

// put has data written as key's file, soon (see diskCache). data must
// not change afterwards.
func (c *diskCache) put(key string, data []byte) {
	if c == nil || int64(len(data)) > c.files.max {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.queued+int64(len(data)) > diskCachePending {
		return
	}
	c.queue = append(c.queue, diskWrite{key, data})
	c.queued += int64(len(data))
	c.puts++
	if !c.writing {
		c.writing = true
		go c.drain()
	}
}

// drain writes the queued puts, in order, until none is left.
func (c *diskCache) drain() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for len(c.queue) > 0 {
		w := c.queue[0]
		c.queue[0] = diskWrite{}
		c.queue = c.queue[1:]
		c.mu.Unlock()
		c.write(w.key, w.data)
		c.mu.Lock()
		c.queued -= int64(len(w.data))
		c.writes++
		c.wrote.Broadcast()
	}
	c.queue = nil
	c.writing = false
}

// flush waits until every put queued before it is written (or given up);
// puts after it do not hold it up.
func (c *diskCache) flush() {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for target := c.puts; c.writes < target; {
		c.wrote.Wait()
	}
}

// write writes data as key's file and tracks it.
func (c *diskCache) write(key string, data []byte) {
	if err := os.MkdirAll(c.dir, 0o755); err != nil {
		return
	}
	name := c.name(key)
	// A temporary file, renamed over the name: a reader sees the old
	// file or the new one, whole. The lru replaces a name it holds in
	// place.
	f, err := os.CreateTemp(c.dir, name+".*.tmp")
	if err != nil {
		return
	}
	tmp := f.Name()
	_, werr := f.Write(data)
	if cerr := f.Close(); werr != nil || cerr != nil || os.Rename(tmp, filepath.Join(c.dir, name)) != nil {
		os.Remove(tmp)
		return
	}
	c.files.put(name, int64(len(data)))
}
