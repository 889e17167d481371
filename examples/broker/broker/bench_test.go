package broker_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// benchRecordBytes is each benchmark record's value size.
const benchRecordBytes = 1024

// BenchmarkKgo produces b.N records of 1 KiB with kgo (idempotent,
// uncompressed, 4 partitions) and consumes them back, through this broker
// (a local topic on disk) and, beside it, through kfake (franz-go's
// in-memory fake cluster) with the same client settings. Each reports
// produce and consume MB/s and records/s, and the p99 produce latency
// (from Produce to its acknowledgement, as Kafka's producer perf test
// measures it). 1 GiB: make bench-broker, or
//
//	go test ./examples/broker/broker -run '^$' -bench Kgo -benchtime 1048576x
func BenchmarkKgo(b *testing.B) {
	b.Run("tierlog", func(b *testing.B) {
		br := startBroker(b, testOptions(b.TempDir()))
		benchKgo(b, br.Addr())
	})
	b.Run("kfake", func(b *testing.B) {
		c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.AllowAutoTopicCreation())
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(c.Close)
		benchKgo(b, c.ListenAddrs()[0])
	})
}

func benchKgo(b *testing.B, addr string) {
	admin := newClient(b, addr)
	createTopic(b, admin, "bench", 4, nil)
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
	b.ReportMetric(mb/produce.Seconds(), "produce-MB/s")
	b.ReportMetric(float64(b.N)/produce.Seconds(), "produce-rec/s")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-produce-ms")
	b.ReportMetric(mb/consume.Seconds(), "consume-MB/s")
	b.ReportMetric(float64(b.N)/consume.Seconds(), "consume-rec/s")
	b.ReportMetric(0, "ns/op")
}
