package tiered_test

import (
	"context"
	"os"
	"testing"

	"github.com/tierlog/tierlog/objstore"
	"github.com/tierlog/tierlog/objstore/minio"
	"github.com/tierlog/tierlog/objstore/s3"
	"github.com/tierlog/tierlog/testing/s3server"
)

func TestMain(m *testing.M) {
	if spec := os.Getenv(crashEnv); spec != "" {
		crashChild(spec)
		return
	}
	os.Exit(s3server.RunTests(m))
}

// realStore opens a fresh bucket on the shared S3 server through the s3 or
// the minio driver.
func realStore(t testing.TB, kind string) *objstore.Store {
	t.Helper()
	return realStoreOn(t, s3server.Shared(t), kind)
}

// serverKinds are the S3 servers the real-server suites run against, as
// the objstore suites do; one that cannot be started here is skipped with
// a message saying how to get it.
var serverKinds = []s3server.Kind{s3server.MinIO, s3server.VersityGW}

// eachServer runs fn as a subtest per server kind, on the test binary's
// shared server of that kind.
func eachServer(t *testing.T, fn func(t *testing.T, srv *s3server.Server)) {
	for _, k := range serverKinds {
		t.Run(string(k), func(t *testing.T) { fn(t, s3server.SharedKind(t, k)) })
	}
}

// realStoreOn is realStore on a given server.
func realStoreOn(t testing.TB, srv *s3server.Server, kind string) *objstore.Store {
	t.Helper()
	bucket := s3server.BucketName(t)
	ctx := context.Background()
	var d objstore.Driver
	var err error
	switch kind {
	case "s3":
		c := s3.Config{Bucket: bucket, Endpoint: srv.Endpoint, Region: srv.Region, PathStyle: true, AccessKey: srv.AccessKey, SecretKey: srv.SecretKey}
		if err = s3.CreateBucket(ctx, c); err == nil {
			d, err = s3.Open(ctx, c)
		}
	default:
		c := minio.Config{Bucket: bucket, Endpoint: srv.Endpoint, Region: srv.Region, AccessKey: srv.AccessKey, SecretKey: srv.SecretKey}
		if err = minio.CreateBucket(ctx, c); err == nil {
			d, err = minio.Open(ctx, c)
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	s := objstore.New(d, kind+"://"+bucket, objstore.Options{})
	t.Cleanup(func() { s.Close() })
	return s
}
