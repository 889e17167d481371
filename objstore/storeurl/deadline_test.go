package storeurl_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tierlog/tierlog/objstore"
	"github.com/tierlog/tierlog/objstore/storeurl"
)

// The options the tests put in their URLs, and the bound they give:
// 2 × 300 ms + 100 ms.
const (
	timeoutOpts = "timeout=300ms&attempts=2"
	testBound   = 700 * time.Millisecond
)

// silentListener accepts connections, reads what is sent and never
// answers, until the test ends.
func silentListener(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			go io.Copy(io.Discard, c)
		}
	}()
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return l.Addr().String()
}

// silentServer answers a bucket check (HEAD of the bucket) with 200 and
// every other request not at all, except a GET of "stall", which gets
// headers and 10 of its 100 bytes, then silence.
func silentServer(t *testing.T, bucket string) string {
	t.Helper()
	stop := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		path := strings.Trim(r.URL.Path, "/")
		switch {
		case r.Method == http.MethodHead && path == bucket:
			w.WriteHeader(http.StatusOK)
			return
		case r.Method == http.MethodGet && strings.HasSuffix(path, "/stall"):
			w.Header().Set("Content-Length", "100")
			w.Header().Set("ETag", `"e"`)
			w.Header().Set("Last-Modified", time.Now().UTC().Format(http.TimeFormat))
			w.WriteHeader(http.StatusOK)
			w.Write(make([]byte, 10))
			w.(http.Flusher).Flush()
		}
		select {
		case <-stop:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(func() { close(stop); srv.Close() })
	return srv.Listener.Addr().String()
}

// within runs fn and checks it fails with a retryable deadline error that
// names addr, not before a whole attempt's timeout (it waited for an
// answer). That the deadline, not the machine's pace, ended it is what is
// checked; the bound itself is the store's Bound(), checked where the
// store is made; a hang is caught by go test's -timeout. No wall-clock
// ceiling: on a busy machine an operation may end late and still be right.
func within(t *testing.T, what, addr string, bound time.Duration, fn func() error) {
	t.Helper()
	start := time.Now()
	err := fn()
	took := time.Since(start)
	t.Logf("%s: %v after %v (bound %v)", what, err, took.Round(time.Millisecond), bound)
	if err == nil {
		t.Errorf("%s: no error from a server that never answers", what)
		return
	}
	if took < 300*time.Millisecond {
		t.Errorf("%s failed after %v, before one attempt's timeout: %v", what, took, err)
	}
	if !errors.Is(err, objstore.ErrRetryable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("%s: not retryable and a deadline: %v", what, err)
	}
	if !strings.Contains(err.Error(), addr) {
		t.Errorf("%s: the error does not name the endpoint %s: %v", what, addr, err)
	}
}

func setCreds(t *testing.T) {
	t.Setenv("AWS_ACCESS_KEY_ID", "tierlogtest")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "tierlogtestsecret")
	t.Setenv("AWS_REGION", "us-east-1")
}

func urls(bucket, addr, opts string) map[string]string {
	return map[string]string{
		"s3":    fmt.Sprintf("s3://%s/p?endpoint=http://%s&path-style=true&region=us-east-1&%s", bucket, addr, opts),
		"minio": fmt.Sprintf("minio://%s/p?endpoint=http://%s&region=us-east-1&%s", bucket, addr, opts),
	}
}

// TestOpenSilentServer: opening a store on a server that accepts and never
// answers fails within the bound, naming the endpoint.
func TestOpenSilentServer(t *testing.T) {
	setCreds(t)
	addr := silentListener(t)
	if got := (objstore.Options{Timeout: 300 * time.Millisecond, MaxAttempts: 2}).Bound(); got != testBound {
		t.Fatalf("Bound() = %v, want %v", got, testBound)
	}
	for scheme, raw := range urls("bkt", addr, timeoutOpts) {
		within(t, "open "+scheme, addr, testBound, func() error {
			s, err := storeurl.Open(context.Background(), raw, objstore.Options{})
			if err == nil {
				s.Close()
			}
			return err
		})
	}
}

// TestOperationsSilentServer: every Store operation on a server that never
// answers fails within the bound, naming the endpoint; so does reading a
// body that stops halfway.
func TestOperationsSilentServer(t *testing.T) {
	setCreds(t)
	addr := silentServer(t, "bkt")
	for scheme, raw := range urls("bkt", addr, timeoutOpts) {
		t.Run(scheme, func(t *testing.T) {
			t.Parallel()
			s, err := storeurl.Open(context.Background(), raw, objstore.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if s.Bound() != testBound {
				t.Fatalf("the URL's options give a bound of %v, want %v", s.Bound(), testBound)
			}
			ctx := context.Background()
			ops := []struct {
				name string
				fn   func() error
			}{
				{"get", func() error { _, _, err := s.Get(ctx, "k", 0, -1); return err }},
				{"put", func() error {
					_, err := s.Put(ctx, "k", bytes.NewReader([]byte("data")), 4, objstore.PutOptions{})
					return err
				}},
				{"head", func() error { _, err := s.Head(ctx, "k"); return err }},
				{"list", func() error { return s.List(ctx, "", func(objstore.ObjectInfo) bool { return true }) }},
				{"delete", func() error { return s.Delete(ctx, "k") }},
				{"readall", func() error { _, err := s.ReadAll(ctx, "k", 0, -1); return err }},
				{"readall of a stalled body", func() error { _, err := s.ReadAll(ctx, "stall", 0, -1); return err }},
			}
			for _, op := range ops {
				within(t, scheme+" "+op.name, addr, testBound, op.fn)
			}
			// A single Read of a body that stalls returns within one
			// attempt's timeout.
			rc, _, err := s.Get(ctx, "stall", 0, -1)
			if err != nil {
				t.Fatal(err)
			}
			defer rc.Close()
			start := time.Now()
			_, err = io.ReadAll(rc)
			if took := time.Since(start); err == nil || !errors.Is(err, objstore.ErrRetryable) || !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("reading a stalled body: %v after %v, want a retryable deadline error", err, took)
			}
		})
	}
}

func TestTimeoutOptions(t *testing.T) {
	for _, raw := range []string{"s3://b?timeout=soon", "s3://b?timeout=-1s", "minio://b?endpoint=http://x:1&attempts=0", "file:///tmp?timeout=1s"} {
		if _, err := storeurl.Open(context.Background(), raw, objstore.Options{}); !errors.Is(err, objstore.ErrInvalidURL) {
			t.Errorf("%s: %v, want ErrInvalidURL", raw, err)
		}
	}
}
