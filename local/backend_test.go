package local_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/local"
	"github.com/tierlog/tierlog/testing/faultfs"
	"github.com/tierlog/tierlog/vfs"
)

func TestBackendCheckpointsAndCleanShutdown(t *testing.T) {
	dir := t.TempDir()
	b, err := local.OpenBackend(dir, local.BackendOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := local.OpenBackend(dir, local.BackendOptions{}); err == nil {
		t.Fatal("a second backend opened a locked log dir")
	}
	p, err := b.Open(ctx, "orders", 3, cfg(t))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5; i++ {
		if _, err := p.Append(ctx, batchOf(4, 1, "x"), backend.AppendOptions{AssignOffsets: true}); err != nil {
			t.Fatal(err)
		}
	}
	p.SetHighWatermark(12)
	for _, bad := range []struct {
		topic string
		part  int32
	}{{"../etc", 0}, {"", 0}, {"ok", -1}, {string(make([]byte, 300)), 0}, {"a/b", 0}} {
		if _, err := b.Open(ctx, bad.topic, bad.part, cfg(t)); !errors.Is(err, backend.ErrInvalidName) {
			t.Errorf("Open(%q, %d): %v", bad.topic, bad.part, err)
		}
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Append(ctx, batchOf(1, 1, "x"), backend.AppendOptions{AssignOffsets: true}); !errors.Is(err, backend.ErrClosed) {
		t.Fatalf("append after close: %v", err)
	}
	for name, want := range map[string]string{
		local.RecoveryPointCheckpoint: "0\n1\norders 3 20\n",
		local.ReplicationCheckpoint:   "0\n1\norders 3 12\n",
		local.LogStartCheckpoint:      "0\n1\norders 3 0\n",
		local.CleanShutdownFile:       `{"version":0,"brokerEpoch":-1}`,
	} {
		got, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil || string(got) != want {
			t.Errorf("%s = %q (%v), want %q", name, got, err, want)
		}
	}
	got, _ := os.ReadFile(filepath.Join(dir, "orders-3", local.LeaderEpochCheckpoint))
	if string(got) != "0\n1\n0 0\n" {
		t.Errorf("leader-epoch-checkpoint = %q", got)
	}
	// Reopen: clean, offsets restored, the marker consumed.
	b, err = local.OpenBackend(dir, local.BackendOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if _, err := os.Stat(filepath.Join(dir, local.CleanShutdownFile)); !os.IsNotExist(err) {
		t.Fatal("clean shutdown marker not removed on open")
	}
	parts, _ := b.Partitions(ctx)
	if len(parts) != 1 || parts[0] != (local.TopicPartition{Topic: "orders", Partition: 3}) {
		t.Fatalf("partitions %v", parts)
	}
	p, err = b.Open(ctx, "orders", 3, cfg(t))
	if err != nil {
		t.Fatal(err)
	}
	if o := p.Offsets(); o.LogEnd != 20 || o.HighWatermark != 12 {
		t.Fatalf("offsets after reopen %+v", o)
	}
	if err := b.Delete(ctx, "orders", 3); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "orders-3")); !os.IsNotExist(err) {
		t.Fatal("partition directory survived Delete")
	}
	if err := b.Delete(ctx, "orders", 3); !errors.Is(err, backend.ErrNotFound) {
		t.Fatalf("second delete: %v", err)
	}
}

// TestBackendOpenAppliesConfig: opening an open partition with another
// config returns the same log, now with that config (the contract:
// a topic config change applies to the open log).
func TestBackendOpenAppliesConfig(t *testing.T) {
	b, err := local.OpenBackend(t.TempDir(), local.BackendOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	first, err := b.OpenLog(ctx, "orders", 0, cfg(t, "retention.ms", "1000"))
	if err != nil {
		t.Fatal(err)
	}
	again, err := b.OpenLog(ctx, "orders", 0, cfg(t, "retention.ms", "5000", "max.message.bytes", "100"))
	if err != nil {
		t.Fatal(err)
	}
	if again != first {
		t.Fatal("a second Open returned another log")
	}
	if c := first.Config(); c.RetentionMs != 5000 || c.MaxMessageBytes != 100 {
		t.Fatalf("config after the second Open: retention.ms %d, max.message.bytes %d", c.RetentionMs, c.MaxMessageBytes)
	}
	if _, err := first.Append(ctx, batchOf(3, 0, "x"), backend.AppendOptions{AssignOffsets: true}); !errors.Is(err, backend.ErrRecordTooLarge) {
		t.Fatalf("append above the new max.message.bytes: %v", err)
	}
	if _, err := b.OpenLog(ctx, "orders", 0, backend.Config{SegmentBytes: -1}); !errors.Is(err, backend.ErrInvalidConfig) {
		t.Fatalf("a bad config for an open log: %v", err)
	}
}

// A tiered topic's time and size retention belong to the tiered layer,
// which deletes a local segment only once the bucket holds it: the local
// log applies just the log start rule, and a directory without a tiered
// layer refuses such a topic (nothing would ever apply its retention).
func TestTieredTopicRetentionIsNotLocal(t *testing.T) {
	dir := t.TempDir()
	b, err := local.OpenBackend(dir, local.BackendOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tiered := cfg(t, "remote.storage.enable", "true", "retention.ms", "0", "retention.bytes", "1", "segment.bytes", "1024")
	if _, err := b.Open(ctx, "orders", 0, tiered); !errors.Is(err, backend.ErrInvalidConfig) {
		t.Fatalf("remote.storage.enable=true in a directory without tiered storage: %v", err)
	}
	b.Close()
	b, err = local.OpenBackend(dir, local.BackendOptions{RemoteStorage: true})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	l, err := b.OpenLog(ctx, "orders", 0, tiered)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 20; i++ {
		if _, err := l.Append(ctx, batchOf(4, 1, "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"), backend.AppendOptions{AssignOffsets: true}); err != nil {
			t.Fatal(err)
		}
	}
	l.SetHighWatermark(l.Offsets().LogEnd)
	before := len(l.SegmentInfos())
	if before < 3 {
		t.Fatalf("want several segments, have %d", before)
	}
	if n, err := l.DeleteOldSegments(); err != nil || n != 0 {
		t.Fatalf("DeleteOldSegments on a tiered log deleted %d segments (%v): they may not be in the bucket", n, err)
	}
	// The log start rule still applies.
	second := l.SegmentInfos()[1].BaseOffset
	if err := l.DeleteRecordsBefore(ctx, second); err != nil {
		t.Fatal(err)
	}
	if n, err := l.DeleteOldSegments(); err != nil || len(l.SegmentInfos()) != before-1 {
		t.Fatalf("after DeleteRecordsBefore(%d): deleted %d (%v), %d segments left of %d", second, n, err, len(l.SegmentInfos()), before)
	}
}

// TestTruncateToCheckpoints: a Backend's log writes the checkpoints before
// TruncateTo returns, so recovery-point-offset-checkpoint never names a
// point past the truncated log end while records are appended again (a
// crash would make recovery trust them on the old point's word).
func TestTruncateToCheckpoints(t *testing.T) {
	dir := t.TempDir()
	b, err := local.OpenBackend(dir, local.BackendOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	l, err := b.OpenLog(ctx, "t", 0, cfg(t, "segment.bytes", "2000"))
	if err != nil {
		t.Fatal(err)
	}
	for range 40 {
		if _, err := l.Append(ctx, batchOf(3, 0, "a"), backend.AppendOptions{AssignOffsets: true}); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := b.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	tp := local.TopicPartition{Topic: "t", Partition: 0}
	read := func() int64 {
		cp, err := local.ReadOffsetCheckpoint(filepath.Join(dir, local.RecoveryPointCheckpoint))
		if err != nil {
			t.Fatal(err)
		}
		return cp[tp]
	}
	if got := read(); got != 120 {
		t.Fatalf("recovery point checkpoint %d after a flush, want 120", got)
	}
	if err := l.TruncateTo(30); err != nil {
		t.Fatal(err)
	}
	if got := read(); got > 30 {
		t.Fatalf("recovery point checkpoint %d after TruncateTo(30)", got)
	}
}

// TestTruncateToCheckpointFailureFailsTheLog: when the checkpoints a
// Backend's TruncateTo writes cannot be written, the log refuses writes
// until it is reopened (a retry would find nothing to cut, and appends
// would resume over the old recovery point).
func TestTruncateToCheckpointFailureFailsTheLog(t *testing.T) {
	ffs := faultfs.New(vfs.Default)
	b, err := local.OpenBackend(t.TempDir(), local.BackendOptions{FS: ffs})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	l, err := b.OpenLog(ctx, "t", 0, cfg(t))
	if err != nil {
		t.Fatal(err)
	}
	for range 10 {
		if _, err := l.Append(ctx, batchOf(3, 0, "a"), backend.AppendOptions{AssignOffsets: true}); err != nil {
			t.Fatal(err)
		}
	}
	ffs.SetHook(faultfs.FailAll(faultfs.OpRename, func(p string) bool { return strings.Contains(p, local.RecoveryPointCheckpoint) }, syscall.EIO))
	err = l.TruncateTo(15)
	ffs.SetHook(nil)
	if !errors.Is(err, backend.ErrStorage) {
		t.Fatalf("TruncateTo whose checkpoint cannot be written: %v; want ErrStorage", err)
	}
	if _, err := l.Append(ctx, batchOf(3, 0, "b"), backend.AppendOptions{AssignOffsets: true}); !errors.Is(err, backend.ErrStorage) {
		t.Fatalf("append after it: %v; want the log failed", err)
	}
}

// A diskless topic's appends are durable only in a bucket: a directory
// without a tiered layer refuses one, naming the key, and an open log
// refuses becoming diskless or ceasing to be.
func TestDisklessTopicNeedsABucket(t *testing.T) {
	b, err := local.OpenBackend(t.TempDir(), local.BackendOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	_, err = b.Open(ctx, "events", 0, cfg(t, "diskless.enable", "true"))
	var ce *backend.ConfigError
	if !errors.As(err, &ce) || ce.Key != "diskless.enable" {
		t.Fatalf("diskless.enable=true in a directory without tiered storage: %v", err)
	}
	l, err := b.OpenLog(ctx, "events", 0, cfg(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.SetConfig(cfg(t, "diskless.enable", "true")); !errors.As(err, &ce) || ce.Key != "diskless.enable" {
		t.Fatalf("a classic log made diskless: %v", err)
	}
}
