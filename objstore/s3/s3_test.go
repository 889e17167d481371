package s3_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/tierlog/tierlog/objstore"
	"github.com/tierlog/tierlog/objstore/s3"
	"github.com/tierlog/tierlog/objstore/seal"
	"github.com/tierlog/tierlog/testing/faultproxy"
	"github.com/tierlog/tierlog/testing/objstoretest"
	"github.com/tierlog/tierlog/testing/s3server"
)

func config(t *testing.T, srv *s3server.Server, bucket string) s3.Config {
	return s3.Config{Bucket: bucket, Endpoint: srv.Endpoint, Region: srv.Region, PathStyle: true,
		AccessKey: srv.AccessKey, SecretKey: srv.SecretKey, PartSize: 5 << 20}
}

var buckets = map[*objstore.Store]string{}

func bucketOf(s *objstore.Store) string {
	bucketsMu.Lock()
	defer bucketsMu.Unlock()
	return buckets[s]
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func newStoreB(t testing.TB, partSize int64) *objstore.Store {
	return newStoreOn(t, s3server.Shared(t), partSize)
}

// kinds are the servers every suite runs against; one that cannot be
// started here is skipped with a message.
var kinds = []s3server.Kind{s3server.MinIO, s3server.VersityGW}

// eachKind runs fn as a subtest per server kind.
func eachKind(t *testing.T, fn func(t *testing.T, srv func(t testing.TB) *s3server.Server)) {
	for _, k := range kinds {
		t.Run(string(k), func(t *testing.T) {
			// A server that cannot start here skips the kind at once,
			// with the make target that installs it, before any case.
			s3server.SharedKind(t, k)
			fn(t, func(t testing.TB) *s3server.Server { return s3server.SharedKind(t, k) })
		})
	}
}

func newStoreOn(t testing.TB, srv *s3server.Server, partSize int64) *objstore.Store {
	c := s3.Config{Bucket: s3server.BucketName(t), Endpoint: srv.Endpoint, Region: srv.Region, PathStyle: true,
		AccessKey: srv.AccessKey, SecretKey: srv.SecretKey, PartSize: partSize}
	ctx := context.Background()
	if err := s3.CreateBucket(ctx, c); err != nil {
		t.Fatal(err)
	}
	d, err := s3.Open(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	s := objstore.New(d, "s3://"+c.Bucket, objstore.Options{})
	bucketsMu.Lock()
	buckets[s] = c.Bucket
	bucketsMu.Unlock()
	t.Cleanup(func() { s.Close() })
	return s
}

var bucketsMu sync.Mutex

func TestConformance(t *testing.T) {
	eachKind(t, func(t *testing.T, srv func(testing.TB) *s3server.Server) {
		objstoretest.Run(t, func(t *testing.T) *objstore.Store { return newStoreOn(t, srv(t), 5<<20) }, objstoretest.Options{})
	})
}

// TestConformanceSealed runs the battery over sealed objects on each
// server (S3's ranges of an empty object, of a range past the end, of a
// multipart upload, under the chunks).
func TestConformanceSealed(t *testing.T) {
	line, err := seal.NewKey("k1")
	if err != nil {
		t.Fatal(err)
	}
	ring, err := seal.ParseKeyFile("test", strings.NewReader(line+"\nactive k1\n"))
	if err != nil {
		t.Fatal(err)
	}
	eachKind(t, func(t *testing.T, srv func(testing.TB) *s3server.Server) {
		objstoretest.Run(t, func(t *testing.T) *objstore.Store {
			d, err := seal.New(newStoreOn(t, srv(t), 5<<20).Driver(), ring, seal.Options{ChunkSize: seal.MinChunkSize})
			if err != nil {
				t.Fatal(err)
			}
			return objstore.New(d, "sealed", objstore.Options{})
		}, objstoretest.Options{})
	})
}

func TestOpenErrors(t *testing.T) {
	eachKind(t, func(t *testing.T, server func(testing.TB) *s3server.Server) {
		srv := server(t)
		ctx := context.Background()
		if _, err := s3.Open(ctx, config(t, srv, "no-such-bucket-here")); !errors.Is(err, objstore.ErrBucketNotFound) {
			t.Errorf("missing bucket: %v", err)
		}
		c := config(t, srv, srv.NewBucket(t))
		c.SecretKey = "wrong"
		if _, err := s3.Open(ctx, c); !errors.Is(err, objstore.ErrAccessDenied) {
			t.Errorf("wrong credentials: %v", err)
		}
	})
}

func TestConformanceBehindFaults(t *testing.T) {
	eachKind(t, func(t *testing.T, srv func(testing.TB) *s3server.Server) {
		objstoretest.RunBehindFaults(t, func(t *testing.T) (objstore.Driver, string) {
			return newStoreOn(t, srv(t), 5<<20).Driver(), "s3"
		}, objstoretest.Options{})
	})
}

// TestNetworkFaults runs the network battery through toxiproxy in front of
// each server: every operation succeeds or fails retryably within the
// store's bound under each fault, and succeeds once it is gone.
func TestNetworkFaults(t *testing.T) {
	eachKind(t, func(t *testing.T, server func(testing.TB) *s3server.Server) {
		srv := server(t)
		p := faultproxy.Start(t, srv.Endpoint)
		objstoretest.RunNetworkFaults(t, p, func(t *testing.T, opts objstore.Options) *objstore.Store {
			c := config(t, srv, srv.NewBucket(t))
			c.Endpoint = p.Endpoint
			d, err := s3.New(context.Background(), c)
			if err != nil {
				t.Fatal(err)
			}
			s := objstore.New(d, "s3://"+c.Bucket+"?endpoint="+p.Endpoint, opts)
			t.Cleanup(func() { s.Close() })
			return s
		})
	})
}
