package objstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Op names an operation, for metrics.
type Op string

// Operations.
const (
	OpPut    Op = "put"
	OpGet    Op = "get"
	OpHead   Op = "head"
	OpList   Op = "list"
	OpDelete Op = "delete"
	OpAbort  Op = "abort_uploads"
)

// Event is what a metrics hook sees after each request attempt.
type Event struct {
	Op       Op
	Key      string
	Bytes    int64 // body bytes sent (put) or read (get, counted at Close)
	Duration time.Duration
	Attempt  int   // 1 for the first try
	Err      error // nil on success
}

// Options tune a Store. Together they set its bound (see Bound and the
// package doc): the longest any one request may take.
type Options struct {
	// Timeout bounds each request attempt, from sending it to the end of
	// its answer (default 30 s). A get's attempt ends when the response
	// headers arrive; each Read of its body must then make progress
	// within Timeout. A put's attempt must make progress (the driver
	// reading its body) within Timeout, and then answer within Timeout of
	// its last progress.
	Timeout time.Duration
	// MaxAttempts is how many times a retryable error is tried in all
	// (default 5).
	MaxAttempts int
	// BaseBackoff is the first retry's delay before jitter (default
	// 100 ms); each retry doubles it, up to MaxBackoff (default 5 s).
	BaseBackoff, MaxBackoff time.Duration
	// OnRequest, when set, is called after every attempt (metrics).
	OnRequest func(Event)
}

func (o *Options) fill() {
	if o.Timeout <= 0 {
		o.Timeout = 30 * time.Second
	}
	if o.MaxAttempts <= 0 {
		o.MaxAttempts = 5
	}
	if o.BaseBackoff <= 0 {
		o.BaseBackoff = 100 * time.Millisecond
	}
	if o.MaxBackoff <= 0 {
		o.MaxBackoff = 5 * time.Second
	}
}

// Bound returns the longest a Store call that makes one request may take
// with these options, all its retries included (for a put: without its
// body moving):
//
//	Bound = MaxAttempts × Timeout + Σ_{i=1}^{MaxAttempts-1} min(BaseBackoff × 2^(i-1), MaxBackoff)
//
// With the defaults: 5 × 30 s + (0.1 + 0.2 + 0.4 + 0.8) s = 151.5 s.
func (o Options) Bound() time.Duration {
	o.fill()
	b := time.Duration(o.MaxAttempts) * o.Timeout
	backoff := o.BaseBackoff
	for i := 1; i < o.MaxAttempts; i++ {
		b += backoff
		backoff = min(backoff*2, o.MaxBackoff)
	}
	return b
}

// Stats counts what a Store did, by operation.
type Stats struct {
	Requests map[Op]int64
	Errors   map[Op]int64
	Retries  map[Op]int64
	BytesIn  int64 // read by gets
	BytesOut int64 // sent by puts
}

// Store is the portable layer over a Driver; see the package doc. It is
// safe for concurrent use.
type Store struct {
	d      Driver
	name   string
	opts   Options
	closed atomic.Bool
	*counters
}

// counters are a Store's Stats, shared with its WithDriver Stores.
type counters struct {
	mu       sync.Mutex
	requests map[Op]int64
	errs     map[Op]int64
	retries  map[Op]int64
	bytesIn  atomic.Int64
	bytesOut atomic.Int64
}

// New wraps d; name (for errors) is usually the store's URL without secrets.
func New(d Driver, name string, opts Options) *Store {
	opts.fill()
	return &Store{d: d, name: name, opts: opts, counters: &counters{requests: map[Op]int64{}, errs: map[Op]int64{}, retries: map[Op]int64{}}}
}

// WithDriver returns a Store over d, another driver of the same bucket (a
// view of s's, such as a seal.Driver's Sealing), with s's name and
// options and counting into s's Stats. Closing either closes its own
// driver.
func (s *Store) WithDriver(d Driver) *Store {
	return &Store{d: d, name: s.name, opts: s.opts, counters: s.counters}
}

// Timeout returns the per-attempt request deadline.
func (s *Store) Timeout() time.Duration { return s.opts.Timeout }

// Bound returns the longest one request may take, retries included (see
// Options.Bound).
func (s *Store) Bound() time.Duration { return s.opts.Bound() }

// Name returns the store's name.
func (s *Store) Name() string { return s.name }

// Driver returns the wrapped driver.
func (s *Store) Driver() Driver { return s.d }

// Options returns the store's options, defaults filled.
func (s *Store) Options() Options { return s.opts }

// Stats returns a copy of the counters.
func (s *Store) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	cp := func(m map[Op]int64) map[Op]int64 {
		out := make(map[Op]int64, len(m))
		for k, v := range m {
			out[k] = v
		}
		return out
	}
	return Stats{Requests: cp(s.requests), Errors: cp(s.errs), Retries: cp(s.retries), BytesIn: s.bytesIn.Load(), BytesOut: s.bytesOut.Load()}
}

// ValidateKey applies the seam's key rules.
func ValidateKey(key string) error {
	if key == "" || len(key) > 1024 {
		return fmt.Errorf("%w: %q (want 1 to 1024 bytes)", ErrInvalidKey, key)
	}
	for _, c := range strings.Split(key, "/") {
		if c == "" || c == "." || c == ".." {
			return fmt.Errorf("%w: %q has an empty, \".\" or \"..\" component", ErrInvalidKey, key)
		}
		if len(c) >= 255 {
			return fmt.Errorf("%w: %q has a component of %d bytes (under 255 allowed)", ErrInvalidKey, key, len(c))
		}
	}
	if strings.ContainsRune(key, 0) {
		return fmt.Errorf("%w: %q contains a NUL byte", ErrInvalidKey, key)
	}
	return nil
}

func validatePrefix(prefix string) error {
	if prefix == "" {
		return nil
	}
	return ValidateKey(strings.TrimSuffix(prefix, "/"))
}

// errBound is the cause of a context that a Store's own bound ended, as
// against one the caller cancelled or gave a deadline.
var errBound = fmt.Errorf("objstore: the store's bound on one request passed: %w", context.DeadlineExceeded)

// errAttempt is the cause of an attempt's context that its Timeout ended.
var errAttempt = fmt.Errorf("objstore: the attempt's timeout passed: %w", context.DeadlineExceeded)

// bounded returns ctx with the store's bound as its deadline (an earlier
// deadline of the caller's stays).
func (s *Store) bounded(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeoutCause(ctx, s.opts.Bound(), errBound)
}

// idleDeadline returns a context that ends (with cause) once d passes
// without a call of touch, or when parent ends. A request that makes no
// progress has a deadline; one whose body is being sent does not run out
// of time while it moves. stop releases it.
func idleDeadline(parent context.Context, d time.Duration, cause error) (ctx context.Context, touch, stop func()) {
	ctx, cancel := context.WithCancelCause(parent)
	t := time.AfterFunc(d, func() { cancel(cause) })
	return ctx, func() { t.Reset(d) }, func() { t.Stop(); cancel(context.Canceled) }
}

// expiredBy reports whether ctx ended by one of this store's deadlines,
// cause: the attempt's or the bound's.
func expiredBy(ctx context.Context, cause error) bool {
	return ctx.Err() != nil && errors.Is(context.Cause(ctx), cause)
}

// callerDone reports whether ctx is done for the caller's reasons: a
// cancel or a deadline of the caller's, not a Store's bound.
func callerDone(ctx context.Context) bool {
	return ctx.Err() != nil && !errors.Is(context.Cause(ctx), errBound)
}

// do runs one operation: each attempt under a deadline of Timeout without
// progress, all of them under the store's bound without progress,
// retrying retryable errors with backoff and jitter. fn calls progress as
// the request moves (a put's body read by the driver); an operation that
// never calls it has plain deadlines of Timeout and Bound.
func (s *Store) do(ctx context.Context, op Op, key string, fn func(ctx context.Context, progress func()) (int64, error)) error {
	if s.closed.Load() {
		return fmt.Errorf("%w: %s", ErrClosed, s.name)
	}
	octx, touchBound, stop := idleDeadline(ctx, s.opts.Bound(), errBound)
	defer stop()
	backoff := s.opts.BaseBackoff
	var err error
	for attempt := 1; ; attempt++ {
		actx, touchAttempt, astop := idleDeadline(octx, s.opts.Timeout, errAttempt)
		start := time.Now()
		var n int64
		n, err = fn(actx, func() { touchAttempt(); touchBound() })
		expired := expiredBy(actx, errAttempt) || expiredBy(actx, errBound)
		astop()
		if err != nil && expired && !callerDone(ctx) && !isAnswer(err) {
			// This store's deadline, not the caller's, ended the attempt.
			err = fmt.Errorf("%w: no answer within %v (attempt %d of %d: %w): %w", ErrRetryable, s.opts.Timeout, attempt, s.opts.MaxAttempts, context.DeadlineExceeded, err)
		}
		s.record(op, attempt, err)
		if s.opts.OnRequest != nil {
			s.opts.OnRequest(Event{Op: op, Key: key, Bytes: n, Duration: time.Since(start), Attempt: attempt, Err: err})
		}
		if err == nil || !errors.Is(err, ErrRetryable) || attempt >= s.opts.MaxAttempts || octx.Err() != nil {
			break
		}
		// Full jitter: a random delay up to the backoff.
		delay := time.NewTimer(time.Duration(rand.Int64N(int64(backoff) + 1)))
		select {
		case <-octx.Done():
		case <-delay.C:
		}
		delay.Stop()
		if octx.Err() != nil {
			break
		}
		backoff = min(backoff*2, s.opts.MaxBackoff)
	}
	if err != nil {
		// A context done after the driver answered does not change the
		// answer: a not-found stays ErrNotFound. Only an error that is
		// not an answer (a timeout, a reset) is blamed on the context.
		switch {
		case isAnswer(err):
		case callerDone(ctx) && !errors.Is(err, ctx.Err()):
			err = fmt.Errorf("%w: %w", ctx.Err(), err)
		case expiredBy(octx, errBound):
			err = fmt.Errorf("%w: gave up after the store's bound of %v: %w", ErrRetryable, s.opts.Bound(), err)
		}
		return fmt.Errorf("objstore: %s %s on %s: %w", op, key, s.name, err)
	}
	return nil
}

// isAnswer reports whether err is the server's answer about the request
// (not found, a lost condition, refused credentials, a bad checksum or
// range, a refused key) rather than a failure to get one.
func isAnswer(err error) bool {
	for _, sentinel := range []error{ErrNotFound, ErrPreconditionFailed, ErrAccessDenied, ErrChecksumMismatch, ErrInvalidRange, ErrInvalidKey} {
		if errors.Is(err, sentinel) {
			return true
		}
	}
	return false
}

func (s *Store) record(op Op, attempt int, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.requests[op]++
	if attempt > 1 {
		s.retries[op]++
	}
	if err != nil {
		s.errs[op]++
	}
}

// CheckBucket checks, within the store's bound, that the bucket exists
// and the credentials reach it: ErrBucketNotFound, ErrAccessDenied, or
// an error wrapping ErrRetryable when the server did not answer in time.
// Drivers that are not a BucketChecker pass. The check counts as a head.
func (s *Store) CheckBucket(ctx context.Context) error {
	bc, ok := s.d.(BucketChecker)
	if !ok {
		return nil
	}
	return s.do(ctx, OpHead, "(bucket)", func(ctx context.Context, _ func()) (int64, error) {
		return 0, bc.CheckBucket(ctx)
	})
}

// Put stores size bytes of body under key; see Driver.Put. body is rewound
// before every attempt.
func (s *Store) Put(ctx context.Context, key string, body io.ReadSeeker, size int64, opts PutOptions) (ObjectInfo, error) {
	if err := ValidateKey(key); err != nil {
		return ObjectInfo{}, err
	}
	if size < 0 {
		return ObjectInfo{}, fmt.Errorf("objstore: put %s: negative size %d", key, size)
	}
	var info ObjectInfo
	err := s.do(ctx, OpPut, key, func(ctx context.Context, progress func()) (int64, error) {
		if _, err := body.Seek(0, io.SeekStart); err != nil {
			return 0, fmt.Errorf("rewind body: %w", err)
		}
		var err error
		info, err = s.d.Put(ctx, key, progressBody(body, progress), size, opts)
		if err == nil {
			s.bytesOut.Add(size)
			return size, nil
		}
		return 0, err
	})
	return info, err
}

// Get returns length bytes of key from offset (length < 0: to the end).
// A body that fails mid-read returns an error wrapping ErrRetryable; the
// caller may call Get again for the rest.
func (s *Store) Get(ctx context.Context, key string, offset, length int64) (io.ReadCloser, ObjectInfo, error) {
	if err := ValidateKey(key); err != nil {
		return nil, ObjectInfo{}, err
	}
	if offset < 0 {
		return nil, ObjectInfo{}, fmt.Errorf("%w: get %s from offset %d", ErrInvalidRange, key, offset)
	}
	var rc io.ReadCloser
	var info ObjectInfo
	err := s.do(ctx, OpGet, key, func(actx context.Context, _ func()) (int64, error) {
		// The body outlives this attempt's deadline: use the caller's
		// context for the request, and the timeout for getting headers.
		r, i, err := getWithin(ctx, actx, s.d, key, offset, length, s.opts.Timeout)
		rc, info = r, i
		return 0, err
	})
	if err != nil {
		return nil, ObjectInfo{}, err
	}
	want := info.Size - offset
	if length >= 0 {
		want = min(want, length)
	}
	return &countingReader{rc: rc, n: &s.bytesIn, left: want, what: fmt.Sprintf("get %s on %s", key, s.name)}, info, nil
}

// getWithin starts the get under ctx (the body stays readable after the
// attempt ends) but gives up when attempt expires before it answers. Each
// Read of the body must make progress within idle.
func getWithin(ctx, attempt context.Context, d Driver, key string, offset, length int64, idle time.Duration) (io.ReadCloser, ObjectInfo, error) {
	type result struct {
		rc   io.ReadCloser
		info ObjectInfo
		err  error
	}
	gctx, cancel := context.WithCancel(ctx)
	done := make(chan result, 1)
	go func() {
		rc, info, err := d.Get(gctx, key, offset, length)
		done <- result{rc, info, err}
	}()
	select {
	case r := <-done:
		if r.err != nil {
			cancel()
			return nil, r.info, r.err
		}
		return newGuardedBody(r.rc, cancel, idle), r.info, nil
	case <-attempt.Done():
		cancel()
		go func() {
			if r := <-done; r.rc != nil {
				r.rc.Close()
			}
		}()
		return nil, ObjectInfo{}, attempt.Err()
	}
}

// ReadAll gets length bytes of key from offset (length < 0: to the end)
// into memory, resuming a body that breaks mid-read from where it broke.
// The whole call, resumptions included, is held to the store's bound; a
// resumption that finds another version of the object (a new ETag) starts
// over, so the bytes returned are always of one version.
func (s *Store) ReadAll(ctx context.Context, key string, offset, length int64) ([]byte, error) {
	ctx, cancel := s.bounded(ctx)
	defer cancel()
	var out []byte
	etag := ""
	for attempt := 1; ; attempt++ {
		want := int64(-1)
		if length >= 0 {
			want = length - int64(len(out))
			if want == 0 {
				return out, nil
			}
		}
		rc, info, err := s.Get(ctx, key, offset+int64(len(out)), want)
		if err != nil {
			if len(out) > 0 && length < 0 && errors.Is(err, ErrInvalidRange) {
				return out, nil // the break fell exactly at the end
			}
			return nil, err
		}
		if etag != "" && info.ETag != etag {
			// The object changed under a resumed read: start over.
			rc.Close()
			out, etag = out[:0], ""
			if attempt >= s.opts.MaxAttempts {
				return nil, fmt.Errorf("objstore: get %s on %s: %w: the object kept changing while it was read", key, s.name, ErrRetryable)
			}
			continue
		}
		etag = info.ETag
		// The body's length is known: read it straight into place.
		n := rc.(*countingReader).left
		if out == nil {
			out = make([]byte, 0, n)
		} else if cap(out)-len(out) < int(n) {
			out = append(make([]byte, 0, len(out)+int(n)), out...)
		}
		got, rerr := io.ReadFull(rc, out[len(out):len(out)+int(n)])
		rc.Close()
		out = out[:len(out)+got]
		if rerr == io.ErrUnexpectedEOF || rerr == io.EOF {
			rerr = nil
		}
		switch {
		case rerr == nil && (length < 0 || int64(len(out)) >= length):
			return out, nil
		case rerr == nil:
			return nil, fmt.Errorf("objstore: get %s on %s: %w: %d bytes from %d, the object ends first", key, s.name, ErrInvalidRange, length, offset)
		case !errors.Is(rerr, ErrRetryable) || attempt >= s.opts.MaxAttempts || ctx.Err() != nil:
			return nil, fmt.Errorf("objstore: %w", rerr) // rerr names the key and store
		}
	}
}

// Head returns key's info; ErrNotFound when it does not exist.
func (s *Store) Head(ctx context.Context, key string) (ObjectInfo, error) {
	if err := ValidateKey(key); err != nil {
		return ObjectInfo{}, err
	}
	var info ObjectInfo
	err := s.do(ctx, OpHead, key, func(ctx context.Context, _ func()) (int64, error) {
		var err error
		info, err = s.d.Head(ctx, key)
		return 0, err
	})
	return info, err
}

// List calls fn with every object under prefix in ascending key order,
// page by page, until fn returns false.
func (s *Store) List(ctx context.Context, prefix string, fn func(ObjectInfo) bool) error {
	return s.ListAfter(ctx, prefix, "", fn)
}

// ListAfter is List of the objects under prefix whose keys sort after
// startAfter ("" for all of them): a listing that resumes where an
// earlier one ended costs only the pages past it.
func (s *Store) ListAfter(ctx context.Context, prefix, startAfter string, fn func(ObjectInfo) bool) error {
	if err := validatePrefix(prefix); err != nil {
		return err
	}
	after := startAfter
	for {
		var page []ObjectInfo
		var more bool
		err := s.do(ctx, OpList, prefix, func(ctx context.Context, _ func()) (int64, error) {
			var err error
			page, more, err = s.d.List(ctx, prefix, after, 1000)
			return 0, err
		})
		if err != nil {
			return err
		}
		for _, o := range page {
			if o.Key <= after && after != "" {
				return fmt.Errorf("objstore: list %s on %s: keys out of order (%q after %q)", prefix, s.name, o.Key, after)
			}
			after = o.Key
			if !fn(o) {
				return nil
			}
		}
		if !more || len(page) == 0 {
			return nil
		}
	}
}

// Delete removes keys (missing ones are fine), in batches of 1000.
func (s *Store) Delete(ctx context.Context, keys ...string) error {
	for _, k := range keys {
		if err := ValidateKey(k); err != nil {
			return err
		}
	}
	for len(keys) > 0 {
		batch := keys[:min(len(keys), 1000)]
		keys = keys[len(batch):]
		if err := s.do(ctx, OpDelete, batch[0], func(ctx context.Context, _ func()) (int64, error) {
			return 0, s.d.Delete(ctx, batch)
		}); err != nil {
			return err
		}
	}
	return nil
}

// AbortStaleUploads aborts multipart uploads under prefix older than age.
func (s *Store) AbortStaleUploads(ctx context.Context, prefix string, age time.Duration) (int, error) {
	if err := validatePrefix(prefix); err != nil {
		return 0, err
	}
	var n int
	err := s.do(ctx, OpAbort, prefix, func(ctx context.Context, _ func()) (int64, error) {
		var err error
		n, err = s.d.AbortStaleUploads(ctx, prefix, time.Now().Add(-age))
		return 0, err
	})
	return n, err
}

// Close closes the driver; later calls fail with ErrClosed.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	return s.d.Close()
}
