package tiered_test

import (
	"bytes"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/local"
	"github.com/tierlog/tierlog/manifest"
	"github.com/tierlog/tierlog/objstore"
	"github.com/tierlog/tierlog/objstore/mem"
	"github.com/tierlog/tierlog/record"
	"github.com/tierlog/tierlog/tiered"
)

// TestCleanedSegmentIndexesMatchLocal: the offset and time indexes of a
// segment the bucket's cleaner wrote (merged from several, records
// removed) are, byte for byte, those a local log writes for the same
// batches, appended one by one as a follower and rolled.
func TestCleanedSegmentIndexesMatchLocal(t *testing.T) {
	store := objstore.New(mem.New(), "mem://compact-index", objstore.Options{})
	dir := filepath.Join(t.TempDir(), "users-0")
	c := cfg(t, "cleanup.policy", "compact", "remote.storage.enable", "true", "segment.bytes", "4096",
		"index.interval.bytes", "300", "local.retention.bytes", "0", "file.delete.delay.ms", "0")
	epoch := int32(1)
	p := open(t, dir, store, epoch, c)
	defer p.Close()
	m := &compactModel{recs: map[int64]modelRecord{}}
	w := &compactWriter{t: t, rng: rand.New(rand.NewPCG(3, 4)), model: m, keys: 300, epoch: &epoch}
	for range 400 {
		w.batch(p, 1+w.rng.IntN(6), false, false)
	}
	if _, err := p.Offload(ctx); err != nil {
		t.Fatal(err)
	}
	before := map[[8]byte]bool{}
	for _, s := range manifestOf(t, p).Segments {
		before[s.ID] = true
	}
	c2 := c
	c2.SegmentBytes = 16384 // groups of about four segments merge
	if err := p.SetConfig(c2); err != nil {
		t.Fatal(err)
	}
	st, err := p.CompactRemote(ctx, tiered.CompactOptions{Force: true, MemoryBytes: 1 << 20, ScratchDir: t.TempDir()})
	if err != nil || st.Merged == 0 || st.RecordsRemoved == 0 {
		t.Fatalf("compact: %+v, %v", st, err)
	}
	checked := 0
	for _, seg := range manifestOf(t, p).Segments {
		if before[seg.ID] {
			continue
		}
		read := func(suf string) []byte {
			b, err := store.ReadAll(ctx, "tl/orders-0/"+seg.Name(suf), 0, -1)
			if err != nil {
				t.Fatal(err)
			}
			return b
		}
		data, idx, tidx := read(manifest.LogSuffix), read(manifest.IndexSuffix), read(manifest.TimeIndexSuffix)
		l, err := local.Open(filepath.Join(t.TempDir(), "copy-0"), local.Options{
			Config: cfg(t, "segment.bytes", "1073741824", "index.interval.bytes", "300"), LogStartOffset: -1, HighWatermark: -1})
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Segments().StartAt(ctx, seg.BaseOffset, nil); err != nil {
			t.Fatal(err)
		}
		sc := record.NewScanner(bytes.NewReader(data), 0, int64(len(data)), record.ScanOptions{Validate: true})
		for sc.Next() {
			if _, err := l.Append(ctx, append([]byte(nil), sc.Entry().Data...), backend.AppendOptions{}); err != nil {
				t.Fatalf("segment %d: append the batch at %d: %v", seg.BaseOffset, sc.Entry().BaseOffset, err)
			}
		}
		if sc.Err() != nil {
			t.Fatal(sc.Err())
		}
		if err := l.Roll(); err != nil {
			t.Fatal(err)
		}
		h, err := l.Segments().OpenSegment(seg.BaseOffset)
		if err != nil {
			t.Fatal(err)
		}
		lidx, err := h.IndexBytes()
		if err != nil {
			t.Fatal(err)
		}
		ltidx, err := h.TimeIndexBytes()
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(lidx, idx) || !bytes.Equal(ltidx, tidx) {
			t.Fatalf("segment %d..%d: the cleaner's indexes (%d, %d bytes) differ from a local log's (%d, %d bytes)\n% x\n% x\n% x\n% x",
				seg.BaseOffset, seg.LastOffset, len(idx), len(tidx), len(lidx), len(ltidx), idx, lidx, tidx, ltidx)
		}
		h.Close()
		l.Close()
		checked++
	}
	if checked == 0 {
		t.Fatal("the round wrote no segment")
	}
	checkCompacted(t, p, m, "after the round")
}
