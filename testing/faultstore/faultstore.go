// Package faultstore wraps an objstore.Driver and injects faults: errors,
// latency, bodies cut mid-read and short reads, at chosen operations (by
// count, key pattern, or probability from a logged seed), and runs a
// test's hooks around chosen operations.
//
//	d := faultstore.Wrap(inner, seed,
//		faultstore.Rule{Op: objstore.OpGet, Fault: faultstore.CutBody, Probability: 0.3},
//		faultstore.Rule{Op: objstore.OpPut, Fault: faultstore.FailBefore, Every: 3})
//
// Faults before the inner call never change the store, so a retried
// operation behaves as if the fault had not happened; FailAfter applies the
// operation and then reports a retryable error, as a timeout after success
// does.
//
// Rules compose: every rule that fires for an operation applies, in the
// order the rules were added, until one fails the operation. A test adds
// a rule while the store is in use with Driver.Add, and through its
// Handle turns it off and on, removes it, and reads how often it matched
// and fired:
//
//	down := d.Add(faultstore.Rule{Every: 1, Fault: faultstore.FailBefore})
//	down.SetEnabled(false) // the bucket is up ...
//	down.SetEnabled(true)  // ... and down
//
// A Hook rule runs the test's code: Before may block the operation (until
// ctx ends), change the store under it or fail it with its own error;
// After sees the driver's result.
//
//	d.Add(faultstore.Rule{Op: objstore.OpPut, KeySuffix: "/manifest", Nth: 1, Fault: faultstore.Hook,
//		Before: func(ctx context.Context, c faultstore.Call) error { <-release; return nil }})
package faultstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
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
	// FailBefore returns a retryable error (or Rule.Err) without calling
	// the driver.
	FailBefore Fault = iota
	// FailAfter calls the driver and, if it succeeded, returns a
	// retryable error (or Rule.Err).
	FailAfter
	// Latency sleeps for Rule.Latency before calling the driver.
	Latency
	// CutBody makes a get's body fail after Rule.AfterBytes bytes, with a
	// reset connection (or Rule.Err).
	CutBody
	// ShortRead makes a get's body end (EOF) after Rule.AfterBytes bytes.
	ShortRead
	// Permanent returns a non-retryable error (Rule.Err, or access denied)
	// without calling the driver.
	Permanent
	// Hook runs the rule's Hook and Before before calling the driver, and
	// its After once the driver returned: a test blocks an operation
	// there, changes the store under it, fails it, or watches it.
	Hook
)

func (f Fault) String() string {
	return [...]string{"fail-before", "fail-after", "latency", "cut-body", "short-read", "permanent", "hook"}[f]
}

// Call is one operation as a rule's hooks see it.
type Call struct {
	Op objstore.Op
	// Key is the object's key; for a list or an abort of stale uploads
	// the prefix, for a delete its first key.
	Key string
	// Size is a put's size.
	Size int64
	// Err is the driver's error, for After.
	Err error
}

// Rule says when to inject a fault. An operation matches when Op is empty
// or equal, KeyContains is empty or a substring of the key, KeySuffix is
// empty or a suffix of it, and Match is nil or true (the key as in Call).
// A matching operation gets the fault when its match count is Nth (if
// set), a multiple of Every (if set: 1 is every match), or a draw falls
// under Probability (if set); a rule with none of the three never fires,
// and Wrap and Add refuse it. The match count starts at zero when the rule
// is added and counts only while the rule is on.
type Rule struct {
	Op          objstore.Op
	KeyContains string
	KeySuffix   string
	Match       func(op objstore.Op, key string) bool
	Nth         int
	Every       int
	Probability float64
	Fault       Fault
	// Latency is a Latency fault's sleep.
	Latency time.Duration
	// AfterBytes is where a CutBody or ShortRead fault ends the body.
	AfterBytes int64
	// Err, when set, is the error a FailBefore, FailAfter or Permanent
	// fault returns, or a CutBody body fails with, as is.
	Err error

	// Hook, Before and After are a Hook fault's code (one at least).
	// Hook runs before the driver is called: Before's short form, for
	// code that needs neither ctx nor an error of its own.
	Hook func(op objstore.Op, key string)
	// Before runs before the driver is called, after Hook; an error it
	// returns is the operation's, and the driver is not called. A Before
	// that blocks should return ctx.Err() once ctx is done, as a driver
	// must.
	Before func(ctx context.Context, c Call) error
	// After runs once the driver returned, with its error in c.Err (not
	// when an earlier rule or Before failed the operation).
	After func(c Call)
}

func (r Rule) validate() error {
	if r.Nth <= 0 && r.Every <= 0 && r.Probability <= 0 {
		return errors.New("faultstore: a rule with no Nth, Every or Probability never fires")
	}
	hooks := r.Hook != nil || r.Before != nil || r.After != nil
	if r.Fault == Hook && !hooks {
		return errors.New("faultstore: a Hook rule needs Hook, Before or After")
	}
	if r.Fault != Hook && hooks {
		return fmt.Errorf("faultstore: a %s rule with hooks: only Hook rules run them", r.Fault)
	}
	return nil
}

// Handle is one rule of a Driver, as added. Its methods are safe for
// concurrent use with the Driver's operations, and take effect for the
// operations that pick their rules after they return.
type Handle struct {
	r       Rule
	d       *Driver
	enabled atomic.Bool
	matched atomic.Int64
	fired   atomic.Int64
}

// SetEnabled turns the rule on or off. A rule that is off neither matches
// nor fires, and its counts (so Nth and Every) stand still.
func (h *Handle) SetEnabled(on bool) { h.enabled.Store(on) }

// Remove takes the rule out of its Driver for good.
func (h *Handle) Remove() {
	h.enabled.Store(false)
	h.d.mu.Lock()
	defer h.d.mu.Unlock()
	h.d.rules = slices.DeleteFunc(slices.Clone(h.d.rules), func(x *Handle) bool { return x == h })
}

// Matched returns how many operations the rule matched while on.
func (h *Handle) Matched() int64 { return h.matched.Load() }

// Fired returns how many operations the rule fired on.
func (h *Handle) Fired() int64 { return h.fired.Load() }

// Driver is the fault-injecting wrapper.
type Driver struct {
	inner objstore.Driver
	Seed  uint64

	injected atomic.Int64
	enabled  atomic.Bool

	mu    sync.Mutex // guards the fields below
	rules []*Handle  // replaced, never changed in place: pick reads a snapshot
	rng   *rand.Rand
}

// Hold is a Hook rule's Before that holds each operation it is given
// until release is closed (nil: never) or the operation's ctx ends, as a
// bucket that stopped answering does. entered, when not nil, gets a
// value (never blocking) as each operation begins to wait.
func Hold(release <-chan struct{}, entered chan<- struct{}) func(context.Context, Call) error {
	return func(ctx context.Context, _ Call) error {
		if entered != nil {
			select {
			case entered <- struct{}{}:
			default:
			}
		}
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Wrap returns inner behind rules, drawing probabilities from seed (log it:
// the same seed replays the same faults for the same operations). It
// panics on a rule that cannot work (see Rule).
func Wrap(inner objstore.Driver, seed uint64, rules ...Rule) *Driver {
	d := &Driver{inner: inner, Seed: seed, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
	for _, r := range rules {
		d.Add(r)
	}
	d.enabled.Store(true)
	return d
}

// Add adds r after the Driver's rules, on, with its counts at zero, and
// returns its handle. It panics on a rule that cannot work (see Rule).
func (d *Driver) Add(r Rule) *Handle {
	if err := r.validate(); err != nil {
		panic(err)
	}
	h := &Handle{r: r, d: d}
	h.enabled.Store(true)
	d.mu.Lock()
	defer d.mu.Unlock()
	d.rules = append(slices.Clip(d.rules), h)
	return h
}

// Injected returns how many faults were injected.
func (d *Driver) Injected() int64 { return d.injected.Load() }

// SetEnabled turns injection on or off (to let an operation catch up).
func (d *Driver) SetEnabled(on bool) { d.enabled.Store(on) }

func (h *Handle) matches(op objstore.Op, key string) bool {
	r := &h.r
	return (r.Op == "" || r.Op == op) &&
		(r.KeyContains == "" || strings.Contains(key, r.KeyContains)) &&
		(r.KeySuffix == "" || strings.HasSuffix(key, r.KeySuffix)) &&
		(r.Match == nil || r.Match(op, key))
}

// pick returns the rules that fire for this operation.
func (d *Driver) pick(op objstore.Op, key string) []*Rule {
	if !d.enabled.Load() {
		return nil
	}
	d.mu.Lock()
	rules := d.rules
	d.mu.Unlock()
	var out []*Rule
	for _, h := range rules {
		if !h.enabled.Load() || !h.matches(op, key) {
			continue
		}
		r := &h.r
		n := h.matched.Add(1)
		fire := (r.Nth > 0 && n == int64(r.Nth)) || (r.Every > 0 && n%int64(r.Every) == 0)
		if !fire && r.Probability > 0 {
			d.mu.Lock()
			fire = d.rng.Float64() < r.Probability
			d.mu.Unlock()
		}
		if fire {
			h.fired.Add(1)
			d.injected.Add(1)
			out = append(out, r)
		}
	}
	return out
}

func injectedErr(r *Rule, op objstore.Op, key string) error {
	if r.Err != nil {
		return r.Err
	}
	if r.Fault == Permanent {
		return fmt.Errorf("%w: injected on %s %s", objstore.ErrAccessDenied, op, key)
	}
	return fmt.Errorf("%w: injected %s on %s %s", objstore.ErrRetryable, r.Fault, op, key)
}

// run calls inner for c behind the rules that fire: latency, early
// failures and Hook and Before in rule order, then inner, then After and
// FailAfter. It returns the body faults that fired, for a get.
func (d *Driver) run(ctx context.Context, c Call, inner func() error) ([]*Rule, error) {
	fired := d.pick(c.Op, c.Key)
	var after *Rule
	var body []*Rule
	for _, r := range fired {
		switch r.Fault {
		case Latency:
			select {
			case <-time.After(r.Latency):
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		case FailBefore, Permanent:
			return nil, injectedErr(r, c.Op, c.Key)
		case FailAfter:
			if after == nil {
				after = r
			}
		case CutBody, ShortRead:
			body = append(body, r)
		case Hook:
			if r.Hook != nil {
				r.Hook(c.Op, c.Key)
			}
			if r.Before != nil {
				if err := r.Before(ctx, c); err != nil {
					return nil, err
				}
			}
		}
	}
	c.Err = inner()
	for _, r := range fired {
		if r.Fault == Hook && r.After != nil {
			r.After(c)
		}
	}
	if c.Err != nil {
		return nil, c.Err
	}
	if after != nil {
		return nil, injectedErr(after, c.Op, c.Key)
	}
	return body, nil
}

// Put implements objstore.Driver.
func (d *Driver) Put(ctx context.Context, key string, body io.ReadSeeker, size int64, opts objstore.PutOptions) (objstore.ObjectInfo, error) {
	var info objstore.ObjectInfo
	_, err := d.run(ctx, Call{Op: objstore.OpPut, Key: key, Size: size}, func() (err error) {
		info, err = d.inner.Put(ctx, key, body, size, opts)
		return err
	})
	if err != nil {
		return objstore.ObjectInfo{}, err
	}
	return info, nil
}

// Get implements objstore.Driver.
func (d *Driver) Get(ctx context.Context, key string, offset, length int64) (io.ReadCloser, objstore.ObjectInfo, error) {
	var rc io.ReadCloser
	var info objstore.ObjectInfo
	bodyFaults, err := d.run(ctx, Call{Op: objstore.OpGet, Key: key}, func() (err error) {
		rc, info, err = d.inner.Get(ctx, key, offset, length)
		return err
	})
	if err != nil {
		if rc != nil {
			rc.Close()
		}
		return nil, objstore.ObjectInfo{}, err
	}
	for _, r := range bodyFaults {
		rc = &faultyBody{ReadCloser: rc, left: r.AfterBytes, fault: r.Fault, err: r.Err}
	}
	return rc, info, nil
}

type faultyBody struct {
	io.ReadCloser
	left  int64
	fault Fault
	err   error
}

func (b *faultyBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		switch {
		case b.fault == ShortRead:
			return 0, io.EOF
		case b.err != nil:
			return 0, b.err
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
	var info objstore.ObjectInfo
	_, err := d.run(ctx, Call{Op: objstore.OpHead, Key: key}, func() (err error) {
		info, err = d.inner.Head(ctx, key)
		return err
	})
	if err != nil {
		return objstore.ObjectInfo{}, err
	}
	return info, nil
}

// List implements objstore.Driver.
func (d *Driver) List(ctx context.Context, prefix, startAfter string, limit int) ([]objstore.ObjectInfo, bool, error) {
	var objs []objstore.ObjectInfo
	var more bool
	_, err := d.run(ctx, Call{Op: objstore.OpList, Key: prefix}, func() (err error) {
		objs, more, err = d.inner.List(ctx, prefix, startAfter, limit)
		return err
	})
	if err != nil {
		return nil, false, err
	}
	return objs, more, nil
}

// Delete implements objstore.Driver.
func (d *Driver) Delete(ctx context.Context, keys []string) error {
	key := ""
	if len(keys) > 0 {
		key = keys[0]
	}
	_, err := d.run(ctx, Call{Op: objstore.OpDelete, Key: key}, func() error {
		return d.inner.Delete(ctx, keys)
	})
	return err
}

// AbortStaleUploads implements objstore.Driver.
func (d *Driver) AbortStaleUploads(ctx context.Context, prefix string, olderThan time.Time) (int, error) {
	var n int
	_, err := d.run(ctx, Call{Op: objstore.OpAbort, Key: prefix}, func() (err error) {
		n, err = d.inner.AbortStaleUploads(ctx, prefix, olderThan)
		return err
	})
	if err != nil {
		return 0, err
	}
	return n, nil
}

// Close implements objstore.Driver.
func (d *Driver) Close() error { return d.inner.Close() }
