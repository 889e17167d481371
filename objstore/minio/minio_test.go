package minio_test

import (
	"context"
	"errors"
	"testing"

	"github.com/tierlog/tierlog/objstore"
	"github.com/tierlog/tierlog/objstore/minio"
	"github.com/tierlog/tierlog/testing/objstoretest"
	"github.com/tierlog/tierlog/testing/s3server"
)

func config(srv *s3server.Server, bucket string) minio.Config {
	return minio.Config{Bucket: bucket, Endpoint: srv.Endpoint, Region: srv.Region,
		AccessKey: srv.AccessKey, SecretKey: srv.SecretKey, PartSize: 5 << 20}
}

func newStore(t *testing.T) *objstore.Store {
	srv := s3server.Shared(t)
	c := config(srv, s3server.BucketName(t))
	ctx := context.Background()
	if err := minio.CreateBucket(ctx, c); err != nil {
		t.Fatal(err)
	}
	d, err := minio.Open(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	s := objstore.New(d, "minio://"+c.Bucket, objstore.Options{})
	t.Cleanup(func() { s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	objstoretest.Run(t, newStore, objstoretest.Options{})
}

func TestOpenErrors(t *testing.T) {
	srv := s3server.Shared(t)
	ctx := context.Background()
	if _, err := minio.Open(ctx, config(srv, "no-such-bucket-here")); !errors.Is(err, objstore.ErrBucketNotFound) {
		t.Errorf("missing bucket: %v", err)
	}
	c := config(srv, s3server.BucketName(t))
	if err := minio.CreateBucket(ctx, c); err != nil {
		t.Fatal(err)
	}
	c.SecretKey = "wrong"
	if _, err := minio.Open(ctx, c); !errors.Is(err, objstore.ErrAccessDenied) {
		t.Errorf("wrong credentials: %v", err)
	}
	c.Endpoint = "not a url"
	if _, err := minio.Open(ctx, c); !errors.Is(err, objstore.ErrInvalidURL) {
		t.Errorf("bad endpoint: %v", err)
	}
}

func TestConformanceBehindFaults(t *testing.T) {
	objstoretest.RunBehindFaults(t, func(t *testing.T) (objstore.Driver, string) {
		return newStore(t).Driver(), "minio"
	}, objstoretest.Options{})
}
