package metrics

import (
	"strconv"
	"time"

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
		uploads         = desc(sub, "segments_uploaded_total", "Segments uploaded (.log with its trimmed indexes) and committed to the manifest.", nil, nil)
		uploadBytes     = desc(sub, "upload_bytes_total", "Bytes of the segments uploaded and committed (.log, .index and .timeindex).", nil, nil)
		uploadErrors    = desc(sub, "upload_errors_total", "Segment uploads that failed after the store's retries.", nil, nil)
		uploadLatency   = desc(sub, "upload_duration_seconds", "Time to upload one segment and its indexes.", nil, nil)
		commits         = desc(sub, "manifest_commits_total", "Manifests committed by conditional put.", nil, nil)
		fenced          = desc(sub, "fenced_total", "Times a partition was fenced by another writer.", nil, nil)
		refused         = desc(sub, "manifests_refused_total", "Partitions taken offline because the bucket's manifest went back in time.", nil, nil)
		restored        = desc(sub, "manifests_restored_total", "Manifests put back from their backup after the bucket answered that they were gone.", nil, nil)
		backupErrors    = desc(sub, "manifest_backup_errors_total", "Manifest backups that could not be written after a commit.", nil, nil)
		confirmed       = desc(sub, "puts_confirmed_total", "Objects put again over themselves because the first put's answer was lost after it landed.", nil, nil)
		unchanged       = desc(sub, "manifest_unchanged_total", "Follower refreshes that found the manifest unchanged by its ETag (no body read).", nil, nil)
		manifestBytes   = desc(sub, "manifest_bytes_put_total", "Bytes of manifest heads and parts put by commits.", nil, nil)
		partsPut        = desc(sub, "manifest_parts_put_total", "Manifest parts put by commits (a head passed its bound or a tier carried).", nil, nil)
		partReads       = desc(sub, "manifest_part_reads_total", "Manifest parts read from the bucket (a head named parts the partition did not hold).", nil, nil)
		remoteReads     = desc(sub, "remote_reads_total", "Reads served from the bucket.", nil, nil)
		remoteBytes     = desc(sub, "remote_read_bytes_total", "Bytes returned by reads from the bucket.", nil, nil)
		remoteErrors    = desc(sub, "remote_read_errors_total", "Reads below the local log start that failed.", nil, nil)
		remoteLatency   = desc(sub, "remote_read_duration_seconds", "Time to serve a read from the bucket (cache hits included).", nil, nil)
		remoteDeleted   = desc(sub, "remote_segments_deleted_total", "Segments removed from the bucket by total retention.", nil, nil)
		compactRunning  = desc(sub, "compact_rounds_running", "Rounds of the bucket's cleaner under way now.", nil, nil)
		compactRounds   = desc(sub, "compact_rounds_total", "Rounds of the bucket's cleaner that ran (compacted tiered partitions).", nil, nil)
		compactBytes    = desc(sub, "compact_bytes_rewritten_total", "Bytes of cleaned segments the bucket's cleaner wrote.", nil, nil)
		compactReplaced = desc(sub, "compact_segments_replaced_total", "Bucket segments replaced by cleaned ones.", nil, nil)
		compactMerges   = desc(sub, "compact_merges_total", "Cleaned segments that replaced more than one bucket segment.", nil, nil)
		compactErrors   = desc(sub, "compact_errors_total", "Rounds of the bucket's cleaner that failed.", nil, nil)
		walHalted       = desc(sub, "wal_writers_halted_total", "Diskless WAL writers that halted (they could not read what holds one of their numbers) and were replaced.", nil, nil)
		dirtyBytes      = desc(sub, "compact_dirty_bytes", "Bytes compacted tiered partitions hold not cleaned yet, by tier (remote: the bucket's own segments at or past the checkpoint; local: every local segment, which only the bucket's cleaner cleans once it leaves the disk), as their last pass of the bucket's cleaner found.", []string{"tier"}, nil)
		cleanBytes      = desc(sub, "compact_clean_bytes", "Bytes of the bucket's own segments below the cleaner's checkpoint, summed over compacted tiered partitions.", nil, nil)
		dirtyRatioMax   = desc(sub, "compact_dirty_ratio_max", "The largest dirty share of a compacted tiered partition's own bucket segments (a round runs past min.cleanable.dirty.ratio).", nil, nil)
		lagSegments     = desc(sub, "copy_lag_segments", "Closed segments below the high watermark not yet uploaded, summed over partitions.", nil, nil)
		lagBytes        = desc(sub, "copy_lag_bytes", "Bytes of closed segments below the high watermark not yet uploaded, summed over partitions.", nil, nil)
		lagMax          = desc(sub, "copy_lag_bytes_max", "The largest copy lag of any one partition, in bytes.", nil, nil)
		lagAgeMax       = desc(sub, "copy_lag_age_seconds_max", "How old the newest record of the oldest segment waiting for upload is, over all partitions.", nil, nil)
		fencedNow       = desc(sub, "fenced_partitions", "Partitions fenced now (they upload and delete nothing more).", nil, nil)
		cacheHits       = desc(sub, "cache_hits_total", "Remote cache hits, by cache (chunk: log ranges; index: remote indexes; manifest: manifest parts' segments).", []string{"cache"}, nil)
		cacheMisses     = desc(sub, "cache_misses_total", "Remote cache misses, by cache.", []string{"cache"}, nil)
		cacheRatio      = desc(sub, "cache_hit_ratio", "Remote cache hits over lookups since start, by cache.", []string{"cache"}, nil)
		aheadWasted     = desc(sub, "read_ahead_wasted_bytes_total", "Bytes read ahead from the bucket that no read reached before the chunk cache evicted them (or a read fetched them again).", nil, nil)
		readJoined      = desc(sub, "read_joined_bytes_total", "Bytes copied to answer remote reads that crossed between cached ranges meeting inside a batch (a read-ahead that could not start at a batch); other reads are answered from the cache in place.", nil, nil)
		tieredPartsDesc = desc(sub, "partitions", "Tiered partitions open.", nil, nil)
	)
	segments, segBytes := tierDescs("remote")
	descs := []*prometheus.Desc{uploads, uploadBytes, uploadErrors, uploadLatency, commits, fenced, refused, restored, backupErrors, confirmed, unchanged, manifestBytes, partsPut, partReads, remoteReads,
		remoteBytes, remoteErrors, remoteLatency, remoteDeleted, compactRunning, compactRounds, compactBytes, compactReplaced, compactMerges, compactErrors, walHalted}
	if partitions != nil {
		descs = append(descs, dirtyBytes, cleanBytes, dirtyRatioMax, lagSegments, lagBytes, lagMax, lagAgeMax, fencedNow, cacheHits, cacheMisses, cacheRatio, aheadWasted, readJoined,
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
			counter(ch, refused, float64(m.ManifestsRefused.Load()))
			counter(ch, restored, float64(m.ManifestsRestored.Load()))
			counter(ch, backupErrors, float64(m.ManifestBackupErrors.Load()))
			counter(ch, confirmed, float64(m.PutsConfirmed.Load()))
			counter(ch, unchanged, float64(m.ManifestUnchanged.Load()))
			counter(ch, manifestBytes, float64(m.ManifestBytesPut.Load()))
			counter(ch, partsPut, float64(m.ManifestPartsPut.Load()))
			counter(ch, partReads, float64(m.ManifestPartReads.Load()))
			counter(ch, remoteReads, float64(m.RemoteReads.Load()))
			counter(ch, remoteBytes, float64(m.RemoteReadBytes.Load()))
			counter(ch, remoteErrors, float64(m.RemoteReadErrors.Load()))
			histogram(ch, remoteLatency, m.RemoteReadLatency.Snapshot())
			counter(ch, remoteDeleted, float64(m.RemoteSegmentsDeleted.Load()))
			gauge(ch, compactRunning, float64(m.CompactRunning.Load()))
			counter(ch, compactRounds, float64(m.CompactRounds.Load()))
			counter(ch, compactBytes, float64(m.CompactBytesRewritten.Load()))
			counter(ch, compactReplaced, float64(m.CompactSegmentsReplaced.Load()))
			counter(ch, compactMerges, float64(m.CompactMerges.Load()))
			counter(ch, compactErrors, float64(m.CompactErrors.Load()))
			counter(ch, walHalted, float64(m.WALWritersHalted.Load()))
			if partitions == nil {
				return
			}
			parts := partitions()
			var (
				lagN, segN, nFenced int
				lagB, lagMaxB, segB int64
				lagAge              time.Duration
				cs                  tiered.CacheStats
				dirty               tiered.DirtyState // summed, the ratio the largest
			)
			seen := map[*tiered.Caches]bool{} // partitions of a Backend share one
			now := time.Now()
			for _, p := range parts {
				n, b := p.CopyLag()
				lagN += n
				lagB += b
				lagMaxB = max(lagMaxB, b)
				if n > 0 {
					lagAge = max(lagAge, p.CopyLagAge(now))
				}
				n, b = p.RemoteSize()
				segN += n
				segB += b
				if p.Fenced() != nil {
					nFenced++
				}
				if d, ok := p.Dirty(); ok {
					dirty.BucketDirty += d.BucketDirty
					dirty.BucketClean += d.BucketClean
					dirty.Local += d.Local
					dirty.Ratio = max(dirty.Ratio, d.Ratio)
				}
				if c := p.Caches(); !seen[c] {
					seen[c] = true
					st := c.Stats()
					cs.ChunkHits += st.ChunkHits
					cs.ChunkMisses += st.ChunkMisses
					cs.IndexHits += st.IndexHits
					cs.IndexMisses += st.IndexMisses
					cs.ManifestHits += st.ManifestHits
					cs.ManifestMisses += st.ManifestMisses
					cs.ReadAheadWastedBytes += st.ReadAheadWastedBytes
					cs.ReadJoinedBytes += st.ReadJoinedBytes
				}
			}
			gauge(ch, dirtyBytes, float64(dirty.BucketDirty), "remote")
			gauge(ch, dirtyBytes, float64(dirty.Local), "local")
			gauge(ch, cleanBytes, float64(dirty.BucketClean))
			gauge(ch, dirtyRatioMax, dirty.Ratio)
			gauge(ch, lagAgeMax, lagAge.Seconds())
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
			}{{"chunk", cs.ChunkHits, cs.ChunkMisses}, {"index", cs.IndexHits, cs.IndexMisses}, {"manifest", cs.ManifestHits, cs.ManifestMisses}} {
				counter(ch, cacheHits, float64(c.hits), c.name)
				counter(ch, cacheMisses, float64(c.misses), c.name)
				ratio := 0.0
				if c.hits+c.misses > 0 {
					ratio = float64(c.hits) / float64(c.hits+c.misses)
				}
				gauge(ch, cacheRatio, ratio, c.name)
			}
			counter(ch, aheadWasted, float64(cs.ReadAheadWastedBytes))
			counter(ch, readJoined, float64(cs.ReadJoinedBytes))
		},
	}
}

// BackendOptions tune NewTieredBackend.
type BackendOptions struct {
	// PerPartition adds a series per led partition for its copy lag
	// (segments, bytes, age), labelled topic and partition: Kafka's
	// RemoteCopyLagBytes and RemoteCopyLagSegments. Off by default: a
	// broker of 10,000 partitions would export 30,000 series.
	PerPartition bool
}

// NewTieredBackend returns a collector for a tiered.Backend: everything
// NewTiered reports over its partitions, and its reader pool (reads in
// flight, queued, refused), its caches' bytes and, with PerPartition, each
// led partition's copy lag.
func NewTieredBackend(b *tiered.Backend, opts BackendOptions) prometheus.Collector {
	const sub = "tiered"
	inner := NewTiered(b.Metrics(), b.TieredPartitions)
	var (
		reading    = desc(sub, "remote_reads_in_flight", "Remote reads holding a reader (remote.log.reader.threads).", nil, nil)
		queued     = desc(sub, "remote_reads_queued", "Remote reads waiting for a reader (remote.log.reader.max.pending.tasks).", nil, nil)
		rejected   = desc(sub, "remote_reads_rejected_total", "Remote reads refused because the reader pool and its queue were full.", nil, nil)
		cacheBytes = desc(sub, "cache_bytes", "Bytes held by the remote read caches in memory, by cache.", []string{"cache"}, nil)
		pSegments  = desc(sub, "partition_copy_lag_segments", "Closed segments below the last stable offset not yet uploaded.", []string{"topic", "partition"}, nil)
		pBytes     = desc(sub, "partition_copy_lag_bytes", "Bytes of closed segments below the last stable offset not yet uploaded.", []string{"topic", "partition"}, nil)
		pAge       = desc(sub, "partition_copy_lag_age_seconds", "How old the newest record of the oldest segment waiting for upload is.", []string{"topic", "partition"}, nil)
	)
	descs := []*prometheus.Desc{reading, queued, rejected, cacheBytes}
	if opts.PerPartition {
		descs = append(descs, pSegments, pBytes, pAge)
	}
	return &collector{
		descs: descs,
		inner: inner,
		collect: func(ch chan<- prometheus.Metric) {
			inner.Collect(ch)
			st := b.Readers().Stats()
			gauge(ch, reading, float64(st.Reading))
			gauge(ch, queued, float64(st.Queued))
			counter(ch, rejected, float64(st.Rejected))
			idx, chunks := b.Caches().Bytes()
			gauge(ch, cacheBytes, float64(idx), "index")
			gauge(ch, cacheBytes, float64(chunks), "chunk")
			gauge(ch, cacheBytes, float64(b.Caches().ManifestBytes()), "manifest")
			if !opts.PerPartition {
				return
			}
			for _, l := range b.CopyLags() {
				part := strconv.Itoa(int(l.Partition.Partition))
				gauge(ch, pSegments, float64(l.Segments), l.Partition.Topic, part)
				gauge(ch, pBytes, float64(l.Bytes), l.Partition.Topic, part)
				gauge(ch, pAge, l.Age.Seconds(), l.Partition.Topic, part)
			}
		},
	}
}
