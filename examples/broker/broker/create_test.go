package broker_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tierlog/tierlog/examples/broker/broker"
)

// createRequest asks for topics (name: partitions) in one CreateTopics.
func createRequest(topics ...any) *kmsg.CreateTopicsRequest {
	req := kmsg.NewPtrCreateTopicsRequest()
	req.SetVersion(5)
	req.TimeoutMillis = 60000
	for i := 0; i < len(topics); i += 2 {
		rt := kmsg.NewCreateTopicsRequestTopic()
		rt.Topic, rt.NumPartitions, rt.ReplicationFactor = topics[i].(string), int32(topics[i+1].(int)), 1
		req.Topics = append(req.Topics, rt)
	}
	return req
}

// openFiles counts the process's descriptors (Linux), or skips.
func openFiles(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("no /proc/self/fd to count descriptors: %v", err)
	}
	return len(ents)
}

// partitionDirs lists the log directory's partition directories of
// topic (deleted ones, renamed *-delete, aside).
func partitionDirs(t *testing.T, dir, topic string) []string {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(dir, "logs"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		if e.IsDir() && strings.HasPrefix(e.Name(), topic+"-") && !strings.HasSuffix(e.Name(), "-delete") {
			out = append(out, e.Name())
		}
	}
	return out
}

var errInjected = errors.New("injected open failure")

// TestCreateTopicsFailedHalfwayLeavesNothing: a creation whose sixth
// partition fails to open (as it does past the descriptor limit)
// answers an error and leaves no descriptor, mapping or directory
// behind; the topic is not served, not in topics.json, and a creation
// of the same name afterwards succeeds.
func TestCreateTopicsFailedHalfwayLeavesNothing(t *testing.T) {
	dir := t.TempDir()
	opts := testOptions(dir)
	var fail sync.Map
	broker.SetOpenHook(&opts, func(topic string, i int32) error {
		if _, ok := fail.Load(topic); ok && i == 5 {
			return errInjected
		}
		return nil
	})
	b := startBroker(t, opts)
	c := dialRaw(t, b.Addr())
	c.apiVersions(3)
	fail.Store("half", true)
	before := openFiles(t)
	resp := c.roundTrip(createRequest("half", 10)).(*kmsg.CreateTopicsResponse)
	if code := resp.Topics[0].ErrorCode; code == 0 {
		t.Fatal("CreateTopics with a failing open: no error")
	}
	if after := openFiles(t); after > before {
		t.Errorf("%d descriptors open after the failed creation, %d before", after, before)
	}
	if dirs := partitionDirs(t, dir, "half"); len(dirs) > 0 {
		t.Errorf("the failed creation left directories %v", dirs)
	}
	if b.Partition("half", 0) != nil {
		t.Error("the failed topic is served")
	}
	fail.Delete("half")
	resp = c.roundTrip(createRequest("half", 10)).(*kmsg.CreateTopicsResponse)
	if code := resp.Topics[0].ErrorCode; code != 0 {
		t.Fatalf("CreateTopics after the failed one: error code %d (%v)", code, deref(resp.Topics[0].ErrorMessage))
	}
	if b.Partition("half", 9) == nil {
		t.Fatal("partition 9 not served after the second creation")
	}
	// And the broker's state agrees after a restart.
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	b2 := startBroker(t, testOptions(dir))
	if b2.Partition("half", 9) == nil || b2.Partition("half", 10) != nil {
		t.Fatal("after a restart: not the 10 partitions of the second creation")
	}
}

// TestCreateTopicsPartitionCaps: a CreateTopics asking for more
// partitions than MaxPartitionsPerRequest is refused whole, and a topic
// that would take the broker past MaxPartitions is refused, both with
// POLICY_VIOLATION; nothing of either is created.
func TestCreateTopicsPartitionCaps(t *testing.T) {
	dir := t.TempDir()
	opts := testOptions(dir)
	opts.MaxPartitionsPerRequest, opts.MaxPartitions = 8, 12 // __consumer_offsets holds one
	b := startBroker(t, opts)
	c := dialRaw(t, b.Addr())
	resp := c.roundTrip(createRequest("a", 5, "b", 5)).(*kmsg.CreateTopicsResponse)
	for _, rt := range resp.Topics {
		if rt.ErrorCode != kerr.PolicyViolation.Code {
			t.Errorf("10 partitions in a request, cap 8: %s: error code %d, want POLICY_VIOLATION (%d)", rt.Topic, rt.ErrorCode, kerr.PolicyViolation.Code)
		}
	}
	for _, name := range []string{"c", "d"} {
		resp = c.roundTrip(createRequest(name, 5)).(*kmsg.CreateTopicsResponse)
		if code := resp.Topics[0].ErrorCode; code != 0 {
			t.Fatalf("create %s of 5: error code %d", name, code)
		}
	}
	resp = c.roundTrip(createRequest("e", 2)).(*kmsg.CreateTopicsResponse)
	if code := resp.Topics[0].ErrorCode; code != kerr.PolicyViolation.Code {
		t.Errorf("13 partitions on a broker capped at 12: error code %d, want POLICY_VIOLATION (%d)", code, kerr.PolicyViolation.Code)
	}
	for _, name := range []string{"a", "b", "e"} {
		if dirs := partitionDirs(t, dir, name); len(dirs) > 0 || b.Partition(name, 0) != nil {
			t.Errorf("refused topic %s: directories %v, served %v", name, dirs, b.Partition(name, 0) != nil)
		}
	}
	// A deleted topic's partitions count no more.
	del := kmsg.NewPtrDeleteTopicsRequest()
	del.SetVersion(4)
	del.TopicNames = []string{"c"}
	c.roundTrip(del)
	resp = c.roundTrip(createRequest("e", 2)).(*kmsg.CreateTopicsResponse)
	if code := resp.Topics[0].ErrorCode; code != 0 {
		t.Errorf("create e of 2 after deleting c: error code %d", code)
	}
}

// TestMetadataAnsweredDuringCreate: while a CreateTopics is in its file
// I/O (held there by the open hook), another connection's Metadata and
// CreateTopics are answered: the broker-wide lock is not held across it.
func TestMetadataAnsweredDuringCreate(t *testing.T) {
	opts := testOptions(t.TempDir())
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	broker.SetOpenHook(&opts, func(topic string, i int32) error {
		if topic == "slow" && i == 1 {
			once.Do(func() { close(entered) })
			<-release
		}
		return nil
	})
	b := startBroker(t, opts)
	var releaseOnce sync.Once
	unblock := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(unblock) // before the broker's close, which waits for the creation
	createTopic(t, newClient(t, b.Addr()), "present", 1, nil)
	slow := dialRaw(t, b.Addr())
	creq := createRequest("slow", 4)
	slow.send(creq)
	<-entered
	other := dialRaw(t, b.Addr())
	md := kmsg.NewPtrMetadataRequest()
	md.SetVersion(12)
	mresp := other.roundTrip(md).(*kmsg.MetadataResponse)
	var names []string
	for _, mt := range mresp.Topics {
		names = append(names, deref(mt.Topic))
	}
	if !strings.Contains(strings.Join(names, ","), "present") {
		t.Errorf("Metadata during the creation: topics %v, want present among them", names)
	}
	// The topic under creation is not led yet: a Metadata that would
	// auto-create it is told LEADER_NOT_AVAILABLE (clients retry), and
	// a second creation TOPIC_ALREADY_EXISTS.
	mt := kmsg.NewMetadataRequestTopic()
	mt.Topic = kmsg.StringPtr("slow")
	md.Topics, md.AllowAutoTopicCreation = append(md.Topics, mt), true
	if mresp := other.roundTrip(md).(*kmsg.MetadataResponse); mresp.Topics[0].ErrorCode != kerr.LeaderNotAvailable.Code {
		t.Errorf("Metadata of the topic under creation: error code %d, want LEADER_NOT_AVAILABLE", mresp.Topics[0].ErrorCode)
	}
	if r := other.roundTrip(createRequest("slow", 4)).(*kmsg.CreateTopicsResponse); r.Topics[0].ErrorCode != kerr.TopicAlreadyExists.Code {
		t.Errorf("second creation of the topic under creation: error code %d, want TOPIC_ALREADY_EXISTS", r.Topics[0].ErrorCode)
	}
	cresp := other.roundTrip(createRequest("quick", 1)).(*kmsg.CreateTopicsResponse)
	if code := cresp.Topics[0].ErrorCode; code != 0 {
		t.Errorf("CreateTopics quick during the slow creation: error code %d", code)
	}
	unblock()
	resp, err := slow.recv(creq)
	if err != nil {
		t.Fatal(err)
	}
	if code := resp.(*kmsg.CreateTopicsResponse).Topics[0].ErrorCode; code != 0 {
		t.Fatalf("slow creation: error code %d", code)
	}
	if b.Partition("slow", 3) == nil {
		t.Fatal("slow-3 not served")
	}
}
