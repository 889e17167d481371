package s3server_test

import (
	"context"
	"testing"

	"github.com/tierlog/tierlog/objstore"
	"github.com/tierlog/tierlog/objstore/minio"
	"github.com/tierlog/tierlog/objstore/s3"
	"github.com/tierlog/tierlog/testing/objstoretest"
	"github.com/tierlog/tierlog/testing/s3server"
)

// TestClusterConformance runs the objstore battery over the shared
// distributed MinIO through each driver: what the drivers promise holds
// on a cluster as on a single server (conditional puts, ranged gets,
// multipart, listing) while every node is up.
func TestClusterConformance(t *testing.T) {
	srv := s3server.SharedKind(t, s3server.MinIOCluster)
	ctx := context.Background()
	newStore := map[string]func(t *testing.T) *objstore.Store{
		"s3": func(t *testing.T) *objstore.Store {
			c := s3.Config{Bucket: srv.NewBucket(t), Endpoint: srv.Endpoint, Region: srv.Region, PathStyle: true,
				AccessKey: srv.AccessKey, SecretKey: srv.SecretKey, PartSize: 5 << 20}
			d, err := s3.Open(ctx, c)
			if err != nil {
				t.Fatal(err)
			}
			s := objstore.New(d, "s3://"+c.Bucket, objstore.Options{})
			t.Cleanup(func() { s.Close() })
			return s
		},
		"minio": func(t *testing.T) *objstore.Store {
			c := minio.Config{Bucket: srv.NewBucket(t), Endpoint: srv.Endpoint, Region: srv.Region,
				AccessKey: srv.AccessKey, SecretKey: srv.SecretKey, PartSize: 5 << 20}
			d, err := minio.Open(ctx, c)
			if err != nil {
				t.Fatal(err)
			}
			s := objstore.New(d, "minio://"+c.Bucket, objstore.Options{})
			t.Cleanup(func() { s.Close() })
			return s
		},
	}
	for _, driver := range []string{"s3", "minio"} {
		// 11 MiB: three parts of 5 MiB, multipart still, at half the
		// default's cost on 8 drives.
		t.Run(driver, func(t *testing.T) { objstoretest.Run(t, newStore[driver], objstoretest.Options{LargeSize: 11 << 20}) })
	}
}
