package objstore_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/tierlog/tierlog/objstore"
	"github.com/tierlog/tierlog/objstore/mem"
)

// scripted is a driver whose Head and Get run a test's function; the rest
// is an in-memory bucket.
type scripted struct {
	*mem.Driver
	head func(ctx context.Context) error
	get  func(ctx context.Context) (io.ReadCloser, objstore.ObjectInfo, error)
}

func (d *scripted) Head(ctx context.Context, key string) (objstore.ObjectInfo, error) {
	if d.head != nil {
		return objstore.ObjectInfo{}, d.head(ctx)
	}
	return d.Driver.Head(ctx, key)
}

func (d *scripted) Get(ctx context.Context, key string, offset, length int64) (io.ReadCloser, objstore.ObjectInfo, error) {
	if d.get != nil {
		return d.get(ctx)
	}
	return d.Driver.Get(ctx, key, offset, length)
}

var fast = objstore.Options{Timeout: 50 * time.Millisecond, MaxAttempts: 3, BaseBackoff: time.Millisecond, MaxBackoff: 2 * time.Millisecond}

// errCause stands for a driver's own error (an SDK's) under a sentinel.
var errCause = errors.New("the driver's own error")

// TestNotFoundSurvivesACancelAfterTheAnswer: the driver answers not-found,
// and the caller's context is cancelled before Store looks at it. The
// answer stays ErrNotFound.
func TestNotFoundSurvivesACancelAfterTheAnswer(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	d := &scripted{Driver: mem.New(), head: func(context.Context) error {
		cancel()
		return fmt.Errorf("%w: %w", objstore.ErrNotFound, errCause)
	}}
	_, err := objstore.New(d, "scripted", fast).Head(ctx, "k")
	if !errors.Is(err, objstore.ErrNotFound) || !errors.Is(err, errCause) {
		t.Fatalf("head answered not-found, then the context was cancelled: %v", err)
	}
	if errors.Is(err, objstore.ErrRetryable) {
		t.Fatalf("a not-found answer became retryable: %v", err)
	}
}

// TestTimeoutKeepsBothCauses: an attempt that runs out of time is
// ErrRetryable and still context.DeadlineExceeded and the driver's error.
func TestTimeoutKeepsBothCauses(t *testing.T) {
	d := &scripted{Driver: mem.New(), head: func(ctx context.Context) error {
		<-ctx.Done()
		return fmt.Errorf("head: %w (%w)", ctx.Err(), errCause)
	}}
	_, err := objstore.New(d, "scripted", fast).Head(context.Background(), "k")
	for _, want := range []error{objstore.ErrRetryable, context.DeadlineExceeded, errCause} {
		if !errors.Is(err, want) {
			t.Errorf("errors.Is(%v, %v) = false", err, want)
		}
	}
}

// TestMappedErrorKeepsTheCause: a driver's "%w: %w" mapping is found both
// ways after Store's wrapping and retries.
func TestMappedErrorKeepsTheCause(t *testing.T) {
	for _, sentinel := range []error{objstore.ErrRetryable, objstore.ErrAccessDenied, objstore.ErrNotFound} {
		d := &scripted{Driver: mem.New(), head: func(context.Context) error { return fmt.Errorf("%w: %w", sentinel, errCause) }}
		_, err := objstore.New(d, "scripted", fast).Head(context.Background(), "k")
		if !errors.Is(err, sentinel) || !errors.Is(err, errCause) {
			t.Errorf("%v: got %v", sentinel, err)
		}
		if !strings.Contains(err.Error(), "scripted") {
			t.Errorf("the error does not name the store: %v", err)
		}
	}
}

// TestCancelDuringRetries: a caller who cancels while Store retries gets
// context.Canceled and the last retryable error.
func TestCancelDuringRetries(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	n := 0
	d := &scripted{Driver: mem.New(), head: func(context.Context) error {
		if n++; n == 2 {
			cancel()
		}
		return fmt.Errorf("%w: %w", objstore.ErrRetryable, errCause)
	}}
	_, err := objstore.New(d, "scripted", objstore.Options{MaxAttempts: 10, BaseBackoff: time.Millisecond}).Head(ctx, "k")
	for _, want := range []error{context.Canceled, objstore.ErrRetryable, errCause} {
		if !errors.Is(err, want) {
			t.Errorf("errors.Is(%v, %v) = false", err, want)
		}
	}
}

// TestShortBodyKeepsUnexpectedEOF: a body that ends early is retryable and
// io.ErrUnexpectedEOF.
func TestShortBodyKeepsUnexpectedEOF(t *testing.T) {
	d := &scripted{Driver: mem.New(), get: func(context.Context) (io.ReadCloser, objstore.ObjectInfo, error) {
		return io.NopCloser(bytes.NewReader([]byte("abc"))), objstore.ObjectInfo{Key: "k", Size: 10}, nil
	}}
	rc, _, err := objstore.New(d, "scripted", fast).Get(context.Background(), "k", 0, -1)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	_, err = io.ReadAll(rc)
	if !errors.Is(err, objstore.ErrRetryable) || !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("a body 7 bytes short: %v", err)
	}
}

func TestBound(t *testing.T) {
	if got, want := (objstore.Options{}).Bound(), 151500*time.Millisecond; got != want {
		t.Errorf("the default bound is %v, the docs say %v", got, want)
	}
	o := objstore.Options{Timeout: time.Second, MaxAttempts: 4, BaseBackoff: time.Second, MaxBackoff: 1500 * time.Millisecond}
	if got, want := o.Bound(), 4*time.Second+time.Second+1500*time.Millisecond+1500*time.Millisecond; got != want {
		t.Errorf("Bound() = %v, want %v", got, want)
	}
}

// TestReadAllStartsOverOnANewVersion: a read resumed after a break that
// finds another ETag starts over, so the bytes are all of one version.
func TestReadAllStartsOverOnANewVersion(t *testing.T) {
	calls := 0
	d := &scripted{Driver: mem.New(), get: func(context.Context) (io.ReadCloser, objstore.ObjectInfo, error) {
		calls++
		switch calls {
		case 1: // version a, cut after 3 of 6 bytes
			return io.NopCloser(strings.NewReader("abc")), objstore.ObjectInfo{Key: "k", Size: 6, ETag: `"a"`}, nil
		default: // version b, whole (the resumed read asked for 3.., and is refused)
			return io.NopCloser(strings.NewReader("uvwxyz")), objstore.ObjectInfo{Key: "k", Size: 6, ETag: `"b"`}, nil
		}
	}}
	got, err := objstore.New(d, "scripted", fast).ReadAll(context.Background(), "k", 0, -1)
	if err != nil || string(got) != "uvwxyz" {
		t.Fatalf("ReadAll across an overwrite: %q, %v (want version b whole)", got, err)
	}
}

// trickle is a driver whose Put reads the body in small steps, a pause
// between each (a slow link), or never (stall: a server that takes the
// connection and reads nothing), until its context ends.
type trickle struct {
	*mem.Driver
	step  int
	pause time.Duration
	stall bool
}

func (d *trickle) Put(ctx context.Context, key string, body io.ReadSeeker, size int64, opts objstore.PutOptions) (objstore.ObjectInfo, error) {
	if d.stall {
		<-ctx.Done()
		return objstore.ObjectInfo{}, fmt.Errorf("put: %w", ctx.Err())
	}
	var got bytes.Buffer
	for {
		select {
		case <-ctx.Done():
			return objstore.ObjectInfo{}, fmt.Errorf("put after %d bytes: %w", got.Len(), ctx.Err())
		case <-time.After(d.pause):
		}
		n, err := io.CopyN(&got, body, int64(d.step))
		if err == io.EOF || (err == nil && n == 0) {
			break
		}
		if err != nil {
			return objstore.ObjectInfo{}, err
		}
	}
	return d.Driver.Put(ctx, key, bytes.NewReader(got.Bytes()), int64(got.Len()), opts)
}

// TestPutThatMovesOutlastsTheBound: a put whose body keeps moving is not
// cut short by the attempt's Timeout nor by the store's bound, however
// long it takes in all (a large segment on a slow link); a put that
// moves nothing fails retryably as a deadline.
func TestPutThatMovesOutlastsTheBound(t *testing.T) {
	opts := objstore.Options{Timeout: time.Second, MaxAttempts: 2, BaseBackoff: time.Millisecond, MaxBackoff: time.Millisecond}
	body := bytes.Repeat([]byte("segment "), 50*128) // 50 steps of 1 KiB
	d := &trickle{Driver: mem.New(), step: 1024, pause: opts.Bound() / 40}
	s := objstore.New(d, "trickle", opts)
	if _, err := s.Put(context.Background(), "k", bytes.NewReader(body), int64(len(body)), objstore.PutOptions{}); err != nil {
		t.Fatalf("a put whose body moved every %v, %v in all against a bound of %v: %v", d.pause, 50*d.pause, opts.Bound(), err)
	}
	got, err := s.ReadAll(context.Background(), "k", 0, -1)
	if err != nil || !bytes.Equal(got, body) {
		t.Fatalf("read back %d bytes (%v), want the %d put", len(got), err, len(body))
	}

	stalled := objstore.New(&trickle{Driver: mem.New(), stall: true}, "stall", fast)
	_, err = stalled.Put(context.Background(), "k", bytes.NewReader(body), int64(len(body)), objstore.PutOptions{})
	for _, want := range []error{objstore.ErrRetryable, context.DeadlineExceeded} {
		if !errors.Is(err, want) {
			t.Errorf("a put whose body never moved: errors.Is(%v, %v) = false", err, want)
		}
	}
}

// TestWithDriverSharesStats: a Store over another driver of the bucket
// counts into the first one's Stats, with its name and options.
func TestWithDriverSharesStats(t *testing.T) {
	ctx := context.Background()
	a := objstore.New(mem.New(), "bucket", objstore.Options{MaxAttempts: 2})
	b := a.WithDriver(mem.New())
	if _, err := b.Put(ctx, "k", strings.NewReader("v"), 1, objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.ReadAll(ctx, "k", 0, -1); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("a's driver holds b's object: %v", err)
	}
	st := a.Stats()
	if st.Requests[objstore.OpPut] != 1 || st.Requests[objstore.OpGet] != 1 || st.BytesOut != 1 {
		t.Fatalf("a's stats %+v, want b's put and a's get", st)
	}
	if b.Name() != "bucket" || b.Options().MaxAttempts != 2 {
		t.Fatalf("b: %q %+v", b.Name(), b.Options())
	}
}
