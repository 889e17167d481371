// Package metrics exports tierlog's counters to Prometheus: one collector
// each for a local.Backend, a set of tiered partitions, an objstore.Store
// and a compaction.Cleaner. Register the ones a broker has:
//
//	reg := prometheus.NewRegistry()
//	reg.MustRegister(
//		metrics.NewLocal(logs),                   // *local.Backend
//		metrics.NewTiered(tm, tieredPartitions),  // *tiered.Metrics, func() []*tiered.Partition
//		metrics.NewTieredBackend(tb, metrics.BackendOptions{}), // or, for a *tiered.Backend, this
//		metrics.NewStore(store),                  // *objstore.Store
//		metrics.NewCleaner(cleaner),              // *compaction.Cleaner
//	)
//	http.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
//
// The collectors read counters the storage packages keep anyway (atomic
// adds on the hot path; nothing here runs until a scrape), and report
// totals over all partitions rather than a series per partition, so a
// broker with 10,000 partitions exports a few dozen series, and a scrape
// costs one pass over the open partitions' segment lists. Per-partition
// detail is one `tierctl ls` away, or opted into for the copy lag
// (BackendOptions.PerPartition).
//
// Every metric is named tierlog_*; latencies are histograms in seconds with
// power-of-two bucket bounds from 1 µs to 33.5 s (package stats).
package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tierlog/tierlog/stats"
)

const namespace = "tierlog"

func desc(subsystem, name, help string, labels []string, constLabels prometheus.Labels) *prometheus.Desc {
	return prometheus.NewDesc(prometheus.BuildFQName(namespace, subsystem, name), help, labels, constLabels)
}

// counter and gauge emit one sample; they are the only constructors the
// collectors use, so a Desc's type is named where it is emitted.
func counter(ch chan<- prometheus.Metric, d *prometheus.Desc, v float64, labels ...string) {
	ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, labels...)
}

func gauge(ch chan<- prometheus.Metric, d *prometheus.Desc, v float64, labels ...string) {
	ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
}

// bounds are the stats.Histogram bucket bounds in seconds.
var bounds = func() []float64 {
	b := make([]float64, stats.Buckets)
	for i := range b {
		b[i] = stats.UpperBound(i)
	}
	return b
}()

// histogram emits a stats.HistogramSnapshot as a Prometheus histogram.
func histogram(ch chan<- prometheus.Metric, d *prometheus.Desc, s stats.HistogramSnapshot, labels ...string) {
	buckets := make(map[float64]uint64, len(bounds))
	var cum uint64
	for i, ub := range bounds {
		cum += s.Counts[i]
		buckets[ub] = cum
	}
	ch <- prometheus.MustNewConstHistogram(d, s.Count, s.Sum.Seconds(), buckets, labels...)
}

// collector is a prometheus.Collector over a fixed set of descriptors and
// a function that emits their samples.
type collector struct {
	descs   []*prometheus.Desc
	collect func(ch chan<- prometheus.Metric)
	inner   prometheus.Collector // described too (its samples come from collect)
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	if c.inner != nil {
		c.inner.Describe(ch)
	}
	for _, d := range c.descs {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) { c.collect(ch) }
