package tiered_test

import (
	"bytes"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/metrics"
	"github.com/tierlog/tierlog/objstore"
	"github.com/tierlog/tierlog/objstore/storeurl"
	"github.com/tierlog/tierlog/tiered"
)

// lockedBuffer is a bytes.Buffer a logger and the test share.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestBackendLogsNoSecret opens a tiered Backend, logging at debug level
// to a buffer, over store URLs with a secret in each place a URL can hold
// one and credentials in the environment, against a server that answers
// the bucket check and refuses every other request: the Backend's
// uploads fail and are logged. No error of storeurl.Open, no log line and
// no metric may show a secret; the log must name the store it failed on.
func TestBackendLogsNoSecret(t *testing.T) {
	const bucket = "bkt"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodHead && strings.Trim(r.URL.Path, "/") == bucket {
			return
		}
		w.Header().Set("Content-Type", "application/xml")
		w.WriteHeader(http.StatusForbidden)
		fmt.Fprint(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>AccessDenied</Code><Message>Access Denied</Message></Error>`)
	}))
	t.Cleanup(srv.Close)
	addr := srv.Listener.Addr().String()
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIASekritEnvId")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "SekritEnvSecret")
	t.Setenv("AWS_SESSION_TOKEN", "SekritEnvToken")
	opts := "&region=us-east-1&timeout=2s&attempts=1"
	for i, raw := range []string{
		"s3://" + bucket + "/tl?path-style=true&endpoint=http://" + addr + opts,
		"minio://" + bucket + "/tl?endpoint=http://" + addr + opts,
		"s3://" + bucket + "/tl?path-style=true&endpoint=http://u:SekritEndpoint@" + addr + opts,
		"minio://" + bucket + "/tl?endpoint=http://u:SekritEndpoint@" + addr + opts,
		"s3://" + bucket + "/tl?path-style=true&endpoint=" + url.QueryEscape("http://"+addr+"/?X-Amz-Security-Token=SekritTok") + opts,
		"s3://" + bucket + "/tl?path-style=true&endpoint=http://" + addr + opts + "#SekritFragment",
		"s3://" + bucket + "/tl?path-style=true&endpoint=http://" + addr + opts + "&session_token=SekritQ",
		"s3://AKIA:SekritPass@" + bucket + "/tl?path-style=true&endpoint=http://" + addr + opts,
		"s3://AKIA:SekritPass%zz@" + bucket + "/tl?path-style=true&endpoint=http://" + addr + opts,
	} {
		store, err := storeurl.Open(ctx, raw, objstore.Options{})
		if err != nil {
			if strings.Contains(strings.ToLower(err.Error()), "sekrit") {
				t.Errorf("storeurl.Open(%q): the error shows a secret: %v", raw, err)
			}
			continue
		}
		// Named by number: a test's name is in its temporary directories,
		// which the log lines name.
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			t.Logf("store %s", store.Name())
			testBackendLogsNoSecret(t, store)
		})
	}
}

func testBackendLogsNoSecret(t *testing.T, store *objstore.Store) {
	var logs lockedBuffer
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	b, err := tiered.OpenBackend(t.TempDir(), tiered.BackendOptions{Store: store, Prefix: "tl", Manager: fastManager, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(metrics.NewStore(store), metrics.NewTieredBackend(b, metrics.BackendOptions{PerPartition: true}))
	p, err := b.Open(ctx, "orders", 0, cfg(t, tieredCfg...))
	if err != nil {
		t.Fatal(err)
	}
	var errs []string
	if err := p.(*tiered.Partition).BecomeLeader(ctx, 1); err != nil {
		errs = append(errs, err.Error())
	}
	produce(t, p, 2000)
	host := strings.Split(store.Name(), "?")[0]
	eventually(t, 30*time.Second, "no log line names the store's failed requests", func() bool {
		return strings.Contains(logs.String(), host)
	})
	if _, err := p.Read(ctx, 0, backend.ReadOptions{MaxBytes: 1 << 20}); err != nil {
		errs = append(errs, err.Error())
	}
	if err := b.Close(); err != nil {
		errs = append(errs, err.Error())
	}
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := logs.String() + strings.Join(errs, "\n") + fmt.Sprint(fams)
	if strings.Contains(strings.ToLower(out), "sekrit") {
		t.Errorf("a log line, error or metric shows a secret:\n%s", out)
	}
}
