package local

import (
	"sync/atomic"

	"github.com/tierlog/tierlog/stats"
)

// Metrics are the counters and latency histograms a Log records into. A
// Backend shares one Metrics across all its logs (Backend.Metrics), so ten
// thousand partitions cost one set of counters, not ten thousand; a Log
// opened on its own records into Options.Metrics when set, and nowhere
// otherwise. Package metrics exports them to Prometheus.
//
// Latencies are the time spent inside the call: an Append's validation,
// write and any roll or flush it triggers; a Read's two-step lookup (the
// bytes themselves move later, in Records.WriteTo, and are counted in
// ReadBytes when the Read returns).
type Metrics struct {
	Appends       atomic.Int64 // Append calls that wrote
	AppendErrors  atomic.Int64 // Append calls that failed (invalid input included)
	AppendBytes   atomic.Int64
	AppendRecords atomic.Int64
	AppendLatency stats.Histogram
	// DuplicateAppends counts appends that repeated a batch of their
	// idempotent producer's last five (retries): nothing was written.
	DuplicateAppends atomic.Int64

	Reads       atomic.Int64 // Read calls that returned records (possibly none)
	ReadErrors  atomic.Int64 // out of range included
	ReadBytes   atomic.Int64
	ReadLatency stats.Histogram

	Flushes      atomic.Int64 // flushes that fsynced something
	FlushLatency stats.Histogram

	Rolls           atomic.Int64 // new segments
	SegmentsDeleted atomic.Int64 // by retention, log start or truncation
}

// Size returns how many segments the log has and their bytes on disk
// (indexes not counted). It takes no lock and allocates nothing, so a
// metrics scrape over many partitions stays cheap.
func (l *Log) Size() (segments int, bytes int64) {
	segs := l.segments()
	for _, s := range segs {
		bytes += s.size.Load()
	}
	return len(segs), bytes
}

// SegmentSpan is a segment's offsets and size: a SegmentInfo without the
// paths, which cost three strings to build.
type SegmentSpan struct {
	BaseOffset, NextOffset, Size int64
	Active                       bool
}

// Metrics returns the counters the log records into (shared with the other
// logs of its Backend, when it has one).
func (l *Log) Metrics() *Metrics { return l.metrics }

// Metrics returns the counters every log of the backend records into.
func (b *Backend) Metrics() *Metrics { return &b.metrics }
