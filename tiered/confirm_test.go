package tiered_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/objstore"
	"github.com/tierlog/tierlog/objstore/mem"
	"github.com/tierlog/tierlog/testing/faultstore"
	"github.com/tierlog/tierlog/tiered"
)

// fragilePut makes the nth put of the manifest land and lose its answer,
// as a MinIO cluster's put does when a node dies mid-write: the object
// is there for the reads that follow, but short of its write quorum it
// is not durable: revert puts the bytes it replaced back, as a later
// read of such a cluster answers. Every manifest put after it fails
// before it lands (the cluster is still short): nothing answered ever
// makes it durable.
type fragilePut struct {
	mu    sync.Mutex
	inner *mem.Driver
	prev  []byte
	armed bool
	count int
}

func (f *fragilePut) rules(n int) []faultstore.Rule {
	return []faultstore.Rule{
		{Op: objstore.OpPut, KeySuffix: "/manifest", Every: 1, Fault: faultstore.Hook,
			Before: func(ctx context.Context, c faultstore.Call) error {
				f.mu.Lock()
				defer f.mu.Unlock()
				f.count++
				if f.count == n {
					r, _, err := f.inner.Get(ctx, c.Key, 0, -1)
					if err != nil {
						return err
					}
					defer r.Close()
					f.prev, err = io.ReadAll(r)
					f.armed = err == nil
					return err
				}
				return nil
			}},
		{Op: objstore.OpPut, KeySuffix: "/manifest", Nth: n, Fault: faultstore.FailAfter,
			Err: errors.Join(objstore.ErrRetryable, errors.New("the connection dropped after the put"))},
		{Op: objstore.OpPut, KeySuffix: "/manifest", Every: 1, Fault: faultstore.FailBefore,
			Match: func(objstore.Op, string) bool { f.mu.Lock(); defer f.mu.Unlock(); return f.count >= n }},
	}
}

func (f *fragilePut) revert(t *testing.T, key string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.armed {
		t.Fatal("the test's unanswered put never happened")
	}
	if _, err := f.inner.Put(context.Background(), key, bytes.NewReader(f.prev), int64(len(f.prev)), objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestUnansweredCommitIsConfirmed: a manifest commit whose put landed but
// lost its answer is adopted (recorded, and trusted by local retention)
// only once a put over it is answered: a store short of its write quorum
// may forget it. Here no later put is answered and the store forgets: the
// partition reopens on the older manifest it still records, with every
// record (its local copies were kept). Adopting the commit on the strength
// of a read took the partition offline on reopen, the bucket gone back in
// time below its record (the 10-minute soak with MinIO node kills found
// it).
func TestUnansweredCommitIsConfirmed(t *testing.T) {
	inner := mem.New()
	f := &fragilePut{inner: inner}
	d := faultstore.Wrap(inner, 1)
	store := objstore.New(d, "mem://fragile", objstore.Options{MaxAttempts: 1})
	dir := t.TempDir()
	b := openTieredBackend(t, dir, store, tiered.BackendOptions{})
	tp := openUploaded(t, b, 1, 2000)
	for _, r := range f.rules(1) {
		d.Add(r)
	}
	produce(t, tp, 6000)
	eventually(t, 20*time.Second, "no manifest put after the unanswered one", func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.count >= 2
	})
	want := batchesFrom(t, tp, 0)
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	f.revert(t, rollbackManifest)
	d.SetEnabled(false)

	b = openTieredBackend(t, dir, store, tiered.BackendOptions{})
	p, err := b.Open(context.Background(), "orders", 0, cfg(t, tieredCfg...))
	if err != nil {
		t.Fatal(err)
	}
	tp = p.(*tiered.Partition)
	if err := tp.BecomeLeader(context.Background(), 2); err != nil {
		t.Fatal(err)
	}
	if err := tp.Attach(context.Background()); err != nil {
		if errors.Is(err, backend.ErrManifestRolledBack) {
			t.Fatalf("the partition found the bucket gone back in time: %v", err)
		}
		t.Fatal(err)
	}
	got := batchesFrom(t, tp, 0)
	if len(got) != len(want) {
		t.Fatalf("%d batches after the reopen, want %d", len(got), len(want))
	}
	for off, bt := range want {
		if !bytes.Equal(got[off], bt) {
			t.Fatalf("the batch at %d differs after the reopen", off)
		}
	}
}

// TestClaimWhoseAnswerAndReadBackAreLost: the claim's put lands but its
// answer is lost, and the read that would settle it fails too: the
// claim stays unknown and the change fails retryably; the next change
// settles it as this writer's own. Claiming again at once took the
// writer's own landed claim for a rival's and fenced it (TestFaults,
// seed 1796523169288805148).
func TestClaimWhoseAnswerAndReadBackAreLost(t *testing.T) {
	// The claim's first attempt lands and loses its answer, its retry
	// meets the landed claim (412); both attempts of the read-back fail.
	d := faultstore.Wrap(mem.New(), 1,
		faultstore.Rule{Op: objstore.OpPut, KeySuffix: "/manifest", Nth: 1, Fault: faultstore.FailAfter},
		faultstore.Rule{Op: objstore.OpGet, KeySuffix: "/manifest", Nth: 2, Fault: faultstore.FailBefore},
		faultstore.Rule{Op: objstore.OpGet, KeySuffix: "/manifest", Nth: 3, Fault: faultstore.FailBefore})
	store := objstore.New(d, "mem://claim", objstore.Options{MaxAttempts: 2, BaseBackoff: time.Millisecond})
	d.SetEnabled(false)
	p := open(t, filepath.Join(t.TempDir(), "orders-0"), store, 1, cfg(t, "segment.bytes", "16384"))
	defer p.Close()
	d.SetEnabled(true)
	produce(t, p, 500)
	for try := 0; ; try++ {
		_, err := p.Offload(ctx)
		if err == nil {
			break
		}
		if p.Fenced() != nil {
			t.Fatalf("the writer fenced itself over its own claim: %v", p.Fenced())
		}
		if !errors.Is(err, objstore.ErrRetryable) || try > 5 {
			t.Fatalf("offload: %v", err)
		}
	}
	if m := manifestOf(t, p); len(m.Segments) == 0 {
		t.Fatal("nothing uploaded")
	}
}
