package seal

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/tierlog/tierlog/objstore"
)

// bucketKey is a bucket key, unwrapped, with the KEK it is wrapped under.
type bucketKey struct {
	id     [16]byte
	key    []byte
	kek    string
	object []byte // its object's bytes, for the Driver's own key
}

// keyObject is a bucket key's object: the key wrapped by a KEK, the
// bucket key's id bound into the wrapping.
type keyObject struct {
	Version int    `json:"version"`
	KEK     string `json:"kek"`
	Wrapped []byte `json:"wrapped"`
}

// maxKeyObject caps a bucket key object's bytes before they are read.
const maxKeyObject = 4 << 10

// keyName is the name of bucket key id's object for the object key.
func keyName(id [16]byte, object string) string {
	return KeyFolder(object) + hex.EncodeToString(id[:])
}

func keyContext(id [16]byte) []byte { return []byte("bucket key " + hex.EncodeToString(id[:])) }

// parseKeyName returns the id of a bucket key object's name.
func parseKeyName(name string) ([16]byte, bool) {
	var id [16]byte
	i := strings.LastIndexByte(name, '/') + 1
	if !isKeyObject(name) || len(name)-i != 32 || !strings.HasSuffix(name[:i], KeyDir) {
		return id, false
	}
	n, err := hex.Decode(id[:], []byte(name[i:]))
	return id, err == nil && n == 16
}

func decodeKeyObject(name string, data []byte) (keyObject, error) {
	var ko keyObject
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&ko); err != nil {
		return ko, fmt.Errorf("%w: bucket key %s: %v", ErrBadKeyFile, name, err)
	}
	if ko.Version != 1 || !keyIDPattern.MatchString(ko.KEK) || len(ko.Wrapped) == 0 || len(ko.Wrapped) > 1024 {
		return ko, fmt.Errorf("%w: bucket key %s: want version 1, a KEK id and the wrapped key", ErrBadKeyFile, name)
	}
	return ko, nil
}

// newBucketKey makes a bucket key and wraps it under the ring's active
// KEK; storeKey puts it where objects need it.
func (d *Driver) newBucketKey(ctx context.Context) (*bucketKey, error) {
	bk := &bucketKey{key: make([]byte, 32), kek: d.ring.Active()}
	rand.Read(bk.id[:])
	rand.Read(bk.key)
	wrapped, err := d.ring.Wrap(ctx, bk.kek, bk.key, keyContext(bk.id))
	if err != nil {
		return nil, keyErr(err, bk.kek, bk.id, "")
	}
	if bk.object, err = json.Marshal(keyObject{Version: 1, KEK: bk.kek, Wrapped: wrapped}); err != nil {
		return nil, err
	}
	return bk, nil
}

// storeKey puts bk's object under name, create-only. An object there
// already (an earlier try whose answer was lost, maybe re-wrapped by a
// rekey since) is taken when it opens to bk's key.
func (d *Driver) storeKey(ctx context.Context, bk *bucketKey, name string) error {
	_, err := d.d.Put(ctx, name, bytes.NewReader(bk.object), int64(len(bk.object)), objstore.PutOptions{IfNoneMatch: true})
	if err == nil {
		return nil
	}
	if !errors.Is(err, objstore.ErrPreconditionFailed) {
		return fmt.Errorf("seal: store bucket key %s: %w", name, err)
	}
	got, gerr := d.readKeyObject(ctx, name)
	if gerr == nil {
		var ko keyObject
		if ko, gerr = decodeKeyObject(name, got); gerr == nil {
			var key []byte
			if key, gerr = d.ring.Unwrap(ctx, ko.KEK, ko.Wrapped, keyContext(bk.id)); gerr == nil && bytes.Equal(key, bk.key) {
				return nil
			}
		}
	}
	return fmt.Errorf("seal: store bucket key %s: %w (the object there is not this key's: %v)", name, err, gerr)
}

func (d *Driver) readKeyObject(ctx context.Context, name string) ([]byte, error) {
	rc, _, err := d.d.Get(ctx, name, 0, -1)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	data, err := io.ReadAll(io.LimitReader(rc, maxKeyObject+1))
	if err == nil && len(data) > maxKeyObject {
		err = fmt.Errorf("%w: bucket key %s: more than %d bytes", ErrBadKeyFile, name, maxKeyObject)
	}
	return data, err
}

// openBucketKey reads and unwraps the bucket key id (object, when not
// empty, is the object that needs it, for errors).
func (d *Driver) openBucketKey(ctx context.Context, id [16]byte, object string) (*bucketKey, error) {
	name := keyName(id, object)
	data, err := d.readKeyObject(ctx, name)
	if err != nil {
		if errors.Is(err, objstore.ErrNotFound) && !errors.Is(err, objstore.ErrBucketNotFound) {
			return nil, &KeyError{Bucket: hex.EncodeToString(id[:]), Object: object,
				Err: fmt.Errorf("%w: its object %s is missing", ErrUnknownKey, name)}
		}
		return nil, fmt.Errorf("seal: bucket key %s for %s: %w", name, object, err)
	}
	ko, err := decodeKeyObject(name, data)
	if err != nil {
		return nil, err
	}
	key, err := d.ring.Unwrap(ctx, ko.KEK, ko.Wrapped, keyContext(id))
	if err != nil {
		return nil, keyErr(err, ko.KEK, id, object)
	}
	if len(key) != 32 {
		return nil, &KeyError{ID: ko.KEK, Bucket: hex.EncodeToString(id[:]), Object: object, Err: ErrWrongKey}
	}
	return &bucketKey{id: id, key: key, kek: ko.KEK}, nil
}

// noBucketKey is the id keyErr takes when no bucket key was involved (a
// bucket key's id is 16 random bytes).
var noBucketKey [16]byte

// keyErr makes a ring's error a *KeyError naming the KEK, the bucket key
// and the object.
func keyErr(err error, kek string, id [16]byte, object string) error {
	ke := &KeyError{ID: kek, Object: object, Err: err}
	if id != noBucketKey {
		ke.Bucket = hex.EncodeToString(id[:])
	}
	var inner *KeyError
	if errors.As(err, &inner) {
		ke.Err = inner.Err
	}
	return ke
}
