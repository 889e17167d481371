package tiered_test

import (
	"bytes"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/compaction"
	"github.com/tierlog/tierlog/local"
	"github.com/tierlog/tierlog/manifest"
	"github.com/tierlog/tierlog/objstore"
	"github.com/tierlog/tierlog/objstore/mem"
	"github.com/tierlog/tierlog/record"
	"github.com/tierlog/tierlog/tiered"
)

// txnProducer builds an idempotent (and, with txn, transactional)
// producer's batches, timestamped now, as testing/storagetest's producer
// does.
type txnProducer struct {
	id    int64
	epoch int16
	seq   int32
	txn   bool
	b     record.Builder
}

// batch builds the producer's next batch of n records (not appended).
func (pr *txnProducer) batch(n int) []byte {
	h := record.NewBatchHeader()
	h.ProducerID, h.ProducerEpoch, h.BaseSequence, h.Transactional = pr.id, pr.epoch, pr.seq, pr.txn
	pr.b.Reset(h)
	for i := range n {
		pr.b.Append(time.Now().UnixMilli(), []byte(fmt.Sprintf("k%d", i)), bytes.Repeat([]byte{'p'}, 100), nil)
	}
	out, err := pr.b.Build()
	if err != nil {
		panic(err)
	}
	pr.seq += int32(n)
	return append([]byte(nil), out...)
}

// marker builds the COMMIT or ABORT marker of the producer's transaction.
func (pr *txnProducer) marker(commit bool) []byte {
	out, err := pr.b.BuildEndTxnMarker(record.EndTxnMarker{ProducerID: pr.id, ProducerEpoch: pr.epoch, CoordinatorEpoch: 1, Commit: commit, Timestamp: time.Now().UnixMilli()})
	if err != nil {
		panic(err)
	}
	return append([]byte(nil), out...)
}

// appendAsLeader appends data as the leader of epoch 1 (coordinator: a
// transaction marker).
func appendAsLeader(p backend.Partition, data []byte, coordinator bool) (backend.AppendInfo, error) {
	return p.Append(ctx, append([]byte(nil), data...), backend.AppendOptions{AssignOffsets: true, LeaderEpoch: 1, Coordinator: coordinator})
}

func mustAppendAsLeader(t *testing.T, p backend.Partition, data []byte, coordinator bool) backend.AppendInfo {
	t.Helper()
	info, err := appendAsLeader(p, data, coordinator)
	if err != nil {
		t.Fatalf("append: %v", err)
	}
	return info
}

// committedRead reads from offset to the last stable offset with
// read_committed and returns the aborted transactions reported.
func committedRead(t *testing.T, p backend.Partition, offset int64) []backend.AbortedTxn {
	t.Helper()
	var aborted []backend.AbortedTxn
	for {
		r, err := p.Read(ctx, offset, backend.ReadOptions{Isolation: backend.ReadCommitted, MaxBytes: 1024, MinOneBatch: true})
		if err != nil {
			t.Fatalf("read_committed at %d: %v", offset, err)
		}
		a, ok := r.(backend.Aborted)
		if !ok {
			t.Fatal("a read_committed Records does not implement backend.Aborted")
		}
		aborted = append(aborted, a.AbortedTransactions()...)
		var buf bytes.Buffer
		r.WriteTo(&buf)
		r.Close()
		if buf.Len() == 0 {
			break
		}
		sc := record.NewScanner(bytes.NewReader(buf.Bytes()), 0, int64(buf.Len()), record.ScanOptions{Validate: true})
		for sc.Next() {
			offset = sc.Entry().LastOffset + 1
		}
		if sc.Err() != nil {
			t.Fatalf("read_committed at %d: %v", offset, sc.Err())
		}
	}
	slices.SortFunc(aborted, func(a, b backend.AbortedTxn) int { return int(a.FirstOffset - b.FirstOffset) })
	return slices.Compact(aborted)
}

// TestRestoreKeepsProducerState: a partition restored from the bucket alone
// keeps its producers' state, even a producer whose records remote
// retention removed (Kafka keeps producers across retention, KIP-360): a
// retry of its last batch is a duplicate answered with its original
// offsets, writing nothing; with every transaction decided the last
// stable offset is the high watermark; and a read_committed read reports
// the aborted transaction.
func TestRestoreKeepsProducerState(t *testing.T) {
	store := objstore.New(mem.New(), "mem://restore-producers", objstore.Options{})
	c := cfg(t, "segment.bytes", "2048", "local.retention.ms", "0", "file.delete.delay.ms", "0", "retention.ms", "-1")
	p := open(t, filepath.Join(t.TempDir(), "orders-0"), store, 1, c)
	idem := &txnProducer{id: 1000}
	a := &txnProducer{id: 2000, txn: true}
	b := &txnProducer{id: 3000, txn: true}
	var last []byte
	var lastInfo backend.AppendInfo
	for range 4 {
		last = idem.batch(3)
		lastInfo = mustAppendAsLeader(t, p, last, false)
	}
	if err := p.Roll(); err != nil { // the idempotent producer's records: retention removes them
		t.Fatal(err)
	}
	kept := p.Offsets().LogEnd
	for range 3 {
		mustAppendAsLeader(t, p, a.batch(4), false)
	}
	bFirst := mustAppendAsLeader(t, p, b.batch(2), false).FirstOffset
	mustAppendAsLeader(t, p, a.marker(true), true)
	for range 3 {
		mustAppendAsLeader(t, p, b.batch(3), false)
	}
	mustAppendAsLeader(t, p, b.marker(false), true)
	// Records with no producer after a roll: the segment holding the
	// ABORT marker is not the last, which a recovery would rebuild.
	if err := p.Roll(); err != nil {
		t.Fatal(err)
	}
	produce(t, p, 5)
	if err := p.Roll(); err != nil { // close the last segment too
		t.Fatal(err)
	}
	if err := p.SetHighWatermark(p.Offsets().LogEnd); err != nil {
		t.Fatal(err)
	}
	end := p.Offsets().LogEnd
	if _, err := p.Offload(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.DeleteRecordsBefore(ctx, kept); err != nil {
		t.Fatal(err)
	}
	if n, err := p.ApplyRetention(ctx); err != nil || n == 0 {
		t.Fatalf("retention removed %d segments (%v); want the idempotent producer's", n, err)
	}
	if m := manifestOf(t, p); m.LogStartOffset != kept || m.Segments[0].BaseOffset != kept || m.Segments[len(m.Segments)-1].LastOffset != end-1 {
		t.Fatalf("manifest: log start %d, segments %d..%d; want %d..%d", m.LogStartOffset, m.Segments[0].BaseOffset, m.Segments[len(m.Segments)-1].LastOffset, kept, end-1)
	}
	p.Close()

	// A new broker: the bucket alone.
	for _, open := range []struct {
		name string
		open func(t *testing.T, logDir string) (*local.Log, *manifest.Manifest)
	}{
		// Restore fsyncs every file before it renames the directory into
		// place: the restored segments are durable.
		{"alone, recovery point at the restored end", func(t *testing.T, logDir string) (*local.Log, *manifest.Manifest) {
			dir := filepath.Join(logDir, "orders-0")
			rm, err := tiered.Restore(ctx, store, "tl/orders-0", dir, tiered.RestoreOptions{})
			if err != nil {
				t.Fatal(err)
			}
			l, err := local.Open(dir, local.Options{Config: c, LogStartOffset: rm.LogStartOffset, HighWatermark: -1, RecoveryPoint: end})
			if err != nil {
				t.Fatal(err)
			}
			return l, rm
		}},
		// A broker opening the restored log directory: Restore recorded the
		// partition in its checkpoints, so the Backend trusts the restore
		// (recovering every segment would drop the snapshots holding the
		// producer whose records retention removed).
		{"by a Backend after the restore", func(t *testing.T, logDir string) (*local.Log, *manifest.Manifest) {
			rm, err := tiered.Restore(ctx, store, "tl/orders-0", filepath.Join(logDir, "orders-0"), tiered.RestoreOptions{})
			if err != nil {
				t.Fatal(err)
			}
			b, err := local.OpenBackend(logDir, local.BackendOptions{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { b.Close() })
			l, err := b.OpenLog(ctx, "orders", 0, c)
			if err != nil {
				t.Fatal(err)
			}
			return l, rm
		}},
		// A restore into a log directory a Backend holds (tierctl restore).
		{"through a running Backend", func(t *testing.T, logDir string) (*local.Log, *manifest.Manifest) {
			b, err := local.OpenBackend(logDir, local.BackendOptions{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { b.Close() })
			rm, err := tiered.Restore(ctx, store, "tl/orders-0", filepath.Join(logDir, "orders-0"), tiered.RestoreOptions{Backend: b})
			if err != nil {
				t.Fatal(err)
			}
			l, err := b.OpenLog(ctx, "orders", 0, c)
			if err != nil {
				t.Fatal(err)
			}
			return l, rm
		}},
	} {
		t.Run(open.name, func(t *testing.T) {
			l, rm := open.open(t, t.TempDir())
			defer l.Close()
			if err := l.SetHighWatermark(l.Offsets().LogEnd); err != nil {
				t.Fatal(err)
			}
			if o := l.Offsets(); o.LogStart != kept || o.LogEnd != end || o.LastStableOffset != end {
				t.Fatalf("restored offsets %+v; want the log from %d to %d, the last stable offset at its end (every transaction decided)", o, kept, end)
			}
			info, err := appendAsLeader(l, last, false)
			if err != nil || !info.Duplicate || info.FirstOffset != lastInfo.FirstOffset || info.LastOffset != lastInfo.LastOffset {
				t.Fatalf("retry of the producer's last batch after restore: %+v, %v; want a duplicate at %d..%d", info, err, lastInfo.FirstOffset, lastInfo.LastOffset)
			}
			if l.Offsets().LogEnd != end {
				t.Fatalf("the retry moved the log end from %d to %d", end, l.Offsets().LogEnd)
			}
			gap := *idem
			gap.seq += 5
			if _, err := appendAsLeader(l, gap.batch(1), false); !errors.Is(err, backend.ErrOutOfOrderSequence) {
				t.Fatalf("a gap in the restored producer's sequence: %v; want ErrOutOfOrderSequence", err)
			}
			want := []backend.AbortedTxn{{ProducerID: b.id, FirstOffset: bFirst}}
			if got := committedRead(t, l, rm.LogStartOffset); !slices.Equal(got, want) {
				t.Fatalf("read_committed after restore reports aborted transactions %v, want %v", got, want)
			}
		})
	}
}

// TestOffloadStopsAtLastStableOffset: a closed segment holding a
// transaction still open lies above the last stable offset and is not
// uploaded (the manifest does not name it), even below the high
// watermark; once the COMMIT marker is written it is.
func TestOffloadStopsAtLastStableOffset(t *testing.T) {
	store := objstore.New(mem.New(), "mem://offload-lso", objstore.Options{})
	c := cfg(t, "segment.bytes", "2048", "local.retention.ms", "0", "file.delete.delay.ms", "0")
	p := open(t, filepath.Join(t.TempDir(), "orders-0"), store, 1, c)
	defer p.Close()
	plain := &txnProducer{id: 1000}
	a := &txnProducer{id: 2000, txn: true}
	for range 6 {
		mustAppendAsLeader(t, p, plain.batch(3), false)
	}
	if err := p.Roll(); err != nil {
		t.Fatal(err)
	}
	txnFirst := mustAppendAsLeader(t, p, a.batch(2), false).FirstOffset
	for range 6 {
		mustAppendAsLeader(t, p, plain.batch(3), false)
	}
	if err := p.Roll(); err != nil {
		t.Fatal(err)
	}
	if err := p.SetHighWatermark(p.Offsets().LogEnd); err != nil {
		t.Fatal(err)
	}
	if o := p.Offsets(); o.LastStableOffset != txnFirst {
		t.Fatalf("with a transaction open at %d the last stable offset is %d", txnFirst, o.LastStableOffset)
	}
	if _, err := p.Offload(ctx); err != nil {
		t.Fatal(err)
	}
	m := manifestOf(t, p)
	if len(m.Segments) == 0 {
		t.Fatal("nothing offloaded: the segments wholly below the open transaction should be")
	}
	if lastRemote := m.Segments[len(m.Segments)-1].LastOffset; lastRemote >= txnFirst {
		t.Fatalf("the manifest names offsets to %d, past the open transaction at %d (the last stable offset)", lastRemote, txnFirst)
	}
	if n, _ := p.CopyLag(); n != 0 {
		t.Fatalf("copy lag counts %d segments above the last stable offset", n)
	}

	commit := mustAppendAsLeader(t, p, a.marker(true), true)
	if err := p.Roll(); err != nil {
		t.Fatal(err)
	}
	if err := p.SetHighWatermark(p.Offsets().LogEnd); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Offload(ctx); err != nil {
		t.Fatal(err)
	}
	m = manifestOf(t, p)
	if lastRemote := m.Segments[len(m.Segments)-1].LastOffset; lastRemote < commit.LastOffset {
		t.Fatalf("after the commit the manifest ends at %d, want the segments through the marker at %d", lastRemote, commit.LastOffset)
	}
}

// TestBackendServiceRunsGC: a Backend's service collects the garbage of a
// partition it leads every GCInterval, with no call to GC: an object no
// manifest or intent names, older than the grace, goes; the objects the
// manifest names stay. The first gc of a partition waits one interval
// after the service first sees it (a broker restarting often would
// otherwise list every prefix each time).
func TestBackendServiceRunsGC(t *testing.T) {
	drv := mem.New()
	store := objstore.New(drv, "mem://svc-gc", objstore.Options{})
	const interval = 500 * time.Millisecond
	b := openTieredBackend(t, t.TempDir(), store, tiered.BackendOptions{
		GCInterval: interval, GC: tiered.GCOptions{Grace: time.Nanosecond, Force: true}})
	opened := time.Now() // the service cannot have seen the partition before
	bp, err := b.Open(ctx, "orders", 0, cfg(t, tieredCfg...))
	if err != nil {
		t.Fatal(err)
	}
	p := bp.(*tiered.Partition)
	if err := p.BecomeLeader(ctx, 1); err != nil {
		t.Fatal(err)
	}
	// A crashed upload's object, there before the partition's first
	// manifest: the service's first gc of the partition would find it.
	orphan := "tl/orders-0/" + manifest.Segment{LastOffset: 99, ID: [8]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}}.Name(manifest.LogSuffix)
	if _, err := store.Put(ctx, orphan, bytes.NewReader([]byte("crashed upload")), 14, objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	produce(t, p, 2000)
	eventually(t, 10*time.Second, "the segments were not uploaded", func() bool {
		n, _ := p.CopyLag()
		return n == 0 && p.Head().Generation() > 0
	})
	eventually(t, 10*time.Second, "the service's gc left the orphan", func() bool {
		_, err := store.Head(ctx, orphan)
		return errors.Is(err, objstore.ErrNotFound)
	})
	if waited := time.Since(opened); waited < interval {
		t.Fatalf("the service's first gc of the partition ran %v after it opened, before one GCInterval (%v)", waited, interval)
	}
	if missing := missingObjects(t, store, manifestOf(t, p)); len(missing) > 0 {
		t.Fatalf("gc removed %v, which the manifest names", missing)
	}
}

// TestBackendServiceAppliesRemoteRetention: a Backend's service applies
// remote retention to the partitions it leads, with no call to
// ApplyRetention: retention.ms removes every segment older than it (the
// records are stamped in 2023), retention.bytes the oldest beyond the
// bound; the manifest drops them first, then their objects go.
func TestBackendServiceAppliesRemoteRetention(t *testing.T) {
	drv := mem.New()
	store := objstore.New(drv, "mem://svc-retention", objstore.Options{})
	b := openTieredBackend(t, t.TempDir(), store, tiered.BackendOptions{})
	byMs := cfg(t, slices.Concat(tieredCfg, []string{"retention.ms", "86400000"})...)
	byBytes := cfg(t, slices.Concat(tieredCfg, []string{"retention.bytes", "200000"})...)
	var parts []*tiered.Partition
	for i, c := range []backend.Config{byMs, byBytes} {
		bp, err := b.Open(ctx, "orders", int32(i), c)
		if err != nil {
			t.Fatal(err)
		}
		p := bp.(*tiered.Partition)
		if err := p.BecomeLeader(ctx, 1); err != nil {
			t.Fatal(err)
		}
		parts = append(parts, p)
	}
	var uploaded [2][]manifest.Segment
	// Watch what is uploaded while retention runs: the manifest names
	// segments only between their upload and their retention.
	for i, p := range parts {
		produce(t, p, 4000)
		seen := map[int64]manifest.Segment{}
		eventually(t, 10*time.Second, fmt.Sprintf("partition %d: retention did not catch up", i), func() bool {
			for _, s := range manifestOf(t, p).Segments {
				seen[s.BaseOffset] = s
			}
			n, _ := p.CopyLag()
			m := manifestOf(t, p)
			switch i {
			case 0:
				return n == 0 && m.Generation > 0 && len(m.Segments) == 0 && m.LogStartOffset > 0
			default:
				return n == 0 && m.Generation > 0 && m.LogStartOffset > 0 && m.Size() <= 200000
			}
		})
		for _, s := range seen {
			uploaded[i] = append(uploaded[i], s)
		}
	}
	if m := manifestOf(t, parts[1]); len(m.Segments) == 0 {
		t.Fatal("retention.bytes removed every segment")
	}
	for i, p := range parts {
		m := manifestOf(t, p)
		if p.Offsets().LogStart != m.LogStartOffset {
			t.Fatalf("partition %d: the log start %d is not the manifest's %d", i, p.Offsets().LogStart, m.LogStartOffset)
		}
		for _, s := range uploaded[i] {
			if s.LastOffset >= m.LogStartOffset {
				continue
			}
			eventually(t, 10*time.Second, fmt.Sprintf("partition %d: the objects of a retired segment are still there", i), func() bool {
				_, err := store.Head(ctx, fmt.Sprintf("tl/orders-%d/%s", i, s.Name(manifest.LogSuffix)))
				return errors.Is(err, objstore.ErrNotFound)
			})
		}
	}
}

// TestUploadOfALogCleanedBeforeItWasTiered: a compacted topic cleaned on
// disk, then set to cleanup.policy=delete and tiered, has segments with
// gaps where the cleaner removed batches. They upload and read back as
// they are: the gaps are the cleaner's, not damage.
func TestUploadOfALogCleanedBeforeItWasTiered(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "users-0")
	l, err := local.Open(dir, local.Options{Config: cfg(t, "cleanup.policy", "compact", "segment.bytes", "1024"), LogStartOffset: -1, HighWatermark: -1})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 40 {
		appendKV(t, l, -1, kvPair{k: fmt.Sprintf("k%d", i%3), v: bytes.Repeat([]byte{'v'}, 100)})
	}
	if err := l.SetHighWatermark(l.Offsets().LogEnd); err != nil {
		t.Fatal(err)
	}
	if err := l.Roll(); err != nil {
		t.Fatal(err)
	}
	st, err := compaction.Clean(ctx, l, -1, compaction.Options{})
	if err != nil || st.RecordsRemoved == 0 {
		t.Fatalf("the local cleaner: %+v, %v", st, err)
	}
	want := batchesFrom(t, l, 0)
	if err := l.SetConfig(cfg(t, "cleanup.policy", "delete", "segment.bytes", "1024", "local.retention.ms", "0", "file.delete.delay.ms", "0")); err != nil {
		t.Fatal(err)
	}
	store := objstore.New(mem.New(), "mem://cleaned-then-tiered", objstore.Options{})
	p, err := tiered.Open(ctx, l, tiered.Options{Store: store, Prefix: "tl/users-0", LeaderEpoch: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if n, err := p.Offload(ctx); err != nil || n == 0 {
		t.Fatalf("offload of a log cleaned before it was tiered: %d segments, %v", n, err)
	}
	if _, err := p.ApplyRetention(ctx); err != nil {
		t.Fatal(err)
	}
	if o := p.Offsets(); o.LocalLogStart < l.Offsets().LogEnd-1 {
		t.Fatalf("closed segments still on disk after local retention: %+v", o)
	}
	checkBatches(t, "read back from the bucket", batchesFrom(t, p, 0), want)
}
