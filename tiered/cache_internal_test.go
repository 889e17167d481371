package tiered

import (
	"bytes"
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
		name := c.name(raceKey)
		if _, ok := c.files.items[name]; ok {
			if b, err := os.ReadFile(filepath.Join(dir, name)); err != nil || !bytes.Equal(b, data) {
				lost++
			}
		}
	}
	if lost > 0 || torn > 0 {
		t.Fatalf("of 500 rounds of 4 puts at once: %d left the lru holding a file that is not there whole, %d gets saw other bytes", lost, torn)
	}
}

// TestRangeCachePutTwice: a range put again at the same start (a larger
// read of the same window) stays found.
func TestRangeCachePutTwice(t *testing.T) {
	c := newRangeCache(1 << 20)
	obj := objectKey{prefix: "tl/orders-0", last: 99, suffix: ".log"}
	c.put(obj, 0, chunk{data: make([]byte, 100)})
	c.put(obj, 0, chunk{data: make([]byte, 200)})
	if !c.has(obj, 150) {
		t.Fatalf("the range put again is not found: %d ranges", len(c.ranges[obj]))
	}
	if c.lru.size != 200 {
		t.Fatalf("the cache counts %d bytes, holding 200", c.lru.size)
	}
}
