package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tierlog/tierlog/tiered"
)

// NewTiered returns a collector for tiered partitions that share m
// (tiered.Options.Metrics): segment uploads, manifest commits, fencing,
// remote reads and remote retention; and, over partitions() at each
// scrape, the segments and bytes in the bucket, the copy lag, the cache
// hits and misses, and how many partitions are fenced. partitions may be
// nil (then only m's counters are reported).
func NewTiered(m *tiered.Metrics, partitions func() []*tiered.Partition) prometheus.Collector {
	const sub = "tiered"
	var (
		uploads         = desc(sub, "segments_uploaded_total", "Segments uploaded (.log with its trimmed indexes).", nil, nil)
		uploadBytes     = desc(sub, "upload_bytes_total", "Bytes uploaded (.log, .index and .timeindex).", nil, nil)
		uploadErrors    = desc(sub, "upload_errors_total", "Segment uploads that failed after the store's retries.", nil, nil)
		uploadLatency   = desc(sub, "upload_duration_seconds", "Time to upload one segment and its indexes.", nil, nil)
		commits         = desc(sub, "manifest_commits_total", "Manifests committed by conditional put.", nil, nil)
		fenced          = desc(sub, "fenced_total", "Times a partition was fenced by another writer.", nil, nil)
		remoteReads     = desc(sub, "remote_reads_total", "Reads served from the bucket.", nil, nil)
		remoteBytes     = desc(sub, "remote_read_bytes_total", "Bytes returned by reads from the bucket.", nil, nil)
		remoteErrors    = desc(sub, "remote_read_errors_total", "Reads below the local log start that failed.", nil, nil)
		remoteLatency   = desc(sub, "remote_read_duration_seconds", "Time to serve a read from the bucket (cache hits included).", nil, nil)
		remoteDeleted   = desc(sub, "remote_segments_deleted_total", "Segments removed from the bucket by total retention.", nil, nil)
		lagSegments     = desc(sub, "copy_lag_segments", "Closed segments below the high watermark not yet uploaded, summed over partitions.", nil, nil)
		lagBytes        = desc(sub, "copy_lag_bytes", "Bytes of closed segments below the high watermark not yet uploaded, summed over partitions.", nil, nil)
		lagMax          = desc(sub, "copy_lag_bytes_max", "The largest copy lag of any one partition, in bytes.", nil, nil)
		fencedNow       = desc(sub, "fenced_partitions", "Partitions fenced now (they upload and delete nothing more).", nil, nil)
		cacheHits       = desc(sub, "cache_hits_total", "Remote cache hits, by cache (chunk: log ranges; index: remote indexes).", []string{"cache"}, nil)
		cacheMisses     = desc(sub, "cache_misses_total", "Remote cache misses, by cache.", []string{"cache"}, nil)
		cacheRatio      = desc(sub, "cache_hit_ratio", "Remote cache hits over lookups since start, by cache.", []string{"cache"}, nil)
		tieredPartsDesc = desc(sub, "partitions", "Tiered partitions open.", nil, nil)
	)
	segments, segBytes := tierDescs("remote")
	descs := []*prometheus.Desc{uploads, uploadBytes, uploadErrors, uploadLatency, commits, fenced, remoteReads,
		remoteBytes, remoteErrors, remoteLatency, remoteDeleted}
	if partitions != nil {
		descs = append(descs, lagSegments, lagBytes, lagMax, fencedNow, cacheHits, cacheMisses, cacheRatio,
			tieredPartsDesc, segments, segBytes)
	}
	return &collector{
		descs: descs,
		collect: func(ch chan<- prometheus.Metric) {
			counter(ch, uploads, float64(m.SegmentsUploaded.Load()))
			counter(ch, uploadBytes, float64(m.BytesUploaded.Load()))
			counter(ch, uploadErrors, float64(m.UploadErrors.Load()))
			histogram(ch, uploadLatency, m.UploadLatency.Snapshot())
			counter(ch, commits, float64(m.ManifestCommits.Load()))
			counter(ch, fenced, float64(m.Fenced.Load()))
			counter(ch, remoteReads, float64(m.RemoteReads.Load()))
			counter(ch, remoteBytes, float64(m.RemoteReadBytes.Load()))
			counter(ch, remoteErrors, float64(m.RemoteReadErrors.Load()))
			histogram(ch, remoteLatency, m.RemoteReadLatency.Snapshot())
			counter(ch, remoteDeleted, float64(m.RemoteSegmentsDeleted.Load()))
			if partitions == nil {
				return
			}
			parts := partitions()
			var (
				lagN, segN, nFenced int
				lagB, lagMaxB, segB int64
				cs                  tiered.CacheStats
			)
			for _, p := range parts {
				n, b := p.CopyLag()
				lagN += n
				lagB += b
				lagMaxB = max(lagMaxB, b)
				n, b = p.RemoteSize()
				segN += n
				segB += b
				if p.Fenced() != nil {
					nFenced++
				}
				c := p.CacheStats()
				cs.ChunkHits += c.ChunkHits
				cs.ChunkMisses += c.ChunkMisses
				cs.IndexHits += c.IndexHits
				cs.IndexMisses += c.IndexMisses
			}
			gauge(ch, tieredPartsDesc, float64(len(parts)))
			gauge(ch, lagSegments, float64(lagN))
			gauge(ch, lagBytes, float64(lagB))
			gauge(ch, lagMax, float64(lagMaxB))
			gauge(ch, fencedNow, float64(nFenced))
			gauge(ch, segments, float64(segN))
			gauge(ch, segBytes, float64(segB))
			for _, c := range []struct {
				name         string
				hits, misses int64
			}{{"chunk", cs.ChunkHits, cs.ChunkMisses}, {"index", cs.IndexHits, cs.IndexMisses}} {
				counter(ch, cacheHits, float64(c.hits), c.name)
				counter(ch, cacheMisses, float64(c.misses), c.name)
				ratio := 0.0
				if c.hits+c.misses > 0 {
					ratio = float64(c.hits) / float64(c.hits+c.misses)
				}
				gauge(ch, cacheRatio, ratio, c.name)
			}
		},
	}
}
