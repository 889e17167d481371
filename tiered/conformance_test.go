package tiered_test

import (
	"path/filepath"
	"testing"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/local"
	"github.com/tierlog/tierlog/objstore"
	"github.com/tierlog/tierlog/objstore/fs"
	"github.com/tierlog/tierlog/testing/s3server"
	"github.com/tierlog/tierlog/testing/storagetest"
	"github.com/tierlog/tierlog/tiered"
)

// offloading is a tiered partition that offloads whenever the high
// watermark moves, with local.retention.ms=0, so that everything below the
// high watermark is read from the bucket.
type offloading struct{ *tiered.Partition }

func (o offloading) SetHighWatermark(hw int64) error {
	if err := o.Partition.SetHighWatermark(hw); err != nil {
		return err
	}
	_, err := o.Offload(ctx)
	return err
}

type tieredHarness struct {
	dir     string
	store   *objstore.Store
	metrics *tiered.Metrics // nil: the partition's own
}

func (h *tieredHarness) Open(t *testing.T, c backend.Config) backend.Partition {
	t.Helper()
	c.LocalRetentionMs = 0
	c.FileDeleteDelayMs = 0
	l, err := local.Open(h.dir, local.Options{Config: c, LogStartOffset: -1, HighWatermark: -1})
	if err != nil {
		t.Fatal(err)
	}
	p, err := tiered.Open(ctx, l, tiered.Options{Store: h.store, Prefix: "conf/t-0", LeaderEpoch: 1, Metrics: h.metrics})
	if err != nil {
		t.Fatal(err)
	}
	return offloading{p}
}

func TestConformanceOverFS(t *testing.T) {
	var stores []*objstore.Store
	metrics := new(tiered.Metrics)
	all := storagetest.Run(t, func(t *testing.T) storagetest.Harness {
		d, err := fs.Open(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		s := objstore.New(d, "file://conformance", objstore.Options{})
		stores = append(stores, s)
		return &tieredHarness{dir: filepath.Join(t.TempDir(), "t-0"), store: s, metrics: metrics}
	})
	// The battery, when it ran whole, must really have read from the bucket.
	var gets int64
	for _, s := range stores {
		gets += s.Stats().Requests[objstore.OpGet]
	}
	reads := metrics.RemoteReads.Load()
	t.Logf("%d reads served from the bucket (%d GETs, the rest from its chunk cache)", reads, gets)
	if all && (reads < 500 || gets < 30) {
		t.Fatalf("only %d reads from the bucket (%d GETs): the battery barely read from it", reads, gets)
	}
}

// TestConformanceOverS3AndMinIO runs the battery over each real S3 server
// (MinIO and versitygw) through each driver (s3 and minio).
func TestConformanceOverS3AndMinIO(t *testing.T) {
	eachServer(t, func(t *testing.T, srv *s3server.Server) {
		for _, driver := range []string{"s3", "minio"} {
			t.Run(driver, func(t *testing.T) {
				storagetest.Run(t, func(t *testing.T) storagetest.Harness {
					return &tieredHarness{dir: filepath.Join(t.TempDir(), "t-0"), store: realStoreOn(t, srv, driver)}
				})
			})
		}
	})
}

// TestConformanceOverMinIOCluster runs the battery over a distributed
// MinIO of 4 nodes (s3server.MinIOCluster) through each driver.
func TestConformanceOverMinIOCluster(t *testing.T) {
	srv := s3server.SharedKind(t, s3server.MinIOCluster)
	for _, driver := range []string{"s3", "minio"} {
		t.Run(driver, func(t *testing.T) {
			storagetest.Run(t, func(t *testing.T) storagetest.Harness {
				return &tieredHarness{dir: filepath.Join(t.TempDir(), "t-0"), store: realStoreOn(t, srv, driver)}
			})
		})
	}
}
