package soak_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"testing"
	"time"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/local"
	"github.com/tierlog/tierlog/objstore"
	"github.com/tierlog/tierlog/objstore/mem"
	"github.com/tierlog/tierlog/record"
	"github.com/tierlog/tierlog/testing/faultstore"
	"github.com/tierlog/tierlog/tiered"
)

// Library bugs the soak found, each as a minimal reproduction that failed
// until its fix: regression tests now.

// TestBugReopenForgetsLogStartAndHighWatermark: a partition closed
// (Log.Close, or tiered.Partition.Close, which closes its local log) and
// opened again through the same local.Backend comes back with the log
// start and high watermark of the backend's checkpoint maps, read at
// OpenBackend or written by the last Checkpoint, not the ones it had when
// it was closed: a DeleteRecordsBefore is undone (records below the log
// start are served again) and the high watermark falls back (to 0 here).
// Backend.OpenLog's reopen path takes b.starts / b.hws, which Log.Close
// never updates.
func TestBugReopenForgetsLogStartAndHighWatermark(t *testing.T) {
	ctx := context.Background()
	b, err := local.OpenBackend(t.TempDir(), local.BackendOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	l, err := b.OpenLog(ctx, "t", 0, backend.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	var bl record.Builder
	bl.Reset(record.NewBatchHeader())
	for range 100 {
		bl.Append(1, nil, []byte("v"), nil)
	}
	batch, err := bl.Build()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Append(ctx, batch, backend.AppendOptions{AssignOffsets: true}); err != nil {
		t.Fatal(err)
	}
	if err := l.SetHighWatermark(100); err != nil {
		t.Fatal(err)
	}
	if err := l.DeleteRecordsBefore(ctx, 47); err != nil {
		t.Fatal(err)
	}
	before := l.Offsets()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l, err = b.OpenLog(ctx, "t", 0, backend.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	if after := l.Offsets(); after.LogStart != before.LogStart || after.HighWatermark != before.HighWatermark {
		t.Fatalf("closed with %+v, reopened with %+v", before, after)
	}
}

// appendN appends n records of 1 KiB as the leader and moves the high
// watermark to the log end.
func appendN(t *testing.T, p backend.Partition, n int) {
	t.Helper()
	var bl record.Builder
	for range n {
		bl.Reset(record.NewBatchHeader())
		bl.Append(time.Now().UnixMilli(), nil, make([]byte, 1024), nil)
		batch, err := bl.Build()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := p.Append(context.Background(), batch, backend.AppendOptions{AssignOffsets: true}); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.SetHighWatermark(p.Offsets().LogEnd); err != nil {
		t.Fatal(err)
	}
}

// TestBugDeleteRecordsMidSegmentStopsLocalRetention: when the log start
// lies inside the bucket's first segment (DeleteRecordsBefore into the
// middle of a segment, before or after it was offloaded), local retention
// takes that segment, which the bucket holds byte for byte, for a diverged
// copy: every Offload fails with tiered.ErrDiverged ("local segment 0..N
// is not one segment of the bucket"), local retention stops and the local
// disk grows until total retention removes the segment from the bucket.
// bucketHoldsLocked (tiered/verify.go) looks the segment up with
// manifest.Find, which answers "not found" for every offset below the
// manifest's LogStartOffset, so the segment holding the log start is never
// found.
func TestBugDeleteRecordsMidSegmentStopsLocalRetention(t *testing.T) {
	ctx := context.Background()
	cfg, err := backend.ParseConfig(map[string]string{"segment.bytes": "16384", "local.retention.bytes": "1", "remote.storage.enable": "true"})
	if err != nil {
		t.Fatal(err)
	}
	l, err := local.Open(t.TempDir(), local.Options{Config: cfg, LogStartOffset: -1, HighWatermark: -1})
	if err != nil {
		t.Fatal(err)
	}
	p, err := tiered.Open(ctx, l, tiered.Options{Store: objstore.New(mem.New(), "mem://bug", objstore.Options{}), Prefix: "t-0"})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	appendN(t, p, 40) // three segments: two closed, one active
	if err := p.DeleteRecordsBefore(ctx, 5); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Offload(ctx); err != nil {
		m, _ := p.Manifest(ctx)
		t.Fatalf("offload with the log start at 5, the bucket's first segment %d..%d (manifest log start %d): %v",
			m.Segments[0].BaseOffset, m.Segments[0].LastOffset, m.LogStartOffset, err)
	}
}

// TestBugManifestLogStartNotAppliedToLocalLog: tiered.DeleteRecordsBefore
// commits the manifest's new LogStartOffset, then raises the local log's
// log start. A process that stops between the two (killed, or its context
// cancelled) leaves the manifest at the new log start and the local log at
// the old one, and nothing reconciles them: tiered.Open adopts the
// manifest without raising the local log start, Partition.Offsets takes
// the manifest's log start only when it is below the local one, and
// ApplyRetention moves the local log only when it moves the manifest. So
// the partition's log start goes back below the committed one, records
// below the manifest's log start are served again from local disk, the
// log-start checkpoint records the old value, and (through
// TestBugDeleteRecordsMidSegmentStopsLocalRetention) local retention
// stops.
func TestBugManifestLogStartNotAppliedToLocalLog(t *testing.T) {
	cfg, err := backend.ParseConfig(map[string]string{"segment.bytes": "16384", "remote.storage.enable": "true"})
	if err != nil {
		t.Fatal(err)
	}
	drv := faultstore.Wrap(mem.New(), 0)
	store := objstore.New(drv, "mem://bug", objstore.Options{})
	dir := t.TempDir()
	open := func() (*local.Backend, *tiered.Partition) {
		b, err := local.OpenBackend(dir, local.BackendOptions{RemoteStorage: true})
		if err != nil {
			t.Fatal(err)
		}
		l, err := b.OpenLog(context.Background(), "t", 0, cfg)
		if err != nil {
			t.Fatal(err)
		}
		p, err := tiered.Open(context.Background(), l, tiered.Options{Store: store, Prefix: "t-0"})
		if err != nil {
			t.Fatal(err)
		}
		return b, p
	}
	b, p := open()
	appendN(t, p, 40)
	if _, err := p.Offload(context.Background()); err != nil {
		t.Fatal(err)
	}
	// Cancel the caller's context once a manifest put has succeeded: what
	// a process killed right after the manifest commit leaves.
	ctx, cancel := context.WithCancel(context.Background())
	cut := drv.Add(faultstore.Rule{Op: objstore.OpPut, KeySuffix: "/" + tiered.ManifestName, Every: 1, Fault: faultstore.Hook,
		After: func(c faultstore.Call) {
			if c.Err == nil {
				cancel()
			}
		}})
	err = p.DeleteRecordsBefore(ctx, 5) // the manifest commit lands, then the call is cut
	cut.Remove()
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("DeleteRecordsBefore: %v, want it cut after the manifest commit", err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	b, p = open()
	defer b.Close()
	if got, want := p.Offsets().LogStart, p.Head().LogStartOffset(); got != want {
		t.Errorf("after a reopen the partition's log start is %d, the committed manifest's %d", got, want)
	}
	if _, err := p.ApplyRetention(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got, want := p.Offsets().LogStart, p.Head().LogStartOffset(); got != want {
		t.Errorf("after ApplyRetention too the partition's log start is %d, the committed manifest's %d", got, want)
	}
	if recs, err := p.Read(context.Background(), 2, backend.ReadOptions{MaxBytes: 1, MinOneBatch: true}); err == nil {
		recs.Close()
		t.Errorf("offset 2, below the committed log start %d, is served", p.Head().LogStartOffset())
	}
}

// TestBugAppendAfterRestoreBreaksOffload: tiered.Restore rebuilds a
// partition directory whose last segment is the bucket's last segment;
// opened as a local log, that segment is the active one, so the next
// appends go into it. From then on the local segment runs past the
// bucket's copy of it, and every Offload fails ("local segment B..N
// overlaps the bucket, which ends at E", pendingLocked in
// tiered/offload.go): nothing is uploaded again, and local retention can
// never delete it. A restored partition (a lost disk, a new broker, as
// tierctl restore's help says) cannot take appends and stay tiered.
func TestBugAppendAfterRestoreBreaksOffload(t *testing.T) {
	ctx := context.Background()
	cfg, err := backend.ParseConfig(map[string]string{"segment.bytes": "16384", "remote.storage.enable": "true"})
	if err != nil {
		t.Fatal(err)
	}
	store := objstore.New(mem.New(), "mem://bug", objstore.Options{})
	open := func(dir string) *tiered.Partition {
		l, err := local.Open(dir, local.Options{Config: cfg, LogStartOffset: -1, HighWatermark: -1})
		if err != nil {
			t.Fatal(err)
		}
		p, err := tiered.Open(ctx, l, tiered.Options{Store: store, Prefix: "t-0"})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	p := open(filepath.Join(t.TempDir(), "t-0"))
	appendN(t, p, 20)
	if err := p.Roll(); err != nil { // everything in closed segments
		t.Fatal(err)
	}
	if _, err := p.Offload(ctx); err != nil {
		t.Fatal(err)
	}
	p.Close()
	dir := filepath.Join(t.TempDir(), "t-0")
	if _, err := tiered.Restore(ctx, store, "t-0", dir, tiered.RestoreOptions{}); err != nil {
		t.Fatal(err)
	}
	p = open(dir)
	defer p.Close()
	appendN(t, p, 5)
	if err := p.Roll(); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Offload(ctx); err != nil {
		t.Fatalf("offload after a restore and 5 appends: %v", err)
	}
}

// TestBugOffloadBringsBackDeletedRecords: DeleteRecordsBefore to an
// offset above the bucket's end raises the local log start to it but
// caps the manifest's LogStartOffset at the bucket's end + 1
// (tiered.Partition.DeleteRecordsBefore). The next Offload uploads the
// segment holding the log start and commits the manifest with its
// LogStartOffset unchanged, and Partition.Offsets, seeing the bucket now
// reach the local log start, takes the manifest's lower log start: the
// log start goes back, and the records DeleteRecords removed are served
// again, from the bucket.
func TestBugOffloadBringsBackDeletedRecords(t *testing.T) {
	ctx := context.Background()
	cfg, err := backend.ParseConfig(map[string]string{"segment.bytes": "16384", "remote.storage.enable": "true"})
	if err != nil {
		t.Fatal(err)
	}
	l, err := local.Open(t.TempDir(), local.Options{Config: cfg, LogStartOffset: -1, HighWatermark: -1})
	if err != nil {
		t.Fatal(err)
	}
	p, err := tiered.Open(ctx, l, tiered.Options{Store: objstore.New(mem.New(), "mem://bug", objstore.Options{}), Prefix: "t-0"})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	appendN(t, p, 40) // segments 0..13 and 14..27, 28..39 active
	if _, err := p.Offload(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.DeleteRecordsBefore(ctx, 30); err != nil { // above the bucket's end, 27
		t.Fatal(err)
	}
	before := p.Offsets().LogStart
	appendN(t, p, 20) // 28..41 closes
	if _, err := p.Offload(ctx); err != nil {
		t.Fatal(err)
	}
	if after := p.Offsets().LogStart; after != before {
		t.Errorf("the log start was %d after DeleteRecordsBefore(30), %d after the next Offload (manifest log start %d)", before, after, p.Head().LogStartOffset())
	}
	if recs, err := p.Read(ctx, 29, backend.ReadOptions{MaxBytes: 1, MinOneBatch: true}); err == nil {
		recs.Close()
		t.Errorf("offset 29, deleted by DeleteRecordsBefore(30), is served again")
	}
}

// TestBugManifestLogStartNotAppliedAfterLostAnswer is the same bug as
// TestBugManifestLogStartNotAppliedToLocalLog without a crash: a
// DeleteRecordsBefore whose manifest commit lands but whose answer is
// lost fails retryably before the local log moves; the next change (an
// Offload) reconciles and adopts the committed manifest, but nothing
// raises the local log start, so the partition keeps serving records
// below the committed log start, until local retention happens to delete
// past it, when the log start jumps in the middle of an Offload.
func TestBugManifestLogStartNotAppliedAfterLostAnswer(t *testing.T) {
	ctx := context.Background()
	cfg, err := backend.ParseConfig(map[string]string{"segment.bytes": "16384", "remote.storage.enable": "true"})
	if err != nil {
		t.Fatal(err)
	}
	l, err := local.Open(t.TempDir(), local.Options{Config: cfg, LogStartOffset: -1, HighWatermark: -1})
	if err != nil {
		t.Fatal(err)
	}
	drv := faultstore.Wrap(mem.New(), 0)
	p, err := tiered.Open(ctx, l, tiered.Options{Store: objstore.New(drv, "mem://bug", objstore.Options{MaxAttempts: 1}), Prefix: "t-0"})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	appendN(t, p, 40)
	if _, err := p.Offload(ctx); err != nil {
		t.Fatal(err)
	}
	// Manifest puts land but answer with a retryable error, as when a
	// connection drops after the server committed: the writer cannot
	// know the outcome.
	lost := drv.Add(faultstore.Rule{Op: objstore.OpPut, KeySuffix: "/" + tiered.ManifestName, Every: 1, Fault: faultstore.FailAfter,
		Err: fmt.Errorf("%w: the answer was lost", objstore.ErrRetryable)})
	if err := p.DeleteRecordsBefore(ctx, 5); !errors.Is(err, objstore.ErrRetryable) {
		t.Fatalf("DeleteRecordsBefore with the answer lost: %v, want a retryable error", err)
	}
	lost.Remove()
	if _, err := p.Offload(ctx); err != nil { // reconciles: the commit had landed
		t.Fatal(err)
	}
	if got, want := p.Offsets().LogStart, p.Head().LogStartOffset(); got != want {
		t.Errorf("the manifest committed log start %d, the partition's is %d", want, got)
	}
	if recs, err := p.Read(ctx, 2, backend.ReadOptions{MaxBytes: 1, MinOneBatch: true}); err == nil {
		recs.Close()
		t.Errorf("offset 2, below the committed log start %d, is served", p.Head().LogStartOffset())
	}
}

// TestBugReopenForgetsLogStartPastTheBucket: DeleteRecordsBefore to an
// offset past the bucket's end raises the local log start to it and the
// manifest's LogStartOffset to the bucket's end + 1 only; the partition
// (tiered.Partition.Offsets) rightly starts at the offset. But the local
// log's log-start-offset-checkpoint value (local.Log.checkpointLogStart)
// is the manifest's lower log start, which adopt hands it as the remote
// log start (tiered/commit.go) although no offset between it and the local
// log start lives in the bucket. A reopen of the partition (as here), a
// clean restart of the log directory or a SIGKILL after a checkpoint then
// starts the local log at its first segment's base: the log start goes
// back and records DeleteRecords removed are served again (and the next
// Offload commits that lower log start).
func TestBugReopenForgetsLogStartPastTheBucket(t *testing.T) {
	ctx := context.Background()
	cfg, err := backend.ParseConfig(map[string]string{"segment.bytes": "16384", "remote.storage.enable": "true"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := local.OpenBackend(t.TempDir(), local.BackendOptions{RemoteStorage: true})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	store := objstore.New(mem.New(), "mem://bug", objstore.Options{})
	open := func() *tiered.Partition {
		l, err := b.OpenLog(ctx, "t", 0, cfg)
		if err != nil {
			t.Fatal(err)
		}
		p, err := tiered.Open(ctx, l, tiered.Options{Store: store, Prefix: "t-0"})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	p := open()
	appendN(t, p, 40) // segments 0..13 and 14..27, 28..39 active
	if _, err := p.Offload(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.DeleteRecordsBefore(ctx, 30); err != nil { // past the bucket's end, 27
		t.Fatal(err)
	}
	before := p.Offsets()
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	p = open()
	defer p.Close()
	if after := p.Offsets(); after.LogStart != before.LogStart {
		t.Errorf("closed with the log start at %d, reopened with it at %d (manifest log start %d)", before.LogStart, after.LogStart, p.Head().LogStartOffset())
	}
	if recs, err := p.Read(ctx, 29, backend.ReadOptions{MaxBytes: 1, MinOneBatch: true}); err == nil {
		recs.Close()
		t.Errorf("offset 29, deleted by DeleteRecordsBefore(30), is served again after a reopen")
	}
}

// TestBugRestoreCutBodiesNotRetryable: when a segment's body is cut short
// restoreAttempts times in a row (faults on the network), tiered.Restore
// gives up with an error that formats its cause with %v
// (restoreObject, tiered/restore.go): the objstore.ErrRetryable the store
// put on every cut is lost, so a caller that retries what
// errors.Is(err, objstore.ErrRetryable) says may pass (as it does for
// every other failed request of a restore) takes a passing network fault
// for a permanent failure. The soak's restore failed so under its
// "cut-mid-body" fault.
func TestBugRestoreCutBodiesNotRetryable(t *testing.T) {
	ctx := context.Background()
	cfg, err := backend.ParseConfig(map[string]string{"segment.bytes": "16384", "remote.storage.enable": "true"})
	if err != nil {
		t.Fatal(err)
	}
	drv := faultstore.Wrap(mem.New(), 0)
	store := objstore.New(drv, "mem://bug", objstore.Options{})
	l, err := local.Open(filepath.Join(t.TempDir(), "t-0"), local.Options{Config: cfg, LogStartOffset: -1, HighWatermark: -1})
	if err != nil {
		t.Fatal(err)
	}
	p, err := tiered.Open(ctx, l, tiered.Options{Store: store, Prefix: "t-0"})
	if err != nil {
		t.Fatal(err)
	}
	appendN(t, p, 20)
	if _, err := p.Offload(ctx); err != nil {
		t.Fatal(err)
	}
	p.Close()
	// Segment bodies (".log" objects) end after 100 bytes with an
	// unexpected EOF, as a connection cut mid-body does.
	drv.Add(faultstore.Rule{Op: objstore.OpGet, KeySuffix: ".log", Every: 1, Fault: faultstore.CutBody, AfterBytes: 100, Err: io.ErrUnexpectedEOF})
	_, err = tiered.Restore(ctx, store, "t-0", filepath.Join(t.TempDir(), "t-0"), tiered.RestoreOptions{})
	if err == nil {
		t.Fatal("a restore whose every segment body is cut after 100 bytes succeeded")
	}
	if !errors.Is(err, objstore.ErrRetryable) {
		t.Errorf("a restore failed by cut bodies only: %v; errors.Is(err, objstore.ErrRetryable) is false", err)
	}
}
