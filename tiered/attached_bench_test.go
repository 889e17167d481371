package tiered_test

import (
	"bytes"
	"crypto/rand"
	"os"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/manifest"
	"github.com/tierlog/tierlog/objstore"
	"github.com/tierlog/tierlog/objstore/mem"
	"github.com/tierlog/tierlog/tiered"
)

// BenchmarkAttachedPartitions measures what a broker pays for many
// partitions with long remote logs: a Backend attaches P partitions of S
// remote segments each (a layered manifest per partition, put straight
// into an in-memory bucket), then
//
//   - heap-MB: the heap the Backend and its partitions hold once every
//     partition read its manifest (after a GC; the in-memory bucket's
//     bytes are not counted), and heap-B/seg the same per remote segment;
//   - follower-GETs, follower-ms: one follower step of every partition
//     over unchanged manifests (GETs of manifest bodies, wall time);
//   - claim-PUTs, claim-KB, claim-ms: every partition made leader at a
//     new epoch (lead-ms of it) and its bucket claimed, then its first
//     retention pass: the PUTs (each claim's manifest and its backup),
//     bytes and wall time;
//   - retention-ms: a second retention pass over every partition (nothing
//     to remove), and led-heap-MB the heap after it (leaders hold what
//     the first pass loaded, within the Backend's manifest cache).
//
// P is TIERLOG_BENCH_PARTITIONS (default 1,000; `make bench-scale` runs
// 10,000), S is TIERLOG_BENCH_SEGMENTS (default 1,000). It uses only the
// API a broker uses, so the same program measures every version.
func BenchmarkAttachedPartitions(b *testing.B) {
	nParts := envInt(b, "TIERLOG_BENCH_PARTITIONS", 1000)
	nSegs := envInt(b, "TIERLOG_BENCH_SEGMENTS", 1000)
	b.ReportAllocs()
	for b.Loop() {
		store := objstore.New(mem.New(), "mem://attached", objstore.Options{})
		dir := b.TempDir()
		tb, err := tiered.OpenBackend(dir, tiered.BackendOptions{Store: store, Prefix: "tl"})
		if err != nil {
			b.Fatal(err)
		}
		// One layered manifest, put under every partition's prefix, with
		// a lineage as every manifest this build commits has (without
		// one, each claim would be the one-time upgrade that gives it).
		m := &manifest.Manifest{Generation: 1, WriterEpoch: 1, Segments: synthSegments(0, nSegs, time.Now().UnixMilli())}
		rand.Read(m.Lineage[:])
		made, err := m.Layer(nil, func() (id [8]byte) { rand.Read(id[:]); return id })
		if err != nil {
			b.Fatal(err)
		}
		head, err := m.Encode()
		if err != nil {
			b.Fatal(err)
		}
		put := func(key string, data []byte) {
			if _, err := store.Put(ctx, key, bytes.NewReader(data), int64(len(data)), objstore.PutOptions{}); err != nil {
				b.Fatal(err)
			}
		}
		for i := range nParts {
			l := manifest.NewLayout(tb.PartitionPrefix(backend.TopicPartition{Topic: "orders", Partition: int32(i)}))
			for _, po := range made {
				put(l.Part(po.Part), po.Data)
			}
			put(l.Manifest(), head)
		}
		m, made = nil, nil
		// The in-memory bucket's own bytes are not the broker's: the heap
		// is measured from here.
		runtime.GC()
		var base runtime.MemStats
		runtime.ReadMemStats(&base)
		config := cfg(b, "remote.storage.enable", "true")
		parts := make([]*tiered.Partition, nParts)
		for i := range parts {
			bp, err := tb.Open(ctx, "orders", int32(i), config)
			if err != nil {
				b.Fatal(err)
			}
			parts[i] = bp.(*tiered.Partition)
			if err := parts[i].Attach(ctx); err != nil {
				b.Fatal(err)
			}
		}
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		heap := float64(ms.HeapAlloc) - float64(base.HeapAlloc)
		b.ReportMetric(heap/1e6, "heap-MB")
		b.ReportMetric(heap/float64(nParts*nSegs), "heap-B/seg")

		// Each phase runs on 8 goroutines, as a Backend's service runs its
		// partitions' work on pools of threads.
		each := func(fn func(p *tiered.Partition) error) time.Duration {
			start := time.Now()
			var wg sync.WaitGroup
			errs := make(chan error, len(parts))
			next := make(chan *tiered.Partition)
			for range 8 {
				wg.Go(func() {
					for p := range next {
						if err := fn(p); err != nil {
							errs <- err
						}
					}
				})
			}
			for _, p := range parts {
				next <- p
			}
			close(next)
			wg.Wait()
			close(errs)
			if err := <-errs; err != nil {
				b.Fatal(err)
			}
			return time.Since(start)
		}
		before := store.Stats()
		took := each(func(p *tiered.Partition) error {
			if err := p.BecomeFollower(ctx, 1); err != nil {
				return err
			}
			return p.FollowerStep(ctx)
		})
		b.ReportMetric(float64(took.Milliseconds()), "follower-ms")
		b.ReportMetric(float64(store.Stats().Requests[objstore.OpGet]-before.Requests[objstore.OpGet]), "follower-GETs")

		before = store.Stats()
		lead := each(func(p *tiered.Partition) error { return p.BecomeLeader(ctx, 2) })
		took = each(func(p *tiered.Partition) error {
			_, err := p.ApplyRetention(ctx)
			return err
		})
		after := store.Stats()
		b.ReportMetric(float64(lead.Milliseconds()), "lead-ms")
		b.ReportMetric(float64((lead + took).Milliseconds()), "claim-ms")
		b.ReportMetric(float64(after.Requests[objstore.OpPut]-before.Requests[objstore.OpPut]), "claim-PUTs")
		b.ReportMetric(float64(after.BytesOut-before.BytesOut)/1e3, "claim-KB")

		took = each(func(p *tiered.Partition) error {
			_, err := p.ApplyRetention(ctx)
			return err
		})
		b.ReportMetric(float64(took.Milliseconds()), "retention-ms")
		runtime.GC()
		runtime.ReadMemStats(&ms)
		b.ReportMetric((float64(ms.HeapAlloc)-float64(base.HeapAlloc))/1e6, "led-heap-MB")
		if err := tb.Close(); err != nil {
			b.Fatal(err)
		}
	}
}

// envInt is the positive integer in the environment variable name, or def.
func envInt(b *testing.B, name string, def int) int {
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil || n <= 0 {
		b.Fatalf("%s=%q: want a positive integer", name, s)
	}
	return n
}
