package tiered

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

const raceKey = "tl/orders-0/00000000000000000000-00000000000000000099-0123456789abcdef.index"

// putAtOnce runs n puts of data under raceKey at once, each followed by
// after (when set).
func putAtOnce(c *diskCache, n int, data []byte, after func()) {
	var wg, start sync.WaitGroup
	start.Add(1)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			start.Wait()
			c.put(raceKey, data)
			if after != nil {
				after()
			}
		}()
	}
	start.Done()
	wg.Wait()
}

// TestDiskCacheConcurrentPuts: puts of one name at once (two readers
// missing the same remote index) leave its file there and whole, and a
// get never sees part of one.
func TestDiskCacheConcurrentPuts(t *testing.T) {
	data := bytes.Repeat([]byte("x"), 4096)
	var mu sync.Mutex
	lost, torn := 0, 0
	for range 500 {
		dir := t.TempDir()
		c := openDiskCache(dir, 1<<20)
		putAtOnce(c, 4, data, func() {
			if b, ok := c.get(raceKey); ok && !bytes.Equal(b, data) {
				mu.Lock()
				torn++
				mu.Unlock()
			}
		})
		c.flush()
		name := c.name(raceKey)
		if _, ok := c.files.items[name]; !ok {
			lost++
		} else if b, err := os.ReadFile(filepath.Join(dir, name)); err != nil || !bytes.Equal(b, data) {
			lost++
		}
	}
	if lost > 0 || torn > 0 {
		t.Fatalf("of 500 rounds of 4 puts at once: %d left no file or one that is not there whole, %d gets saw other bytes", lost, torn)
	}
}

// TestDiskCacheWritesBehind: a put returns before its file is written;
// flush waits for it, and a get then reads it. While the writer is
// behind, at most diskCachePending bytes wait: a put past that is
// dropped, the ones before it written in order.
func TestDiskCacheWritesBehind(t *testing.T) {
	dir := t.TempDir()
	c := openDiskCache(dir, 1<<30)
	c.flush() // nothing to wait for
	c.put("tl/orders-0/a.index", []byte("first"))
	c.put("tl/orders-0/a.index", []byte("second")) // the later put wins
	c.put("tl/orders-0/b.index", []byte("other"))
	c.flush()
	for key, want := range map[string]string{"tl/orders-0/a.index": "second", "tl/orders-0/b.index": "other"} {
		if b, ok := c.get(key); !ok || string(b) != want {
			t.Errorf("%s: %q %v after flush; want %q", key, b, ok, want)
		}
	}

	// The writer behind: puts queue up to the bound.
	c.mu.Lock()
	c.writing = true
	c.mu.Unlock()
	mib := bytes.Repeat([]byte("m"), 1<<20)
	n := diskCachePending>>20 + 1
	for i := range n {
		c.put(fmt.Sprintf("tl/orders-0/%03d.index", i), mib)
	}
	c.mu.Lock()
	queued, waiting := c.queued, len(c.queue)
	c.mu.Unlock()
	if queued != diskCachePending || waiting != n-1 {
		t.Fatalf("%d puts of 1 MiB with the writer behind: %d bytes in %d waiting; want %d in %d", n, queued, waiting, diskCachePending, n-1)
	}
	c.drain()
	c.flush()
	for i := range n {
		_, ok := c.get(fmt.Sprintf("tl/orders-0/%03d.index", i))
		if want := i < n-1; ok != want {
			t.Errorf("put %d of %d: on disk %v, want %v", i+1, n, ok, want)
		}
	}
}

// TestRangeCachePutTwice: a range put again at the same start (a larger
// read of the same window) stays found.
func TestRangeCachePutTwice(t *testing.T) {
	c := newRangeCache(1 << 20)
	obj := objectKey{prefix: "tl/orders-0", last: 99, suffix: ".log"}
	c.put(obj, 0, chunk{data: make([]byte, 100)})
	c.put(obj, 0, chunk{data: make([]byte, 200)})
	if from, _ := c.aheadFrom(obj, 150); from != 200 {
		t.Fatalf("the range put again is not found: %d ranges", len(c.ranges[obj]))
	}
	if c.lru.size != 200 {
		t.Fatalf("the cache counts %d bytes, holding 200", c.lru.size)
	}
}

// TestRangeCacheReach: a read-ahead starts where the cached ranges end,
// following them one after another, overlapping or touching, up to a gap.
func TestRangeCacheReach(t *testing.T) {
	c := newRangeCache(1 << 20)
	obj := objectKey{prefix: "tl/orders-0", last: 99, suffix: ".log"}
	other := objectKey{prefix: "tl/orders-0", base: 100, last: 199, suffix: ".log"}
	c.put(obj, 0, chunk{data: make([]byte, 100)})
	c.put(obj, 100, chunk{data: make([]byte, 50)}) // touches the first
	c.put(obj, 120, chunk{data: make([]byte, 80)}) // overlaps the second
	c.put(obj, 300, chunk{data: make([]byte, 10)}) // after a gap
	c.put(other, 0, chunk{data: make([]byte, 1000)})
	for _, tc := range []struct{ pos, want int64 }{{0, 200}, {99, 200}, {130, 200}, {200, 200}, {250, 250}, {305, 310}, {310, 310}} {
		if got, atBatch := c.aheadFrom(obj, tc.pos); got != tc.want || atBatch {
			t.Errorf("aheadFrom(%d) = %d, %v; want %d, false (no range was walked)", tc.pos, got, atBatch, tc.want)
		}
	}
}

// TestRangeCacheAheadFromABatch: a read-ahead after a range fetched
// from a batch starts at a batch: at the range's end when its last walked
// batch ends there, else at its last whole batch's end (its start when it
// holds none), when what that fetches again is at most 64 KiB or half
// the range, whichever is larger; an object's start is a batch's.
func TestRangeCacheAheadFromABatch(t *testing.T) {
	obj := objectKey{prefix: "tl/orders-0", last: 99, suffix: ".log"}
	const big = 1 << 20
	for _, tc := range []struct {
		name    string
		start   int64
		size    int64
		atBatch bool
		ends    []uint32 // the walked batches' ends in the chunk
		pos     int64
		from    int64
		want    bool
	}{
		{"nothing cached at the object's start", 0, 0, false, nil, 0, 0, true},
		{"nothing cached", 0, 0, false, nil, 500, 500, false},
		{"not at a batch", 100, 100, false, nil, 150, 200, false},
		{"walked to its end", 100, 100, true, []uint32{40, 100}, 150, 200, true},
		{"walked to its end, asked from its end", 100, 100, true, []uint32{40, 100}, 200, 200, true},
		{"its last batch cut", 100, 100, true, []uint32{40, 90}, 200, 190, true},
		{"its last batch cut, asked from inside it", 100, 100, true, []uint32{40, 90}, 120, 190, true},
		{"a batch header fetched for a check", 100, 61, true, nil, 161, 100, true},
		{"under half of a large range cut", 0, big, true, []uint32{big/2 + 1}, big, big/2 + 1, true},
		{"most of a large range cut", 0, big, true, []uint32{big / 4}, big, big, false},
		{"a large range holding no whole batch", 0, big, true, nil, big, big, false},
	} {
		c := newRangeCache(1 << 30)
		if tc.size > 0 {
			ch := chunk{data: make([]byte, tc.size), atBatch: tc.atBatch}
			for _, e := range tc.ends {
				ch.batches = append(ch.batches, walkedBatch{end: e})
			}
			c.put(obj, tc.start, ch)
		}
		if from, atBatch := c.aheadFrom(obj, tc.pos); from != tc.from || atBatch != tc.want {
			t.Errorf("%s: aheadFrom(%d) = %d, %v; want %d, %v", tc.name, tc.pos, from, atBatch, tc.from, tc.want)
		}
	}
}

// TestRangeCacheSpanLends: a window crossing from a walked range into a
// range that starts at its last whole batch's end is lent in place, up to
// that end (more: the reader goes on in the next range); one crossing
// where no batch is known to end is copied into one window.
func TestRangeCacheSpanLends(t *testing.T) {
	c := newRangeCache(1 << 20)
	obj := objectKey{prefix: "tl/orders-0", last: 99, suffix: ".log"}
	first := chunk{data: make([]byte, 100), batches: []walkedBatch{{base: 0, last: 9, end: 40}, {base: 10, last: 19, end: 90}}, atBatch: true}
	c.put(obj, 0, first)
	c.put(obj, 90, chunk{data: make([]byte, 100)}) // a read-ahead from the cut batch
	data, w, more := c.span(obj, 40, 100)
	if len(data) != 50 || !more || &data[0] != &first.data[40] {
		t.Fatalf("span(40, 100) = %d bytes, more %v: want the 50 to the batch's end, in place", len(data), more)
	}
	if e, known, _ := w.batch(0); !known || e.BaseOffset != 10 || e.Size != 50 {
		t.Fatalf("the walk from 40: %+v, known %v", e, known)
	}
	if c.joined.Load() != 0 {
		t.Fatalf("%d bytes joined", c.joined.Load())
	}
	// Inside the cut batch, the range from it serves.
	if data, _, more := c.span(obj, 95, 100); len(data) != 95 || more {
		t.Fatalf("span(95, 100) = %d bytes, more %v: want the 95 bytes there are", len(data), more)
	}
	c2 := newRangeCache(1 << 20)
	c2.put(obj, 0, chunk{data: make([]byte, 100)}) // not walked
	c2.put(obj, 100, chunk{data: make([]byte, 100)})
	if data, _, more := c2.span(obj, 40, 100); len(data) != 100 || more || c2.joined.Load() != 100 {
		t.Fatalf("span over ranges not walked: %d bytes, more %v, %d joined; want 100 joined", len(data), more, c2.joined.Load())
	}
}

// TestReadAheadBytes: how much a read-ahead fetches after a read of a
// window of want bytes.
func TestReadAheadBytes(t *testing.T) {
	const (
		KiB = int64(1) << 10
		MiB = int64(1) << 20
	)
	for _, c := range []struct {
		name                              string
		want, cached, left, prefetch, max int64
		n                                 int64
	}{
		{"small reads: PrefetchBytes", 128 * KiB, 0, 100 * MiB, 1 * MiB, 64 * MiB, 1 * MiB},
		{"the next window cached: none", 128 * KiB, 128 * KiB, 100 * MiB, 1 * MiB, 64 * MiB, 0},
		{"part of it cached: PrefetchBytes after it", 128 * KiB, 64 * KiB, 100 * MiB, 1 * MiB, 64 * MiB, 1 * MiB},
		{"windows above PrefetchBytes: two of them", 4*MiB + 64*KiB, 72 * KiB, 100 * MiB, 1 * MiB, 64 * MiB, 8*MiB + 128*KiB},
		{"what is left of the object", 4*MiB + 64*KiB, 0, 3 * MiB, 1 * MiB, 64 * MiB, 3 * MiB},
		{"the object's tail: the window ends there", 4*MiB + 64*KiB, 0, 32 * KiB, 1 * MiB, 64 * MiB, 32 * KiB},
		{"the tail after cached bytes", 4*MiB + 64*KiB, 1 * MiB, 1*MiB + 64*KiB, 1 * MiB, 64 * MiB, 1*MiB + 64*KiB},
		{"a quarter of the cache", 12 * MiB, 0, 100 * MiB, 1 * MiB, 64 * MiB, 16 * MiB},
		{"PrefetchBytes capped too", 64 * KiB, 0, 100 * MiB, 32 * MiB, 64 * MiB, 16 * MiB},
		{"a window the cap cannot half cover: none", 40 * MiB, 0, 100 * MiB, 1 * MiB, 64 * MiB, 0},
		{"no chunk cache: none", 128 * KiB, 0, 100 * MiB, 1 * MiB, -1, 0},
		{"at the object's end: none", 128 * KiB, 0, 0, 1 * MiB, 64 * MiB, 0},
	} {
		n, enough := readAheadBytes(c.want, c.cached, c.left, c.prefetch, c.max)
		if n != c.n {
			t.Errorf("%s: readAheadBytes(%d, %d, %d, %d, %d) = %d, want %d", c.name, c.want, c.cached, c.left, c.prefetch, c.max, n, c.n)
		}
		// enough: with it cached too, half the next window is.
		if w := min(c.want, c.cached+c.left); n > 0 && (enough > n || c.cached+enough != max((w+1)/2, c.cached+1)) {
			t.Errorf("%s: enough = %d of %d, for a window of %d with %d cached", c.name, enough, n, w, c.cached)
		}
	}
}

// TestRangeCacheReadAheadBudget: read-ahead not yet read holds at most
// half the cache; a range gives its bytes back as reads reach through
// it, and what is evicted, or replaced by a read's own range, before
// reads reached it counts as wasted.
func TestRangeCacheReadAheadBudget(t *testing.T) {
	c := newRangeCache(1000)
	obj := objectKey{prefix: "tl/orders-0", last: 99, suffix: ".log"}
	reserve := func(n, want int64, why string) {
		t.Helper()
		if got := c.reserveAhead(n); got != want {
			t.Fatalf("%s: reserved %d of %d, want %d", why, got, n, want)
		}
	}
	reserve(300, 300, "empty")
	reserve(300, 200, "200 left of the budget of 500")
	reserve(1, 0, "the budget spent")
	c.putAhead(obj, 0, chunk{data: make([]byte, 300)}, 300)
	c.releaseAhead(200) // the second read-ahead failed
	reserve(500, 200, "300 unread")
	c.releaseAhead(200)
	if data, _, _ := c.span(obj, 100, 50); len(data) != 200 {
		t.Fatalf("span: %d bytes", len(data))
	}
	reserve(500, 350, "a read reached 150 of the range [0, 300)")
	c.releaseAhead(350)
	c.span(obj, 200, 100)
	reserve(500, 500, "a read reached the range's end")
	c.putAhead(obj, 300, chunk{data: make([]byte, 500)}, 500)
	c.put(obj, 300, chunk{data: make([]byte, 500)}) // a read fetched the same window
	if w := c.wasted.Load(); w != 500 {
		t.Fatalf("wasted %d bytes, want the replaced read-ahead's 500", w)
	}
	reserve(100, 100, "after a read's range replaced the read-ahead")
	c.putAhead(obj, 800, chunk{data: make([]byte, 100)}, 100)
	c.span(obj, 800, 40)
	c.put(obj, 2000, chunk{data: make([]byte, 1000)}) // evicts everything else
	if w := c.wasted.Load(); w != 560 {
		t.Fatalf("wasted %d bytes, want 560: 60 more of the evicted range, 40 of it read", w)
	}
	reserve(500, 500, "after the unread read-ahead was evicted")
}

// TestCachesFlush: Caches.Flush, for a broker that made its Caches,
// waits for the disk cache's queued writes.
func TestCachesFlush(t *testing.T) {
	dir := t.TempDir()
	c := NewCaches(CacheOptions{IndexDir: dir})
	c.disk.put("tl/orders-0/a.index", []byte("index"))
	c.Flush()
	if b, err := os.ReadFile(filepath.Join(dir, c.disk.name("tl/orders-0/a.index"))); err != nil || string(b) != "index" {
		t.Fatalf("after Flush: %q %v", b, err)
	}
	NewCaches(CacheOptions{}).Flush() // no disk cache: nothing to wait for
}
