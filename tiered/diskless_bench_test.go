package tiered_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/objstore"
	"github.com/tierlog/tierlog/record"
	"github.com/tierlog/tierlog/testing/faultstore"
	"github.com/tierlog/tierlog/testing/s3server"
	"github.com/tierlog/tierlog/tiered"
	"github.com/tierlog/tierlog/wal"
)

// The diskless benchmarks run against MinIO on loopback, behind 20 ms of
// added latency on every PUT (a cloud bucket's), counted by a faultstore
// hook: run them with -benchtime 1x (each iteration is a timed workload).

// putLatency is the latency added to every PUT.
const putLatency = 20 * time.Millisecond

// latentMinIO is a MinIO bucket whose PUTs take putLatency more, and a
// counter of the PUTs of WAL objects; latency is off until on() is called.
func latentMinIO(b *testing.B) (store *objstore.Store, walPuts *atomic.Int64, on func()) {
	inner := realStoreOn(b, s3server.SharedKind(b, s3server.MinIO), "minio")
	d := faultstore.Wrap(inner.Driver(), 1)
	walPuts = new(atomic.Int64)
	d.Add(faultstore.Rule{Op: objstore.OpPut, KeyContains: "/" + wal.Dir + "/", Every: 1, Fault: faultstore.Hook,
		Hook: func(objstore.Op, string) { walPuts.Add(1) }})
	lat := d.Add(faultstore.Rule{Op: objstore.OpPut, Every: 1, Fault: faultstore.Latency, Latency: putLatency})
	lat.SetEnabled(false)
	store = objstore.New(d, "minio+latency", objstore.Options{})
	b.Cleanup(func() { store.Close() })
	return store, walPuts, func() { lat.SetEnabled(true) }
}

func oneRecordBatch(size int) []byte {
	var rb record.Builder
	rb.Reset(record.NewBatchHeader())
	rb.Append(time.Now().UnixMilli(), nil, bytes.Repeat([]byte("x"), size), nil)
	batch, _ := rb.Build()
	return batch
}

// BenchmarkDisklessPutRate: 1,000 diskless partitions of one Backend
// produced to at 1 MB/s in all (1,000 appends of 1 KiB a second, spread
// over the partitions) for 5 s. It reports the WAL PUTs a second beside
// the bound the design promises (1 / commit interval + bytes a second /
// buffer max bytes) and the PUTs a day each would cost.
func BenchmarkDisklessPutRate(b *testing.B) {
	store, walPuts, latency := latentMinIO(b)
	m := fastManager
	m.TaskInterval = time.Minute // no consolidation in the 5 s
	be := openTieredBackend(b, b.TempDir(), store, tiered.BackendOptions{Manager: m})
	const partitions = 1000
	c := cfg(b, "diskless.enable", "true", "retention.ms", "-1")
	parts := make([]*tiered.Partition, partitions)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for i := range parts {
		p, err := be.Open(context.Background(), fmt.Sprintf("t%d", i/100), int32(i%100), c)
		if err != nil {
			b.Fatal(err)
		}
		parts[i] = p.(*tiered.Partition)
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			if err := parts[i].BecomeLeader(context.Background(), 1); err != nil {
				b.Error(err)
			}
		}()
	}
	wg.Wait()
	latency()
	batch := oneRecordBatch(1000)
	const seconds = 5
	for b.Loop() {
		before := walPuts.Load()
		start := time.Now()
		tick := time.NewTicker(10 * time.Millisecond)
		sent := 0
		for time.Since(start) < seconds*time.Second {
			<-tick.C
			for range 10 { // 1,000 appends a second
				p := parts[sent%partitions]
				if _, err := p.Append(context.Background(), append([]byte(nil), batch...), backend.AppendOptions{AssignOffsets: true}); err != nil {
					b.Fatal(err)
				}
				sent++
			}
		}
		tick.Stop()
		took := time.Since(start).Seconds()
		puts := float64(walPuts.Load()-before) / took
		bound := 1/wal.DefaultCommitInterval.Seconds() + float64(sent*len(batch))/took/float64(wal.DefaultBufferMaxBytes)
		b.ReportMetric(puts, "puts/s")
		b.ReportMetric(bound, "bound-puts/s")
		b.ReportMetric(puts*86400, "puts/day")
		b.ReportMetric(float64(sent*len(batch))/took/1e6, "MB/s")
	}
}

// BenchmarkDisklessAckLatency: one diskless partition, one 16 KiB batch
// at a time, each waited for until the high watermark passes it (what a
// broker's acks=all waits for), against MinIO behind 20 ms of PUT
// latency; beside it the raw PUT of a 16 KiB object in the same run, and
// (idle-ack) the latency of an append after a quiet spell of more than a
// commit interval. Goal: p99 <= commit interval + raw PUT p99 + 10 ms.
func BenchmarkDisklessAckLatency(b *testing.B) {
	store, _, latency := latentMinIO(b)
	be := openTieredBackend(b, b.TempDir(), store, tiered.BackendOptions{})
	p, err := be.Open(context.Background(), "lat", 0, cfg(b, "diskless.enable", "true", "retention.ms", "-1"))
	if err != nil {
		b.Fatal(err)
	}
	tp := p.(*tiered.Partition)
	if err := tp.BecomeLeader(context.Background(), 1); err != nil {
		b.Fatal(err)
	}
	latency()
	batch := oneRecordBatch(16 << 10)
	var acks, idle, raws []time.Duration
	for b.Loop() {
		for i := range 60 {
			if i >= 40 {
				// After a quiet spell the PUT budget holds a whole PUT:
				// the append goes at once.
				time.Sleep(wal.DefaultCommitInterval + 50*time.Millisecond)
			}
			start := time.Now()
			info, err := tp.Append(context.Background(), append([]byte(nil), batch...), backend.AppendOptions{AssignOffsets: true})
			if err != nil {
				b.Fatal(err)
			}
			tp.SetHighWatermark(info.LastOffset + 1)
			for tp.Offsets().HighWatermark <= info.LastOffset {
				select {
				case <-tp.Changed():
				case <-time.After(time.Second):
				}
			}
			if i >= 40 {
				idle = append(idle, time.Since(start))
				continue
			}
			acks = append(acks, time.Since(start))
			start = time.Now()
			key := filepath.ToSlash(filepath.Join("raw", fmt.Sprint(len(raws))))
			if _, err := store.Put(context.Background(), key, bytes.NewReader(batch), int64(len(batch)), objstore.PutOptions{IfNoneMatch: true}); err != nil {
				b.Fatal(err)
			}
			raws = append(raws, time.Since(start))
		}
	}
	q := func(d []time.Duration, f float64) float64 {
		s := slices.Clone(d)
		slices.Sort(s)
		return float64(s[min(len(s)-1, int(f*float64(len(s))))].Microseconds()) / 1000
	}
	b.ReportMetric(q(acks, 0.5), "ack-p50-ms")
	b.ReportMetric(q(acks, 0.99), "ack-p99-ms")
	b.ReportMetric(q(idle, 0.5), "idle-ack-p50-ms")
	b.ReportMetric(q(raws, 0.5), "put-p50-ms")
	b.ReportMetric(q(raws, 0.99), "put-p99-ms")
	b.ReportMetric(float64(wal.DefaultCommitInterval.Milliseconds())+q(raws, 0.99)+10, "goal-p99-ms")
}

// BenchmarkDisklessProduce: four diskless partitions of one Backend
// appended to as fast as the Backend takes it (256 MiB in 256 KiB
// batches), against MinIO behind 20 ms of PUT latency, until all of it is
// in the bucket (Flush): with 1, 2 and 4 WAL objects in flight
// (diskless.produce.max.in.flight.uploads), beside the raw PUTs of 8 MiB
// objects one and two at a time in the same run.
func BenchmarkDisklessProduce(b *testing.B) {
	store, _, latency := latentMinIO(b)
	if os.Getenv("TIERLOG_BENCH_NO_LATENCY") == "" {
		latency()
	}
	const total, batchSize, partitions = 256 << 20, 256 << 10, 4
	batch := oneRecordBatch(batchSize)
	for _, inFlight := range []int{1, 2, 4} {
		b.Run(fmt.Sprintf("in-flight=%d", inFlight), func(b *testing.B) {
			m := fastManager
			m.TaskInterval = time.Minute // no consolidation while it runs
			m.DisklessUploadsInFlight = inFlight
			be := openTieredBackend(b, b.TempDir(), store, tiered.BackendOptions{Manager: m})
			c := cfg(b, "diskless.enable", "true", "retention.ms", "-1", "segment.bytes", fmt.Sprint(64<<20))
			var parts []*tiered.Partition
			for i := range partitions {
				p, err := be.Open(context.Background(), fmt.Sprintf("produce%d", inFlight), int32(i), c)
				if err != nil {
					b.Fatal(err)
				}
				tp := p.(*tiered.Partition)
				if err := tp.BecomeLeader(context.Background(), 1); err != nil {
					b.Fatal(err)
				}
				parts = append(parts, tp)
			}
			for b.Loop() {
				start := time.Now()
				var wg sync.WaitGroup
				for _, p := range parts {
					wg.Go(func() {
						for range total / batchSize / partitions {
							if _, err := p.Append(context.Background(), append([]byte(nil), batch...), backend.AppendOptions{AssignOffsets: true}); err != nil {
								b.Error(err)
								return
							}
						}
						if err := p.Flush(); err != nil {
							b.Error(err)
						}
					})
				}
				wg.Wait()
				b.ReportMetric(float64(total)/time.Since(start).Seconds()/1e6, "MB/s")
			}
		})
	}
	b.Run("raw-put-8MiB", func(b *testing.B) {
		body := bytes.Repeat([]byte("x"), 8<<20)
		for _, streams := range []int{1, 2} {
			start := time.Now()
			var wg sync.WaitGroup
			var n atomic.Int64
			for s := range streams {
				wg.Go(func() {
					for i := range 32 / streams {
						key := fmt.Sprintf("raw8/%d-%d-%d", streams, s, i)
						if _, err := store.Put(context.Background(), key, bytes.NewReader(body), int64(len(body)), objstore.PutOptions{}); err != nil {
							b.Error(err)
						}
						n.Add(int64(len(body)))
					}
				})
			}
			wg.Wait()
			b.ReportMetric(float64(n.Load())/time.Since(start).Seconds()/1e6, fmt.Sprintf("MB/s-%d-stream", streams))
		}
	})
}

// BenchmarkDisklessColdTail: a new leader on an empty directory consumes
// a diskless partition's tail of 64 MiB and of 256 MiB that lives in WAL
// objects only (nothing consolidated): the claim reads it by ranged GETs
// of the extents (four at once) and rebuilds the local log, then a
// consumer reads it all from offset 0; the claim's fixed cost (the fence,
// the manifest commit) weighs on the smaller tail. Beside it, raw ranged
// GETs of the same extents one after another (the goal: the cold consume
// at 0.5x of them or better). MinIO on loopback, no added latency (GETs
// are not delayed).
func BenchmarkDisklessColdTail(b *testing.B) {
	for _, total := range []int{64 << 20, 256 << 20} {
		b.Run(fmt.Sprintf("tail=%dMiB", total>>20), func(b *testing.B) { benchColdTail(b, total) })
	}
}

func benchColdTail(b *testing.B, total int) {
	store, _, _ := latentMinIO(b)
	const batchSize = 256 << 10
	m := fastManager
	m.TaskInterval = time.Hour // the tail stays in WAL objects
	c := cfg(b, "diskless.enable", "true", "retention.ms", "-1", "segment.bytes", fmt.Sprint(1<<30))
	be := openTieredBackend(b, b.TempDir(), store, tiered.BackendOptions{Manager: m})
	p, err := be.Open(context.Background(), "cold", 0, c)
	if err != nil {
		b.Fatal(err)
	}
	tp := p.(*tiered.Partition)
	if err := tp.BecomeLeader(context.Background(), 1); err != nil {
		b.Fatal(err)
	}
	batch := oneRecordBatch(batchSize)
	for range total / batchSize {
		if _, err := tp.Append(context.Background(), append([]byte(nil), batch...), backend.AppendOptions{AssignOffsets: true}); err != nil {
			b.Fatal(err)
		}
	}
	if err := tp.Flush(); err != nil {
		b.Fatal(err)
	}
	end := tp.Offsets().LogEnd
	epoch := int32(2)
	for b.Loop() {
		// Raw: every extent of the partition, by one ranged GET each.
		objs, err := tiered.ListWAL(context.Background(), store, "tl")
		if err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		raw := 0
		for _, o := range objs {
			f, err := wal.ReadFooter(context.Background(), store, o.Key, o.Size)
			if err != nil {
				b.Fatal(err)
			}
			for _, e := range f.Extents {
				data, err := wal.ReadExtent(context.Background(), store, o.Key, e)
				if err != nil {
					b.Fatal(err)
				}
				raw += len(data)
			}
		}
		rawMBps := float64(raw) / time.Since(start).Seconds() / 1e6

		// Cold: a Backend on an empty directory claims and consumes.
		cold := openTieredBackend(b, b.TempDir(), store, tiered.BackendOptions{Manager: m})
		start = time.Now()
		p, err := cold.Open(context.Background(), "cold", 0, c)
		if err != nil {
			b.Fatal(err)
		}
		ctp := p.(*tiered.Partition)
		if err := ctp.BecomeLeader(context.Background(), epoch); err != nil {
			b.Fatal(err)
		}
		epoch++
		read := 0
		var buf bytes.Buffer // reused, as a broker's socket is: the consumer's allocations are not the tail's cost
		for off := int64(0); off < end; {
			r, err := ctp.Read(context.Background(), off, backend.ReadOptions{MaxBytes: 4 << 20, MinOneBatch: true})
			if err != nil {
				b.Fatal(err)
			}
			buf.Reset()
			if _, err := r.WriteTo(&buf); err != nil {
				b.Fatal(err)
			}
			r.Close()
			sc := record.NewScanner(bytes.NewReader(buf.Bytes()), 0, int64(buf.Len()), record.ScanOptions{})
			for sc.Next() {
				off = sc.Entry().LastOffset + 1
			}
			if sc.Err() != nil || buf.Len() == 0 {
				b.Fatalf("read at %d: %d bytes, %v", off, buf.Len(), sc.Err())
			}
			read += buf.Len()
		}
		coldMBps := float64(read) / time.Since(start).Seconds() / 1e6
		cold.Close()
		b.ReportMetric(coldMBps, "cold-MB/s")
		b.ReportMetric(rawMBps, "raw-get-MB/s")
		b.ReportMetric(coldMBps/rawMBps, "cold/raw")
	}
}
