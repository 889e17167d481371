package tiered_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/local"
	"github.com/tierlog/tierlog/manifest"
	"github.com/tierlog/tierlog/objstore"
	"github.com/tierlog/tierlog/objstore/mem"
	"github.com/tierlog/tierlog/record"
	"github.com/tierlog/tierlog/testing/faultstore"
	"github.com/tierlog/tierlog/tiered"
)

// closedSegments produces n records into a fresh partition in small
// segments and closes the last one, so every segment can be offloaded.
func closedSegments(t *testing.T, dir string, store *objstore.Store, c backend.Config, n int) *tiered.Partition {
	t.Helper()
	p := open(t, dir, store, 1, c)
	produce(t, p, n)
	if err := p.Roll(); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestOffloadRefusesDamagedSegment: a closed segment with four flipped
// bytes inside a batch is not uploaded, so local retention never deletes
// the good copy's last trace; the error names the file and the position.
func TestOffloadRefusesDamagedSegment(t *testing.T) {
	store := objstore.New(mem.New(), "mem://damaged", objstore.Options{})
	dir := filepath.Join(t.TempDir(), "orders-0")
	c := cfg(t, "segment.bytes", "65536", "local.retention.ms", "0", "file.delete.delay.ms", "0")
	p := closedSegments(t, dir, store, c, 2000)
	segs := p.LocalSegments()
	victim := segs[1]
	f, err := os.OpenFile(victim.Path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte{0xde, 0xad, 0xbe, 0xef}, victim.Size/2); err != nil {
		t.Fatal(err)
	}
	f.Close()
	n, err := p.Offload(ctx)
	if !errors.Is(err, backend.ErrCorruptRecord) || !strings.Contains(err.Error(), victim.Path) {
		t.Fatalf("offload of a damaged segment: %d uploaded, err %v; want ErrCorruptRecord naming %s", n, err, victim.Path)
	}
	if n != 1 || p.Metrics().UploadsRefused.Load() != 1 {
		t.Fatalf("uploaded %d (want the 1 segment before the damaged one), refused %d", n, p.Metrics().UploadsRefused.Load())
	}
	for _, s := range manifestOf(t, p).Segments {
		if s.BaseOffset >= victim.BaseOffset {
			t.Fatalf("the manifest names segment %d, at or after the damaged one", s.BaseOffset)
		}
	}
	if _, err := os.Stat(victim.Path); err != nil {
		t.Fatalf("the damaged segment's local copy is gone: %v", err)
	}
	p.Close()
}

// TestLocalRetentionKeepsDivergedSegments: a second writer whose local log
// holds other bytes under the same offsets (same epoch) runs offload: it
// uploads nothing over the bucket's segments, and local retention keeps
// every local segment, because none is the bucket's copy.
func TestLocalRetentionKeepsDivergedSegments(t *testing.T) {
	store := objstore.New(mem.New(), "mem://diverged", objstore.Options{})
	c := cfg(t, "segment.bytes", "65536", "local.retention.ms", "0", "file.delete.delay.ms", "0")
	a := closedSegments(t, filepath.Join(t.TempDir(), "orders-0"), store, c, 2000)
	if _, err := a.Offload(ctx); err != nil {
		t.Fatal(err)
	}
	a.Close()

	// The second writer: the same offsets, other values.
	dir := filepath.Join(t.TempDir(), "orders-0")
	l, err := local.Open(dir, local.Options{Config: c, LogStartOffset: -1, HighWatermark: -1})
	if err != nil {
		t.Fatal(err)
	}
	b, err := tiered.Open(ctx, l, tiered.Options{Store: store, Prefix: "tl/orders-0", LeaderEpoch: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	produceValue(t, b, 2000, "w")
	if err := b.Roll(); err != nil {
		t.Fatal(err)
	}
	before := len(b.LocalSegments())
	want := batchesFrom(t, tiered.LocalOf(b), 0)
	n, err := b.Offload(ctx)
	if !errors.Is(err, tiered.ErrDiverged) {
		t.Fatalf("offload over a diverged bucket: %d uploaded, err %v; want ErrDiverged", n, err)
	}
	if got := len(b.LocalSegments()); got != before || b.Metrics().LocalDeletesRefused.Load() == 0 {
		t.Fatalf("local retention deleted %d of the second writer's %d segments", before-got, before)
	}
	got := batchesFrom(t, tiered.LocalOf(b), 0)
	for last, data := range want {
		if !bytes.Equal(got[last], data) {
			t.Fatalf("the second writer's batch ending at %d changed", last)
		}
	}
}

// TestGCDuringUpload: gc with no grace at all (forced) runs while an
// offload has uploaded its objects and not yet committed them; the intent
// protects them, the commit names objects that exist, and every record
// reads back from the bucket after local retention.
func TestGCDuringUpload(t *testing.T) {
	var gcRan bool
	drv := faultstore.Wrap(mem.New(), 0)
	store := objstore.New(drv, "mem://gc-race", objstore.Options{})
	c := cfg(t, "segment.bytes", "65536", "local.retention.ms", "0", "file.delete.delay.ms", "0")
	p := closedSegments(t, filepath.Join(t.TempDir(), "orders-0"), store, c, 2000)
	defer p.Close()
	want := batchesFrom(t, p, 0)
	// gc runs before the next manifest put reaches the bucket.
	drv.Add(faultstore.Rule{Op: objstore.OpPut, KeySuffix: "/manifest", Nth: 1, Fault: faultstore.Hook, Hook: func(objstore.Op, string) {
		gcRan = true
		gone, err := tiered.GC(ctx, store, "tl/orders-0", tiered.GCOptions{Grace: time.Nanosecond, Force: true, NoManifestOK: true})
		if err != nil {
			t.Errorf("gc: %v", err)
		}
		for _, k := range gone {
			if !strings.HasSuffix(k, tiered.IntentSuffix) {
				t.Errorf("gc removed %s, which a commit in flight names", k)
			}
		}
	}})
	if _, err := p.Offload(ctx); err != nil {
		t.Fatal(err)
	}
	if !gcRan {
		t.Fatal("gc never ran during the offload")
	}
	for _, s := range manifestOf(t, p).Segments {
		for _, suf := range []string{manifest.LogSuffix, manifest.IndexSuffix, manifest.TimeIndexSuffix} {
			if _, err := store.Head(ctx, "tl/orders-0/"+s.Name(suf)); err != nil {
				t.Fatalf("the manifest names %s, which is gone: %v", s.Name(suf), err)
			}
		}
	}
	got := batchesFrom(t, p, 0)
	if len(got) != len(want) {
		t.Fatalf("read back %d batches, want %d", len(got), len(want))
	}
	// After the commit the intents are gone or dead; gc removes nothing
	// the manifest names.
	if _, err := tiered.GC(ctx, store, "tl/orders-0", tiered.GCOptions{Grace: time.Nanosecond, Force: true}); err != nil {
		t.Fatal(err)
	}
	if got := batchesFrom(t, p, 0); len(got) != len(want) {
		t.Fatalf("after gc: read back %d batches, want %d", len(got), len(want))
	}
}

// TestGCRefusals: no manifest under the prefix, a grace below the floor.
func TestGCRefusals(t *testing.T) {
	store := objstore.New(mem.New(), "mem://gc", objstore.Options{})
	store.Put(ctx, "typo/orders-0/00000000000000000000-00000000000000000009-0123456789abcdef.log", strings.NewReader("x"), 1, objstore.PutOptions{})
	if _, err := tiered.GC(ctx, store, "typo/orders-0", tiered.GCOptions{}); !errors.Is(err, tiered.ErrNoManifest) {
		t.Fatalf("gc of a prefix with no manifest: %v", err)
	}
	if _, err := tiered.GC(ctx, store, "typo/orders-0", tiered.GCOptions{Grace: time.Minute, NoManifestOK: true}); err == nil {
		t.Fatal("gc with a grace below the floor and no Force ran")
	}
	if _, err := tiered.GC(ctx, store, "typo/orders-0", tiered.GCOptions{Grace: -time.Hour, Force: true, NoManifestOK: true}); err == nil {
		t.Fatal("gc with a negative grace ran")
	}
}

// TestMissingManifestIsAnError: a partition whose checkpoint says its log
// starts below its local files (it was offloaded) and whose bucket prefix
// holds no manifest (a typo in the URL) does not open as a partition that
// simply begins at its local start.
func TestMissingManifestIsAnError(t *testing.T) {
	store := objstore.New(mem.New(), "mem://missing", objstore.Options{})
	c := cfg(t, "segment.bytes", "65536", "local.retention.ms", "0", "file.delete.delay.ms", "0")
	logs := t.TempDir()
	b, err := local.OpenBackend(logs, local.BackendOptions{})
	if err != nil {
		t.Fatal(err)
	}
	l, err := b.OpenLog(ctx, "orders", 0, c)
	if err != nil {
		t.Fatal(err)
	}
	p, err := tiered.Open(ctx, l, tiered.Options{Store: store, Prefix: "tl/orders-0", LeaderEpoch: 1})
	if err != nil {
		t.Fatal(err)
	}
	produce(t, p, 2000)
	p.Roll()
	if _, err := p.Offload(ctx); err != nil {
		t.Fatal(err)
	}
	if p.Offsets().LocalLogStart == 0 {
		t.Fatal("local retention deleted nothing: the test proves nothing")
	}
	if err := b.Close(); err != nil { // checkpoints the partition's log start: 0
		t.Fatal(err)
	}
	starts, err := local.ReadOffsetCheckpoint(filepath.Join(logs, local.LogStartCheckpoint))
	if err != nil || starts[local.TopicPartition{Topic: "orders", Partition: 0}] != 0 {
		t.Fatalf("log-start-offset-checkpoint holds %v (%v), want the partition's log start 0", starts, err)
	}
	b, err = local.OpenBackend(logs, local.BackendOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	l, err = b.OpenLog(ctx, "orders", 0, c)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tiered.Open(ctx, l, tiered.Options{Store: store, Prefix: "typo/orders-0", LeaderEpoch: 1}); !errors.Is(err, tiered.ErrNoManifest) {
		t.Fatalf("open with a prefix that holds no manifest: %v; want ErrNoManifest", err)
	}
	p, err = tiered.Open(ctx, l, tiered.Options{Store: store, Prefix: "tl/orders-0", LeaderEpoch: 1})
	if err != nil {
		t.Fatal(err)
	}
	if o := p.Offsets(); o.LogStart != 0 {
		t.Fatalf("log start %d through the right prefix, want 0", o.LogStart)
	}
}

// TestRemoteBatchWithChangedBaseOffset: a batch in the bucket whose base
// offset (outside its CRC) changed after upload is reported, naming the
// object, by the reads that reach it; never served as duplicated or
// missing offsets.
func TestRemoteBatchWithChangedBaseOffset(t *testing.T) {
	for _, delta := range []int64{-3, 3} {
		store := objstore.New(mem.New(), "mem://moved", objstore.Options{})
		dir := filepath.Join(t.TempDir(), "orders-0")
		c := cfg(t, "segment.bytes", "65536", "local.retention.ms", "0", "file.delete.delay.ms", "0", "retention.ms", "-1")
		p := closedSegments(t, dir, store, c, 2000)
		if _, err := p.Offload(ctx); err != nil {
			t.Fatal(err)
		}
		seg := manifestOf(t, p).Segments[1]
		p.Close()
		key := "tl/orders-0/" + seg.Name(manifest.LogSuffix)
		data, err := store.ReadAll(ctx, key, 0, seg.Size)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := record.Parse(data)
		mid := int64(len(b)) // the second batch
		base := record.Batch(data[mid:]).BaseOffset()
		record.Batch(data[mid:]).SetBaseOffset(base + delta)
		if _, err := store.Put(ctx, key, bytes.NewReader(data), int64(len(data)), objstore.PutOptions{}); err != nil {
			t.Fatal(err)
		}
		p = open(t, dir, store, 1, c)
		var readErr error
		for off := int64(0); off < p.Offsets().LocalLogStart; {
			r, err := p.Read(ctx, off, backend.ReadOptions{MaxBytes: 1 << 20, MinOneBatch: true})
			if err != nil {
				readErr = err
				break
			}
			off = r.(backend.OffsetRange).NextOffset()
			r.Close()
		}
		p.Close()
		if !errors.Is(readErr, backend.ErrCorruptRecord) || !strings.Contains(readErr.Error(), seg.Name(manifest.LogSuffix)) {
			t.Fatalf("base offset moved by %d in the bucket: reading through gave %v; want ErrCorruptRecord naming the object", delta, readErr)
		}
	}
}

// TestUploadRateLimit: uploads never go faster than UploadBytesPerSecond
// (after its one-second burst). Only the lower bound on the time is
// checked: a busy machine may be slower, never faster.
func TestUploadRateLimit(t *testing.T) {
	store := objstore.New(mem.New(), "mem://rate", objstore.Options{})
	dir := filepath.Join(t.TempDir(), "orders-0")
	c := cfg(t, "segment.bytes", "1048576")
	l, err := local.Open(dir, local.Options{Config: c, LogStartOffset: -1, HighWatermark: -1})
	if err != nil {
		t.Fatal(err)
	}
	const rate = 2 << 20
	p, err := tiered.Open(ctx, l, tiered.Options{Store: store, Prefix: "tl/orders-0", LeaderEpoch: 1, UploadBytesPerSecond: rate})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	produce(t, p, 20_000) // about 4.2 MB
	if err := p.Roll(); err != nil {
		t.Fatal(err)
	}
	_, bytes := p.CopyLag()
	start := time.Now()
	if _, err := p.Offload(ctx); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	least := time.Duration(float64(bytes-rate) / rate * float64(time.Second))
	t.Logf("%d bytes in %v at a cap of %d B/s (at least %v)", bytes, took, rate, least)
	if took < least*9/10 {
		t.Fatalf("%d bytes uploaded in %v, faster than the cap of %d B/s allows (%v)", bytes, took, rate, least)
	}
}

// TestLocalRetentionBelowTheLogStart: a crash after the log start
// checkpoint moved and before the segments below it were deleted leaves a
// local segment wholly below the log start, and the bucket (whose log start
// moved too) holds none of it. Local retention deletes it without asking
// the bucket for records no one may read, and goes on to the segments the
// bucket does hold.
func TestLocalRetentionBelowTheLogStart(t *testing.T) {
	store := objstore.New(mem.New(), "mem://below-start", objstore.Options{})
	dir := filepath.Join(t.TempDir(), "orders-0")
	keep := cfg(t, "segment.bytes", "65536", "file.delete.delay.ms", "0", "remote.storage.enable", "true", "retention.ms", "-1")
	p := closedSegments(t, dir, store, keep, 2000)
	segs := p.LocalSegments()
	if len(segs) < 4 {
		t.Fatalf("%d segments; the test needs at least 4", len(segs))
	}
	if _, err := p.Offload(ctx); err != nil {
		t.Fatal(err)
	}
	start := segs[1].BaseOffset
	if err := p.DeleteRecordsBefore(ctx, start); err != nil {
		t.Fatal(err)
	}
	if _, err := p.ApplyRetention(ctx); err != nil {
		t.Fatal(err)
	}
	if got := manifestOf(t, p).Segments[0].BaseOffset; got != start {
		t.Fatalf("the bucket's first segment is %d, want %d", got, start)
	}
	p.Close()

	// The crash: the checkpoint says start, the first segment is still
	// there (a fresh copy of it, since DeleteRecordsBefore removed it).
	l, err := local.Open(filepath.Join(t.TempDir(), "orders-0"), local.Options{Config: keep, LogStartOffset: -1, HighWatermark: -1})
	if err != nil {
		t.Fatal(err)
	}
	produce(t, l, 2000)
	if err := l.Roll(); err != nil {
		t.Fatal(err)
	}
	first := l.SegmentInfos()[0]
	if first.NextOffset != start {
		t.Fatalf("a fresh log's first segment ends at %d, not at %d", first.NextOffset-1, start-1)
	}
	l.Close()
	for _, suf := range []string{".log", ".index", ".timeindex"} {
		b, err := os.ReadFile(filepath.Join(filepath.Dir(first.Path), filepath.Base(strings.TrimSuffix(first.Path, ".log"))+suf))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, strings.TrimSuffix(filepath.Base(first.Path), ".log")+suf), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	c := cfg(t, "segment.bytes", "65536", "file.delete.delay.ms", "0", "remote.storage.enable", "true", "retention.ms", "-1", "local.retention.ms", "0")
	l, err = local.Open(dir, local.Options{Config: c, LogStartOffset: start, HighWatermark: -1})
	if err != nil {
		t.Fatal(err)
	}
	p, err = tiered.Open(ctx, l, tiered.Options{Store: store, Prefix: "tl/orders-0", LeaderEpoch: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := p.SetHighWatermark(p.Offsets().LogEnd); err != nil {
		t.Fatal(err)
	}
	if got := p.LocalSegments()[0].BaseOffset; got != 0 {
		t.Fatalf("the reopened log's first segment is %d, want the stale one at 0", got)
	}
	if _, err := p.Offload(ctx); err != nil {
		t.Fatalf("offload with a segment below the log start: %v", err)
	}
	if got := p.LocalSegments()[0]; got.BaseOffset < start || !got.Active {
		t.Fatalf("after local retention the first local segment is %d (active %v); want only the active one, above %d", got.BaseOffset, got.Active, start)
	}
	if n := p.Metrics().LocalDeletesRefused.Load(); n != 0 {
		t.Fatalf("%d local deletes refused", n)
	}
	want := batchesFrom(t, p, start)
	if len(want) == 0 {
		t.Fatal("nothing reads back from the log start")
	}
}

// TestCommitEndsWithItsWindow: gc judges an upload intent dead once its
// commit window and the clock skew margin have passed, and removes its
// objects. A manifest PUT still in flight then (slow, retrying) must not
// land and name them: the writer abandons its commit when the window
// ends, so the objects it would have named are garbage, never missing.
func TestCommitEndsWithItsWindow(t *testing.T) {
	const window = 300 * time.Millisecond
	var store *objstore.Store
	var gone []string
	var abandoned atomic.Bool
	drv := faultstore.Wrap(mem.New(), 0)
	// The first manifest PUT after a segment upload runs gc, then is held
	// until its context ends (abandoned) or 30s pass.
	held := drv.Add(faultstore.Rule{Op: objstore.OpPut, KeySuffix: "/manifest", Nth: 1, Fault: faultstore.Hook,
		Before: func(c context.Context, _ faultstore.Call) error {
			// gc, by a clock past the window and the skew margin.
			g, err := tiered.GC(ctx, store, "tl/orders-0", tiered.GCOptions{CommitWindow: window, Now: func() time.Time {
				return time.Now().Add(window + 5*time.Minute + time.Second)
			}})
			if err != nil {
				t.Errorf("gc: %v", err)
			}
			gone = g
			select {
			case <-c.Done():
				abandoned.Store(true)
				return c.Err()
			case <-time.After(30 * time.Second):
				return nil
			}
		}})
	held.SetEnabled(false)
	drv.Add(faultstore.Rule{Op: objstore.OpPut, KeySuffix: ".log", Nth: 1, Fault: faultstore.Hook, Hook: func(objstore.Op, string) { held.SetEnabled(true) }})
	store = objstore.New(drv, "mem://window", objstore.Options{MaxAttempts: 1})
	l, err := local.Open(filepath.Join(t.TempDir(), "orders-0"), local.Options{Config: cfg(t, "segment.bytes", "65536"), LogStartOffset: -1, HighWatermark: -1})
	if err != nil {
		t.Fatal(err)
	}
	p, err := tiered.Open(ctx, l, tiered.Options{Store: store, Prefix: "tl/orders-0", LeaderEpoch: 1, UploadConcurrency: 1, CommitWindow: window})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	produce(t, p, 1000)
	_, err = p.Offload(ctx)
	if held.Fired() == 0 || len(gone) == 0 {
		t.Fatalf("gc did not run during the commit (removed %v)", gone)
	}
	if !errors.Is(err, tiered.ErrCommitWindow) {
		t.Fatalf("offload whose commit outlasted its window: %v; want ErrCommitWindow", err)
	}
	if !abandoned.Load() {
		t.Fatal("the held manifest PUT was not abandoned at the window's end: it waited out its hold")
	}
	// The next offload settles the lost commit and uploads again; every
	// object the manifest names exists.
	if _, err := p.Offload(ctx); err != nil {
		t.Fatal(err)
	}
	m, err := tiered.ReadManifest(ctx, store, "tl/orders-0")
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Segments) == 0 {
		t.Fatal("nothing committed by the second offload")
	}
	if missing := missingObjects(t, drv, m); len(missing) > 0 {
		t.Fatalf("the manifest names %v, which gc removed", missing)
	}
}

// TestOversizedManifestIsRefused: an object under the manifest's key far
// larger than any manifest is refused as corrupt, not read into memory.
func TestOversizedManifestIsRefused(t *testing.T) {
	drv := mem.New()
	store := objstore.New(drv, "mem://huge", objstore.Options{})
	const size = 64<<20 + 1
	if _, err := store.Put(ctx, "tl/orders-0/manifest", bytes.NewReader(make([]byte, size)), size, objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := tiered.ReadManifest(ctx, store, "tl/orders-0"); !errors.Is(err, manifest.ErrCorrupt) || !strings.Contains(err.Error(), "tl/orders-0/manifest") {
		t.Fatalf("a %d-byte manifest: %v; want manifest.ErrCorrupt naming the key", size, err)
	}
}

// TestOffloadGroupsSmallSegments: Offload shares one manifest commit
// (and the intent before it) among up to four times UploadConcurrency
// small segments, and a segment whose upload fails inside such a group
// leaves the manifest naming exactly the segments before it and the
// bucket holding no object of those after it (started or not); the next
// Offload uploads the rest.
func TestOffloadGroupsSmallSegments(t *testing.T) {
	fs := faultstore.Wrap(mem.New(), 1)
	store := objstore.New(fs, "mem://groups", objstore.Options{})
	c := cfg(t, "segment.bytes", "65536", "local.retention.ms", "-1", "retention.ms", "-1")
	p := closedSegments(t, filepath.Join(t.TempDir(), "orders-0"), store, c, 300)
	defer p.Close()
	if _, err := p.Offload(ctx); err != nil { // the first commit claims the bucket
		t.Fatal(err)
	}
	first := len(p.LocalSegments()) - 1
	produce(t, p, 12_000)
	if err := p.Roll(); err != nil {
		t.Fatal(err)
	}
	segs := p.LocalSegments()[first:]
	closed := len(segs) - 1
	const group = 4 * 4 // four times the default UploadConcurrency
	if closed < 2*group+1 {
		t.Fatalf("%d closed segments; the test needs more than %d", closed, 2*group)
	}
	victim := segs[group+4]
	fault := fs.Add(faultstore.Rule{Op: objstore.OpPut, KeyContains: fmt.Sprintf("/%020d-", victim.BaseOffset), KeySuffix: ".log",
		Every: 1, Fault: faultstore.Permanent})
	commits := p.Metrics().ManifestCommits.Load()
	n, err := p.Offload(ctx)
	if err == nil || n != group+4 {
		t.Fatalf("offload with segment %d's upload refused: %d uploaded, err %v; want the %d before it and an error", victim.BaseOffset, n, err, group+4)
	}
	if got := p.Metrics().ManifestCommits.Load() - commits; got != 2 {
		t.Fatalf("%d manifest commits for a group of %d and the %d segments before the failure; want 2", got, group, 4)
	}
	named := manifestOf(t, p).Segments
	if last := named[len(named)-1]; len(named) != first+group+4 || last.LastOffset != victim.BaseOffset-1 {
		t.Fatalf("the manifest names %d segments, the last ending at %d; want %d, ending before offset %d", len(named), last.LastOffset, first+group+4, victim.BaseOffset)
	}
	err = store.List(ctx, "", func(o objstore.ObjectInfo) bool {
		name := o.Key[strings.LastIndex(o.Key, "/")+1:]
		if strings.HasSuffix(name, tiered.IntentSuffix) {
			t.Errorf("intent %s left after the failed group was abandoned", o.Key)
		}
		if base, _, ok := strings.Cut(name, "-"); ok {
			if b, err := strconv.ParseInt(base, 10, 64); err == nil && b >= victim.BaseOffset {
				t.Errorf("object %s of a segment at or after the failed one is in the bucket", o.Key)
			}
		}
		return true
	})
	if err != nil {
		t.Fatal(err)
	}

	fault.Remove()
	commits = p.Metrics().ManifestCommits.Load()
	n, err = p.Offload(ctx)
	rest := closed - group - 4
	if err != nil || n != rest {
		t.Fatalf("offload after the fault: %d uploaded, err %v; want the other %d", n, err, rest)
	}
	if got, want := p.Metrics().ManifestCommits.Load()-commits, int64((rest+group-1)/group); got != want {
		t.Fatalf("%d manifest commits for %d segments; want %d", got, rest, want)
	}
	named = manifestOf(t, p).Segments[first:]
	if len(named) != closed {
		t.Fatalf("the manifest names %d of the %d segments closed after the first offload", len(named), closed)
	}
	for i, s := range named {
		if s.BaseOffset != segs[i].BaseOffset {
			t.Fatalf("the manifest's segment %d begins at %d; the local one at %d", i, s.BaseOffset, segs[i].BaseOffset)
		}
	}
}

// TestOffloadGroupsStayWithinTheCommitWindow: on a store slow enough that
// a large group of small segments would outlast the commit window (as a
// slow link, an upload rate cap or a shared quota makes one), a group
// starts no segment past its first UploadConcurrency once a quarter of
// the window has gone: it commits what it started, and the next group
// goes on. Every segment is uploaded; none is given up.
func TestOffloadGroupsStayWithinTheCommitWindow(t *testing.T) {
	const window = 2 * time.Second
	fs := faultstore.Wrap(mem.New(), 1, faultstore.Rule{Op: objstore.OpPut, KeySuffix: ".log", Every: 1, Fault: faultstore.Latency, Latency: window / 2})
	p := twoAtATime(t, fs, window)
	closed := len(p.LocalSegments()) - 1
	if closed < 5 {
		t.Fatalf("%d closed segments; the test needs more than two rounds of two", closed)
	}
	// One group of them all, two at a time, would take three windows.
	n, err := p.Offload(ctx)
	if err != nil || n != closed {
		t.Fatalf("offload of %d segments, each .log PUT taking half the commit window: %d uploaded, err %v; want all, within the window", closed, n, err)
	}
	if named := len(manifestOf(t, p).Segments); named != closed {
		t.Fatalf("the manifest names %d segments; want %d", named, closed)
	}
}

// TestOffloadCutsASlowUploadPastTheFirstSegments: a segment a group
// started past its first UploadConcurrency that is still uploading at
// half the commit window is stopped; the group commits the segments
// before it, and the next group uploads it. Without the cut, one slow
// upload started early in a large group held its commit past the window.
func TestOffloadCutsASlowUploadPastTheFirstSegments(t *testing.T) {
	const window = 2 * time.Second
	fs := faultstore.Wrap(mem.New(), 1)
	p := twoAtATime(t, fs, window)
	segs := p.LocalSegments()
	closed := len(segs) - 1
	if closed < 4 {
		t.Fatalf("%d closed segments; the test needs more than 3", closed)
	}
	var cut atomic.Bool
	fs.Add(faultstore.Rule{Op: objstore.OpPut, KeyContains: fmt.Sprintf("/%020d-", segs[2].BaseOffset), KeySuffix: ".log", Nth: 1, Fault: faultstore.Hook,
		Before: func(ctx context.Context, _ faultstore.Call) error {
			select {
			case <-ctx.Done():
				cut.Store(true)
				return ctx.Err()
			case <-time.After(2 * window): // a slow upload, not a failed one
				return nil
			}
		}})
	n, err := p.Offload(ctx)
	if err != nil || n != closed {
		t.Fatalf("offload with the third segment's first .log PUT taking twice the commit window: %d uploaded, err %v; want all %d", n, err, closed)
	}
	if !cut.Load() {
		t.Fatal("the slow upload was not stopped")
	}
	if e := p.Metrics().UploadErrors.Load(); e != 0 {
		t.Fatalf("%d upload errors counted; a cut upload is not one", e)
	}
	named := manifestOf(t, p).Segments
	if len(named) != closed {
		t.Fatalf("the manifest names %d segments; want %d", len(named), closed)
	}
	// The uploads abandoned with the cut one were sent again: each
	// segment is counted once, when committed.
	var bytes int64
	for _, s := range named {
		bytes += s.Size + s.IndexSize + s.TimeIndexSize
	}
	if got := p.Metrics().SegmentsUploaded.Load(); got != int64(closed) {
		t.Errorf("SegmentsUploaded %d for %d segments committed", got, closed)
	}
	if got := p.Metrics().BytesUploaded.Load(); got != bytes {
		t.Errorf("BytesUploaded %d; the manifest's segments hold %d", got, bytes)
	}
}

// TestOffloadReportsARealErrorPastHalfTheWindow: a segment past the
// first UploadConcurrency whose upload fails for a reason of its own
// after half the commit window is an error of its group, counted once,
// not a cut the next group would have to find again.
func TestOffloadReportsARealErrorPastHalfTheWindow(t *testing.T) {
	const window = 2 * time.Second
	fs := faultstore.Wrap(mem.New(), 1)
	p := twoAtATime(t, fs, window)
	segs := p.LocalSegments()
	if len(segs)-1 < 4 {
		t.Fatalf("%d closed segments; the test needs more than 3", len(segs)-1)
	}
	fs.Add(faultstore.Rule{Op: objstore.OpPut, KeyContains: fmt.Sprintf("/%020d-", segs[2].BaseOffset), KeySuffix: ".log", Nth: 1, Fault: faultstore.Hook,
		Before: func(context.Context, faultstore.Call) error {
			time.Sleep(window * 3 / 4) // past half the window, whatever the context says
			return objstore.ErrAccessDenied
		}})
	n, err := p.Offload(ctx)
	if !errors.Is(err, objstore.ErrAccessDenied) || n != 2 {
		t.Fatalf("offload with the third segment's .log PUT refused after half the window: %d uploaded, err %v; want 2 and the refusal", n, err)
	}
	if e := p.Metrics().UploadErrors.Load(); e != 1 {
		t.Fatalf("%d upload errors counted; want 1", e)
	}
	if named := manifestOf(t, p).Segments; len(named) != 2 {
		t.Fatalf("the manifest names %d segments; want the 2 before the refused one", len(named))
	}
}

// TestCopyTurnCommitsSmallSegmentsTogether: a copier's turn over small
// segments uploads up to four, one at a time, under one intent and one
// commit, and says whether more wait.
func TestCopyTurnCommitsSmallSegmentsTogether(t *testing.T) {
	fs := faultstore.Wrap(mem.New(), 1)
	p := twoAtATime(t, fs, time.Minute)
	closed := len(p.LocalSegments()) - 1
	if closed < 5 || closed > 8 {
		t.Fatalf("%d closed segments; the test needs 5 to 8", closed)
	}
	var intents, inFlight, most atomic.Int64
	fs.Add(faultstore.Rule{Op: objstore.OpPut, KeySuffix: ".intent", Every: 1, Fault: faultstore.Hook,
		Hook: func(objstore.Op, string) { intents.Add(1) }})
	fs.Add(faultstore.Rule{Op: objstore.OpPut, KeySuffix: ".log", Every: 1, Fault: faultstore.Hook,
		Before: func(context.Context, faultstore.Call) error {
			n := inFlight.Add(1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
			time.Sleep(10 * time.Millisecond)
			return nil
		},
		After: func(faultstore.Call) { inFlight.Add(-1) }})
	n, more, err := p.CopyTurn(ctx)
	if err != nil || n != 4 || !more {
		t.Fatalf("first turn over %d small segments: %d uploaded, more %v, err %v; want 4 and more", closed, n, more, err)
	}
	if got := intents.Load(); got != 1 {
		t.Fatalf("the turn wrote %d intents; want one for its four segments", got)
	}
	if got := len(manifestOf(t, p).Segments); got != 4 {
		t.Fatalf("the manifest names %d segments after the turn; want 4", got)
	}
	n, more, err = p.CopyTurn(ctx)
	if err != nil || n != closed-4 || more {
		t.Fatalf("second turn: %d uploaded, more %v, err %v; want %d and no more", n, more, err, closed-4)
	}
	if got := most.Load(); got != 1 {
		t.Fatalf("%d uploads at once in a turn; the copier pool is the service's concurrency: want 1", got)
	}
}

// TestCopyTurnCutsASegmentTheCapHoldsPastHalfTheWindow: a turn's later
// segment that the upload cap would hold past half the commit window is
// cut there, as a slow store's is: the turn commits the segments before
// it and says more wait, with no upload error and no backoff.
func TestCopyTurnCutsASegmentTheCapHoldsPastHalfTheWindow(t *testing.T) {
	p := smallSegments(t, tiered.Options{Store: objstore.New(mem.New(), "mem://capped", objstore.Options{}),
		CommitWindow: 2 * time.Second, UploadBytesPerSecond: 56 << 10})
	n, more, err := p.CopyTurn(ctx)
	if err != nil || n < 1 || !more {
		t.Fatalf("a turn whose second segment the cap holds past half the window: %d uploaded, more %v, err %v; want the first, more, no error", n, more, err)
	}
	if e := p.Metrics().UploadErrors.Load(); e != 0 {
		t.Fatalf("%d upload errors counted; a segment cut by the window is not one", e)
	}
}

// twoAtATime opens a partition over fs that uploads two segments at once
// within commitWindow, with about six closed segments of 64 KiB (see
// smallSegments).
func twoAtATime(t *testing.T, fs *faultstore.Driver, commitWindow time.Duration) *tiered.Partition {
	t.Helper()
	return smallSegments(t, tiered.Options{Store: objstore.New(fs, "mem://two", objstore.Options{}), UploadConcurrency: 2, CommitWindow: commitWindow})
}

// smallSegments opens a partition under opts (its prefix and leader
// epoch set here) over a log of 64 KiB segments, with about six closed
// ones; it is closed when the test ends.
func smallSegments(t *testing.T, opts tiered.Options) *tiered.Partition {
	t.Helper()
	l, err := local.Open(filepath.Join(t.TempDir(), "orders-0"), local.Options{Config: cfg(t, "segment.bytes", "65536"), LogStartOffset: -1, HighWatermark: -1})
	if err != nil {
		t.Fatal(err)
	}
	opts.Prefix, opts.LeaderEpoch = "tl/orders-0", 1
	p, err := tiered.Open(ctx, l, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	produce(t, p, 1800)
	if err := p.Roll(); err != nil {
		t.Fatal(err)
	}
	return p
}
