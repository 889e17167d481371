package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tierlog/tierlog/manifest"
)

// rollbackFlags make every auto-created topic tiered, its closed segments
// leaving the disk once the bucket holds them, with the service's turns
// short.
func rollbackFlags(bucket string) []string {
	return []string{"--store", "file://" + bucket, "--config", "remote.storage.enable=true", "--config", "local.retention.ms=0",
		"--config", "segment.bytes=65536", "--config", "file.delete.delay.ms=0",
		"--broker-config", "remote.log.manager.task.interval.ms=100", "--broker-config", "remote.log.manager.task.retry.backoff.ms=20",
		"--broker-config", "remote.log.manager.task.retry.backoff.max.ms=200"}
}

// produceRange produces values v-from..v-(to-1) to topic, each
// acknowledged by all replicas.
func produceRange(t *testing.T, addr, topic string, from, to int) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.AllowAutoTopicCreation(), kgo.DefaultProduceTopic(topic),
		kgo.RequiredAcks(kgo.AllISRAcks()), kgo.RecordDeliveryTimeout(30*time.Second),
		kgo.ProducerBatchCompression(kgo.NoCompression()), kgo.ProducerBatchMaxBytes(16<<10))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var recs []*kgo.Record
	for i := from; i < to; i++ {
		recs = append(recs, &kgo.Record{Value: fmt.Appendf(nil, "v-%d-%s", i, strings.Repeat("x", 200))})
	}
	if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatalf("produce %d..%d: %v", from, to-1, err)
	}
}

// earliest asks the broker for the partition's earliest offset: the
// offset, or the error code that came instead.
func earliest(t *testing.T, addr, topic string) (int64, int16) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	req := kmsg.NewPtrListOffsetsRequest()
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewListOffsetsRequestTopicPartition()
	rp.Partition, rp.Timestamp = 0, -2
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(context.Background(), cl)
	if err != nil {
		t.Fatal(err)
	}
	p := resp.Topics[0].Partitions[0]
	return p.Offset, p.ErrorCode
}

// readManifestFile decodes the manifest object of a file:// bucket.
func readManifestFile(t *testing.T, path string) (*manifest.Manifest, []byte) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil
	}
	m, err := manifest.DecodeLayered(data, func(part manifest.Part) ([]manifest.Segment, error) {
		b, err := os.ReadFile(filepath.Join(filepath.Dir(path), part.Name()))
		if err != nil {
			return nil, err
		}
		return manifest.DecodePart(part, b)
	})
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return m, data
}

// filesUnder lists the regular files under root with their sizes, by
// path; only names ending in suffix when it is set.
func filesUnder(t *testing.T, root, suffix string) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) {
			return nil // removed while listed (a running broker's retention)
		}
		if err != nil || d.IsDir() || !strings.HasSuffix(path, suffix) {
			return err
		}
		info, err := d.Info()
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		out[path] = info.Size()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// stopBroker sends SIGTERM and waits for a clean exit.
func stopBroker(t *testing.T, p *brokerProc) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.done:
	case <-time.After(time.Minute):
		t.Fatal("the broker did not exit within a minute of SIGTERM")
	}
	if p.err != nil {
		t.Fatalf("the broker exited with %v\n%s", p.err, p.stderr.String())
	}
}

// offloadThenRollBack runs the broker on dir over bucket: 2,000 records
// offloaded (the manifest's bytes kept), 6,000 more offloaded and their
// older local segments removed; it stops the broker and puts the older
// manifest back. It returns the older manifest and the last one before
// the stop.
func offloadThenRollBack(t *testing.T, bin, dir, bucket, topic string) (oldM, newM *manifest.Manifest) {
	t.Helper()
	manifestPath := filepath.Join(bucket, topic+"-0", "manifest")
	p := startBrokerProc(t, bin, dir, rollbackFlags(bucket)...)
	produceRange(t, p.addr, topic, 0, 2000)
	var old []byte
	deadline := time.Now().Add(2 * time.Minute)
	for {
		if m, data := readManifestFile(t, manifestPath); m != nil && len(m.Segments) > 0 && m.Segments[len(m.Segments)-1].LastOffset > 1000 {
			oldM, old = m, data
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 2m nothing of the first 2,000 records is offloaded\n%s", p.stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	oldEnd := oldM.Segments[len(oldM.Segments)-1].LastOffset
	produceRange(t, p.addr, topic, 2000, 8000)
	partDir := filepath.Join(dir, "logs", topic+"-0")
	for deadline = time.Now().Add(2 * time.Minute); ; {
		m, _ := readManifestFile(t, manifestPath)
		first := int64(-1)
		for path := range filesUnder(t, partDir, ".log") {
			var base int64
			fmt.Sscanf(filepath.Base(path), "%d.log", &base)
			if first < 0 || base < first {
				first = base
			}
		}
		if m != nil && m.Segments[len(m.Segments)-1].LastOffset > 7000 && first > oldEnd+1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 2m the later records are not offloaded and removed locally (first local segment %d)\n%s", first, p.stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	stopBroker(t, p)
	newM, _ = readManifestFile(t, manifestPath) // the last commit before the stop
	if err := os.WriteFile(manifestPath, old, 0o644); err != nil {
		t.Fatal(err)
	}
	return oldM, newM
}

// TestRolledBackBucket runs the broker binary over a file:// bucket whose
// manifest goes back in time between two runs (offloadThenRollBack: a
// restored bucket backup). Started again, the broker must not take the
// older manifest for the partition's: the partition is offline with
// KAFKA_STORAGE_ERROR and a log line naming both generations, and neither
// the bucket nor the partition directory loses a file. (Before the fix it
// adopted the older manifest, moved the log start past 7,000 and deleted
// the older manifest's objects.)
func TestRolledBackBucket(t *testing.T) {
	bin, dir, bucket := buildBroker(t), t.TempDir(), t.TempDir()
	const topic = "rollback"
	oldM, newM := offloadThenRollBack(t, bin, dir, bucket, topic)
	partDir := filepath.Join(dir, "logs", topic+"-0")
	objects, logs := filesUnder(t, bucket, ""), filesUnder(t, partDir, ".log")

	p := startBrokerProc(t, bin, dir, rollbackFlags(bucket)...)
	refused := false
	for deadline := time.Now().Add(time.Minute); !refused; {
		off, code := earliest(t, p.addr, topic)
		switch {
		case code == 0 && off > 0:
			t.Fatalf("after the rollback and a restart the earliest offset is %d: offsets 0..%d are lost", off, off-1)
		case code != 0 && code != kerr.KafkaStorageError.Code:
			t.Fatalf("ListOffsets after the rollback: error %v, want KAFKA_STORAGE_ERROR", kerr.ErrorForCode(code))
		}
		refused = code == kerr.KafkaStorageError.Code && strings.Contains(p.stderr.String(), "refused the bucket's manifest")
		if time.Now().After(deadline) {
			t.Fatalf("after 1m the broker neither refused the older manifest nor lost records (earliest %d, code %d)\n%s", off, code, p.stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	line := ""
	for l := range strings.Lines(p.stderr.String()) {
		if strings.Contains(l, "refused the bucket's manifest") {
			line = l
		}
	}
	if !strings.Contains(line, fmt.Sprintf("generation=%d", oldM.Generation)) || !strings.Contains(line, fmt.Sprintf("recorded_generation=%d", newM.Generation)) {
		t.Errorf("the refusal's log line does not name generations %d and %d:\n%s", oldM.Generation, newM.Generation, line)
	}
	// Time for the service's turns (retention, uploads) to do harm.
	time.Sleep(time.Second)
	stopBroker(t, p)
	for path, size := range objects {
		if now, ok := filesUnder(t, bucket, "")[path]; !ok || now != size {
			t.Errorf("the bucket lost or changed %s after the rollback", path)
		}
	}
	for path, size := range logs {
		if now, ok := filesUnder(t, partDir, ".log")[path]; !ok || now < size {
			t.Errorf("the partition directory lost or cut %s after the rollback", path)
		}
	}

	// tierctl verify, given the log directory and the bucket, says so.
	tierctl := filepath.Join(t.TempDir(), "tierctl")
	if out, err := exec.Command("go", "build", "-o", tierctl, "../../cmd/tierctl").CombinedOutput(); err != nil {
		t.Fatalf("go build tierctl: %v\n%s", err, out)
	}
	out, err := exec.Command(tierctl, "verify", filepath.Join(dir, "logs"), "--store", "file://"+bucket).CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(string(out), "went back in time") {
		t.Fatalf("tierctl verify over the rolled back bucket: %v, want exit 1 naming the refusal\n%s", err, out)
	}
}
