package broker_test

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestCodecs produces records in each codec with kgo's idempotent
// producer (its default) and consumes them back: every key, value, header
// and timestamp as produced, in order, once.
func TestCodecs(t *testing.T) {
	n := recordsPerCase(100_000)
	b := startBroker(t, testOptions(t.TempDir()))
	for _, c := range []struct {
		name  string
		codec kgo.CompressionCodec
	}{{"none", kgo.NoCompression()}, {"gzip", kgo.GzipCompression()}, {"snappy", kgo.SnappyCompression()},
		{"lz4", kgo.Lz4Compression()}, {"zstd", kgo.ZstdCompression()}} {
		t.Run(c.name, func(t *testing.T) {
			topic := "codec-" + c.name
			prod := newClient(t, b.Addr(), kgo.ProducerBatchCompression(c.codec), kgo.DefaultProduceTopic(topic))
			base := time.UnixMilli(1_700_000_000_000)
			recs := make([]*kgo.Record, n)
			for i := range recs {
				recs[i] = &kgo.Record{Key: []byte(fmt.Sprintf("key-%d", i%100)), Value: value(i),
					Headers: []kgo.RecordHeader{{Key: "i", Value: []byte(fmt.Sprint(i))}}, Timestamp: base.Add(time.Duration(i) * time.Millisecond)}
			}
			produceSync(t, prod, recs...)
			cons := newClient(t, b.Addr(), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
			got := consumeN(t, cons, n, time.Minute)
			if len(got) != n {
				t.Fatalf("consumed %d records, produced %d", len(got), n)
			}
			for i, r := range got {
				w := recs[i]
				if r.Offset != int64(i) || !bytes.Equal(r.Key, w.Key) || !bytes.Equal(r.Value, w.Value) ||
					!r.Timestamp.Equal(w.Timestamp) || len(r.Headers) != 1 || !bytes.Equal(r.Headers[0].Value, w.Headers[0].Value) {
					t.Fatalf("record %d: got offset %d key %q value %q ts %v, want key %q value %q ts %v",
						i, r.Offset, r.Key, r.Value, r.Timestamp, w.Key, w.Value, w.Timestamp)
				}
			}
		})
	}
}
