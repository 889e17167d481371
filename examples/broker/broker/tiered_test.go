package broker_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tierlog/tierlog/examples/broker/broker"
	"github.com/tierlog/tierlog/objstore"
	"github.com/tierlog/tierlog/objstore/mem"
	"github.com/tierlog/tierlog/objstore/s3"
	"github.com/tierlog/tierlog/testing/crashchild"
	"github.com/tierlog/tierlog/testing/faultstore"
	"github.com/tierlog/tierlog/testing/s3server"
	"github.com/tierlog/tierlog/tiered"
)

func TestMain(m *testing.M) {
	if code, ok := crashchild.Dispatch(childRoles); ok {
		os.Exit(code)
	}
	os.Exit(s3server.RunTests(m))
}

// s3Store opens a fresh bucket on the test binary's versitygw (a real S3
// server; MinIO syncs every object and is slower here).
func s3Store(t testing.TB) *objstore.Store {
	t.Helper()
	srv := s3server.SharedKind(t, s3server.VersityGW)
	bucket := srv.NewBucket(t)
	d, err := s3.Open(context.Background(), s3.Config{Bucket: bucket, Endpoint: srv.Endpoint, Region: srv.Region, PathStyle: true,
		AccessKey: srv.AccessKey, SecretKey: srv.SecretKey})
	if err != nil {
		t.Fatal(err)
	}
	s := objstore.New(d, "s3://"+bucket, objstore.Options{})
	t.Cleanup(func() { s.Close() })
	return s
}

// tieredOptions are testOptions with a bucket.
func tieredOptions(dir string, store *objstore.Store) broker.Options {
	opts := testOptions(dir)
	opts.Store, opts.StorePrefix = store, "broker"
	opts.RemoteLogManager = map[string]string{"remote.log.manager.task.interval.ms": "200",
		"remote.log.manager.task.retry.backoff.ms": "20", "remote.log.manager.task.retry.backoff.max.ms": "200"}
	return opts
}

// tieredTopic is a tiered topic's config: every closed segment leaves the
// disk once the bucket holds it (local.retention.ms=0); the records are
// kept forever (their timestamps may be old).
func tieredTopic(segmentBytes int) map[string]string {
	return map[string]string{"remote.storage.enable": "true", "local.retention.ms": "0", "retention.ms": "-1",
		"segment.bytes": fmt.Sprint(segmentBytes), "file.delete.delay.ms": "0"}
}

// waitOffloaded waits until every closed segment of topic-i is in the
// bucket and gone from the disk: only the active segment is local, and
// the local log starts above 0. It returns the partition.
func waitOffloaded(t testing.TB, b *broker.Broker, topic string, i int32) *tiered.Partition {
	t.Helper()
	tp, ok := b.Partition(topic, i).(*tiered.Partition)
	if !ok {
		t.Fatalf("%s-%d is a %T, not a tiered partition", topic, i, b.Partition(topic, i))
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		lag, _ := tp.CopyLag()
		if lag == 0 && len(tp.LocalSegments()) == 1 && tp.Offsets().LocalLogStart > 0 {
			return tp
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s-%d: after 2m, %d segments to upload, %d local segments, offsets %+v", topic, i, lag,
				len(tp.LocalSegments()), tp.Offsets())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestTieredCodecs: records of each codec, produced with kgo's idempotent
// producer to a tiered topic, are offloaded to a real S3 server with
// local.retention.ms=0, then consumed back byte for byte: everything below
// the active segment from the bucket.
func TestTieredCodecs(t *testing.T) {
	n := recordsPerCase(100_000)
	// Segments of 128 KiB: 5 to 70 of them a codec at 100,000 records;
	// smaller runs (TIERLOG_BROKER_RECORDS) take smaller ones, so that
	// they too roll and offload.
	seg := 128 << 10
	if n < 100_000 {
		seg = 8 << 10
	}
	b := startBroker(t, tieredOptions(t.TempDir(), s3Store(t)))
	admin := newClient(t, b.Addr())
	for _, c := range []struct {
		name  string
		codec kgo.CompressionCodec
	}{{"none", kgo.NoCompression()}, {"gzip", kgo.GzipCompression()}, {"snappy", kgo.SnappyCompression()},
		{"lz4", kgo.Lz4Compression()}, {"zstd", kgo.ZstdCompression()}} {
		t.Run(c.name, func(t *testing.T) {
			topic := "tiered-" + c.name
			createTopic(t, admin, topic, 1, tieredTopic(seg))
			prod := newClient(t, b.Addr(), kgo.ProducerBatchCompression(c.codec), kgo.DefaultProduceTopic(topic),
				kgo.ProducerBatchMaxBytes(int32(seg/2)))
			base := time.UnixMilli(1_700_000_000_000)
			recs := make([]*kgo.Record, n)
			for i := range recs {
				recs[i] = &kgo.Record{Key: []byte(fmt.Sprintf("key-%d", i%100)), Value: value(i),
					Headers: []kgo.RecordHeader{{Key: "i", Value: []byte(fmt.Sprint(i))}}, Timestamp: base.Add(time.Duration(i) * time.Millisecond)}
			}
			produceSync(t, prod, recs...)
			tp := waitOffloaded(t, b, topic, 0)
			segs, remoteBytes := tp.RemoteSize()
			localStart := tp.Offsets().LocalLogStart
			readBefore := tp.Metrics().RemoteReadBytes.Load()

			cons := newClient(t, b.Addr(), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
			got := consumeN(t, cons, n, 2*time.Minute)
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
			read := tp.Metrics().RemoteReadBytes.Load() - readBefore
			if read < remoteBytes {
				t.Fatalf("the consumer read %d bytes from the bucket, which holds %d below offset %d", read, remoteBytes, localStart)
			}
			t.Logf("%d records: offsets 0..%d from %d segments in the bucket (%d bytes, %d read from it), the rest from the active segment",
				n, localStart-1, segs, remoteBytes, read)
		})
	}
}

// bucketDown is a rule that takes the bucket down while on: every request
// but an abort of stale uploads fails as a refused connection would
// (retryably).
var bucketDown = faultstore.Rule{Every: 1, Fault: faultstore.FailBefore,
	Match: func(op objstore.Op, _ string) bool { return op != objstore.OpAbort },
	Err:   fmt.Errorf("%w: dial tcp 127.0.0.1:9000: connection refused", objstore.ErrRetryable)}

// fetchOnce sends one Fetch of topic-0 from offset and returns the
// partition's error code and how many record bytes came back.
func fetchOnce(t *testing.T, cl *kgo.Client, topic string, offset int64) (code int16, n int) {
	t.Helper()
	req := kmsg.NewPtrFetchRequest()
	req.ReplicaID, req.MaxBytes, req.MinBytes = -1, 1<<20, 1
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewFetchRequestTopicPartition()
	rp.Partition, rp.FetchOffset, rp.PartitionMaxBytes, rp.CurrentLeaderEpoch, rp.LogStartOffset = 0, offset, 1<<20, -1, -1
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := cl.Broker(broker.NodeID).Request(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	p := resp.(*kmsg.FetchResponse).Topics[0].Partitions[0]
	return p.ErrorCode, len(p.RecordBatches)
}

// TestTieredRestartAndBucketDown: a tiered topic through two broker
// starts. Each start leads at a higher epoch, so the new leader claims the
// bucket over the old one and keeps uploading (no fencing); with the
// bucket down, a fetch of offsets only the bucket holds is
// KAFKA_STORAGE_ERROR (retryable: kgo waits and retries) while the local
// offsets are served; once it is back, everything is consumed.
func TestTieredRestartAndBucketDown(t *testing.T) {
	drv := faultstore.Wrap(mem.New(), 0)
	down := drv.Add(bucketDown)
	down.SetEnabled(false)
	store := objstore.New(drv, "mem://broker", objstore.Options{MaxAttempts: 1})
	opts := tieredOptions(t.TempDir(), store)
	b := startBroker(t, opts)
	admin := newClient(t, b.Addr())
	createTopic(t, admin, "tiered", 1, tieredTopic(64<<10))
	// Uncompressed, so 3,000 records fill a few segments.
	plain := []kgo.Opt{kgo.ProducerBatchCompression(kgo.NoCompression()), kgo.ProducerBatchMaxBytes(16 << 10)}
	produceTo(t, newClient(t, b.Addr(), plain...), "tiered", 0, 3000)
	first, err := waitOffloaded(t, b, "tiered", 0).Manifest(context.Background())
	if err != nil {
		t.Fatal(err)
	}

	opts.Listen = b.Addr()
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	b = startBroker(t, opts)
	cl := newClient(t, b.Addr(), plain...)
	produceTo(t, cl, "tiered", 3000, 3000)
	tp := waitOffloaded(t, b, "tiered", 0)
	if m, err := tp.Manifest(context.Background()); err != nil || m.WriterEpoch != 1 || len(m.Segments) <= len(first.Segments) || tp.Fenced() != nil {
		t.Fatalf("after the restart: manifest writer epoch %d (want 1), %d segments (before: %d), fenced: %v",
			m.WriterEpoch, len(m.Segments), len(first.Segments), tp.Fenced())
	}

	down.SetEnabled(true)
	if code, _ := fetchOnce(t, cl, "tiered", 0); code != kerr.KafkaStorageError.Code {
		t.Fatalf("fetch of offset 0 with the bucket down: error %d, want KAFKA_STORAGE_ERROR (%d)", code, kerr.KafkaStorageError.Code)
	}
	if code, n := fetchOnce(t, cl, "tiered", tp.Offsets().LocalLogStart); code != 0 || n == 0 {
		t.Fatalf("fetch of the local offsets with the bucket down: error %d, %d bytes", code, n)
	}
	cons := newClient(t, b.Addr(), kgo.ConsumeTopics("tiered"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	if recs := cons.PollFetches(ctx).Records(); len(recs) != 0 {
		t.Fatalf("%d records consumed from a bucket that is down", len(recs))
	}
	cancel()
	down.SetEnabled(false)
	for i, r := range consumeN(t, cons, 6000, time.Minute) {
		if r.Offset != int64(i) || string(r.Value) != string(value(i)) {
			t.Fatalf("offset %d holds %q, want offset %d %q", r.Offset, r.Value, i, value(i))
		}
	}
}

// TestTieredFetchPartitions consumes a 4-partition tiered topic from the
// bucket with three fetch shapes: the partitions' reads fit the Fetch's
// MaxBytes together (they run side by side); they do not (one at a time);
// and batches larger than PartitionMaxBytes, so the first partition's one
// batch leaves the others less than their PartitionMaxBytes (their early
// reads are read again, smaller). Each consumer gets every record once, in
// order.
func TestTieredFetchPartitions(t *testing.T) {
	const parts, n = 4, 8000
	b := startBroker(t, tieredOptions(t.TempDir(), objstore.New(mem.New(), "mem://fetch", objstore.Options{})))
	admin := newClient(t, b.Addr())
	createTopic(t, admin, "wide", parts, tieredTopic(64<<10))
	prod := newClient(t, b.Addr(), kgo.ProducerBatchCompression(kgo.NoCompression()), kgo.ProducerBatchMaxBytes(16<<10),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))
	recs := make([]*kgo.Record, n)
	for i := range recs {
		recs[i] = &kgo.Record{Topic: "wide", Partition: int32(i % parts), Value: value(i)}
	}
	produceSync(t, prod, recs...)
	var remote int64
	var metrics *tiered.Metrics
	for i := range int32(parts) {
		tp := waitOffloaded(t, b, "wide", i)
		_, n := tp.RemoteSize()
		remote, metrics = remote+n, tp.Metrics()
	}
	for _, c := range []struct {
		name string
		opts []kgo.Opt
	}{
		{"together", nil},
		{"one at a time", []kgo.Opt{kgo.FetchMaxBytes(100 << 10), kgo.FetchMaxPartitionBytes(64 << 10)}},
		{"batches over the partition bound", []kgo.Opt{kgo.FetchMaxBytes(32 << 10), kgo.FetchMaxPartitionBytes(8 << 10)}},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := metrics.RemoteReadBytes.Load()
			cons := newClient(t, b.Addr(), append([]kgo.Opt{kgo.ConsumeTopics("wide"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart())}, c.opts...)...)
			next := make([]int64, parts)
			for _, r := range consumeN(t, cons, n, time.Minute) {
				i := int(r.Offset)*parts + int(r.Partition)
				if r.Offset != next[r.Partition] || string(r.Value) != string(value(i)) {
					t.Fatalf("partition %d offset %d holds %q, want offset %d %q", r.Partition, r.Offset, r.Value, next[r.Partition], value(i))
				}
				next[r.Partition]++
			}
			if read := metrics.RemoteReadBytes.Load() - before; read < remote {
				t.Fatalf("%d bytes read from the bucket, which holds %d", read, remote)
			}
		})
	}
}

// TestTieredTopicWithoutStore: without a bucket, a topic with
// remote.storage.enable=true is refused (INVALID_CONFIG) and not
// recorded, so the broker restarts.
func TestTieredTopicWithoutStore(t *testing.T) {
	opts := testOptions(t.TempDir())
	b := startBroker(t, opts)
	cl := newClient(t, b.Addr())
	req := kmsg.NewPtrCreateTopicsRequest()
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = "remote", 1, 1
	c := kmsg.NewCreateTopicsRequestTopicConfig()
	c.Name, c.Value = "remote.storage.enable", kmsg.StringPtr("true")
	rt.Configs = append(rt.Configs, c)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(context.Background(), cl)
	if err != nil {
		t.Fatal(err)
	}
	if code := resp.Topics[0].ErrorCode; code != kerr.InvalidConfig.Code {
		t.Fatalf("a tiered topic on a broker without a bucket: error %d, want INVALID_CONFIG (%d)", code, kerr.InvalidConfig.Code)
	}
	opts.Listen = b.Addr()
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	b = startBroker(t, opts)
	if b.Partition("remote", 0) != nil {
		t.Fatal("the refused topic exists after a restart")
	}
}
