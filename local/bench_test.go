package local_test

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/local"
	"github.com/tierlog/tierlog/record"
)

// The benchmarks build their logs once per process in a temporary
// directory. TIERLOG_BENCH_LOG_MIB sets the size of the big log (default
// 1024 MiB, the 1 GiB).

func benchLogMiB() int64 {
	if v, err := strconv.ParseInt(os.Getenv("TIERLOG_BENCH_LOG_MIB"), 10, 64); err == nil && v > 0 {
		return v
	}
	return 1024
}

// batches16K returns n distinct 16 KiB batches of 100-byte records.
func batches16K(n int) [][]byte {
	var b record.Builder
	val := bytes.Repeat([]byte("v"), 100)
	out := make([][]byte, n)
	for i := range out {
		b.Reset(record.NewBatchHeader())
		for b.SizeWith(int64(i), nil, val, nil) <= 16384 {
			b.Append(int64(i), nil, val, nil)
		}
		batch, _ := b.Build()
		out[i] = append([]byte(nil), batch...)
	}
	return out
}

// BenchmarkAppend16K appends 16 KiB batches of 100-byte records as a leader
// (page cache, no fsync); BenchmarkRawWrite16K writes the same bytes with
// os.File.Write. Both roll at 256 MiB and keep at most 512 MiB on disk.
// Target: Append >= 80% of RawWrite's MB/s.
func BenchmarkAppend16K(b *testing.B) {
	dir := b.TempDir()
	c, _ := backend.ParseConfig(map[string]string{"segment.bytes": strconv.Itoa(256 << 20), "retention.bytes": strconv.Itoa(512 << 20), "file.delete.delay.ms": "0"})
	l, err := local.Open(dir, local.Options{Config: c, LogStartOffset: -1, HighWatermark: -1})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	bs := batches16K(64)
	b.SetBytes(int64(len(bs[0])))
	b.ResetTimer()
	i := 0
	for b.Loop() {
		// A producer's batch has base offset 0; the previous append of
		// this buffer assigned it one in place.
		record.Batch(bs[i&63]).SetBaseOffset(0)
		if _, err := l.Append(ctx, bs[i&63], backend.AppendOptions{AssignOffsets: true}); err != nil {
			b.Fatal(err)
		}
		i++
		if i%16384 == 0 {
			l.SetHighWatermark(l.Offsets().LogEnd)
			if _, err := l.DeleteOldSegments(); err != nil {
				b.Fatal(err)
			}
		}
	}
}

func BenchmarkRawWrite16K(b *testing.B) {
	bs := batches16K(64)
	w := rawFiles{b: b, dir: b.TempDir()}
	defer w.close()
	b.SetBytes(int64(len(bs[0])))
	i := 0
	for b.Loop() {
		w.write(bs[i&63])
		i++
	}
}

// rawFiles writes with os.File.Write into files that roll at 256 MiB, two
// kept, as BenchmarkAppend16K's log rolls and keeps 512 MiB: the raw
// baselines beside it.
type rawFiles struct {
	b       *testing.B
	dir     string
	f       *os.File
	written int64
	files   int
}

func (w *rawFiles) write(p []byte) {
	if w.f == nil || w.written+int64(len(p)) > 256<<20 {
		w.next()
	}
	n, err := w.f.Write(p)
	if err != nil {
		w.b.Fatal(err)
	}
	w.written += int64(n)
}

func (w *rawFiles) next() {
	w.close()
	if w.files >= 2 {
		os.Remove(filepath.Join(w.dir, fmt.Sprint(w.files-2)))
	}
	var err error
	if w.f, err = os.Create(filepath.Join(w.dir, fmt.Sprint(w.files))); err != nil {
		w.b.Fatal(err)
	}
	w.files++
	w.written = 0
}

func (w *rawFiles) close() {
	if w.f != nil {
		w.f.Close()
	}
}

// BenchmarkRawValidatedWrite16K is BenchmarkRawWrite16K with the leader
// validation a log does before it writes a client's batch (header, CRC and
// every record decoded: record.Validator.ValidateForLeader, as the log
// calls it): BenchmarkAppend16K against it is the log's own cost, beside
// the write and the checks every honest leader append needs.
func BenchmarkRawValidatedWrite16K(b *testing.B) {
	bs := batches16K(64)
	c := backend.DefaultConfig()
	opts := record.LeaderOptions{TimestampType: record.CreateTime, TimestampBeforeMaxMs: c.MessageTimestampBeforeMaxMs,
		TimestampAfterMaxMs: c.MessageTimestampAfterMaxMs, MaxMessageBytes: c.MaxMessageBytes}
	var v record.Validator
	w := rawFiles{b: b, dir: b.TempDir()}
	defer w.close()
	b.SetBytes(int64(len(bs[0])))
	i := 0
	for b.Loop() {
		batch := record.Batch(bs[i&63])
		batch.SetBaseOffset(0)
		if _, err := v.ValidateForLeader(batch, time.Now().UnixMilli(), opts); err != nil {
			b.Fatal(err)
		}
		w.write(batch)
		i++
	}
}

var (
	bigOnce sync.Once
	bigDir  string
	bigLEO  int64
	bigErr  error
)

// bigLog builds a partition of benchLogMiB() MiB of 16 KiB batches of
// 100-byte records in 1 MiB segments (about 1,000 segments for 1 GiB), closes
// it cleanly and returns its directory.
func bigLog(b *testing.B) (string, int64) {
	bigOnce.Do(func() {
		root, err := os.MkdirTemp("", "tierlog-bench-")
		if err != nil {
			bigErr = err
			return
		}
		benchCleanup = append(benchCleanup, root)
		bigDir = filepath.Join(root, "big-0")
		c, _ := backend.ParseConfig(map[string]string{"segment.bytes": strconv.Itoa(1 << 20)})
		l, err := local.Open(bigDir, local.Options{Config: c, LogStartOffset: -1, HighWatermark: -1})
		if err != nil {
			bigErr = err
			return
		}
		bs := batches16K(64)
		total := benchLogMiB() << 20
		for i := 0; int64(i)*int64(len(bs[0])) < total; i++ {
			record.Batch(bs[i&63]).SetBaseOffset(0) // as a producer sends it: the last append assigned offsets in place
			if _, err := l.Append(ctx, bs[i&63], backend.AppendOptions{AssignOffsets: true}); err != nil {
				bigErr = err
				return
			}
		}
		bigLEO = l.Offsets().LogEnd
		bigErr = l.Close()
	})
	if bigErr != nil {
		b.Fatal(bigErr)
	}
	return bigDir, bigLEO
}

var benchCleanup []string

func openBig(b *testing.B, clean bool) *local.Log {
	dir, _ := bigLog(b)
	c, _ := backend.ParseConfig(map[string]string{"segment.bytes": strconv.Itoa(1 << 20)})
	l, err := local.Open(dir, local.Options{Config: c, CleanShutdown: clean, RecoveryPoint: 0, LogStartOffset: -1, HighWatermark: -1})
	if err != nil {
		b.Fatal(err)
	}
	return l
}

// BenchmarkLookupRandom1GiB looks up random offsets of the big log, warm:
// the time to the batch position (segment search, index search, header
// scan). Target: under 2 µs.
func BenchmarkLookupRandom1GiB(b *testing.B) {
	l := openBig(b, true)
	defer l.Close()
	leo := l.Offsets().LogEnd
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 200_000; i++ { // warm the page cache and the lazily opened indexes
		if _, err := l.Lookup(rng.Int64N(leo)); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for b.Loop() {
		if _, err := l.Lookup(rng.Int64N(leo)); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "lookups/s")
}

// BenchmarkReadRecordRandom1GiB reads one record at a random offset as
// bench-compare's random reads do: the batch holding it (Read), decoded
// in place (Records.View, a sealed segment's mapping; Iterator.SkipTo) and
// its value copied out, warm; p50 and p99 of each read. Target: p50 under
// 2 µs.
func BenchmarkReadRecordRandom1GiB(b *testing.B) {
	l := openBig(b, true)
	defer l.Close()
	leo := l.Offsets().LogEnd
	rng := rand.New(rand.NewPCG(5, 6))
	var it record.Iterator
	var val []byte
	read := func(i int64) {
		r, err := l.Read(ctx, i, backend.ReadOptions{MaxBytes: 1, MinOneBatch: true})
		if err != nil {
			b.Fatal(err)
		}
		err = r.(backend.Viewer).View(func(p []byte) error {
			if err := it.Reset(record.Batch(p)); err != nil {
				return err
			}
			it.SkipTo(i)
			if !it.Next() || it.Record().Offset != i {
				return fmt.Errorf("offset %d not in the batch read for it: %v", i, it.Err())
			}
			val = append(val[:0], it.Record().Value...)
			return nil
		})
		r.Close()
		if err != nil {
			b.Fatal(err)
		}
	}
	for range 300_000 { // warm the page cache, the indexes and the mappings
		read(rng.Int64N(leo))
	}
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for b.Loop() {
		i := rng.Int64N(leo)
		t := time.Now()
		read(i)
		lat = append(lat, time.Since(t))
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds())/1e3, "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds())/1e3, "p99-µs")
}

// BenchmarkReadRandom1GiB reads the batch holding a random offset and
// copies it out (Read + WriteTo into memory), warm.
func BenchmarkReadRandom1GiB(b *testing.B) {
	l := openBig(b, true)
	defer l.Close()
	leo := l.Offsets().LogEnd
	rng := rand.New(rand.NewPCG(3, 4))
	var buf bytes.Buffer
	b.ResetTimer()
	for b.Loop() {
		r, err := l.Read(ctx, rng.Int64N(leo), backend.ReadOptions{MaxBytes: 1, MinOneBatch: true})
		if err != nil {
			b.Fatal(err)
		}
		buf.Reset()
		if _, err := r.WriteTo(&buf); err != nil {
			b.Fatal(err)
		}
		r.Close()
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "reads/s")
}

// loopbackSink accepts one connection and drains it; it returns the client
// end.
func loopbackSink(b *testing.B) (net.Conn, func()) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		c, err := ln.Accept()
		if err != nil {
			return
		}
		io.Copy(io.Discard, c)
		c.Close()
	}()
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	return conn, func() { conn.Close(); <-done; ln.Close() }
}

// BenchmarkSequentialWriteTo1GiB sends the big log through Read and
// Records.WriteTo to a loopback TCP socket (sendfile);
// BenchmarkRawSendfile1GiB sends the same file regions with sendfile(2)
// directly. Target: >= 80% of the raw MB/s.
func BenchmarkSequentialWriteTo1GiB(b *testing.B) {
	l := openBig(b, true)
	defer l.Close()
	conn, stop := loopbackSink(b)
	defer stop()
	leo := l.Offsets().LogEnd
	var total int64
	b.ResetTimer()
	for b.Loop() {
		for off := int64(0); off < leo; {
			r, err := l.Read(ctx, off, backend.ReadOptions{MaxBytes: 1 << 20, MinOneBatch: true})
			if err != nil {
				b.Fatal(err)
			}
			n, err := r.WriteTo(conn)
			r.Close()
			if err != nil {
				b.Fatal(err)
			}
			total += n
			off = r.(backend.OffsetRange).NextOffset()
		}
	}
	b.SetBytes(total / int64(b.N))
}

func BenchmarkRawSendfile1GiB(b *testing.B) {
	dir, _ := bigLog(b)
	ents, _ := os.ReadDir(dir)
	var files []*os.File
	var sizes []int64
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".log") {
			f, err := os.Open(filepath.Join(dir, e.Name()))
			if err != nil {
				b.Fatal(err)
			}
			defer f.Close()
			st, _ := f.Stat()
			files = append(files, f)
			sizes = append(sizes, st.Size())
		}
	}
	conn, stop := loopbackSink(b)
	defer stop()
	raw, _ := conn.(*net.TCPConn).SyscallConn()
	var total int64
	b.ResetTimer()
	for b.Loop() {
		for i, f := range files {
			var off int64
			for off < sizes[i] {
				chunk := min(sizes[i]-off, 1<<20)
				var werr error
				raw.Write(func(fd uintptr) bool {
					for chunk > 0 {
						n, err := syscall.Sendfile(int(fd), int(f.Fd()), &off, int(chunk))
						if n > 0 {
							chunk -= int64(n)
							total += int64(n)
						}
						if err == syscall.EAGAIN {
							return false
						}
						if err != nil {
							werr = err
							return true
						}
					}
					return true
				})
				if werr != nil {
					b.Fatal(werr)
				}
			}
		}
	}
	b.SetBytes(total / int64(b.N))
}

// rssKiB reads this process's resident set size.
func rssKiB() int64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, "VmRSS:") {
			f := strings.Fields(line)
			v, _ := strconv.ParseInt(f[1], 10, 64)
			return v
		}
	}
	return 0
}

// BenchmarkOpenClean1GiB opens the big log (about 1,000 segments) after a
// clean shutdown; BenchmarkRecover1GiB opens it as after a crash with a
// recovery point of 0, validating every batch (MB/s of log recovered).
func BenchmarkOpenClean1GiB(b *testing.B) {
	bigLog(b)
	before := rssKiB()
	b.ResetTimer()
	for b.Loop() {
		l := openBig(b, true)
		l.Close()
	}
	b.ReportMetric(float64(rssKiB()-before), "RSS-KiB-delta")
}

func BenchmarkRecover1GiB(b *testing.B) {
	_, _ = bigLog(b)
	b.SetBytes(benchLogMiB() << 20)
	b.ResetTimer()
	for b.Loop() {
		l := openBig(b, false)
		l.Close()
	}
}

// BenchmarkOpen10000Partitions opens 10,000 small partitions (one batch
// each, closed cleanly) through a Backend and reports the time per full
// open and the RSS they add.
func BenchmarkOpen10000Partitions(b *testing.B) {
	n := benchPartitions()
	dir := b.TempDir()
	be, err := local.OpenBackend(dir, local.BackendOptions{})
	if err != nil {
		b.Fatal(err)
	}
	batch := batches16K(1)[0]
	c := backend.DefaultConfig()
	for i := 0; i < n; i++ {
		l, err := be.OpenLog(ctx, "t", int32(i), c)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := l.Append(ctx, append([]byte(nil), batch...), backend.AppendOptions{AssignOffsets: true}); err != nil {
			b.Fatal(err)
		}
	}
	if err := be.Close(); err != nil {
		b.Fatal(err)
	}
	var rss, heap int64
	b.ResetTimer()
	for b.Loop() {
		b.StopTimer()
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		heapBefore, rssBefore := int64(ms.HeapAlloc), rssKiB()
		b.StartTimer()
		be, err := local.OpenBackend(dir, local.BackendOptions{})
		if err != nil {
			b.Fatal(err)
		}
		for i := 0; i < n; i++ {
			if _, err := be.OpenLog(ctx, "t", int32(i), c); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		runtime.GC()
		runtime.ReadMemStats(&ms)
		heap, rss = int64(ms.HeapAlloc)-heapBefore, rssKiB()-rssBefore
		if err := be.Close(); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.ReportMetric(float64(heap)/float64(n), "live-heap-B/partition")
	b.ReportMetric(float64(rss), "RSS-KiB-delta")
}

// benchPartitions is the partition count of BenchmarkOpen10000Partitions
// (TIERLOG_BENCH_PARTITIONS overrides 10,000).
func benchPartitions() int {
	if v, err := strconv.Atoi(os.Getenv("TIERLOG_BENCH_PARTITIONS")); err == nil && v > 0 {
		return v
	}
	return 10_000
}

// BenchmarkRestartIdlePartitions opens 10,000 idle partitions (one batch
// each) through a Backend, as a broker's restart does: "clean", closed
// as written; "empty-epoch", each led at a new epoch that got no record
// before the broker stopped (the leader's epoch begins at the log end at
// once), untimed between the opens. The goal: the second within 1.5x the
// first, and no fsync per idle partition at open.
func BenchmarkRestartIdlePartitions(b *testing.B) {
	n := benchPartitions()
	for _, lead := range []bool{false, true} {
		name := "clean"
		if lead {
			name = "empty-epoch"
		}
		b.Run(name, func(b *testing.B) {
			dir := b.TempDir()
			be, err := local.OpenBackend(dir, local.BackendOptions{})
			if err != nil {
				b.Fatal(err)
			}
			batch := batches16K(1)[0]
			c := backend.DefaultConfig()
			for i := 0; i < n; i++ {
				l, err := be.OpenLog(ctx, "t", int32(i), c)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := l.Append(ctx, append([]byte(nil), batch...), backend.AppendOptions{AssignOffsets: true, LeaderEpoch: 1}); err != nil {
					b.Fatal(err)
				}
			}
			if err := be.Close(); err != nil {
				b.Fatal(err)
			}
			epoch := int32(2)
			for b.Loop() {
				be, err := local.OpenBackend(dir, local.BackendOptions{})
				if err != nil {
					b.Fatal(err)
				}
				logs := make([]*local.Log, n)
				for i := 0; i < n; i++ {
					if logs[i], err = be.OpenLog(ctx, "t", int32(i), c); err != nil {
						b.Fatal(err)
					}
				}
				b.StopTimer()
				if lead {
					for _, l := range logs {
						if err := l.BecomeLeader(ctx, epoch); err != nil {
							b.Fatal(err)
						}
					}
					epoch++
				}
				if err := be.Close(); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
		})
	}
}
