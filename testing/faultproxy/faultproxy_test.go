package faultproxy_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/tierlog/tierlog/testing/faultproxy"
)

// get fetches url with a deadline, returning the body read.
func get(t *testing.T, url string, timeout time.Duration) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// TestToxics: each toxic does what it says to a plain HTTP server, and the
// stream is whole again once it is removed.
func TestToxics(t *testing.T) {
	body := strings.Repeat("tierlog ", 64<<10) // 512 KiB
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, body) }))
	defer up.Close()
	p := faultproxy.Start(t, up.URL)
	if got, err := get(t, p.Endpoint, 5*time.Second); err != nil || got != body {
		t.Fatalf("no toxic: %d bytes, %v", len(got), err)
	}

	name := p.Add(t, faultproxy.Latency(300*time.Millisecond, 0))
	start := time.Now()
	if got, err := get(t, p.Endpoint, 5*time.Second); err != nil || got != body {
		t.Fatalf("latency: %d bytes, %v", len(got), err)
	}
	if took := time.Since(start); took < 300*time.Millisecond {
		t.Errorf("latency of 300ms: the request took %v", took)
	}
	p.Remove(t, name)

	name = p.Add(t, faultproxy.Timeout(0))
	if _, err := get(t, p.Endpoint, 500*time.Millisecond); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("black hole: %v, want a deadline", err)
	}
	if got := p.Active(); len(got) != 1 || got[0] != name {
		t.Errorf("active toxics %v, want [%s]", got, name)
	}
	p.Remove(t, name)

	name = p.Add(t, faultproxy.LimitData(10_000))
	if got, err := get(t, p.Endpoint, 5*time.Second); err == nil || len(got) >= len(body) {
		t.Errorf("limit_data of 10,000 bytes: %d bytes, %v", len(got), err)
	}
	p.Remove(t, name)

	p.Add(t, faultproxy.ResetPeer(0))
	if _, err := get(t, p.Endpoint, 5*time.Second); err == nil {
		t.Errorf("reset_peer: no error")
	}
	p.Reset(t)

	if got, err := get(t, p.Endpoint, 5*time.Second); err != nil || got != body {
		t.Fatalf("after the toxics: %d bytes, %v", len(got), err)
	}
	if p.Added() != 4 || len(p.Active()) != 0 {
		t.Errorf("added %d, active %v", p.Added(), p.Active())
	}
}
