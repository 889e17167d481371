package tiered_test

import (
	"bytes"
	"fmt"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/objstore"
	"github.com/tierlog/tierlog/objstore/mem"
	"github.com/tierlog/tierlog/record"
)

// TestCachedRemoteReadsAreLocalReads: every offloaded offset, read twice
// at several MaxBytes (the first read through a GET or a window another
// read left in the chunk cache, the second from the cache), gives the
// batches a read of the same offset gave before the upload, from the
// local log, or fewer whole ones of them where its window ended first;
// and the second read gives what the first did. The same over a sealed
// bucket.
func TestCachedRemoteReadsAreLocalReads(t *testing.T) {
	rng := overlapRand(t)
	for _, segBytes := range []int{16 << 10, 256 << 10, -16 << 10} {
		// A negative size: the bucket is sealed (4 KiB chunks).
		name, store := strconv.Itoa(segBytes), objstore.New(mem.New(), "mem://cached", objstore.Options{})
		if segBytes < 0 {
			segBytes, name, store = -segBytes, strconv.Itoa(-segBytes)+"-sealed", sealedStore(t, mem.New(), keyRing(t, "k1"))
		}
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "orders-0")
			c := cfg(t, "segment.bytes", strconv.Itoa(segBytes), "index.interval.bytes", strconv.Itoa(100+rng.IntN(2000)),
				"local.retention.ms", "0", "file.delete.delay.ms", "0", "retention.ms", "-1")
			p := open(t, dir, store, 1, c)
			defer p.Close()
			produceSmall(t, rng, p, 1500)
			if err := p.Roll(); err != nil {
				t.Fatal(err)
			}
			maxes := []int{1, 300, 2000, 20000, 1 << 20}
			read := func(off int64, maxBytes int) ([]byte, error) {
				r, err := p.Read(ctx, off, backend.ReadOptions{MaxBytes: maxBytes, MinOneBatch: true})
				if err != nil {
					return nil, err
				}
				defer r.Close()
				var buf bytes.Buffer
				if _, err = r.WriteTo(&buf); err != nil {
					return nil, err
				}
				// What View lends is what WriteTo wrote.
				err = r.(backend.Viewer).View(func(p []byte) error {
					if !bytes.Equal(p, buf.Bytes()) {
						return fmt.Errorf("View lent %d bytes, WriteTo wrote %d", len(p), buf.Len())
					}
					return nil
				})
				return buf.Bytes(), err
			}
			end := p.Offsets().LogEnd
			local := map[string][]byte{}
			for off := range end {
				for _, m := range maxes {
					b, err := read(off, m)
					if err != nil {
						t.Fatal(err)
					}
					local[fmt.Sprint(off, m)] = b
				}
			}
			if _, err := p.Offload(ctx); err != nil {
				t.Fatal(err)
			}
			remoteEnd := p.Offsets().LocalLogStart
			if remoteEnd < end/2 {
				t.Fatalf("offloaded below %d of %d offsets", remoteEnd, end)
			}
			exact := 0
			for _, m := range maxes {
				for _, i := range rng.Perm(int(remoteEnd)) {
					off := int64(i)
					want := local[fmt.Sprint(off, m)]
					first, err := read(off, m)
					if err != nil {
						t.Fatalf("offset %d, MaxBytes %d: %v", off, m, err)
					}
					again, err := read(off, m)
					if err != nil {
						t.Fatalf("offset %d, MaxBytes %d, from the cache: %v", off, m, err)
					}
					if !bytes.Equal(again, first) {
						t.Fatalf("offset %d, MaxBytes %d: %d bytes from the cache, %d the first time", off, m, len(again), len(first))
					}
					if len(first) == 0 || !bytes.HasPrefix(want, first) || len(first) < len(want) && !batchBoundary(want, len(first)) {
						t.Fatalf("offset %d, MaxBytes %d: %d bytes, not whole batches the local log's %d begin with", off, m, len(first), len(want))
					}
					if len(first) == len(want) {
						exact++
					}
				}
			}
			st := p.CacheStats()
			t.Logf("%d of %d reads as long as the local log's; chunk cache %d hits, %d misses", exact, len(maxes)*int(remoteEnd), st.ChunkHits, st.ChunkMisses)
			if exact == 0 || st.ChunkHits == 0 {
				t.Fatalf("%d reads as long as the local log's, %d chunk hits", exact, st.ChunkHits)
			}
		})
	}
}

// batchBoundary reports whether a batch of data starts at n.
func batchBoundary(data []byte, n int) bool {
	for at := 0; at < n; {
		b, err := record.Parse(data[at:])
		if err != nil {
			return false
		}
		at += len(b)
		if at == n {
			return true
		}
	}
	return false
}
