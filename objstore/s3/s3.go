// Package s3 is the objstore driver for Amazon S3 and S3-compatible servers,
// on aws-sdk-go-v2.
//
// Credentials and region come from the standard AWS chain (environment,
// shared config and credentials files, profiles, IMDS) unless Config gives
// static keys. Endpoint and PathStyle point it at S3-compatible servers.
// The SDK's own retries are off: objstore.Store is the one retry layer.
package s3

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"net"
	"net/http"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/tierlog/tierlog/objstore"
)

// Config says where the bucket is.
type Config struct {
	Bucket string
	// Prefix is prepended to every key ("" for none; no trailing slash).
	Prefix string
	// Endpoint, for S3-compatible servers (http://127.0.0.1:9000).
	Endpoint string
	Region   string
	// PathStyle addresses buckets as <endpoint>/<bucket> (most
	// S3-compatible servers need it).
	PathStyle bool
	// AccessKey and SecretKey, when set, replace the AWS credential chain.
	AccessKey, SecretKey string
	// Profile selects a shared-config profile.
	Profile string
	// InsecureSkipVerify disables TLS certificate checks (self-signed test
	// servers only).
	InsecureSkipVerify bool
	// SSE is the server-side encryption ("AES256" or "aws:kms"); KMSKeyID
	// names the key for aws:kms.
	SSE, KMSKeyID string
	// PartSize is the multipart part size (default 16 MiB); objects larger
	// than one part upload in parts, Concurrency (default 4) at a time.
	PartSize    int64
	Concurrency int
}

// Driver is an S3 bucket (and prefix).
type Driver struct {
	c      *s3.Client
	cfg    Config
	prefix string
}

// New builds the driver without touching the network (the AWS
// configuration is read from the environment and files). Check the
// bucket with CheckBucket, or with objstore.Store.CheckBucket to have it
// held to the store's bound.
func New(ctx context.Context, c Config) (*Driver, error) {
	if c.Bucket == "" {
		return nil, fmt.Errorf("%w: no bucket named", objstore.ErrInvalidURL)
	}
	if c.PartSize <= 0 {
		c.PartSize = 16 << 20
	}
	if c.PartSize < 5<<20 {
		return nil, fmt.Errorf("%w: part size %d is below S3's 5 MiB minimum", objstore.ErrInvalidURL, c.PartSize)
	}
	if c.Concurrency <= 0 {
		c.Concurrency = 4
	}
	var loads []func(*config.LoadOptions) error
	if c.Region != "" {
		loads = append(loads, config.WithRegion(c.Region))
	}
	if c.Profile != "" {
		loads = append(loads, config.WithSharedConfigProfile(c.Profile))
	}
	if c.AccessKey != "" {
		loads = append(loads, config.WithCredentialsProvider(credentials.NewStaticCredentialsProvider(c.AccessKey, c.SecretKey, "")))
	}
	awsCfg, err := config.LoadDefaultConfig(ctx, loads...)
	if err != nil {
		return nil, fmt.Errorf("objstore/s3: load AWS config: %w", err)
	}
	if awsCfg.Region == "" {
		awsCfg.Region = "us-east-1"
	}
	// The HTTP client goes on s3.Options, not config.WithHTTPClient: with
	// AWS_CA_BUNDLE set, LoadDefaultConfig refuses a custom client.
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 64
	tr.DialContext = (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	if c.InsecureSkipVerify {
		tr.TLSClientConfig = &tls.Config{InsecureSkipVerify: true} //nolint:gosec // asked for, for test servers
	}
	client := s3.NewFromConfig(awsCfg, func(o *s3.Options) {
		if c.Endpoint != "" {
			o.BaseEndpoint = aws.String(c.Endpoint)
		}
		o.UsePathStyle = c.PathStyle
		o.HTTPClient = &http.Client{Transport: tr}
		o.Retryer = aws.NopRetryer{}
		o.RequestChecksumCalculation = aws.RequestChecksumCalculationWhenRequired
		o.ResponseChecksumValidation = aws.ResponseChecksumValidationWhenRequired
	})
	d := &Driver{c: client, cfg: c, prefix: strings.Trim(c.Prefix, "/")}
	if d.prefix != "" {
		d.prefix += "/"
	}
	return d, nil
}

// Open is New and CheckBucket, under ctx alone: give ctx a deadline, or
// use New and objstore.Store.CheckBucket (as storeurl.Open does).
func Open(ctx context.Context, c Config) (*Driver, error) {
	d, err := New(ctx, c)
	if err != nil {
		return nil, err
	}
	if err := d.CheckBucket(ctx); err != nil {
		return nil, err
	}
	return d, nil
}

// CheckBucket implements objstore.BucketChecker with HeadBucket: a missing
// bucket is objstore.ErrBucketNotFound, wrong credentials
// objstore.ErrAccessDenied.
func (d *Driver) CheckBucket(ctx context.Context) error {
	if _, err := d.c.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: aws.String(d.cfg.Bucket)}); err != nil {
		err = mapErr(err)
		if errors.Is(err, objstore.ErrNotFound) {
			return fmt.Errorf("%w: %s: %w", objstore.ErrBucketNotFound, d.cfg.Bucket, err)
		}
		return fmt.Errorf("objstore/s3: bucket %s: %w", d.cfg.Bucket, err)
	}
	return nil
}

// CreateBucket creates c.Bucket (for tests and first-time setup); a bucket
// that already exists and is ours is not an error.
func CreateBucket(ctx context.Context, c Config) error {
	d, err := New(ctx, c)
	if err != nil {
		return err
	}
	_, err = d.c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(c.Bucket)})
	var owned *types.BucketAlreadyOwnedByYou
	if err != nil && !errors.As(err, &owned) {
		return fmt.Errorf("objstore/s3: create bucket %s: %w", c.Bucket, mapErr(err))
	}
	return nil
}

// Client returns the SDK client (for tests and tools).
func (d *Driver) Client() *s3.Client { return d.c }

// mapErr is the one place S3 errors become the seam's sentinels.
func mapErr(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	var api smithy.APIError
	if errors.As(err, &api) {
		switch api.ErrorCode() {
		case "NoSuchKey", "NotFound":
			return fmt.Errorf("%w: %w", objstore.ErrNotFound, err)
		case "NoSuchBucket":
			return fmt.Errorf("%w: %w", objstore.ErrBucketNotFound, err)
		case "PreconditionFailed", "ConditionalRequestConflict":
			return fmt.Errorf("%w: %w", objstore.ErrPreconditionFailed, err)
		case "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "Forbidden", "ExpiredToken", "InvalidToken":
			return fmt.Errorf("%w: %w", objstore.ErrAccessDenied, err)
		case "BadDigest", "InvalidDigest", "XAmzContentChecksumMismatch", "XAmzContentSHA256Mismatch":
			return fmt.Errorf("%w: %w", objstore.ErrChecksumMismatch, err)
		case "InvalidRange":
			return fmt.Errorf("%w: %w", objstore.ErrInvalidRange, err)
		case "SlowDown", "Throttling", "ThrottlingException", "RequestTimeout", "RequestTimeTooSkewed",
			"InternalError", "ServiceUnavailable", "OperationAborted",
			"SlowDownRead", "SlowDownWrite", "XMinioServerNotInitialized": // MinIO short of quorum, or starting
			return fmt.Errorf("%w: %w", objstore.ErrRetryable, err)
		}
	}
	var re *smithyhttp.ResponseError
	if errors.As(err, &re) {
		switch code := re.HTTPStatusCode(); {
		case code == http.StatusNotFound:
			return fmt.Errorf("%w: %w", objstore.ErrNotFound, err)
		case code == http.StatusPreconditionFailed:
			return fmt.Errorf("%w: %w", objstore.ErrPreconditionFailed, err)
		case code == http.StatusForbidden || code == http.StatusUnauthorized:
			return fmt.Errorf("%w: %w", objstore.ErrAccessDenied, err)
		case code == http.StatusRequestedRangeNotSatisfiable:
			return fmt.Errorf("%w: %w", objstore.ErrInvalidRange, err)
		case code == http.StatusTooManyRequests || code >= 500:
			return fmt.Errorf("%w: %w", objstore.ErrRetryable, err)
		case code != 0:
			return err
		}
		// Status 0: the SDK got no response (a reset or closed
		// connection); the checks below apply.
	}
	// No HTTP response at all: the connection failed or broke.
	var ne net.Error
	if errors.As(err, &ne) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) || strings.Contains(err.Error(), "connection reset") {
		return fmt.Errorf("%w: %w", objstore.ErrRetryable, err)
	}
	return err
}

// putErr maps a put's error: S3 answers If-Match on a missing key with
// NoSuchKey, which for the seam is a lost condition.
// The result wraps the SDK's error, not the mapped one, so it is not also
// ErrNotFound.
func putErr(err error, opts objstore.PutOptions) error {
	mapped := mapErr(err)
	if opts.IfMatch != "" && errors.Is(mapped, objstore.ErrNotFound) && !errors.Is(mapped, objstore.ErrBucketNotFound) {
		return fmt.Errorf("%w: If-Match on a missing key: %w", objstore.ErrPreconditionFailed, err)
	}
	return mapped
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func crcHeader(v uint32) *string {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], v)
	return aws.String(base64.StdEncoding.EncodeToString(b[:]))
}

func etagOf(s *string) string { return aws.ToString(s) }

// Put implements objstore.Driver: one PutObject up to PartSize, a
// multipart upload above it.
func (d *Driver) Put(ctx context.Context, key string, body io.ReadSeeker, size int64, opts objstore.PutOptions) (objstore.ObjectInfo, error) {
	if size > d.cfg.PartSize {
		return d.putMultipart(ctx, key, body, size, opts)
	}
	in := &s3.PutObjectInput{
		Bucket:        aws.String(d.cfg.Bucket),
		Key:           aws.String(d.prefix + key),
		Body:          body,
		ContentLength: aws.Int64(size),
	}
	d.conditions(&in.IfNoneMatch, &in.IfMatch, opts)
	if opts.HasCRC32C {
		in.ChecksumCRC32C = crcHeader(opts.CRC32C)
	}
	d.encryption(&in.ServerSideEncryption, &in.SSEKMSKeyId)
	out, err := d.c.PutObject(ctx, in)
	if err != nil {
		return objstore.ObjectInfo{}, putErr(err, opts)
	}
	return objstore.ObjectInfo{Key: key, Size: size, ETag: etagOf(out.ETag), LastModified: time.Now()}, nil
}

func (d *Driver) conditions(ifNoneMatch, ifMatch **string, opts objstore.PutOptions) {
	if opts.IfNoneMatch {
		*ifNoneMatch = aws.String("*")
	}
	if opts.IfMatch != "" {
		*ifMatch = aws.String(opts.IfMatch)
	}
}

func (d *Driver) encryption(sse *types.ServerSideEncryption, kms **string) {
	if d.cfg.SSE != "" {
		*sse = types.ServerSideEncryption(d.cfg.SSE)
		if d.cfg.KMSKeyID != "" {
			*kms = aws.String(d.cfg.KMSKeyID)
		}
	}
}

// putMultipart uploads size bytes in PartSize parts, Concurrency at a time,
// and completes the upload with the put's conditions. A body that is an
// io.ReaderAt is read by the parts in parallel; any other is read part by
// part into buffers. The whole-object CRC-32C, when given, is checked
// before anything is sent; each part carries its own.
func (d *Driver) putMultipart(ctx context.Context, key string, body io.ReadSeeker, size int64, opts objstore.PutOptions) (objstore.ObjectInfo, error) {
	ra, isReaderAt := body.(io.ReaderAt)
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
	full := d.prefix + key
	cin := &s3.CreateMultipartUploadInput{Bucket: aws.String(d.cfg.Bucket), Key: aws.String(full), ChecksumAlgorithm: types.ChecksumAlgorithmCrc32c}
	d.encryption(&cin.ServerSideEncryption, &cin.SSEKMSKeyId)
	created, err := d.c.CreateMultipartUpload(ctx, cin)
	if err != nil {
		return objstore.ObjectInfo{}, mapErr(err)
	}
	uploadID := created.UploadId
	// A failed upload is aborted in the background, so the put returns
	// within its deadline; an abort that fails leaves a stale upload for
	// AbortStaleUploads (tierctl gc).
	abort := func() {
		go func() {
			actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			d.c.AbortMultipartUpload(actx, &s3.AbortMultipartUploadInput{Bucket: aws.String(d.cfg.Bucket), Key: aws.String(full), UploadId: uploadID})
		}()
	}
	nparts := int((size + d.cfg.PartSize - 1) / d.cfg.PartSize)
	parts := make([]types.CompletedPart, nparts)
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
		readMu   sync.Mutex // serializes reads of a plain ReadSeeker
	)
	sem := make(chan struct{}, d.cfg.Concurrency)
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for i := 0; i < nparts; i++ {
		off := int64(i) * d.cfg.PartSize
		n := min(d.cfg.PartSize, size-off)
		select {
		case sem <- struct{}{}:
		case <-pctx.Done():
		}
		if pctx.Err() != nil {
			break
		}
		var partBody io.ReadSeeker
		if isReaderAt {
			partBody = io.NewSectionReader(ra, off, n)
		} else {
			buf := make([]byte, n)
			readMu.Lock()
			_, err := io.ReadFull(body, buf)
			readMu.Unlock()
			if err != nil {
				<-sem
				mu.Lock()
				firstErr = fmt.Errorf("reading part %d of the body: %w", i+1, err)
				mu.Unlock()
				break
			}
			partBody = bytes.NewReader(buf)
		}
		wg.Add(1)
		go func(i int, partBody io.ReadSeeker, n int64) {
			defer wg.Done()
			defer func() { <-sem }()
			h := crc32.New(castagnoli)
			if _, err := io.Copy(h, partBody); err == nil {
				partBody.Seek(0, io.SeekStart)
			}
			out, err := d.c.UploadPart(pctx, &s3.UploadPartInput{
				Bucket: aws.String(d.cfg.Bucket), Key: aws.String(full), UploadId: uploadID,
				PartNumber: aws.Int32(int32(i + 1)), Body: partBody, ContentLength: aws.Int64(n),
				ChecksumCRC32C: crcHeader(h.Sum32()),
			})
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				if firstErr == nil {
					firstErr = fmt.Errorf("part %d: %w", i+1, mapErr(err))
				}
				cancel()
				return
			}
			parts[i] = types.CompletedPart{PartNumber: aws.Int32(int32(i + 1)), ETag: out.ETag, ChecksumCRC32C: out.ChecksumCRC32C}
		}(i, partBody, n)
	}
	wg.Wait()
	if firstErr == nil && ctx.Err() != nil {
		firstErr = ctx.Err()
	}
	if firstErr != nil {
		abort()
		return objstore.ObjectInfo{}, firstErr
	}
	in := &s3.CompleteMultipartUploadInput{
		Bucket: aws.String(d.cfg.Bucket), Key: aws.String(full), UploadId: uploadID,
		MultipartUpload: &types.CompletedMultipartUpload{Parts: parts},
	}
	d.conditions(&in.IfNoneMatch, &in.IfMatch, opts)
	out, err := d.c.CompleteMultipartUpload(ctx, in)
	if err != nil {
		abort()
		return objstore.ObjectInfo{}, putErr(err, opts)
	}
	return objstore.ObjectInfo{Key: key, Size: size, ETag: etagOf(out.ETag), LastModified: time.Now()}, nil
}

// Get implements objstore.Driver.
func (d *Driver) Get(ctx context.Context, key string, offset, length int64) (io.ReadCloser, objstore.ObjectInfo, error) {
	if length == 0 { // S3 has no empty range
		info, err := d.Head(ctx, key)
		if err != nil {
			return nil, info, err
		}
		if offset > info.Size || (offset == info.Size && info.Size > 0) {
			return nil, info, fmt.Errorf("%w: offset %d of a %d-byte object", objstore.ErrInvalidRange, offset, info.Size)
		}
		return io.NopCloser(strings.NewReader("")), info, nil
	}
	in := &s3.GetObjectInput{Bucket: aws.String(d.cfg.Bucket), Key: aws.String(d.prefix + key)}
	if offset > 0 || length > 0 {
		r := fmt.Sprintf("bytes=%d-", offset)
		if length > 0 {
			r += fmt.Sprint(offset + length - 1)
		}
		in.Range = aws.String(r)
	}
	out, err := d.c.GetObject(ctx, in)
	if err != nil {
		return nil, objstore.ObjectInfo{}, mapErr(err)
	}
	size := aws.ToInt64(out.ContentLength)
	if cr := aws.ToString(out.ContentRange); cr != "" {
		// bytes a-b/total
		if i := strings.LastIndexByte(cr, '/'); i >= 0 {
			fmt.Sscan(cr[i+1:], &size)
		}
	}
	info := objstore.ObjectInfo{Key: key, Size: size, ETag: etagOf(out.ETag), LastModified: aws.ToTime(out.LastModified)}
	return out.Body, info, nil
}

// Head implements objstore.Driver.
func (d *Driver) Head(ctx context.Context, key string) (objstore.ObjectInfo, error) {
	out, err := d.c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(d.cfg.Bucket), Key: aws.String(d.prefix + key)})
	if err != nil {
		return objstore.ObjectInfo{}, mapErr(err)
	}
	return objstore.ObjectInfo{Key: key, Size: aws.ToInt64(out.ContentLength), ETag: etagOf(out.ETag), LastModified: aws.ToTime(out.LastModified)}, nil
}

// List implements objstore.Driver with ListObjectsV2.
func (d *Driver) List(ctx context.Context, prefix, startAfter string, limit int) ([]objstore.ObjectInfo, bool, error) {
	in := &s3.ListObjectsV2Input{Bucket: aws.String(d.cfg.Bucket), Prefix: aws.String(d.prefix + prefix), MaxKeys: aws.Int32(int32(limit))}
	if startAfter != "" {
		in.StartAfter = aws.String(d.prefix + startAfter)
	}
	out, err := d.c.ListObjectsV2(ctx, in)
	if err != nil {
		return nil, false, mapErr(err)
	}
	objs := make([]objstore.ObjectInfo, 0, len(out.Contents))
	for _, o := range out.Contents {
		objs = append(objs, objstore.ObjectInfo{Key: strings.TrimPrefix(aws.ToString(o.Key), d.prefix), Size: aws.ToInt64(o.Size),
			ETag: etagOf(o.ETag), LastModified: aws.ToTime(o.LastModified)})
	}
	sort.Slice(objs, func(i, j int) bool { return objs[i].Key < objs[j].Key })
	return objs, aws.ToBool(out.IsTruncated), nil
}

// Delete implements objstore.Driver with DeleteObjects.
func (d *Driver) Delete(ctx context.Context, keys []string) error {
	ids := make([]types.ObjectIdentifier, len(keys))
	for i, k := range keys {
		ids[i] = types.ObjectIdentifier{Key: aws.String(d.prefix + k)}
	}
	out, err := d.c.DeleteObjects(ctx, &s3.DeleteObjectsInput{Bucket: aws.String(d.cfg.Bucket), Delete: &types.Delete{Objects: ids, Quiet: aws.Bool(true)}})
	if err != nil {
		return mapErr(err)
	}
	for _, e := range out.Errors {
		if aws.ToString(e.Code) == "NoSuchKey" {
			continue
		}
		return mapErr(&smithy.GenericAPIError{Code: aws.ToString(e.Code), Message: fmt.Sprintf("delete %s: %s", aws.ToString(e.Key), aws.ToString(e.Message))})
	}
	return nil
}

// AbortStaleUploads implements objstore.Driver.
func (d *Driver) AbortStaleUploads(ctx context.Context, prefix string, olderThan time.Time) (int, error) {
	n := 0
	in := &s3.ListMultipartUploadsInput{Bucket: aws.String(d.cfg.Bucket), Prefix: aws.String(d.prefix + prefix)}
	for {
		out, err := d.c.ListMultipartUploads(ctx, in)
		if err != nil {
			return n, mapErr(err)
		}
		for _, u := range out.Uploads {
			if u.Initiated == nil || !u.Initiated.Before(olderThan) {
				continue
			}
			if _, err := d.c.AbortMultipartUpload(ctx, &s3.AbortMultipartUploadInput{Bucket: aws.String(d.cfg.Bucket), Key: u.Key, UploadId: u.UploadId}); err != nil {
				if err := mapErr(err); !errors.Is(err, objstore.ErrNotFound) {
					return n, err
				}
				continue
			}
			n++
		}
		if !aws.ToBool(out.IsTruncated) {
			return n, nil
		}
		in.KeyMarker, in.UploadIdMarker = out.NextKeyMarker, out.NextUploadIdMarker
	}
}

// Close implements objstore.Driver.
func (d *Driver) Close() error { return nil }
