// Package objstoretest is the conformance battery every objstore driver
// runs, directly and behind the fault injector:
//
//	objstoretest.Run(t, func(t *testing.T) *objstore.Store { return newStore(t) })
//
// The maker returns a Store over a fresh, empty bucket (or prefix) for each
// subtest.
package objstoretest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/tierlog/tierlog/objstore"
	"github.com/tierlog/tierlog/testing/faultstore"
)

// Options tune the battery for a driver.
type Options struct {
	// LargeSize is the size of the large-object test (default 24 MiB:
	// past the S3 drivers' multipart threshold).
	LargeSize int
}

var ctx = context.Background()

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Run runs the battery.
func Run(t *testing.T, newStore func(t *testing.T) *objstore.Store, opts Options) {
	if opts.LargeSize <= 0 {
		opts.LargeSize = 24 << 20
	}
	tests := []struct {
		name string
		fn   func(t *testing.T, s *objstore.Store)
	}{
		{"NotFound", testNotFound},
		{"RoundTripAndRanges", testRanges},
		{"Large", func(t *testing.T, s *objstore.Store) { testLarge(t, s, opts.LargeSize) }},
		{"LargeConditional", func(t *testing.T, s *objstore.Store) { testLargeConditional(t, s, opts.LargeSize) }},
		{"ListPagination", testList},
		{"UnusualKeys", testUnusualKeys},
		{"BatchDelete", testBatchDelete},
		{"CreateOnlyOneWinner", testCreateOnly},
		{"CompareAndSwapOneWinner", testCAS},
		{"ChecksumMismatch", testChecksum},
		{"Cancelled", testCancelled},
		{"InvalidKeys", testInvalidKeys},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newStore(t)
			tc.fn(t, s)
		})
	}
}

func put(t *testing.T, s *objstore.Store, key string, data []byte, opts objstore.PutOptions) objstore.ObjectInfo {
	t.Helper()
	info, err := s.Put(ctx, key, bytes.NewReader(data), int64(len(data)), opts)
	if err != nil {
		t.Fatalf("put %s: %v", key, err)
	}
	return info
}

func randBytes(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, seed))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func testNotFound(t *testing.T, s *objstore.Store) {
	if _, err := s.Head(ctx, "nope/missing"); !errors.Is(err, objstore.ErrNotFound) {
		t.Errorf("head of a missing key: %v", err)
	}
	if _, _, err := s.Get(ctx, "nope/missing", 0, -1); !errors.Is(err, objstore.ErrNotFound) {
		t.Errorf("get of a missing key: %v", err)
	}
	if _, err := s.ReadAll(ctx, "nope/missing", 5, 10); !errors.Is(err, objstore.ErrNotFound) {
		t.Errorf("ranged get of a missing key: %v", err)
	}
	if err := s.Delete(ctx, "nope/missing", "nope/also-missing"); err != nil {
		t.Errorf("delete of missing keys: %v", err)
	}
	n := 0
	if err := s.List(ctx, "nope/", func(objstore.ObjectInfo) bool { n++; return true }); err != nil || n != 0 {
		t.Errorf("list of an empty prefix: %d objects, %v", n, err)
	}
}

func testRanges(t *testing.T, s *objstore.Store) {
	data := randBytes(100_000, 1)
	info := put(t, s, "r/obj", data, objstore.PutOptions{})
	if info.Size != int64(len(data)) || info.ETag == "" {
		t.Fatalf("put info %+v", info)
	}
	h, err := s.Head(ctx, "r/obj")
	if err != nil || h.Size != int64(len(data)) || h.ETag != info.ETag {
		t.Fatalf("head %+v %v, put said %+v", h, err, info)
	}
	for _, c := range []struct{ off, n int64 }{
		{0, -1}, {0, 1}, {int64(len(data)) - 1, 1}, {int64(len(data)) - 1, -1}, {4096, 8192},
		{int64(len(data)) - 10, 100}, // past the end: clipped
	} {
		got, err := s.ReadAll(ctx, "r/obj", c.off, c.n)
		end := int64(len(data))
		if c.n >= 0 {
			end = min(end, c.off+c.n)
		}
		if c.off+c.n > int64(len(data)) && c.n >= 0 {
			// A range past the end returns what exists.
			if err == nil && !bytes.Equal(got, data[c.off:]) {
				t.Errorf("range %d+%d: wrong bytes", c.off, c.n)
			}
			continue
		}
		if err != nil || !bytes.Equal(got, data[c.off:end]) {
			t.Errorf("range %d+%d: %d bytes, %v", c.off, c.n, len(got), err)
		}
	}
	if _, _, err := s.Get(ctx, "r/obj", int64(len(data)), 10); !errors.Is(err, objstore.ErrInvalidRange) {
		t.Errorf("get at the end: %v", err)
	}
	if _, _, err := s.Get(ctx, "r/obj", int64(len(data))+5, -1); !errors.Is(err, objstore.ErrInvalidRange) {
		t.Errorf("get past the end: %v", err)
	}
	// Overwrite changes the ETag; empty objects work.
	info2 := put(t, s, "r/obj", data[:10], objstore.PutOptions{})
	if info2.ETag == info.ETag {
		t.Errorf("overwrite kept the ETag %s", info.ETag)
	}
	put(t, s, "r/empty", nil, objstore.PutOptions{})
	if got, err := s.ReadAll(ctx, "r/empty", 0, -1); err != nil || len(got) != 0 {
		t.Errorf("empty object: %d bytes, %v", len(got), err)
	}
}

func testLarge(t *testing.T, s *objstore.Store, size int) {
	data := randBytes(size, 2)
	crc := crc32.Checksum(data, castagnoli)
	info := put(t, s, "large/obj", data, objstore.PutOptions{CRC32C: crc, HasCRC32C: true})
	if info.Size != int64(size) {
		t.Fatalf("size %d", info.Size)
	}
	got, err := s.ReadAll(ctx, "large/obj", 0, -1)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("large read back: %d bytes, %v", len(got), err)
	}
	off := int64(size/2 - 100)
	got, err = s.ReadAll(ctx, "large/obj", off, 1<<20)
	if err != nil || !bytes.Equal(got, data[off:off+1<<20]) {
		t.Fatalf("1 MiB range of the large object: %v", err)
	}
}

// testLargeConditional: the conditions hold for objects past the
// multipart threshold too (S3 checks them at CompleteMultipartUpload), and
// a large object's ETag from its put is the one Head and List give.
func testLargeConditional(t *testing.T, s *objstore.Store, size int) {
	data := randBytes(size, 3)
	crc := crc32.Checksum(data, castagnoli)
	info := put(t, s, "lc/obj", data, objstore.PutOptions{IfNoneMatch: true, CRC32C: crc, HasCRC32C: true})
	h, err := s.Head(ctx, "lc/obj")
	if err != nil || h.ETag != info.ETag || h.Size != int64(size) {
		t.Fatalf("head %+v %v; the put said %+v", h, err, info)
	}
	var listed objstore.ObjectInfo
	s.List(ctx, "lc/", func(o objstore.ObjectInfo) bool { listed = o; return false })
	if listed.ETag != info.ETag || listed.Size != int64(size) {
		t.Fatalf("list %+v; the put said %+v", listed, info)
	}
	if _, err := s.Put(ctx, "lc/obj", bytes.NewReader(data), int64(size), objstore.PutOptions{IfNoneMatch: true}); !errors.Is(err, objstore.ErrPreconditionFailed) {
		t.Fatalf("create-only of a large object over an existing key: %v", err)
	}
	next := randBytes(size, 4)
	info2, err := s.Put(ctx, "lc/obj", bytes.NewReader(next), int64(size), objstore.PutOptions{IfMatch: info.ETag})
	if err != nil {
		t.Fatalf("If-Match with the current ETag: %v", err)
	}
	if _, err := s.Put(ctx, "lc/obj", bytes.NewReader(data), int64(size), objstore.PutOptions{IfMatch: info.ETag}); !errors.Is(err, objstore.ErrPreconditionFailed) {
		t.Fatalf("If-Match with a stale ETag: %v", err)
	}
	got, err := s.ReadAll(ctx, "lc/obj", 0, -1)
	if err != nil || !bytes.Equal(got, next) {
		t.Fatalf("the object after the swap: %d bytes, %v", len(got), err)
	}
	if h, _ := s.Head(ctx, "lc/obj"); h.ETag != info2.ETag {
		t.Fatalf("head ETag %s after a put that said %s", h.ETag, info2.ETag)
	}
	// Racing create-only writers of a large object: the condition is
	// checked when the upload completes, so one wins.
	wins, lost := race(t, 3, func(i int) error {
		_, err := s.Put(ctx, "lc/race", bytes.NewReader(data), int64(size), objstore.PutOptions{IfNoneMatch: true})
		return err
	})
	if wins != 1 || lost != 2 {
		t.Fatalf("create-only of a large object: %d winners, %d lost; want exactly one winner", wins, lost)
	}
}

func testList(t *testing.T, s *objstore.Store) {
	const n = 1100
	var wg sync.WaitGroup
	errs := make(chan error, n)
	sem := make(chan struct{}, 16)
	for i := 0; i < n; i++ {
		wg.Add(1)
		sem <- struct{}{}
		go func(i int) {
			defer wg.Done()
			defer func() { <-sem }()
			k := fmt.Sprintf("list/p/%05d", i)
			if _, err := s.Put(ctx, k, bytes.NewReader([]byte(k)), int64(len(k)), objstore.PutOptions{}); err != nil {
				errs <- err
			}
		}(i)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	put(t, s, "list/q", []byte("x"), objstore.PutOptions{})
	put(t, s, "lister", []byte("x"), objstore.PutOptions{})
	var keys []string
	if err := s.List(ctx, "list/p/", func(o objstore.ObjectInfo) bool { keys = append(keys, o.Key); return true }); err != nil {
		t.Fatal(err)
	}
	if len(keys) != n {
		t.Fatalf("listed %d keys under list/p/, want %d", len(keys), n)
	}
	for i, k := range keys {
		if k != fmt.Sprintf("list/p/%05d", i) {
			t.Fatalf("key %d is %s: not in order", i, k)
		}
	}
	var all []string
	s.List(ctx, "list", func(o objstore.ObjectInfo) bool { all = append(all, o.Key); return true })
	if len(all) != n+2 || all[len(all)-1] != "lister" {
		t.Fatalf("prefix \"list\": %d keys, last %q", len(all), all[len(all)-1])
	}
	// Stopping early.
	seen := 0
	s.List(ctx, "list/p/", func(objstore.ObjectInfo) bool { seen++; return seen < 5 })
	if seen != 5 {
		t.Fatalf("list did not stop when asked: %d", seen)
	}
}

func testUnusualKeys(t *testing.T, s *objstore.Store) {
	keys := []string{"u/with space", "u/ünïcødé", "u/plus+equals=comma,at@", "u/percent%20encoded", "u/.dotfile", "u/semi;colon", "u/tilde~dash-under_score"}
	for i, k := range keys {
		put(t, s, k, []byte{byte(i)}, objstore.PutOptions{})
	}
	for i, k := range keys {
		got, err := s.ReadAll(ctx, k, 0, -1)
		if err != nil || len(got) != 1 || got[0] != byte(i) {
			t.Errorf("key %q: %v %v", k, got, err)
		}
	}
	var listed []string
	s.List(ctx, "u/", func(o objstore.ObjectInfo) bool { listed = append(listed, o.Key); return true })
	if len(listed) != len(keys) {
		t.Errorf("listed %v", listed)
	}
	if err := s.Delete(ctx, keys...); err != nil {
		t.Fatal(err)
	}
}

func testBatchDelete(t *testing.T, s *objstore.Store) {
	var keys []string
	for i := 0; i < 1050; i++ {
		keys = append(keys, fmt.Sprintf("del/%04d", i))
	}
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for _, k := range keys {
		wg.Add(1)
		sem <- struct{}{}
		go func(k string) {
			defer wg.Done()
			defer func() { <-sem }()
			s.Put(ctx, k, bytes.NewReader(nil), 0, objstore.PutOptions{})
		}(k)
	}
	wg.Wait()
	if err := s.Delete(ctx, append(keys, "del/not-there")...); err != nil {
		t.Fatal(err)
	}
	n := 0
	s.List(ctx, "del/", func(objstore.ObjectInfo) bool { n++; return true })
	if n != 0 {
		t.Fatalf("%d keys left after deleting all", n)
	}
}

// race runs n writers at once and returns how many succeeded and how many
// failed with ErrPreconditionFailed (any other error fails the test).
func race(t *testing.T, n int, fn func(i int) error) (wins, lost int) {
	var wg sync.WaitGroup
	var mu sync.Mutex
	start := make(chan struct{})
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			<-start
			err := fn(i)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				wins++
			case errors.Is(err, objstore.ErrPreconditionFailed):
				lost++
			default:
				t.Errorf("writer %d: %v", i, err)
			}
		}(i)
	}
	close(start)
	wg.Wait()
	return wins, lost
}

func testCreateOnly(t *testing.T, s *objstore.Store) {
	wins, lost := race(t, 16, func(i int) error {
		b := []byte(fmt.Sprint(i))
		_, err := s.Put(ctx, "cond/manifest", bytes.NewReader(b), int64(len(b)), objstore.PutOptions{IfNoneMatch: true})
		return err
	})
	if wins != 1 || lost != 15 {
		t.Fatalf("create-only: %d winners, %d lost; want exactly one winner", wins, lost)
	}
}

func testCAS(t *testing.T, s *objstore.Store) {
	info := put(t, s, "cas/manifest", []byte("gen0"), objstore.PutOptions{})
	wins, lost := race(t, 16, func(i int) error {
		b := []byte(fmt.Sprintf("gen1-%d", i))
		_, err := s.Put(ctx, "cas/manifest", bytes.NewReader(b), int64(len(b)), objstore.PutOptions{IfMatch: info.ETag})
		return err
	})
	if wins != 1 || lost != 15 {
		t.Fatalf("compare-and-swap: %d winners, %d lost; want exactly one winner", wins, lost)
	}
	if _, err := s.Put(ctx, "cas/missing", bytes.NewReader(nil), 0, objstore.PutOptions{IfMatch: info.ETag}); !errors.Is(err, objstore.ErrPreconditionFailed) {
		t.Fatalf("If-Match on a missing key: %v", err)
	}
}

func testChecksum(t *testing.T, s *objstore.Store) {
	data := []byte("the bytes that were meant")
	bad := crc32.Checksum(data, castagnoli) ^ 1
	_, err := s.Put(ctx, "crc/obj", bytes.NewReader(data), int64(len(data)), objstore.PutOptions{CRC32C: bad, HasCRC32C: true})
	if !errors.Is(err, objstore.ErrChecksumMismatch) {
		t.Fatalf("put with a wrong CRC-32C: %v", err)
	}
	if _, err := s.Head(ctx, "crc/obj"); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("a rejected put left an object: %v", err)
	}
	put(t, s, "crc/obj", data, objstore.PutOptions{CRC32C: crc32.Checksum(data, castagnoli), HasCRC32C: true})
}

func testCancelled(t *testing.T, s *objstore.Store) {
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := s.Put(cctx, "c/obj", bytes.NewReader([]byte("x")), 1, objstore.PutOptions{}); !errors.Is(err, context.Canceled) {
		t.Errorf("put with a cancelled context: %v", err)
	}
	put(t, s, "c/obj", []byte("x"), objstore.PutOptions{})
	if _, _, err := s.Get(cctx, "c/obj", 0, -1); !errors.Is(err, context.Canceled) {
		t.Errorf("get with a cancelled context: %v", err)
	}
	if err := s.List(cctx, "c/", func(objstore.ObjectInfo) bool { return true }); !errors.Is(err, context.Canceled) {
		t.Errorf("list with a cancelled context: %v", err)
	}
}

func testInvalidKeys(t *testing.T, s *objstore.Store) {
	for _, k := range []string{"", "a//b", "../x", "a/./b", "/abs", "trailing/", string(bytes.Repeat([]byte("k"), 300))} {
		if _, err := s.Put(ctx, k, bytes.NewReader(nil), 0, objstore.PutOptions{}); !errors.Is(err, objstore.ErrInvalidKey) {
			t.Errorf("put %q: %v", k, err)
		}
	}
}

// RunBehindFaults runs the battery with each driver wrapped in
// faultstore: retryable errors, latency, bodies cut mid-read and short
// reads, drawn from a logged seed. Every operation must still succeed (the
// Store retries), and the run must have injected and retried faults.
func RunBehindFaults(t *testing.T, newDriver func(t *testing.T) (objstore.Driver, string), opts Options) {
	seed := rand.Uint64()
	t.Logf("faultstore seed %d", seed)
	var mu sync.Mutex
	var stores []*objstore.Store
	var drivers []*faultstore.Driver
	Run(t, func(t *testing.T) *objstore.Store {
		inner, name := newDriver(t)
		fd := faultstore.Wrap(inner, seed,
			faultstore.Rule{Fault: faultstore.FailBefore, Probability: 0.15},
			faultstore.Rule{Fault: faultstore.Latency, Latency: 2e6, Probability: 0.1},
			faultstore.Rule{Op: objstore.OpGet, Fault: faultstore.CutBody, AfterBytes: 7, Probability: 0.15},
			faultstore.Rule{Op: objstore.OpGet, Fault: faultstore.ShortRead, AfterBytes: 3, Probability: 0.05},
		)
		s := objstore.New(fd, name+" (faults)", objstore.Options{MaxAttempts: 12, BaseBackoff: 1e6, MaxBackoff: 2e7})
		mu.Lock()
		stores, drivers = append(stores, s), append(drivers, fd)
		mu.Unlock()
		return s
	}, opts)
	var injected, retries int64
	for i, s := range stores {
		injected += drivers[i].Injected()
		for _, n := range s.Stats().Retries {
			retries += n
		}
	}
	t.Logf("faults injected: %d, retries: %d", injected, retries)
	if len(stores) == 0 {
		t.Skip("no store was made: every case skipped (see why above)")
	}
	if injected == 0 || retries == 0 {
		t.Fatalf("no faults were injected and retried (injected %d, retries %d)", injected, retries)
	}
}
