package objstoretest

import (
	"bytes"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tierlog/tierlog/objstore"
	"github.com/tierlog/tierlog/testing/faultproxy"
)

// NetworkFault is one fault the network battery puts on the proxy.
type NetworkFault struct {
	Name  string
	Toxic faultproxy.Toxic
}

// NetworkFaults are the faults RunNetworkFaults injects by default, one at
// a time: latency, a bandwidth cap each way, connections reset (half of
// them, on their first bytes; and requests mid-send), connections cut
// after 64 KiB (a body cut mid-way), a black hole, and a stream sliced
// into small delayed writes.
func NetworkFaults() []NetworkFault {
	half := func(tox faultproxy.Toxic) faultproxy.Toxic { tox.Toxicity = 0.5; return tox }
	up := func(tox faultproxy.Toxic) faultproxy.Toxic { tox.Stream = faultproxy.Upstream; return tox }
	return []NetworkFault{
		{"latency", faultproxy.Latency(100*time.Millisecond, 20*time.Millisecond)},
		{"bandwidth-down", faultproxy.Bandwidth(1024)},
		{"bandwidth-up", up(faultproxy.Bandwidth(1024))},
		{"reset-peer", half(faultproxy.ResetPeer(0))},
		{"reset-peer-mid-request", up(faultproxy.ResetPeer(20 * time.Millisecond))},
		{"limit-data", faultproxy.LimitData(64 << 10)},
		{"black-hole", faultproxy.Timeout(0)},
		{"slicer", faultproxy.Slicer(1024, 512, 50*time.Microsecond)},
	}
}

// networkLiveness is how long past the store's bound a round may run
// before the battery calls an operation hung. It is a liveness check,
// not a speed: the bound is an idle deadline (a put whose body moves
// does not run out of time), and a busy 2-core machine may take seconds
// past it; a hang never returns at all. What bounds an operation is
// checked without a clock: no request makes more than MaxAttempts
// attempts.
const networkLiveness = time.Minute

// RunNetworkFaults runs operations of every kind through a fault proxy,
// one fault at a time. newStore returns a Store with opts over a fresh
// bucket reached through p (its part size at 5 MiB, so the 6 MiB object
// is a multipart upload). With a fault on, every operation must succeed
// with the right bytes or fail with an error wrapping
// objstore.ErrRetryable, after at most MaxAttempts attempts per request:
// never hang, never wrong bytes. A conditional put may also lose its condition
// to its own earlier attempt whose answer the fault swallowed; the object
// must then hold its bytes. Once the fault is removed, every operation
// must succeed. The faults seen (failed attempts) are counted and logged,
// and there must be some.
func RunNetworkFaults(t *testing.T, p *faultproxy.Proxy, newStore func(t *testing.T, opts objstore.Options) *objstore.Store, faults ...NetworkFault) {
	if len(faults) == 0 {
		faults = NetworkFaults()
	}
	const maxAttempts = 2
	var attempts, failed, overAttempts atomic.Int64
	s := newStore(t, objstore.Options{Timeout: time.Second, MaxAttempts: maxAttempts, BaseBackoff: 10 * time.Millisecond, MaxBackoff: 20 * time.Millisecond,
		OnRequest: func(e objstore.Event) {
			attempts.Add(1)
			if e.Err != nil {
				failed.Add(1)
			}
			if e.Attempt > maxAttempts {
				overAttempts.Add(1)
			}
		}})
	bound := s.Bound()
	t.Logf("store bound %v (an operation hung: none back %v past it)", bound, networkLiveness)
	fx := map[string][]byte{"fx/small": randBytes(1000, 10), "fx/medium": randBytes(200<<10, 11), "fx/large": randBytes(6<<20, 12)}
	for k, v := range fx {
		put(t, s, k, v, objstore.PutOptions{})
	}
	var opsFailed int
	for _, f := range faults {
		t.Run(f.Name, func(t *testing.T) {
			a0, f0 := attempts.Load(), failed.Load()
			faulty := newNetworkOps(t, s, fx, "w/"+f.Name)
			name := p.Add(t, f.Toxic)
			ok, retryable := faulty.run(t, bound, false)
			p.Remove(t, name)
			opsFailed += retryable
			// A body cut after its headers fails a read, not an attempt.
			t.Logf("%s: %d operations ok, %d failed retryably; %d request attempts, %d of them failed",
				f.Name, ok, retryable, attempts.Load()-a0, failed.Load()-f0)
			faulty.verify(t)
			clean := newNetworkOps(t, s, fx, "r/"+f.Name)
			clean.run(t, bound, true)
			clean.verify(t)
		})
	}
	t.Logf("faults injected: %d toxics, one at a time; under them %d operations failed retryably, and %d of %d request attempts in all failed",
		p.Added(), opsFailed, failed.Load(), attempts.Load())
	if n := overAttempts.Load(); n > 0 {
		t.Errorf("%d request attempts past MaxAttempts (%d): the store's retries are not bounded", n, maxAttempts)
	}
	if failed.Load() == 0 || opsFailed == 0 {
		t.Fatalf("no fault was seen: the proxy injected nothing")
	}
}

// networkOps is one round of operations under a prefix, and what the
// writes claimed.
type networkOps struct {
	s      *objstore.Store
	fx     map[string][]byte
	prefix string
	casTag string

	mu    sync.Mutex
	wrote map[string][]byte // keys whose put succeeded (or lost to itself), and their bytes
	gone  []string          // keys whose delete succeeded
}

// newNetworkOps writes what the round's operations need, with no fault on.
func newNetworkOps(t *testing.T, s *objstore.Store, fx map[string][]byte, prefix string) *networkOps {
	o := &networkOps{s: s, fx: fx, prefix: prefix, wrote: map[string][]byte{}}
	o.casTag = put(t, s, prefix+"/cas", []byte("gen0"), objstore.PutOptions{}).ETag
	put(t, s, prefix+"/del", []byte("doomed"), objstore.PutOptions{})
	return o
}

// run runs the round's operations at once and checks each: it returns
// (within networkLiveness past the bound, else it hung), with the right
// bytes, and an error that is retryable (or none, when mustSucceed).
func (o *networkOps) run(t *testing.T, bound time.Duration, mustSucceed bool) (ok, retryable int) {
	t.Helper()
	s, fx := o.s, o.fx
	check := func(what string, got, want []byte) {
		if !bytes.Equal(got, want) {
			t.Errorf("%s: WRONG BYTES: %d bytes, want %d", what, len(got), len(want))
		}
	}
	putOp := func(key string, data []byte, opts objstore.PutOptions) error {
		_, err := s.Put(ctx, key, bytes.NewReader(data), int64(len(data)), opts)
		o.mu.Lock()
		defer o.mu.Unlock()
		switch {
		case err == nil:
			o.wrote[key] = data
		case errors.Is(err, objstore.ErrPreconditionFailed):
			// Lost to itself (an earlier attempt landed and its answer was
			// lost, also right after a fault, on a pooled connection the
			// fault left half dead)? verify checks the object holds data.
			o.wrote[key] = data
			return nil
		}
		return err
	}
	large := randBytes(6<<20, 13)
	ops := []struct {
		name string
		fn   func() error
	}{
		{"readall small", func() error {
			b, err := s.ReadAll(ctx, "fx/small", 0, -1)
			if err == nil {
				check("readall small", b, fx["fx/small"])
			}
			return err
		}},
		{"readall range of medium", func() error {
			b, err := s.ReadAll(ctx, "fx/medium", 1000, 50_000)
			if err == nil {
				check("readall range", b, fx["fx/medium"][1000:51_000])
			}
			return err
		}},
		{"readall large", func() error {
			b, err := s.ReadAll(ctx, "fx/large", 0, -1)
			if err == nil {
				check("readall large", b, fx["fx/large"])
			}
			return err
		}},
		{"get medium", func() error {
			rc, _, err := s.Get(ctx, "fx/medium", 0, -1)
			if err != nil {
				return err
			}
			defer rc.Close()
			b, err := io.ReadAll(rc)
			if err == nil {
				check("get medium", b, fx["fx/medium"])
			}
			return err
		}},
		{"head large", func() error {
			info, err := s.Head(ctx, "fx/large")
			if err == nil && info.Size != int64(len(fx["fx/large"])) {
				t.Errorf("head large: WRONG SIZE %d", info.Size)
			}
			return err
		}},
		{"list", func() error {
			var keys []string
			err := s.List(ctx, "fx/", func(o objstore.ObjectInfo) bool {
				if want := int64(len(fx[o.Key])); o.Size != want {
					t.Errorf("list: %s WRONG SIZE %d, want %d", o.Key, o.Size, want)
				}
				keys = append(keys, o.Key)
				return true
			})
			if err == nil && fmt.Sprint(keys) != "[fx/large fx/medium fx/small]" {
				t.Errorf("list: WRONG KEYS %v", keys)
			}
			return err
		}},
		{"put small", func() error { return putOp(o.prefix+"/small", randBytes(1000, 14), objstore.PutOptions{}) }},
		{"put large (multipart, CRC-32C)", func() error {
			return putOp(o.prefix+"/large", large, objstore.PutOptions{CRC32C: crc32.Checksum(large, castagnoli), HasCRC32C: true})
		}},
		{"create-only put", func() error {
			return putOp(o.prefix+"/create", []byte("created"), objstore.PutOptions{IfNoneMatch: true})
		}},
		{"compare-and-swap put", func() error {
			return putOp(o.prefix+"/cas", []byte("gen1"), objstore.PutOptions{IfMatch: o.casTag})
		}},
		{"delete", func() error {
			err := s.Delete(ctx, o.prefix+"/del")
			if err == nil {
				o.mu.Lock()
				o.gone = append(o.gone, o.prefix+"/del")
				o.mu.Unlock()
			}
			return err
		}},
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	pending := map[string]bool{}
	for _, op := range ops {
		pending[op.name] = true
	}
	for _, op := range ops {
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			err := op.fn()
			took := time.Since(start)
			mu.Lock()
			defer mu.Unlock()
			delete(pending, op.name)
			if took > bound {
				// A put whose body moved, or a loaded machine: logged, not
				// asserted (see networkLiveness).
				t.Logf("%s took %v, past the bound %v (idle deadline): %v", op.name, took, bound, err)
			}
			switch {
			case err == nil:
				ok++
			case mustSucceed:
				t.Errorf("%s with no fault on: %v", op.name, err)
			case errors.Is(err, objstore.ErrRetryable):
				if retryable == 0 {
					t.Logf("e.g. %s: %v", op.name, err)
				}
				retryable++
			default:
				t.Errorf("%s: an error that is not retryable: %v", op.name, err)
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(bound + networkLiveness):
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("operations hung, not back %v past the store's bound %v: %v", networkLiveness, bound, slices.Sorted(maps.Keys(pending)))
	}
	return ok, retryable
}

// verify checks, with no fault on, that what the writes claimed holds.
func (o *networkOps) verify(t *testing.T) {
	t.Helper()
	for key, want := range o.wrote {
		got, err := o.s.ReadAll(ctx, key, 0, -1)
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s: a put that succeeded (or lost to itself) left %d bytes, %v; want its %d bytes", key, len(got), err, len(want))
		}
	}
	for _, key := range o.gone {
		if _, err := o.s.Head(ctx, key); !errors.Is(err, objstore.ErrNotFound) {
			t.Errorf("%s: deleted, yet head says %v", key, err)
		}
	}
}
