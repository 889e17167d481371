package broker_test

import (
	"bytes"
	"context"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/record"
)

// TestApiVersionsProduceFromV0: ApiVersions says Produce from v0, as
// Apache Kafka 4.0 does (KAFKA-18659): librdkafka (#4956) stops
// compressing with gzip, snappy and lz4 when Produce starts above v0.
func TestApiVersionsProduceFromV0(t *testing.T) {
	b := startBroker(t, testOptions(t.TempDir()))
	c := dialRaw(t, b.Addr())
	for _, v := range []int16{0, 3} {
		resp := c.apiVersions(v)
		var found bool
		for _, k := range resp.ApiKeys {
			if k.ApiKey == 0 {
				found = true
				if k.MinVersion != 0 {
					t.Errorf("ApiVersions v%d: Produce MinVersion %d, want 0", v, k.MinVersion)
				}
			}
		}
		if !found {
			t.Errorf("ApiVersions v%d: no Produce", v)
		}
	}
}

// TestProduceBelowV3Refused: a Produce of v0, v1 or v2 (message formats 0
// and 1, which the log does not store) is answered UNSUPPORTED_VERSION
// for each partition, and the connection still serves.
func TestProduceBelowV3Refused(t *testing.T) {
	b := startBroker(t, testOptions(t.TempDir()))
	cl := newClient(t, b.Addr())
	createTopic(t, cl, "old", 1, nil)
	c := dialRaw(t, b.Addr())
	for v := int16(0); v < 3; v++ {
		req := kmsg.NewPtrProduceRequest()
		req.SetVersion(v)
		req.Acks, req.TimeoutMillis = 1, 1000
		rt := kmsg.NewProduceRequestTopic()
		rt.Topic = "old"
		rp := kmsg.NewProduceRequestTopicPartition()
		rp.Records = []byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0} // an empty message set entry
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		resp := c.roundTrip(req).(*kmsg.ProduceResponse)
		if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
			t.Fatalf("Produce v%d: answer %+v", v, resp)
		}
		if code := resp.Topics[0].Partitions[0].ErrorCode; code != kerr.UnsupportedVersion.Code {
			t.Errorf("Produce v%d: error code %d, want UNSUPPORTED_VERSION (%d)", v, code, kerr.UnsupportedVersion.Code)
		}
	}
	if resp := c.apiVersions(3); resp.ErrorCode != 0 {
		t.Fatalf("ApiVersions after the refused produces: error code %d", resp.ErrorCode)
	}
	if end := b.Partition("old", 0).Offsets().LogEnd; end != 0 {
		t.Fatalf("log end %d after refused produces, want 0", end)
	}
}

// TestProduceKeepsCodec: the batches a producer compressed are stored
// with the codec it chose (compression.type=producer), each codec.
func TestProduceKeepsCodec(t *testing.T) {
	b := startBroker(t, testOptions(t.TempDir()))
	codecs := []struct {
		name  string
		codec kgo.CompressionCodec
		want  record.Codec
	}{
		{"none", kgo.NoCompression(), record.None},
		{"gzip", kgo.GzipCompression(), record.GZIP},
		{"snappy", kgo.SnappyCompression(), record.Snappy},
		{"lz4", kgo.Lz4Compression(), record.LZ4},
		{"zstd", kgo.ZstdCompression(), record.ZSTD},
	}
	for _, tc := range codecs {
		t.Run(tc.name, func(t *testing.T) {
			topic := "codec-" + tc.name
			cl := newClient(t, b.Addr(), kgo.ProducerBatchCompression(tc.codec), kgo.DefaultProduceTopic(topic))
			var recs []*kgo.Record
			for i := range 200 {
				recs = append(recs, &kgo.Record{Value: bytes.Repeat(value(i), 4)})
			}
			produceSync(t, cl, recs...)
			batches := storedBatches(t, b.Partition(topic, 0))
			if len(batches) == 0 {
				t.Fatal("no batches stored")
			}
			for _, bt := range batches {
				if got := bt.Codec(); got != tc.want {
					t.Fatalf("batch at %d stored with codec %d, want %d", bt.BaseOffset(), got, tc.want)
				}
			}
		})
	}
}

// storedBatches reads every batch of p from its log start.
func storedBatches(t *testing.T, p backend.Partition) []record.Batch {
	t.Helper()
	var buf bytes.Buffer
	off := p.Offsets().LogStart
	for off < p.Offsets().LogEnd {
		recs, err := p.Read(context.Background(), off, backend.ReadOptions{MaxBytes: 1 << 20, MinOneBatch: true})
		if err != nil {
			t.Fatal(err)
		}
		n := buf.Len()
		if _, err := recs.WriteTo(&buf); err != nil {
			t.Fatal(err)
		}
		recs.Close()
		if buf.Len() == n {
			t.Fatalf("read at %d returned nothing", off)
		}
		last, err := lastBatch(buf.Bytes()[n:])
		if err != nil {
			t.Fatal(err)
		}
		off = last.NextOffset()
	}
	var out []record.Batch
	for rest := buf.Bytes(); len(rest) > 0; {
		bt, err := record.Parse(rest)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, bt)
		rest = rest[len(bt):]
	}
	return out
}

func lastBatch(buf []byte) (record.Batch, error) {
	var last record.Batch
	for len(buf) > 0 {
		bt, err := record.Parse(buf)
		if err != nil {
			return nil, err
		}
		last, buf = bt, buf[len(bt):]
	}
	return last, nil
}
