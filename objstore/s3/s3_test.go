package s3_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"

	"github.com/tierlog/tierlog/objstore"
	"github.com/tierlog/tierlog/objstore/s3"
	"github.com/tierlog/tierlog/testing/objstoretest"
	"github.com/tierlog/tierlog/testing/s3server"
)

func config(t *testing.T, srv *s3server.Server, bucket string) s3.Config {
	return s3.Config{Bucket: bucket, Endpoint: srv.Endpoint, Region: srv.Region, PathStyle: true,
		AccessKey: srv.AccessKey, SecretKey: srv.SecretKey, PartSize: 5 << 20}
}

// newStore creates a fresh bucket on the shared server and opens it.
func newStore(t *testing.T) *objstore.Store { return newStoreB(t, 5<<20) }

var buckets = map[*objstore.Store]string{}

func bucketOf(s *objstore.Store) string {
	bucketsMu.Lock()
	defer bucketsMu.Unlock()
	return buckets[s]
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func newStoreB(t testing.TB, partSize int64) *objstore.Store {
	srv := s3server.Shared(t)
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
	objstoretest.Run(t, newStore, objstoretest.Options{})
}

func TestOpenErrors(t *testing.T) {
	srv := s3server.Shared(t)
	ctx := context.Background()
	if _, err := s3.Open(ctx, config(t, srv, "no-such-bucket-here")); !errors.Is(err, objstore.ErrBucketNotFound) {
		t.Errorf("missing bucket: %v", err)
	}
	c := config(t, srv, s3server.BucketName(t))
	if err := s3.CreateBucket(ctx, c); err != nil {
		t.Fatal(err)
	}
	c.SecretKey = "wrong"
	if _, err := s3.Open(ctx, c); !errors.Is(err, objstore.ErrAccessDenied) {
		t.Errorf("wrong credentials: %v", err)
	}
}

func TestConformanceBehindFaults(t *testing.T) {
	objstoretest.RunBehindFaults(t, func(t *testing.T) (objstore.Driver, string) {
		return newStore(t).Driver(), "s3"
	}, objstoretest.Options{})
}
