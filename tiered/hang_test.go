package tiered_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/objstore"
	"github.com/tierlog/tierlog/objstore/mem"
	"github.com/tierlog/tierlog/testing/faultstore"
	"github.com/tierlog/tierlog/tiered"
)

// stallManifestReads makes every read of a manifest on d wait until its
// ctx ends (a bucket that stopped answering), and returns a channel that
// gets a value as each read begins to wait.
func stallManifestReads(d *faultstore.Driver) <-chan struct{} {
	entered := make(chan struct{}, 64)
	d.Add(faultstore.Rule{Every: 1, Fault: faultstore.Hook, Before: faultstore.Hold(nil, entered),
		Match: func(op objstore.Op, k string) bool { return op != objstore.OpPut && strings.HasSuffix(k, "/manifest") }})
	return entered
}

// within fails the test unless f returns within d.
func within(t *testing.T, d time.Duration, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { f(); close(done) }()
	select {
	case <-done:
	case <-time.After(d):
		t.Fatalf("%s did not return within %v", what, d)
	}
}

// hangCfg is the tiered topic of TestAttachWaitsEndWithTheirContext.
func hangCfg(t *testing.T) backend.Config {
	return cfg(t, "remote.storage.enable", "true", "segment.bytes", "16384", "local.retention.ms", "0", "file.delete.delay.ms", "0", "retention.ms", "-1")
}

// waitEntered waits for a stalled request, 10 s at most.
func waitEntered(t *testing.T, entered <-chan struct{}, why string) {
	t.Helper()
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal(why)
	}
}

// stallStore is a store whose requests stay up to 30 s each.
func stallStore(d objstore.Driver) *objstore.Store {
	return objstore.New(d, "mem://stall", objstore.Options{Timeout: 30 * time.Second, MaxAttempts: 1})
}

// TestAttachWaitsEndWithTheirContext: a partition's first read of its
// manifest is stuck (the bucket does not answer). Another read with a
// short deadline returns when its deadline passes, not after the first
// read's request; and Backend.Close returns at once, cancelling it.
func TestAttachWaitsEndWithTheirContext(t *testing.T) {
	inner := mem.New()
	dir := t.TempDir()
	// Records are kept whatever their timestamps (retention.ms=-1): a read
	// of offset 0 after the reopen must need the bucket.
	b := openTieredBackend(t, dir, objstore.New(inner, "mem://ok", objstore.Options{}), tiered.BackendOptions{})
	p, err := b.Open(ctx, "orders", 0, hangCfg(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.(*tiered.Partition).BecomeLeader(ctx, 1); err != nil {
		t.Fatal(err)
	}
	produce(t, p, 2000)
	if _, err := p.(*tiered.Partition).Offload(ctx); err != nil {
		t.Fatal(err)
	}
	b.Close()

	d := faultstore.Wrap(inner, 1)
	entered := stallManifestReads(d)
	m := fastManager
	m.TaskInterval = time.Hour // no service pass reads the manifest meanwhile
	b = openTieredBackend(t, dir, stallStore(d), tiered.BackendOptions{Manager: m})
	p, err = b.Open(ctx, "orders", 0, hangCfg(t))
	if err != nil {
		t.Fatal(err)
	}
	go p.Read(context.Background(), 0, backend.ReadOptions{MaxBytes: 1, MinOneBatch: true})
	waitEntered(t, entered, "a read of offset 0 did not read the manifest")
	within(t, 15*time.Second, "a read with a 100 ms deadline, behind a stuck first read of the manifest", func() {
		short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		defer cancel()
		p.Read(short, 0, backend.ReadOptions{MaxBytes: 1, MinOneBatch: true})
	})
	within(t, 15*time.Second, "Backend.Close with a first read of a manifest stuck", func() { b.Close() })
}

// TestReplicaOpenHoldsNoLockAcrossTheBucket: a read replica's Open
// catches up from the bucket, which does not answer. Backend.Close does
// not wait for that: it returns at once, and the Open with it.
func TestReplicaOpenHoldsNoLockAcrossTheBucket(t *testing.T) {
	inner := mem.New()
	offloadedOrigin(t, objstore.New(inner, "mem://origin", objstore.Options{}), 3000)
	d := faultstore.Wrap(inner, 1)
	entered := stallManifestReads(d)
	b, err := tiered.OpenBackend(filepath.Join(t.TempDir(), "replica"), tiered.BackendOptions{Store: stallStore(d), Prefix: "tl",
		ReadReplica: true, Manager: tiered.ManagerConfig{TaskInterval: time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	opened := make(chan error, 1)
	go func() {
		_, err := b.Open(context.Background(), "orders", 0, cfg(t, "remote.storage.enable", "true"))
		opened <- err
	}()
	waitEntered(t, entered, "the read replica's Open did not read the manifest")
	within(t, 15*time.Second, "Backend.Close while a read replica's Open reads the bucket", func() { b.Close() })
	within(t, 15*time.Second, "the read replica's Open after Close", func() { <-opened })
}
