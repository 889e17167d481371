package broker_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestKafkaPythonProbe: kafka-python 2.0.2 finds the broker's version by
// sending ApiVersions v0 and, without waiting, Metadata v0 on one
// connection; both are answered and the connection serves on. Metadata
// v0's empty topic list asks for every topic. The older probe's
// ListGroups v0 and FindCoordinator v0 are answered too.
func TestKafkaPythonProbe(t *testing.T) {
	b := startBroker(t, testOptions(t.TempDir()))
	createTopic(t, newClient(t, b.Addr()), "probed", 2, nil)
	c := dialRaw(t, b.Addr())
	av := kmsg.NewPtrApiVersionsRequest()
	av.SetVersion(0)
	md := kmsg.NewPtrMetadataRequest()
	md.SetVersion(0)
	c.send(av)
	first := c.corr
	c.send(md)
	c.corr = first
	if _, err := c.recv(av); err != nil {
		t.Fatalf("ApiVersions v0: %v", err)
	}
	c.corr++
	resp, err := c.recv(md)
	if err != nil {
		t.Fatalf("Metadata v0 after ApiVersions v0: no answer: %v", err)
	}
	mr := resp.(*kmsg.MetadataResponse)
	var found bool
	for _, mt := range mr.Topics {
		if mt.Topic != nil && *mt.Topic == "probed" {
			found = true
			if len(mt.Partitions) != 2 {
				t.Errorf("Metadata v0: %d partitions of probed, want 2", len(mt.Partitions))
			}
		}
	}
	if !found || len(mr.Brokers) != 1 {
		t.Errorf("Metadata v0: topics %d (probed found: %v), brokers %d", len(mr.Topics), found, len(mr.Brokers))
	}
	// The probe of a broker that fails ApiVersions: ListGroups v0,
	// then FindCoordinator v0, then Metadata v0, all on one connection.
	lg := kmsg.NewPtrListGroupsRequest()
	lg.SetVersion(0)
	if r := c.roundTrip(lg).(*kmsg.ListGroupsResponse); r.ErrorCode != 0 {
		t.Fatalf("ListGroups v0: error code %d", r.ErrorCode)
	}
	fc := kmsg.NewPtrFindCoordinatorRequest()
	fc.SetVersion(0)
	fc.CoordinatorKey = "kafka-python-default-group"
	if r := c.roundTrip(fc).(*kmsg.FindCoordinatorResponse); r.ErrorCode != 0 {
		t.Fatalf("FindCoordinator v0: error code %d", r.ErrorCode)
	}
	if r := c.apiVersions(3); r.ErrorCode != 0 {
		t.Fatalf("ApiVersions after the probe: error code %d", r.ErrorCode)
	}
}

// warnings records the messages logged at warn level or above.
type warnings struct {
	mu   sync.Mutex
	msgs []string
}

func (w *warnings) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }
func (w *warnings) Handle(_ context.Context, r slog.Record) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	var b strings.Builder
	b.WriteString(r.Message)
	r.Attrs(func(a slog.Attr) bool {
		b.WriteString(" " + a.String())
		return true
	})
	w.msgs = append(w.msgs, b.String())
	return nil
}
func (w *warnings) WithAttrs([]slog.Attr) slog.Handler { return w }
func (w *warnings) WithGroup(string) slog.Handler      { return w }

func (w *warnings) all() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.msgs...)
}

// TestUnsupportedVersionLoggedAtWarn: a connection closed for a request
// of a version the broker does not speak (as Kafka closes it) is logged
// at warn, naming the key and version: an operator sees why a client
// keeps reconnecting.
func TestUnsupportedVersionLoggedAtWarn(t *testing.T) {
	w := &warnings{}
	opts := testOptions(t.TempDir())
	opts.Logger = slog.New(w)
	b := startBroker(t, opts)
	c := dialRaw(t, b.Addr())
	req := kmsg.NewPtrFetchRequest()
	req.SetVersion(0) // Fetch is served from v4
	c.send(req)
	if _, err := c.recv(req); !errors.Is(err, io.EOF) {
		t.Fatalf("Fetch v0: %v, want the connection closed", err)
	}
	for _, m := range w.all() {
		if strings.Contains(m, "api key 1 version 0 not supported") {
			return
		}
	}
	t.Fatalf("no warning names the refused Fetch v0; warnings: %q", w.all())
}
