package storeurl_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tierlog/tierlog/objstore"
	"github.com/tierlog/tierlog/objstore/seal"
	"github.com/tierlog/tierlog/objstore/storeurl"
)

func keyFile(t *testing.T, mode os.FileMode) string {
	t.Helper()
	line, err := seal.NewKey("k1")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "keys")
	if err := os.WriteFile(path, []byte(line+"\nactive k1\n"), mode); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestKeyFileSeals: a URL with key-file opens a sealed store, whose
// objects a store without it reads as not what was written.
func TestKeyFileSeals(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	kf := keyFile(t, 0o600)
	s, err := storeurl.Open(ctx, "file://"+dir+"?key-file="+kf+"&chunk-size=8192", objstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := seal.Sealed(s); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(ctx, "a", strings.NewReader("plaintext value"), 15, objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	got, err := s.ReadAll(ctx, "a", 6, 5)
	if err != nil || string(got) != "ext v" {
		t.Fatalf("%q %v", got, err)
	}
	plain, err := storeurl.Open(ctx, "file://"+dir, objstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	raw, err := plain.ReadAll(ctx, "a", 0, -1)
	if err != nil || strings.Contains(string(raw), "plaintext") {
		t.Fatalf("stored %q %v", raw, err)
	}
}

func TestSealOptionsRefused(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	for _, tc := range []struct{ query, want string }{
		{"chunk-size=8192", "give the key-file too"},
		{"read-plaintext=true", "give the key-file too"},
		{"seal=topics", "give the key-file too"},
		{"key-file=", "option key-file= is empty"},
		{"key-file=" + keyFile(t, 0o600) + "&seal=", "option seal= is empty"},
		{"key-file=" + keyFile(t, 0o600) + "&chunk-size=", "option chunk-size= is empty"},
		{"key-file=" + keyFile(t, 0o600) + "&seal=topics&seal=all", "option seal given 2 times"},
		{"key-file=" + keyFile(t, 0o600) + "&seal=some", "option seal=some: want all"},
		{"key-file=" + keyFile(t, 0o600) + "&chunk-size=100", "chunk size 100"},
		{"key-file=" + keyFile(t, 0o600) + "&chunk-size=x", "chunk-size"},
		{"key-file=" + keyFile(t, 0o644), "chmod 600"},
		{"key-file=" + dir + "/missing", "no such file"},
	} {
		_, err := storeurl.Open(ctx, "file://"+dir+"?"+tc.query, objstore.Options{})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.query, err, tc.want)
		}
		if err != nil && (strings.Contains(tc.want, "chunk") || strings.Contains(tc.want, "seal=") || strings.Contains(tc.want, "empty")) && !errors.Is(err, objstore.ErrInvalidURL) {
			t.Errorf("%s: %v is not ErrInvalidURL", tc.query, err)
		}
	}
}

// TestSealScope: seal=topics opens a selective sealed store (it writes
// plaintext and leaves sealing to its user), seal=all and no seal= one
// that seals every object.
func TestSealScope(t *testing.T) {
	ctx := context.Background()
	kf := keyFile(t, 0o600)
	for _, tc := range []struct {
		query     string
		selective bool
	}{{"", false}, {"&seal=all", false}, {"&seal=topics", true}} {
		s, err := storeurl.Open(ctx, "file://"+t.TempDir()+"?key-file="+kf+tc.query, objstore.Options{})
		if err != nil {
			t.Fatal(err)
		}
		sd, err := seal.Sealed(s)
		if err != nil || sd.Selective() != tc.selective {
			t.Errorf("%q: sealed %v, selective %v", tc.query, err, sd != nil && sd.Selective())
		}
		if tc.selective && !strings.Contains(s.Name(), "seal=topics") {
			t.Errorf("the store's name %q hides seal=topics", s.Name())
		}
		s.Close()
	}
}
