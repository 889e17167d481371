package seal_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/tierlog/tierlog/objstore"
	"github.com/tierlog/tierlog/objstore/mem"
	"github.com/tierlog/tierlog/objstore/seal"
	"github.com/tierlog/tierlog/testing/objstoretest"
)

// ring makes a key file ring from "id" names, the last one active.
func ring(t testing.TB, ids ...string) *seal.KeyFile {
	t.Helper()
	return ringWith(t, ids, nil)
}

// keys holds each id's line, so two rings share a key by id.
var keyLines = map[string]string{}

func ringWith(t testing.TB, ids []string, override map[string]string) *seal.KeyFile {
	t.Helper()
	var b strings.Builder
	for _, id := range ids {
		line := override[id]
		if line == "" {
			if line = keyLines[id]; line == "" {
				var err error
				if line, err = seal.NewKey(id); err != nil {
					t.Fatal(err)
				}
				keyLines[id] = line
			}
		}
		fmt.Fprintln(&b, line)
	}
	fmt.Fprintf(&b, "active %s\n", ids[len(ids)-1])
	kf, err := seal.ParseKeyFile("test", strings.NewReader(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	return kf
}

func sealed(t testing.TB, inner objstore.Driver, r seal.KeyRing, opts seal.Options) *objstore.Store {
	t.Helper()
	d, err := seal.New(inner, r, opts)
	if err != nil {
		t.Fatal(err)
	}
	return objstore.New(d, "sealed", objstore.Options{})
}

func TestConformance(t *testing.T) {
	objstoretest.Run(t, func(t *testing.T) *objstore.Store {
		return sealed(t, mem.New(), ring(t, "k1"), seal.Options{ChunkSize: seal.MinChunkSize})
	}, objstoretest.Options{})
}

func TestConformanceBehindFaults(t *testing.T) {
	objstoretest.RunBehindFaults(t, func(t *testing.T) (objstore.Driver, string) {
		d, err := seal.New(mem.New(), ring(t, "k1"), seal.Options{ChunkSize: seal.MinChunkSize})
		if err != nil {
			t.Fatal(err)
		}
		return d, "sealed"
	}, objstoretest.Options{})
}

const chunk = seal.MinChunkSize

func payload(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 1))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.IntN(256))
	}
	return b
}

func put(t testing.TB, s *objstore.Store, key string, data []byte) {
	t.Helper()
	if _, err := s.Put(context.Background(), key, bytes.NewReader(data), int64(len(data)), objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
}

// sizes are the object sizes every test seals: empty, within a chunk, at
// and around its boundaries, several chunks.
var sizes = []int{0, 1, chunk - 1, chunk, chunk + 1, 2 * chunk, 3*chunk + 5}

// TestEveryRangeReadsThePlaintext reads every object whole and at ranges
// starting and ending at every chunk boundary and around it.
func TestEveryRangeReadsThePlaintext(t *testing.T) {
	ctx := context.Background()
	inner := mem.New()
	for _, fresh := range []bool{false, true} {
		s := sealed(t, inner, ring(t, "k1"), seal.Options{ChunkSize: chunk})
		for _, n := range sizes {
			key := fmt.Sprintf("obj-%d", n)
			data := payload(n, uint64(n))
			if !fresh {
				put(t, s, key, data)
			}
			// fresh: a new Driver over the same bucket, no header kept.
			got, err := s.ReadAll(ctx, key, 0, -1)
			if err != nil || !bytes.Equal(got, data) {
				t.Fatalf("%s whole: %d bytes, %v", key, len(got), err)
			}
			info, err := s.Head(ctx, key)
			if err != nil || info.Size != int64(n) {
				t.Fatalf("%s head: %+v %v", key, info, err)
			}
			var points []int
			for _, b := range []int{0, chunk, 2 * chunk, 3 * chunk, n} {
				for _, d := range []int{-1, 0, 1} {
					if p := b + d; p >= 0 && p <= n {
						points = append(points, p)
					}
				}
			}
			for _, a := range points {
				for _, b := range points {
					if b < a || (a == n && n > 0) {
						continue
					}
					got, err := s.ReadAll(ctx, key, int64(a), int64(b-a))
					if err != nil || !bytes.Equal(got, data[a:b]) {
						t.Fatalf("%s [%d, %d): %d bytes, %v", key, a, b, len(got), err)
					}
				}
			}
			if n > 0 {
				if _, err := s.ReadAll(ctx, key, int64(n), 1); !errors.Is(err, objstore.ErrInvalidRange) {
					t.Fatalf("%s read at its end: %v, want ErrInvalidRange", key, err)
				}
			}
		}
	}
}

// TestNoPlaintextInTheBucket: no object holds a run of its plaintext.
func TestNoPlaintextInTheBucket(t *testing.T) {
	inner := mem.New()
	s := sealed(t, inner, ring(t, "k1"), seal.Options{ChunkSize: chunk})
	value := []byte("the-value-that-must-not-be-seen-")
	data := bytes.Repeat(value, 1000)
	put(t, s, "values", data)
	raw := objstore.New(inner, "raw", objstore.Options{})
	n := 0
	if err := raw.List(context.Background(), "", func(o objstore.ObjectInfo) bool {
		b, err := raw.ReadAll(context.Background(), o.Key, 0, -1)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(b, value[:16]) {
			t.Errorf("%s holds plaintext", o.Key)
		}
		n++
		return true
	}); err != nil {
		t.Fatal(err)
	}
	if n != 2 { // the object and the bucket key
		t.Fatalf("%d objects in the bucket, want 2", n)
	}
}

// rawBytes and setRaw read and replace an object's stored bytes.
func rawBytes(t *testing.T, inner objstore.Driver, key string) []byte {
	t.Helper()
	b, err := objstore.New(inner, "raw", objstore.Options{}).ReadAll(context.Background(), key, 0, -1)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func setRaw(t *testing.T, inner objstore.Driver, key string, b []byte) {
	t.Helper()
	if _, err := inner.Put(context.Background(), key, bytes.NewReader(b), int64(len(b)), objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
}

// wantObjectError checks err names the object and the chunk (-1: the
// header) with the cause.
func wantObjectError(t *testing.T, err error, key string, chunk int64, cause error) {
	t.Helper()
	var oe *seal.ObjectError
	if !errors.As(err, &oe) || oe.Object != key || oe.Chunk != chunk || !errors.Is(err, cause) || !errors.Is(err, objstore.ErrCorrupt) {
		t.Fatalf("got %v, want %v of %s chunk %d", err, cause, key, chunk)
	}
	if !strings.Contains(err.Error(), key) {
		t.Fatalf("%q does not name %s", err, key)
	}
}

func TestTamperingIsNamed(t *testing.T) {
	ctx := context.Background()
	const n = 3*chunk + 5
	stride := int64(chunk + seal.TagSize)
	for _, tc := range []struct {
		name  string
		edit  func(a, b []byte) []byte // a: the object, b: another of the same size
		chunk int64
		cause error
	}{
		{"a flipped byte in the header", func(a, _ []byte) []byte { a[45] ^= 1; return a }, -1, seal.ErrTampered},
		{"a flipped size in the header", func(a, _ []byte) []byte { a[23] ^= 1; return a }, -1, seal.ErrTampered},
		{"a flipped tag of the header", func(a, _ []byte) []byte { a[seal.HeaderSize-1] ^= 1; return a }, -1, seal.ErrTampered},
		{"a flipped byte in chunk 0", func(a, _ []byte) []byte { a[seal.HeaderSize+10] ^= 0x80; return a }, 0, seal.ErrTampered},
		{"a flipped byte in chunk 2", func(a, _ []byte) []byte { a[seal.HeaderSize+2*stride+7] ^= 1; return a }, 2, seal.ErrTampered},
		{"a flipped tag of the last chunk", func(a, _ []byte) []byte { a[len(a)-1] ^= 1; return a }, 3, seal.ErrTampered},
		{"chunks 0 and 1 swapped", func(a, _ []byte) []byte {
			c0 := append([]byte(nil), a[seal.HeaderSize:seal.HeaderSize+stride]...)
			copy(a[seal.HeaderSize:], a[seal.HeaderSize+stride:seal.HeaderSize+2*stride])
			copy(a[seal.HeaderSize+stride:], c0)
			return a
		}, 0, seal.ErrTampered},
		{"chunk 1 from another object", func(a, b []byte) []byte {
			copy(a[seal.HeaderSize+stride:seal.HeaderSize+2*stride], b[seal.HeaderSize+stride:])
			return a
		}, 1, seal.ErrTampered},
		{"the header from another object", func(a, b []byte) []byte { copy(a, b[:seal.HeaderSize]); return a }, -1, seal.ErrTampered},
		{"cut inside the last chunk", func(a, _ []byte) []byte { return a[:len(a)-3] }, 3, seal.ErrTruncated},
		{"cut at a chunk boundary", func(a, _ []byte) []byte { return a[:seal.HeaderSize+3*stride] }, 3, seal.ErrTruncated},
		{"cut inside the header", func(a, _ []byte) []byte { return a[:40] }, -1, seal.ErrTruncated},
		{"a byte added", func(a, _ []byte) []byte { return append(a, 0) }, 3, seal.ErrTruncated},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inner := mem.New()
			r := ring(t, "k1")
			s := sealed(t, inner, r, seal.Options{ChunkSize: chunk})
			put(t, s, "a", payload(n, 1))
			put(t, s, "b", payload(n, 2))
			setRaw(t, inner, "a", tc.edit(rawBytes(t, inner, "a"), rawBytes(t, inner, "b")))
			// A new Driver: nothing kept from the writes.
			s = sealed(t, inner, r, seal.Options{ChunkSize: chunk})
			_, err := s.ReadAll(ctx, "a", 0, -1)
			wantObjectError(t, err, "a", tc.chunk, tc.cause)
			if tc.chunk > 0 && tc.cause == seal.ErrTampered {
				// A ranged read of an earlier chunk is served; one of the
				// tampered chunk is refused.
				if _, err := s.ReadAll(ctx, "a", 0, 10); err != nil {
					t.Fatal(err)
				}
				_, err = s.ReadAll(ctx, "a", tc.chunk*chunk+1, 2)
				wantObjectError(t, err, "a", tc.chunk, tc.cause)
			}
		})
	}
}

// TestRenamedObjectDoesNotOpen: an object copied under another key is
// not that key's.
func TestRenamedObjectDoesNotOpen(t *testing.T) {
	inner := mem.New()
	s := sealed(t, inner, ring(t, "k1"), seal.Options{ChunkSize: chunk})
	put(t, s, "a", payload(100, 1))
	setRaw(t, inner, "b", rawBytes(t, inner, "a"))
	_, err := s.ReadAll(context.Background(), "b", 0, -1)
	wantObjectError(t, err, "b", -1, seal.ErrTampered)
}

func TestWrongOrMissingKeyIsNamed(t *testing.T) {
	ctx := context.Background()
	inner := mem.New()
	put(t, sealed(t, inner, ring(t, "k1"), seal.Options{}), "a", payload(100, 1))

	other, err := seal.NewKey("k1")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		ring  seal.KeyRing
		cause error
	}{
		{"the ring lacks k1", ring(t, "k9"), seal.ErrUnknownKey},
		{"another key named k1", ringWith(t, []string{"k1"}, map[string]string{"k1": other}), seal.ErrWrongKey},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := sealed(t, inner, tc.ring, seal.Options{})
			for _, read := range []func() error{
				func() error { _, err := s.ReadAll(ctx, "a", 0, -1); return err },
				func() error { _, err := s.ReadAll(ctx, "a", 5, 5); return err },
				func() error { _, err := s.Head(ctx, "a"); return err },
			} {
				err := read()
				var ke *seal.KeyError
				if !errors.As(err, &ke) || ke.ID != "k1" || ke.Object != "a" || !errors.Is(err, tc.cause) || !errors.Is(err, objstore.ErrAccessDenied) {
					t.Fatalf("got %v, want %v naming k1 and a", err, tc.cause)
				}
				if !strings.Contains(err.Error(), `"k1"`) || !strings.Contains(err.Error(), " a:") {
					t.Fatalf("%q does not name the key and the object", err)
				}
			}
		})
	}
	t.Run("the bucket key's object is gone", func(t *testing.T) {
		raw := objstore.New(inner, "raw", objstore.Options{})
		var keys []string
		raw.List(ctx, seal.KeyDir, func(o objstore.ObjectInfo) bool { keys = append(keys, o.Key); return true })
		if len(keys) != 1 {
			t.Fatalf("bucket keys %v", keys)
		}
		b := rawBytes(t, inner, keys[0])
		if err := raw.Delete(ctx, keys[0]); err != nil {
			t.Fatal(err)
		}
		defer setRaw(t, inner, keys[0], b)
		_, err := sealed(t, inner, ring(t, "k1"), seal.Options{}).ReadAll(ctx, "a", 0, -1)
		if !errors.Is(err, seal.ErrUnknownKey) || !strings.Contains(err.Error(), keys[0]) {
			t.Fatalf("got %v, want ErrUnknownKey naming %s", err, keys[0])
		}
	})
}

func TestPlaintextObjects(t *testing.T) {
	ctx := context.Background()
	inner := mem.New()
	setRaw(t, inner, "old", []byte("written before sealing"))
	_, err := sealed(t, inner, ring(t, "k1"), seal.Options{}).ReadAll(ctx, "old", 0, -1)
	wantObjectError(t, err, "old", -1, seal.ErrNotSealed)

	s := sealed(t, inner, ring(t, "k1"), seal.Options{ReadPlaintext: true})
	for _, rg := range [][2]int64{{0, -1}, {8, 6}, {8, -1}} {
		got, err := s.ReadAll(ctx, "old", rg[0], rg[1])
		want := "written before sealing"[rg[0]:]
		if rg[1] >= 0 {
			want = want[:rg[1]]
		}
		if err != nil || string(got) != want {
			t.Fatalf("%v: %q %v", rg, got, err)
		}
	}
	if info, err := s.Head(ctx, "old"); err != nil || info.Size != 22 {
		t.Fatalf("head %+v %v", info, err)
	}
}

// TestRewrittenObjectReadsAfresh: a key written again (a manifest's) is
// read as it is now, the kept header checked against the ETag.
func TestRewrittenObjectReadsAfresh(t *testing.T) {
	ctx := context.Background()
	inner := mem.New()
	r := ring(t, "k1")
	reader := sealed(t, inner, r, seal.Options{ChunkSize: chunk})
	writer := sealed(t, inner, r, seal.Options{ChunkSize: chunk})
	put(t, writer, "m", payload(3*chunk, 1))
	if _, err := reader.ReadAll(ctx, "m", chunk, 10); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		data := payload(3*chunk+i, uint64(10+i))
		put(t, writer, "m", data)
		got, err := reader.ReadAll(ctx, "m", chunk, 10)
		if err != nil || !bytes.Equal(got, data[chunk:chunk+10]) {
			t.Fatalf("rewrite %d: %v", i, err)
		}
	}
}

func TestChecksums(t *testing.T) {
	ctx := context.Background()
	s := sealed(t, mem.New(), ring(t, "k1"), seal.Options{ChunkSize: chunk})
	data := payload(2*chunk+3, 1)
	_, err := s.Put(ctx, "x", bytes.NewReader(data), int64(len(data)), objstore.PutOptions{CRC32C: 1, HasCRC32C: true})
	if !errors.Is(err, objstore.ErrChecksumMismatch) {
		t.Fatalf("a wrong CRC-32C: %v", err)
	}
	_, err = s.Put(ctx, "x", bytes.NewReader(data[:10]), int64(len(data)), objstore.PutOptions{})
	if err == nil || !strings.Contains(err.Error(), "shorter") {
		t.Fatalf("a short body: %v", err)
	}
}

func TestReservedKeys(t *testing.T) {
	ctx := context.Background()
	inner := mem.New()
	s := sealed(t, inner, ring(t, "k1"), seal.Options{})
	put(t, s, "a", []byte("x"))
	key := seal.KeyDir + "00112233445566778899aabbccddeeff"
	if _, err := s.Put(ctx, key, strings.NewReader("x"), 1, objstore.PutOptions{}); !errors.Is(err, objstore.ErrInvalidKey) {
		t.Fatalf("put under the keys: %v", err)
	}
	if err := s.Delete(ctx, key); !errors.Is(err, objstore.ErrInvalidKey) {
		t.Fatalf("delete under the keys: %v", err)
	}
	var listed []string
	if err := s.List(ctx, "", func(o objstore.ObjectInfo) bool { listed = append(listed, o.Key); return true }); err != nil {
		t.Fatal(err)
	}
	if len(listed) != 1 || listed[0] != "a" {
		t.Fatalf("listed %v, want [a]", listed)
	}
}

// countingDriver fails its n-th request (counting from 1), once.
type countingDriver struct {
	objstore.Driver
	n, calls int
}

func (c *countingDriver) fail() error {
	c.calls++
	if c.calls == c.n {
		return fmt.Errorf("request %d: %w", c.n, objstore.ErrAccessDenied) // not retried
	}
	return nil
}

func (c *countingDriver) Put(ctx context.Context, key string, body io.ReadSeeker, size int64, opts objstore.PutOptions) (objstore.ObjectInfo, error) {
	if err := c.fail(); err != nil {
		return objstore.ObjectInfo{}, err
	}
	return c.Driver.Put(ctx, key, body, size, opts)
}

func (c *countingDriver) Get(ctx context.Context, key string, off, n int64) (io.ReadCloser, objstore.ObjectInfo, error) {
	if err := c.fail(); err != nil {
		return nil, objstore.ObjectInfo{}, err
	}
	return c.Driver.Get(ctx, key, off, n)
}

func (c *countingDriver) List(ctx context.Context, prefix, after string, limit int) ([]objstore.ObjectInfo, bool, error) {
	if err := c.fail(); err != nil {
		return nil, false, err
	}
	return c.Driver.List(ctx, prefix, after, limit)
}

// TestRekeyInterruptedAtEveryRequest: objects written by three Drivers
// (three bucket keys) under k1; rekey to k2 fails at its k-th request for
// every k, is run again to the end, and then a ring holding only k2 reads
// every object.
func TestRekeyInterruptedAtEveryRequest(t *testing.T) {
	ctx := context.Background()
	want := map[string][]byte{}
	setup := func() objstore.Driver {
		inner := mem.New()
		for w := range 3 {
			s := sealed(t, inner, ring(t, "k1"), seal.Options{ChunkSize: chunk})
			for i := range 2 {
				key := fmt.Sprintf("w%d/o%d", w, i)
				want[key] = payload(chunk+i*100, uint64(w*10+i))
				put(t, s, key, want[key])
			}
		}
		return inner
	}
	// A dry run changes nothing and says what it would do.
	inner := setup()
	s := sealed(t, inner, ring(t, "k1", "k2"), seal.Options{})
	steps, err := seal.Rekey(ctx, s, seal.RekeyOptions{DryRun: true})
	if err != nil || len(steps) != 3 {
		t.Fatalf("dry run: %+v %v", steps, err)
	}
	for _, st := range steps {
		if st.Done || st.From != "k1" || st.To != "k2" {
			t.Fatalf("dry run step %+v", st)
		}
	}
	keys, _ := seal.BucketKeys(ctx, s)
	for _, k := range keys {
		if k.KEK != "k1" || !k.Retired {
			t.Fatalf("after a dry run: %+v", k)
		}
	}
	for k := 1; ; k++ {
		inner := setup()
		cd := &countingDriver{Driver: inner, n: k}
		s := sealed(t, cd, ring(t, "k1", "k2"), seal.Options{})
		_, err := seal.Rekey(ctx, s, seal.RekeyOptions{})
		finished := cd.calls < k
		if err == nil && !finished {
			t.Fatalf("request %d failed and rekey said nothing", k)
		}
		if !finished {
			// Resume.
			if _, err := seal.Rekey(ctx, s, seal.RekeyOptions{}); err != nil {
				t.Fatalf("resume after request %d: %v", k, err)
			}
		}
		only := sealed(t, inner, ring(t, "k2"), seal.Options{})
		keys, err := seal.BucketKeys(ctx, only)
		if err != nil || len(keys) != 3 {
			t.Fatalf("after %d: %+v %v", k, keys, err)
		}
		for _, bk := range keys {
			if bk.KEK != "k2" || bk.Retired {
				t.Fatalf("after %d: %+v", k, bk)
			}
		}
		for key, data := range want {
			got, err := only.ReadAll(ctx, key, 0, -1)
			if err != nil || !bytes.Equal(got, data) {
				t.Fatalf("interrupted at %d: %s: %v", k, key, err)
			}
		}
		if finished {
			if k < 6 {
				t.Fatalf("rekey made %d requests: want a LIST and a GET and a PUT per key", k-1)
			}
			return
		}
	}
}

func TestObjectKey(t *testing.T) {
	ctx := context.Background()
	inner := mem.New()
	put(t, sealed(t, inner, ring(t, "k1"), seal.Options{}), "a", []byte("x"))
	s := sealed(t, inner, ring(t, "k1", "k2"), seal.Options{})
	put(t, s, "b", []byte("y"))
	keys, err := seal.BucketKeys(ctx, s)
	if err != nil || len(keys) != 2 {
		t.Fatal(keys, err)
	}
	kek := map[string]string{}
	for _, k := range keys {
		kek[k.ID] = k.KEK
	}
	d, _ := seal.Sealed(s)
	for key, want := range map[string]string{"a": "k1", "b": "k2"} {
		id, ok, err := d.ObjectKey(ctx, key)
		if err != nil || !ok || kek[id] != want {
			t.Fatalf("%s: %s %v %v: KEK %s, want %s", key, id, ok, err, kek[id], want)
		}
	}
}

func TestKeyFile(t *testing.T) {
	k1, _ := seal.NewKey("k1")
	for _, tc := range []struct{ text, want string }{
		{"", "no keys"},
		{k1 + "\n", "no \"active ID\""},
		{k1 + "\nactive k2\n", `the active key "k2" is not in the file`},
		{k1 + "\n" + k1 + "\nactive k1\n", `line 2: key "k1" given twice`},
		{"key k1 c2hvcnQ=\nactive k1\n", `line 1: key "k1": want the base64 of 32 bytes`},
		// A key pasted where an id goes is never shown.
		{k1 + "\nactive " + k1[7:] + "\n", "the active key (not a key id, not shown) is not in the file"},
		{"key " + k1[7:] + " k1\n", "line 1: key id (not a key id, not shown)"},
		{"key k/1 AAAA\n", "line 1: key id"},
		{k1 + "\nactive k1\nactive k1\n", "line 3: a second active line"},
		{"# comment\n\nkye k1 x\n", "line 3: want"},
	} {
		_, err := seal.ParseKeyFile("f", strings.NewReader(tc.text))
		if !errors.Is(err, seal.ErrBadKeyFile) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want %q", tc.text, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), k1[8:]) {
			t.Errorf("%q: the error quotes the key", tc.text)
		}
	}
	dir := t.TempDir()
	path := dir + "/keys"
	if err := writeFile(path, k1+"\nactive k1\n", 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := seal.LoadKeyFile(path); !errors.Is(err, seal.ErrBadKeyFile) || !strings.Contains(err.Error(), "chmod 600") {
		t.Fatalf("a key file others read: %v", err)
	}
	if err := chmod(path, 0o600); err != nil {
		t.Fatal(err)
	}
	kf, err := seal.LoadKeyFile(path)
	if err != nil || kf.Active() != "k1" {
		t.Fatal(kf, err)
	}
}

// TestReadsOfAnotherChunkSize: objects sealed in 4 KiB chunks read right
// through a Driver that seals in 8 KiB ones, at every range.
func TestReadsOfAnotherChunkSize(t *testing.T) {
	ctx := context.Background()
	inner := mem.New()
	w := sealed(t, inner, ring(t, "k1"), seal.Options{ChunkSize: chunk})
	data := payload(5*chunk+9, 7)
	put(t, w, "x", data)
	for _, kept := range []bool{false, true} {
		r := sealed(t, inner, ring(t, "k1"), seal.Options{ChunkSize: 2 * chunk})
		if kept {
			if _, err := r.Head(ctx, "x"); err != nil {
				t.Fatal(err)
			}
		}
		for a := 0; a <= len(data); a += chunk / 3 {
			for _, n := range []int{1, chunk, 3 * chunk, -1} {
				b := len(data)
				if n >= 0 {
					b = min(b, a+n)
					n = b - a // ReadAll wants the bytes there are
				}
				if a == len(data) {
					continue
				}
				got, err := r.ReadAll(ctx, "x", int64(a), int64(n))
				if err != nil || !bytes.Equal(got, data[a:b]) {
					t.Fatalf("kept %v [%d, +%d): %d bytes, %v", kept, a, n, len(got), err)
				}
			}
		}
	}
}

// getCounter counts GETs.
type getCounter struct {
	objstore.Driver
	gets atomic.Int64
}

func (g *getCounter) Get(ctx context.Context, key string, off, n int64) (io.ReadCloser, objstore.ObjectInfo, error) {
	g.gets.Add(1)
	return g.Driver.Get(ctx, key, off, n)
}

// TestGetsARead: a read of an object whose header is not kept is one GET
// from offset 0, two at once elsewhere; once kept, one; a bucket key is
// read once.
func TestGetsARead(t *testing.T) {
	ctx := context.Background()
	inner := mem.New()
	put(t, sealed(t, inner, ring(t, "k1"), seal.Options{ChunkSize: chunk}), "a", payload(4*chunk, 1))
	put(t, sealed(t, inner, ring(t, "k1"), seal.Options{ChunkSize: chunk}), "b", payload(4*chunk, 2))
	gc := &getCounter{Driver: inner}
	s := sealed(t, gc, ring(t, "k1"), seal.Options{ChunkSize: chunk})
	for _, tc := range []struct {
		key      string
		off, n   int64
		wantGets int64
	}{
		{"a", 0, 100, 2},          // the header's GET, and its bucket key's
		{"b", 0, -1, 2},           // another bucket key
		{"a", 2*chunk + 5, 10, 1}, // kept: the chunk
		{"b", 0, 10, 1},
	} {
		before := gc.gets.Load()
		if _, err := s.ReadAll(ctx, tc.key, tc.off, tc.n); err != nil {
			t.Fatal(err)
		}
		if got := gc.gets.Load() - before; got != tc.wantGets {
			t.Errorf("%s [%d, +%d): %d GETs, want %d", tc.key, tc.off, tc.n, got, tc.wantGets)
		}
	}
	s = sealed(t, gc, ring(t, "k1"), seal.Options{ChunkSize: chunk})
	s.ReadAll(ctx, "a", 0, 1) // the bucket key opened
	before := gc.gets.Load()
	if _, err := s.ReadAll(ctx, "b", 3*chunk, 10); err != nil {
		t.Fatal(err)
	}
	if got := gc.gets.Load() - before; got != 3 { // the header, the chunk, b's bucket key
		t.Errorf("a cold ranged read: %d GETs, want 3", got)
	}
}

// TestSelective: a Selective Driver writes objects as they are and reads
// both kinds; its Sealing seals, reads only sealed objects, and shares
// its bucket keys (one key object for both).
func TestSelective(t *testing.T) {
	ctx := context.Background()
	inner := mem.New()
	d, err := seal.New(inner, ring(t, "k1"), seal.Options{ChunkSize: chunk, Selective: true})
	if err != nil {
		t.Fatal(err)
	}
	if !d.Selective() || d.Sealing() == d || d.Sealing().Selective() || d.Sealing().Sealing() != d.Sealing() {
		t.Fatal("Sealing of a selective Driver is not a sealing one")
	}
	either := objstore.New(d, "either", objstore.Options{})
	sealing := objstore.New(d.Sealing(), "sealing", objstore.Options{})
	plainData, sealedData := payload(3*chunk+5, 1), payload(2*chunk+1, 2)
	put(t, either, "p/plain", plainData)
	put(t, sealing, "p/sealed", sealedData)
	if got := rawBytes(t, inner, "p/plain"); !bytes.Equal(got, plainData) {
		t.Fatal("a selective Driver sealed what it wrote")
	}
	if got := rawBytes(t, inner, "p/sealed"); !seal.LooksSealed(got) || bytes.Contains(got, sealedData[:32]) {
		t.Fatal("Sealing wrote plaintext")
	}
	for _, c := range []struct {
		key  string
		want []byte
	}{{"p/plain", plainData}, {"p/sealed", sealedData}} {
		for _, rg := range [][2]int64{{0, -1}, {chunk - 3, 7}, {chunk + 1, -1}} {
			got, err := either.ReadAll(ctx, c.key, rg[0], rg[1])
			want := c.want[rg[0]:]
			if rg[1] >= 0 {
				want = want[:rg[1]]
			}
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("either %s %v: %d bytes, %v", c.key, rg, len(got), err)
			}
		}
	}
	if got, err := sealing.ReadAll(ctx, "p/sealed", 0, -1); err != nil || !bytes.Equal(got, sealedData) {
		t.Fatalf("sealing read of a sealed object: %v", err)
	}
	_, err = sealing.ReadAll(ctx, "p/plain", 0, -1)
	wantObjectError(t, err, "p/plain", -1, seal.ErrNotSealed)
	// With ReadPlaintext given too (objects from before the key file),
	// Sealing reads them.
	rp, err := seal.New(inner, ring(t, "k1"), seal.Options{ChunkSize: chunk, Selective: true, ReadPlaintext: true})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := objstore.New(rp.Sealing(), "rp", objstore.Options{}).ReadAll(ctx, "p/plain", 0, -1); err != nil || !bytes.Equal(got, plainData) {
		t.Fatalf("Sealing with ReadPlaintext: %v", err)
	}

	// A key overwritten in plaintext through the selective Driver after
	// a sealed write reads as the new plaintext (no kept header used).
	put(t, either, "p/sealed", plainData)
	if got, err := either.ReadAll(ctx, "p/sealed", chunk, 9); err != nil || !bytes.Equal(got, plainData[chunk:chunk+9]) {
		t.Fatalf("rewritten in plaintext: %v", err)
	}
	keys := 0
	if err := objstore.New(inner, "raw", objstore.Options{}).List(ctx, "", func(o objstore.ObjectInfo) bool {
		if strings.Contains(o.Key, seal.KeyDir) {
			keys++
		}
		return true
	}); err != nil {
		t.Fatal(err)
	}
	if keys != 1 {
		t.Fatalf("%d bucket key objects, want 1 shared by both Drivers", keys)
	}
	// A store with the selective driver is Sealed: rekey and key list
	// take it.
	if sd, err := seal.Sealed(either); err != nil || sd != d {
		t.Fatalf("Sealed: %v", err)
	}
}

// TestObjectRewrittenShorterReadsAfresh: an object whose header is kept,
// rewritten behind the Driver's back as a shorter one (a deleted
// partition's manifest, written in plaintext through a selective
// Driver's inner store), reads as it is now rather than failing as a
// range past its end.
func TestObjectRewrittenShorterReadsAfresh(t *testing.T) {
	ctx := context.Background()
	inner := mem.New()
	d, err := seal.New(inner, ring(t, "k1"), seal.Options{ChunkSize: chunk, Selective: true})
	if err != nil {
		t.Fatal(err)
	}
	sealing := objstore.New(d.Sealing(), "sealing", objstore.Options{})
	either := objstore.New(d, "either", objstore.Options{})
	for _, tc := range []struct {
		name string
		off  int64
	}{{"whole", 0}, {"past the new end", 2 * chunk}} {
		big := payload(3*chunk, 3)
		put(t, sealing, "m", big)
		if got, err := either.ReadAll(ctx, "m", tc.off, -1); err != nil || !bytes.Equal(got, big[tc.off:]) {
			t.Fatalf("%s: %v", tc.name, err)
		}
		setRaw(t, inner, "m", []byte("short plaintext"))
		got, err := either.ReadAll(ctx, "m", 0, -1)
		if err != nil || string(got) != "short plaintext" {
			t.Fatalf("%s: after the rewrite %q %v", tc.name, got, err)
		}
		put(t, sealing, "m", big)
		if _, err := sealing.ReadAll(ctx, "m", tc.off, -1); err != nil {
			t.Fatal(err)
		}
		setRaw(t, inner, "m", []byte("short plaintext"))
		_, err = sealing.ReadAll(ctx, "m", tc.off, -1)
		wantObjectError(t, err, "m", -1, seal.ErrNotSealed)
	}
}

// failingRing is a ring whose Unwrap fails as an unreachable KMS does.
type failingRing struct{ seal.KeyRing }

var errKMSDown = fmt.Errorf("kms unreachable: %w", objstore.ErrRetryable)

func (failingRing) Unwrap(context.Context, string, []byte, []byte) ([]byte, error) {
	return nil, errKMSDown
}

// TestBucketKeysRingFailure: a key ring that cannot be reached makes
// BucketKeys fail, saying so, rather than report the bucket key as one
// that does not open (whose objects would be called unreadable).
func TestBucketKeysRingFailure(t *testing.T) {
	ctx := context.Background()
	inner := mem.New()
	r := ring(t, "k1")
	put(t, sealed(t, inner, r, seal.Options{}), "p/o", []byte("x"))
	keys, err := seal.BucketKeys(ctx, sealed(t, inner, r, seal.Options{}))
	if err != nil || len(keys) != 1 || keys[0].Err != nil {
		t.Fatalf("with the ring: %v %+v", err, keys)
	}
	keys, err = seal.BucketKeys(ctx, sealed(t, inner, failingRing{r}, seal.Options{}))
	if !errors.Is(err, errKMSDown) || !errors.Is(err, objstore.ErrRetryable) || !strings.Contains(err.Error(), `key "k1"`) || len(keys) != 0 {
		t.Fatalf("with the ring down: %v %+v, want the ring's error naming k1", err, keys)
	}
}
