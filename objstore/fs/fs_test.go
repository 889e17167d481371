package fs_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tierlog/tierlog/objstore"
	"github.com/tierlog/tierlog/objstore/fs"
	"github.com/tierlog/tierlog/testing/objstoretest"
)

func TestConformance(t *testing.T) {
	objstoretest.Run(t, func(t *testing.T) *objstore.Store {
		d, err := fs.Open(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		return objstore.New(d, "file://test", objstore.Options{})
	}, objstoretest.Options{})
}

func TestMissingBucket(t *testing.T) {
	if _, err := fs.Open(filepath.Join(t.TempDir(), "nope")); !errors.Is(err, objstore.ErrBucketNotFound) || !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("open of a missing directory: %v", err)
	}
}

// TestListMatchesSortedKeys: for random trees of keys whose names sort
// around the slash ("a-b", "a/b", "a0", "a.b"), every page of List, for
// random prefixes, start keys and limits, is exactly the next keys of the
// sorted key set; pages continued one after another give the whole
// listing, and a key put between pages through the driver is seen.
func TestListMatchesSortedKeys(t *testing.T) {
	ctx := context.Background()
	parts := []string{"a", "a-b", "a.b", "a0", "b", "ab", "a/b"}
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, 7))
		d, err := fs.Open(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		keys := map[string]bool{}
		for range 60 {
			var k []string
			for range 1 + rng.IntN(3) {
				k = append(k, parts[rng.IntN(len(parts))])
			}
			key := strings.Join(k, "/")
			// A key may not be both a file and a directory.
			clash := false
			for other := range keys {
				if strings.HasPrefix(other, key+"/") || strings.HasPrefix(key, other+"/") {
					clash = true
				}
			}
			if clash || keys[key] {
				continue
			}
			if _, err := d.Put(ctx, key, strings.NewReader("x"), 1, objstore.PutOptions{}); err != nil {
				t.Fatal(err)
			}
			keys[key] = true
		}
		sorted := slices.Sorted(maps.Keys(keys))
		want := func(prefix, after string) []string {
			var out []string
			for _, k := range sorted {
				if strings.HasPrefix(k, prefix) && k > after {
					out = append(out, k)
				}
			}
			return out
		}
		for range 40 {
			prefix := ""
			if rng.IntN(3) > 0 {
				p := sorted[rng.IntN(len(sorted))]
				prefix = p[:rng.IntN(len(p)+1)]
			}
			after := ""
			if rng.IntN(2) == 0 {
				after = sorted[rng.IntN(len(sorted))]
			}
			limit := 1 + rng.IntN(5)
			var got []string
			for from := after; ; {
				page, more, err := d.List(ctx, prefix, from, limit)
				if err != nil {
					t.Fatal(err)
				}
				if len(page) > limit || (more && len(page) != limit) {
					t.Fatalf("seed %d: a page of %d keys (more %v) at limit %d", seed, len(page), more, limit)
				}
				for _, o := range page {
					got = append(got, o.Key)
				}
				if !more {
					break
				}
				from = page[len(page)-1].Key
			}
			if w := want(prefix, after); !slices.Equal(got, w) {
				t.Fatalf("seed %d: List(%q after %q, pages of %d) = %q, want %q", seed, prefix, after, limit, got, w)
			}
		}
		// A put between two pages of one listing is seen by the next.
		page, more, err := d.List(ctx, "", "", 1)
		if err != nil || !more {
			t.Fatalf("seed %d: first page %v, %v", seed, page, err)
		}
		late := page[0].Key + "~"
		if keys[late] || slices.ContainsFunc(sorted, func(k string) bool { return strings.HasPrefix(k, late+"/") || strings.HasPrefix(late, k+"/") }) {
			continue
		}
		if _, err := d.Put(ctx, late, strings.NewReader("x"), 1, objstore.PutOptions{}); err != nil {
			t.Fatal(err)
		}
		var rest []string
		for from := page[0].Key; ; {
			page, more, err := d.List(ctx, "", from, 3)
			if err != nil {
				t.Fatal(err)
			}
			for _, o := range page {
				rest = append(rest, o.Key)
			}
			if !more {
				break
			}
			from = page[len(page)-1].Key
		}
		if !slices.Contains(rest, late) {
			t.Fatalf("seed %d: %q, put between pages, missing from %q", seed, late, rest)
		}
	}
}

// BenchmarkListAll lists every key of a bucket of 500, 5,000 and 50,000
// objects (a hundred a directory, as segments under partition
// directories) through a Store's pages of 1,000: the cost per key listed
// should not grow with the bucket.
func BenchmarkListAll(b *testing.B) {
	for _, n := range []int{500, 5_000, 50_000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			d, err := fs.Open(b.TempDir())
			if err != nil {
				b.Fatal(err)
			}
			for i := range n {
				key := fmt.Sprintf("tl/t-%d/%020d.log", i/100, i)
				if _, err := d.Put(context.Background(), key, strings.NewReader("x"), 1, objstore.PutOptions{}); err != nil {
					b.Fatal(err)
				}
			}
			s := objstore.New(d, "file://bench", objstore.Options{})
			for b.Loop() {
				got := 0
				if err := s.List(context.Background(), "tl/", func(objstore.ObjectInfo) bool { got++; return true }); err != nil || got != n {
					b.Fatalf("listed %d of %d: %v", got, n, err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/key")
		})
	}
}
