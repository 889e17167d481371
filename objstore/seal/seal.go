package seal

import (
	"container/list"
	"context"
	"crypto/cipher"
	"crypto/rand"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/tierlog/tierlog/objstore"
)

// Options configure a Driver.
type Options struct {
	// ChunkSize is the plaintext bytes of a chunk of the objects this
	// Driver writes: a ranged read fetches whole chunks. 0 means
	// DefaultChunkSize (64 KiB); otherwise MinChunkSize to MaxChunkSize.
	ChunkSize int
	// ReadPlaintext lets reads return objects that are not sealed, as
	// they are: for a bucket written before sealing was turned on. Off,
	// such an object is an error (ErrNotSealed): a bucket writer cannot
	// swap a sealed object for a plaintext one unseen.
	ReadPlaintext bool
	// Headers is how many objects' headers are kept, so a ranged read
	// of an object read before is one GET. 0 means 65,536 (about 20 MiB).
	Headers int
	// Selective leaves what to seal to the Driver's user: the Driver
	// writes objects as they are and reads sealed and plaintext ones
	// (ReadPlaintext is implied), and Sealing returns the Driver that
	// seals, sharing its keys, which reads plaintext objects only with
	// ReadPlaintext. A tiered.Backend over a selective Driver seals the
	// objects of topics with remote.storage.seal.enable=true and of
	// diskless WAL objects only.
	Selective bool
}

// Validate checks o and fills its defaults.
func (o *Options) Validate() error {
	if o.ChunkSize == 0 {
		o.ChunkSize = DefaultChunkSize
	}
	if o.ChunkSize < MinChunkSize || o.ChunkSize > MaxChunkSize {
		return fmt.Errorf("seal: chunk size %d: want %d to %d bytes", o.ChunkSize, MinChunkSize, MaxChunkSize)
	}
	if o.Headers < 0 {
		return fmt.Errorf("seal: headers %d: want 0 (the default) or more", o.Headers)
	}
	if o.Headers == 0 {
		o.Headers = 1 << 16
	}
	if o.Selective {
		o.ReadPlaintext = true
	}
	return nil
}

// Driver seals what it writes to another Driver and opens what it reads
// back (see the package doc). Safe for concurrent use.
type Driver struct {
	*keep
	opts Options
	// sealing is the Driver that seals, when this one is Selective.
	sealing *Driver
}

// keep is what the Drivers of one bucket share (a selective one and its
// Sealing): the bucket keys and the headers read.
type keep struct {
	d    objstore.Driver
	ring KeyRing
	bufs sync.Pool // *[]byte of ChunkSize+TagSize bytes

	mu      sync.Mutex
	active  *bucketKey            // the key this Driver seals under, once made
	stored  map[string]bool       // the key folders holding active's object
	keys    map[string]*bucketKey // bucket keys opened, by their object's name
	headers map[string]*list.Element
	lru     list.List // of *cachedHeader, most recent first

	// making serialises the making of the active bucket key.
	making sync.Mutex
}

type cachedHeader struct {
	name string
	etag string
	h    header
}

// New returns a Driver that seals into d with keys wrapped by ring.
func New(d objstore.Driver, ring KeyRing, opts Options) (*Driver, error) {
	readPlaintext := opts.ReadPlaintext // Validate sets it for a Selective Driver
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if ring == nil || ring.Active() == "" {
		return nil, fmt.Errorf("seal: a key ring with an active key is needed")
	}
	k := &keep{d: d, ring: ring, keys: map[string]*bucketKey{}, stored: map[string]bool{}, headers: map[string]*list.Element{}}
	n := opts.ChunkSize + TagSize
	k.bufs.New = func() any { b := make([]byte, n); return &b }
	sd := &Driver{keep: k, opts: opts}
	if opts.Selective {
		sealing := opts
		sealing.Selective, sealing.ReadPlaintext = false, readPlaintext
		sd.sealing = &Driver{keep: k, opts: sealing}
	}
	return sd, nil
}

// Sealing returns the Driver that seals every object it writes and reads
// only sealed ones: d itself unless d is Selective, else the Driver of
// the objects its user seals, which shares d's keys and kept headers.
func (d *Driver) Sealing() *Driver {
	if d.sealing != nil {
		return d.sealing
	}
	return d
}

// Selective reports whether d writes objects as they are and leaves
// sealing to its user (Options.Selective).
func (d *Driver) Selective() bool { return d.opts.Selective }

// Inner returns the driver the objects are stored in.
func (d *Driver) Inner() objstore.Driver { return d.d }

// Ring returns the key ring.
func (d *Driver) Ring() KeyRing { return d.ring }

// reserved reports whether key is the Driver's own.
func reserved(key string) bool { return isKeyObject(key) }

func refuse(key string) error {
	return fmt.Errorf("%w: %s: keys in a %s folder are the sealing's own", objstore.ErrInvalidKey, key, KeyDir)
}

// activeKey returns the bucket key new objects are sealed under, made at
// the first write, with its object in the key folder of object.
func (d *Driver) activeKey(ctx context.Context, object string) (*bucketKey, error) {
	folder := KeyFolder(object)
	d.mu.Lock()
	bk, ok := d.active, d.stored[folder]
	d.mu.Unlock()
	if bk != nil && ok {
		return bk, nil
	}
	d.making.Lock()
	defer d.making.Unlock()
	d.mu.Lock()
	bk, ok = d.active, d.stored[folder]
	d.mu.Unlock()
	if bk != nil && ok {
		return bk, nil
	}
	if bk == nil {
		var err error
		if bk, err = d.newBucketKey(ctx); err != nil {
			return nil, err
		}
		d.mu.Lock()
		d.active = bk
		d.mu.Unlock()
	}
	name := keyName(bk.id, object)
	if err := d.storeKey(ctx, bk, name); err != nil {
		return nil, err
	}
	d.mu.Lock()
	d.stored[folder], d.keys[name] = true, bk
	d.mu.Unlock()
	return bk, nil
}

// bucketKey returns the bucket key id of object, opening it from
// object's key folder at its first use there: a key is kept by its
// object's name, so a key folder that lost its copy fails here as it
// would for a new reader.
func (d *Driver) bucketKey(ctx context.Context, id [16]byte, object string) (*bucketKey, error) {
	name := keyName(id, object)
	d.mu.Lock()
	bk := d.keys[name]
	d.mu.Unlock()
	if bk != nil {
		return bk, nil
	}
	bk, err := d.openBucketKey(ctx, id, object)
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	if old := d.keys[name]; old != nil {
		bk = old
	} else {
		d.keys[name] = bk
	}
	d.mu.Unlock()
	return bk, nil
}

// Put implements objstore.Driver: it seals body under a new object key
// (a Selective Driver puts it as it is).
// A PutOptions.CRC32C is checked against the plaintext and the put made
// with the CRC-32C of the sealed bytes, so the store still checks every
// byte it keeps.
func (d *Driver) Put(ctx context.Context, key string, body io.ReadSeeker, size int64, opts objstore.PutOptions) (objstore.ObjectInfo, error) {
	if reserved(key) {
		return objstore.ObjectInfo{}, refuse(key)
	}
	if d.opts.Selective {
		d.forget(key)
		return d.d.Put(ctx, key, body, size, opts)
	}
	bk, err := d.activeKey(ctx, key)
	if err != nil {
		return objstore.ObjectInfo{}, err
	}
	h := header{chunk: int64(d.opts.ChunkSize), size: size, keyID: bk.id}
	rand.Read(h.salt[:])
	h.encode()
	aead, err := objectKey(bk.key, h.salt, key)
	if err != nil {
		return objstore.ObjectInfo{}, err
	}
	sealHeader(aead, &h, key)
	d.forget(key)
	sb := &sealingBody{h: &h, aead: aead, name: key, body: body, cur: -1}
	defer sb.release()
	// A first pass computes the stored bytes' CRC-32C (and checks the
	// plaintext's against the caller's); the driver reads the second.
	crc, plain, err := sb.checksum()
	if err != nil {
		return objstore.ObjectInfo{}, err
	}
	if opts.HasCRC32C && plain != opts.CRC32C {
		return objstore.ObjectInfo{}, fmt.Errorf("%w: %s: the body's CRC-32C is %08x, the put said %08x", objstore.ErrChecksumMismatch, key, plain, opts.CRC32C)
	}
	opts.CRC32C, opts.HasCRC32C = crc, true
	if _, err := sb.Seek(0, io.SeekStart); err != nil {
		return objstore.ObjectInfo{}, err
	}
	info, err := d.d.Put(ctx, key, sb, h.sealedSize(), opts)
	if err != nil {
		return info, err
	}
	d.remember(key, info.ETag, h)
	info.Size = size
	return info, nil
}

// Get implements objstore.Driver: offset and length count plaintext
// bytes, and the reader checks every chunk it returns bytes of.
func (d *Driver) Get(ctx context.Context, key string, offset, length int64) (io.ReadCloser, objstore.ObjectInfo, error) {
	if reserved(key) {
		return nil, objstore.ObjectInfo{}, refuse(key)
	}
	if offset < 0 {
		return nil, objstore.ObjectInfo{}, fmt.Errorf("%w: offset %d", objstore.ErrInvalidRange, offset)
	}
	for try := 0; ; try++ {
		ch, ok := d.cached(key)
		if !ok && (length != 0 || offset == 0) {
			rc, info, hr, plain, err := d.getCold(ctx, key, offset, length)
			switch {
			case err != nil || rc != nil:
				return rc, info, err
			case plain: // a plaintext object, and reads of them allowed
				return d.d.Get(ctx, key, offset, length)
			}
			ch = hr // the object's chunks are not this Driver's size
		}
		if ch == nil {
			var err error
			if ch, err = d.readHeader(ctx, key); err != nil {
				return nil, objstore.ObjectInfo{}, err
			}
			if ch == nil {
				return d.d.Get(ctx, key, offset, length)
			}
		}
		rc, info, stale, err := d.getRange(ctx, key, ch, offset, length)
		if stale {
			// The object changed since its header was kept.
			d.forget(key)
			if try == 0 {
				continue
			}
		}
		return rc, info, err
	}
}

// getCold reads plaintext [offset, offset+length) of key, whose header
// is not kept, in one round trip: from offset 0, one GET with the header
// at its front; else a GET of the header and one of the chunks (at the
// chunk size this Driver writes) at once. It returns the reader, or
// plain (a plaintext object, to be read as it is), or, when the chunks
// are not where it guessed, the header only, checked.
func (d *Driver) getCold(ctx context.Context, key string, offset, length int64) (rc io.ReadCloser, info objstore.ObjectInfo, hr *headerRead, plain bool, err error) {
	c := int64(d.opts.ChunkSize)
	first := offset / c
	from := HeaderSize + first*(c+TagSize)
	n := int64(-1) // to the end
	switch {
	case length > 0:
		n = HeaderSize + ((offset+length-1)/c+1)*(c+TagSize) - from
	case length == 0:
		n = 0 // offset 0: the header alone
	}
	var body io.ReadCloser
	var got objstore.ObjectInfo
	if offset == 0 {
		if n >= 0 {
			n += HeaderSize
		}
		if body, got, err = d.d.Get(ctx, key, 0, n); err != nil {
			if errors.Is(err, objstore.ErrInvalidRange) {
				return nil, info, nil, false, nil // an empty object: readHeader says what it is
			}
			return nil, info, nil, false, err
		}
		var b [HeaderSize]byte
		k, err := readFront(ctx, body, b[:], got, key)
		if err != nil {
			body.Close()
			return nil, info, nil, false, err
		}
		if !isSealed(b[:k]) && d.opts.ReadPlaintext {
			if length < 0 {
				return &prefixed{head: append([]byte(nil), b[:k]...), rc: body}, got, nil, false, nil
			}
			body.Close()
			return nil, info, nil, true, nil
		}
		if hr, err = d.checkHeader(ctx, key, b[:k], got); err != nil {
			body.Close()
			return nil, info, nil, false, err
		}
	} else {
		type headerResult struct {
			hr  *headerRead
			err error
		}
		hc := make(chan headerResult, 1)
		go func() {
			hr, err := d.readHeader(ctx, key)
			hc <- headerResult{hr, err}
		}()
		var gerr error
		body, got, gerr = d.d.Get(ctx, key, from, n)
		res := <-hc
		if res.err != nil || res.hr == nil || gerr != nil {
			if body != nil {
				body.Close()
			}
			switch {
			case res.err != nil:
				return nil, info, nil, false, res.err
			case res.hr == nil:
				return nil, info, nil, true, nil
			case !errors.Is(gerr, objstore.ErrInvalidRange):
				return nil, info, nil, false, gerr
			}
			return nil, info, res.hr, false, nil // past the end: getRange says so
		}
		hr = res.hr
	}
	h := &hr.h
	if (h.chunk != c && (offset > 0 || length >= 0)) || !hr.sameObject(got) {
		body.Close() // not the chunks asked for: read them by the header
		return nil, info, hr, false, nil
	}
	end, err := h.span(offset, length)
	if err != nil {
		body.Close()
		return nil, info, nil, false, err
	}
	info = objstore.ObjectInfo{Key: key, Size: h.size, ETag: got.ETag, LastModified: got.LastModified}
	if end <= offset {
		body.Close()
		return io.NopCloser(strings.NewReader("")), info, nil, false, nil
	}
	or, err := d.opener(key, h, body, first, offset-first*h.chunk, end-offset)
	if err != nil {
		body.Close()
		return nil, info, nil, false, err
	}
	return or, info, nil, false, nil
}

// Head implements objstore.Driver with one ranged GET of the header: the
// size is the plaintext's.
func (d *Driver) Head(ctx context.Context, key string) (objstore.ObjectInfo, error) {
	if reserved(key) {
		return objstore.ObjectInfo{}, refuse(key)
	}
	ch, err := d.readHeader(ctx, key)
	if err != nil {
		return objstore.ObjectInfo{}, err
	}
	if ch == nil {
		return d.d.Head(ctx, key)
	}
	return objstore.ObjectInfo{Key: key, Size: ch.h.size, ETag: ch.etag, LastModified: ch.modified}, nil
}

// List implements objstore.Driver. The bucket keys' objects are not
// listed; a sealed object's size is its plaintext's, computed with this
// Driver's chunk size (see the package doc), but with ReadPlaintext, when
// a listed object may be either, sizes are the stored bytes.
func (d *Driver) List(ctx context.Context, prefix, startAfter string, limit int) ([]objstore.ObjectInfo, bool, error) {
	for {
		objs, more, err := d.d.List(ctx, prefix, startAfter, limit)
		if err != nil || len(objs) == 0 {
			return objs, more, err
		}
		out := objs[:0]
		last := objs[len(objs)-1].Key
		for _, o := range objs {
			if reserved(o.Key) {
				continue
			}
			if p := plainSize(o.Size, int64(d.opts.ChunkSize)); p >= 0 && !d.opts.ReadPlaintext {
				o.Size = p
			}
			out = append(out, o)
		}
		if len(out) > 0 || !more {
			return out, more, nil
		}
		startAfter = last // a page of bucket keys only: the next one
	}
}

// Delete implements objstore.Driver. Bucket keys are never deleted
// through it: one may seal any object in the bucket.
func (d *Driver) Delete(ctx context.Context, keys []string) error {
	for _, k := range keys {
		if reserved(k) {
			return refuse(k)
		}
	}
	for _, k := range keys {
		d.forget(k)
	}
	return d.d.Delete(ctx, keys)
}

// AbortStaleUploads implements objstore.Driver.
func (d *Driver) AbortStaleUploads(ctx context.Context, prefix string, olderThan time.Time) (int, error) {
	return d.d.AbortStaleUploads(ctx, prefix, olderThan)
}

// CheckBucket implements objstore.BucketChecker: the inner driver's
// check, then that the ring holds its active key.
func (d *Driver) CheckBucket(ctx context.Context) error {
	if bc, ok := d.d.(objstore.BucketChecker); ok {
		if err := bc.CheckBucket(ctx); err != nil {
			return err
		}
	}
	if _, err := d.ring.Wrap(ctx, d.ring.Active(), make([]byte, 32), []byte("check")); err != nil {
		return keyErr(err, d.ring.Active(), noBucketKey, "")
	}
	return nil
}

// Close implements objstore.Driver.
func (d *Driver) Close() error { return d.d.Close() }

// headerRead is an object's header, checked, with what the GET said.
type headerRead struct {
	h        header
	etag     string
	modified time.Time
	stored   int64
}

// sameObject reports whether a GET's answer is of the object hr describes
// (its stored size, and its ETag where both have one).
func (hr *headerRead) sameObject(got objstore.ObjectInfo) bool {
	return got.Size == hr.stored && (got.ETag == "" || hr.etag == "" || got.ETag == hr.etag)
}

// readHeader GETs key's header and checks it. A plaintext object is nil
// when Options.ReadPlaintext allows it, else ErrNotSealed.
func (d *Driver) readHeader(ctx context.Context, key string) (*headerRead, error) {
	rc, info, err := d.d.Get(ctx, key, 0, HeaderSize)
	if errors.Is(err, objstore.ErrInvalidRange) {
		// An empty object (S3 refuses any range of one).
		return d.checkHeader(ctx, key, nil, objstore.ObjectInfo{Key: key})
	}
	if err != nil {
		return nil, err
	}
	var b [HeaderSize]byte
	n, err := readFront(ctx, rc, b[:], info, key)
	rc.Close()
	if err != nil {
		return nil, err
	}
	return d.checkHeader(ctx, key, b[:n], info)
}

// readFront reads an object's first bytes into b from its GET's body:
// all of b, or the whole object when it is shorter. A body that ends
// sooner, or fails, is a cut connection (the GET said the size):
// retryable, as the Store's own reads of a body are.
func readFront(ctx context.Context, body io.Reader, b []byte, info objstore.ObjectInfo, key string) (int, error) {
	n, err := io.ReadFull(body, b)
	if err == nil || int64(n) >= min(int64(len(b)), info.Size) {
		return n, nil
	}
	if ctx.Err() != nil {
		return n, ctx.Err()
	}
	return n, fmt.Errorf("%w: seal: %s: its first %d bytes came short (%d): %w", objstore.ErrRetryable, key, min(int64(len(b)), info.Size), n, err)
}

// checkHeader decodes and authenticates b, the first bytes of key, and
// keeps it.
func (d *Driver) checkHeader(ctx context.Context, key string, b []byte, info objstore.ObjectInfo) (*headerRead, error) {
	if !isSealed(b) {
		switch {
		case d.opts.ReadPlaintext:
			return nil, nil
		case len(b) == 0:
			return nil, &ObjectError{Object: key, Chunk: -1, Err: ErrTruncated, Detail: fmt.Sprintf("empty: a sealed object has at least %d bytes", HeaderSize+TagSize)}
		}
		return nil, &ObjectError{Object: key, Chunk: -1, Err: ErrNotSealed,
			Detail: "written without sealing, or replaced (objects written before the bucket was sealed are read with the store URL's read-plaintext=true)"}
	}
	h, err := decodeHeader(b)
	if err != nil {
		if errors.Is(err, ErrBadHeader) && len(b) < HeaderSize {
			err = ErrTruncated
		}
		return nil, &ObjectError{Object: key, Chunk: -1, Err: err}
	}
	bk, err := d.bucketKey(ctx, h.keyID, key)
	if err != nil {
		return nil, err
	}
	aead, err := objectKey(bk.key, h.salt, key)
	if err != nil {
		return nil, err
	}
	if err := openHeader(aead, &h, key); err != nil {
		return nil, err
	}
	if info.Size != h.sealedSize() {
		return nil, &ObjectError{Object: key, Chunk: h.chunks() - 1, Err: ErrTruncated,
			Detail: fmt.Sprintf("%d bytes stored, the header says %d (%d of plaintext)", info.Size, h.sealedSize(), h.size)}
	}
	hr := &headerRead{h: h, etag: info.ETag, modified: info.LastModified, stored: info.Size}
	d.remember(key, info.ETag, h)
	return hr, nil
}

// getRange GETs the chunks holding plaintext [offset, offset+length) of
// key, whose header is ch. stale: the object is not the one ch describes.
func (d *Driver) getRange(ctx context.Context, key string, ch *headerRead, offset, length int64) (io.ReadCloser, objstore.ObjectInfo, bool, error) {
	h := &ch.h
	info := objstore.ObjectInfo{Key: key, Size: h.size, ETag: ch.etag, LastModified: ch.modified}
	end, err := h.span(offset, length)
	if err != nil {
		return nil, info, false, err
	}
	if end <= offset {
		return io.NopCloser(strings.NewReader("")), info, false, nil
	}
	first, last := offset/h.chunk, (end-1)/h.chunk
	from := h.chunkPos(first)
	to := h.chunkPos(last) + h.chunkLen(last) + TagSize
	rc, got, err := d.d.Get(ctx, key, from, to-from)
	if err != nil {
		// Shorter than the header kept says, or gone: the object
		// changed since (rewritten by another writer), and its header
		// is read again.
		stale := errors.Is(err, objstore.ErrInvalidRange) || errors.Is(err, objstore.ErrNotFound)
		return nil, info, stale, err
	}
	if !ch.sameObject(got) {
		rc.Close()
		return nil, info, true, &ObjectError{Object: key, Chunk: -1, Err: ErrTruncated,
			Detail: fmt.Sprintf("changed since its header was read: %d bytes stored, the header says %d", got.Size, ch.stored)}
	}
	or, err := d.opener(key, h, rc, first, offset-first*h.chunk, end-offset)
	if err != nil {
		rc.Close()
		return nil, info, false, err
	}
	info.ETag, info.LastModified = got.ETag, got.LastModified
	return or, info, false, nil
}

// opener returns the reader of n plaintext bytes from skip bytes into
// chunk first of key, whose stored chunks rc reads from chunk first on.
func (d *Driver) opener(key string, h *header, rc io.ReadCloser, first, skip, n int64) (*openingReader, error) {
	d.mu.Lock()
	bk := d.keys[keyName(h.keyID, key)]
	d.mu.Unlock()
	if bk == nil {
		return nil, fmt.Errorf("seal: %s: bucket key not open", key) // checkHeader opened it
	}
	aead, err := objectKey(bk.key, h.salt, key)
	if err != nil {
		return nil, err
	}
	return &openingReader{d: d, h: *h, aead: aead, name: key, rc: rc, next: first, skip: skip, left: n}, nil
}

// cached returns key's kept header.
func (d *Driver) cached(key string) (*headerRead, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	e := d.headers[key]
	if e == nil {
		return nil, false
	}
	d.lru.MoveToFront(e)
	c := e.Value.(*cachedHeader)
	return &headerRead{h: c.h, etag: c.etag, stored: c.h.sealedSize()}, true
}

// remember keeps key's header, evicting the least recently used.
func (d *Driver) remember(key, etag string, h header) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if e := d.headers[key]; e != nil {
		c := e.Value.(*cachedHeader)
		c.etag, c.h = etag, h
		d.lru.MoveToFront(e)
		return
	}
	d.headers[key] = d.lru.PushFront(&cachedHeader{name: key, etag: etag, h: h})
	for d.lru.Len() > d.opts.Headers {
		e := d.lru.Back()
		d.lru.Remove(e)
		delete(d.headers, e.Value.(*cachedHeader).name)
	}
}

func (d *Driver) forget(key string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if e := d.headers[key]; e != nil {
		d.lru.Remove(e)
		delete(d.headers, key)
	}
}

func (d *Driver) buf(n int64) (*[]byte, bool) {
	if n == int64(d.opts.ChunkSize)+TagSize {
		return d.bufs.Get().(*[]byte), true
	}
	b := make([]byte, n)
	return &b, false
}

// sealingBody is the sealed object as a ReadSeeker over the plaintext
// body: it seals a chunk at a time, again on a seek back (the same bytes:
// the key and nonces are fixed for the object). Its buffers are its own,
// never pooled, and once Put returns it reads nothing more: an HTTP
// client may go on reading a request's body after its answer came.
type sealingBody struct {
	h    *header
	aead cipher.AEAD
	name string
	body io.ReadSeeker

	mu     sync.Mutex
	done   bool // Put returned
	pos    int64
	cur    int64  // the chunk in out, -1 none
	out    []byte // chunk cur, sealed
	plain  []byte // plaintext of chunk cur
	sealed []byte
	ad     []byte
}

// release ends the body's reads.
func (s *sealingBody) release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.done = true
	s.out, s.plain, s.sealed = nil, nil, nil
}

var errPutOver = errors.New("seal: the put is over: its body reads nothing more")

// checksum reads the whole sealed object once: its CRC-32C and the
// plaintext's.
func (s *sealingBody) checksum() (sealed, plain uint32, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sealed = crc32.Update(0, castagnoli, s.h.raw[:])
	for i := range s.h.chunks() {
		if err := s.load(i); err != nil {
			return 0, 0, err
		}
		plain = crc32.Update(plain, castagnoli, s.plain[:s.h.chunkLen(i)])
		sealed = crc32.Update(sealed, castagnoli, s.out)
	}
	return sealed, plain, nil
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// load seals chunk i into s.out. REQUIRES: s.mu held.
func (s *sealingBody) load(i int64) error {
	if s.cur == i {
		return nil
	}
	if s.plain == nil {
		n := min(s.h.chunk, s.h.size) // a small object needs no more
		s.plain, s.sealed = make([]byte, n), make([]byte, 0, n+TagSize)
	}
	n := s.h.chunkLen(i)
	if n > 0 {
		if _, err := s.body.Seek(i*s.h.chunk, io.SeekStart); err != nil {
			return err
		}
		if _, err := io.ReadFull(s.body, s.plain[:n]); err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				err = fmt.Errorf("seal: %s: the body is shorter than the %d bytes put", s.name, s.h.size)
			}
			return err
		}
	}
	s.ad = chunkAD(s.ad, i, i == s.h.chunks()-1, s.name)
	s.out = s.aead.Seal(s.sealed[:0], chunkNonce(i), s.plain[:n], s.ad)
	s.cur = i
	return nil
}

func (s *sealingBody) Read(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done {
		return 0, errPutOver
	}
	total := s.h.sealedSize()
	if s.pos >= total {
		return 0, io.EOF
	}
	if s.pos < HeaderSize {
		n := copy(p, s.h.raw[s.pos:])
		s.pos += int64(n)
		return n, nil
	}
	i := (s.pos - HeaderSize) / (s.h.chunk + TagSize)
	if err := s.load(i); err != nil {
		return 0, err
	}
	n := copy(p, s.out[s.pos-s.h.chunkPos(i):])
	s.pos += int64(n)
	return n, nil
}

func (s *sealingBody) Seek(off int64, whence int) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done {
		return 0, errPutOver
	}
	switch whence {
	case io.SeekCurrent:
		off += s.pos
	case io.SeekEnd:
		off += s.h.sealedSize()
	}
	if off < 0 {
		return 0, fmt.Errorf("seal: seek to %d", off)
	}
	s.pos = off
	return off, nil
}

// openingReader returns the plaintext of the chunks rc reads, each
// checked before a byte of it is returned.
type openingReader struct {
	d    *Driver
	h    header
	aead cipher.AEAD
	name string
	rc   io.ReadCloser

	next    int64 // the chunk to read next
	skip    int64 // plaintext bytes of chunk next not to return
	left    int64 // plaintext bytes still to return
	pending []byte
	buf     *[]byte
	pooled  bool
	ad      []byte
	err     error
}

func (r *openingReader) Read(p []byte) (int, error) {
	for len(r.pending) == 0 {
		if r.left <= 0 {
			return 0, io.EOF
		}
		if r.err != nil {
			return 0, r.err
		}
		if r.err = r.chunk(); r.err != nil {
			return 0, r.err
		}
	}
	n := copy(p, r.pending)
	r.pending = r.pending[n:]
	r.left -= int64(n)
	return n, nil
}

// chunk reads and opens chunk r.next.
func (r *openingReader) chunk() error {
	i := r.next
	if i >= r.h.chunks() || r.skip < 0 || r.skip >= max(r.h.chunk, 1) {
		return fmt.Errorf("seal: %s: chunk %d skipping %d of a %d-chunk object: a read outside the object", r.name, i, r.skip, r.h.chunks())
	}
	n := r.h.chunkLen(i) + TagSize
	if r.buf == nil || int64(len(*r.buf)) < n {
		r.buf, r.pooled = r.d.buf(r.h.chunk + TagSize)
	}
	b := (*r.buf)[:n]
	if _, err := io.ReadFull(r.rc, b); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			// The stored size matched the header's: the connection
			// was cut, not the object.
			return fmt.Errorf("%w: seal: %s chunk %d: the body ended inside it: %w", objstore.ErrRetryable, r.name, i, io.ErrUnexpectedEOF)
		}
		return err
	}
	r.ad = chunkAD(r.ad, i, i == r.h.chunks()-1, r.name)
	plain, err := r.aead.Open(b[:0], chunkNonce(i), b, r.ad)
	if err != nil {
		return &ObjectError{Object: r.name, Chunk: i, Err: ErrTampered}
	}
	r.next++
	plain = plain[min(r.skip, int64(len(plain))):]
	r.skip = 0
	r.pending = plain[:min(int64(len(plain)), r.left)]
	return nil
}

func (r *openingReader) Close() error {
	if r.buf != nil && r.pooled {
		r.d.bufs.Put(r.buf)
	}
	r.buf, r.pending = nil, nil
	return r.rc.Close()
}

// prefixed is a plaintext object's reader with its first bytes read
// already.
type prefixed struct {
	head []byte
	rc   io.ReadCloser
}

func (p *prefixed) Read(b []byte) (int, error) {
	if len(p.head) > 0 {
		n := copy(b, p.head)
		p.head = p.head[n:]
		return n, nil
	}
	return p.rc.Read(b)
}

func (p *prefixed) Close() error { return p.rc.Close() }
