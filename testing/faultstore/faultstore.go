// Package faultstore wraps an objstore.Driver and injects faults: errors,
// latency, bodies cut mid-read and short reads, at chosen operations (by
// count, key pattern, or probability from a logged seed).
//
//	d := faultstore.Wrap(inner, seed,
//		faultstore.Rule{Op: objstore.OpGet, Fault: faultstore.CutBody, Probability: 0.3},
//		faultstore.Rule{Op: objstore.OpPut, Fault: faultstore.FailBefore, Every: 3})
//
// Faults before the inner call never change the store, so a retried
// operation behaves as if the fault had not happened; FailAfter applies the
// operation and then reports a retryable error, as a timeout after success
// does.
package faultstore

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tierlog/tierlog/objstore"
)

// Fault is what a rule injects.
type Fault int

// Faults.
const (
	// FailBefore returns a retryable error without calling the driver.
	FailBefore Fault = iota
	// FailAfter calls the driver, then returns a retryable error.
	FailAfter
	// Latency sleeps for Rule.Latency before calling the driver.
	Latency
	// CutBody makes a get's body fail with a reset connection after
	// Rule.AfterBytes bytes.
	CutBody
	// ShortRead makes a get's body end (EOF) after Rule.AfterBytes bytes.
	ShortRead
	// Permanent returns a non-retryable error (Rule.Err, or access denied).
	Permanent
	// Hook calls Rule.Hook before calling the driver, which then does the
	// operation: a test blocks an operation there, or changes the store
	// under it.
	Hook
)

func (f Fault) String() string {
	return [...]string{"fail-before", "fail-after", "latency", "cut-body", "short-read", "permanent", "hook"}[f]
}

// Rule says when to inject a fault. An operation matches when Op is empty
// or equal, and KeyContains is empty or a substring of the key. A matching
// operation gets the fault when its match count is Nth (if set), a multiple
// of Every (if set), or a draw falls under Probability (if set).
type Rule struct {
	Op          objstore.Op
	KeyContains string
	Nth         int
	Every       int
	Probability float64
	Fault       Fault
	Latency     time.Duration
	AfterBytes  int64
	Err         error
	Hook        func(op objstore.Op, key string) // for Fault Hook
}

// rule is a Rule with its match counter.
type rule struct {
	Rule
	matched atomic.Int64
}

// Driver is the fault-injecting wrapper.
type Driver struct {
	inner objstore.Driver
	Seed  uint64
	rules []*rule

	mu  sync.Mutex
	rng *rand.Rand

	injected atomic.Int64
	enabled  atomic.Bool
}

// Wrap returns inner behind rules, drawing probabilities from seed (log it:
// the same seed replays the same faults for the same operations).
func Wrap(inner objstore.Driver, seed uint64, rules ...Rule) *Driver {
	d := &Driver{inner: inner, Seed: seed, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
	for _, r := range rules {
		d.rules = append(d.rules, &rule{Rule: r})
	}
	d.enabled.Store(true)
	return d
}

// Injected returns how many faults were injected.
func (d *Driver) Injected() int64 { return d.injected.Load() }

// SetEnabled turns injection on or off (to let an operation catch up).
func (d *Driver) SetEnabled(on bool) { d.enabled.Store(on) }

// pick returns the faults that fire for this operation.
func (d *Driver) pick(op objstore.Op, key string) []*rule {
	if !d.enabled.Load() {
		return nil
	}
	var out []*rule
	for _, r := range d.rules {
		if (r.Op != "" && r.Op != op) || (r.KeyContains != "" && !strings.Contains(key, r.KeyContains)) {
			continue
		}
		n := r.matched.Add(1)
		fire := (r.Nth > 0 && n == int64(r.Nth)) || (r.Every > 0 && n%int64(r.Every) == 0)
		if !fire && r.Probability > 0 {
			d.mu.Lock()
			fire = d.rng.Float64() < r.Probability
			d.mu.Unlock()
		}
		if fire {
			d.injected.Add(1)
			out = append(out, r)
		}
	}
	return out
}

func injectedErr(r *rule, op objstore.Op, key string) error {
	if r.Fault == Permanent {
		if r.Err != nil {
			return r.Err
		}
		return fmt.Errorf("%w: injected on %s %s", objstore.ErrAccessDenied, op, key)
	}
	return fmt.Errorf("%w: injected %s on %s %s", objstore.ErrRetryable, r.Fault, op, key)
}

// before applies latency and early failures; after reports whether a
// FailAfter rule fired.
func (d *Driver) before(ctx context.Context, op objstore.Op, key string) (after *rule, body []*rule, err error) {
	for _, r := range d.pick(op, key) {
		switch r.Fault {
		case Latency:
			select {
			case <-time.After(r.Latency):
			case <-ctx.Done():
				return nil, nil, ctx.Err()
			}
		case FailBefore, Permanent:
			return nil, nil, injectedErr(r, op, key)
		case FailAfter:
			after = r
		case CutBody, ShortRead:
			body = append(body, r)
		case Hook:
			r.Hook(op, key)
		}
	}
	return after, body, nil
}

// Put implements objstore.Driver.
func (d *Driver) Put(ctx context.Context, key string, body io.ReadSeeker, size int64, opts objstore.PutOptions) (objstore.ObjectInfo, error) {
	after, _, err := d.before(ctx, objstore.OpPut, key)
	if err != nil {
		return objstore.ObjectInfo{}, err
	}
	info, err := d.inner.Put(ctx, key, body, size, opts)
	if err == nil && after != nil {
		return objstore.ObjectInfo{}, injectedErr(after, objstore.OpPut, key)
	}
	return info, err
}

// Get implements objstore.Driver.
func (d *Driver) Get(ctx context.Context, key string, offset, length int64) (io.ReadCloser, objstore.ObjectInfo, error) {
	after, bodyFaults, err := d.before(ctx, objstore.OpGet, key)
	if err != nil {
		return nil, objstore.ObjectInfo{}, err
	}
	rc, info, err := d.inner.Get(ctx, key, offset, length)
	if err != nil {
		return nil, info, err
	}
	if after != nil {
		rc.Close()
		return nil, objstore.ObjectInfo{}, injectedErr(after, objstore.OpGet, key)
	}
	for _, r := range bodyFaults {
		rc = &faultyBody{ReadCloser: rc, left: r.AfterBytes, fault: r.Fault}
	}
	return rc, info, nil
}

type faultyBody struct {
	io.ReadCloser
	left  int64
	fault Fault
}

func (b *faultyBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		if b.fault == ShortRead {
			return 0, io.EOF
		}
		return 0, fmt.Errorf("read tcp: connection reset by peer (injected)")
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.ReadCloser.Read(p)
	b.left -= int64(n)
	return n, err
}

// Head implements objstore.Driver.
func (d *Driver) Head(ctx context.Context, key string) (objstore.ObjectInfo, error) {
	after, _, err := d.before(ctx, objstore.OpHead, key)
	if err != nil {
		return objstore.ObjectInfo{}, err
	}
	info, err := d.inner.Head(ctx, key)
	if err == nil && after != nil {
		return objstore.ObjectInfo{}, injectedErr(after, objstore.OpHead, key)
	}
	return info, err
}

// List implements objstore.Driver.
func (d *Driver) List(ctx context.Context, prefix, startAfter string, limit int) ([]objstore.ObjectInfo, bool, error) {
	after, _, err := d.before(ctx, objstore.OpList, prefix)
	if err != nil {
		return nil, false, err
	}
	objs, more, err := d.inner.List(ctx, prefix, startAfter, limit)
	if err == nil && after != nil {
		return nil, false, injectedErr(after, objstore.OpList, prefix)
	}
	return objs, more, err
}

// Delete implements objstore.Driver.
func (d *Driver) Delete(ctx context.Context, keys []string) error {
	key := ""
	if len(keys) > 0 {
		key = keys[0]
	}
	after, _, err := d.before(ctx, objstore.OpDelete, key)
	if err != nil {
		return err
	}
	err = d.inner.Delete(ctx, keys)
	if err == nil && after != nil {
		return injectedErr(after, objstore.OpDelete, key)
	}
	return err
}

// AbortStaleUploads implements objstore.Driver.
func (d *Driver) AbortStaleUploads(ctx context.Context, prefix string, olderThan time.Time) (int, error) {
	if _, _, err := d.before(ctx, objstore.OpAbort, prefix); err != nil {
		return 0, err
	}
	return d.inner.AbortStaleUploads(ctx, prefix, olderThan)
}

// Close implements objstore.Driver.
func (d *Driver) Close() error { return d.inner.Close() }
