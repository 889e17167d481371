package broker_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// produceTimed produces n records to topic-0 with timestamps base+i ms.
func produceTimed(t *testing.T, cl *kgo.Client, topic string, n int, base time.Time) {
	t.Helper()
	recs := make([]*kgo.Record, n)
	for i := range recs {
		recs[i] = &kgo.Record{Topic: topic, Value: value(i), Timestamp: base.Add(time.Duration(i) * time.Millisecond)}
	}
	produceSync(t, cl, recs...)
}

// listOffset asks ListOffsets for one partition.
func listOffset(t *testing.T, cl *kgo.Client, topic string, ts int64, isolation int8) (offset, timestamp int64) {
	t.Helper()
	req := kmsg.NewPtrListOffsetsRequest()
	req.IsolationLevel = isolation
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewListOffsetsRequestTopicPartition()
	rp.Partition, rp.Timestamp = 0, ts
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(context.Background(), cl)
	if err != nil {
		t.Fatal(err)
	}
	p := resp.Topics[0].Partitions[0]
	if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
		t.Fatalf("ListOffsets %s ts %d: %v", topic, ts, err)
	}
	return p.Offset, p.Timestamp
}

func deleteRecords(t *testing.T, cl *kgo.Client, topic string, before int64) int64 {
	t.Helper()
	req := kmsg.NewPtrDeleteRecordsRequest()
	rt := kmsg.NewDeleteRecordsRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewDeleteRecordsRequestTopicPartition()
	rp.Partition, rp.Offset = 0, before
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(context.Background(), cl)
	if err != nil {
		t.Fatal(err)
	}
	p := resp.Topics[0].Partitions[0]
	if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
		t.Fatalf("DeleteRecords: %v", err)
	}
	return p.LowWatermark
}

// TestListOffsets asks for every special time and for timestamps.
func TestListOffsets(t *testing.T) {
	b := startBroker(t, testOptions(t.TempDir()))
	cl := newClient(t, b.Addr())
	base := time.UnixMilli(1_700_000_000_000)
	produceTimed(t, cl, "times", 100, base)
	if got := deleteRecords(t, cl, "times", 10); got != 10 {
		t.Fatalf("DeleteRecords low watermark %d, want 10", got)
	}
	for _, c := range []struct {
		name       string
		ts         int64
		wantOffset int64
		wantTs     int64
	}{
		{"latest", -1, 100, -1},
		{"earliest", -2, 10, -1},
		{"max timestamp", -3, 99, base.UnixMilli() + 99},
		{"earliest local", -4, 10, -1},
		{"latest tiered (none)", -5, -1, -1},
		{"by timestamp", base.UnixMilli() + 42, 42, base.UnixMilli() + 42},
		{"after the last record", base.UnixMilli() + 1000, -1, -1},
	} {
		off, ts := listOffset(t, cl, "times", c.ts, 0)
		if off != c.wantOffset || ts != c.wantTs {
			t.Errorf("%s: offset %d timestamp %d, want %d and %d", c.name, off, ts, c.wantOffset, c.wantTs)
		}
	}
}

// TestConsumeFrom consumes from an offset and from a timestamp.
func TestConsumeFrom(t *testing.T) {
	b := startBroker(t, testOptions(t.TempDir()))
	cl := newClient(t, b.Addr())
	base := time.UnixMilli(1_700_000_000_000)
	produceTimed(t, cl, "from", 200, base)
	for _, c := range []struct {
		name  string
		at    kgo.Offset
		first int64
	}{
		{"offset", kgo.NewOffset().At(57), 57},
		{"timestamp", kgo.NewOffset().AfterMilli(base.UnixMilli() + 120), 120},
		{"relative to the end", kgo.NewOffset().AtEnd().Relative(-5), 195},
	} {
		cons := newClient(t, b.Addr(), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"from": {0: c.at}}))
		got := consumeN(t, cons, 200-int(c.first), 30*time.Second)
		if got[0].Offset != c.first || got[len(got)-1].Offset != 199 {
			t.Errorf("%s: consumed %d..%d, want %d..199", c.name, got[0].Offset, got[len(got)-1].Offset, c.first)
		}
	}
}

// TestOffsetOutOfRange fetches below the log start and past the log end:
// the broker answers OFFSET_OUT_OF_RANGE and kgo applies its reset policy,
// as against Kafka.
func TestOffsetOutOfRange(t *testing.T) {
	b := startBroker(t, testOptions(t.TempDir()))
	cl := newClient(t, b.Addr())
	produceTimed(t, cl, "oor", 100, time.Now())
	deleteRecords(t, cl, "oor", 40)
	consume := func(at kgo.Offset, reset kgo.Offset) *kgo.Client {
		return newClient(t, b.Addr(), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"oor": {0: at}}), kgo.ConsumeResetOffset(reset))
	}
	// Below the log start, reset to the start: the first record kept.
	got := consumeN(t, consume(kgo.NewOffset().At(5), kgo.NewOffset().AtStart()), 60, 30*time.Second)
	if got[0].Offset != 40 {
		t.Errorf("reset to start: first offset %d, want 40", got[0].Offset)
	}
	// Past the end, reset to the end: only what comes next.
	late := consume(kgo.NewOffset().At(1000), kgo.NewOffset().AtEnd())
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	if fs := late.PollFetches(ctx); len(fs.Records()) != 0 {
		t.Errorf("reset to end: got %d records before producing", len(fs.Records()))
	}
	cancel()
	produceTimed(t, cl, "oor", 1, time.Now())
	if got := consumeN(t, late, 1, 30*time.Second); got[0].Offset != 100 {
		t.Errorf("reset to end: first offset %d, want 100", got[0].Offset)
	}
	// No reset policy: the error reaches the application.
	strict := consume(kgo.NewOffset().At(5), kgo.NoResetOffset())
	ctx, cancel = context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		fs := strict.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatal("no OFFSET_OUT_OF_RANGE within 30s")
		}
		var found error
		fs.EachError(func(_ string, _ int32, err error) { found = err })
		if found != nil {
			if !errors.Is(found, kerr.OffsetOutOfRange) {
				t.Fatalf("fetch error %v, want OFFSET_OUT_OF_RANGE", found)
			}
			return
		}
	}
}

// offsetForLeaderEpoch asks where epoch ends in topic-0, with current as
// the request's current leader epoch.
func offsetForLeaderEpoch(t *testing.T, cl *kgo.Client, topic string, current, epoch int32) (code int16, foundEpoch int32, end int64) {
	t.Helper()
	req := kmsg.NewPtrOffsetForLeaderEpochRequest()
	req.ReplicaID = -1
	rt := kmsg.NewOffsetForLeaderEpochRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewOffsetForLeaderEpochRequestTopicPartition()
	rp.Partition, rp.CurrentLeaderEpoch, rp.LeaderEpoch = 0, current, epoch
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(context.Background(), cl)
	if err != nil {
		t.Fatal(err)
	}
	p := resp.Topics[0].Partitions[0]
	return p.ErrorCode, p.LeaderEpoch, p.EndOffset
}

// metadataEpoch is the leader epoch Metadata gives for topic-0.
func metadataEpoch(t *testing.T, cl *kgo.Client, topic string) int32 {
	t.Helper()
	req := kmsg.NewPtrMetadataRequest()
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr(topic)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(context.Background(), cl)
	if err != nil {
		t.Fatal(err)
	}
	return resp.Topics[0].Partitions[0].LeaderEpoch
}

// TestLeaderEpochs: each start leads every partition at an epoch one above
// the last start's (a restart is a leader election), stamped into the
// batches appended; OffsetForLeaderEpoch answers where each epoch ends; a
// request with an older current epoch is fenced, a newer one unknown.
func TestLeaderEpochs(t *testing.T) {
	opts := testOptions(t.TempDir())
	b := startBroker(t, opts)
	cl := newClient(t, b.Addr())
	produceTimed(t, cl, "epochs", 10, time.Now())
	if e := metadataEpoch(t, cl, "epochs"); e != 0 {
		t.Fatalf("a new topic leads at epoch %d, want 0", e)
	}
	// Two restarts, records only after the second.
	for range 2 {
		opts.Listen = b.Addr()
		if err := b.Close(); err != nil {
			t.Fatal(err)
		}
		b = startBroker(t, opts)
	}
	cl = newClient(t, b.Addr())
	if e := metadataEpoch(t, cl, "epochs"); e != 2 {
		t.Fatalf("after two restarts the topic leads at epoch %d, want 2", e)
	}
	produceTimed(t, cl, "epochs", 5, time.Now())
	for _, c := range []struct {
		epoch     int32
		wantEpoch int32
		wantEnd   int64
	}{
		{0, 0, 10},
		{1, 0, 10}, // epoch 1 appended nothing: epoch 0 is the largest <= 1 with records
		{2, 2, 15},
		{7, 2, 15},
	} {
		code, e, end := offsetForLeaderEpoch(t, cl, "epochs", -1, c.epoch)
		if code != 0 || e != c.wantEpoch || end != c.wantEnd {
			t.Errorf("epoch %d: error %d, epoch %d ends at %d; want epoch %d ending at %d", c.epoch, code, e, end, c.wantEpoch, c.wantEnd)
		}
	}
	for _, c := range []struct {
		current int32
		want    int16
	}{{2, 0}, {1, kerr.FencedLeaderEpoch.Code}, {3, kerr.UnknownLeaderEpoch.Code}} {
		if code, _, _ := offsetForLeaderEpoch(t, cl, "epochs", c.current, 2); code != c.want {
			t.Errorf("current leader epoch %d: error %d, want %d", c.current, code, c.want)
		}
	}
	cons := newClient(t, b.Addr(), kgo.ConsumeTopics("epochs"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	for _, r := range consumeN(t, cons, 15, 30*time.Second) {
		if want := map[bool]int32{true: 0, false: 2}[r.Offset < 10]; r.LeaderEpoch != want {
			t.Fatalf("offset %d was stamped with epoch %d, want %d", r.Offset, r.LeaderEpoch, want)
		}
	}
}

// TestRestoredTopicLeadsAboveItsEpochs: a topic created over partition
// directories that are already there (a restored log directory, whose
// topics.json was lost) leads at one above the largest epoch their logs
// hold records of, never back at 0: each partition's LatestLeaderEpoch.
func TestRestoredTopicLeadsAboveItsEpochs(t *testing.T) {
	opts := testOptions(t.TempDir())
	b := startBroker(t, opts)
	cl := newClient(t, b.Addr())
	produceTimed(t, cl, "restored", 3, time.Now())
	for range 2 { // epochs 1 and 2, each with records
		opts.Listen = b.Addr()
		if err := b.Close(); err != nil {
			t.Fatal(err)
		}
		b = startBroker(t, opts)
		cl = newClient(t, b.Addr())
		produceTimed(t, cl, "restored", 3, time.Now())
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(opts.Dir, "topics.json")); err != nil {
		t.Fatal(err)
	}
	opts.Listen = "127.0.0.1:0"
	b = startBroker(t, opts)
	cl = newClient(t, b.Addr())
	produceTimed(t, cl, "restored", 1, time.Now()) // created anew over its directory
	if e := metadataEpoch(t, cl, "restored"); e != 3 {
		t.Fatalf("the topic created over its directory leads at epoch %d, want 3 (one above the epoch 2 its log holds)", e)
	}
}
