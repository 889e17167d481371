package s3server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tierlog/tierlog/objstore"
	"github.com/tierlog/tierlog/objstore/s3"
)

// ClusterNodes and DrivesPerNode are the shape of the clusters this
// package starts: 4 MinIO server processes of 2 drives each, one erasure
// set of 8 drives at MinIO's default parity for 8 drives, EC:4 (a write
// quorum of 5, a read quorum of 4), as operators run it; the cluster
// keeps reading and writing with any one node down.
//
// Seen here under the soak at that parity: a PUT whose coordinating node
// is SIGKILLed after the new version reached 4 drives leaves two versions
// each at read quorum, and the cluster answers one or the other, or 404;
// a PUT whose client goes away mid-request can leave the object on 5
// drives, gone from the other 3, answered 404 for good. tierlog refuses
// such answers safely and restores a lost manifest from its backup
// (tiered's backup.go). EC:3 (a strict-majority read quorum) was tried
// and made things worse: with one node down its writes and deletes fail
// where EC:4's pass (TestMinIOClusterNodeKill left unnamed objects).
const (
	ClusterNodes  = 4
	DrivesPerNode = 2
)

// Cluster is a distributed MinIO on loopback: ClusterNodes processes of
// the MinIO binary, each with its own --address and its own drives under
// one temporary directory, sharing one set of root credentials. Its
// Server's Endpoint is a load balancer in front of the nodes (round robin
// over those in rotation: a killed node leaves it, a restarted one comes
// back once it has rejoined); each Node's Endpoint is the node itself.
//
// A test may SIGKILL a node (Node.Kill) and start it again with the same
// arguments and drives (Node.Start). Close stops every node and removes
// the drives, but for a cluster of a test that failed (NewCluster).
type Cluster struct {
	*Server
	Nodes      []*Node
	dir        string
	lb         *balancer
	keepDrives bool // set before Close, by NewCluster's cleanup only
}

// Node is one server process of a Cluster. Its methods may be called
// from any goroutine.
type Node struct {
	Index    int
	Endpoint string // http://127.0.0.1:port, the node's own S3 endpoint

	c         *Cluster
	bin       string
	argv, env []string

	mu   sync.Mutex
	proc *process // nil while killed
}

// errNodeState: a Kill of a node that is not running, or a Start of one
// that is.
var errNodeState = errors.New("s3server: cluster node in the wrong state")

// NewCluster starts a private cluster for t (not shared with other tests,
// so that t may kill its nodes) and stops it when t ends. Without the
// MinIO binary the test is skipped with a message naming `make minio`.
func NewCluster(t testing.TB) *Cluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, err := StartCluster(ctx)
	if errors.Is(err, errNoServer) {
		t.Skipf("s3server: %v", err)
	}
	if err != nil {
		t.Fatalf("s3server: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			// The drives are what explains a failure the cluster had a
			// part in (which drive holds which version of an object).
			c.keepDrives = true
			t.Logf("s3server: %s: the test failed; its nodes' drives are kept in %s", MinIOCluster, c.dir)
		}
		c.Close()
	})
	return c
}

// StartCluster starts a cluster from the MinIO binary ($TIERLOG_MINIO or
// .cache/bin/minio) and returns once every node answers its cluster
// health check (the cluster has write quorum as that node sees it). The
// caller closes it.
func StartCluster(ctx context.Context) (*Cluster, error) {
	bin, err := findBinary("minio", EnvMinIO, "make minio")
	if err != nil {
		return nil, err
	}
	root, err := os.MkdirTemp("", "tierlog-minio-cluster-")
	if err != nil {
		return nil, err
	}
	access, secret := "tierlog"+randomHex(4), randomHex(16)
	var lastErr error
	for try := 0; try < 3; try++ { // a free port can be taken before the node binds it
		c, err := startClusterOnce(ctx, bin, filepath.Join(root, fmt.Sprintf("try%d", try)), access, secret)
		if err == nil {
			c.dir = root
			return c, nil
		}
		lastErr = err
		if ctx.Err() != nil {
			break
		}
	}
	os.RemoveAll(root)
	return nil, lastErr
}

// startClusterOnce starts every node on fresh ports and drives under dir
// and waits for them; on failure it stops those it started.
func startClusterOnce(ctx context.Context, bin, dir, access, secret string) (*Cluster, error) {
	ports := make([]int, 2*ClusterNodes) // an S3 port and a console port per node
	for i := range ports {
		p, err := freePort()
		if err != nil {
			return nil, err
		}
		ports[i] = p
	}
	var drives []string // every node lists every drive of the cluster, in one pool
	for n := 0; n < ClusterNodes; n++ {
		for d := 1; d <= DrivesPerNode; d++ {
			path := filepath.Join(dir, fmt.Sprintf("node%d", n+1), fmt.Sprintf("drive%d", d))
			if err := os.MkdirAll(path, 0o755); err != nil {
				return nil, err
			}
			drives = append(drives, fmt.Sprintf("http://127.0.0.1:%d%s", ports[n], path))
		}
	}
	env := []string{"MINIO_ROOT_USER=" + access, "MINIO_ROOT_PASSWORD=" + secret, "MINIO_REGION=us-east-1",
		"MINIO_UPDATE=off", "MINIO_BROWSER=off", "MINIO_CI_CD=1"} // CI_CD: drives on the root disk are fine
	c := &Cluster{}
	for n := 0; n < ClusterNodes; n++ {
		argv := append([]string{"server", "--address", fmt.Sprintf("127.0.0.1:%d", ports[n]),
			"--console-address", fmt.Sprintf("127.0.0.1:%d", ports[ClusterNodes+n]), "--quiet"}, drives...)
		// In a container (/.dockerenv) MinIO waits for a loopback host
		// to resolve to another address, forever; _MINIO_SERVER_LOCAL
		// names the node's own host:port instead (ignored elsewhere).
		nodeEnv := append(slices.Clip(env), fmt.Sprintf("_MINIO_SERVER_LOCAL=127.0.0.1:%d", ports[n]))
		node := &Node{Index: n, Endpoint: fmt.Sprintf("http://127.0.0.1:%d", ports[n]), c: c, bin: bin, argv: argv, env: nodeEnv}
		p, err := spawn(bin, argv, nodeEnv)
		if err != nil {
			c.stopNodes()
			return nil, err
		}
		node.proc = p
		c.Nodes = append(c.Nodes, node)
	}
	for _, n := range c.Nodes {
		if err := n.waitReady(ctx); err != nil {
			c.stopNodes()
			return nil, err
		}
	}
	if err := s3.CreateBucket(ctx, c.probeConfig(c.Nodes[0], access, secret)); err != nil {
		c.stopNodes()
		return nil, fmt.Errorf("s3server: %s: create the probe bucket: %w", MinIOCluster, err)
	}
	addrs := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		addrs[i] = strings.TrimPrefix(n.Endpoint, "http://")
	}
	lb, err := newBalancer(addrs)
	if err != nil {
		c.stopNodes()
		return nil, err
	}
	c.lb = lb
	var once sync.Once
	c.Server = &Server{Endpoint: lb.endpoint(), AccessKey: access, SecretKey: secret, Region: "us-east-1",
		Kind: MinIOCluster, cluster: c,
		stop: func() {
			once.Do(func() {
				lb.close()
				c.stopNodes()
				if c.dir != "" && !c.keepDrives {
					os.RemoveAll(c.dir)
				}
			})
		}}
	return c, nil
}

// stopNodes SIGKILLs every node still running.
func (c *Cluster) stopNodes() {
	for _, n := range c.Nodes {
		n.Kill()
	}
}

// Kill takes the node out of the load balancer's rotation, SIGKILLs it
// and returns once the process has been reaped; the cluster goes on
// without it. Requests in flight through it break. Killing a node that
// is not running is an error.
func (n *Node) Kill() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.proc == nil {
		return fmt.Errorf("%w: kill node %d (%s): not running", errNodeState, n.Index, n.Endpoint)
	}
	if n.c.lb != nil {
		n.c.lb.leave(n.Index)
	}
	n.proc.stop()
	n.proc = nil
	return nil
}

// DrainAndKill is Kill for a node no client request is in flight
// through: the node leaves the load balancer's rotation, each of its
// client connections is closed once quiet (no byte either way) for
// quiet, and then, or when ctx ends with requests still in flight, it is
// SIGKILLed. The node still dies in the middle of its peers' requests
// (a node's share of every write), but not in the middle of one it
// coordinates: a PUT whose coordinating node is SIGKILLed after the new
// version reached some drives and before it was committed or undone
// leaves the object unreadable (neither version at read quorum: 404 or
// 503 until an operator heals it), which MinIO, not its client, must
// answer for. DrainAndKill reports whether the drain finished.
func (n *Node) DrainAndKill(ctx context.Context, quiet time.Duration) (bool, error) {
	drained := true
	if n.c.lb != nil {
		drained = n.c.lb.drain(ctx, n.Index, quiet)
	}
	return drained, n.Kill()
}

// Start starts a killed node again, with the arguments and drives it had,
// and returns once it has rejoined, or ctx ends: it answers its cluster
// health check (the cluster has write quorum as it sees it) and reads an
// object written while it was down. Only then does it join the load
// balancer's rotation again.
//
// The second condition matters: a node just started answers its health
// check while it does not yet reach every other node's drives, and then
// answers 404 NoSuchKey, often for ~20 s (its drive monitor runs every
// 15 s) and on a busy machine for over a minute, for objects written
// while it was down, and even accepts a
// create-only put (If-None-Match: *) over one, replacing it for the
// whole cluster (seen with the MinIO the Makefile builds). No client can
// tell that from a deleted object, and a conditional commit through that
// node is no longer one. Reading the probe is not proof enough on a busy
// machine (other buckets' objects were still 404 after it), so the node
// then waits out one run of its drive monitor (nodeSettle) before it
// rejoins.
func (n *Node) Start(ctx context.Context) error {
	n.mu.Lock()
	if n.proc != nil {
		n.mu.Unlock()
		return fmt.Errorf("%w: start node %d (%s): already running", errNodeState, n.Index, n.Endpoint)
	}
	probe, err := n.c.putProbe(ctx, n)
	if err != nil {
		n.mu.Unlock()
		return err
	}
	p, err := spawn(n.bin, n.argv, n.env)
	if err != nil {
		n.mu.Unlock()
		return err
	}
	n.proc = p
	n.mu.Unlock()
	began := time.Now()
	if err := n.waitReady(ctx); err != nil {
		return fmt.Errorf("%w (started %v before)", err, time.Since(began).Round(time.Millisecond))
	}
	ready := time.Since(began)
	if err := n.waitProbe(ctx, probe); err != nil {
		return fmt.Errorf("%w (healthy %v after its start, %v before this)", err,
			ready.Round(time.Millisecond), time.Since(began).Round(time.Millisecond))
	}
	read := time.Since(began)
	select {
	case <-ctx.Done():
		return fmt.Errorf("s3server: %s node %d: settling after its start: %w (healthy after %v, read the probe after %v)",
			MinIOCluster, n.Index, ctx.Err(), ready.Round(time.Millisecond), read.Round(time.Millisecond))
	case <-time.After(nodeSettle):
	}
	if n.c.lb != nil {
		n.c.lb.join(n.Index)
	}
	return nil
}

// nodeSettle is how long a restarted node stays out of the balancer's
// rotation after it reads the probe: one run of MinIO's drive monitor
// (every 15 s), after which it reaches every peer's drives.
const nodeSettle = 16 * time.Second

// probeBucket holds the objects Start writes while a node is down.
const probeBucket = "tierlog-cluster-probe"

// probeConfig is the s3 driver's config for the probe bucket on node.
func (c *Cluster) probeConfig(node *Node, access, secret string) s3.Config {
	return s3.Config{Bucket: probeBucket, Endpoint: node.Endpoint, Region: "us-east-1", PathStyle: true, AccessKey: access, SecretKey: secret}
}

// putProbe writes a fresh object through a running node other than down
// (which must be down) and returns its key.
func (c *Cluster) putProbe(ctx context.Context, down *Node) (string, error) {
	var via *Node
	for _, n := range c.Nodes {
		if n != down && n.Running() {
			via = n
			break
		}
	}
	if via == nil {
		return "", fmt.Errorf("%w: start node %d: no other node runs to write a probe through", errNodeState, down.Index)
	}
	d, err := s3.New(ctx, c.probeConfig(via, c.AccessKey, c.SecretKey))
	if err != nil {
		return "", err
	}
	key := fmt.Sprintf("node%d-%s", down.Index, randomHex(8))
	body := []byte(key)
	for {
		_, err := d.Put(ctx, key, bytes.NewReader(body), int64(len(body)), objstore.PutOptions{})
		if err == nil {
			return key, nil
		}
		if !errors.Is(err, objstore.ErrRetryable) {
			return "", fmt.Errorf("s3server: write the probe %s through node %d: %w", key, via.Index, err)
		}
		select { // the cluster may still be noticing the node is gone
		case <-ctx.Done():
			return "", fmt.Errorf("s3server: write the probe %s through node %d: %w (%w)", key, via.Index, ctx.Err(), err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// waitProbe waits until node reads the probe object key (written while it
// was down) and is still running.
func (n *Node) waitProbe(ctx context.Context, key string) error {
	d, err := s3.New(ctx, n.c.probeConfig(n, n.c.AccessKey, n.c.SecretKey))
	if err != nil {
		return err
	}
	var lastErr error
	for {
		n.mu.Lock()
		p := n.proc
		n.mu.Unlock()
		if p == nil {
			return fmt.Errorf("%w: node %d was killed while it rejoined", errNodeState, n.Index)
		}
		if _, lastErr = d.Head(ctx, key); lastErr == nil {
			return nil
		}
		select {
		case <-p.exited:
			return fmt.Errorf("s3server: %s node %d exited while it rejoined\n%s", MinIOCluster, n.Index, strings.TrimSpace(p.out.String()))
		case <-ctx.Done():
			return fmt.Errorf("s3server: %s node %d does not read %s/%s, written while it was down: %w (%w)", MinIOCluster, n.Index, probeBucket, key, ctx.Err(), lastErr)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Running reports whether the node's process runs.
func (n *Node) Running() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.proc != nil
}

// pid is the node's process id, 0 while killed.
func (n *Node) pid() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.proc == nil {
		return 0
	}
	return n.proc.pid
}

// waitReady waits until the node's /minio/health/cluster answers 200
// while its process is alive; on failure the error carries the tail of
// the node's output.
func (n *Node) waitReady(ctx context.Context) error {
	n.mu.Lock()
	p := n.proc
	n.mu.Unlock()
	if p == nil {
		return fmt.Errorf("%w: wait for node %d (%s): not running", errNodeState, n.Index, n.Endpoint)
	}
	if err := waitHealthy(ctx, n.Endpoint+"/minio/health/cluster", minioReady, p.exited); err != nil {
		out := strings.TrimSpace(p.out.String())
		if len(out) > 4000 {
			out = out[len(out)-4000:]
		}
		return fmt.Errorf("s3server: %s node %d on %s: %w\n%s", MinIOCluster, n.Index, n.Endpoint, err, out)
	}
	return nil
}
