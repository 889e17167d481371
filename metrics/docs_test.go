package metrics_test

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tierlog/tierlog/compaction"
	"github.com/tierlog/tierlog/local"
	"github.com/tierlog/tierlog/metrics"
	"github.com/tierlog/tierlog/objstore"
	"github.com/tierlog/tierlog/objstore/mem"
	"github.com/tierlog/tierlog/tiered"
)

// TestEveryMetricDocumented: each metric the collectors describe has a row
// in docs/operators.md, and the doc lists none that does not exist.
func TestEveryMetricDocumented(t *testing.T) {
	doc, err := os.ReadFile("../docs/operators.md")
	if err != nil {
		t.Fatal(err)
	}
	logs, err := local.OpenBackend(t.TempDir(), local.BackendOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer logs.Close()
	cl, err := compaction.NewCleaner(logs, compaction.CleanerOptions{MemoryBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan *prometheus.Desc, 200)
	tb, err := tiered.OpenBackend(t.TempDir(), tiered.BackendOptions{Store: objstore.New(mem.New(), "m", objstore.Options{})})
	if err != nil {
		t.Fatal(err)
	}
	defer tb.Close()
	for _, c := range []prometheus.Collector{metrics.NewLocal(logs), metrics.NewTieredBackend(tb, metrics.BackendOptions{PerPartition: true}),
		metrics.NewStore(objstore.New(mem.New(), "m", objstore.Options{})), metrics.NewCleaner(cl)} {
		c.Describe(ch)
	}
	close(ch)
	name := regexp.MustCompile(`fqName: "([a-z_]+)"`)
	described := map[string]bool{}
	for d := range ch {
		m := name.FindStringSubmatch(d.String())
		if m == nil {
			t.Fatalf("no name in %s", d)
		}
		described[m[1]] = true
		if !strings.Contains(string(doc), "| `"+m[1]) {
			t.Errorf("docs/operators.md does not list %s", m[1])
		}
	}
	for _, m := range regexp.MustCompile("\\| `(tierlog_[a-z_]+)").FindAllStringSubmatch(string(doc), -1) {
		if !described[m[1]] {
			t.Errorf("docs/operators.md lists %s, which no collector exports", m[1])
		}
	}
}
