package tiered

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/tierlog/tierlog/internal/ratelimit"
)

// limitedBody paces an upload body through a rate limiter.
type limitedBody struct {
	ctx context.Context
	rs  io.ReadSeeker
	lim *ratelimit.Limiter
}

func (b *limitedBody) Read(p []byte) (int, error) {
	if len(p) > 64<<10 {
		p = p[:64<<10]
	}
	if err := b.lim.Wait(b.ctx, len(p)); err != nil {
		return 0, err
	}
	return b.rs.Read(p)
}

func (b *limitedBody) Seek(off int64, whence int) (int64, error) { return b.rs.Seek(off, whence) }

// progressBody reports the bytes read from rs past the furthest position
// read so far, so a retry that seeks back and reads again reports nothing
// twice.
type progressBody struct {
	rs       io.ReadSeeker
	pos, max int64
	report   func(int64)
}

func (b *progressBody) Read(p []byte) (int, error) {
	n, err := b.rs.Read(p)
	b.pos += int64(n)
	if b.pos > b.max {
		b.report(b.pos - b.max)
		b.max = b.pos
	}
	return n, err
}

func (b *progressBody) Seek(off int64, whence int) (int64, error) {
	pos, err := b.rs.Seek(off, whence)
	if err == nil {
		b.pos = pos
	}
	return pos, err
}

// diskCache keeps fetched remote indexes in a directory within a byte
// budget (Kafka's remote-log-index-cache), so a restart does not fetch them
// again. Files are named after their object keys; the least recently used
// go first.
type diskCache struct {
	dir string
	max int64
	mu  sync.Mutex
}

func (c *diskCache) path(key string) string {
	return filepath.Join(c.dir, strings.ReplaceAll(key, "/", "%"))
}

func (c *diskCache) get(key string) ([]byte, bool) {
	if c == nil {
		return nil, false
	}
	p := c.path(key)
	b, err := os.ReadFile(p)
	if err != nil {
		return nil, false
	}
	now := time.Now()
	os.Chtimes(p, now, now) // recently used
	return b, true
}

func (c *diskCache) put(key string, data []byte) {
	if c == nil || int64(len(data)) > c.max {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := os.MkdirAll(c.dir, 0o755); err != nil {
		return
	}
	tmp := c.path(key) + ".tmp"
	if os.WriteFile(tmp, data, 0o644) != nil || os.Rename(tmp, c.path(key)) != nil {
		os.Remove(tmp)
		return
	}
	ents, err := os.ReadDir(c.dir)
	if err != nil {
		return
	}
	type file struct {
		name string
		size int64
		used time.Time
	}
	var files []file
	var total int64
	for _, e := range ents {
		if info, err := e.Info(); err == nil && !e.IsDir() {
			files = append(files, file{e.Name(), info.Size(), info.ModTime()})
			total += info.Size()
		}
	}
	sort.Slice(files, func(i, j int) bool { return files[i].used.Before(files[j].used) })
	for _, f := range files {
		if total <= c.max {
			break
		}
		if os.Remove(filepath.Join(c.dir, f.name)) == nil {
			total -= f.size
		}
	}
}
