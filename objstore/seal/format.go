package seal

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"

	"github.com/tierlog/tierlog/objstore"
)

// Frozen format constants (see the package doc).
const (
	// HeaderSize is the bytes of a sealed object's header, tag included.
	HeaderSize = 80
	// TagSize is GCM's tag, after every chunk.
	TagSize = 16
	// MinChunkSize and MaxChunkSize bound Options.ChunkSize and a header's
	// chunk size.
	MinChunkSize = 4 << 10
	MaxChunkSize = 64 << 20
	// DefaultChunkSize is Options.ChunkSize's default: a cold read of
	// one batch fetches and opens a chunk or two, so bigger chunks make
	// it slower (BenchmarkSealed/cold at 1 MiB: 0.51x unsealed; at 64
	// KiB: 0.97x), and the tags cost 16 bytes a chunk (0.02%).
	DefaultChunkSize = 64 << 10
	// KeyDir is the folder of the bucket keys' objects, in the folder
	// two levels above each object that names them (KeyFolder). Keys in
	// such a folder are the Driver's own: the store's callers can neither
	// write them nor see them listed.
	KeyDir = "_tierlog/keys/"

	version    = 1
	headerBody = 64 // the header's bytes the tag authenticates
)

var magic = [8]byte{0xff, 'T', 'L', 'S', 'E', 'A', 'L', version}

// Errors. Each wraps an objstore sentinel too, so a Store's callers that
// know nothing of sealing still see what kind of failure it is: a key
// problem is objstore.ErrAccessDenied, a bad object objstore.ErrCorrupt.
var (
	// ErrUnknownKey: the key ring has no KEK with the id a bucket key was
	// wrapped under (a *KeyError names it).
	ErrUnknownKey = errors.New("seal: key not in the key ring")
	// ErrWrongKey: the KEK with that id does not open what was wrapped
	// under that id: the ring holds another key under the same name.
	ErrWrongKey = errors.New("seal: key does not open the wrapped key")
	// ErrTampered: a chunk or the header fails authentication: the bytes
	// were changed, moved or swapped (an *ObjectError names the object and
	// the chunk).
	ErrTampered = errors.New("seal: authentication failed")
	// ErrTruncated: the object is shorter (or longer) than its header
	// says.
	ErrTruncated = errors.New("seal: object truncated")
	// ErrNotSealed: the object is not sealed and Options.ReadPlaintext is
	// off.
	ErrNotSealed = errors.New("seal: object not sealed")
	// ErrBadHeader: the header does not decode (a version this build does
	// not know, a chunk size out of range, nonzero reserved bytes).
	ErrBadHeader = errors.New("seal: bad header")
	// ErrSealedObject: bytes read through a store that is not sealed
	// are a sealed object's (LooksSealed): the store needs the key file.
	ErrSealedObject = errors.New("seal: the object is sealed (client-side encrypted): open the store with its key file (the URL's key-file= option, tierctl's --key-file)")
	// ErrBadKeyID: a key id that is not 1 to 32 of A-Z a-z 0-9 . _ -.
	ErrBadKeyID = errors.New("seal: bad key id")
	// ErrBadKeyFile: a key file or a bucket key's object that does not
	// parse.
	ErrBadKeyFile = errors.New("seal: bad key file")
)

// KeyError is a key that cannot be had: its id (a KEK's, or a bucket
// key's in hex), the object that needed it when one did, and why.
type KeyError struct {
	ID     string // the KEK's id
	Bucket string // the bucket key's id, hex, when a bucket key was being opened
	Object string // the object being read, if any
	Err    error  // ErrUnknownKey, ErrWrongKey, or the ring's error
}

func (e *KeyError) Error() string {
	var s string
	switch {
	case e.ID == "":
		s = "seal: bucket key " + e.Bucket
	case e.Bucket == "":
		s = fmt.Sprintf("seal: key %q", e.ID)
	default:
		s = fmt.Sprintf("seal: key %q (wrapping bucket key %s)", e.ID, e.Bucket)
	}
	if e.Object != "" {
		s += " needed by " + e.Object
	}
	return s + ": " + e.Err.Error()
}

func (e *KeyError) Unwrap() []error { return []error{e.Err, objstore.ErrAccessDenied} }

// ObjectError is an object that does not open: its name, the chunk (-1:
// the header), and why (ErrTampered, ErrTruncated, ErrBadHeader,
// ErrNotSealed).
type ObjectError struct {
	Object string
	Chunk  int64
	Err    error
	Detail string
}

func (e *ObjectError) Error() string {
	where := "header"
	if e.Chunk >= 0 {
		where = fmt.Sprintf("chunk %d", e.Chunk)
	}
	s := fmt.Sprintf("seal: %s %s: %v", e.Object, where, e.Err)
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	return s
}

func (e *ObjectError) Unwrap() []error { return []error{e.Err, objstore.ErrCorrupt} }

// BoundName is the part of an object's key its seal binds: its last two
// path components (a partition's folder and the object's name; a WAL
// writer's folder and its number), whatever folders the store's URL
// and the Backend's prefix put above them. So a bucket read through a
// store rooted higher or lower than the writer's (s3://b against
// s3://b/tierlog) opens the same, and an object moved to another
// partition's folder or renamed does not.
func BoundName(key string) string {
	if i := strings.LastIndexByte(key, '/'); i > 0 {
		if j := strings.LastIndexByte(key[:i], '/'); j >= 0 {
			return key[j+1:]
		}
	}
	return key
}

// KeyFolder is the folder of the bucket keys of key's object: KeyDir in
// the folder above its BoundName ("tierlog/orders-0/x" has them in
// "tierlog/_tierlog/keys/", "orders-0/x" in "_tierlog/keys/").
func KeyFolder(key string) string {
	return strings.TrimSuffix(key, BoundName(key)) + KeyDir
}

// isKeyObject reports whether key is in a bucket key folder.
func isKeyObject(key string) bool {
	return strings.HasPrefix(key, KeyDir) || strings.Contains(key, "/"+KeyDir)
}

// header is a sealed object's header, decoded.
type header struct {
	chunk int64 // plaintext bytes a chunk
	size  int64 // plaintext bytes of the object
	keyID [16]byte
	salt  [16]byte
	raw   [HeaderSize]byte
}

// chunks is how many chunks the object has (an empty object has one).
func (h *header) chunks() int64 { return max(1, (h.size+h.chunk-1)/h.chunk) }

// sealedSize is the stored bytes of a sealed object of the header's size.
func (h *header) sealedSize() int64 { return sealedSize(h.size, h.chunk) }

func sealedSize(size, chunk int64) int64 {
	return HeaderSize + size + TagSize*max(1, (size+chunk-1)/chunk)
}

// plainSize inverts sealedSize: the plaintext bytes of a sealed object of
// stored bytes n and the chunk size, or -1 when no size seals to n.
func plainSize(n, chunk int64) int64 {
	m := n - HeaderSize
	if m < TagSize {
		return -1
	}
	c := (m + chunk + TagSize - 1) / (chunk + TagSize)
	p := m - TagSize*c
	if p < 0 || sealedSize(p, chunk) != n {
		return -1
	}
	return p
}

// span is the end of plaintext [offset, offset+length) (length < 0: to
// the end) of the object, or ErrInvalidRange for an offset past its end
// (at its end, only an empty object's), as a Driver's Get says.
func (h *header) span(offset, length int64) (int64, error) {
	if offset > h.size || (offset == h.size && h.size > 0) {
		return 0, fmt.Errorf("%w: offset %d of a %d-byte object", objstore.ErrInvalidRange, offset, h.size)
	}
	if length < 0 {
		return h.size, nil
	}
	return min(h.size, offset+length), nil
}

// chunkLen is chunk i's plaintext bytes.
func (h *header) chunkLen(i int64) int64 { return min(h.chunk, h.size-i*h.chunk) }

// chunkPos is where chunk i starts in the stored object.
func (h *header) chunkPos(i int64) int64 { return HeaderSize + i*(h.chunk+TagSize) }

// encode fills h.raw from the fields (the tag aside).
func (h *header) encode() {
	clear(h.raw[:])
	copy(h.raw[0:8], magic[:])
	binary.BigEndian.PutUint32(h.raw[8:12], uint32(h.chunk))
	binary.BigEndian.PutUint64(h.raw[16:24], uint64(h.size))
	copy(h.raw[24:40], h.keyID[:])
	copy(h.raw[40:56], h.salt[:])
}

// LooksSealed reports whether b, an object's first bytes as stored, are
// a sealed object's: what a reader that is not sealed may check to say
// ErrSealedObject rather than that the bytes are corrupt.
func LooksSealed(b []byte) bool { return isSealed(b) }

// isSealed reports whether b (an object's first bytes) starts like a
// sealed object of any version.
func isSealed(b []byte) bool { return len(b) >= 7 && string(b[:7]) == string(magic[:7]) }

// decodeHeader decodes a header (not its tag: that needs the key).
func decodeHeader(b []byte) (header, error) {
	var h header
	if len(b) < HeaderSize {
		return h, fmt.Errorf("%w: %d bytes, want %d", ErrBadHeader, len(b), HeaderSize)
	}
	if !isSealed(b) {
		return h, ErrNotSealed
	}
	if b[7] != version {
		return h, fmt.Errorf("%w: version %d (this build reads %d)", ErrBadHeader, b[7], version)
	}
	h.chunk = int64(binary.BigEndian.Uint32(b[8:12]))
	if h.chunk < MinChunkSize || h.chunk > MaxChunkSize {
		return h, fmt.Errorf("%w: chunk size %d outside [%d, %d]", ErrBadHeader, h.chunk, MinChunkSize, MaxChunkSize)
	}
	s := binary.BigEndian.Uint64(b[16:24])
	if s > 1<<56 {
		return h, fmt.Errorf("%w: size %d", ErrBadHeader, s)
	}
	h.size = int64(s)
	for _, z := range [][]byte{b[12:16], b[56:64]} {
		for _, c := range z {
			if c != 0 {
				return h, fmt.Errorf("%w: reserved bytes not zero", ErrBadHeader)
			}
		}
	}
	copy(h.keyID[:], b[24:40])
	copy(h.salt[:], b[40:56])
	copy(h.raw[:], b[:HeaderSize])
	return h, nil
}

// objectKey derives the object's AES-256 key from the bucket key, the
// header's salt and the object's bound name.
func objectKey(bucketKey []byte, salt [16]byte, name string) (cipher.AEAD, error) {
	k, err := hkdf.Key(sha256.New, bucketKey, salt[:], "tierlog seal v1 "+BoundName(name), 32)
	if err != nil {
		return nil, err
	}
	block, err := aes.NewCipher(k)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(block)
}

// headerNonce is the nonce of the header's tag; no chunk has it (a chunk's
// nonce starts with 4 zero bytes).
var headerNonce = [12]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}

// headerAD is the associated data of the header's tag.
func headerAD(h *header, name string) []byte {
	name = BoundName(name)
	return append(append(make([]byte, 0, headerBody+len(name)), h.raw[:headerBody]...), name...)
}

// chunkNonce and chunkAD are chunk i's nonce and associated data.
func chunkNonce(i int64) []byte {
	var n [12]byte
	binary.BigEndian.PutUint64(n[4:], uint64(i))
	return n[:]
}

func chunkAD(dst []byte, i int64, last bool, name string) []byte {
	dst = append(dst[:0], 'c')
	dst = binary.BigEndian.AppendUint64(dst, uint64(i))
	if last {
		dst = append(dst, 1)
	} else {
		dst = append(dst, 0)
	}
	return append(dst, BoundName(name)...)
}

// sealHeader writes the header's tag.
func sealHeader(aead cipher.AEAD, h *header, name string) {
	tag := aead.Seal(nil, headerNonce[:], nil, headerAD(h, name))
	copy(h.raw[headerBody:], tag)
}

// openHeader checks the header's tag.
func openHeader(aead cipher.AEAD, h *header, name string) error {
	if _, err := aead.Open(nil, headerNonce[:], h.raw[headerBody:HeaderSize], headerAD(h, name)); err != nil {
		return &ObjectError{Object: name, Chunk: -1, Err: ErrTampered}
	}
	return nil
}
