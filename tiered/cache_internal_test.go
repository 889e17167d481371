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
	if c.reach(obj, 150) != 200 {
		t.Fatalf("the range put again is not found: %d ranges", len(c.ranges[obj]))
	}
	if c.lru.size != 200 {
		t.Fatalf("the cache counts %d bytes, holding 200", c.lru.size)
	}
}

// TestRangeCacheReach: reach follows cached ranges one after another,
// overlapping or touching, and stops at a gap.
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
		if got := c.reach(obj, tc.pos); got != tc.want {
			t.Errorf("reach from %d = %d, want %d", tc.pos, got, tc.want)
		}
	}
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
