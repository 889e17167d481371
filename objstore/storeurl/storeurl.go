// Package storeurl opens an objstore.Store from a URL:
//
//	file:///var/lib/tierlog/bucket         a directory (fs driver)
//	mem://name                              a process-wide in-memory bucket
//	s3://bucket/prefix?region=eu-west-1     Amazon S3 (aws-sdk-go-v2)
//	s3://bucket/prefix?endpoint=http://127.0.0.1:9000&path-style=true
//	minio://bucket/prefix?endpoint=http://127.0.0.1:9000
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
	"github.com/tierlog/tierlog/objstore/minio"
	"github.com/tierlog/tierlog/objstore/s3"
)

var (
	memMu      sync.Mutex
	memBuckets = map[string]*mem.Driver{}
)

// allowed lists each scheme's query options.
var allowed = map[string][]string{
	"file":  {"create"},
	"mem":   {},
	"s3":    {"endpoint", "region", "path-style", "profile", "sse", "kms-key", "insecure", "part-size", "concurrency", "timeout", "attempts"},
	"minio": {"endpoint", "region", "sse", "insecure", "part-size", "concurrency", "timeout", "attempts"},
}

func bad(raw, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", objstore.ErrInvalidURL, Redact(raw), fmt.Sprintf(format, args...))
}

// Open parses raw and opens the store, checking that the bucket exists and
// the credentials reach it.
func Open(ctx context.Context, raw string, opts objstore.Options) (*objstore.Store, error) {
	u, q, err := parse(raw)
	if err != nil {
		return nil, err
	}
	flag := func(name string) (bool, error) {
		v, ok := q[name]
		if !ok {
			return false, nil
		}
		if len(v) == 0 || v[0] == "" {
			return true, nil
		}
		b, err := strconv.ParseBool(v[0])
		if err != nil {
			return false, bad(raw, "option %s=%q: want true or false", name, v[0])
		}
		return b, nil
	}
	num := func(name string) (int64, error) {
		v := q.Get(name)
		if v == "" {
			return 0, nil
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n <= 0 {
			return 0, bad(raw, "option %s=%q: want a positive number", name, v)
		}
		return n, nil
	}
	insecure, err := flag("insecure")
	if err != nil {
		return nil, err
	}
	partSize, err := num("part-size")
	if err != nil {
		return nil, err
	}
	conc, err := num("concurrency")
	if err != nil {
		return nil, err
	}
	attempts, err := num("attempts")
	if err != nil {
		return nil, err
	}
	if attempts > 0 {
		opts.MaxAttempts = int(attempts)
	}
	if v := q.Get("timeout"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return nil, bad(raw, "option timeout=%q: want a positive duration such as 5s", v)
		}
		opts.Timeout = d
	}
	name := Redact(raw)
	switch u.Scheme {
	case "file":
		if u.Host != "" && u.Host != "localhost" {
			return nil, bad(raw, "file URLs name a local directory: file:///path")
		}
		if u.Path == "" {
			return nil, bad(raw, "no directory")
		}
		create, err := flag("create")
		if err != nil {
			return nil, err
		}
		if create {
			if err := os.MkdirAll(u.Path, 0o755); err != nil {
				return nil, fmt.Errorf("objstore: create %s: %w", u.Path, err)
			}
		}
		d, err := fs.Open(u.Path)
		if err != nil {
			return nil, err
		}
		return objstore.New(d, name, opts), nil
	case "mem":
		if u.Host == "" {
			return nil, bad(raw, "name the bucket: mem://name")
		}
		memMu.Lock()
		d := memBuckets[u.Host]
		if d == nil {
			d = mem.New()
			memBuckets[u.Host] = d
		}
		memMu.Unlock()
		return objstore.New(d, name, opts), nil
	case "s3":
		if u.Host == "" {
			return nil, bad(raw, "no bucket: s3://bucket/prefix")
		}
		pathStyle, err := flag("path-style")
		if err != nil {
			return nil, err
		}
		// Reading the AWS configuration touches no network; bound it
		// all the same.
		cctx, cancel := context.WithTimeout(ctx, opts.Bound())
		d, err := s3.New(cctx, s3.Config{Bucket: u.Host, Prefix: strings.Trim(u.Path, "/"), Endpoint: q.Get("endpoint"),
			Region: q.Get("region"), PathStyle: pathStyle, Profile: q.Get("profile"), InsecureSkipVerify: insecure,
			SSE: q.Get("sse"), KMSKeyID: q.Get("kms-key"), PartSize: partSize, Concurrency: int(conc)})
		cancel()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		return checked(ctx, objstore.New(d, name, opts))
	default: // minio
		if u.Host == "" || q.Get("endpoint") == "" {
			return nil, bad(raw, "want minio://bucket/prefix?endpoint=http://host:port")
		}
		d, err := minio.New(minio.Config{Bucket: u.Host, Prefix: strings.Trim(u.Path, "/"), Endpoint: q.Get("endpoint"),
			Region: q.Get("region"), AccessKey: os.Getenv("AWS_ACCESS_KEY_ID"), SecretKey: os.Getenv("AWS_SECRET_ACCESS_KEY"),
			InsecureSkipVerify: insecure, SSE: q.Get("sse"), PartSize: uint64(partSize), Concurrency: uint(conc)})
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		return checked(ctx, objstore.New(d, name, opts))
	}
}

// parse parses raw and checks what every scheme shares: a known scheme,
// no credentials, no fragment, a query that unescapes, only the scheme's
// options, and an endpoint that is a plain http(s) URL. No error quotes
// raw or a part of it but through Redact.
func parse(raw string) (*url.URL, url.Values, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, nil, bad(raw, "not a URL: %s", parseCause(err))
	}
	if u.Opaque != "" {
		return nil, nil, bad(raw, "want scheme://bucket/prefix")
	}
	names, ok := allowed[u.Scheme]
	if !ok {
		return nil, nil, bad(raw, "unknown scheme %q (want file, mem, s3 or minio)", u.Scheme)
	}
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
	for k := range q {
		if !slices.Contains(names, k) {
			return nil, nil, bad(raw, "unknown option %s for %s:// (known: %s)", shownName(k), u.Scheme, strings.Join(names, ", "))
		}
	}
	if ep, ok := q["endpoint"]; ok {
		if len(ep) != 1 {
			return nil, nil, bad(raw, "endpoint given %d times", len(ep))
		}
		if err := checkEndpoint(ep[0]); err != nil {
			return nil, nil, bad(raw, "%v", err)
		}
	}
	return u, q, nil
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
// check fails.
func checked(ctx context.Context, s *objstore.Store) (*objstore.Store, error) {
	if err := s.CheckBucket(ctx); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}
