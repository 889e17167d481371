package seal

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/tierlog/tierlog/objstore"
)

// ErrNotSealedStore: a store whose driver is not a *Driver was given
// where a sealed one is needed.
var ErrNotSealedStore = errors.New("seal: the store is not sealed (give it a key ring: ?key-file=)")

// Sealed returns the *Driver under store, or ErrNotSealedStore.
func Sealed(store *objstore.Store) (*Driver, error) {
	if d, ok := store.Driver().(*Driver); ok {
		return d, nil
	}
	return nil, fmt.Errorf("%s: %w", store.Name(), ErrNotSealedStore)
}

// keyStore is the store of the bucket keys' objects: store's inner
// driver, with store's bounds and retries.
func keyStore(store *objstore.Store) (*Driver, *objstore.Store, error) {
	d, err := Sealed(store)
	if err != nil {
		return nil, nil, err
	}
	return d, store.WithDriver(d.d), nil
}

// BucketKey describes a bucket key's object. One bucket key has an
// object in each key folder (KeyFolder) its Driver wrote objects under.
type BucketKey struct {
	Name string // the object's key
	ID   string // the bucket key's id, hex
	KEK  string // the KEK it is wrapped under
	// Retired: KEK is not the ring's active one; Rekey re-wraps it.
	Retired bool
	// Err is why the ring cannot open it (a *KeyError: the KEK is not in
	// the ring, or another key has its id), nil when it opens. Every
	// object sealed under it is unreadable until it does.
	Err  error
	id   [16]byte // ID, decoded
	etag string
	ko   keyObject
}

// BucketKeys lists the store's bucket keys' objects, in name order, each
// opened with the ring to check it opens (BucketKey.Err; an object that
// does not decode is one too): one LIST page per 1,000 objects of the
// whole store, a GET and an unwrap each. folders, when given, are the key
// folders (KeyFolder) to list instead of the whole store. A ring that
// fails otherwise than ErrUnknownKey or ErrWrongKey (a KMS unreachable)
// is BucketKeys' error, not a key's.
func BucketKeys(ctx context.Context, store *objstore.Store, folders ...string) ([]BucketKey, error) {
	d, ks, err := keyStore(store)
	if err != nil {
		return nil, err
	}
	names, err := keyNames(ctx, ks, folders)
	if err != nil {
		return nil, err
	}
	out := make([]BucketKey, 0, len(names))
	for _, name := range names {
		bk, err := readBucketKey(ctx, ks, name)
		if err != nil {
			return out, err
		}
		d.check(ctx, &bk)
		if bk.Err != nil && !errors.Is(bk.Err, ErrUnknownKey) && !errors.Is(bk.Err, ErrWrongKey) && !errors.Is(bk.Err, ErrBadKeyFile) {
			// The ring failed (a KMS unreachable): whether the key
			// opens is not known, which is not that it does not.
			return out, fmt.Errorf("seal: bucket key %s: the key ring could not unwrap it with key %q: %w", name, bk.KEK, bk.Err)
		}
		out = append(out, bk)
	}
	return out, nil
}

// check fills bk's Retired and Err (unless it has one already).
func (d *Driver) check(ctx context.Context, bk *BucketKey) {
	bk.Retired = bk.KEK != d.ring.Active()
	if bk.Err != nil {
		return
	}
	key, err := d.ring.Unwrap(ctx, bk.KEK, bk.ko.Wrapped, keyContext(bk.id))
	switch {
	case err != nil:
		bk.Err = keyErr(err, bk.KEK, bk.id, "")
	case len(key) != 32:
		bk.Err = &KeyError{ID: bk.KEK, Bucket: bk.ID, Err: ErrWrongKey}
	}
}

// keyNames lists the bucket keys' object names in folders (each a key
// folder), or, with none, in the whole store; sorted.
func keyNames(ctx context.Context, ks *objstore.Store, folders []string) ([]string, error) {
	var names []string
	add := func(o objstore.ObjectInfo) bool {
		if _, ok := parseKeyName(o.Key); ok {
			names = append(names, o.Key)
		}
		return true
	}
	if len(folders) == 0 {
		folders = []string{""}
	}
	for _, f := range slices.Compact(slices.Sorted(slices.Values(folders))) {
		if err := ks.List(ctx, f, add); err != nil {
			return names, err
		}
	}
	slices.Sort(names)
	return slices.Compact(names), nil
}

// readBucketKey reads a bucket key's object. One that does not decode is
// a BucketKey with its Err; a failed GET is the error.
func readBucketKey(ctx context.Context, ks *objstore.Store, name string) (BucketKey, error) {
	id, _ := parseKeyName(name)
	bk := BucketKey{Name: name, ID: hex.EncodeToString(id[:]), id: id}
	rc, info, err := ks.Get(ctx, name, 0, -1)
	if err != nil {
		return bk, err
	}
	defer rc.Close()
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(io.LimitReader(rc, maxKeyObject+1)); err != nil {
		return bk, fmt.Errorf("seal: bucket key %s: %w", name, err)
	}
	bk.etag = info.ETag
	if buf.Len() > maxKeyObject {
		bk.Err = fmt.Errorf("%w: bucket key %s: more than %d bytes", ErrBadKeyFile, name, maxKeyObject)
		return bk, nil
	}
	if bk.ko, bk.Err = decodeKeyObject(name, buf.Bytes()); bk.Err == nil {
		bk.KEK = bk.ko.KEK
	}
	return bk, nil
}

// RekeyStep is one bucket key Rekey looked at.
type RekeyStep struct {
	Key  BucketKey
	From string // the KEK it was wrapped under
	To   string // the KEK it is (or, in a dry run, would be) wrapped under
	// Done: it was re-wrapped (false in a dry run, and for a key already
	// under the active KEK).
	Done bool
	// Err is why it was not: its KEK is not in the ring (or does not
	// open it), or the PUT failed. Rekey goes on to the next key.
	Err error
}

// RekeyOptions configure Rekey.
type RekeyOptions struct {
	// DryRun lists what would be re-wrapped and changes nothing; it still
	// opens each key to be re-wrapped, so a key the ring cannot open is
	// found.
	DryRun bool
	// OnStep, when set, is called after each bucket key.
	OnStep func(RekeyStep)
}

// ErrRekeyIncomplete: Rekey found bucket keys it could not open (their
// KEK not in the ring, or another key under its id) or re-wrap; each
// one's step says why.
var ErrRekeyIncomplete = errors.New("seal: rekey left bucket keys it could not open or re-wrap")

// Rekey re-wraps every bucket key of store's bucket that is not under
// the ring's active KEK, with a compare-and-swap PUT each: data is never
// re-uploaded. A key that cannot be re-wrapped (or opened, or decoded) is
// a step with its Err, and Rekey goes on with the others. It lists the
// whole store once (one LIST page per 1,000 objects), then the key
// folders it found again, and takes any key a broker made meanwhile
// under a retired KEK, so that when it returns nil no bucket key is under
// one; otherwise the error wraps ErrRekeyIncomplete. An interrupted Rekey is finished by running it
// again (a key already re-wrapped is skipped). A dry run makes one pass.
func Rekey(ctx context.Context, store *objstore.Store, opts RekeyOptions) ([]RekeyStep, error) {
	d, ks, err := keyStore(store)
	if err != nil {
		return nil, err
	}
	active := d.ring.Active()
	var steps []RekeyStep
	seen := map[string]bool{} // key objects looked at by this run
	failed := 0
	// Passes over the keys not seen yet: the first over the whole store,
	// the next over the key folders it found, for keys brokers made
	// meanwhile (wrapped under the KEK active where they run), until a
	// pass finds none.
	var folders []string
	for pass := 0; pass < 5; pass++ {
		names, err := keyNames(ctx, ks, folders)
		if err != nil {
			return steps, err
		}
		if pass == 0 {
			for _, n := range names {
				folders = append(folders, n[:strings.LastIndexByte(n, '/')+1])
			}
			if len(folders) == 0 {
				break
			}
		}
		fresh := 0
		for _, name := range names {
			if seen[name] {
				continue
			}
			seen[name] = true
			fresh++
			bk, err := readBucketKey(ctx, ks, name)
			if err != nil {
				return steps, err
			}
			d.check(ctx, &bk)
			st := RekeyStep{Key: bk, From: bk.KEK, To: active, Err: bk.Err}
			if bk.Retired && st.Err == nil && !opts.DryRun {
				if st.Err = rewrap(ctx, d, ks, bk); st.Err == nil {
					st.Done = true
				}
			}
			if st.Err != nil {
				if ctx.Err() != nil {
					return steps, ctx.Err()
				}
				failed++
			}
			steps = append(steps, st)
			if opts.OnStep != nil {
				opts.OnStep(st)
			}
		}
		if opts.DryRun || fresh == 0 {
			break
		}
	}
	if failed > 0 {
		return steps, fmt.Errorf("%w: %d of %d bucket keys' objects cannot be opened or re-wrapped (their steps say why)", ErrRekeyIncomplete, failed, len(steps))
	}
	return steps, nil
}

// rewrap re-wraps one bucket key under the active KEK; a lost race with
// another rekey re-reads the key and goes again.
func rewrap(ctx context.Context, d *Driver, ks *objstore.Store, bk BucketKey) error {
	id, name := bk.id, bk.Name
	active := d.ring.Active()
	for range 5 {
		if bk.KEK == active {
			return nil
		}
		key, err := d.ring.Unwrap(ctx, bk.KEK, bk.ko.Wrapped, keyContext(id))
		if err != nil {
			return keyErr(err, bk.KEK, id, "")
		}
		wrapped, err := d.ring.Wrap(ctx, active, key, keyContext(id))
		if err != nil {
			return keyErr(err, active, id, "")
		}
		data, err := json.Marshal(keyObject{Version: 1, KEK: active, Wrapped: wrapped})
		if err != nil {
			return err
		}
		_, err = ks.Put(ctx, name, bytes.NewReader(data), int64(len(data)), objstore.PutOptions{IfMatch: bk.etag})
		if err == nil {
			return nil
		}
		if !errors.Is(err, objstore.ErrPreconditionFailed) {
			return fmt.Errorf("seal: rekey %s: %w", name, err)
		}
		// Changed since read: another rekey, or a retry of this PUT
		// whose first answer was lost. Read it again.
		if bk, err = readBucketKey(ctx, ks, name); err != nil {
			return err
		}
		if bk.Err != nil {
			return bk.Err
		}
	}
	return fmt.Errorf("seal: rekey %s: it keeps changing under us", name)
}

// ObjectKey returns the id (hex) of the bucket key key is sealed under;
// sealed is false for a plaintext object (read with
// Options.ReadPlaintext). It uses the kept header when there is one, else
// a GET of the header. BucketKeys says which KEK wraps each bucket key.
func (d *Driver) ObjectKey(ctx context.Context, key string) (bucketKey string, sealed bool, err error) {
	ch, ok := d.cached(key)
	if !ok {
		if ch, err = d.readHeader(ctx, key); err != nil || ch == nil {
			return "", false, err
		}
	}
	return hex.EncodeToString(ch.h.keyID[:]), true, nil
}
