// Package storeurl opens an objstore.Store from a URL:
//
//	file:///var/lib/tierlog/bucket         a directory (fs driver)
//	mem://name                              a process-wide in-memory bucket
//	s3://bucket/prefix?region=eu-west-1     Amazon S3 (aws-sdk-go-v2)
//	s3://bucket/prefix?endpoint=http://127.0.0.1:9000&path-style=true
//	minio://bucket/prefix?endpoint=http://127.0.0.1:9000
//
// file:// and mem:// always work. The network schemes work in a program
// that imports their driver, which registers itself (Register), as
// database/sql drivers and go-cloud's blob drivers do; a program that
// only uses file:// links neither SDK:
//
//	import _ "github.com/tierlog/tierlog/objstore/s3"    // s3://
//	import _ "github.com/tierlog/tierlog/objstore/minio" // minio://
//
// Without it, Open returns a *MissingDriverError (ErrNoDriver) naming the
// import.
//
// Query options: endpoint, region, path-style (s3), profile (s3), sse
// (AES256 or aws:kms), kms-key (s3), insecure (skip TLS verification),
// part-size (bytes), concurrency, timeout (each attempt's deadline, a Go
// duration such as 5s: objstore.Options.Timeout) and attempts
// (objstore.Options.MaxAttempts); file:// takes create. timeout and
// attempts, when given, replace the Options passed to Open. Unknown
// options are errors that name them. Credentials never go in the URL nor
// in its endpoint (a URL or an endpoint with user info, a query on the
// endpoint, or a #fragment is refused): they come from the usual AWS (and
// MinIO) environment, profiles and instance metadata.
//
// Every scheme takes key-file=PATH, which seals the bucket's objects
// with client-side envelope encryption (objstore/seal) under the keys of
// that file (seal.LoadKeyFile), with chunk-size=BYTES (64 KiB by default)
// and read-plaintext=true (read objects written before sealing was on),
// and seal=topics (seal only what its user asks: a tiered.Backend seals
// the topics with remote.storage.seal.enable=true and its WAL objects;
// seal.Options.Selective) or seal=all (every object, the default):
//
//	s3://bucket/prefix?region=eu-west-1&key-file=/etc/tierlog/keys
//	s3://bucket/prefix?key-file=/etc/tierlog/keys&seal=topics
//
// No error of this package, nor the Name of a Store it opens, quotes the
// URL but through Redact, which hides whatever may be a secret: user info,
// fragments, the values of options other than the known harmless ones,
// and the whole of a URL that does not parse.
//
// Opening an s3:// or minio:// store checks the bucket with one request
// held to the store's bound (objstore.Options.Bound), so Open returns
// within it even from a server that accepts connections and never
// answers.
package storeurl

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tierlog/tierlog/objstore"
	"github.com/tierlog/tierlog/objstore/fs"
	"github.com/tierlog/tierlog/objstore/mem"
	"github.com/tierlog/tierlog/objstore/seal"
)

var (
	memMu      sync.Mutex
	memBuckets = map[string]*mem.Driver{}
)

// bad is the error for a URL that is wrong: the URL (redacted), then
// what is wrong with it, as every error of Open reads.
func bad(raw, format string, args ...any) error {
	return fmt.Errorf("%s: %w: %s", Redact(raw), objstore.ErrInvalidURL, fmt.Sprintf(format, args...))
}

// Open parses raw and opens the store, checking that the bucket exists and
// the credentials reach it.
func Open(ctx context.Context, raw string, opts objstore.Options) (*objstore.Store, error) {
	u, opener, err := parse(raw)
	if err != nil {
		return nil, err
	}
	name := Redact(raw)
	attempts, err := u.Positive("attempts")
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if attempts > 0 {
		opts.MaxAttempts = int(attempts)
	}
	if v := u.Option("timeout"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return nil, bad(raw, "option timeout=%q: want a positive duration such as 5s", v)
		}
		opts.Timeout = d
	}
	var d objstore.Driver
	switch {
	case u.Scheme == "file":
		d, err = openFile(u)
	case u.Scheme == "mem":
		if u.Bucket == "" {
			return nil, bad(raw, "name the bucket: mem://name")
		}
		memMu.Lock()
		md := memBuckets[u.Bucket]
		if md == nil {
			md = mem.New()
			memBuckets[u.Bucket] = md
		}
		memMu.Unlock()
		d = md
	default:
		d, err = opener.Open(ctx, u, opts)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if d, err = sealIf(u, d); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if opener == nil {
		return objstore.New(d, name, opts), nil
	}
	return checked(ctx, objstore.New(d, name, opts))
}

// sealOptions are the options of every scheme that seal the bucket's
// objects (objstore/seal).
var sealOptions = []string{"key-file", "chunk-size", "read-plaintext", "seal"}

// sealIf wraps d in a seal.Driver when the URL names a key file. d is
// closed when it returns an error.
func sealIf(u *URL, d objstore.Driver) (_ objstore.Driver, err error) {
	defer func() {
		if err != nil {
			d.Close()
		}
	}()
	for _, k := range []string{"key-file", "seal", "chunk-size"} {
		if v, ok := u.query[k]; ok && v[0] == "" {
			// A key file path templated empty must not turn sealing off.
			return nil, u.Errorf("option %s= is empty: give its value, or leave it out", k)
		}
	}
	path := u.Option("key-file")
	chunk, err := u.Positive("chunk-size")
	if err != nil {
		return nil, err
	}
	plain, err := u.Bool("read-plaintext")
	if err != nil {
		return nil, err
	}
	var selective bool
	switch scope := u.Option("seal"); scope {
	case "", "all":
	case "topics":
		selective = true
	default:
		return nil, u.Errorf("option seal=%s: want all (every object sealed) or topics (the topics that ask, remote.storage.seal.enable=true)", scope)
	}
	if path == "" {
		if chunk > 0 || plain || u.Option("seal") != "" {
			return nil, u.Errorf("chunk-size, read-plaintext and seal are options of sealing: give the key-file too")
		}
		return d, nil
	}
	if chunk > seal.MaxChunkSize {
		return nil, u.Errorf("option chunk-size=%d: want %d to %d bytes", chunk, seal.MinChunkSize, seal.MaxChunkSize)
	}
	ring, err := seal.LoadKeyFile(path)
	if err != nil {
		return nil, err
	}
	sd, err := seal.New(d, ring, seal.Options{ChunkSize: int(chunk), ReadPlaintext: plain, Selective: selective})
	if err != nil {
		return nil, u.Errorf("%v", err)
	}
	return sd, nil
}

// openFile opens a file:// URL's directory.
func openFile(u *URL) (objstore.Driver, error) {
	if u.Bucket != "" && u.Bucket != "localhost" {
		return nil, u.Errorf("file URLs name a local directory: file:///path")
	}
	dir := u.path
	if dir == "" {
		return nil, u.Errorf("no directory")
	}
	create, err := u.Bool("create")
	if err != nil {
		return nil, err
	}
	if create {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("objstore: create %s: %w", dir, err)
		}
	}
	return fs.Open(dir)
}

// parse parses raw and checks what every scheme shares: a known scheme
// whose driver is in the program, no credentials, no fragment, a query
// that unescapes, only the scheme's options, and an endpoint that is a
// plain http(s) URL. No error quotes raw or a part of it but through
// Redact.
func parse(raw string) (*URL, *Opener, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, nil, bad(raw, "not a URL: %s", parseCause(err))
	}
	if u.Opaque != "" {
		return nil, nil, bad(raw, "want scheme://bucket/prefix")
	}
	names, opener, err := lookup(raw, u.Scheme)
	if err != nil {
		return nil, nil, err
	}
	names = append(slices.Clone(names), sealOptions...)
	if u.User != nil {
		return nil, nil, bad(raw, "credentials do not belong in the URL; use the AWS environment or a profile")
	}
	if u.Fragment != "" || strings.Contains(raw, "#") {
		return nil, nil, bad(raw, "a store URL has no #fragment")
	}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return nil, nil, bad(raw, "query: %s", parseCause(err))
	}
	for k, v := range q {
		if !slices.Contains(names, k) {
			return nil, nil, bad(raw, "unknown option %s for %s:// (known: %s)", shownName(k), u.Scheme, strings.Join(names, ", "))
		}
		if len(v) > 1 {
			// Which one would count is not what the URL says.
			return nil, nil, bad(raw, "option %s given %d times", k, len(v))
		}
	}
	if ep, ok := q["endpoint"]; ok {
		if err := checkEndpoint(ep[0]); err != nil {
			return nil, nil, bad(raw, "%v", err)
		}
	}
	return &URL{Scheme: u.Scheme, Bucket: u.Host, Prefix: strings.Trim(u.Path, "/"), path: u.Path, query: q, raw: raw}, opener, nil
}

// shownName quotes an option's name for an error, unless it does not look
// like one (it may be a secret).
func shownName(k string) string {
	if optionName(k) {
		return strconv.Quote(k)
	}
	return "(a name that is not shown: not lower case letters, digits and -_.)"
}

// checkEndpoint refuses an endpoint that is not http(s)://host[:port][/path]:
// one with user info, a query or a fragment may hold a secret, and the
// drivers would quote it in their errors.
func checkEndpoint(raw string) error {
	ep, err := url.Parse(raw)
	switch {
	case err != nil:
		return fmt.Errorf("endpoint: %s", parseCause(err))
	case ep.User != nil:
		return errors.New("endpoint: credentials do not belong in the URL; use the AWS environment or a profile")
	case ep.Scheme != "http" && ep.Scheme != "https", ep.Host == "", ep.Opaque != "":
		return fmt.Errorf("endpoint %s: want http://host:port or https://host:port", redactEndpoint(raw))
	case ep.RawQuery != "" || ep.ForceQuery || ep.Fragment != "" || strings.Contains(raw, "#"):
		return fmt.Errorf("endpoint %s: want http(s)://host[:port][/path], with no query or fragment", redactEndpoint(raw))
	}
	return nil
}

// checked checks s's bucket within the store's bound, closing s when the
// check fails. Drivers that are not a BucketChecker pass.
func checked(ctx context.Context, s *objstore.Store) (*objstore.Store, error) {
	if err := s.CheckBucket(ctx); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}
