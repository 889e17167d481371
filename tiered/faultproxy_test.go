package tiered_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/local"
	"github.com/tierlog/tierlog/manifest"
	"github.com/tierlog/tierlog/objstore"
	"github.com/tierlog/tierlog/objstore/minio"
	"github.com/tierlog/tierlog/objstore/s3"
	"github.com/tierlog/tierlog/testing/faultproxy"
	"github.com/tierlog/tierlog/testing/s3server"
	"github.com/tierlog/tierlog/tiered"
)

// Network faults between tierlog and a real S3 server: toxiproxy in
// process (testing/faultproxy) in front of each server kind, the tiered
// layer's operations (offload, remote reads, restore, gc) run through it
// one fault at a time, and after each fault, with the proxy healthy again,
// nothing is lost.

// proxiedOptions give the stores behind the proxy a bound of
// 2 × 1 s + at most 10 ms of backoff, so a black hole costs seconds.
var proxiedOptions = objstore.Options{Timeout: time.Second, MaxAttempts: 2, BaseBackoff: 10 * time.Millisecond, MaxBackoff: 20 * time.Millisecond}

// proxySlack is what the tests log past a bound for scheduling on a
// loaded 2-core machine; no test fails on it.
const proxySlack = 1500 * time.Millisecond

// opCeiling is how long one tiered operation (many requests) may take
// under a fault that is not a black hole, as timed logs it.
const opCeiling = 30 * time.Second

// proxied is a store on a fresh bucket of srv reached through a fault
// proxy, counting request attempts and the failed ones.
type proxied struct {
	srv   *s3server.Server
	px    *faultproxy.Proxy
	store *objstore.Store

	attempts, failed atomic.Int64
	// hook, when set, sees every attempt (after the counters).
	hook atomic.Pointer[func(objstore.Event)]
}

// newProxied starts a proxy in front of srv and opens a store through it
// with driver ("s3" or "minio"). The bucket is created directly on srv.
func newProxied(t *testing.T, srv *s3server.Server, driver string) *proxied {
	t.Helper()
	pr := &proxied{srv: srv, px: faultproxy.Start(t, srv.Endpoint)}
	bucket := srv.NewBucket(t)
	opts := proxiedOptions
	opts.OnRequest = func(e objstore.Event) {
		pr.attempts.Add(1)
		if e.Err != nil {
			pr.failed.Add(1)
		}
		if h := pr.hook.Load(); h != nil {
			(*h)(e)
		}
	}
	var d objstore.Driver
	var err error
	switch driver {
	case "s3":
		d, err = s3.New(ctx, s3.Config{Bucket: bucket, Endpoint: pr.px.Endpoint, Region: srv.Region, PathStyle: true,
			AccessKey: srv.AccessKey, SecretKey: srv.SecretKey})
	default:
		d, err = minio.New(minio.Config{Bucket: bucket, Endpoint: pr.px.Endpoint, Region: srv.Region,
			AccessKey: srv.AccessKey, SecretKey: srv.SecretKey})
	}
	if err != nil {
		t.Fatal(err)
	}
	pr.store = objstore.New(d, driver+"://"+bucket+"?endpoint="+pr.px.Endpoint, opts)
	t.Cleanup(func() { pr.store.Close() })
	return pr
}

// faultyPartition is one partition of the tests: its own local directory
// and prefix, the records acknowledged so far (last offset -> batch, read
// from the local log before any offload), and planted garbage.
type faultyPartition struct {
	pr     *proxied
	dir    string
	prefix string
	p      *tiered.Partition
	want   map[int64][]byte
	orphan []string // planted garbage gc must remove: a segment object and its dead intent
}

// faultCfg: small segments (a few per 600 records) so that an operation
// makes many requests yet stays quick under a bandwidth cap; local
// retention 0 so offloaded segments are read from the bucket.
func faultCfg(t testing.TB) backend.Config {
	return cfg(t, "segment.bytes", "65536", "local.retention.ms", "0", "file.delete.delay.ms", "0", "retention.ms", "-1",
		"remote.storage.enable", "true")
}

// newFaultyPartition opens a partition over pr's store (no fault on),
// produces, offloads, produces again and plants garbage, so that every
// operation has work under the fault to come: segments to upload, remote
// segments to read and restore, garbage to collect.
func newFaultyPartition(t *testing.T, pr *proxied, name string) *faultyPartition {
	t.Helper()
	fp := &faultyPartition{pr: pr, dir: filepath.Join(t.TempDir(), "orders-0"), prefix: "tl/" + name + "/orders-0", want: map[int64][]byte{}}
	l, err := local.Open(fp.dir, local.Options{Config: faultCfg(t), LogStartOffset: -1, HighWatermark: -1})
	if err != nil {
		t.Fatal(err)
	}
	// No chunk cache and no read-ahead: every remote read goes through the
	// proxy, in the caller's goroutine.
	fp.p, err = tiered.Open(ctx, l, tiered.Options{Store: pr.store, Prefix: fp.prefix, LeaderEpoch: 1, ChunkCacheBytes: -1, PrefetchBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fp.p.Close() })
	fp.produce(t, 600)
	// No fault is on, but a busy server may still ask to slow down (a
	// MinIO cluster answers 503 SlowDownWrite when its drives lag): the
	// service would try again, and so does the test.
	for began := time.Now(); ; {
		_, err := fp.p.Offload(ctx)
		if err == nil {
			break
		}
		if !errors.Is(err, objstore.ErrRetryable) || time.Since(began) > time.Minute {
			t.Fatalf("offload with no fault on: %v", err)
		}
		t.Logf("offload with no fault on failed retryably (tried again): %v", err)
		time.Sleep(time.Second)
	}
	if fp.p.Offsets().LocalLogStart == 0 {
		t.Fatal("nothing offloaded with no fault on")
	}
	fp.produce(t, 600)
	fp.plantGarbage(t)
	return fp
}

// produce appends n records and remembers their batches, read from the
// local log.
func (fp *faultyPartition) produce(t *testing.T, n int) {
	t.Helper()
	from := fp.p.Offsets().LogEnd
	produce(t, fp.p, n)
	for last, b := range batchesFrom(t, fp.p, from) {
		fp.want[last] = b
	}
}

// plantGarbage puts what a crashed upload leaves: a segment object and an
// upload intent naming it that was built on manifest generation 0, so its
// commit can no longer land. gc must remove both.
func (fp *faultyPartition) plantGarbage(t *testing.T) {
	t.Helper()
	id := [8]byte{0, 0, 0, 0, 0xde, 0xad, 0xbe, 0xef}
	name := manifest.SegmentObject(manifest.Segment{BaseOffset: 0, LastOffset: 9, ID: id}, manifest.KindLog).Name()
	in, _ := json.Marshal(map[string]any{"version": 1, "generation": 0, "writerEpoch": 1, "createdMs": time.Now().UnixMilli(),
		"commitWindowMs": tiered.DefaultCommitWindow.Milliseconds(), "objects": []string{name}})
	l := manifest.NewLayout(fp.prefix)
	fp.orphan = []string{l.Join(name), l.Intent(id)}
	for i, data := range [][]byte{[]byte("a crashed upload"), in} {
		if _, err := fp.pr.store.Put(ctx, fp.orphan[i], bytes.NewReader(data), int64(len(data)), objstore.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

// timed runs fn and, in -v, logs how long it took beside limit, the
// bound fn is expected to end in. It asserts no ceiling: on a busy machine
// a right answer may come late. What the callers check is behaviour (the
// error is retryable, nothing was lost, the writer was not fenced); a hang
// is caught by go test's -timeout. It returns fn's error.
func timed(t *testing.T, what string, limit time.Duration, fn func() error) error {
	t.Helper()
	start := time.Now()
	err := fn()
	if testing.Verbose() {
		t.Logf("%s: %v after %v (bound %v)", what, err, time.Since(start).Round(time.Millisecond), limit)
	}
	return err
}

// retryableOrNil fails the test unless err is nil or retryable.
func retryableOrNil(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil && !errors.Is(err, objstore.ErrRetryable) {
		t.Errorf("%s: an error that is not retryable: %v", what, err)
	}
}

// offloadUnder runs Offload until it succeeds, at most tries times; each
// call must succeed or fail retryably within limit, and never fence its
// own writer. It returns how many calls failed.
func (fp *faultyPartition) offloadUnder(t *testing.T, tries int, limit time.Duration) (failed int, ok bool) {
	t.Helper()
	for range tries {
		err := timed(t, "offload", limit, func() error { _, err := fp.p.Offload(ctx); return err })
		if fp.p.Fenced() != nil {
			t.Fatalf("a retried commit fenced its own writer: %v", fp.p.Fenced())
		}
		if err == nil {
			return failed, true
		}
		retryableOrNil(t, "offload", err)
		if failed == 0 {
			t.Logf("e.g. offload: %v", err)
		}
		failed++
	}
	return failed, false
}

// readRemote reads every batch below the local log start, one at a time
// from its base offset: each read must return the right bytes or fail
// retryably within limit; it stops after maxFailed failures (0: never).
// It returns how many failed.
func (fp *faultyPartition) readRemote(t *testing.T, maxFailed int, limit time.Duration) (failed int) {
	t.Helper()
	end := fp.p.Offsets().LocalLogStart
	lasts := slices.Sorted(func(yield func(int64) bool) {
		for last := range fp.want {
			if !yield(last) {
				return
			}
		}
	})
	base := int64(0)
	for _, last := range lasts {
		if base >= end || (maxFailed > 0 && failed >= maxFailed) {
			break
		}
		err := timed(t, fmt.Sprintf("read %d", base), limit, func() error {
			r, err := fp.p.Read(ctx, base, backend.ReadOptions{MaxBytes: 1, MinOneBatch: true})
			if err != nil {
				return err
			}
			defer r.Close()
			var buf bytes.Buffer
			if _, err := r.WriteTo(&buf); err != nil {
				return err
			}
			if !bytes.Equal(buf.Bytes(), fp.want[last]) {
				t.Errorf("read %d: WRONG BYTES: %d bytes, want the batch %d..%d (%d bytes)", base, buf.Len(), base, last, len(fp.want[last]))
			}
			return nil
		})
		if err != nil {
			if !errors.Is(err, objstore.ErrRetryable) || !errors.Is(err, backend.ErrStorage) {
				t.Errorf("read %d: not a retryable storage error: %v", base, err)
			}
			if failed == 0 {
				t.Logf("e.g. read %d: %v", base, err)
			}
			failed++
		}
		base = last + 1
	}
	return failed
}

// restore restores the partition into a fresh log directory: the restored
// partition must hold the manifest's segments byte-identical, or restore
// must fail (retryably when mayFail) and leave no partition directory.
func (fp *faultyPartition) restore(t *testing.T, mayFail bool, limit time.Duration) error {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "orders-0")
	var m *manifest.Manifest
	err := timed(t, "restore", limit, func() error {
		var err error
		m, err = tiered.Restore(ctx, fp.pr.store, fp.prefix, dir, tiered.RestoreOptions{})
		return err
	})
	if err != nil {
		if !mayFail {
			t.Fatalf("restore with no fault on: %v", err)
		}
		retryableOrNil(t, "restore", err)
		if _, serr := os.Stat(dir); !errors.Is(serr, os.ErrNotExist) {
			t.Errorf("a failed restore left %s: %v", dir, serr)
		}
		return err
	}
	l, err := local.Open(dir, local.Options{Config: faultCfg(t), LogStartOffset: m.LogStartOffset, HighWatermark: -1})
	if err != nil {
		t.Fatalf("open the restored partition: %v", err)
	}
	defer l.Close()
	if err := l.SetHighWatermark(l.Offsets().LogEnd); err != nil {
		t.Fatal(err)
	}
	if got, want := l.Offsets().LogEnd, m.Segments[len(m.Segments)-1].LastOffset+1; got != want {
		t.Errorf("the restored partition ends at %d, the manifest at %d", got, want)
	}
	got := batchesFrom(t, l, m.LogStartOffset)
	for last, b := range got {
		if !bytes.Equal(b, fp.want[last]) {
			t.Errorf("restored batch ending at %d differs from the one acknowledged", last)
		}
	}
	if len(got) == 0 {
		t.Error("restored no batch")
	}
	return nil
}

// gc runs GC with its defaults; with no fault on it must succeed.
func (fp *faultyPartition) gc(t *testing.T, mayFail bool, limit time.Duration) error {
	t.Helper()
	var removed []string
	err := timed(t, "gc", limit, func() error {
		var err error
		removed, err = tiered.GC(ctx, fp.pr.store, fp.prefix, tiered.GCOptions{})
		return err
	})
	switch {
	case err == nil:
		t.Logf("gc removed %d object(s)", len(removed))
	case mayFail:
		retryableOrNil(t, "gc", err)
	default:
		t.Fatalf("gc with no fault on: %v", err)
	}
	return err
}

// checkHealthy, with no fault on: offload catches up; every acknowledged
// record reads back byte-identical at its offset through both tiers (the
// bucket below the local log start, the local log above); a restore gives
// the bucket's part back byte-identical; gc succeeds and leaves only the
// manifest, the objects it names and live intents; the planted garbage is
// gone; every object the manifest names exists with its size.
func (fp *faultyPartition) checkHealthy(t *testing.T) {
	t.Helper()
	if _, err := fp.p.Offload(ctx); err != nil {
		t.Fatalf("offload with no fault on: %v", err)
	}
	o := fp.p.Offsets()
	if n, _ := fp.p.CopyLag(); n != 0 || o.LocalLogStart == 0 || o.LocalLogStart >= o.LogEnd {
		t.Fatalf("after offload with no fault on: copy lag %d segments, offsets %+v", n, o)
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
	if fp.readRemote(t, 0, fp.pr.store.Bound()+proxySlack) != 0 {
		t.Error("remote reads failed with no fault on")
	}
	fp.restore(t, false, opCeiling)
	fp.gc(t, false, opCeiling)
	checkOnlyNamed(t, fp.pr.store, fp.prefix)
	for _, k := range fp.orphan {
		if _, err := fp.pr.store.Head(ctx, k); !errors.Is(err, objstore.ErrNotFound) {
			t.Errorf("gc left the planted garbage %s: %v", k, err)
		}
	}
}

// checkOnlyNamed lists prefix: every key must be the manifest, an object
// the manifest names, a live upload intent (built on the manifest's
// generation) or an object one names; every object the manifest names
// must exist with the size it records.
func checkOnlyNamed(t *testing.T, store *objstore.Store, prefix string) {
	t.Helper()
	m, err := tiered.ReadManifest(ctx, store, prefix)
	if err != nil {
		t.Fatal(err)
	}
	l := manifest.NewLayout(prefix)
	named := map[string]int64{l.Manifest(): -1}
	for _, s := range m.Segments {
		for _, suf := range s.Objects() {
			size, _ := s.Object(suf)
			named[l.Segment(s, suf)] = size
		}
	}
	var objects []objstore.ObjectInfo
	if err := store.List(ctx, prefix+"/", func(o objstore.ObjectInfo) bool { objects = append(objects, o); return true }); err != nil {
		t.Fatal(err)
	}
	live := map[string]bool{}
	for _, o := range objects {
		if !strings.HasSuffix(o.Key, tiered.IntentSuffix) {
			continue
		}
		data, err := store.ReadAll(ctx, o.Key, 0, -1)
		if err != nil {
			t.Fatal(err)
		}
		var in struct {
			Generation uint64   `json:"generation"`
			Objects    []string `json:"objects"`
		}
		if err := json.Unmarshal(data, &in); err != nil {
			t.Fatalf("intent %s: %v", o.Key, err)
		}
		if in.Generation < m.Generation {
			t.Errorf("gc left %s, an intent built on generation %d: its commit cannot land on generation %d", o.Key, in.Generation, m.Generation)
			continue
		}
		live[o.Key] = true
		for _, name := range in.Objects {
			live[prefix+"/"+name] = true
		}
	}
	seen := map[string]bool{}
	for _, o := range objects {
		seen[o.Key] = true
		if size, ok := named[o.Key]; ok {
			if size >= 0 && o.Size != size {
				t.Errorf("%s is %d bytes, the manifest says %d", o.Key, o.Size, size)
			}
			continue
		}
		if b, err := manifest.NewLayout(prefix).Parse(o.Key); err == nil && b.Kind == manifest.KindManifestBackup {
			if gen := b.Generation; gen > m.Generation || gen+2 <= m.Generation {
				t.Errorf("gc left %s, a manifest backup beside generation %d, which keeps the last two", o.Key, m.Generation)
			}
			continue
		}
		if !live[o.Key] {
			t.Errorf("gc left %s, which neither the manifest (generation %d) nor a live intent names", o.Key, m.Generation)
		}
	}
	for k := range named {
		if !seen[k] {
			t.Errorf("the manifest (generation %d) names %s, which the bucket does not hold", m.Generation, k)
		}
	}
}

// proxiedFault is one fault the tiered operations run under.
type proxiedFault struct {
	name  string
	toxic faultproxy.Toxic
}

// tieredFaults: latency, a bandwidth cap each way, connections reset
// (on their first bytes, and mid-request) and cut mid-body, and a stream
// sliced into small delayed writes. The resets and cuts hit half the
// connections, so that operations can make progress through the rest.
func tieredFaults() []proxiedFault {
	half := func(tox faultproxy.Toxic) faultproxy.Toxic { tox.Toxicity = 0.5; return tox }
	up := func(tox faultproxy.Toxic) faultproxy.Toxic { tox.Stream = faultproxy.Upstream; return tox }
	return []proxiedFault{
		{"latency", faultproxy.Latency(50*time.Millisecond, 10*time.Millisecond)},
		{"bandwidth-down", faultproxy.Bandwidth(512)},
		{"bandwidth-up", up(faultproxy.Bandwidth(512))},
		{"reset-peer", half(faultproxy.ResetPeer(0))},
		{"reset-peer-mid-request", half(up(faultproxy.ResetPeer(5 * time.Millisecond)))},
		{"cut-mid-body", half(faultproxy.LimitData(24 << 10))},
		{"slicer", faultproxy.Slicer(1024, 512, 50*time.Microsecond)},
	}
}

// faultServers pairs each server kind with a driver, so both servers and
// both drivers are covered without running the whole matrix.
var faultServers = []struct {
	kind   s3server.Kind
	driver string
}{{s3server.MinIO, "s3"}, {s3server.VersityGW, "minio"}}

// TestTieredBehindNetworkFaults runs offload, remote reads, restore and gc
// through toxiproxy in front of each real server, one fault at a time:
// each operation succeeds with the right bytes or fails retryably, never
// hangs, and never fences its own writer; with the fault removed, the
// partition catches up and nothing is lost (see checkHealthy).
func TestTieredBehindNetworkFaults(t *testing.T) {
	for _, sv := range faultServers {
		t.Run(string(sv.kind)+"-"+sv.driver, func(t *testing.T) {
			pr := newProxied(t, s3server.SharedKind(t, sv.kind), sv.driver)
			t.Logf("store bound %v (+%v slack)", pr.store.Bound(), proxySlack)
			for _, f := range tieredFaults() {
				t.Run(f.name, func(t *testing.T) {
					fp := newFaultyPartition(t, pr, f.name)
					a0, f0 := pr.attempts.Load(), pr.failed.Load()
					name := pr.px.Add(t, f.toxic)
					offloadFailed, offloaded := fp.offloadUnder(t, 10, opCeiling)
					readsFailed := fp.readRemote(t, 0, opCeiling)
					restoreErr := fp.restore(t, true, opCeiling)
					gcErr := fp.gc(t, true, opCeiling)
					pr.px.Remove(t, name)
					t.Logf("%s: offload failed %d time(s) (caught up: %v), %d remote reads failed, restore: %v, gc: %v; %d request attempts, %d failed",
						f.name, offloadFailed, offloaded, readsFailed, restoreErr, gcErr, pr.attempts.Load()-a0, pr.failed.Load()-f0)
					fp.checkHealthy(t)
				})
			}
			t.Logf("%d request attempts in all, %d failed", pr.attempts.Load(), pr.failed.Load())
			if pr.failed.Load() == 0 {
				t.Fatal("no request attempt failed: the proxy injected nothing")
			}
		})
	}
}

// TestTieredBlackHole: a proxy that accepts connections and swallows
// everything. An offload that starts in it ends within the store's bound
// with a retryable error, and so do a remote read, a restore and gc; an
// offload into whose uploads it falls ends within two bounds of it (the
// upload in flight gives up, then either the commit of the segments that
// had landed does, or the removal of the abandoned objects, held to one
// attempt's timeout). With the proxy healthy again nothing is lost, and gc
// leaves only what the manifest names. A Backend's service, whose uploads
// fail while the black hole lasts, uploads the backlog by itself once it
// clears. (versitygw closes each connection once it has answered, so
// through the proxy its black hole ends in a closed connection at once;
// MinIO's holds it open and silent, and the bound is what ends it.)
func TestTieredBlackHole(t *testing.T) {
	eachServer(t, func(t *testing.T, srv *s3server.Server) {
		for _, driver := range []string{"s3", "minio"} {
			t.Run(driver, func(t *testing.T) { blackHole(t, newProxied(t, srv, driver)) })
		}
	})
}

// blackHole is TestTieredBlackHole on one server through one driver.
func blackHole(t *testing.T, pr *proxied) {
	bound := pr.store.Bound()
	t.Run("before-offload", func(t *testing.T) {
		fp := newFaultyPartition(t, pr, "bh-before")
		f0 := pr.failed.Load()
		name := pr.px.Add(t, faultproxy.Timeout(0))
		// At once: each ends within the bound on its own.
		var wg sync.WaitGroup
		wg.Go(func() {
			err := timed(t, "offload into a black hole", bound+proxySlack, func() error { _, err := fp.p.Offload(ctx); return err })
			if err == nil || !errors.Is(err, objstore.ErrRetryable) {
				t.Errorf("offload into a black hole: %v, want a retryable error", err)
			}
		})
		wg.Go(func() {
			if fp.readRemote(t, 1, bound+proxySlack) == 0 {
				t.Error("a remote read succeeded through a black hole")
			}
		})
		wg.Go(func() {
			if fp.restore(t, true, bound+proxySlack) == nil {
				t.Error("a restore succeeded through a black hole")
			}
		})
		wg.Go(func() {
			if fp.gc(t, true, bound+proxySlack) == nil {
				t.Error("gc succeeded through a black hole")
			}
		})
		wg.Wait()
		pr.px.Remove(t, name)
		if pr.failed.Load() == f0 {
			t.Error("no request attempt failed: the proxy injected nothing")
		}
		fp.checkHealthy(t)
	})
	t.Run("during-offload", func(t *testing.T) {
		fp := newFaultyPartition(t, pr, "bh-during")
		fp.produce(t, 1200) // more segments: the offload is under way when the black hole opens
		// The first .log upload that lands opens the black hole
		// before its upload goes on, so the rest of the offload
		// runs into it.
		opened := make(chan struct{})
		proceed := make(chan struct{})
		var once atomic.Bool
		hook := func(e objstore.Event) {
			if e.Op == objstore.OpPut && e.Err == nil && strings.HasSuffix(e.Key, manifest.LogSuffix) && once.CompareAndSwap(false, true) {
				close(opened)
				<-proceed
			}
		}
		pr.hook.Store(&hook)
		defer pr.hook.Store(nil)
		gen := fp.p.Head().Generation()
		done := make(chan error, 1)
		go func() { _, err := fp.p.Offload(ctx); done <- err }()
		select {
		case <-opened:
		case err := <-done:
			t.Fatalf("offload ended before any upload landed: %v", err)
		}
		name := pr.px.Add(t, faultproxy.Timeout(0))
		start := time.Now()
		close(proceed)
		var err error
		select {
		case err = <-done:
		case <-time.After(2*bound + proxySlack + 30*time.Second):
			t.Fatalf("offload hung in a black hole for %v", time.Since(start))
		}
		t.Logf("offload ended %v after the black hole opened (bound %v): %v", time.Since(start).Round(time.Millisecond), bound, err)
		if err == nil || !errors.Is(err, objstore.ErrRetryable) {
			t.Errorf("offload through a black hole: %v, want a retryable error", err)
		}
		if fp.p.Fenced() != nil {
			t.Fatalf("the black hole fenced the writer: %v", fp.p.Fenced())
		}
		pr.px.Remove(t, name)
		fp.checkHealthy(t)
		if fp.p.Head().Generation() <= gen {
			t.Error("the manifest did not move on after the black hole")
		}
	})
	t.Run("backend", func(t *testing.T) {
		name := pr.px.Add(t, faultproxy.Timeout(0))
		b := openTieredBackend(t, t.TempDir(), pr.store, tiered.BackendOptions{Prefix: "be", ChunkCacheBytes: -1, PrefetchBytes: -1})
		bp, err := b.Open(ctx, "orders", 0, faultCfg(t))
		if err != nil {
			t.Fatalf("open a partition with the bucket in a black hole: %v", err)
		}
		p := bp.(*tiered.Partition)
		if err := p.BecomeLeader(ctx, 1); err != nil {
			t.Fatal(err)
		}
		produce(t, p, 2000)
		want := batchesFrom(t, p, 0) // all local: nothing can upload
		lag, _ := p.CopyLag()
		f0 := pr.failed.Load()
		// Let the service try for more than a bound.
		time.Sleep(bound + bound/2)
		if n, _ := p.CopyLag(); n != lag || p.Head().Generation() != 0 || p.Offsets().LocalLogStart != 0 {
			t.Fatalf("through a black hole: copy lag %d (was %d), manifest generation %d, offsets %+v", n, lag, p.Head().Generation(), p.Offsets())
		}
		if pr.failed.Load() == f0 {
			t.Fatal("the service made no request into the black hole")
		}
		t.Logf("black hole: %d segments waiting, %d failed request attempts", lag, pr.failed.Load()-f0)
		pr.px.Remove(t, name)
		cleared := time.Now()
		eventually(t, 2*bound+20*time.Second, "the backlog did not upload once the black hole cleared", func() bool {
			n, _ := p.CopyLag()
			return n == 0 && p.Offsets().LocalLogStart > 0
		})
		t.Logf("the backlog of %d segments uploaded %v after the black hole cleared", lag, time.Since(cleared).Round(time.Millisecond))
		got := batchesFrom(t, p, 0)
		if len(got) != len(want) {
			t.Errorf("read back %d batches, want %d", len(got), len(want))
		}
		for last, data := range want {
			if !bytes.Equal(got[last], data) {
				t.Fatalf("batch ending at %d lost or changed", last)
			}
		}
		prefix := b.PartitionPrefix(backend.TopicPartition{Topic: "orders", Partition: 0})
		if _, err := tiered.GC(ctx, pr.store, prefix, tiered.GCOptions{}); err != nil {
			t.Fatal(err)
		}
		checkOnlyNamed(t, pr.store, prefix)
	})
}

// TestRestoreCutShortIsRetryable: with every connection cut after 8 KiB,
// no 64 KiB object can be read whole, so restore fails; the failure is a
// network fault like any other and must be retryable (errors.Is
// objstore.ErrRetryable), as the other operations' are under the same
// fault, and a rerun once it is gone restores the partition.
func TestRestoreCutShortIsRetryable(t *testing.T) {
	for _, sv := range faultServers {
		t.Run(string(sv.kind)+"-"+sv.driver, func(t *testing.T) {
			pr := newProxied(t, s3server.SharedKind(t, sv.kind), sv.driver)
			fp := newFaultyPartition(t, pr, "cut")
			name := pr.px.Add(t, faultproxy.LimitData(8<<10))
			err := fp.restore(t, true, opCeiling)
			pr.px.Remove(t, name)
			if err == nil {
				t.Fatal("restore succeeded with every body cut after 8 KiB")
			}
			fp.restore(t, false, opCeiling)
		})
	}
}
