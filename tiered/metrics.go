package tiered

import (
	"sync/atomic"
	"time"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/stats"
)

// Metrics are the counters tiered partitions record into. Partitions that
// share Options.Metrics share one set; a Partition without one gets its own
// (Partition.Metrics). Request-level counts (PUTs, GETs, retries, errors by
// operation) are the objstore.Store's; these are per segment and per read.
type Metrics struct {
	// SegmentsUploaded counts segments uploaded and committed (an
	// upload its group abandoned is counted when it is sent again);
	// BytesUploaded their .log, .index and .timeindex bytes, and
	// UploadLatency each one's upload.
	SegmentsUploaded atomic.Int64
	BytesUploaded    atomic.Int64
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
	// ManifestsRefused counts partitions taken offline because the
	// bucket's manifest went back in time (backend.ErrManifestRolledBack).
	ManifestsRefused atomic.Int64
	// ManifestsRestored counts manifests put back from their backup after
	// the bucket answered that they were gone (see backup.go);
	// ManifestBackupErrors the backups that could not be written.
	ManifestsRestored    atomic.Int64
	ManifestBackupErrors atomic.Int64
	// PutsConfirmed counts objects (manifests, segments' objects) put a
	// second time over themselves because the first put's answer was
	// lost after it landed (see confirmPut).
	PutsConfirmed atomic.Int64
	// ManifestUnchanged counts a follower's refreshes that found the
	// manifest's ETag unchanged (a HEAD, no body read).
	ManifestUnchanged atomic.Int64
	// ManifestBytesPut counts the bytes of manifest heads and parts put by
	// commits; ManifestPartsPut the parts, ManifestPartReads the parts
	// read whole from the bucket, ManifestRangeReads the ranged reads of
	// a large part's directory or one of its blocks (a lookup reads those
	// of a part larger than wholePartBytes).
	ManifestBytesPut   atomic.Int64
	ManifestPartsPut   atomic.Int64
	ManifestPartReads  atomic.Int64
	ManifestRangeReads atomic.Int64

	RemoteReads       atomic.Int64 // reads served from the bucket
	RemoteReadBytes   atomic.Int64
	RemoteReadErrors  atomic.Int64
	RemoteReadLatency stats.Histogram

	RemoteSegmentsDeleted atomic.Int64 // by total retention

	// The bucket's cleaner (CompactRemote): rounds under way now, rounds
	// that ran, the .log bytes of the segments they wrote, the bucket
	// segments those replaced, the new segments that replaced more than
	// one, and rounds that failed.
	CompactRunning          atomic.Int64
	CompactRounds           atomic.Int64
	CompactBytesRewritten   atomic.Int64
	CompactSegmentsReplaced atomic.Int64
	CompactMerges           atomic.Int64
	CompactErrors           atomic.Int64

	// WALWritersHalted counts diskless WAL writers that halted (they
	// could not learn what the bucket holds at one of their numbers:
	// wal.ErrHalted) and were replaced by a new one.
	WALWritersHalted atomic.Int64
}

// Metrics returns the counters the partition records into.
func (p *Partition) Metrics() *Metrics { return p.metrics }

// RemoteSize returns how many segments the committed manifest names and
// their bytes (.log only).
func (p *Partition) RemoteSize() (segments int, bytes int64) {
	h := p.Head() // each part's reference carries its count and bytes
	return h.Count(), h.Size()
}

// CopyLagAge returns how old the newest record of the oldest segment not
// yet uploaded is (now minus that segment's largest timestamp), or 0 when
// nothing waits: how far behind the bucket is, in time.
func (p *Partition) CopyLagAge(now time.Time) time.Duration {
	s, ok := p.segs.SpanAfter(p.Head().LastOffset())
	if !ok || s.Active || s.NextOffset > p.local.Offsets().LastStableOffset {
		return 0
	}
	ts, err := p.segs.LargestTimestamp(s.BaseOffset)
	if err != nil || ts < 0 {
		return 0
	}
	return max(now.Sub(time.UnixMilli(ts)), 0)
}

// Caches returns the caches the partition reads through (shared with
// other partitions when Options.Caches was set).
func (p *Partition) Caches() *Caches { return p.caches }

// PartitionLag is one partition's upload backlog: closed segments below
// the last stable offset the bucket does not hold yet.
type PartitionLag struct {
	Partition backend.TopicPartition
	Segments  int
	Bytes     int64
	// Age is how old the newest record of the oldest such segment is.
	Age time.Duration
}

// CopyLags returns the upload backlog of every partition this broker
// leads, in no order: Kafka's RemoteCopyLagBytes and RemoteCopyLagSegments,
// and the age of the oldest segment waiting.
func (b *Backend) CopyLags() []PartitionLag {
	b.mu.Lock()
	parts := make(map[backend.TopicPartition]*Partition, len(b.parts))
	for tp, p := range b.parts {
		parts[tp] = p
	}
	b.mu.Unlock()
	now := b.opts.Now()
	var out []PartitionLag
	for tp, p := range parts {
		if !p.IsLeader() || p.checkOpen() != nil {
			continue
		}
		n, bytes := p.CopyLag()
		out = append(out, PartitionLag{Partition: tp, Segments: n, Bytes: bytes, Age: p.CopyLagAge(now)})
	}
	return out
}
