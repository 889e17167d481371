package compaction

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"testing"
	"time"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/local"
	"github.com/tierlog/tierlog/record"
)

// TestCleanerBackground runs the background cleaner over a log dir with a
// compacted and a delete-policy partition: the first is cleaned and
// checkpointed, the second is left byte for byte as it was.
func TestCleanerBackground(t *testing.T) {
	dir := t.TempDir()
	c := &clock{t: time.UnixMilli(1_700_000_000_000)}
	b, err := local.OpenBackend(dir, local.BackendOptions{Now: c.now})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	open := func(topic string, kv map[string]string) *local.Log {
		kv["segment.bytes"] = "4096"
		kv["file.delete.delay.ms"] = "0"
		cfg, err := backend.ParseConfig(kv)
		if err != nil {
			t.Fatal(err)
		}
		l, err := b.OpenLog(context.Background(), topic, 0, cfg)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	compacted := open("users", map[string]string{"cleanup.policy": "compact"})
	plain := open("events", map[string]string{"cleanup.policy": "delete", "retention.ms": "-1"})
	rng := rand.New(rand.NewPCG(1, 1))
	written := appendRandom(t, compacted, rng, 400, 20, c, record.None)
	appendRandom(t, plain, rng, 400, 20, c, record.None)
	plainBefore := readAll(t, plain)

	cl, err := NewCleaner(b, CleanerOptions{MemoryBytes: 1 << 20, Backoff: 10 * time.Millisecond, Now: c.now, Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	cl.Start()
	deadline := time.Now().Add(30 * time.Second)
	for cl.Stats().Rounds == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	cl.Stop()
	st := cl.Stats()
	if st.Rounds == 0 || st.Errors != 0 || st.LastLog != "users-0" || st.Removed == 0 {
		t.Fatalf("cleaner stats %+v: want rounds on users-0 that removed records", st)
	}
	checkCleaned(t, readAll(t, compacted), written, st.Last.End)
	if after := readAll(t, plain); len(after) != len(plainBefore) {
		t.Fatalf("the delete-policy partition went from %d to %d records", len(plainBefore), len(after))
	}
	cp, err := local.ReadOffsetCheckpoint(filepath.Join(dir, local.CleanerCheckpoint))
	if err != nil {
		t.Fatal(err)
	}
	if got := cp[local.TopicPartition{Topic: "users", Partition: 0}]; got != st.Last.End {
		t.Fatalf("cleaner-offset-checkpoint holds %d for users-0, the round ended at %d", got, st.Last.End)
	}
	// A new cleaner resumes from the checkpoint: nothing is dirty now.
	cl2, err := NewCleaner(b, CleanerOptions{MemoryBytes: 1 << 20, Now: c.now})
	if err != nil {
		t.Fatal(err)
	}
	if cleaned, err := cl2.RunOnce(context.Background()); err != nil || cleaned {
		t.Fatalf("a second cleaner found work (%v, %v) though the checkpoint covers the log", cleaned, err)
	}
}

// TestCleanKeepsTransactionalBatches: transactional batches and markers
// are copied unchanged, and their keys never hide other records.

// TestCleanerSkipsLogHeldByOpenTransaction: a log whose dirty section
// starts with an open transaction is dirty by its ratio but cleanable by
// nothing; the cleaner tries it once, then leaves it until its log end
// moves, instead of spinning on it.
func TestCleanerSkipsLogHeldByOpenTransaction(t *testing.T) {
	c := &clock{t: time.UnixMilli(1_700_000_000_000)}
	b, err := local.OpenBackend(t.TempDir(), local.BackendOptions{Now: c.now})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	cfg, _ := backend.ParseConfig(map[string]string{"cleanup.policy": "compact", "segment.bytes": "4096", "file.delete.delay.ms": "0"})
	l, err := b.OpenLog(context.Background(), "users", 0, cfg)
	if err != nil {
		t.Fatal(err)
	}
	w := newTxnWriter(l, rand.New(rand.NewPCG(1, 2)), c, 5)
	h := record.NewBatchHeader()
	h.Transactional, h.ProducerID, h.ProducerEpoch, h.BaseSequence = true, 7, 0, 0
	w.b.Reset(h)
	w.b.Append(c.now().UnixMilli(), []byte("k"), []byte("open"), nil)
	batch, _ := w.b.Build()
	w.appendBatch(t, batch) // offset 0: a transaction that stays open
	for range 300 {
		w.written = append(w.written, appendRandom(t, l, w.rng, 1, 5, c, record.None)...)
	}
	if err := l.Roll(); err != nil {
		t.Fatal(err)
	}
	cl, err := NewCleaner(b, CleanerOptions{MemoryBytes: 1 << 20, Now: c.now})
	if err != nil {
		t.Fatal(err)
	}
	if ran, err := cl.RunOnce(context.Background()); !ran || err != nil {
		t.Fatalf("first pass: ran %v, %v", ran, err)
	}
	if ran, _ := cl.RunOnce(context.Background()); ran {
		t.Fatal("the cleaner picked again a log an open transaction holds")
	}
	// The transaction commits: the log end moves and the log is cleaned.
	w.open[7] = nil
	w.end(t, 7, true)
	if err := l.Roll(); err != nil {
		t.Fatal(err)
	}
	if ran, err := cl.RunOnce(context.Background()); !ran || err != nil || cl.Stats().Removed == 0 {
		t.Fatalf("after the commit: ran %v, %v, removed %d", ran, err, cl.Stats().Removed)
	}
}

// TestCleanerMeetsMaxCompactionLag: a log dirty below its
// min.cleanable.dirty.ratio is cleaned when its max.compaction.lag.ms
// passes, though the cleaner's backoff is an hour: an idle thread sleeps
// until the breach it foresaw, not a whole backoff. It is never cleaned
// before.
func TestCleanerMeetsMaxCompactionLag(t *testing.T) {
	b, err := local.OpenBackend(t.TempDir(), local.BackendOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	const lag = 400 * time.Millisecond
	cfg, err := backend.ParseConfig(map[string]string{"cleanup.policy": "compact", "segment.bytes": "4096",
		"file.delete.delay.ms": "0", "min.cleanable.dirty.ratio": "1", "max.compaction.lag.ms": fmt.Sprint(lag.Milliseconds())})
	if err != nil {
		t.Fatal(err)
	}
	l, err := b.OpenLog(context.Background(), "lagged", 0, cfg)
	if err != nil {
		t.Fatal(err)
	}
	c := &clock{t: time.Now()}
	appendRandom(t, l, rand.New(rand.NewPCG(2, 2)), 200, 10, c, record.None)
	l.SetHighWatermark(l.Offsets().LogEnd)
	if len(l.SegmentInfos()) < 3 {
		t.Fatalf("%d segments: the test needs closed dirty ones", len(l.SegmentInfos()))
	}
	cl, err := NewCleaner(b, CleanerOptions{MemoryBytes: 1 << 20, Backoff: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	cl.Start()
	defer cl.Stop()
	due := c.now().Add(lag)
	deadline := time.Now().Add(20 * time.Second) // liveness only: the lag is under a second
	for cl.Stats().Rounds == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("not cleaned %v after its max.compaction.lag.ms passed (backoff 1h)", time.Since(due))
		}
		time.Sleep(5 * time.Millisecond)
	}
	if now := time.Now(); now.Before(due) {
		t.Fatalf("cleaned %v before max.compaction.lag.ms passed", due.Sub(now))
	}
	if st := cl.Stats(); st.Errors != 0 || st.Removed == 0 {
		t.Fatalf("cleaner stats %+v", st)
	}
}
