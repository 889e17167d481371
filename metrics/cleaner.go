package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tierlog/tierlog/compaction"
)

// NewCleaner returns a collector for a compaction.Cleaner: rounds, errors,
// bytes read and written, records removed, and the last round's duration,
// ratio of bytes written to read, and keys mapped.
func NewCleaner(c *compaction.Cleaner) prometheus.Collector {
	const sub = "cleaner"
	var (
		rounds       = desc(sub, "rounds_total", "Cleaning rounds run (failed ones included).", nil, nil)
		errs         = desc(sub, "errors_total", "Cleaning rounds that failed.", nil, nil)
		bytesRead    = desc(sub, "bytes_read_total", "Bytes of segments read by the cleaner.", nil, nil)
		bytesWritten = desc(sub, "bytes_written_total", "Bytes of cleaned segments written.", nil, nil)
		removed      = desc(sub, "records_removed_total", "Records removed: superseded, keyless, or expired tombstones.", nil, nil)
		lastDuration = desc(sub, "last_round_duration_seconds", "How long the last round that cleaned something took.", nil, nil)
		lastRatio    = desc(sub, "last_round_ratio", "Bytes written per byte read in the last round (lower: more garbage removed).", nil, nil)
		lastKeys     = desc(sub, "last_round_keys", "Distinct keys the last round mapped.", nil, nil)
		uncleanable  = desc(sub, "uncleanable_partitions", "Compacted logs skipped now because their last round failed (tried again after a wait that doubles with each failure).", nil, nil)
	)
	return &collector{
		descs: []*prometheus.Desc{rounds, errs, bytesRead, bytesWritten, removed, lastDuration, lastRatio, lastKeys, uncleanable},
		collect: func(ch chan<- prometheus.Metric) {
			s := c.Stats()
			counter(ch, rounds, float64(s.Rounds))
			counter(ch, errs, float64(s.Errors))
			counter(ch, bytesRead, float64(s.BytesRead))
			counter(ch, bytesWritten, float64(s.BytesWritten))
			counter(ch, removed, float64(s.Removed))
			gauge(ch, lastDuration, s.Last.Duration.Seconds())
			gauge(ch, lastRatio, s.Last.Ratio())
			gauge(ch, lastKeys, float64(s.Last.Keys))
			gauge(ch, uncleanable, float64(s.Uncleanable))
		},
	}
}
