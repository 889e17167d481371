package broker_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tierlog/tierlog/examples/broker/broker"
	"github.com/tierlog/tierlog/tiered"
)

// benchRecordBytes is each benchmark record's value size.
const benchRecordBytes = 1024

// benchPartitions is the benchmark topic's partition count.
const benchPartitions = 4

// BenchmarkKgo produces b.N records of 1 KiB with kgo (idempotent, acks=-1,
// uncompressed, 4 partitions) and consumes them back, through this broker
// and, beside it, through kfake (franz-go's in-memory fake cluster) with
// the same client settings:
//
//   - tierlog: a local topic, consumed from the disk (the page cache);
//   - tiered: a tiered topic on versitygw (started by the benchmark, a real
//     S3 server on loopback) with local.retention.ms=0: once every closed
//     segment is uploaded and deleted locally (not timed), the consume
//     reads everything below the active segments from the bucket;
//   - kfake.
//
// Each reports produce and consume MB/s and records/s, and the p99
// produce latency (from Produce to its acknowledgement, as Kafka's
// producer perf test measures it); tiered also the share of the bytes the
// bucket served (bucket-share) and its consume rate over tierlog's
// (bucket/local; the goal is at least 0.8). 1 GiB: make bench-broker, or
//
//	go test ./examples/broker/broker -run '^$' -bench Kgo -benchtime 1048576x
func BenchmarkKgo(b *testing.B) {
	var localConsume float64 // tierlog's consume MB/s, for tiered's ratio
	b.Run("tierlog", func(b *testing.B) {
		br := startBroker(b, testOptions(b.TempDir()))
		_, localConsume = benchKgo(b, br.Addr(), nil, nil)
	})
	b.Run("tiered", func(b *testing.B) {
		br := startBroker(b, tieredOptions(b.TempDir(), s3Store(b)))
		// 16 segments a partition for 1 GiB, so the active segments
		// (read from the disk) are a few percent of the bytes.
		total := int64(b.N) * benchRecordBytes
		seg := min(max(total/benchPartitions/16, 1<<20), 1<<30)
		var remote int64
		_, consume := benchKgo(b, br.Addr(), tieredTopic(int(seg)), func() {
			remote = 0
			for i := range int32(benchPartitions) {
				tp := waitUploaded(b, br, "bench", i)
				_, n := tp.RemoteSize()
				remote += n
			}
		})
		b.ReportMetric(float64(remote)/float64(total), "bucket-share")
		// Reads crossing cached ranges that had to be copied into one
		// (a read-ahead that could not start at a batch), and read-ahead
		// evicted unread: both should be near zero.
		st := br.Partition("bench", 0).(*tiered.Partition).CacheStats()
		b.ReportMetric(float64(st.ReadJoinedBytes)/float64(remote), "joined/bucket")
		b.ReportMetric(float64(st.ReadAheadWastedBytes)/float64(remote), "wasted/bucket")
		if localConsume > 0 {
			b.ReportMetric(consume/localConsume, "bucket/local")
		}
	})
	b.Run("diskless", func(b *testing.B) {
		// The same 1 GiB through a diskless topic on the same S3 server:
		// acknowledged once a WAL object holds it (250 ms, 8 MiB), read
		// back from the local cache.
		br := startBroker(b, tieredOptions(b.TempDir(), s3Store(b)))
		cfg := map[string]string{"diskless.enable": "true", "retention.ms": "-1",
			"segment.bytes": fmt.Sprint(min(max(int64(b.N)*benchRecordBytes/benchPartitions/16, 1<<20), 1<<30))}
		_, consume := benchKgo(b, br.Addr(), cfg, nil)
		if localConsume > 0 {
			b.ReportMetric(consume/localConsume, "cache/local")
		}
	})
	b.Run("kfake", func(b *testing.B) {
		c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.AllowAutoTopicCreation())
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(c.Close)
		benchKgo(b, c.ListenAddrs()[0], nil, nil)
	})
}

// waitUploaded waits until topic-i has no closed segment left to upload
// or on disk (a small run may not have rolled any).
func waitUploaded(b *testing.B, br *broker.Broker, topic string, i int32) *tiered.Partition {
	b.Helper()
	tp := br.Partition(topic, i).(*tiered.Partition)
	deadline := time.Now().Add(10 * time.Minute)
	for {
		if lag, _ := tp.CopyLag(); lag == 0 && len(tp.LocalSegments()) == 1 {
			return tp
		}
		if time.Now().After(deadline) {
			b.Fatalf("%s-%d: not uploaded after 10m", topic, i)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// benchKgo produces b.N records to a new topic "bench" with cfg, calls
// between (untimed), consumes them back, and reports; it returns the
// produce and consume MB/s.
func benchKgo(b *testing.B, addr string, cfg map[string]string, between func()) (produceMBps, consumeMBps float64) {
	admin := newClient(b, addr)
	createTopic(b, admin, "bench", benchPartitions, cfg)
	prod := newClient(b, addr, kgo.DefaultProduceTopic("bench"), kgo.ProducerBatchCompression(kgo.NoCompression()),
		kgo.ProducerBatchMaxBytes(1<<20), kgo.MaxBufferedRecords(20_000))
	val := make([]byte, benchRecordBytes)
	for i := range val {
		val[i] = byte('a' + i%26)
	}
	lat := make([]time.Duration, b.N)
	var wg sync.WaitGroup
	var failed sync.Once
	b.ResetTimer()
	start := time.Now()
	for i := range b.N {
		wg.Add(1)
		t0 := time.Now()
		prod.Produce(context.Background(), &kgo.Record{Value: val}, func(_ *kgo.Record, err error) {
			lat[i] = time.Since(t0)
			if err != nil {
				failed.Do(func() { b.Error(err) })
			}
			wg.Done()
		})
	}
	wg.Wait()
	produce := time.Since(start)
	b.StopTimer()
	prod.Close()
	if between != nil {
		between()
	}

	cons := newClient(b, addr, kgo.ConsumeTopics("bench"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxPartitionBytes(4<<20))
	b.StartTimer()
	start = time.Now()
	got := 0
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	for got < b.N {
		fs := cons.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			b.Fatal(err)
		}
		got += fs.NumRecords()
	}
	consume := time.Since(start)
	b.StopTimer()
	slices.Sort(lat)
	mb := float64(b.N) * benchRecordBytes / 1e6
	produceMBps, consumeMBps = mb/produce.Seconds(), mb/consume.Seconds()
	b.ReportMetric(produceMBps, "produce-MB/s")
	b.ReportMetric(float64(b.N)/produce.Seconds(), "produce-rec/s")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-produce-ms")
	b.ReportMetric(consumeMBps, "consume-MB/s")
	b.ReportMetric(float64(b.N)/consume.Seconds(), "consume-rec/s")
	b.ReportMetric(0, "ns/op")
	return produceMBps, consumeMBps
}
