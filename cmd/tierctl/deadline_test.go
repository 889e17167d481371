package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/tierlog/tierlog/objstore"
)

// The store URL options the deadline tests use, and the bound they give
// (docs/operators.md, "Timeouts"): 2 × 300 ms + a backoff of up to 100 ms.
const (
	deadlineOpts  = "timeout=300ms&attempts=2"
	deadlineBound = 700 * time.Millisecond
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

// bucketOnlyServer answers the bucket check at open (HEAD of the bucket)
// with 200 and every other request not at all: the requests a command
// makes once its store is open.
func bucketOnlyServer(t *testing.T, bucket string) string {
	t.Helper()
	stop := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodHead && strings.Trim(r.URL.Path, "/") == bucket {
			w.WriteHeader(http.StatusOK)
			return
		}
		select {
		case <-stop:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(func() { close(stop); srv.Close() })
	return srv.Listener.Addr().String()
}

// storeCommands lists every runnable command path that has a --store flag.
func storeCommands(c *cobra.Command, prefix string) []string {
	var out []string
	for _, sub := range c.Commands() {
		name := strings.TrimSpace(prefix + " " + sub.Name())
		switch {
		case sub.HasSubCommands():
			out = append(out, storeCommands(sub, name)...)
		case sub.Flags().Lookup("store") != nil:
			out = append(out, name)
		}
	}
	return out
}

// TestStoreCommandsEndWithinTheBound runs every tierctl command that opens
// a --store, as a built binary, against a server that accepts connections
// and never answers, and against one that answers only the bucket check
// at open (so the command's own requests go unanswered), through the s3
// and the minio driver, with timeout= and attempts= in the URL. Each must
// end, exit non-zero and say which store (its endpoint) and which deadline
// it gave up on: the deadline ended it, whatever the machine's pace (no
// wall-clock ceiling is asserted; a hang is caught by go test's -timeout).
// It fails if a command with a --store flag is added without a case here.
func TestStoreCommandsEndWithinTheBound(t *testing.T) {
	if got := (objstore.Options{Timeout: 300 * time.Millisecond, MaxAttempts: 2}).Bound(); got != deadlineBound {
		t.Fatalf("Bound() = %v, want %v", got, deadlineBound)
	}
	tierctlBinary(t)
	env := []string{"AWS_ACCESS_KEY_ID=tierlogtest", "AWS_SECRET_ACCESS_KEY=tierlogtestsecret", "AWS_REGION=us-east-1"}
	// A partition with closed segments, for the commands that open one.
	src := filepath.Join(t.TempDir(), "logs")
	if inv := binRun(t, nil, "produce", src, "--partition", "orders-0", "--count", "3000", "--config", "segment.bytes=65536"); inv.code != 0 {
		t.Fatalf("produce: exit %d\n%s", inv.code, inv.stderr)
	}
	const bucket = "bkt"
	servers := []struct{ name, addr string }{
		{"silent", silentListener(t)},
		{"bucket-check-only", bucketOnlyServer(t, bucket)},
	}
	kf := keyFile(t)
	cases := func(logs, restoreTo, store string) map[string][]string {
		part := filepath.Join(logs, "orders-0")
		return map[string][]string{
			"offload":         {"offload", part, "--store", store},
			"compact":         {"compact", part, "--store", store, "--config", "cleanup.policy=compact"},
			"ls":              {"ls", part, "--store", store},
			"consume":         {"consume", part, "--store", store, "--count", "1"},
			"lookup":          {"lookup", part, "--store", store, "--offset", "0"},
			"verify":          {"verify", logs, "--store", store},
			"manifest show":   {"manifest", "show", "--store", store, "--partition", "orders-0"},
			"manifest verify": {"manifest", "verify", "--store", store, "--partition", "orders-0"},
			"manifest accept": {"manifest", "accept", part, "--store", store},
			"restore":         {"restore", restoreTo, "--store", store, "--partition", "orders-0"},
			"gc":              {"gc", "--store", store, "--partition", "orders-0"},
			"cost":            {"cost", "--store", store},
			"wal ls":          {"wal", "ls", "--store", store},
			"wal verify":      {"wal", "verify", "--store", store},
			"wal gc":          {"wal", "gc", "--store", store},
			"demo":            {"demo", "--records", "1000", "--store", store},
			"rekey":           {"rekey", "--store", store, "--key-file", kf},
			"key list":        {"key", "list", "--store", store, "--key-file", kf},
		}
	}
	all := storeCommands(newRootCmd(), "")
	sort.Strings(all)
	var mu sync.Mutex
	var slowest time.Duration
	for _, srv := range servers {
		for _, scheme := range []string{"s3", "minio"} {
			store := fmt.Sprintf("%s://%s/tl?endpoint=http://%s&region=us-east-1&%s", scheme, bucket, srv.addr, deadlineOpts)
			if scheme == "s3" {
				store += "&path-style=true"
			}
			t.Run(srv.name+"-"+scheme, func(t *testing.T) {
				t.Parallel()
				// Each run has its partition to itself: offload locks its
				// log directory.
				logs := copyDir(t, src)
				byName := cases(logs, filepath.Join(t.TempDir(), "restored"), store)
				for _, c := range all {
					args, ok := byName[c]
					if !ok {
						t.Errorf("command %q has a --store flag and no case in this test", c)
						continue
					}
					start := time.Now()
					inv := binRun(t, env, args...)
					took := time.Since(start)
					mu.Lock()
					slowest = max(slowest, took)
					mu.Unlock()
					out := inv.stderr + inv.stdout
					t.Logf("%s: exit %d after %v: %s", c, inv.code, took.Round(time.Millisecond), strings.TrimSpace(inv.stderr))
					if inv.code == 0 {
						t.Errorf("tierctl %s: exit 0 from a store that never answers\n%s", c, out)
					}
					if !strings.Contains(out, srv.addr) {
						t.Errorf("tierctl %s: the error does not name the store's endpoint %s:\n%s", c, srv.addr, out)
					}
					if !slices.ContainsFunc([]string{"300ms", "700ms"}, func(d string) bool { return strings.Contains(out, d) }) {
						t.Errorf("tierctl %s: the error does not name the deadline (300ms an attempt, 700ms in all):\n%s", c, out)
					}
				}
			})
		}
	}
	t.Cleanup(func() {
		t.Logf("%d commands with --store %v; slowest run %v (bound %v)", len(all), all, slowest.Round(time.Millisecond), deadlineBound)
	})
}
