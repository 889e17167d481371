// Package minio is the objstore driver on minio-go/v7, for MinIO and other
// S3-compatible servers. minio-go's own retries are off (objstore.Store is
// the one retry layer) and trailing-header checksums stay off (versitygw
// rejects them).
package minio

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"syscall"
	"time"

	mc "github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/minio/minio-go/v7/pkg/encrypt"

	"github.com/tierlog/tierlog/objstore"
)

// Config says where the bucket is.
type Config struct {
	Bucket string
	Prefix string
	// Endpoint is http(s)://host:port.
	Endpoint string
	Region   string
	// AccessKey and SecretKey; when empty, the AWS and MinIO environment
	// variables and files are used.
	AccessKey, SecretKey string
	InsecureSkipVerify   bool
	// SSE "AES256" asks for SSE-S3.
	SSE string
	// PartSize for multipart uploads (default 16 MiB), Concurrency parts
	// at once (default 4).
	PartSize    uint64
	Concurrency uint
}

// Driver is a bucket (and prefix) through minio-go.
type Driver struct {
	c      *mc.Client
	core   mc.Core
	cfg    Config
	prefix string
}

// Open is New and CheckBucket, under ctx alone: give ctx a deadline, or
// use New and objstore.Store.CheckBucket (as storeurl.Open does).
func Open(ctx context.Context, c Config) (*Driver, error) {
	d, err := New(c)
	if err != nil {
		return nil, err
	}
	if err := d.CheckBucket(ctx); err != nil {
		return nil, err
	}
	return d, nil
}

// New builds the driver without touching the network.
func New(c Config) (*Driver, error) {
	client, err := newClient(c)
	if err != nil {
		return nil, err
	}
	d := &Driver{c: client, core: mc.Core{Client: client}, cfg: c, prefix: strings.Trim(c.Prefix, "/")}
	if d.prefix != "" {
		d.prefix += "/"
	}
	if c.PartSize == 0 {
		d.cfg.PartSize = 16 << 20
	}
	if c.Concurrency == 0 {
		d.cfg.Concurrency = 4
	}
	return d, nil
}

// CheckBucket implements objstore.BucketChecker: a missing bucket is
// objstore.ErrBucketNotFound, wrong credentials objstore.ErrAccessDenied.
func (d *Driver) CheckBucket(ctx context.Context) error {
	ok, err := d.c.BucketExists(ctx, d.cfg.Bucket)
	if err != nil {
		return fmt.Errorf("objstore/minio: bucket %s: %w", d.cfg.Bucket, mapErr(err))
	}
	if !ok {
		return fmt.Errorf("%w: %s", objstore.ErrBucketNotFound, d.cfg.Bucket)
	}
	return nil
}

func newClient(c Config) (*mc.Client, error) {
	if c.Bucket == "" {
		return nil, fmt.Errorf("%w: no bucket named", objstore.ErrInvalidURL)
	}
	// The endpoint is never quoted: it may hold user info.
	u, err := url.Parse(c.Endpoint)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, fmt.Errorf("%w: the endpoint is not http://host:port or https://host:port", objstore.ErrInvalidURL)
	}
	if u.User != nil {
		return nil, fmt.Errorf("%w: endpoint %s://%s: credentials go in AccessKey and SecretKey, not the endpoint", objstore.ErrInvalidURL, u.Scheme, u.Host)
	}
	creds := credentials.NewStaticV4(c.AccessKey, c.SecretKey, "")
	if c.AccessKey == "" {
		creds = credentials.NewChainCredentials([]credentials.Provider{&credentials.EnvAWS{}, &credentials.EnvMinio{}, &credentials.FileAWSCredentials{}})
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 64
	tr.DialContext = (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	if c.InsecureSkipVerify {
		tr.TLSClientConfig = &tls.Config{InsecureSkipVerify: true} //nolint:gosec // asked for, for test servers
	}
	client, err := mc.New(u.Host, &mc.Options{Creds: creds, Secure: u.Scheme == "https", Region: c.Region,
		Transport: tr, BucketLookup: mc.BucketLookupPath, MaxRetries: 1})
	if err != nil {
		return nil, fmt.Errorf("objstore/minio: %w", err)
	}
	return client, nil
}

// CreateBucket creates c.Bucket; one we already own is not an error.
func CreateBucket(ctx context.Context, c Config) error {
	client, err := newClient(c)
	if err != nil {
		return err
	}
	if err := client.MakeBucket(ctx, c.Bucket, mc.MakeBucketOptions{Region: c.Region}); err != nil {
		if r := mc.ToErrorResponse(err); r.Code == "BucketAlreadyOwnedByYou" {
			return nil
		}
		return fmt.Errorf("objstore/minio: create bucket %s: %w", c.Bucket, mapErr(err))
	}
	return nil
}

// mapErr is the one place minio-go's errors become the seam's sentinels.
func mapErr(err error) error {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	r := mc.ToErrorResponse(err)
	switch r.Code {
	case "NoSuchKey", "NotFound":
		return fmt.Errorf("%w: %w", objstore.ErrNotFound, err)
	case "NoSuchBucket":
		return fmt.Errorf("%w: %w", objstore.ErrBucketNotFound, err)
	case "PreconditionFailed", "ConditionalRequestConflict":
		return fmt.Errorf("%w: %w", objstore.ErrPreconditionFailed, err)
	case "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken":
		return fmt.Errorf("%w: %w", objstore.ErrAccessDenied, err)
	case "BadDigest", "InvalidDigest", "XAmzContentChecksumMismatch", "XAmzContentSHA256Mismatch":
		return fmt.Errorf("%w: %w", objstore.ErrChecksumMismatch, err)
	case "InvalidRange":
		return fmt.Errorf("%w: %w", objstore.ErrInvalidRange, err)
	case "SlowDown", "RequestTimeout", "InternalError", "ServiceUnavailable", "XMinioServerNotInitialized",
		"SlowDownRead", "SlowDownWrite": // MinIO short of read or write quorum
		return fmt.Errorf("%w: %w", objstore.ErrRetryable, err)
	}
	switch code := r.StatusCode; {
	case code == http.StatusNotFound:
		return fmt.Errorf("%w: %w", objstore.ErrNotFound, err)
	case code == http.StatusPreconditionFailed:
		return fmt.Errorf("%w: %w", objstore.ErrPreconditionFailed, err)
	case code == http.StatusForbidden:
		return fmt.Errorf("%w: %w", objstore.ErrAccessDenied, err)
	case code == http.StatusRequestedRangeNotSatisfiable:
		return fmt.Errorf("%w: %w", objstore.ErrInvalidRange, err)
	case code == http.StatusTooManyRequests || code >= 500:
		return fmt.Errorf("%w: %w", objstore.ErrRetryable, err)
	case code == 0:
		var ne net.Error
		if errors.As(err, &ne) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) ||
			errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) || strings.Contains(err.Error(), "connection reset") {
			return fmt.Errorf("%w: %w", objstore.ErrRetryable, err)
		}
	}
	return err
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Put implements objstore.Driver.
func (d *Driver) Put(ctx context.Context, key string, body io.ReadSeeker, size int64, opts objstore.PutOptions) (objstore.ObjectInfo, error) {
	if opts.HasCRC32C {
		h := crc32.New(castagnoli)
		if _, err := io.Copy(h, io.LimitReader(body, size)); err != nil {
			return objstore.ObjectInfo{}, fmt.Errorf("reading the body: %w", err)
		}
		if h.Sum32() != opts.CRC32C {
			return objstore.ObjectInfo{}, objstore.ErrChecksumMismatch
		}
		if _, err := body.Seek(0, io.SeekStart); err != nil {
			return objstore.ObjectInfo{}, err
		}
	}
	po := mc.PutObjectOptions{PartSize: d.cfg.PartSize, NumThreads: d.cfg.Concurrency, AutoChecksum: mc.ChecksumCRC32C}
	if opts.IfNoneMatch {
		po.SetMatchETagExcept("*")
	}
	if opts.IfMatch != "" {
		po.SetMatchETag(strings.Trim(opts.IfMatch, `"`))
	}
	if d.cfg.SSE == "AES256" {
		po.ServerSideEncryption = encrypt.NewSSE()
	}
	var info mc.UploadInfo
	var err error
	if (opts.IfNoneMatch || opts.IfMatch != "") && uint64(size) > d.cfg.PartSize {
		info, err = d.putConditionalMultipart(ctx, d.prefix+key, body, size, opts, po.ServerSideEncryption)
	} else {
		info, err = d.c.PutObject(ctx, d.cfg.Bucket, d.prefix+key, body, size, po)
	}
	if err != nil {
		// S3 answers If-Match on a missing key with NoSuchKey: for the
		// seam a lost condition (wrapping minio-go's error, not the
		// mapped one, so it is not also ErrNotFound).
		mapped := mapErr(err)
		if opts.IfMatch != "" && errors.Is(mapped, objstore.ErrNotFound) && !errors.Is(mapped, objstore.ErrBucketNotFound) {
			return objstore.ObjectInfo{}, fmt.Errorf("%w: If-Match on a missing key: %w", objstore.ErrPreconditionFailed, err)
		}
		return objstore.ObjectInfo{}, mapped
	}
	return objstore.ObjectInfo{Key: key, Size: size, ETag: quote(info.ETag), LastModified: time.Now()}, nil
}

// putConditionalMultipart uploads a conditional put above the part size
// in parts, Concurrency at a time, and completes it with the conditions.
//
// minio-go's PutObject sends If-None-Match and If-Match on
// CreateMultipartUpload only: a MinIO extension, checked there by MinIO.
// Amazon S3 and versitygw check them on CompleteMultipartUpload (versitygw
// v1.8.0 ignores them at create: a create-only put over an existing key
// succeeded). So the conditions go on both: MinIO fails early, every
// server fails at completion.
func (d *Driver) putConditionalMultipart(ctx context.Context, full string, body io.ReadSeeker, size int64, opts objstore.PutOptions, sse encrypt.ServerSide) (mc.UploadInfo, error) {
	var conditions mc.PutObjectOptions
	if opts.IfNoneMatch {
		conditions.SetMatchETagExcept("*")
	}
	if opts.IfMatch != "" {
		conditions.SetMatchETag(strings.Trim(opts.IfMatch, `"`))
	}
	create := conditions
	create.ServerSideEncryption = sse
	uploadID, err := d.core.NewMultipartUpload(ctx, d.cfg.Bucket, full, create)
	if err != nil {
		return mc.UploadInfo{}, err
	}
	abort := func() { // in the background: the put returns within its deadline
		go func() {
			actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			d.core.AbortMultipartUpload(actx, d.cfg.Bucket, full, uploadID)
		}()
	}
	ra, isReaderAt := body.(io.ReaderAt)
	partSize := int64(d.cfg.PartSize)
	nparts := int((size + partSize - 1) / partSize)
	parts := make([]mc.CompletePart, nparts)
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
	)
	fail := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		if firstErr == nil {
			firstErr = err
		}
		cancel()
	}
	sem := make(chan struct{}, d.cfg.Concurrency)
	for i := 0; i < nparts && pctx.Err() == nil; i++ {
		off := int64(i) * partSize
		n := min(partSize, size-off)
		var part io.Reader
		if isReaderAt {
			part = io.NewSectionReader(ra, off, n)
		} else {
			buf := make([]byte, n)
			if _, err := io.ReadFull(body, buf); err != nil {
				fail(fmt.Errorf("reading part %d of the body: %w", i+1, err))
				break
			}
			part = bytes.NewReader(buf)
		}
		select {
		case sem <- struct{}{}:
		case <-pctx.Done():
			continue
		}
		wg.Add(1)
		go func(i int, part io.Reader, n int64) {
			defer wg.Done()
			defer func() { <-sem }()
			p, err := d.core.PutObjectPart(pctx, d.cfg.Bucket, full, uploadID, i+1, part, n, mc.PutObjectPartOptions{})
			if err != nil {
				fail(fmt.Errorf("part %d: %w", i+1, err))
				return
			}
			parts[i] = mc.CompletePart{PartNumber: i + 1, ETag: p.ETag}
		}(i, part, n)
	}
	wg.Wait()
	if firstErr == nil && ctx.Err() != nil {
		firstErr = ctx.Err()
	}
	if firstErr != nil {
		abort()
		return mc.UploadInfo{}, firstErr
	}
	info, err := d.core.CompleteMultipartUpload(ctx, d.cfg.Bucket, full, uploadID, parts, conditions)
	if err != nil {
		abort()
		return mc.UploadInfo{}, err
	}
	return info, nil
}

// quote gives ETags the quotes S3 returns them with, as the other drivers.
func quote(etag string) string {
	if etag == "" || strings.HasPrefix(etag, `"`) {
		return etag
	}
	return `"` + etag + `"`
}

// Get implements objstore.Driver.
func (d *Driver) Get(ctx context.Context, key string, offset, length int64) (io.ReadCloser, objstore.ObjectInfo, error) {
	if length == 0 {
		info, err := d.Head(ctx, key)
		if err != nil {
			return nil, info, err
		}
		if offset > info.Size || (offset == info.Size && info.Size > 0) {
			return nil, info, fmt.Errorf("%w: offset %d of a %d-byte object", objstore.ErrInvalidRange, offset, info.Size)
		}
		return io.NopCloser(strings.NewReader("")), info, nil
	}
	var getOpts mc.GetObjectOptions
	if offset > 0 || length > 0 {
		end := int64(0)
		if length > 0 {
			end = offset + length - 1
		}
		if err := getOpts.SetRange(offset, end); err != nil {
			return nil, objstore.ObjectInfo{}, fmt.Errorf("%w: %w", objstore.ErrInvalidRange, err)
		}
	}
	// Core.GetObject gives the response headers: a ranged get's total size
	// is only in Content-Range.
	body, st, hdr, err := d.core.GetObject(ctx, d.cfg.Bucket, d.prefix+key, getOpts)
	if err != nil {
		return nil, objstore.ObjectInfo{}, mapErr(err)
	}
	size := st.Size
	if cr := hdr.Get("Content-Range"); cr != "" {
		if i := strings.LastIndexByte(cr, '/'); i >= 0 {
			fmt.Sscan(cr[i+1:], &size)
		}
	}
	return body, objstore.ObjectInfo{Key: key, Size: size, ETag: quote(st.ETag), LastModified: st.LastModified}, nil
}

// Head implements objstore.Driver.
func (d *Driver) Head(ctx context.Context, key string) (objstore.ObjectInfo, error) {
	st, err := d.c.StatObject(ctx, d.cfg.Bucket, d.prefix+key, mc.StatObjectOptions{})
	if err != nil {
		return objstore.ObjectInfo{}, mapErr(err)
	}
	return objstore.ObjectInfo{Key: key, Size: st.Size, ETag: quote(st.ETag), LastModified: st.LastModified}, nil
}

// List implements objstore.Driver.
func (d *Driver) List(ctx context.Context, prefix, startAfter string, limit int) ([]objstore.ObjectInfo, bool, error) {
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	lo := mc.ListObjectsOptions{Prefix: d.prefix + prefix, Recursive: true, MaxKeys: limit}
	if startAfter != "" {
		lo.StartAfter = d.prefix + startAfter
	}
	var out []objstore.ObjectInfo
	for o := range d.c.ListObjects(lctx, d.cfg.Bucket, lo) {
		if o.Err != nil {
			return nil, false, mapErr(o.Err)
		}
		if len(out) == limit {
			return out, true, nil
		}
		out = append(out, objstore.ObjectInfo{Key: strings.TrimPrefix(o.Key, d.prefix), Size: o.Size, ETag: quote(o.ETag), LastModified: o.LastModified})
	}
	if err := ctx.Err(); err != nil {
		return nil, false, err
	}
	return out, false, nil
}

// Delete implements objstore.Driver with a batch delete.
func (d *Driver) Delete(ctx context.Context, keys []string) error {
	ch := make(chan mc.ObjectInfo, len(keys))
	for _, k := range keys {
		ch <- mc.ObjectInfo{Key: d.prefix + k}
	}
	close(ch)
	for e := range d.c.RemoveObjects(ctx, d.cfg.Bucket, ch, mc.RemoveObjectsOptions{}) {
		if e.Err != nil {
			if err := mapErr(e.Err); !errors.Is(err, objstore.ErrNotFound) || errors.Is(err, objstore.ErrBucketNotFound) {
				return fmt.Errorf("delete %s: %w", e.ObjectName, err)
			}
		}
	}
	return ctx.Err()
}

// AbortStaleUploads implements objstore.Driver.
func (d *Driver) AbortStaleUploads(ctx context.Context, prefix string, olderThan time.Time) (int, error) {
	n := 0
	for u := range d.c.ListIncompleteUploads(ctx, d.cfg.Bucket, d.prefix+prefix, true) {
		if u.Err != nil {
			return n, mapErr(u.Err)
		}
		if !u.Initiated.Before(olderThan) {
			continue
		}
		if err := d.core.AbortMultipartUpload(ctx, d.cfg.Bucket, u.Key, u.UploadID); err != nil {
			if err := mapErr(err); !errors.Is(err, objstore.ErrNotFound) {
				return n, err
			}
			continue
		}
		n++
	}
	return n, nil
}

// Close implements objstore.Driver.
func (d *Driver) Close() error { return nil }
