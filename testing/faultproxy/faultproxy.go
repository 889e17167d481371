// Package faultproxy puts network faults between tierlog and an S3 server:
// Shopify's toxiproxy, run in-process, as a TCP proxy whose toxics add
// latency, cap bandwidth, reset connections, cut them after some bytes,
// swallow everything (a black hole) or slice the stream into small
// delayed writes.
//
//	p := faultproxy.Start(t, srv.Endpoint)
//	// point the store at p.Endpoint
//	name := p.Add(t, faultproxy.Timeout(0)) // a black hole
//	...
//	p.Remove(t, name)
//
// Add and Remove restart the proxy on its address with the new set of
// toxics, closing the connections open through it (clients see their
// pooled connections closed, and dial again). Changing the toxics of live
// links in place can deadlock toxiproxy v2.5.0 when a link's far end has
// gone (Shopify/toxiproxy#427, #558: RemoveToxic waits forever on a toxic
// blocked sending into a dead sink, holding the collection's lock); a
// restart never waits on links. The proxy stops with the test.
package faultproxy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Shopify/toxiproxy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// Stream directions a toxic acts on.
const (
	// Downstream: from the server to tierlog (responses).
	Downstream = "downstream"
	// Upstream: from tierlog to the server (requests).
	Upstream = "upstream"
)

// Toxic is one fault, as toxiproxy names it. Build one with the
// constructors below; set Stream and Toxicity to change where and how
// often it acts.
type Toxic struct {
	// Type is toxiproxy's toxic type: latency, bandwidth, reset_peer,
	// limit_data, timeout, slicer, slow_close.
	Type string
	// Stream is Downstream (the default) or Upstream.
	Stream string
	// Toxicity is the chance, from 0 to 1, that a connection gets the
	// toxic (the default, 0, means 1: every connection).
	Toxicity float32
	// Attributes are the type's own settings, as toxiproxy's JSON API
	// names them.
	Attributes map[string]any
}

// Latency delays every chunk by d ± jitter.
func Latency(d, jitter time.Duration) Toxic {
	return Toxic{Type: "latency", Attributes: map[string]any{"latency": d.Milliseconds(), "jitter": jitter.Milliseconds()}}
}

// Bandwidth caps the stream at kbPerSecond kilobytes a second.
func Bandwidth(kbPerSecond int64) Toxic {
	return Toxic{Type: "bandwidth", Attributes: map[string]any{"rate": kbPerSecond}}
}

// ResetPeer resets a connection (TCP RST) after its first data plus
// after: a connection reset mid-request or mid-body.
func ResetPeer(after time.Duration) Toxic {
	return Toxic{Type: "reset_peer", Attributes: map[string]any{"timeout": after.Milliseconds()}}
}

// LimitData closes a connection once n bytes passed on it: a body cut
// mid-way.
func LimitData(n int64) Toxic {
	return Toxic{Type: "limit_data", Attributes: map[string]any{"bytes": n}}
}

// Timeout swallows all data and closes the connection after d; with d = 0
// it keeps the connection open and silent until the toxic is removed: a
// black hole.
func Timeout(d time.Duration) Toxic {
	return Toxic{Type: "timeout", Attributes: map[string]any{"timeout": d.Milliseconds()}}
}

// Slicer splits the stream into writes of about avg ± variation bytes,
// delay apart.
func Slicer(avg, variation int, delay time.Duration) Toxic {
	return Toxic{Type: "slicer", Attributes: map[string]any{"average_size": avg, "size_variation": variation, "delay": delay.Microseconds()}}
}

// Proxy is a running toxiproxy proxy in front of one upstream.
type Proxy struct {
	// Endpoint is the proxy as an S3 endpoint: http://127.0.0.1:port.
	Endpoint string
	// Addr is the proxy's host:port.
	Addr string

	upstream string
	name     string
	srv      *toxiproxy.ApiServer
	added    atomic.Int64
	seq      atomic.Int64

	mu     sync.Mutex
	p      *toxiproxy.Proxy // guarded by mu: the running proxy
	active []namedToxic     // guarded by mu: its toxics, in the order added
}

type namedToxic struct {
	name string
	tox  Toxic
}

var quietOnce sync.Once

// Start starts a proxy on a free loopback port in front of upstream
// (host:port, or an http:// URL), stopped when t ends.
func Start(t testing.TB, upstream string) *Proxy {
	t.Helper()
	// toxiproxy's toxics log through zerolog's global logger; the tests
	// log what matters themselves.
	quietOnce.Do(func() { zerolog.SetGlobalLevel(zerolog.Disabled) })
	upstream = strings.TrimPrefix(strings.TrimPrefix(upstream, "http://"), "https://")
	fp := &Proxy{upstream: upstream, name: "tierlog-" + t.Name(),
		srv: toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())}
	fp.mu.Lock()
	defer fp.mu.Unlock()
	if err := fp.startLocked("127.0.0.1:0"); err != nil {
		t.Fatalf("faultproxy: start a proxy to %s: %v", upstream, err)
	}
	fp.Addr = fp.p.Listen
	fp.Endpoint = "http://" + fp.Addr
	t.Cleanup(func() {
		fp.mu.Lock()
		defer fp.mu.Unlock()
		fp.p.Stop()
	})
	return fp
}

// startLocked starts a proxy on listen with the active toxics.
// REQUIRES: mu held.
func (p *Proxy) startLocked(listen string) error {
	np := toxiproxy.NewProxy(p.srv, p.name, listen, p.upstream)
	for _, a := range p.active {
		body, err := json.Marshal(map[string]any{"name": a.name, "type": a.tox.Type, "stream": a.tox.Stream,
			"toxicity": a.tox.Toxicity, "attributes": a.tox.Attributes})
		if err != nil {
			return err
		}
		if _, err := np.Toxics.AddToxicJson(bytes.NewReader(body)); err != nil {
			return fmt.Errorf("toxic %s: %w", body, err)
		}
	}
	if err := np.Start(); err != nil {
		return err
	}
	p.p = np
	return nil
}

// restartLocked stops the running proxy and starts one on the same
// address with the active toxics, retrying briefly while the port frees.
// REQUIRES: mu held.
func (p *Proxy) restartLocked() error {
	p.p.Stop()
	var err error
	for try := 0; try < 50; try++ {
		if err = p.startLocked(p.Addr); err == nil {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return err
}

// Add adds a toxic and returns its name (for Remove).
func (p *Proxy) Add(t testing.TB, tox Toxic) string {
	t.Helper()
	if tox.Stream == "" {
		tox.Stream = Downstream
	}
	if tox.Toxicity == 0 {
		tox.Toxicity = 1
	}
	name := fmt.Sprintf("%s-%s-%d", tox.Type, tox.Stream, p.seq.Add(1))
	p.mu.Lock()
	defer p.mu.Unlock()
	p.active = append(p.active, namedToxic{name, tox})
	if err := p.restartLocked(); err != nil {
		t.Fatalf("faultproxy: add toxic %s: %v", name, err)
	}
	p.added.Add(1)
	return name
}

// Remove removes the toxic named name.
func (p *Proxy) Remove(t testing.TB, name string) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	i := slices.IndexFunc(p.active, func(a namedToxic) bool { return a.name == name })
	if i < 0 {
		t.Fatalf("faultproxy: remove toxic %s: no such toxic", name)
	}
	p.active = slices.Delete(p.active, i, i+1)
	if err := p.restartLocked(); err != nil {
		t.Fatalf("faultproxy: remove toxic %s: %v", name, err)
	}
}

// Reset removes every toxic.
func (p *Proxy) Reset(t testing.TB) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.active = nil
	if err := p.restartLocked(); err != nil {
		t.Fatalf("faultproxy: reset: %v", err)
	}
}

// Active returns the names of the toxics in place.
func (p *Proxy) Active() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]string, 0, len(p.active))
	for _, a := range p.active {
		out = append(out, a.name)
	}
	return out
}

// Added returns how many toxics were added over the proxy's life.
func (p *Proxy) Added() int64 { return p.added.Load() }
