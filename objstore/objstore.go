// Package objstore is tierlog's seam over object storage: S3, MinIO, a
// directory, or memory.
//
// A Driver translates five operations to one provider and maps that
// provider's errors to this package's sentinels in exactly one function.
// Store wraps any Driver with what every provider needs once: key
// validation, closed checks, a deadline on every request, retries with
// backoff and jitter for retryable errors, and metrics hooks.
//
// # The bound: no request waits forever
//
// Every request a Store makes carries a deadline derived from its
// Options. One attempt is bounded by Timeout; a retryable failure is
// retried up to MaxAttempts in all, after a random delay of up to
// min(BaseBackoff × 2^(i-1), MaxBackoff) before retry i. So a call that
// makes one request (Put, Head, Get up to its response headers, one page
// of List, one batch of up to 1000 keys of Delete, AbortStaleUploads,
// CheckBucket) returns within
//
//	Bound = MaxAttempts × Timeout + Σ_{i=1}^{MaxAttempts-1} min(BaseBackoff × 2^(i-1), MaxBackoff)
//
// (Options.Bound), whatever the server does: answers, resets, trickles or
// accepts and never answers. A Put's deadlines count from its body's last
// progress: each time the driver reads some of the body, the attempt's
// Timeout and the Bound start again, so a large object on a slow link is
// not cut short while it moves, and a put that moves nothing fails within
// the Bound like any other request. With the defaults (30 s, 5 attempts, 100 ms
// doubling up to 5 s) that is 5 × 30 s + 1.5 s = 151.5 s. ReadAll, its
// resumptions included, is held to the same bound as a whole. Each Read of
// a Get's body returns within Timeout (a body that stops sending fails
// with ErrRetryable); the body as a whole has no deadline, as a reader
// may hold it open. A List or Delete of many pages makes one request per
// page, each within the bound. Errors that the bound cuts short wrap
// ErrRetryable and context.DeadlineExceeded, and name the store (the
// storeurl name holds the endpoint). storeurl.Open checks the bucket
// within the same bound.
//
// Keys are slash-separated paths. A key is never the "directory" of another
// key (a/b and a/b/c cannot both exist on a filesystem-backed server), each
// path component is under 255 bytes, and "." and ".." components are
// refused.
package objstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"
)

// Sentinel errors. Every error from a Store wraps one of them, with the key
// (or prefix) that failed.
var (
	// ErrNotFound: the object (or, for a get, the bucket) does not exist.
	ErrNotFound = errors.New("objstore: not found")
	// ErrBucketNotFound: the bucket does not exist. Also matches
	// ErrNotFound.
	ErrBucketNotFound = fmt.Errorf("%w: bucket", ErrNotFound)
	// ErrPreconditionFailed: a conditional put lost (create-only on an
	// existing key, or If-Match on a changed ETag).
	ErrPreconditionFailed = errors.New("objstore: precondition failed")
	// ErrAccessDenied: credentials are missing, wrong or not allowed.
	ErrAccessDenied = errors.New("objstore: access denied")
	// ErrRetryable: throttling, a 5xx, a reset connection: the same
	// request may succeed later. Store retries these before returning.
	ErrRetryable = errors.New("objstore: retryable error")
	// ErrChecksumMismatch: the bytes did not match the CRC-32C sent.
	ErrChecksumMismatch = errors.New("objstore: checksum mismatch")
	// ErrInvalidKey: a key this seam refuses (empty, too long, "..",
	// a component of 255 bytes or more).
	ErrInvalidKey = errors.New("objstore: invalid key")
	// ErrInvalidRange: a ranged get starting past the end of the object.
	ErrInvalidRange = errors.New("objstore: invalid range")
	// ErrClosed: the store was used after Close.
	ErrClosed = errors.New("objstore: closed")
	// ErrInvalidURL: a store URL that does not parse or names an unknown
	// scheme or option.
	ErrInvalidURL = errors.New("objstore: invalid store URL")
	// ErrCorrupt: the object's bytes fail a check a layer over the
	// driver makes (a sealed object's authentication tag, its framing or
	// its size): the object is not what was written under its key.
	ErrCorrupt = errors.New("objstore: corrupt object")
)

// ObjectInfo describes one object.
type ObjectInfo struct {
	Key          string
	Size         int64
	ETag         string
	LastModified time.Time
}

// PutOptions make a put conditional and checked.
type PutOptions struct {
	// IfNoneMatch makes the put create-only (If-None-Match: *): it fails
	// with ErrPreconditionFailed when the key exists.
	IfNoneMatch bool
	// IfMatch, when not empty, makes the put a compare-and-swap: it fails
	// with ErrPreconditionFailed unless the object's ETag is IfMatch.
	IfMatch string
	// CRC32C, when HasCRC32C, is the CRC-32C of the body; the store
	// rejects the put with ErrChecksumMismatch when the bytes differ.
	CRC32C    uint32
	HasCRC32C bool
}

// Driver is one provider. Implementations MUST be safe for concurrent use,
// MUST map their errors to the sentinels above (in one function), MUST
// return promptly once ctx is done (within milliseconds, whatever the
// server does: Store's bound rests on it), and need not validate keys or
// check for Close: Store does both.
type Driver interface {
	// Put stores size bytes of body under key. body is seekable so the
	// driver may compute checksums and retry. On return without error
	// the object is durable and visible to Get, Head and List.
	Put(ctx context.Context, key string, body io.ReadSeeker, size int64, opts PutOptions) (ObjectInfo, error)
	// Get returns length bytes from offset (length < 0: to the end). An
	// offset past the end is ErrInvalidRange; a missing key ErrNotFound.
	// The caller closes the reader.
	Get(ctx context.Context, key string, offset, length int64) (io.ReadCloser, ObjectInfo, error)
	// Head returns the object's info, or ErrNotFound.
	Head(ctx context.Context, key string) (ObjectInfo, error)
	// List returns up to limit objects under prefix whose keys sort after
	// startAfter, in ascending key order, and whether more follow.
	List(ctx context.Context, prefix, startAfter string, limit int) (objs []ObjectInfo, more bool, err error)
	// Delete removes the keys; keys that do not exist are not an error.
	Delete(ctx context.Context, keys []string) error
	// AbortStaleUploads aborts multipart uploads under prefix started
	// before olderThan and returns how many it aborted. Drivers without
	// multipart uploads return 0.
	AbortStaleUploads(ctx context.Context, prefix string, olderThan time.Time) (int, error)
	// Close releases the driver's resources.
	Close() error
}

// BucketChecker is a Driver that can check, in one request, that its
// bucket exists and that the credentials reach it. A missing bucket is
// ErrBucketNotFound, refused credentials ErrAccessDenied.
// Store.CheckBucket runs it within the store's bound.
type BucketChecker interface {
	CheckBucket(ctx context.Context) error
}
