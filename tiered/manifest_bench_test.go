package tiered_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/tierlog/tierlog/objstore"
	"github.com/tierlog/tierlog/objstore/mem"
	"github.com/tierlog/tierlog/tiered"
)

// manifestCounter counts what a partition puts and gets of its manifest:
// the head (the object at the manifest's key), its parts, its backups.
type manifestCounter struct {
	objstore.Driver
	mu                           sync.Mutex
	headBytes, partBytes, backup int64
	gets, getBytes               int64
	largestHead                  int64
}

func (c *manifestCounter) Put(ctx context.Context, key string, body io.ReadSeeker, size int64, opts objstore.PutOptions) (objstore.ObjectInfo, error) {
	c.mu.Lock()
	switch {
	case strings.HasSuffix(key, "/manifest"):
		c.headBytes += size
		c.largestHead = max(c.largestHead, size)
	case strings.Contains(key, "/manifest."):
		c.backup += size
	case strings.HasSuffix(key, ".part"):
		c.partBytes += size
	}
	c.mu.Unlock()
	return c.Driver.Put(ctx, key, body, size, opts)
}

func (c *manifestCounter) Get(ctx context.Context, key string, offset, length int64) (io.ReadCloser, objstore.ObjectInfo, error) {
	rc, info, err := c.Driver.Get(ctx, key, offset, length)
	if err == nil && (strings.HasSuffix(key, "/manifest") || strings.HasSuffix(key, ".part")) {
		c.mu.Lock()
		c.gets++
		c.getBytes += info.Size
		c.mu.Unlock()
	}
	return rc, info, err
}

// BenchmarkManifestBytesPut uploads a partition's segments one commit
// each (produce a batch, roll, offload) and reports the manifest bytes
// put over its life: heads and parts (manifest-MB), the backups of each
// generation beside them (backup-MB), the largest head, what one commit
// puts (heads and parts: the last commit's, last-commit-bytes, and the
// largest, largest-commit-bytes), and what a new reader GETs to read the
// manifest at the end (read-GETs, read-KB). Issue 27's goal: at most 2 MB
// of manifest at 2,000 segments; the layered manifest's: a head of at most
// 64 KiB, so a commit costs the same at any length. The sizes are 500,
// 1,000 and 2,000 segments, or the comma-separated list in
// TIERLOG_BENCH_MANIFEST_SEGMENTS (100,000 takes some minutes: every
// segment is a local file until the end).
func BenchmarkManifestBytesPut(b *testing.B) {
	sizes := []int{500, 1000, 2000}
	if s := os.Getenv("TIERLOG_BENCH_MANIFEST_SEGMENTS"); s != "" {
		sizes = nil
		for _, f := range strings.Split(s, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n <= 0 {
				b.Fatalf("TIERLOG_BENCH_MANIFEST_SEGMENTS=%q: want positive integers, comma-separated", s)
			}
			sizes = append(sizes, n)
		}
	}
	for _, n := range sizes {
		b.Run(fmt.Sprintf("segments=%d", n), func(b *testing.B) {
			for b.Loop() {
				c := &manifestCounter{Driver: mem.New()}
				store := objstore.New(c, "mem://manifest-bytes", objstore.Options{})
				p := open(b, filepath.Join(b.TempDir(), "orders-0"), store, 1, cfg(b, "local.retention.ms", "-1", "retention.ms", "-1"))
				put := func() int64 {
					c.mu.Lock()
					defer c.mu.Unlock()
					return c.headBytes + c.partBytes
				}
				var lastCommit, largestCommit int64
				for range n {
					produce(b, p, 1)
					if err := p.Roll(); err != nil {
						b.Fatal(err)
					}
					before := put()
					if _, err := p.Offload(ctx); err != nil {
						b.Fatal(err)
					}
					lastCommit = put() - before
					largestCommit = max(largestCommit, lastCommit)
				}
				if got := len(manifestOf(b, p).Segments); got != n {
					b.Fatalf("%d segments in the bucket, want %d", got, n)
				}
				p.Close()
				c.gets, c.getBytes = 0, 0
				if _, err := tiered.ReadManifest(ctx, store, "tl/orders-0"); err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(float64(c.headBytes+c.partBytes)/1e6, "manifest-MB")
				b.ReportMetric(float64(c.backup)/1e6, "backup-MB")
				b.ReportMetric(float64(c.largestHead), "largest-head-bytes")
				b.ReportMetric(float64(lastCommit), "last-commit-bytes")
				b.ReportMetric(float64(largestCommit), "largest-commit-bytes")
				b.ReportMetric(float64(c.gets), "read-GETs")
				b.ReportMetric(float64(c.getBytes)/1e3, "read-KB")
			}
		})
	}
}
