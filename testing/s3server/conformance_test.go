package s3server_test

import (
	"context"
	"testing"
	"time"

	"github.com/tierlog/tierlog/objstore"
	"github.com/tierlog/tierlog/objstore/s3"
	"github.com/tierlog/tierlog/testing/objstoretest"
	"github.com/tierlog/tierlog/testing/s3server"
)

// TestClusterConformance runs the objstore battery over the shared
// distributed MinIO: what the drivers promise holds on a cluster as on a
// single server (conditional puts, ranged gets, multipart, listing) while
// every node is up. One driver, s3: the battery costs about a minute per
// driver on 8 drives, and both drivers run it on each single server; the
// tiered battery runs over the cluster through both.
func TestClusterConformance(t *testing.T) {
	srv := s3server.SharedKind(t, s3server.MinIOCluster)
	ctx := context.Background()
	// Large objects of 11 MiB: three parts of 5 MiB, multipart still.
	objstoretest.Run(t, func(t *testing.T) *objstore.Store {
		c := s3.Config{Bucket: srv.NewBucket(t), Endpoint: srv.Endpoint, Region: srv.Region, PathStyle: true,
			AccessKey: srv.AccessKey, SecretKey: srv.SecretKey, PartSize: 5 << 20}
		d, err := s3.Open(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		// A cluster on a busy machine answers SlowDownWrite (503) while
		// its drives are slow: more tries, longer backoff, as a client
		// of a loaded cluster is configured. Ten tries (about 10 s of
		// backoff) were not enough in CI: a delete of missing keys was
		// refused for all of them. Twenty give about a minute.
		s := objstore.New(d, "s3://"+c.Bucket, objstore.Options{MaxAttempts: 20, MaxBackoff: 5 * time.Second})
		t.Cleanup(func() { s.Close() })
		return s
	}, objstoretest.Options{LargeSize: 11 << 20})
}
