package seal_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/tierlog/tierlog/objstore"
	"github.com/tierlog/tierlog/objstore/mem"
	"github.com/tierlog/tierlog/objstore/seal"
	"github.com/tierlog/tierlog/testing/faultstore"
)

// A connection cut inside the first 80 bytes of a GET (the header, read
// inside seal's Get) is retried, as the same fault unsealed is.
func TestCutInTheHeaderIsRetried(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		err  error
	}{
		{"reset", nil}, // faultstore: "connection reset by peer"
		{"net/http short body", io.ErrUnexpectedEOF}, // what an http body cut returns
	} {
		for _, sealedStore := range []bool{false, true} {
			name := tc.name + "/unsealed"
			if sealedStore {
				name = tc.name + "/sealed"
			}
			t.Run(name, func(t *testing.T) {
				inner := mem.New()
				var s *objstore.Store
				mk := func(d objstore.Driver) *objstore.Store {
					if sealedStore {
						return sealed(t, d, ring(t, "k1"), seal.Options{ChunkSize: chunk})
					}
					return objstore.New(d, "plain", objstore.Options{})
				}
				data := payload(3*chunk, 7)
				put(t, mk(inner), "obj", data)
				fd := faultstore.Wrap(inner, 1, faultstore.Rule{Op: objstore.OpGet, KeyContains: "obj", Nth: 1,
					Fault: faultstore.CutBody, AfterBytes: 40, Err: tc.err})
				s = mk(fd)
				got, err := s.ReadAll(ctx, "obj", 0, -1)
				if err != nil || !bytes.Equal(got, data) {
					t.Fatalf("one cut body: %v (retryable %v, corrupt %v)", err,
						errors.Is(err, objstore.ErrRetryable), errors.Is(err, objstore.ErrCorrupt))
				}
			})
		}
	}
}

// A tampered chunk is not a retryable error: it is fetched once.
func TestTamperedChunkIsNotRetried(t *testing.T) {
	ctx := context.Background()
	inner := mem.New()
	r := ring(t, "k1")
	put(t, sealed(t, inner, r, seal.Options{ChunkSize: chunk}), "a", payload(3*chunk, 1))
	raw := rawBytes(t, inner, "a")
	raw[seal.HeaderSize+chunk+seal.TagSize+5] ^= 1 // chunk 1
	setRaw(t, inner, "a", raw)
	var gets atomic.Int64
	fd := faultstore.Wrap(inner, 1, faultstore.Rule{Op: objstore.OpGet, KeyContains: "a", Every: 1, Fault: faultstore.Hook,
		Hook: func(objstore.Op, string) { gets.Add(1) }})
	s := sealed(t, fd, r, seal.Options{ChunkSize: chunk})
	_, err := s.ReadAll(ctx, "a", 0, -1)
	if !errors.Is(err, seal.ErrTampered) {
		t.Fatalf("got %v", err)
	}
	if errors.Is(err, objstore.ErrRetryable) || gets.Load() > 2 {
		t.Fatalf("a tampered chunk: retryable=%v after %d GETs: %v", errors.Is(err, objstore.ErrRetryable), gets.Load(), err)
	}
}

// With read-plaintext, List reports a plaintext object's size, not 96
// bytes short (taken for a sealed one's).
func TestListSizesWithReadPlaintext(t *testing.T) {
	ctx := context.Background()
	inner := mem.New()
	setRaw(t, inner, "legacy", bytes.Repeat([]byte("x"), 200))
	s := sealed(t, inner, ring(t, "k1"), seal.Options{ReadPlaintext: true})
	var listed int64 = -1
	s.List(ctx, "", func(o objstore.ObjectInfo) bool { listed = o.Size; return true })
	info, err := s.Head(ctx, "legacy")
	if err != nil {
		t.Fatal(err)
	}
	if listed != 200 || info.Size != 200 {
		t.Fatalf("a 200-byte plaintext object: List says %d, Head %d", listed, info.Size)
	}
}

// lateDriver is a driver whose Put answers (412) after reading part of the
// body, and whose transport reads on after the answer: net/http may read
// a request body after RoundTrip returns.
type lateDriver struct {
	objstore.Driver
	victim string
	body   io.Reader
}

func (d *lateDriver) Put(ctx context.Context, key string, body io.ReadSeeker, size int64, opts objstore.PutOptions) (objstore.ObjectInfo, error) {
	if key != d.victim {
		return d.Driver.Put(ctx, key, body, size, opts)
	}
	io.ReadFull(body, make([]byte, seal.HeaderSize+10))
	d.body = body
	return objstore.ObjectInfo{}, objstore.ErrPreconditionFailed
}

// A read of a put's sealed body after Put returned (net/http may read a
// request's body after its answer) sends nothing, and never another
// object's plaintext (the body's buffers were once pooled, and reused to
// open other objects).
func TestBodyReadsNothingAfterPutReturns(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	ctx := context.Background()
	secret := []byte(strings.Repeat("TOP-SECRET-", chunk/11+1)[:chunk])
	ld := &lateDriver{Driver: mem.New(), victim: "victim"}
	d, err := seal.New(ld, ring(t, "k1"), seal.Options{ChunkSize: chunk})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Put(ctx, "secret", bytes.NewReader(secret), chunk, objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Put(ctx, "victim", bytes.NewReader(make([]byte, chunk)), chunk, objstore.PutOptions{}); !errors.Is(err, objstore.ErrPreconditionFailed) {
		t.Fatal(err)
	}
	// Two readers of the secret object, open at once.
	var rcs []io.ReadCloser
	for range 2 {
		rc, _, err := d.Get(ctx, "secret", 0, -1)
		if err != nil {
			t.Fatal(err)
		}
		if b, err := io.ReadAll(rc); err != nil || !bytes.Equal(b, secret) {
			t.Fatal(err)
		}
		rcs = append(rcs, rc)
	}
	// The transport writes on: what goes on the wire?
	late := make([]byte, 64)
	n, _ := io.ReadFull(ld.body, late)
	for _, rc := range rcs {
		rc.Close()
	}
	if bytes.Contains(late[:n], []byte("SECRET")) {
		t.Fatalf("the late read of the victim's sealed body sent another object's plaintext: %q", late[:n])
	}
}

func bucketKeys(t *testing.T, inner objstore.Driver, r seal.KeyRing) []seal.BucketKey {
	t.Helper()
	keys, err := seal.BucketKeys(context.Background(), sealed(t, inner, r, seal.Options{}))
	if err != nil {
		t.Fatal(err)
	}
	return keys
}

// One bucket key Rekey cannot open (its KEK lost) does not stop it: the
// keys sorting after it are re-wrapped.
func TestRekeyGoesPastAKeyItCannotOpen(t *testing.T) {
	ctx := context.Background()
	inner := mem.New()
	put(t, sealed(t, inner, ring(t, "k0"), seal.Options{}), "lost", []byte("x"))
	for i := 0; ; i++ {
		put(t, sealed(t, inner, ring(t, "k1"), seal.Options{}), "o"+string(rune('a'+i)), []byte("x"))
		keys := bucketKeys(t, inner, ring(t, "k1"))
		if keys[len(keys)-1].KEK == "k1" {
			break
		}
	}
	rekeyed := sealed(t, inner, ring(t, "k1", "k2"), seal.Options{})
	for range 3 {
		_, err := seal.Rekey(ctx, rekeyed, seal.RekeyOptions{})
		t.Logf("rekey: %v", err)
	}
	for _, k := range bucketKeys(t, inner, ring(t, "k1", "k2")) {
		if k.KEK == "k1" {
			t.Fatalf("bucket key %s is still under k1 after three rekeys (one key under the lost k0 blocks it)", k.ID)
		}
	}
}

// A broker still on the old active key that makes its bucket key while
// rekey runs: Rekey takes that key too.
func TestRekeyTakesKeysMadeWhileItRuns(t *testing.T) {
	ctx := context.Background()
	inner := mem.New()
	put(t, sealed(t, inner, ring(t, "k1"), seal.Options{}), "a", []byte("x"))
	once := false
	steps, err := seal.Rekey(ctx, sealed(t, inner, ring(t, "k1", "k2"), seal.Options{}), seal.RekeyOptions{OnStep: func(seal.RekeyStep) {
		if !once {
			once = true
			put(t, sealed(t, inner, ring(t, "k1"), seal.Options{}), "b", []byte("x")) // a broker not yet restarted
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range bucketKeys(t, inner, ring(t, "k1", "k2")) {
		if k.Retired {
			t.Fatalf("Rekey returned %d steps, no error; bucket key %s is under retired %s", len(steps), k.ID, k.KEK)
		}
	}
}

type downRing struct{ seal.KeyRing }

func (downRing) Wrap(context.Context, string, []byte, []byte) ([]byte, error) {
	return nil, errors.New("kms: unreachable")
}

// CheckBucket's key error names the KEK, not a bucket key of zeros.
func TestCheckBucketNamesTheKey(t *testing.T) {
	d, err := seal.New(mem.New(), downRing{ring(t, "k1")}, seal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.CheckBucket(context.Background()); err == nil || strings.Contains(err.Error(), "00000000000000000000000000000000") {
		t.Fatalf("CheckBucket: %v", err)
	}
}

// A cold read from offset > 0 to the end (length -1) of an object sealed
// with other chunks than the reader's: read by the object's header (it
// returned other bytes, or panicked, opening the reader's guess with the
// object's chunk size).
func TestColdTailReadOfAnotherChunkSize(t *testing.T) {
	ctx := context.Background()
	inner := mem.New()
	data := payload(5*chunk+9, 7)
	put(t, sealed(t, inner, ring(t, "k1"), seal.Options{ChunkSize: chunk}), "x", data)
	for _, off := range []int64{1, chunk - 1, chunk + 5, 2*chunk + 100, 3 * chunk, 5 * chunk} {
		// A reader sealing in 16 KiB chunks, nothing kept.
		r := sealed(t, inner, ring(t, "k1"), seal.Options{ChunkSize: 4 * chunk})
		got, err := r.ReadAll(ctx, "x", off, -1)
		if err != nil || !bytes.Equal(got, data[off:]) {
			var at int = -1
			if err == nil {
				at = bytes.Index(data, got[:64])
			}
			t.Errorf("[%d, end): %d bytes, the plaintext's from %d, %v", off, len(got), at, err)
		}
	}
	// And the other way: a reader of smaller chunks than the object's.
	put(t, sealed(t, inner, ring(t, "k1"), seal.Options{ChunkSize: 4 * chunk}), "y", data)
	for _, off := range []int64{chunk + 5, 3 * chunk} {
		r := sealed(t, inner, ring(t, "k1"), seal.Options{ChunkSize: chunk})
		func() {
			defer func() {
				if p := recover(); p != nil {
					t.Errorf("y [%d, end): panic: %v", off, p)
				}
			}()
			if got, err := r.ReadAll(ctx, "y", off, -1); err != nil || !bytes.Equal(got, data[off:]) {
				t.Errorf("y [%d, end): %d bytes, %v", off, len(got), err)
			}
		}()
	}
}

// A bucket key's object lost in one key folder (a diskless Backend's WAL
// folder) but kept in another: a Driver that opened the key through the
// other folder fails the WAL objects as a new reader does.
func TestKeyObjectLostInOneFolder(t *testing.T) {
	ctx, inner := context.Background(), mem.New()
	w := sealed(t, inner, ring(t, "k1"), seal.Options{ChunkSize: chunk})
	walKey := "r/_wal/0000000000000001/00000000000000000001"
	put(t, w, "r/t-0/a", payload(10, 1))
	put(t, w, walKey, payload(10, 2))
	raw := objstore.New(inner, "raw", objstore.Options{})
	var gone string
	raw.List(ctx, "r/_wal/"+seal.KeyDir, func(o objstore.ObjectInfo) bool { gone = o.Key; return false })
	if gone == "" || raw.Delete(ctx, gone) != nil {
		t.Fatalf("no key object in the WAL folder")
	}
	r := sealed(t, inner, ring(t, "k1"), seal.Options{ChunkSize: chunk})
	if _, err := r.ReadAll(ctx, "r/t-0/a", 0, -1); err != nil {
		t.Fatal(err)
	}
	_, warm := r.ReadAll(ctx, walKey, 0, -1)
	_, fresh := sealed(t, inner, ring(t, "k1"), seal.Options{ChunkSize: chunk}).ReadAll(ctx, walKey, 0, -1)
	if !errors.Is(warm, seal.ErrUnknownKey) || !errors.Is(fresh, seal.ErrUnknownKey) || !strings.Contains(warm.Error(), gone) {
		t.Fatalf("the WAL object: %v (after the partition's), %v (fresh); want its key's object %s named missing", warm, fresh, gone)
	}
}

// An object named like a bucket key's that does not decode (junk, in a
// folder that sorts first) is reported, and rekey re-wraps the others.
func TestRekeyGoesPastAnUndecodableKeyObject(t *testing.T) {
	ctx, inner := context.Background(), mem.New()
	setRaw(t, inner, "a/"+seal.KeyDir+strings.Repeat("ab", 16), []byte("junk"))
	put(t, sealed(t, inner, ring(t, "k1"), seal.Options{}), "r/t-0/x", payload(10, 1))
	steps, err := seal.Rekey(ctx, sealed(t, inner, ring(t, "k1", "k2"), seal.Options{}), seal.RekeyOptions{})
	if !errors.Is(err, seal.ErrRekeyIncomplete) || len(steps) != 2 || !errors.Is(steps[0].Err, seal.ErrBadKeyFile) || !steps[1].Done {
		t.Fatalf("rekey: %+v %v", steps, err)
	}
	keys, err := seal.BucketKeys(ctx, sealed(t, inner, ring(t, "k2"), seal.Options{}))
	if err != nil || len(keys) != 2 || keys[0].Err == nil || keys[1].KEK != "k2" || keys[1].Err != nil {
		t.Fatalf("keys after: %+v %v", keys, err)
	}
}

// lostKeyAnswer loses the answer of the first bucket key object's PUT.
type lostKeyAnswer struct {
	objstore.Driver
	done bool
}

func (d *lostKeyAnswer) Put(ctx context.Context, k string, b io.ReadSeeker, n int64, o objstore.PutOptions) (objstore.ObjectInfo, error) {
	i, err := d.Driver.Put(ctx, k, b, n, o)
	if err == nil && !d.done && strings.Contains(k, seal.KeyDir) {
		d.done = true
		return i, fmt.Errorf("answer lost: %w", objstore.ErrAccessDenied) // not retried by the Store
	}
	return i, err
}

// A Driver whose bucket key object landed with its answer lost, then was
// re-wrapped by a rekey, takes that object at its next write (it failed
// every write into the folder before: the bytes differ).
func TestStoreKeyTakesItsRewrappedObject(t *testing.T) {
	ctx, inner := context.Background(), mem.New()
	// The writer's key file holds k3 too (the docs' order: add the new
	// key everywhere, then make it active and rekey).
	w := sealed(t, &lostKeyAnswer{Driver: inner}, ringWith(t, []string{"k3", "k2"}, nil), seal.Options{})
	if _, err := w.Put(ctx, "r/t-0/a", bytes.NewReader([]byte("x")), 1, objstore.PutOptions{}); err == nil {
		t.Fatal("the lost answer did not fail the put")
	}
	if _, err := seal.Rekey(ctx, sealed(t, inner, ring(t, "k2", "k3"), seal.Options{}), seal.RekeyOptions{}); err != nil { // k3 active
		t.Fatal(err)
	}
	put(t, w, "r/t-0/b", []byte("y"))
	if got, err := sealed(t, inner, ring(t, "k3"), seal.Options{}).ReadAll(ctx, "r/t-0/b", 0, -1); err != nil || string(got) != "y" {
		t.Fatalf("%q %v", got, err)
	}
}

// BucketKeys of given key folders lists those folders only.
func TestBucketKeysOfFolders(t *testing.T) {
	ctx, inner := context.Background(), mem.New()
	put(t, sealed(t, inner, ring(t, "k1"), seal.Options{}), "a/t-0/x", []byte("x"))
	put(t, sealed(t, inner, ring(t, "k1"), seal.Options{}), "b/t-0/x", []byte("x"))
	s := sealed(t, inner, ring(t, "k1"), seal.Options{})
	all, err := seal.BucketKeys(ctx, s)
	if err != nil || len(all) != 2 {
		t.Fatalf("the whole store: %+v %v", all, err)
	}
	some, err := seal.BucketKeys(ctx, s, seal.KeyFolder("b/t-0/manifest"))
	if err != nil || len(some) != 1 || !strings.HasPrefix(some[0].Name, "b/"+seal.KeyDir) {
		t.Fatalf("b's folder: %+v %v", some, err)
	}
}
