package tiered_test

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/manifest"
	"github.com/tierlog/tierlog/objstore"
	"github.com/tierlog/tierlog/objstore/s3"
	"github.com/tierlog/tierlog/testing/s3server"
	"github.com/tierlog/tierlog/tiered"
)

// A distributed MinIO (testing/s3server's Cluster: 4 nodes, one erasure
// set of 8 drives, behind a load balancer) loses a node while a partition
// offloads and serves remote reads: one node SIGKILLed in the middle of
// an upload, then another in the middle of a remote read, each started
// again. The requests in flight through the killed node break; the
// balancer sends the next ones to the nodes left.

// clusterOptions: an attempt may take a while on a cluster missing a node
// on a busy machine; a request cut by a node's death fails at once, so
// the retries cost little.
var clusterOptions = objstore.Options{Timeout: 10 * time.Second, MaxAttempts: 3, BaseBackoff: 50 * time.Millisecond, MaxBackoff: 500 * time.Millisecond}

// clusterBackstop bounds each wait of the node-kill test; it only keeps a
// hang from running to the test binary's timeout.
const clusterBackstop = 2 * time.Minute

// rejoinBackstop bounds a node's restart. A restarted MinIO node reads
// what was written while it was down only once it reaches its peers'
// drives; on a busy machine that has taken two minutes (CI: healthy, then
// reading the probe written while it was down about two minutes after
// the kill).
const rejoinBackstop = 5 * time.Minute

// TestMinIOClusterNodeKill: no acknowledged record is lost or altered,
// every offload and remote read succeeds or fails with a retryable error
// (a storage error for reads: retryable, or a 404 from a cluster short of
// the drives that hold a segment), both resume once the node is
// back, and the bucket holds nothing gc would have to guess about: every
// object is the manifest, one it names or one a live upload intent names.
func TestMinIOClusterNodeKill(t *testing.T) {
	c := s3server.NewCluster(t)
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	pr := clusterStore(t, c)
	fp := newFaultyPartition(t, pr, "nodekill")

	rd := startRemoteReader(t, fp)
	defer rd.stop()

	nk := &nodeKiller{t: t, fp: fp, rd: rd}
	// A node killed as a segment uploads, then another as a remote read
	// gets its bytes.
	first := rng.IntN(len(c.Nodes))
	nk.run(c.Nodes[first], "an upload", func(e objstore.Event) bool {
		return e.Op == objstore.OpPut && strings.HasSuffix(e.Key, manifest.LogSuffix)
	})
	second := (first + 1 + rng.IntN(len(c.Nodes)-1)) % len(c.Nodes)
	nk.run(c.Nodes[second], "a remote read", func(e objstore.Event) bool { return e.Op == objstore.OpGet })

	rd.stop()
	ok, failed := rd.ok.Load(), rd.failed.Load()
	t.Logf("remote reads: %d served, %d failed (%d of them a 404 while a node was down); store: %d attempts, %d failed",
		ok, failed, rd.notFound.Load(), pr.attempts.Load(), pr.failed.Load())
	settle(t, fp)
	removed, err := tiered.GC(ctx, fp.pr.store, fp.prefix, tiered.GCOptions{DryRun: true})
	if err != nil {
		t.Fatalf("gc dry run: %v", err)
	}
	t.Logf("gc would remove %d object(s): %v", len(removed), removed)
	checkAfterKills(t, fp)
}

// checkAfterKills is checkHealthy without its time limits (a request on
// an object a killed node held a lock on waits until MinIO expires the
// lock): the bucket holds every segment below the local log start; every
// acknowledged batch reads back byte-identical through both tiers, and
// one by one from the bucket; a restore gives them back; gc, tried until
// it succeeds, leaves only the manifest, what it names and live intents,
// and removes the planted garbage.
func checkAfterKills(t *testing.T, fp *faultyPartition) {
	t.Helper()
	o := fp.p.Offsets()
	if n, _ := fp.p.CopyLag(); n != 0 || o.LocalLogStart == 0 || o.LocalLogStart >= o.LogEnd {
		t.Fatalf("after the last offload: copy lag %d segments, offsets %+v", n, o)
	}
	got := batchesFrom(t, fp.p, 0)
	if len(got) != len(fp.want) {
		t.Errorf("read back %d batches, want %d", len(got), len(fp.want))
	}
	for last, b := range fp.want {
		if !bytes.Equal(got[last], b) {
			t.Fatalf("batch ending at %d lost or changed (local log starts at %d)", last, o.LocalLogStart)
		}
	}
	if n := fp.readRemote(t, 0, clusterBackstop); n != 0 {
		t.Errorf("%d remote reads failed with every node up", n)
	}
	fp.restore(t, false, clusterBackstop)
	began := time.Now()
	for {
		removed, err := tiered.GC(ctx, fp.pr.store, fp.prefix, tiered.GCOptions{})
		if err == nil {
			t.Logf("gc removed %d object(s)", len(removed))
			break
		}
		retryableOrNil(t, "gc", err)
		if time.Since(began) > clusterBackstop {
			t.Fatalf("gc still fails after %v: %v", clusterBackstop, err)
		}
		t.Logf("gc failed retryably (tried again): %v", err)
		time.Sleep(time.Second)
	}
	checkOnlyNamed(t, fp.pr.store, fp.prefix)
	for _, k := range fp.orphan {
		if _, err := fp.pr.store.Head(ctx, k); !errors.Is(err, objstore.ErrNotFound) {
			t.Errorf("gc left the planted garbage %s: %v", k, err)
		}
	}
}

// settle waits, with every node up, until an offload succeeds and every
// upload intent under the partition's prefix reads back. A node killed
// while it coordinated requests leaves their locks held on the other
// nodes until MinIO expires them: a request on such an object waits past
// its timeout meanwhile (gc then judges an intent it cannot read by its
// age alone, and rightly leaves it).
func settle(t *testing.T, fp *faultyPartition) {
	t.Helper()
	began := time.Now()
	for tries := 1; ; tries++ {
		_, err := fp.p.Offload(ctx)
		retryableOrNil(t, "offload", err)
		if err == nil {
			err = readIntents(fp)
		}
		if err == nil {
			t.Logf("settled after %v (%d tries)", time.Since(began).Round(time.Millisecond), tries)
			return
		}
		if tries == 1 {
			t.Logf("not settled yet: %v", err)
		}
		if time.Since(began) > clusterBackstop {
			t.Fatalf("the cluster has not settled after %v: %v", clusterBackstop, err)
		}
		time.Sleep(time.Second)
	}
}

// readIntents reads every upload intent under the partition's prefix.
func readIntents(fp *faultyPartition) error {
	var intents []string
	if err := fp.pr.store.List(ctx, fp.prefix+"/", func(o objstore.ObjectInfo) bool {
		if strings.HasSuffix(o.Key, tiered.IntentSuffix) {
			intents = append(intents, o.Key)
		}
		return true
	}); err != nil {
		return err
	}
	for _, k := range intents {
		if _, err := fp.pr.store.ReadAll(ctx, k, 0, -1); err != nil && !errors.Is(err, objstore.ErrNotFound) {
			return err
		}
	}
	return nil
}

// clusterStore opens a store through the s3 driver on a fresh bucket of
// c, through its load balancer, counting attempts as proxied does.
func clusterStore(t *testing.T, c *s3server.Cluster) *proxied {
	t.Helper()
	pr := &proxied{srv: c.Server}
	bucket := c.NewBucket(t)
	opts := clusterOptions
	opts.OnRequest = func(e objstore.Event) {
		pr.attempts.Add(1)
		if e.Err != nil {
			pr.failed.Add(1)
		}
		if h := pr.hook.Load(); h != nil {
			(*h)(e)
		}
	}
	d, err := s3.New(ctx, s3.Config{Bucket: bucket, Endpoint: c.Endpoint, Region: c.Region, PathStyle: true,
		AccessKey: c.AccessKey, SecretKey: c.SecretKey})
	if err != nil {
		t.Fatal(err)
	}
	pr.store = objstore.New(d, "s3://"+bucket+"?endpoint="+c.Endpoint, opts)
	t.Cleanup(func() { pr.store.Close() })
	return pr
}

// nodeKiller kills a node in the middle of the partition's work and
// brings it back.
type nodeKiller struct {
	t  *testing.T
	fp *faultyPartition
	rd *remoteReader
}

// run arms the store's hook to SIGKILL node at the first request attempt
// when matches, produces and offloads until that has happened and a few
// offloads more have been tried, starts the node again, and produces and
// offloads until an offload and a remote read have succeeded since.
func (nk *nodeKiller) run(node *s3server.Node, during string, matches func(objstore.Event) bool) {
	t, fp := nk.t, nk.fp
	killed := make(chan struct{})
	var once sync.Once
	var readsAtKill atomic.Int64
	hook := func(e objstore.Event) {
		if !matches(e) {
			return
		}
		once.Do(func() {
			if err := node.Kill(); err != nil {
				t.Errorf("kill node %d: %v", node.Index, err)
			}
			readsAtKill.Store(nk.rd.ok.Load())
			close(killed)
		})
	}
	fp.pr.hook.Store(&hook)
	deadline := time.Now().Add(clusterBackstop)
	var down, failed int
	for {
		select {
		case <-killed:
			down++
		default:
		}
		fp.produce(t, 150)
		if !nk.offload() {
			failed++
		}
		if down >= 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("node %d was not killed during %s within %v", node.Index, during, clusterBackstop)
		}
	}
	fp.pr.hook.Store(nil)
	t.Logf("node %d killed during %s: %d offload(s) failed retryably, %d remote reads served while it was down",
		node.Index, during, failed, nk.rd.ok.Load()-readsAtKill.Load())
	sctx, cancel := context.WithTimeout(ctx, rejoinBackstop)
	defer cancel()
	began := time.Now()
	if err := node.Start(sctx); err != nil {
		t.Fatalf("start node %d again: %v", node.Index, err)
	}
	t.Logf("node %d rejoined after %v", node.Index, time.Since(began).Round(time.Millisecond))
	readsAtStart := nk.rd.ok.Load()
	resumeBy := time.Now().Add(clusterBackstop)
	for tries := 1; ; tries++ {
		fp.produce(t, 150)
		if nk.offload() && nk.rd.ok.Load() > readsAtStart {
			t.Logf("node %d back: offloads and remote reads resumed (%d offload(s))", node.Index, tries)
			return
		}
		if time.Now().After(resumeBy) {
			t.Fatalf("node %d back: offloads and remote reads have not resumed after %d offloads (%d reads served since)",
				node.Index, tries, nk.rd.ok.Load()-readsAtStart)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// offload runs one Offload: it must succeed or fail retryably and never
// fence the partition's own writer. It reports whether it succeeded.
func (nk *nodeKiller) offload() bool {
	_, err := nk.fp.p.Offload(ctx)
	if f := nk.fp.p.Fenced(); f != nil {
		nk.t.Fatalf("an offload with a node down fenced its own writer: %v", f)
	}
	retryableOrNil(nk.t, "offload", err)
	return err == nil
}

// remoteReader reads batches below the local log start from the bucket,
// at random, until stopped: each read returns the batch acknowledged there
// byte for byte, or a storage error (see loop).
type remoteReader struct {
	fp       *faultyPartition
	want     map[int64][]byte // frozen at the start: last offset -> batch
	lasts    []int64          // its keys, sorted, all below the local log start then
	ok       atomic.Int64
	failed   atomic.Int64
	notFound atomic.Int64 // of failed: a 404 from a cluster short of drives
	stopc    chan struct{}
	done     chan struct{}
	once     sync.Once

	mu     sync.Mutex
	sample error // the first failure, for the log
}

func startRemoteReader(t *testing.T, fp *faultyPartition) *remoteReader {
	end := fp.p.Offsets().LocalLogStart
	rd := &remoteReader{fp: fp, want: map[int64][]byte{}, stopc: make(chan struct{}), done: make(chan struct{})}
	for last, b := range fp.want {
		if last < end {
			rd.want[last] = b
			rd.lasts = append(rd.lasts, last)
		}
	}
	slices.Sort(rd.lasts)
	if len(rd.lasts) < 2 {
		t.Fatalf("only %d batches below the local log start %d", len(rd.lasts), end)
	}
	go rd.loop(t)
	return rd
}

func (rd *remoteReader) loop(t *testing.T) {
	defer close(rd.done)
	rng := rand.New(rand.NewPCG(uint64(len(rd.lasts)), 1))
	for {
		select {
		case <-rd.stopc:
			return
		default:
		}
		i := rng.IntN(len(rd.lasts))
		base := int64(0)
		if i > 0 {
			base = rd.lasts[i-1] + 1
		}
		err := rd.readOne(t, base, rd.lasts[i])
		if err == nil {
			rd.ok.Add(1)
			continue
		}
		switch {
		case !errors.Is(err, backend.ErrStorage):
			t.Errorf("remote read %d: not a storage error: %v", base, err)
		case errors.Is(err, objstore.ErrRetryable):
		case errors.Is(err, objstore.ErrNotFound):
			// A distributed MinIO answers 404 for an object it holds when
			// the drives that have it are too few to decide: written while
			// one node was down, read while another is, before healing has
			// copied it back. The segment is named by the manifest, so the
			// read fails as a storage error (KAFKA_STORAGE_ERROR, which a
			// client retries); checkAfterKills reads every segment back
			// with all nodes up.
			rd.notFound.Add(1)
		default:
			t.Errorf("remote read %d: a storage error neither retryable nor a not-found: %v", base, err)
		}
		rd.mu.Lock()
		if rd.sample == nil {
			rd.sample = err
			t.Logf("e.g. remote read %d: %v", base, err)
		}
		rd.mu.Unlock()
		rd.failed.Add(1)
		time.Sleep(20 * time.Millisecond) // a dead node refuses at once: do not spin
	}
}

// readOne reads the batch base..last from the bucket and compares it.
func (rd *remoteReader) readOne(t *testing.T, base, last int64) error {
	r, err := rd.fp.p.Read(ctx, base, backend.ReadOptions{MaxBytes: 1, MinOneBatch: true})
	if err != nil {
		return err
	}
	defer r.Close()
	var buf bytes.Buffer
	if _, err := r.WriteTo(&buf); err != nil {
		return err
	}
	if !bytes.Equal(buf.Bytes(), rd.want[last]) {
		t.Errorf("remote read %d: WRONG BYTES: %d bytes, want the batch %d..%d (%d bytes)", base, buf.Len(), base, last, len(rd.want[last]))
	}
	return nil
}

func (rd *remoteReader) stop() {
	rd.once.Do(func() { close(rd.stopc) })
	<-rd.done
}
