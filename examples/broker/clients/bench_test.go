package clients_test

import (
	"context"
	"log/slog"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/tierlog/tierlog/examples/broker/broker"
)

// The records and topic of BenchmarkKgo (examples/broker/broker), so the
// two clients' figures sit side by side: values of 1 KiB, 4 partitions.
const (
	benchRecordBytes = 1024
	benchPartitions  = 4
)

// BenchmarkSarama produces b.N records of 1 KiB with sarama's async
// producer (acks=all, uncompressed, sarama's defaults otherwise: not
// idempotent, its default protocol version, random partitions) to a topic
// of 4 partitions and consumes them back with a partition consumer each,
// through the reference broker (a local topic, consumed from the page
// cache) and, beside it, through kfake (franz-go's in-memory fake
// cluster) with the same client settings. It reports what BenchmarkKgo
// reports: produce and consume MB/s and records/s, and the p99 produce
// latency (from the send to its success). 1 GiB, as make bench-broker
// runs kgo:
//
//	go test -run '^$' -bench Sarama -benchtime 1048576x
func BenchmarkSarama(b *testing.B) {
	b.Run("tierlog", func(b *testing.B) {
		opts := broker.Options{Listen: "127.0.0.1:0", Dir: b.TempDir(), TopicConfig: map[string]string{"retention.ms": "-1"},
			Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))}
		br, err := broker.Start(opts)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() {
			if err := br.Close(); err != nil {
				b.Errorf("close broker: %v", err)
			}
		})
		benchSarama(b, br.Addr())
	})
	b.Run("kfake", func(b *testing.B) {
		c, err := kfake.NewCluster(kfake.NumBrokers(1))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(c.Close)
		benchSarama(b, c.ListenAddrs()[0])
	})
}

// benchSarama creates the topic "bench", produces b.N records to it and
// consumes them back, timing each, and reports.
func benchSarama(b *testing.B, addr string) {
	cfg := sarama.NewConfig()
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	cfg.Producer.Return.Successes = true
	cfg.Producer.Compression = sarama.CompressionNone
	cfg.Consumer.Fetch.Default = 4 << 20 // kgo's FetchMaxPartitionBytes in BenchmarkKgo
	adm, err := sarama.NewClusterAdmin([]string{addr}, cfg)
	if err != nil {
		b.Fatal(err)
	}
	if err := adm.CreateTopic("bench", &sarama.TopicDetail{NumPartitions: benchPartitions, ReplicationFactor: 1}, false); err != nil {
		b.Fatal(err)
	}
	adm.Close()

	prod, err := sarama.NewAsyncProducer([]string{addr}, cfg)
	if err != nil {
		b.Fatal(err)
	}
	val := make([]byte, benchRecordBytes)
	for i := range val {
		val[i] = byte('a' + i%26)
	}
	sent := make([]time.Time, b.N)
	lat := make([]time.Duration, b.N)
	var ends [benchPartitions]int64 // each partition's log end, for the consumers
	var wg sync.WaitGroup
	wg.Go(func() {
		for m := range prod.Successes() {
			i := m.Metadata.(int)
			lat[i] = time.Since(sent[i])
			ends[m.Partition] = max(ends[m.Partition], m.Offset+1)
		}
	})
	var errs []error
	wg.Go(func() {
		for e := range prod.Errors() {
			errs = append(errs, e.Err)
		}
	})
	b.ResetTimer()
	start := time.Now()
	for i := range b.N {
		sent[i] = time.Now()
		prod.Input() <- &sarama.ProducerMessage{Topic: "bench", Value: sarama.ByteEncoder(val), Metadata: i}
	}
	// AsyncClose flushes what is buffered; the two readers end once every
	// record is answered and the channels close.
	prod.AsyncClose()
	wg.Wait()
	produce := time.Since(start)
	b.StopTimer()
	if len(errs) > 0 {
		b.Fatalf("%d of %d records not produced, the first: %v", len(errs), b.N, errs[0])
	}

	cons, err := sarama.NewConsumer([]string{addr}, cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer cons.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	b.StartTimer()
	start = time.Now()
	got := make(chan int, benchPartitions)
	for i := range int32(benchPartitions) {
		pc, err := cons.ConsumePartition("bench", i, sarama.OffsetOldest)
		if err != nil {
			b.Fatal(err)
		}
		go func() {
			defer pc.AsyncClose()
			n := 0
			for int64(n) < ends[i] {
				select {
				case <-pc.Messages():
					n++
				case err := <-pc.Errors():
					b.Error(err)
					got <- n
					return
				case <-ctx.Done():
					got <- n
					return
				}
			}
			got <- n
		}()
	}
	total := 0
	for range benchPartitions {
		total += <-got
	}
	consume := time.Since(start)
	b.StopTimer()
	if total != b.N {
		b.Fatalf("consumed %d of %d records", total, b.N)
	}
	slices.Sort(lat)
	mb := float64(b.N) * benchRecordBytes / 1e6
	b.ReportMetric(mb/produce.Seconds(), "produce-MB/s")
	b.ReportMetric(float64(b.N)/produce.Seconds(), "produce-rec/s")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-produce-ms")
	b.ReportMetric(mb/consume.Seconds(), "consume-MB/s")
	b.ReportMetric(float64(b.N)/consume.Seconds(), "consume-rec/s")
	b.ReportMetric(0, "ns/op")
}
