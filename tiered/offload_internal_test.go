package tiered

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/local"
	"github.com/tierlog/tierlog/manifest"
	"github.com/tierlog/tierlog/objstore"
	"github.com/tierlog/tierlog/objstore/mem"
	"github.com/tierlog/tierlog/record"
)

// TestGroupLen: Offload's groups take UploadConcurrency segments
// whatever their size, and more small ones, up to four times that,
// within 1 GiB; a copier's turn takes one segment whatever its size, and
// up to four within 128 MiB.
func TestGroupLen(t *testing.T) {
	pending := func(n int, size int64) []pendingSegment {
		out := make([]pendingSegment, n)
		for i := range out {
			out[i].size = size
		}
		return out
	}
	offload := func(concurrency int) func([]pendingSegment) int {
		return func(p []pendingSegment) int {
			return groupLen(p, concurrency, maxGroupSegments*concurrency, groupBytes)
		}
	}
	turn := func(p []pendingSegment) int { return groupLen(p, 1, maxTurnSegments, turnBytes) }
	for _, tc := range []struct {
		name    string
		groupOf func([]pendingSegment) int
		pending []pendingSegment
		want    int
	}{
		{"fewer than a group", offload(4), pending(3, 1<<20), 3},
		{"small segments", offload(4), pending(40, 1<<20), 16},
		{"within 1 GiB", offload(4), pending(40, 100<<20), 10},
		{"large segments", offload(4), pending(40, 1<<30), 4},
		{"one at a time", offload(1), pending(40, 1<<20), 4},
		{"a turn of small segments", turn, pending(40, 1<<20), 4},
		{"a turn within 128 MiB", turn, pending(40, 50<<20), 2},
		{"a turn of a large segment", turn, pending(40, 1<<30), 1},
		{"a turn of the last segment", turn, pending(1, 1<<20), 1},
	} {
		if got := tc.groupOf(tc.pending); got != tc.want {
			t.Errorf("%s: a group of %d; want %d", tc.name, got, tc.want)
		}
	}
}

// TestUploadStopsItsScanWhenCancelled: a segment's validation scan reads
// up to its whole size before its PUT; a cancelled upload stops it with
// the context's error, and that is not a refusal of a damaged segment.
func TestUploadStopsItsScanWhenCancelled(t *testing.T) {
	conf, err := backend.ParseConfig(map[string]string{"segment.bytes": "65536"})
	if err != nil {
		t.Fatal(err)
	}
	l, err := local.Open(filepath.Join(t.TempDir(), "orders-0"), local.Options{Config: conf, LogStartOffset: -1, HighWatermark: -1})
	if err != nil {
		t.Fatal(err)
	}
	p, err := Open(context.Background(), l, Options{Store: objstore.New(mem.New(), "mem://scan", objstore.Options{}), Prefix: "tl/orders-0", LeaderEpoch: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var b record.Builder
	for range 20 {
		b.Reset(record.NewBatchHeader())
		for range 40 {
			b.Append(1_700_000_000_000, nil, bytes.Repeat([]byte("v"), 200), nil)
		}
		batch, _ := b.Build()
		if _, err := p.Append(context.Background(), append([]byte(nil), batch...), backend.AppendOptions{AssignOffsets: true, LeaderEpoch: 1}); err != nil {
			t.Fatal(err)
		}
	}
	si := p.local.SegmentInfos()[0]
	if si.Active {
		t.Fatal("no closed segment")
	}
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	h, err := p.segs.OpenSegment(si.BaseOffset)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	var seg manifest.Segment
	err = p.scanForUpload(cancelled, h, 0, &seg, nil)
	if !errors.Is(err, context.Canceled) || errors.Is(err, backend.ErrCorruptRecord) {
		t.Fatalf("scan under a cancelled context: %v; want context.Canceled, not ErrCorruptRecord", err)
	}
	if seg.Records != 0 {
		t.Fatalf("the scan went on: %d records counted", seg.Records)
	}
	_, err = p.upload(cancelled, pendingSegment{base: si.BaseOffset, from: si.BaseOffset, next: si.NextOffset, size: si.Size}, [8]byte{1})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("upload under a cancelled context: %v; want context.Canceled", err)
	}
	if n := p.metrics.UploadsRefused.Load(); n != 0 {
		t.Fatalf("%d uploads refused; a cancelled one is not", n)
	}
}
