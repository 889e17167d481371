package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tierlog/tierlog/local"
)

// tierLabels name the tier a segment count is for; the local and tiered
// collectors each emit one tier as a constant label, so both can be
// registered side by side.
func tierDescs(tier string) (segments, bytes *prometheus.Desc) {
	l := prometheus.Labels{"tier": tier}
	return desc("", "segments", "Segments held, by tier (remote: named by committed manifests).", nil, l),
		desc("", "segment_bytes", "Bytes of segment data (.log files) held, by tier.", nil, l)
}

// NewLocal returns a collector for a local.Backend: its logs' appends,
// reads, flushes, rolls and deletions (Backend.Metrics), and the open
// partitions with their local segments and bytes.
func NewLocal(b *local.Backend) prometheus.Collector {
	const sub = "local"
	var (
		appends       = desc(sub, "appends_total", "Appends written.", nil, nil)
		appendErrors  = desc(sub, "append_errors_total", "Appends refused or failed (invalid batches included).", nil, nil)
		appendBytes   = desc(sub, "append_bytes_total", "Bytes appended.", nil, nil)
		appendRecords = desc(sub, "append_records_total", "Records appended.", nil, nil)
		appendLatency = desc(sub, "append_duration_seconds", "Time inside Append: validation, write, and any roll or flush it caused.", nil, nil)
		reads         = desc(sub, "reads_total", "Reads served.", nil, nil)
		readErrors    = desc(sub, "read_errors_total", "Reads that failed (out of range included).", nil, nil)
		readBytes     = desc(sub, "read_bytes_total", "Bytes returned by reads.", nil, nil)
		readLatency   = desc(sub, "read_duration_seconds", "Time inside Read: the two-step lookup (the bytes move later, by sendfile).", nil, nil)
		flushes       = desc(sub, "flushes_total", "Flushes that fsynced data.", nil, nil)
		flushLatency  = desc(sub, "flush_duration_seconds", "Time to fsync a log's unflushed segments.", nil, nil)
		rolls         = desc(sub, "rolls_total", "Segments rolled.", nil, nil)
		deleted       = desc(sub, "segments_deleted_total", "Segments deleted by retention, log start moves and truncation.", nil, nil)
		partitions    = desc(sub, "partitions", "Partitions open.", nil, nil)
	)
	segments, segBytes := tierDescs("local")
	return &collector{
		descs: []*prometheus.Desc{appends, appendErrors, appendBytes, appendRecords, appendLatency, reads, readErrors,
			readBytes, readLatency, flushes, flushLatency, rolls, deleted, partitions, segments, segBytes},
		collect: func(ch chan<- prometheus.Metric) {
			m := b.Metrics()
			counter(ch, appends, float64(m.Appends.Load()))
			counter(ch, appendErrors, float64(m.AppendErrors.Load()))
			counter(ch, appendBytes, float64(m.AppendBytes.Load()))
			counter(ch, appendRecords, float64(m.AppendRecords.Load()))
			histogram(ch, appendLatency, m.AppendLatency.Snapshot())
			counter(ch, reads, float64(m.Reads.Load()))
			counter(ch, readErrors, float64(m.ReadErrors.Load()))
			counter(ch, readBytes, float64(m.ReadBytes.Load()))
			histogram(ch, readLatency, m.ReadLatency.Snapshot())
			counter(ch, flushes, float64(m.Flushes.Load()))
			histogram(ch, flushLatency, m.FlushLatency.Snapshot())
			counter(ch, rolls, float64(m.Rolls.Load()))
			counter(ch, deleted, float64(m.SegmentsDeleted.Load()))
			logs := b.Logs()
			var n int
			var size int64
			for _, l := range logs {
				s, by := l.Size()
				n += s
				size += by
			}
			gauge(ch, partitions, float64(len(logs)))
			gauge(ch, segments, float64(n))
			gauge(ch, segBytes, float64(size))
		},
	}
}
