package s3server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/tierlog/tierlog/objstore"
	"github.com/tierlog/tierlog/objstore/s3"
)

// TestClusterKeepsServingWithANodeDown starts a cluster, kills a node,
// and checks objects written before and while it was down read back
// through the load balancer, before and after it is started again, and
// through every node once it is back (the restarted one reads what was
// written in its absence); a create-only put of an existing key still
// loses with the node down.
func TestClusterKeepsServingWithANodeDown(t *testing.T) {
	began := time.Now()
	step := func(what string) { t.Logf("%v: %s", time.Since(began).Round(time.Millisecond), what) }
	c := NewCluster(t)
	step("cluster up")
	if len(c.Nodes) != ClusterNodes {
		t.Fatalf("%d nodes, want %d", len(c.Nodes), ClusterNodes)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	bucket := c.NewBucket(t)
	d, err := s3.Open(ctx, s3.Config{Bucket: bucket, Endpoint: c.Endpoint, Region: c.Region, PathStyle: true,
		AccessKey: c.AccessKey, SecretKey: c.SecretKey})
	if err != nil {
		t.Fatal(err)
	}
	// Generous bounds, not speeds: under a CPU hog the cluster answers
	// 503 SlowDown for a while after a node dies (seen under make test
	// with stress-ng), and a put retries through it.
	st := objstore.New(d, "s3://"+bucket, objstore.Options{Timeout: 10 * time.Second, MaxAttempts: 20})
	defer st.Close()
	put := func(key string, opts objstore.PutOptions) error {
		body := bytes.Repeat([]byte(key), 1000)
		_, err := st.Put(ctx, key, bytes.NewReader(body), int64(len(body)), opts)
		return err
	}
	check := func(when string, keys ...string) {
		t.Helper()
		for _, k := range keys {
			got, err := st.ReadAll(ctx, k, 0, -1)
			if err != nil {
				t.Fatalf("%s: read %s: %v", when, k, err)
			}
			if !bytes.Equal(got, bytes.Repeat([]byte(k), 1000)) {
				t.Fatalf("%s: %s read back %d bytes that differ from those written", when, k, len(got))
			}
		}
	}
	if err := put("before", objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	down := c.Nodes[2]
	if err := down.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := down.Kill(); !errors.Is(err, errNodeState) {
		t.Fatalf("a second kill of node %d: %v", down.Index, err)
	}
	if down.Running() {
		t.Fatalf("node %d runs after its kill", down.Index)
	}
	step("node killed")
	check("node down", "before")
	if err := put("during", objstore.PutOptions{}); err != nil {
		t.Fatalf("a put with node %d down: %v", down.Index, err)
	}
	if err := put("during", objstore.PutOptions{IfNoneMatch: true}); !errors.Is(err, objstore.ErrPreconditionFailed) {
		t.Fatalf("a create-only put of an existing key with node %d down: %v", down.Index, err)
	}
	check("node down", "before", "during")
	step("written and read with the node down")
	if err := down.Start(ctx); err != nil {
		t.Fatal(err)
	}
	step("node back")
	if err := down.Start(ctx); !errors.Is(err, errNodeState) {
		t.Fatalf("a second start of node %d: %v", down.Index, err)
	}
	check("node back", "before", "during")
	// Every node serves the objects, the restarted one too.
	for _, n := range c.Nodes {
		nd, err := s3.Open(ctx, s3.Config{Bucket: bucket, Endpoint: n.Endpoint, Region: c.Region, PathStyle: true,
			AccessKey: c.AccessKey, SecretKey: c.SecretKey})
		if err != nil {
			t.Fatalf("node %d: %v", n.Index, err)
		}
		ns := objstore.New(nd, fmt.Sprintf("s3://%s@node%d", bucket, n.Index), objstore.Options{Timeout: 10 * time.Second})
		for _, k := range []string{"before", "during"} {
			if got, err := ns.ReadAll(ctx, k, 0, -1); err != nil || !bytes.Equal(got, bytes.Repeat([]byte(k), 1000)) {
				t.Fatalf("node %d: read %s: %d bytes, %v", n.Index, k, len(got), err)
			}
		}
		ns.Close()
	}
}
