package tiered_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tierlog/tierlog/local"
	"github.com/tierlog/tierlog/manifest"
	"github.com/tierlog/tierlog/objstore"
	"github.com/tierlog/tierlog/objstore/mem"
	"github.com/tierlog/tierlog/tiered"
)

// synthSegments returns n segments of 100 offsets each from base, with
// max timestamps from ts, for manifests larger than any test log.
func synthSegments(base int64, n int, ts int64) []manifest.Segment {
	out := make([]manifest.Segment, n)
	for i := range out {
		b := base + int64(i)*100
		out[i] = manifest.Segment{BaseOffset: b, LastOffset: b + 99, MaxTimestamp: ts + int64(i), Size: 1 << 20, Records: 100,
			LeaderEpoch: 1, UploadTimeMs: ts + int64(i), IndexSize: 800, TimeIndexSize: 1200, LogCRC: uint32(b), IndexCRC: uint32(b) + 1, TimeIndexCRC: uint32(b) + 2}
		binary.BigEndian.PutUint64(out[i].ID[:], uint64(b)*0x9e3779b97f4a7c15)
	}
	return out
}

// partKeys lists the part objects under the partition.
func partKeys(t *testing.T, store *objstore.Store) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	if err := store.List(ctx, "tl/orders-0/", func(o objstore.ObjectInfo) bool {
		if strings.HasSuffix(o.Key, manifest.PartSuffix) {
			out[o.Key] = true
		}
		return true
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestMillionSegmentManifest: a partition of a million (synthetic)
// segments committed through the Backend's commit path, then one segment a
// commit; read back by a new reader; cut by remote retention (which puts
// the head only); and gc'd, which removes the parts no kept head names
// and none that one does.
func TestMillionSegmentManifest(t *testing.T) {
	if testing.Short() {
		t.Skip("a million segments: about 400 MB of heap")
	}
	store := objstore.New(mem.New(), "mem://million", objstore.Options{})
	dir := filepath.Join(t.TempDir(), "orders-0")
	const day = 24 * time.Hour
	p := open(t, dir, store, 1, cfg(t, "retention.ms", "86400000"))
	defer p.Close()
	now := time.Now().UnixMilli()
	const n = 1_000_000
	const old = 900_000 // segments older than retention.ms
	for i := 0; i < n; i += 100_000 {
		ts := now - 2*day.Milliseconds()
		if i >= old {
			ts = now
		}
		if err := tiered.CommitSegments(ctx, p, synthSegments(int64(i)*100, 100_000, ts)); err != nil {
			t.Fatal(err)
		}
	}
	met := p.Metrics()
	before := met.ManifestBytesPut.Load()
	for i := n; i < n+200; i++ {
		if err := tiered.CommitSegments(ctx, p, synthSegments(int64(i)*100, 1, now)); err != nil {
			t.Fatal(err)
		}
	}
	perCommit := (met.ManifestBytesPut.Load() - before) / 200
	t.Logf("%d segments: %d parts; one segment a commit puts %d bytes on average (heads and parts)", n+200, len(manifestOf(t, p).Parts), perCommit)
	if perCommit > 64<<10 {
		t.Fatalf("one segment a commit puts %d bytes at a million segments", perCommit)
	}

	// A new reader reads the same manifest (the head and its parts).
	m, err := tiered.ReadManifest(ctx, store, "tl/orders-0")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(m.Segments, manifestOf(t, p).Segments) {
		t.Fatalf("a new reader reads %d segments, the writer holds %d", len(m.Segments), len(manifestOf(t, p).Segments))
	}

	// Remote retention cuts the 900,000 old segments: the head alone is
	// put (the parts it cuts into are skipped, not written).
	parts := met.ManifestPartsPut.Load()
	cut, err := p.ApplyRetention(ctx)
	if err != nil || cut != old {
		t.Fatalf("retention cut %d segments (%v), want %d", cut, err, old)
	}
	if met.ManifestPartsPut.Load() != parts {
		t.Fatal("retention put parts")
	}
	if m := manifestOf(t, p); len(m.Segments) != n+200-old || m.Segments[0].BaseOffset != int64(old)*100 {
		t.Fatalf("after retention: %d segments from %d", len(m.Segments), m.Segments[0].BaseOffset)
	}

	// gc: the parts the cut left unnamed go once no kept backup names
	// them (two more commits rotate the backups); the named ones stay.
	for i := n + 200; i < n+202; i++ {
		if err := tiered.CommitSegments(ctx, p, synthSegments(int64(i)*100, 1, now)); err != nil {
			t.Fatal(err)
		}
	}
	all := partKeys(t, store)
	gone, err := tiered.GC(ctx, store, "tl/orders-0", tiered.GCOptions{Grace: time.Nanosecond, Force: true})
	if err != nil {
		t.Fatal(err)
	}
	named := map[string]bool{}
	for _, part := range manifestOf(t, p).Parts {
		named["tl/orders-0/"+part.Name()] = true
	}
	left := partKeys(t, store)
	if !reflect.DeepEqual(left, named) {
		t.Fatalf("after gc %d parts are in the bucket, the manifest names %d", len(left), len(named))
	}
	t.Logf("gc removed %d objects; %d parts before, %d after", len(gone), len(all), len(left))
	if m, err := tiered.ReadManifest(ctx, store, "tl/orders-0"); err != nil || !reflect.DeepEqual(m.Segments, manifestOf(t, p).Segments) {
		t.Fatalf("after gc the manifest does not read back: %v", err)
	}
}

// version2 rewrites a version 3 head with no parts, no born and no WAL
// record as the version 2 manifest an older tierlog wrote: the same bytes
// without the part count.
func version2(t *testing.T, v3 []byte) []byte {
	t.Helper()
	at := 6
	for range 4 { // generation, writer epoch, log start, flags
		_, n := binary.Uvarint(v3[at:])
		at += n
	}
	if v3[at] != 0 || v3[at-1] != 0 {
		t.Fatal("not a version 3 head without parts, born or WAL")
	}
	body := append(append([]byte(nil), v3[:at]...), v3[at+1:len(v3)-4]...)
	binary.BigEndian.PutUint16(body[4:], 2)
	return binary.BigEndian.AppendUint32(body, crc32.Checksum(body, crc32.MakeTable(crc32.Castagnoli)))
}

// TestVersion2ManifestUpgraded: a bucket whose manifest an older tierlog
// wrote (version 2, every segment in one object) is read as it is, and
// the next commit upgrades it to a head with parts that reads back to the
// same segments and the new one.
func TestVersion2ManifestUpgraded(t *testing.T) {
	store := objstore.New(mem.New(), "mem://upgrade", objstore.Options{})
	old := &manifest.Manifest{Generation: 7, WriterEpoch: 1, Segments: synthSegments(0, 5000, time.Now().UnixMilli())}
	v3, err := old.Encode()
	if err != nil {
		t.Fatal(err)
	}
	v2 := version2(t, v3)
	if _, err := store.Put(ctx, "tl/orders-0/manifest", bytes.NewReader(v2), int64(len(v2)), objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	m, err := tiered.ReadManifest(ctx, store, "tl/orders-0")
	if err != nil || !reflect.DeepEqual(m.Segments, old.Segments) || m.Generation != 7 {
		t.Fatalf("the version 2 manifest reads as %d segments, generation %d (%v)", len(m.Segments), m.Generation, err)
	}
	p := open(t, filepath.Join(t.TempDir(), "orders-0"), store, 2, cfg(t))
	defer p.Close()
	next := synthSegments(5000*100, 1, time.Now().UnixMilli())
	if err := tiered.CommitSegments(ctx, p, next); err != nil {
		t.Fatal(err)
	}
	head, err := store.ReadAll(ctx, "tl/orders-0/manifest", 0, -1)
	if err != nil {
		t.Fatal(err)
	}
	if v := binary.BigEndian.Uint16(head[4:]); v != manifest.Version {
		t.Fatalf("the manifest is version %d after a commit", v)
	}
	h, err := manifest.DecodeHead(head)
	if err != nil || len(h.Parts) == 0 || len(h.Own) > manifest.LeafSegments {
		t.Fatalf("the upgraded head names %d parts and holds %d segments (%v)", len(h.Parts), len(h.Own), err)
	}
	m, err = tiered.ReadManifest(ctx, store, "tl/orders-0")
	if err != nil || !reflect.DeepEqual(m.Segments, append(old.Segments, next...)) {
		t.Fatalf("the upgraded manifest reads as %d segments (%v)", len(m.Segments), err)
	}
	t.Logf("5,001 segments: a version 2 manifest of %d bytes became a head of %d bytes and %d parts", len(v2), len(head), len(h.Parts))
}

// TestMissingPartIsCorrupt: a head whose part the bucket lost is a
// corrupt manifest, never a missing one: a reader fails with
// manifest.ErrCorrupt (not objstore.ErrNotFound, which would read as a
// partition without a manifest), and a new leader commits nothing over it.
func TestMissingPartIsCorrupt(t *testing.T) {
	store := objstore.New(mem.New(), "mem://missing-part", objstore.Options{})
	p := open(t, filepath.Join(t.TempDir(), "orders-0"), store, 1, cfg(t))
	if err := tiered.CommitSegments(ctx, p, synthSegments(0, 40, time.Now().UnixMilli())); err != nil {
		t.Fatal(err)
	}
	parts := manifestOf(t, p).Parts
	p.Close()
	if len(parts) == 0 {
		t.Fatal("40 segments and no part")
	}
	if err := store.Delete(ctx, "tl/orders-0/"+parts[0].Name()); err != nil {
		t.Fatal(err)
	}
	head, err := store.ReadAll(ctx, "tl/orders-0/manifest", 0, -1)
	if err != nil {
		t.Fatal(err)
	}
	_, err = tiered.ReadManifest(ctx, store, "tl/orders-0")
	if !errors.Is(err, manifest.ErrCorrupt) || errors.Is(err, objstore.ErrNotFound) || !strings.Contains(err.Error(), parts[0].Name()) {
		t.Fatalf("reading a manifest whose part is gone: %v", err)
	}
	l, err := local.Open(filepath.Join(t.TempDir(), "orders-0"), local.Options{Config: cfg(t), LogStartOffset: -1, HighWatermark: -1})
	if err != nil {
		t.Fatal(err)
	}
	// A new leader opens on the head alone; its claim PUTs the head with
	// the same references; the commit that needs the part fails.
	q, err := tiered.Open(ctx, l, tiered.Options{Store: store, Prefix: "tl/orders-0", LeaderEpoch: 2})
	if err != nil {
		t.Fatalf("a new leader's open: %v", err)
	}
	defer q.Close()
	for _, commit := range []func(context.Context, *tiered.Partition, []manifest.Segment) error{tiered.CommitSegments, tiered.AppendSegments} {
		err = commit(ctx, q, synthSegments(40*100, 1, time.Now().UnixMilli()))
		if !errors.Is(err, manifest.ErrCorrupt) || !strings.Contains(err.Error(), parts[0].Name()) {
			t.Fatalf("a new leader's commit over a manifest whose part is gone: %v", err)
		}
	}
	now, err := store.ReadAll(ctx, "tl/orders-0/manifest", 0, -1)
	if err != nil {
		t.Fatal(err)
	}
	before, err1 := manifest.DecodeHead(head)
	after, err2 := manifest.DecodeHead(now)
	if err1 != nil || err2 != nil || !reflect.DeepEqual(before.Parts, after.Parts) || !reflect.DeepEqual(before.Own, after.Own) {
		t.Fatalf("the manifest's parts or segments changed (%v, %v)", err1, err2)
	}
}

// TestGCKeepsPartsABackupNames: parts a carry replaced are no longer
// named by the head, but the previous generation's backup names them and
// a restore may commit it again: gc keeps them until that backup goes.
func TestGCKeepsPartsABackupNames(t *testing.T) {
	store := objstore.New(mem.New(), "mem://backup-parts", objstore.Options{})
	p := open(t, filepath.Join(t.TempDir(), "orders-0"), store, 1, cfg(t))
	defer p.Close()
	ts := time.Now().UnixMilli()
	// 16 × 16 segments, one tier 0 part at a time: the commit that makes
	// the 16th carries them into one tier 1 part.
	next := int64(0)
	commit := func(n int) {
		t.Helper()
		if err := tiered.CommitSegments(ctx, p, synthSegments(next*100, n, ts)); err != nil {
			t.Fatal(err)
		}
		next += int64(n)
	}
	for range 17 {
		commit(16)
	}
	m := manifestOf(t, p)
	if m.Parts[0].Tier != 1 {
		t.Fatalf("no carry: parts %+v", m.Parts)
	}
	gc := func() []string {
		t.Helper()
		gone, err := tiered.GC(ctx, store, "tl/orders-0", tiered.GCOptions{Grace: time.Nanosecond, Force: true})
		if err != nil {
			t.Fatal(err)
		}
		return gone
	}
	before := len(partKeys(t, store))
	gc()
	if got := len(partKeys(t, store)); got != before {
		t.Fatalf("gc removed %d parts a kept backup names", before-got)
	}
	commit(1)
	commit(1) // the backups of the generations before the carry are gone
	gc()
	named := map[string]bool{}
	for _, part := range manifestOf(t, p).Parts {
		named["tl/orders-0/"+part.Name()] = true
	}
	if left := partKeys(t, store); !reflect.DeepEqual(left, named) {
		t.Fatalf("after the backups rotated gc left %d parts, the head names %d", len(left), len(named))
	}
}

// TestPartsFromTheDiskCache: a Backend keeps the parts it put or read in
// its disk cache of remote indexes, so a restart reads the head from the
// bucket and its parts from the disk; a damaged cached part is read from
// the bucket again (and cached anew).
func TestPartsFromTheDiskCache(t *testing.T) {
	store := objstore.New(mem.New(), "mem://parts-cache", objstore.Options{})
	dir := t.TempDir()
	openAttached := func() (*tiered.Backend, *tiered.Partition) {
		t.Helper()
		b, err := tiered.OpenBackend(dir, tiered.BackendOptions{Store: store, Prefix: "tl"})
		if err != nil {
			t.Fatal(err)
		}
		bp, err := b.Open(ctx, "orders", 0, cfg(t, "remote.storage.enable", "true"))
		if err != nil {
			t.Fatal(err)
		}
		p := bp.(*tiered.Partition)
		if err := p.Attach(ctx); err != nil {
			t.Fatal(err)
		}
		return b, p
	}
	b, p := openAttached()
	if err := p.BecomeLeader(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if err := tiered.CommitSegments(ctx, p, synthSegments(0, 300, time.Now().UnixMilli())); err != nil {
		t.Fatal(err)
	}
	want := manifestOf(t, p).Segments
	parts := len(manifestOf(t, p).Parts)
	b.Close()
	// A new Backend over the same directory, as a restart: the parts the
	// writer put are in its disk cache.
	b, p = openAttached()
	if !reflect.DeepEqual(manifestOf(t, p).Segments, want) {
		t.Fatal("the manifest read through the disk cache differs")
	}
	if got := b.Metrics().ManifestPartReads.Load(); got != 0 {
		t.Fatalf("a restart read %d parts from the bucket, want 0 (the disk cache holds them)", got)
	}
	b.Close()
	// Damage every cached part: each is read from the bucket again.
	cacheDir := filepath.Join(dir, tiered.RemoteIndexCacheDir)
	ents, err := os.ReadDir(cacheDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), manifest.PartSuffix) {
			if err := os.WriteFile(filepath.Join(cacheDir, e.Name()), []byte("damaged"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	b, p = openAttached()
	if got := b.Metrics().ManifestPartReads.Load(); got != 0 {
		t.Fatalf("attaching read %d parts, want 0 (a partition keeps its head; parts load when needed)", got)
	}
	if !reflect.DeepEqual(manifestOf(t, p).Segments, want) {
		t.Fatal("the manifest read past damaged cached parts differs")
	}
	if got := b.Metrics().ManifestPartReads.Load(); got != int64(parts) {
		t.Fatalf("with the cached parts damaged, %d were read from the bucket, want %d", got, parts)
	}
	b.Close()
	b, p = openAttached()
	defer b.Close()
	manifestOf(t, p)
	if got := b.Metrics().ManifestPartReads.Load(); got != 0 {
		t.Fatalf("after the damaged parts were read again, a restart read %d from the bucket", got)
	}
}

// BenchmarkCommitLongPartition commits one segment after 100,000 (a
// layered manifest, its parts cached), the way an upload commits: from
// the head and the parts a carry merges (append), and through the whole
// manifest as uploads did before (whole). ns and bytes allocated a
// commit; the PUTs go to an in-memory bucket.
func BenchmarkCommitLongPartition(b *testing.B) {
	for _, how := range []string{"whole", "append"} {
		b.Run(how, func(b *testing.B) {
			store := objstore.New(mem.New(), "mem://long", objstore.Options{})
			p := open(b, filepath.Join(b.TempDir(), "orders-0"), store, 1, cfg(b, "retention.ms", "-1"))
			defer p.Close()
			now := time.Now().UnixMilli()
			const n = 100_000
			for i := 0; i < n; i += 10_000 {
				if err := tiered.AppendSegments(ctx, p, synthSegments(int64(i)*100, 10_000, now)); err != nil {
					b.Fatal(err)
				}
			}
			commit := tiered.AppendSegments
			if how == "whole" {
				commit = tiered.CommitSegments
			}
			i := n
			b.ReportAllocs()
			for b.Loop() {
				if err := commit(ctx, p, synthSegments(int64(i)*100, 1, now)); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}
