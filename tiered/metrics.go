package tiered

import (
	"sync/atomic"

	"github.com/tierlog/tierlog/stats"
)

// Metrics are the counters tiered partitions record into. Partitions that
// share Options.Metrics share one set; a Partition without one gets its own
// (Partition.Metrics). Request-level counts (PUTs, GETs, retries, errors by
// operation) are the objstore.Store's; these are per segment and per read.
type Metrics struct {
	SegmentsUploaded atomic.Int64
	BytesUploaded    atomic.Int64 // .log, .index and .timeindex
	UploadErrors     atomic.Int64 // segments whose upload failed
	// UploadsRefused counts segments refused for upload because a batch
	// failed validation (they stay local; see Offload).
	UploadsRefused atomic.Int64
	// LocalDeletesRefused counts local segments local retention kept
	// because the bucket's copy could not be shown to be the same bytes.
	LocalDeletesRefused atomic.Int64
	// VerifyBytes counts bytes read back from the bucket to compare with
	// local segments whose boundaries no manifest entry shares (see
	// bucketHoldsLocked), before local retention deleted them.
	VerifyBytes     atomic.Int64
	UploadLatency   stats.Histogram
	ManifestCommits atomic.Int64
	Fenced          atomic.Int64 // partitions fenced by another writer

	RemoteReads       atomic.Int64 // reads served from the bucket
	RemoteReadBytes   atomic.Int64
	RemoteReadErrors  atomic.Int64
	RemoteReadLatency stats.Histogram

	RemoteSegmentsDeleted atomic.Int64 // by total retention
}

// Metrics returns the counters the partition records into.
func (p *Partition) Metrics() *Metrics { return p.metrics }

// RemoteSize returns how many segments the committed manifest names and
// their bytes (.log only).
func (p *Partition) RemoteSize() (segments int, bytes int64) {
	m := p.Manifest()
	for _, s := range m.Segments {
		bytes += s.Size
	}
	return len(m.Segments), bytes
}
