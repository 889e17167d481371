package tiered_test

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tierlog/tierlog/manifest"
	"github.com/tierlog/tierlog/objstore"
	"github.com/tierlog/tierlog/objstore/mem"
	"github.com/tierlog/tierlog/tiered"
)

// layeredBucket puts a layered manifest of n synthetic segments (their
// objects are not put) under the prefix of orders-0 in a new in-memory
// bucket.
func layeredBucket(tb testing.TB, n int) (*objstore.Store, *manifest.Manifest) {
	tb.Helper()
	store := objstore.New(mem.New(), "mem://cold", objstore.Options{})
	m := &manifest.Manifest{Generation: 1, WriterEpoch: 1, Segments: synthSegments(0, n, time.Now().UnixMilli())}
	var id uint64
	made, err := m.Layer(nil, func() (b [8]byte) { id++; b[7], b[6], b[5] = byte(id), byte(id>>8), byte(id>>16); return b })
	if err != nil {
		tb.Fatal(err)
	}
	head, err := m.Encode()
	if err != nil {
		tb.Fatal(err)
	}
	l := manifest.NewLayout("tl/orders-0")
	for _, po := range made {
		if _, err := store.Put(ctx, l.Part(po.Part), bytes.NewReader(po.Data), int64(len(po.Data)), objstore.PutOptions{}); err != nil {
			tb.Fatal(err)
		}
	}
	if _, err := store.Put(ctx, l.Manifest(), bytes.NewReader(head), int64(len(head)), objstore.PutOptions{}); err != nil {
		tb.Fatal(err)
	}
	return store, m
}

// coldLookup opens orders-0 on a new Backend (empty caches) and looks up
// offset in the bucket, returning the GETs and bytes read from the open
// on, and the lookup's error. The segments' objects are not in the
// bucket: the lookup ends at the GET of the segment's offset index, the
// first request that is not the manifest's.
func coldLookup(tb testing.TB, store *objstore.Store, offset int64) (gets int64, read int64, err error) {
	tb.Helper()
	b, err := tiered.OpenBackend(tb.TempDir(), tiered.BackendOptions{Store: store, Prefix: "tl"})
	if err != nil {
		tb.Fatal(err)
	}
	defer b.Close()
	before := store.Stats()
	bp, err := b.Open(ctx, "orders", 0, cfg(tb, "remote.storage.enable", "true"))
	if err != nil {
		tb.Fatal(err)
	}
	p := bp.(*tiered.Partition)
	if err := p.Attach(ctx); err != nil {
		tb.Fatal(err)
	}
	_, err = p.LookupRemote(ctx, offset)
	after := store.Stats()
	return after.Requests[objstore.OpGet] - before.Requests[objstore.OpGet], after.BytesIn - before.BytesIn, err
}

// TestColdLookupBounded: a lookup on a partition whose caches are empty
// reads the head, then the part holding the offset: whole when small,
// else its block directory and one block. At 70,000 segments (a part of
// 65,536, about 3 MB) that is 4 GETs with the segment's index, and a few
// KiB of manifest; the whole part is never read.
func TestColdLookupBounded(t *testing.T) {
	store, m := layeredBucket(t, 70_000)
	if m.Parts[0].Tier != manifest.MaxTier || m.Parts[0].Bytes < 1<<20 {
		t.Fatalf("the first part is of tier %d, %d bytes: want the largest tier", m.Parts[0].Tier, m.Parts[0].Bytes)
	}
	for _, off := range []int64{0, 3_000_000, 6_553_500, 6_553_600, 6_999_950} {
		gets, read, err := coldLookup(t, store, off)
		seg := m.Segments[off/100]
		if err == nil || !errors.Is(err, objstore.ErrNotFound) || !strings.Contains(err.Error(), seg.Name(manifest.IndexSuffix)) {
			t.Fatalf("offset %d: the lookup ended with %v; want the missing offset index of segment %d", off, err, seg.BaseOffset)
		}
		if gets > 4 || read > 64<<10 {
			t.Errorf("offset %d: a cold lookup took %d GETs and %d bytes of manifest, want at most 4 and 64 KiB", off, gets, read)
		}
	}
}

// BenchmarkColdLookup: the requests and bytes a cold lookup takes (a new
// Backend, empty caches: open, attach, find the segment, GET its index)
// at 1,000, 100,000 and 1,000,000 segments, the offset in the oldest
// part. The goal: at most 4 requests and 256 KiB of metadata at any
// length.
func BenchmarkColdLookup(b *testing.B) {
	for _, n := range []int{1_000, 100_000, 1_000_000} {
		b.Run(fmt.Sprintf("segments=%d", n), func(b *testing.B) {
			store, _ := layeredBucket(b, n)
			var gets, read int64
			for b.Loop() {
				var err error
				gets, read, err = coldLookup(b, store, 150)
				if err == nil {
					b.Fatal("the lookup found a segment whose objects are not in the bucket")
				}
			}
			b.ReportMetric(float64(gets), "GETs")
			b.ReportMetric(float64(read)/1024, "KiB-read")
		})
	}
}
