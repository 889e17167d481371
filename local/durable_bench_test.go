package local_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/local"
	"github.com/tierlog/tierlog/record"
)

// The benchmarks of this file measure the shapes a broker produces, each
// beside a raw baseline of the same bytes in the same run:
//
//	BenchmarkDurableAppend   16 KiB batches made durable every 1,000
//	                         records (and after every append), beside
//	                         write + fsync and write + fdatasync
//	BenchmarkProduceAppend   4 batches of 16 KiB per Append, beside a
//	                         page-cache write of the same 64 KiB
//	BenchmarkManyPartitions  1,000 partitions of one Backend, 8 goroutines
//	                         appending produce-shaped work, with and
//	                         without a Flush per request, beside one
//	                         partition of the same shape
//
// Every log and raw file rolls at 256 MiB and keeps at most 512 MiB.

const benchSegmentBytes = 256 << 20

func benchLogConfig(b *testing.B, kv ...string) backend.Config {
	b.Helper()
	m := map[string]string{"segment.bytes": strconv.Itoa(benchSegmentBytes), "retention.bytes": strconv.Itoa(2 * benchSegmentBytes),
		"file.delete.delay.ms": "0"}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	c, err := backend.ParseConfig(m)
	if err != nil {
		b.Fatal(err)
	}
	return c
}

// rawSegments writes files of at most benchSegmentBytes, keeping the last
// two, as a log of that segment.bytes and retention.bytes does.
type rawSegments struct {
	b       *testing.B
	dir     string
	f       *os.File
	written int64
	files   int
	// syncAtRoll fsyncs each file as the next one starts, as a log's roll
	// makes the sealed segment durable.
	syncAtRoll bool
}

func newRawSegments(b *testing.B) *rawSegments {
	r := &rawSegments{b: b, dir: b.TempDir()}
	r.next()
	b.Cleanup(func() { r.f.Close() })
	return r
}

func (r *rawSegments) next() {
	if r.f != nil {
		if r.syncAtRoll {
			r.sync(false)
		}
		r.f.Close()
	}
	if r.files >= 2 {
		os.Remove(filepath.Join(r.dir, fmt.Sprint(r.files-2)))
	}
	f, err := os.Create(filepath.Join(r.dir, fmt.Sprint(r.files)))
	if err != nil {
		r.b.Fatal(err)
	}
	r.f, r.written = f, 0
	r.files++
}

func (r *rawSegments) write(p []byte) {
	if r.written+int64(len(p)) > benchSegmentBytes {
		r.next()
	}
	n, err := r.f.Write(p)
	if err != nil {
		r.b.Fatal(err)
	}
	r.written += int64(n)
}

func (r *rawSegments) sync(data bool) {
	var err error
	if data {
		err = syscall.Fdatasync(int(r.f.Fd()))
	} else {
		err = r.f.Sync()
	}
	if err != nil {
		r.b.Fatal(err)
	}
}

// BenchmarkDurableAppend appends 16 KiB batches of 100-byte records as a
// leader and makes them durable: every1000 flushes after the append that
// crosses each 1,000 records (Log.Flush; the raw baselines fsync or
// fdatasync there), every-append after each append (tierlog:
// flush.messages=1, so the append flushes itself). Target: tierlog >= 80%
// of raw-fsync's MB/s.
func BenchmarkDurableAppend(b *testing.B) {
	bs := batches16K(64)
	perBatch := int64(record.Batch(bs[0]).NumRecords())
	for _, cadence := range []string{"every1000", "every-append"} {
		due := func(records *int64) bool { // records since the last sync, this append's included
			*records += perBatch
			if cadence == "every-append" || *records >= 1000 {
				*records %= 1000
				return true
			}
			return false
		}
		b.Run(cadence+"/tierlog", func(b *testing.B) {
			var kv []string
			if cadence == "every-append" {
				kv = []string{"flush.messages", "1"}
			}
			l, err := local.Open(b.TempDir(), local.Options{Config: benchLogConfig(b, kv...), LogStartOffset: -1, HighWatermark: -1})
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			b.SetBytes(int64(len(bs[0])))
			var records int64
			i := 0
			for b.Loop() {
				record.Batch(bs[i&63]).SetBaseOffset(0)
				if _, err := l.Append(ctx, bs[i&63], backend.AppendOptions{AssignOffsets: true}); err != nil {
					b.Fatal(err)
				}
				if due(&records) && cadence != "every-append" {
					if err := l.Flush(); err != nil {
						b.Fatal(err)
					}
				}
				i++
				if i%16384 == 0 {
					l.SetHighWatermark(l.Offsets().LogEnd)
					if _, err := l.DeleteOldSegments(); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
		for _, data := range []bool{false, true} {
			name := "raw-fsync"
			if data {
				name = "raw-fdatasync"
			}
			b.Run(cadence+"/"+name, func(b *testing.B) {
				r := newRawSegments(b)
				b.SetBytes(int64(len(bs[0])))
				var records int64
				i := 0
				for b.Loop() {
					r.write(bs[i&63])
					if due(&records) {
						r.sync(data)
					}
					i++
				}
			})
		}
	}
}

// produceRequest returns n copies of a produce request's records for one
// partition: 4 batches of 16 KiB, back to back, each with base offset 0.
func produceRequest(n int) [][]byte {
	bs := batches16K(4)
	out := make([][]byte, n)
	for i := range out {
		for _, b := range bs {
			out[i] = append(out[i], b...)
		}
	}
	return out
}

// resetBaseOffsets sets every batch's base offset back to 0, as a producer
// sends it (a leader append assigned them in place).
func resetBaseOffsets(data []byte) {
	for pos := 0; pos < len(data); {
		b := record.Batch(data[pos:])
		b.SetBaseOffset(0)
		pos += 12 + int(b.Length()) // base offset and length, then Length bytes
	}
}

// BenchmarkProduceAppend appends a produce request's records for one
// partition, 4 batches of 16 KiB, per Append as a leader (page cache, no
// fsync); raw-write writes the same 64 KiB with one os.File.Write, and
// raw-write-sync-at-roll also fsyncs each 256 MiB file when the next one
// starts, as a log's roll makes the sealed segment durable in the
// background (plain raw-write removes its old files before most of their
// pages reach the disk). Target: tierlog >= 80% of raw-write's MB/s.
func BenchmarkProduceAppend(b *testing.B) {
	reqs := produceRequest(16)
	b.Run("tierlog", func(b *testing.B) {
		l, err := local.Open(b.TempDir(), local.Options{Config: benchLogConfig(b), LogStartOffset: -1, HighWatermark: -1})
		if err != nil {
			b.Fatal(err)
		}
		defer l.Close()
		b.SetBytes(int64(len(reqs[0])))
		i := 0
		for b.Loop() {
			req := reqs[i&15]
			resetBaseOffsets(req)
			if _, err := l.Append(ctx, req, backend.AppendOptions{AssignOffsets: true}); err != nil {
				b.Fatal(err)
			}
			i++
			if i%4096 == 0 {
				l.SetHighWatermark(l.Offsets().LogEnd)
				if _, err := l.DeleteOldSegments(); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
	for _, atRoll := range []bool{false, true} {
		name := "raw-write"
		if atRoll {
			name = "raw-write-sync-at-roll"
		}
		b.Run(name, func(b *testing.B) {
			r := newRawSegments(b)
			r.syncAtRoll = atRoll
			b.SetBytes(int64(len(reqs[0])))
			i := 0
			for b.Loop() {
				r.write(reqs[i&15])
				i++
			}
		})
	}
}

// BenchmarkManyPartitions appends produce-shaped work (one Append of 4
// batches of 16 KiB to a partition per call, as a broker hands a produce
// request's records for a partition) from 8 goroutines to 1,000
// partitions of one Backend, each call to a random partition; with fsync
// each call is followed by the partition's Flush (acks after an fsync).
// 1-partition is one goroutine appending the same shape to one partition
// of a Backend: the goal is 1000-partitions >= 80% of its MB/s. p99-µs is
// the 99th percentile of a call's latency (Append, and Flush with fsync).
// TIERLOG_BENCH_MANY overrides the partition count.
func BenchmarkManyPartitions(b *testing.B) {
	n := 1000
	if v, err := strconv.Atoi(os.Getenv("TIERLOG_BENCH_MANY")); err == nil && v > 0 {
		n = v
	}
	for _, fsync := range []bool{false, true} {
		suffix := "/page-cache"
		if fsync {
			suffix = "/fsync"
		}
		b.Run("1-partition"+suffix, func(b *testing.B) { runManyPartitions(b, 1, 1, fsync) })
		b.Run(strconv.Itoa(n)+"-partitions"+suffix, func(b *testing.B) { runManyPartitions(b, n, 8, fsync) })
	}
}

func runManyPartitions(b *testing.B, partitions, goroutines int, fsync bool) {
	be, err := local.OpenBackend(b.TempDir(), local.BackendOptions{BackgroundInterval: time.Minute})
	if err != nil {
		b.Fatal(err)
	}
	defer be.Close()
	c := benchLogConfig(b)
	logs := make([]*local.Log, partitions)
	for i := range logs {
		if logs[i], err = be.OpenLog(ctx, "many", int32(i), c); err != nil {
			b.Fatal(err)
		}
	}
	size := int64(len(produceRequest(1)[0]))
	var (
		mu   sync.Mutex
		lats []time.Duration
	)
	call := func(rng *rand.Rand, req []byte, lat *[]time.Duration) {
		l := logs[rng.IntN(len(logs))]
		resetBaseOffsets(req)
		start := time.Now()
		if _, err := l.Append(ctx, req, backend.AppendOptions{AssignOffsets: true}); err != nil {
			b.Error(err)
			return
		}
		if fsync {
			if err := l.Flush(); err != nil {
				b.Error(err)
				return
			}
		}
		*lat = append(*lat, time.Since(start))
	}
	b.SetBytes(size)
	if goroutines == 1 {
		rng := rand.New(rand.NewPCG(1, 1))
		reqs := produceRequest(4)
		i := 0
		for b.Loop() {
			call(rng, reqs[i&3], &lats)
			i++
		}
	} else {
		var seed sync.Mutex
		seq := uint64(0)
		b.SetParallelism((goroutines + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			seed.Lock()
			seq++
			rng := rand.New(rand.NewPCG(seq, seq))
			seed.Unlock()
			reqs := produceRequest(4)
			var mine []time.Duration
			i := 0
			for pb.Next() {
				call(rng, reqs[i&3], &mine)
				i++
			}
			mu.Lock()
			lats = append(lats, mine...)
			mu.Unlock()
		})
	}
	b.StopTimer()
	if len(lats) > 0 {
		slices.Sort(lats)
		b.ReportMetric(float64(lats[len(lats)*99/100].Microseconds()), "p99-µs")
		b.ReportMetric(float64(lats[len(lats)/2].Microseconds()), "p50-µs")
	}
}
