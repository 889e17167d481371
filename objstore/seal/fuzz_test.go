package seal_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/tierlog/tierlog/objstore"
	"github.com/tierlog/tierlog/objstore/mem"
	"github.com/tierlog/tierlog/objstore/seal"
)

// FuzzOpen stores arbitrary bytes under a key (seeded with sealed objects
// and edits of them) and reads them whole and at a range: every read is
// the plaintext that was sealed or an error, never a panic nor other
// bytes.
func FuzzOpen(f *testing.F) {
	ctx := context.Background()
	inner := mem.New()
	s := sealed(f, inner, ring(f, "k1"), seal.Options{ChunkSize: seal.MinChunkSize})
	data := payload(2*seal.MinChunkSize+7, 3)
	put(f, s, "seed", data)
	raw, err := objstore.New(inner, "raw", objstore.Options{}).ReadAll(ctx, "seed", 0, -1)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(raw, int64(0), int64(-1))
	f.Add(raw, int64(seal.MinChunkSize-3), int64(10))
	f.Add(raw[:seal.HeaderSize], int64(0), int64(-1))
	f.Add([]byte{}, int64(0), int64(-1))
	f.Add(append(raw[:100:100], raw[seal.HeaderSize+seal.MinChunkSize:]...), int64(5), int64(5000))
	f.Fuzz(func(t *testing.T, b []byte, off, n int64) {
		if _, err := inner.Put(ctx, "seed", bytes.NewReader(b), int64(len(b)), objstore.PutOptions{}); err != nil {
			t.Fatal(err)
		}
		r := sealed(t, inner, ring(t, "k1"), seal.Options{ChunkSize: seal.MinChunkSize})
		off = max(0, off%(3*seal.MinChunkSize))
		for _, rg := range [][2]int64{{0, -1}, {off, n}} {
			got, err := r.ReadAll(ctx, "seed", rg[0], rg[1])
			if err != nil {
				if !errors.Is(err, objstore.ErrCorrupt) && !errors.Is(err, objstore.ErrInvalidRange) && !errors.Is(err, objstore.ErrAccessDenied) {
					t.Fatalf("an error of no known kind: %v", err)
				}
				continue
			}
			end := int64(len(data))
			if rg[1] >= 0 {
				end = min(end, rg[0]+rg[1])
			}
			if !bytes.Equal(got, data[rg[0]:end]) {
				t.Fatalf("read %v: other bytes than were sealed", rg)
			}
		}
	})
}

// FuzzKeyFile: a key file's text parses or is ErrBadKeyFile, and an error
// never quotes a key's base64.
func FuzzKeyFile(f *testing.F) {
	k1, _ := seal.NewKey("k1")
	f.Add(k1 + "\nactive k1\n")
	f.Add("# x\nkey a AAAA\nactive a")
	f.Add("active\n")
	f.Fuzz(func(t *testing.T, text string) {
		kf, err := seal.ParseKeyFile("f", strings.NewReader(text))
		if err != nil {
			if !errors.Is(err, seal.ErrBadKeyFile) {
				t.Fatalf("error of no known kind: %v", err)
			}
			for _, w := range strings.Fields(text) {
				if len(w) >= 40 && strings.Contains(err.Error(), w) {
					t.Fatalf("the error %q quotes %q", err, w)
				}
			}
			return
		}
		w, err := kf.Wrap(context.Background(), kf.Active(), make([]byte, 32), nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := kf.Unwrap(context.Background(), kf.Active(), w, nil); err != nil {
			t.Fatal(err)
		}
	})
}

// FuzzBucketKey: a bucket key's object of any bytes opens or is an error.
func FuzzBucketKey(f *testing.F) {
	ctx := context.Background()
	inner := mem.New()
	s := sealed(f, inner, ring(f, "k1"), seal.Options{})
	put(f, s, "a", []byte("x"))
	raw := objstore.New(inner, "raw", objstore.Options{})
	var name string
	raw.List(ctx, seal.KeyDir, func(o objstore.ObjectInfo) bool { name = o.Key; return false })
	good, _ := raw.ReadAll(ctx, name, 0, -1)
	f.Add(good)
	f.Add([]byte(`{"version":1,"kek":"k1","wrapped":"AAAA"}`))
	f.Add([]byte(`{"version":1,"kek":"k1","wrapped":"AAAA","x":1}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		if _, err := inner.Put(ctx, name, bytes.NewReader(b), int64(len(b)), objstore.PutOptions{}); err != nil {
			t.Fatal(err)
		}
		r := sealed(t, inner, ring(t, "k1"), seal.Options{})
		got, err := r.ReadAll(ctx, "a", 0, -1)
		if err == nil && string(got) != "x" {
			t.Fatalf("read %q", got)
		}
		seal.BucketKeys(ctx, r)
	})
}
