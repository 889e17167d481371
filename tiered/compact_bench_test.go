package tiered_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"testing"
	"time"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/compaction"
	"github.com/tierlog/tierlog/local"
	"github.com/tierlog/tierlog/objstore"
	"github.com/tierlog/tierlog/record"
	"github.com/tierlog/tierlog/testing/s3server"
	"github.com/tierlog/tierlog/tiered"
)

// BenchmarkCompactRemote measures the bucket's cleaner on a compacted
// tiered topic of K keys (TIERLOG_COMPACT_KEYS, default 20,000) given U
// updates (TIERLOG_COMPACT_UPDATES, default 1,000,000) of 100-byte
// values with uniformly random keys, on MinIO on loopback: every closed
// segment goes to the bucket and leaves the disk (local.retention.bytes
// 0) as it would in a broker, and the service's rounds run after each
// upload when the ratio says so. It reports the bucket's bytes (those
// the manifest names, and all objects before gc) over the bytes of one
// value per key (key and value), the remote bytes the cleaner rewrote
// (rewritten-MB, and over the bytes appended, rewritten/appended) and
// read (cleaned-MB), the requests per GiB it rewrote, and its throughput
// over the bucket (segment bytes cleaned per second of its rounds, map
// pass and uploads included) beside the local cleaner's on the same
// updates. `make bench-compact` runs 100,000 keys and 5 million updates.
func BenchmarkCompactRemote(b *testing.B) {
	keys := envInt(b, "TIERLOG_COMPACT_KEYS", 20_000)
	updates := envInt(b, "TIERLOG_COMPACT_UPDATES", 1_000_000)
	const valueBytes = 100
	live := int64(keys) * int64(len(fmt.Sprintf("key-%09d", 0))+valueBytes)
	for range b.N {
		store := realStoreOn(b, s3server.SharedKind(b, s3server.MinIO), "minio")
		dir := filepath.Join(b.TempDir(), "users-0")
		c := cfg(b, "cleanup.policy", "compact", "remote.storage.enable", "true", "segment.bytes", "4194304",
			"local.retention.bytes", "0", "file.delete.delay.ms", "0", "retention.ms", "-1")
		l, err := local.Open(dir, local.Options{Config: c, LogStartOffset: -1, HighWatermark: -1})
		if err != nil {
			b.Fatal(err)
		}
		p, err := tiered.Open(context.Background(), l, tiered.Options{Store: store, Prefix: "tl/users-0", LeaderEpoch: 1})
		if err != nil {
			b.Fatal(err)
		}
		m, err := compaction.NewOffsetMap(32 << 20)
		if err != nil {
			b.Fatal(err)
		}
		var total tiered.CompactStats
		var took time.Duration
		rng := rand.New(rand.NewPCG(1, 2))
		appended := appendUpdates(b, p, rng, keys, updates, valueBytes, 1<<20, func() {
			if _, err := p.Offload(ctx); err != nil {
				b.Fatal(err)
			}
			st, err := p.CompactRemote(ctx, tiered.CompactOptions{Map: m, ScratchDir: b.TempDir()})
			if err != nil {
				b.Fatal(err)
			}
			if st.Ran {
				total.Stats.BytesRead += st.BytesRead
				total.Stats.BytesWritten += st.BytesWritten
				total.MapBytesRead += st.MapBytesRead
				total.Gets += st.Gets
				total.Puts += st.Puts
				total.Commits += st.Commits
				took += st.Duration
			}
		})
		_, named := p.RemoteSize()
		var all int64
		if err := store.List(ctx, "tl/users-0/", func(o objstore.ObjectInfo) bool { all += o.Size; return true }); err != nil {
			b.Fatal(err)
		}
		gib := float64(total.BytesWritten) / (1 << 30)
		b.ReportMetric(float64(named)/float64(live), "bucket/live")
		b.ReportMetric(float64(all)/float64(live), "before-gc/live")
		b.ReportMetric(float64(total.BytesWritten)/1e6, "rewritten-MB")
		b.ReportMetric(float64(total.BytesWritten)/float64(appended), "rewritten/appended")
		b.ReportMetric(float64(total.BytesRead)/1e6, "cleaned-MB")
		if gib > 0 {
			b.ReportMetric(float64(total.Gets+total.Puts+total.Commits)/gib, "requests/GiB-rewritten")
		}
		if took > 0 {
			b.ReportMetric(float64(total.BytesRead)/took.Seconds()/1e6, "remote-MB/s")
		}
		p.Close()

		// The local cleaner over the same updates, on a local log.
		ll, err := local.Open(filepath.Join(b.TempDir(), "users-0"), local.Options{
			Config: cfg(b, "cleanup.policy", "compact", "segment.bytes", "4194304", "retention.ms", "-1"), LogStartOffset: -1, HighWatermark: -1})
		if err != nil {
			b.Fatal(err)
		}
		var lread int64
		var ltook time.Duration
		first := int64(-1)
		rng = rand.New(rand.NewPCG(1, 2))
		appendUpdates(b, ll, rng, keys, updates, valueBytes, 1<<20, func() {
			// As compaction.Cleaner picks a log: its dirty ratio past
			// min.cleanable.dirty.ratio (0.5).
			segs := ll.SegmentInfos()
			segs = segs[:len(segs)-1]
			dirty, err := compaction.DirtySegments(ll, segs, max(first, ll.Offsets().LogStart), time.Now())
			if err != nil {
				b.Fatal(err)
			}
			if compaction.DirtyRatio(segs, dirty) <= 0.5 {
				return
			}
			st, err := compaction.Clean(ctx, ll, first, compaction.Options{Map: m})
			if err != nil {
				b.Fatal(err)
			}
			lread, ltook, first = lread+st.BytesRead, ltook+st.Duration, st.End
		})
		if ltook > 0 {
			b.ReportMetric(float64(lread)/ltook.Seconds()/1e6, "local-MB/s")
		}
		ll.Close()
	}
}

// appendUpdates appends n updates of uniformly random keys to p as a
// leader, in batches of about batchBytes, moving the high watermark, and
// calls every after each 4 MiB appended and at the end. It returns the
// bytes of the batches appended.
func appendUpdates(b *testing.B, p backend.Partition, rng *rand.Rand, keys, n, valueBytes, batchBytes int, every func()) (appended int64) {
	var bld record.Builder
	val := make([]byte, valueBytes)
	ts := time.Now().UnixMilli()
	since := 0
	for done := 0; done < n; {
		bld.Reset(record.NewBatchHeader())
		for done < n && bld.SizeWith(ts, nil, val, nil) < batchBytes {
			for i := range val {
				val[i] = byte('a' + rng.IntN(26))
			}
			bld.Append(ts, []byte(fmt.Sprintf("key-%09d", rng.IntN(keys))), val, nil)
			done++
		}
		batch, err := bld.Build()
		if err != nil {
			b.Fatal(err)
		}
		since += len(batch)
		appended += int64(len(batch))
		if _, err := p.Append(ctx, append([]byte(nil), batch...), backend.AppendOptions{AssignOffsets: true, LeaderEpoch: 1}); err != nil {
			b.Fatal(err)
		}
		if err := p.SetHighWatermark(p.Offsets().LogEnd); err != nil {
			b.Fatal(err)
		}
		if since >= 4<<20 || done == n {
			every()
			since = 0
		}
	}
	return appended
}
