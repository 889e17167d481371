package broker_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tierlog/tierlog/objstore"
	"github.com/tierlog/tierlog/tiered"
)

// TestDeleteTopics: a plain topic and a tiered one, produced to (the
// tiered one until its closed segments are in the bucket and gone from
// the disk), are deleted with kgo's DeleteTopics. Metadata no longer
// lists them, their partition directories are gone, the bucket holds
// nothing of the tiered one under its prefix but the manifest that
// records the deletion, and a topic created again under each name
// starts empty at offset 0 and takes records.
func TestDeleteTopics(t *testing.T) {
	dir := t.TempDir()
	store := s3Store(t)
	b := startBroker(t, tieredOptions(dir, store))
	// No auto-creation: a metadata refresh of a deleted topic must not
	// bring it back.
	admin, err := kgo.NewClient(kgo.SeedBrokers(b.Addr()), kgo.RetryTimeout(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(admin.Close)
	const seg = 8 << 10
	topics := []struct {
		name string
		cfg  map[string]string
	}{{"plain", nil}, {"tiered", tieredTopic(seg)}}
	const n = 2000
	for _, tc := range topics {
		createTopic(t, admin, tc.name, 1, tc.cfg)
		produceAndClose(t, b.Addr(), tc.name, n, "old", kgo.ProducerBatchMaxBytes(seg/2))
	}
	waitOffloaded(t, b, "tiered", 0)
	prefix := "broker/tiered-0/"
	if objs := listObjects(t, store, prefix); len(objs) < 2 {
		t.Fatalf("before the deletion the bucket holds %v under %s: no segments offloaded", objs, prefix)
	} else {
		t.Logf("before the deletion: %d objects under %s", len(objs), prefix)
	}
	for _, tc := range topics {
		if _, err := os.Stat(filepath.Join(dir, "logs", tc.name+"-0")); err != nil {
			t.Fatalf("before the deletion: %v", err)
		}
	}

	req := kmsg.NewPtrDeleteTopicsRequest()
	req.TimeoutMillis = 30_000
	for _, tc := range topics {
		req.TopicNames = append(req.TopicNames, tc.name)
		rt := kmsg.NewDeleteTopicsRequestTopic()
		rt.Topic = kmsg.StringPtr(tc.name)
		req.Topics = append(req.Topics, rt)
	}
	resp, err := req.RequestWith(context.Background(), admin)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Topics) != len(topics) {
		t.Fatalf("DeleteTopics answered %d topics, asked %d", len(resp.Topics), len(topics))
	}
	for _, rt := range resp.Topics {
		if rt.ErrorCode != 0 {
			t.Fatalf("delete %s: error code %d (%s)", deref(rt.Topic), rt.ErrorCode, deref(rt.ErrorMessage))
		}
	}

	meta := kmsg.NewPtrMetadataRequest() // Topics nil: every topic
	mresp, err := meta.RequestWith(context.Background(), admin)
	if err != nil {
		t.Fatal(err)
	}
	for _, mt := range mresp.Topics {
		for _, tc := range topics {
			if mt.Topic != nil && *mt.Topic == tc.name {
				t.Errorf("Metadata still lists the deleted topic %s (error code %d)", tc.name, mt.ErrorCode)
			}
		}
	}
	entries, err := os.ReadDir(filepath.Join(dir, "logs"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		for _, tc := range topics {
			if strings.HasPrefix(e.Name(), tc.name+"-0") {
				t.Errorf("the log directory still holds %s after the deletion of %s", e.Name(), tc.name)
			}
		}
	}
	for _, o := range listObjects(t, store, prefix) {
		if o != prefix+tiered.ManifestName {
			t.Errorf("the bucket still holds %s of the deleted topic", o)
		}
	}

	// Created again under the same names: empty, from offset 0.
	for _, tc := range topics {
		createTopic(t, admin, tc.name, 1, tc.cfg)
		if o := b.Partition(tc.name, 0).Offsets(); o.LogStart != 0 || o.LogEnd != 0 {
			t.Errorf("%s created again: offsets %+v, want an empty log at 0", tc.name, o)
		}
		if tp, ok := b.Partition(tc.name, 0).(*tiered.Partition); ok {
			// Read the bucket's manifest now, as a fetch or the next
			// upload task would: the deleted partition's is there.
			if err := tp.Attach(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
		if start, end := listOffsets(t, admin, tc.name); start != 0 || end != 0 {
			t.Errorf("%s created again: ListOffsets says the log runs from %d to %d, want an empty log at 0", tc.name, start, end)
		}
		const m = 10
		produceAndClose(t, b.Addr(), tc.name, m, "new")
		cons := newClient(t, b.Addr(), kgo.ConsumeTopics(tc.name), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
		got := consumeN(t, cons, m, time.Minute)
		if len(got) != m {
			t.Fatalf("%s created again: consumed %d records, produced %d", tc.name, len(got), m)
		}
		for i, r := range got {
			if want := fmt.Sprintf("new-%d", i); r.Offset != int64(i) || string(r.Value) != want {
				t.Fatalf("%s created again: record %d at offset %d is %q, want %q at offset %d", tc.name, i, r.Offset, r.Value, want, i)
			}
		}
	}
}

// produceAndClose produces n records "<tag>-<i>" to topic with a client
// of its own, closed before it returns (its metadata refreshes stop).
func produceAndClose(t *testing.T, addr, topic string, n int, tag string, opts ...kgo.Opt) {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(addr), kgo.DefaultProduceTopic(topic),
		kgo.RetryTimeout(30 * time.Second)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	recs := make([]*kgo.Record, n)
	for i := range recs {
		recs[i] = &kgo.Record{Value: []byte(fmt.Sprintf("%s-%d", tag, i))}
	}
	produceSync(t, cl, recs...)
}

// listObjects lists the keys under prefix.
func listObjects(t *testing.T, s *objstore.Store, prefix string) []string {
	t.Helper()
	var keys []string
	if err := s.List(context.Background(), prefix, func(o objstore.ObjectInfo) bool {
		keys = append(keys, o.Key)
		return true
	}); err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	return keys
}

// deref is *p, or "" for nil (a nullable string of a response).
func deref(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

// listOffsets asks ListOffsets for topic-0's earliest and latest offsets.
func listOffsets(t *testing.T, cl *kgo.Client, topic string) (start, end int64) {
	t.Helper()
	start, _ = listOffset(t, cl, topic, -2, 0)
	end, _ = listOffset(t, cl, topic, -1, 0)
	return start, end
}
