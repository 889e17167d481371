package tiered_test

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/local"
	"github.com/tierlog/tierlog/objstore"
	"github.com/tierlog/tierlog/objstore/mem"
	"github.com/tierlog/tierlog/objstore/seal"
	"github.com/tierlog/tierlog/testing/faultstore"
	"github.com/tierlog/tierlog/tiered"
)

// The tiered benchmarks run against the S3 server the tests use (the s3
// driver), on a 32 MiB partition in 1 MiB segments built once.

var (
	benchOnce sync.Once
	benchDir  string
	benchLEO  int64
)

func benchLog(b *testing.B) (*local.Log, backend.Config) {
	c := cfg(b, "segment.bytes", "1048576", "local.retention.ms", "-1", "retention.ms", "-1")
	benchOnce.Do(func() {
		root, _ := os.MkdirTemp("", "tierlog-tiered-bench-")
		benchDir = filepath.Join(root, "orders-0")
		l, err := local.Open(benchDir, local.Options{Config: c, LogStartOffset: -1, HighWatermark: -1})
		if err != nil {
			b.Fatal(err)
		}
		produce(b, l, 32<<20/230)
		benchLEO = l.Offsets().LogEnd
		l.Close()
	})
	l, err := local.Open(benchDir, local.Options{Config: c, CleanShutdown: true, RecoveryPoint: benchLEO, LogStartOffset: -1, HighWatermark: benchLEO})
	if err != nil {
		b.Fatal(err)
	}
	return l, c
}

// BenchmarkOffload uploads every closed segment (about 31 MiB) with
// manifest commits; BenchmarkRawPut uploads the same files with plain
// puts. Target: offload >= 0.9 of raw.
func BenchmarkOffload(b *testing.B) { offloadBench(b, realStore(b, "s3"), offloadAll) }

// offloadAll is Offload, for offloadBench.
func offloadAll(p *tiered.Partition) error {
	_, err := p.Offload(ctx)
	return err
}

// BenchmarkCopyTurns offloads the same log as BenchmarkOffload the way
// a Backend's copier does: CopyTurn after CopyTurn until none waits. It
// reports the requests the bucket received per segment.
func BenchmarkCopyTurns(b *testing.B) {
	store := realStore(b, "s3")
	requests := func() (n int64) {
		for _, v := range store.Stats().Requests {
			n += v
		}
		return n
	}
	var sent int64
	rounds, segments := offloadBench(b, store, func(p *tiered.Partition) error {
		before := requests()
		defer func() { sent += requests() - before }()
		for more := true; more; {
			var err error
			if _, more, err = p.CopyTurn(ctx); err != nil {
				return err
			}
		}
		return nil
	})
	b.ReportMetric(float64(sent)/float64(rounds*segments), "requests/segment")
}

// offloadBench offloads, with offload, a copy of the benchmarks' log a
// round, and returns the rounds and the segments each offloaded.
func offloadBench(b *testing.B, store *objstore.Store, offload func(*tiered.Partition) error) (rounds, segments int) {
	l, _ := benchLog(b)
	var size int64
	for _, si := range l.SegmentInfos() {
		if !si.Active {
			size += si.Size
			segments++
		}
	}
	l.Close()
	b.SetBytes(size)
	for b.Loop() {
		// Each round offloads a copy of the log, made untimed, under a
		// fresh prefix: a partition that offloaded remembers its bucket's
		// manifest (its tier-state-checkpoint), and rightly refuses a
		// bucket without it.
		b.StopTimer()
		l := copyBenchLog(b, cfg(b, "segment.bytes", "1048576", "local.retention.ms", "-1", "retention.ms", "-1"))
		b.StartTimer()
		p, err := tiered.Open(ctx, l, tiered.Options{Store: store, Prefix: fmt.Sprintf("b%d/orders-0", rounds), LeaderEpoch: 1})
		if err != nil {
			b.Fatal(err)
		}
		if err := offload(p); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		p.Close()
		b.StartTimer()
		rounds++
	}
	return rounds, segments
}

// copyBenchLog opens a copy of the benchmarks' log (built by benchLog)
// in a directory of its own under config c, closed when the benchmark
// ends.
func copyBenchLog(b *testing.B, c backend.Config) *local.Log {
	dir := filepath.Join(b.TempDir(), "orders-0")
	if err := os.CopyFS(dir, os.DirFS(benchDir)); err != nil {
		b.Fatal(err)
	}
	l, err := local.Open(dir, local.Options{Config: c, CleanShutdown: true, RecoveryPoint: benchLEO, LogStartOffset: -1, HighWatermark: benchLEO})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { l.Close() })
	return l
}

func BenchmarkRawPut(b *testing.B) {
	l, _ := benchLog(b)
	defer l.Close()
	store := realStore(b, "s3")
	var size int64
	for _, si := range l.SegmentInfos() {
		if !si.Active {
			size += si.Size
		}
	}
	b.SetBytes(size)
	i := 0
	for b.Loop() {
		for _, si := range l.SegmentInfos() {
			if si.Active {
				continue
			}
			for _, path := range []string{si.Path, strings.TrimSuffix(si.Path, local.LogSuffix) + local.IndexSuffix, strings.TrimSuffix(si.Path, local.LogSuffix) + local.TimeIndexSuffix} {
				f, err := os.Open(path)
				if err != nil {
					b.Fatal(err)
				}
				st, _ := f.Stat()
				if _, err := store.Put(ctx, fmt.Sprintf("raw%d/%s", i, filepath.Base(path)), f, st.Size(), objstore.PutOptions{}); err != nil {
					b.Fatal(err)
				}
				f.Close()
			}
		}
		i++
	}
}

// offloaded returns a partition whose closed segments are all in a fresh
// bucket and no longer local.
func offloaded(b *testing.B, chunkCache, prefetch int64) (*tiered.Partition, *objstore.Store) {
	return offloadedTo(b, realStore(b, "s3"), chunkCache, prefetch)
}

// offloadedTo is offloaded into store.
func offloadedTo(b *testing.B, store *objstore.Store, chunkCache, prefetch int64) (*tiered.Partition, *objstore.Store) {
	l0, _ := benchLog(b)
	l0.Close()
	l := copyBenchLog(b, cfg(b, "segment.bytes", "1048576", "local.retention.ms", "0", "retention.ms", "-1", "file.delete.delay.ms", "0"))
	p, err := tiered.Open(ctx, l, tiered.Options{Store: store, Prefix: "orders-0", LeaderEpoch: 1, ChunkCacheBytes: chunkCache, PrefetchBytes: prefetch})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := p.Offload(ctx); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { p.Close() })
	return p, store
}

// BenchmarkColdRemoteRead reads the batch holding a random offloaded offset
// with no chunk cache (indexes cached, as after the first read of each
// segment): one ranged GET of 16 KiB + the 64 KiB scan allowance.
// BenchmarkRawRangedGet80KiB is one bare ranged GET of the same size.
// Target: cold read <= 1.5x the raw GET.
func BenchmarkColdRemoteRead(b *testing.B) {
	p, _ := offloaded(b, -1, -1)
	coldBench(b, p)
}

func coldBench(b *testing.B, p *tiered.Partition) {
	end := p.Offsets().LocalLogStart
	rng := rand.New(rand.NewPCG(1, 2))
	for b.Loop() {
		r, err := p.Read(ctx, rng.Int64N(end), backend.ReadOptions{MaxBytes: 16 << 10, MinOneBatch: true})
		if err != nil {
			b.Fatal(err)
		}
		r.WriteTo(io.Discard)
	}
}

func BenchmarkRawRangedGet80KiB(b *testing.B) {
	p, store := offloaded(b, -1, -1)
	m := manifestOf(b, p)
	rng := rand.New(rand.NewPCG(1, 2))
	for b.Loop() {
		s := m.Segments[rng.IntN(len(m.Segments))]
		if _, err := store.ReadAll(ctx, "orders-0/"+s.Name(".log"), rng.Int64N(s.Size-80<<10), 80<<10); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCachedRemoteRead re-reads offloaded batches held in the chunk
// cache; BenchmarkLocalRead reads the same kind of batch from the local
// log. Both report their allocations a read. Target: cached remote at
// most 1.5x local.
func BenchmarkCachedRemoteRead(b *testing.B) {
	p, _ := offloaded(b, 256<<20, -1)
	cachedBench(b, p)
}

func cachedBench(b *testing.B, p *tiered.Partition) {
	end := p.Offsets().LocalLogStart
	offs := make([]int64, 64)
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range offs {
		offs[i] = rng.Int64N(end)
		r, _ := p.Read(ctx, offs[i], backend.ReadOptions{MaxBytes: 16 << 10, MinOneBatch: true})
		r.WriteTo(io.Discard)
	}
	var buf bytes.Buffer
	i := 0
	b.ReportAllocs()
	for b.Loop() {
		r, err := p.Read(ctx, offs[i&63], backend.ReadOptions{MaxBytes: 16 << 10, MinOneBatch: true})
		if err != nil {
			b.Fatal(err)
		}
		buf.Reset()
		r.WriteTo(&buf)
		i++
	}
}

// BenchmarkSealed runs the offload, the cold remote read and the cached
// remote read over a bucket sealed with the default chunks (64 KiB) and
// over the same server unsealed. Target: sealed at least 0.8x unsealed
// (throughput; time the inverse).
func BenchmarkSealed(b *testing.B) {
	for _, sealed := range []bool{false, true} {
		name := map[bool]string{false: "off", true: "on"}[sealed]
		store := func(b *testing.B) *objstore.Store {
			s := realStore(b, "s3")
			if !sealed {
				return s
			}
			d, err := seal.New(s.Driver(), keyRing(b, "k1"), seal.Options{})
			if err != nil {
				b.Fatal(err)
			}
			return objstore.New(d, "sealed", objstore.Options{})
		}
		b.Run("offload/"+name, func(b *testing.B) { offloadBench(b, store(b), offloadAll) })
		b.Run("cold/"+name, func(b *testing.B) {
			p, _ := offloadedTo(b, store(b), -1, -1)
			coldBench(b, p)
		})
		b.Run("cached/"+name, func(b *testing.B) {
			p, _ := offloadedTo(b, store(b), 256<<20, -1)
			cachedBench(b, p)
		})
	}
}

func BenchmarkLocalRead(b *testing.B) {
	l, _ := benchLog(b)
	defer l.Close()
	readRandom(b, l)
}

// readRandom reads the batches of 64 random offsets of the bench log
// from p, over and over, 16 KiB at a time.
func readRandom(b *testing.B, p backend.Partition) {
	rng := rand.New(rand.NewPCG(3, 4))
	offs := make([]int64, 64)
	for i := range offs {
		offs[i] = rng.Int64N(benchLEO)
	}
	var buf bytes.Buffer
	i := 0
	b.ReportAllocs()
	for b.Loop() {
		r, err := p.Read(ctx, offs[i&63], backend.ReadOptions{MaxBytes: 16 << 10, MinOneBatch: true})
		if err != nil {
			b.Fatal(err)
		}
		buf.Reset()
		r.WriteTo(&buf)
		r.Close()
		i++
	}
}

// BenchmarkPartitionLocalRead reads the local log through a tiered
// Partition that has offloaded nothing: random, the batches
// BenchmarkLocalRead reads from the log itself; fetch, the whole log in
// 1 MiB reads as a consumer's fetches do. Its cost over BenchmarkLocalRead
// is the Partition's: its view of the offsets and the walk of the tiers.
func BenchmarkPartitionLocalRead(b *testing.B) {
	l, _ := benchLog(b)
	p, err := tiered.Open(ctx, l, tiered.Options{Store: objstore.New(mem.New(), "mem://bench", objstore.Options{}), Prefix: "orders-0", LeaderEpoch: 1})
	if err != nil {
		l.Close()
		b.Fatal(err)
	}
	defer p.Close()
	b.Run("random", func(b *testing.B) { readRandom(b, p) })
	b.Run("fetch", func(b *testing.B) {
		var total int64
		for b.Loop() {
			for off := int64(0); off < benchLEO; {
				r, err := p.Read(ctx, off, backend.ReadOptions{MaxBytes: 1 << 20, MinOneBatch: true})
				if err != nil {
					b.Fatal(err)
				}
				n, _ := r.WriteTo(io.Discard)
				total += n
				off = r.(backend.OffsetRange).NextOffset()
				r.Close()
			}
		}
		b.SetBytes(total / int64(b.N))
	})
}

// BenchmarkSequentialRemote consumes all offloaded data in 256 KiB reads,
// with and without read-ahead.
func BenchmarkSequentialRemote(b *testing.B) {
	for _, pf := range []int64{-1, 1 << 20} {
		b.Run(map[bool]string{true: "prefetch", false: "no-prefetch"}[pf > 0], func(b *testing.B) {
			var total int64
			for b.Loop() {
				b.StopTimer()
				p, _ := offloaded(b, 64<<20, pf)
				end := p.Offsets().LocalLogStart
				b.StartTimer()
				total += readSequentially(b, p, end)
			}
			b.SetBytes(total / int64(b.N))
		})
	}
}

// readSequentially reads p from offset 0 to end in 256 KiB reads and
// returns the bytes read.
func readSequentially(b *testing.B, p backend.Partition, end int64) (n int64) {
	for off := int64(0); off < end; {
		r, err := p.Read(ctx, off, backend.ReadOptions{MaxBytes: 256 << 10, MinOneBatch: true})
		if err != nil {
			b.Fatal(err)
		}
		n += r.Len()
		off = r.(backend.OffsetRange).NextOffset()
		r.Close()
	}
	return n
}

// BenchmarkCopyQuota: 200 tiered partitions of one closed 64 KiB segment
// each upload to an in-memory bucket under a broker-wide quota of 4 MiB/s,
// far below the bucket's pace; of-cap is the steady .log rate, past the
// limiter's one-second burst, over the cap. Target: 0.9 to 1.1.
func BenchmarkCopyQuota(b *testing.B) {
	const parts, quota = 200, 4 << 20
	for b.Loop() {
		rec := &putRecorder{}
		store := objstore.New(faultstore.Wrap(mem.New(), 0, recordPuts(rec.onPut)), "mem", objstore.Options{})
		m := fastManager
		m.CopyBytesPerSecond = quota
		m.CopierThreads = 16
		bk := openTieredBackend(b, b.TempDir(), store, tiered.BackendOptions{Manager: m})
		all := openRolledPartitions(b, bk, parts)
		for _, p := range all {
			if err := p.BecomeLeader(ctx, 1); err != nil {
				b.Fatal(err)
			}
		}
		eventually(b, 5*time.Minute, "closed segments left to upload", func() bool {
			for _, p := range all {
				if n, _ := p.CopyLag(); n > 0 {
					return false
				}
			}
			return true
		})
		b.ReportMetric(steadyRate(rec.done(), quota)/quota, "of-cap")
		bk.Close()
	}
}

// steadyRate is the bytes a second of puts from when the first burst
// bytes are done to the last.
func steadyRate(puts []timedPut, burst int64) float64 {
	var done, fromBytes int64
	var from time.Time
	for _, p := range puts {
		done += p.size
		if from.IsZero() && done >= burst {
			from, fromBytes = p.at, done
		}
	}
	if from.IsZero() || !puts[len(puts)-1].at.After(from) {
		return 0
	}
	return float64(done-fromBytes) / puts[len(puts)-1].at.Sub(from).Seconds()
}
