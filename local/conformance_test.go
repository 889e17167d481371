package local_test

import (
	"testing"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/compaction"
	"github.com/tierlog/tierlog/local"
	"github.com/tierlog/tierlog/testing/storagetest"
)

// logHarness opens a local.Log in a temporary directory; a reopen after a
// clean Close skips recovery, any other reopen recovers.
type logHarness struct {
	dir  string
	last *local.Log
}

func (h *logHarness) Open(t *testing.T, cfg backend.Config) backend.Partition {
	t.Helper()
	clean := h.last != nil && h.last.RecoveryPoint() == h.last.Offsets().LogEnd
	l, err := local.Open(h.dir, local.Options{Config: cfg, CleanShutdown: clean, LogStartOffset: -1, HighWatermark: -1})
	if err != nil {
		t.Fatal(err)
	}
	h.last = l
	return l
}

// Compact cleans the log once (storagetest.Compactor).
func (h *logHarness) Compact(t *testing.T, p backend.Partition) { compact(t, p) }

func compact(t *testing.T, p backend.Partition) {
	t.Helper()
	l := p.(*local.Log)
	st, err := compaction.Clean(ctx, l, -1, compaction.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if st.SegmentsRead == 0 {
		t.Fatal("the cleaning round rewrote nothing: the battery would prove nothing")
	}
}

func TestConformance(t *testing.T) {
	storagetest.Run(t, func(t *testing.T) storagetest.Harness { return &logHarness{dir: t.TempDir()} })
}

// backendHarness goes through local.Backend, so reopens use the log dir's
// checkpoints and clean-shutdown marker.
type backendHarness struct {
	dir string
	b   *local.Backend
}

func (h *backendHarness) Open(t *testing.T, cfg backend.Config) backend.Partition {
	t.Helper()
	if h.b != nil {
		h.b.Close()
	}
	b, err := local.OpenBackend(h.dir, local.BackendOptions{})
	if err != nil {
		t.Fatal(err)
	}
	h.b = b
	t.Cleanup(func() { b.Close() })
	p, err := b.Open(ctx, "conformance", 0, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// Compact cleans the log once (storagetest.Compactor).
func (h *backendHarness) Compact(t *testing.T, p backend.Partition) { compact(t, p) }

func TestConformanceThroughBackend(t *testing.T) {
	storagetest.Run(t, func(t *testing.T) storagetest.Harness { return &backendHarness{dir: t.TempDir()} })
}
