package tiered_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/tierlog/tierlog/manifest"
	"github.com/tierlog/tierlog/objstore"
	"github.com/tierlog/tierlog/objstore/minio"
	"github.com/tierlog/tierlog/objstore/s3"
	"github.com/tierlog/tierlog/testing/crashchild"
	"github.com/tierlog/tierlog/testing/s3server"
	"github.com/tierlog/tierlog/tiered"
)

func TestMain(m *testing.M) {
	if code, ok := crashchild.Dispatch(crashRoles); ok {
		os.Exit(code)
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
	bucket := srv.NewBucket(t)
	ctx := context.Background()
	var d objstore.Driver
	var err error
	switch kind {
	case "s3":
		d, err = s3.Open(ctx, s3.Config{Bucket: bucket, Endpoint: srv.Endpoint, Region: srv.Region, PathStyle: true, AccessKey: srv.AccessKey, SecretKey: srv.SecretKey})
	default:
		d, err = minio.Open(ctx, minio.Config{Bucket: bucket, Endpoint: srv.Endpoint, Region: srv.Region, AccessKey: srv.AccessKey, SecretKey: srv.SecretKey})
	}
	if err != nil {
		t.Fatal(err)
	}
	var opts objstore.Options
	if srv.Kind == s3server.MinIOCluster {
		// Four MinIO processes on a busy 2-core machine lose write quorum
		// for seconds at a time (503 SlowDownWrite; seen for over 10 s,
		// each time at the MaxBytes clause's first put); the defaults give
		// up after 1.5 s of backoff. The battery tests tiered's semantics,
		// not the cluster's availability (TestMinIOClusterNodeKill does):
		// it waits up to about 36 s of backoff.
		opts = objstore.Options{MaxAttempts: 12, BaseBackoff: 200 * time.Millisecond, MaxBackoff: 5 * time.Second}
	}
	s := objstore.New(d, kind+"://"+bucket, opts)
	t.Cleanup(func() { s.Close() })
	return s
}

// manifestOf returns p's committed manifest whole (its parts loaded).
func manifestOf(t testing.TB, p *tiered.Partition) *manifest.Manifest {
	t.Helper()
	m, err := p.Manifest(context.Background())
	if err != nil {
		t.Fatalf("the committed manifest: %v", err)
	}
	return m
}
