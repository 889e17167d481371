package minio_test

import (
	"context"
	"errors"
	"testing"

	"github.com/tierlog/tierlog/objstore"
	"github.com/tierlog/tierlog/objstore/minio"
	"github.com/tierlog/tierlog/testing/faultproxy"
	"github.com/tierlog/tierlog/testing/objstoretest"
	"github.com/tierlog/tierlog/testing/s3server"
)

func config(srv *s3server.Server, bucket string) minio.Config {
	return minio.Config{Bucket: bucket, Endpoint: srv.Endpoint, Region: srv.Region,
		AccessKey: srv.AccessKey, SecretKey: srv.SecretKey, PartSize: 5 << 20}
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

func newStoreOn(t testing.TB, srv *s3server.Server) *objstore.Store {
	c := config(srv, srv.NewBucket(t))
	d, err := minio.Open(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	s := objstore.New(d, "minio://"+c.Bucket, objstore.Options{})
	t.Cleanup(func() { s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	eachKind(t, func(t *testing.T, srv func(testing.TB) *s3server.Server) {
		objstoretest.Run(t, func(t *testing.T) *objstore.Store { return newStoreOn(t, srv(t)) }, objstoretest.Options{})
	})
}

func TestOpenErrors(t *testing.T) {
	eachKind(t, func(t *testing.T, server func(testing.TB) *s3server.Server) {
		srv := server(t)
		ctx := context.Background()
		if _, err := minio.Open(ctx, config(srv, "no-such-bucket-here")); !errors.Is(err, objstore.ErrBucketNotFound) {
			t.Errorf("missing bucket: %v", err)
		}
		c := config(srv, srv.NewBucket(t))
		c.SecretKey = "wrong"
		if _, err := minio.Open(ctx, c); !errors.Is(err, objstore.ErrAccessDenied) {
			t.Errorf("wrong credentials: %v", err)
		}
		c.Endpoint = "not a url"
		if _, err := minio.Open(ctx, c); !errors.Is(err, objstore.ErrInvalidURL) {
			t.Errorf("bad endpoint: %v", err)
		}
	})
}

func TestConformanceBehindFaults(t *testing.T) {
	eachKind(t, func(t *testing.T, srv func(testing.TB) *s3server.Server) {
		objstoretest.RunBehindFaults(t, func(t *testing.T) (objstore.Driver, string) {
			return newStoreOn(t, srv(t)).Driver(), "minio"
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
			c := config(srv, srv.NewBucket(t))
			c.Endpoint = p.Endpoint
			d, err := minio.New(c)
			if err != nil {
				t.Fatal(err)
			}
			s := objstore.New(d, "minio://"+c.Bucket+"?endpoint="+p.Endpoint, opts)
			t.Cleanup(func() { s.Close() })
			return s
		})
	})
}
