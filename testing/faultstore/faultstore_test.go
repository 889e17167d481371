package faultstore_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tierlog/tierlog/objstore"
	"github.com/tierlog/tierlog/objstore/mem"
	"github.com/tierlog/tierlog/testing/faultstore"
)

var ctx = context.Background()

func put(d objstore.Driver, key, data string) error {
	_, err := d.Put(ctx, key, strings.NewReader(data), int64(len(data)), objstore.PutOptions{})
	return err
}

func exists(t *testing.T, d objstore.Driver, key string) bool {
	t.Helper()
	_, err := d.Head(ctx, key)
	if err != nil && !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("head %s: %v", key, err)
	}
	return err == nil
}

func read(t *testing.T, d objstore.Driver, key string) (string, error) {
	t.Helper()
	rc, _, err := d.Get(ctx, key, 0, -1)
	if err != nil {
		t.Fatalf("get %s: %v", key, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	return string(b), err
}

func TestFailBeforeLeavesTheStoreUnchanged(t *testing.T) {
	inner := mem.New()
	d := faultstore.Wrap(inner, 0, faultstore.Rule{Op: objstore.OpPut, Every: 1, Fault: faultstore.FailBefore})
	err := put(d, "a", "x")
	if !errors.Is(err, objstore.ErrRetryable) || !strings.Contains(err.Error(), "fail-before") || !strings.Contains(err.Error(), "a") {
		t.Fatalf("put: %v, want a retryable fail-before error naming the key", err)
	}
	if exists(t, inner, "a") {
		t.Fatal("a put failed before the driver reached the store")
	}
	if d.Injected() != 1 {
		t.Fatalf("injected %d, want 1", d.Injected())
	}
	// Other operations pass.
	if err := put(inner, "b", "y"); err != nil {
		t.Fatal(err)
	}
	if !exists(t, d, "b") {
		t.Fatal("a head the rule does not match failed")
	}
}

func TestFailAfterChangesTheStore(t *testing.T) {
	inner := mem.New()
	d := faultstore.Wrap(inner, 0, faultstore.Rule{Every: 1, Fault: faultstore.FailAfter})
	if err := put(d, "a", "x"); !errors.Is(err, objstore.ErrRetryable) {
		t.Fatalf("put: %v, want retryable", err)
	}
	if !exists(t, inner, "a") {
		t.Fatal("a FailAfter put did not reach the store")
	}
	if err := d.Delete(ctx, []string{"a"}); !errors.Is(err, objstore.ErrRetryable) {
		t.Fatalf("delete: %v, want retryable", err)
	}
	if exists(t, inner, "a") {
		t.Fatal("a FailAfter delete did not reach the store")
	}
	// A driver's own error is the answer: nothing is injected over it.
	if _, _, err := d.Get(ctx, "missing", 0, -1); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("get of a missing key: %v, want the driver's ErrNotFound", err)
	}
}

func TestPermanentAndCustomErrors(t *testing.T) {
	errMine := errors.New("mine")
	inner := mem.New()
	d := faultstore.Wrap(inner, 0,
		faultstore.Rule{Op: objstore.OpPut, KeyContains: "p", Every: 1, Fault: faultstore.Permanent},
		faultstore.Rule{Op: objstore.OpPut, KeyContains: "q", Every: 1, Fault: faultstore.Permanent, Err: errMine},
		faultstore.Rule{Op: objstore.OpPut, KeyContains: "r", Every: 1, Fault: faultstore.FailBefore, Err: errMine},
		faultstore.Rule{Op: objstore.OpPut, KeyContains: "s", Every: 1, Fault: faultstore.FailAfter, Err: errMine})
	if err := put(d, "p", "x"); !errors.Is(err, objstore.ErrAccessDenied) || errors.Is(err, objstore.ErrRetryable) {
		t.Fatalf("permanent: %v, want access denied, not retryable", err)
	}
	for _, k := range []string{"q", "r", "s"} {
		if err := put(d, k, "x"); err != errMine {
			t.Fatalf("put %s: %v, want Rule.Err as is", k, err)
		}
	}
	if exists(t, inner, "p") || exists(t, inner, "q") || exists(t, inner, "r") || !exists(t, inner, "s") {
		t.Fatal("only the FailAfter put may reach the store")
	}
}

func TestLatency(t *testing.T) {
	d := faultstore.Wrap(mem.New(), 0, faultstore.Rule{Op: objstore.OpHead, Every: 1, Fault: faultstore.Latency, Latency: 50 * time.Millisecond})
	start := time.Now()
	if _, err := d.Head(ctx, "a"); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("head after the latency: %v, want the driver's ErrNotFound", err)
	}
	if el := time.Since(start); el < 50*time.Millisecond {
		t.Fatalf("head took %v, want 50ms at least", el)
	}
	// A latency of a minute: a rule that ignored the context would return
	// the driver's answer (not the context's error), a minute late.
	d = faultstore.Wrap(mem.New(), 0, faultstore.Rule{Every: 1, Fault: faultstore.Latency, Latency: time.Minute})
	c, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	start = time.Now()
	if _, err := d.Head(c, "a"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("head whose context ends during a minute's latency: %v after %v, want the context's error", err, time.Since(start))
	}
}

func TestBodyFaults(t *testing.T) {
	inner := mem.New()
	if err := put(inner, "seg.log", "0123456789"); err != nil {
		t.Fatal(err)
	}
	d := faultstore.Wrap(inner, 0, faultstore.Rule{Op: objstore.OpGet, Every: 1, Fault: faultstore.CutBody, AfterBytes: 4})
	got, err := read(t, d, "seg.log")
	if got != "0123" || err == nil || !strings.Contains(err.Error(), "reset") {
		t.Fatalf("cut body: read %q, %v; want 4 bytes and a reset connection", got, err)
	}
	d = faultstore.Wrap(inner, 0, faultstore.Rule{Op: objstore.OpGet, Every: 1, Fault: faultstore.CutBody, AfterBytes: 3, Err: io.ErrUnexpectedEOF})
	if got, err := read(t, d, "seg.log"); got != "012" || err != io.ErrUnexpectedEOF {
		t.Fatalf("cut body with Err: read %q, %v; want 3 bytes and Rule.Err", got, err)
	}
	d = faultstore.Wrap(inner, 0, faultstore.Rule{Op: objstore.OpGet, Every: 1, Fault: faultstore.ShortRead, AfterBytes: 6})
	if got, err := read(t, d, "seg.log"); got != "012345" || err != nil {
		t.Fatalf("short read: %q, %v; want 6 bytes and a clean end", got, err)
	}
	if got, err := read(t, inner, "seg.log"); got != "0123456789" || err != nil {
		t.Fatalf("a body fault changed the object: %q, %v", got, err)
	}
}

func TestMatching(t *testing.T) {
	d := faultstore.Wrap(mem.New(), 0)
	byOp := d.Add(faultstore.Rule{Op: objstore.OpPut, Every: 1, Fault: faultstore.FailAfter})
	contains := d.Add(faultstore.Rule{KeyContains: "mid", Every: 1, Fault: faultstore.Latency})
	suffix := d.Add(faultstore.Rule{KeySuffix: ".log", Every: 1, Fault: faultstore.Latency})
	notAbort := d.Add(faultstore.Rule{Match: func(op objstore.Op, key string) bool { return op != objstore.OpAbort }, Every: 1, Fault: faultstore.Latency})
	put(d, "a/mid/b.log", "x")                  // all four
	put(d, "a.log.idx", "x")                    // op, match
	d.Head(ctx, "x.log")                        // suffix, match
	d.List(ctx, "pre/mid/", "", 10)             // contains (the prefix is the key), match
	d.Delete(ctx, []string{"q.log", "mid"})     // suffix (the first key), match
	d.AbortStaleUploads(ctx, "mid", time.Now()) // contains
	for _, c := range []struct {
		name string
		h    *faultstore.Handle
		want int64
	}{{"Op", byOp, 2}, {"KeyContains", contains, 3}, {"KeySuffix", suffix, 3}, {"Match", notAbort, 5}} {
		if c.h.Matched() != c.want || c.h.Fired() != c.want {
			t.Errorf("%s rule: matched %d, fired %d; want %d", c.name, c.h.Matched(), c.h.Fired(), c.want)
		}
	}
}

func TestNthEveryProbability(t *testing.T) {
	d := faultstore.Wrap(mem.New(), 0)
	nth := d.Add(faultstore.Rule{Op: objstore.OpHead, Nth: 3, Fault: faultstore.Latency})
	every := d.Add(faultstore.Rule{Op: objstore.OpHead, Every: 4, Fault: faultstore.Latency})
	for range 10 {
		d.Head(ctx, "k")
	}
	if nth.Matched() != 10 || nth.Fired() != 1 || every.Fired() != 2 {
		t.Fatalf("Nth 3 fired %d times, Every 4 %d times in 10 matches (%d); want 1 and 2", nth.Fired(), every.Fired(), nth.Matched())
	}

	// The same seed fires on the same operations.
	pattern := func(seed uint64) string {
		d := faultstore.Wrap(mem.New(), seed, faultstore.Rule{Op: objstore.OpHead, Probability: 0.5})
		var b strings.Builder
		for range 64 {
			if _, err := d.Head(ctx, "k"); errors.Is(err, objstore.ErrRetryable) {
				b.WriteByte('x')
			} else {
				b.WriteByte('.')
			}
		}
		return b.String()
	}
	a, b, c := pattern(7), pattern(7), pattern(8)
	if a != b || a == c || !strings.Contains(a, "x") || !strings.Contains(a, ".") {
		t.Fatalf("seed 7 gave %s then %s, seed 8 %s: want the same faults for the same seed, others for another", a, b, c)
	}
}

func TestHandles(t *testing.T) {
	inner := mem.New()
	d := faultstore.Wrap(inner, 0)
	if err := put(d, "a", "x"); err != nil {
		t.Fatal(err)
	}
	// Added at run time, its counts start at zero: Nth 1 is the next match.
	once := d.Add(faultstore.Rule{Op: objstore.OpPut, Nth: 1, Fault: faultstore.FailBefore})
	if err := put(d, "b", "x"); !errors.Is(err, objstore.ErrRetryable) {
		t.Fatalf("the first put after Add: %v, want the injected error", err)
	}
	if err := put(d, "b", "x"); err != nil {
		t.Fatalf("the second: %v (Nth 1 fires once)", err)
	}
	if once.Matched() != 2 || once.Fired() != 1 {
		t.Fatalf("Nth 1 added after a put: matched %d, fired %d; want 2 and 1", once.Matched(), once.Fired())
	}

	// Off, a rule neither matches nor counts.
	h := d.Add(faultstore.Rule{Op: objstore.OpPut, Every: 2, Fault: faultstore.FailBefore})
	h.SetEnabled(false)
	for range 3 {
		if err := put(d, "c", "x"); err != nil {
			t.Fatalf("put with the rule off: %v", err)
		}
	}
	if h.Matched() != 0 || h.Fired() != 0 {
		t.Fatalf("a rule off matched %d, fired %d", h.Matched(), h.Fired())
	}
	h.SetEnabled(true)
	if err := put(d, "c", "x"); err != nil || h.Matched() != 1 {
		t.Fatalf("first match on: %v (matched %d), want no fault until the second", err, h.Matched())
	}
	if err := put(d, "c", "x"); !errors.Is(err, objstore.ErrRetryable) || h.Fired() != 1 {
		t.Fatalf("second match on: %v (fired %d)", err, h.Fired())
	}

	// The whole driver off.
	d.SetEnabled(false)
	if err := put(d, "c", "x"); err != nil || put(d, "c", "x") != nil || h.Matched() != 2 {
		t.Fatalf("with the driver off: %v, matched %d", err, h.Matched())
	}
	d.SetEnabled(true)

	// Removed, for good.
	h.Remove()
	h.SetEnabled(true) // does not bring it back
	for range 4 {
		if err := put(d, "c", "x"); err != nil {
			t.Fatalf("put after Remove: %v", err)
		}
	}
	if h.Matched() != 2 {
		t.Fatalf("a removed rule matched %d times, want the 2 from before", h.Matched())
	}
	if d.Injected() != 2 {
		t.Fatalf("injected %d, want 2", d.Injected())
	}
}

func TestHooks(t *testing.T) {
	inner := mem.New()
	d := faultstore.Wrap(inner, 0)
	var mu sync.Mutex
	var log []string
	note := func(s string) { mu.Lock(); log = append(log, s); mu.Unlock() }
	d.Add(faultstore.Rule{Op: objstore.OpPut, Every: 1, Fault: faultstore.Hook,
		Hook: func(op objstore.Op, key string) { note("hook " + string(op) + " " + key) },
		Before: func(_ context.Context, c faultstore.Call) error {
			note("before " + c.Key)
			if exists(t, inner, c.Key) {
				t.Errorf("Before ran after the driver stored %s", c.Key)
			}
			return nil
		},
		After: func(c faultstore.Call) {
			if !exists(t, inner, c.Key) || c.Err != nil || c.Size != 3 || c.Op != objstore.OpPut {
				t.Errorf("After saw %+v, with the object there: %v", c, exists(t, inner, c.Key))
			}
			note("after " + c.Key)
		}})
	if err := put(d, "k", "xyz"); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(log, ", "); got != "hook put k, before k, after k" {
		t.Fatalf("hooks ran: %s", got)
	}

	// Before's error is the operation's, and the driver is not called;
	// nor are After hooks.
	errNo := errors.New("no")
	afterRan := false
	d = faultstore.Wrap(inner, 0,
		faultstore.Rule{Op: objstore.OpDelete, Every: 1, Fault: faultstore.Hook,
			Before: func(context.Context, faultstore.Call) error { return errNo },
			After:  func(faultstore.Call) { afterRan = true }})
	if err := d.Delete(ctx, []string{"k"}); err != errNo {
		t.Fatalf("delete: %v, want Before's error", err)
	}
	if !exists(t, inner, "k") || afterRan {
		t.Fatalf("a delete Before failed reached the store (after ran: %v)", afterRan)
	}

	// After sees the driver's error.
	var seen error
	d = faultstore.Wrap(inner, 0, faultstore.Rule{Op: objstore.OpGet, Every: 1, Fault: faultstore.Hook, After: func(c faultstore.Call) { seen = c.Err }})
	if _, _, err := d.Get(ctx, "missing", 0, -1); !errors.Is(err, objstore.ErrNotFound) || !errors.Is(seen, objstore.ErrNotFound) {
		t.Fatalf("get: %v; After saw %v; want ErrNotFound both", err, seen)
	}
}

// A Before that blocks holds the operation until released, or until its
// context ends.
func TestBlockingHook(t *testing.T) {
	inner := mem.New()
	release := make(chan struct{})
	entered := make(chan struct{}, 2)
	d := faultstore.Wrap(inner, 0, faultstore.Rule{Op: objstore.OpPut, Every: 1, Fault: faultstore.Hook,
		Before: func(ctx context.Context, _ faultstore.Call) error {
			entered <- struct{}{}
			select {
			case <-release:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}})
	done := make(chan error, 1)
	go func() { done <- put(d, "held", "x") }()
	<-entered
	select {
	case err := <-done:
		t.Fatalf("a held put returned: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	if exists(t, inner, "held") {
		t.Fatal("a held put reached the store")
	}
	close(release)
	if err := <-done; err != nil || !exists(t, inner, "held") {
		t.Fatalf("released put: %v", err)
	}

	release = make(chan struct{})
	c, cancel := context.WithCancel(ctx)
	go func() {
		_, err := d.Put(c, "abandoned", bytes.NewReader(nil), 0, objstore.PutOptions{})
		done <- err
	}()
	<-entered
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) || exists(t, inner, "abandoned") {
		t.Fatalf("a held put whose context ended: %v", err)
	}
}

// Rules compose in order: each that fires applies until one fails the
// operation.
func TestRulesCompose(t *testing.T) {
	inner := mem.New()
	var hooked, after int
	d := faultstore.Wrap(inner, 0,
		faultstore.Rule{Op: objstore.OpPut, Every: 1, Fault: faultstore.Hook, Hook: func(objstore.Op, string) { hooked++ }, After: func(faultstore.Call) { after++ }},
		faultstore.Rule{Op: objstore.OpPut, Every: 2, Fault: faultstore.FailBefore},
		faultstore.Rule{Op: objstore.OpPut, Every: 3, Fault: faultstore.FailAfter})
	var errs []string
	for i := range 6 {
		err := put(d, "k", "x")
		switch {
		case err == nil:
			errs = append(errs, "ok")
		case strings.Contains(err.Error(), "fail-before"):
			errs = append(errs, "before")
		case strings.Contains(err.Error(), "fail-after"):
			errs = append(errs, "after")
		default:
			t.Fatalf("put %d: %v", i, err)
		}
	}
	if got := strings.Join(errs, " "); got != "ok before after before ok before" || hooked != 6 || after != 3 {
		t.Fatalf("puts: %s; hooked %d, after %d (want ok before after before ok before; 6; 3)", got, hooked, after)
	}
}

func TestRulesThatCannotWorkAreRefused(t *testing.T) {
	for name, r := range map[string]faultstore.Rule{
		"never fires":        {Op: objstore.OpPut, Fault: faultstore.FailBefore},
		"hook without code":  {Every: 1, Fault: faultstore.Hook},
		"code on a non-hook": {Every: 1, Fault: faultstore.FailAfter, After: func(faultstore.Call) {}},
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: Wrap took the rule", name)
				}
			}()
			faultstore.Wrap(mem.New(), 0, r)
		}()
	}
}

// Behind the Store, injected faults are what the store's callers see:
// FailBefore is retried away, Permanent is not.
func TestBehindTheStore(t *testing.T) {
	d := faultstore.Wrap(mem.New(), 0, faultstore.Rule{Op: objstore.OpPut, Nth: 1, Fault: faultstore.FailBefore})
	s := objstore.New(d, "mem://faults", objstore.Options{MaxAttempts: 2, BaseBackoff: time.Millisecond})
	if _, err := s.Put(ctx, "k", strings.NewReader("x"), 1, objstore.PutOptions{}); err != nil {
		t.Fatalf("a put failed once before the store: %v, want it retried", err)
	}
	d.Add(faultstore.Rule{Op: objstore.OpPut, Every: 1, Fault: faultstore.Permanent})
	if _, err := s.Put(ctx, "k", strings.NewReader("x"), 1, objstore.PutOptions{}); !errors.Is(err, objstore.ErrAccessDenied) {
		t.Fatalf("put: %v, want access denied", err)
	}
}
