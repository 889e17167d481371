package local

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/record"
	"github.com/tierlog/tierlog/testing/faultfs"
	"github.com/tierlog/tierlog/vfs"
)

// batchOffsets reads every batch of l and returns their base offsets.
func batchOffsets(t *testing.T, l *Log) []int64 {
	t.Helper()
	var out []int64
	off := l.Offsets().LogStart
	for off < l.Offsets().LogEnd {
		rs, err := l.Read(context.Background(), off, backend.ReadOptions{MaxBytes: 1, MinOneBatch: true}) // batch by batch: every offset looked up
		if err != nil {
			t.Fatalf("read at %d: %v", off, err)
		}
		var buf bytes.Buffer
		if _, err := rs.WriteTo(&buf); err != nil {
			t.Fatal(err)
		}
		rs.Close()
		data := buf.Bytes()
		if len(data) == 0 {
			t.Fatalf("nothing at %d below the log end", off)
		}
		for len(data) > 0 {
			b, err := record.Parse(data)
			if err != nil {
				t.Fatal(err)
			}
			if err := b.Validate(); err != nil {
				t.Fatal(err)
			}
			out = append(out, b.BaseOffset())
			off = b.NextOffset()
			data = data[b.Size():]
		}
	}
	return out
}

func copyDir(t *testing.T, from, to string) {
	t.Helper()
	ents, err := os.ReadDir(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(to, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		data, err := os.ReadFile(filepath.Join(from, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(to, e.Name()), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// writeCleaned writes a replacement of segs holding their batches except
// those whose base offset drop says to remove (never the last one).
func writeCleaned(t *testing.T, c *Cleaning, l *Log, segs []SegmentInfo, drop func(int64) bool) (*Replacement, []int64) {
	t.Helper()
	var out bytes.Buffer
	var kept []int64
	for i, si := range segs {
		r, err := l.Segments().OpenSegment(si.BaseOffset)
		if err != nil {
			t.Fatal(err)
		}
		sc := record.NewScanner(r, 0, r.Size(), record.ScanOptions{})
		for sc.Next() {
			e := sc.Entry()
			last := i == len(segs)-1 && e.Position+e.Size == r.Size()
			if !last && drop(e.BaseOffset) {
				continue
			}
			kept = append(kept, e.BaseOffset)
			out.Write(e.Data)
		}
		r.Close()
		if sc.Err() != nil {
			t.Fatal(sc.Err())
		}
	}
	var bases []int64
	for _, si := range segs {
		bases = append(bases, si.BaseOffset)
	}
	r, err := c.NewReplacement(bases)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Write(out.Bytes()); err != nil {
		t.Fatal(err)
	}
	return r, kept
}

func newCleanTestLog(t *testing.T, dir string, fsys vfs.FS, kv ...string) *Log {
	t.Helper()
	m := map[string]string{"segment.bytes": "2000", "file.delete.delay.ms": "0", "index.interval.bytes": "200"}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	cfg, err := backend.ParseConfig(m)
	if err != nil {
		t.Fatal(err)
	}
	l, err := Open(dir, Options{Config: cfg, HighWatermark: -1, FS: fsys})
	if err != nil {
		t.Fatal(err)
	}
	var b record.Builder
	for i := range 60 {
		b.Reset(record.NewBatchHeader())
		b.Append(int64(i), []byte("k"), bytes.Repeat([]byte{byte(i)}, 100), nil)
		b.Append(int64(i), []byte("k"), bytes.Repeat([]byte{byte(i)}, 50), nil)
		batch, err := b.Build()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := l.Append(context.Background(), batch, backend.AppendOptions{AssignOffsets: true}); err != nil {
			t.Fatal(err)
		}
	}
	return l
}

// TestReplaceSegmentsCrashAtEveryStep snapshots the directory before
// every operation that changes the disk during a replacement's commit (a
// crash there leaves exactly those files) and at a torn .cleaned file, and
// checks each reopens holding either the old batches or the new ones,
// never a mix.
func TestReplaceSegmentsCrashAtEveryStep(t *testing.T) {
	dir := t.TempDir()
	ffs := faultfs.New(vfs.Default)
	l := newCleanTestLog(t, filepath.Join(dir, "live"), ffs)
	defer l.Close()
	if err := l.Flush(); err != nil {
		t.Fatal(err)
	}
	before := batchOffsets(t, l)
	segs := l.SegmentInfos()
	if len(segs) < 5 {
		t.Fatalf("want at least 5 segments, have %d", len(segs))
	}
	group := segs[1:4]
	bases := []int64{group[0].BaseOffset, group[1].BaseOffset, group[2].BaseOffset}
	repl, kept := writeCleaned(t, l.Segments().BeginCleaning(), l, group, func(o int64) bool { return o%4 == 0 })
	cleanedPath := repl.Path()
	var after []int64
	for _, o := range before {
		if o < group[0].BaseOffset || o >= group[2].NextOffset || slices.Contains(kept, o) {
			after = append(after, o)
		}
	}
	if len(after) == len(before) {
		t.Fatal("the cleaned file drops nothing; the test would prove nothing")
	}

	// A reader that started before the swap finishes on the old files.
	oldRead, err := l.Read(context.Background(), group[0].BaseOffset, backend.ReadOptions{MaxBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer oldRead.Close()

	var snaps []string
	ffs.SetHook(func(op faultfs.Op) error {
		if op.Mutates() {
			snap := filepath.Join(dir, "snap", fmt.Sprintf("%03d-%s", len(snaps), op.Kind))
			copyDir(t, l.Dir(), snap)
			snaps = append(snaps, snap)
		}
		return nil
	})
	err = repl.Commit()
	ffs.SetHook(nil)
	if err != nil {
		t.Fatal(err)
	}
	_ = bases
	if got := batchOffsets(t, l); !slices.Equal(got, after) {
		t.Fatalf("after the replacement the log holds batches %v, want %v", got, after)
	}
	var buf bytes.Buffer
	if _, err := oldRead.WriteTo(&buf); err != nil {
		t.Fatalf("a read begun before the replacement failed: %v", err)
	}
	if first, err := record.Parse(buf.Bytes()); err != nil || first.BaseOffset() != group[0].BaseOffset {
		t.Fatalf("the read begun before the replacement did not see the old batches: %v", err)
	}
	if len(snaps) < 10 {
		t.Fatalf("only %d steps observed", len(snaps))
	}

	// The process died while writing .cleaned: a torn file.
	torn := filepath.Join(dir, "snap", "torn")
	copyDir(t, snaps[0], torn)
	cleaned := filepath.Join(torn, filepath.Base(cleanedPath))
	st, err := os.Stat(cleaned)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(cleaned, st.Size()/2); err != nil {
		t.Fatal(err)
	}
	snaps = append(snaps, torn)

	cfg := l.Config()
	for _, snap := range snaps {
		r, err := Open(snap, Options{Config: cfg, HighWatermark: -1})
		if err != nil {
			t.Fatalf("%s: reopen: %v", filepath.Base(snap), err)
		}
		got := batchOffsets(t, r)
		if !slices.Equal(got, before) && !slices.Equal(got, after) {
			t.Fatalf("%s: reopened log holds batches %v: neither the old %v nor the new %v", filepath.Base(snap), got, before, after)
		}
		ents, _ := os.ReadDir(snap)
		for _, e := range ents {
			if filepath.Ext(e.Name()) == SwapSuffix || filepath.Ext(e.Name()) == DeletedSuffix || filepath.Ext(e.Name()) == CleanedSuffix {
				t.Fatalf("%s: %s left behind after recovery", filepath.Base(snap), e.Name())
			}
		}
		r.Close()
	}
}

func TestReplaceSegmentsRejectsStaleOrShortFiles(t *testing.T) {
	l := newCleanTestLog(t, t.TempDir(), nil)
	defer l.Close()
	segs := l.SegmentInfos()
	before := batchOffsets(t, l)

	// A cleaned file that ends before the last replaced segment's end
	// would lose offsets: rejected, and the log is unchanged.
	c := l.Segments().BeginCleaning()
	r, _ := writeCleaned(t, c, l, segs[:1], func(int64) bool { return false })
	r.bases = append(r.bases, segs[1].BaseOffset)
	if err := r.Commit(); err == nil {
		t.Fatal("a cleaned file covering one segment replaced two")
	}
	if _, err := os.Stat(r.Path()); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a refused replacement left %s behind: %v", r.Path(), err)
	}
	// Segments that are no longer the log's: ErrSegmentsChanged.
	r, _ = writeCleaned(t, c, l, segs[:1], func(int64) bool { return false })
	r.bases[0]++
	if err := r.Commit(); !errors.Is(err, ErrSegmentsChanged) {
		t.Fatalf("replacing a segment that does not exist: %v", err)
	}
	last := segs[len(segs)-1]
	r, err := c.NewReplacement([]int64{last.BaseOffset})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Commit(); !errors.Is(err, ErrSegmentsChanged) {
		t.Fatalf("replacing the active segment: %v", err)
	}
	if got := batchOffsets(t, l); !slices.Equal(got, before) {
		t.Fatalf("a rejected replacement changed the log: %v", got)
	}
	// A truncation since the cleaner began: its map may name offsets that
	// are gone, so its file must not go in.
	c = l.Segments().BeginCleaning()
	if err := l.TruncateTo(l.Offsets().LogEnd - 1); err != nil {
		t.Fatal(err)
	}
	before = batchOffsets(t, l)
	r, _ = writeCleaned(t, c, l, segs[:1], func(int64) bool { return false })
	if err := r.Commit(); !errors.Is(err, ErrSegmentsChanged) {
		t.Fatalf("replacing after a truncation: %v", err)
	}
	if got := batchOffsets(t, l); !slices.Equal(got, before) {
		t.Fatalf("a rejected replacement changed the log: %v", got)
	}
}

// TestReplaceSegmentsRejectsFilesOutOfRange: a cleaned file must hold only
// batches of the segments it replaces, in rising offsets, the last of
// them in the last segment's range (so that recovery knows where the
// replacement ends); only a replacement of one segment may be empty.
// Anything else is ErrBadReplacement and changes nothing.
func TestReplaceSegmentsRejectsFilesOutOfRange(t *testing.T) {
	l := newCleanTestLog(t, t.TempDir(), nil, "cleanup.policy", "compact")
	defer l.Close()
	segs := l.SegmentInfos()
	before := batchOffsets(t, l)
	c := l.Segments().BeginCleaning()
	reject := func(what string, bases []int64, data []byte) {
		t.Helper()
		r, err := c.NewReplacement(bases)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := r.Write(data); err != nil {
			t.Fatal(err)
		}
		if err := r.Commit(); !errors.Is(err, ErrBadReplacement) {
			t.Fatalf("%s: %v", what, err)
		}
		if got := batchOffsets(t, l); !slices.Equal(got, before) {
			t.Fatalf("%s: a rejected replacement changed the log: %v", what, got)
		}
		if _, err := os.Stat(r.Path()); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("%s: a refused replacement left %s behind: %v", what, r.Path(), err)
		}
	}
	segBatches := func(s SegmentInfo) [][]byte {
		h, err := l.Segments().OpenSegment(s.BaseOffset)
		if err != nil {
			t.Fatal(err)
		}
		defer h.Close()
		var out [][]byte
		sc := record.NewScanner(h, 0, h.Size(), record.ScanOptions{})
		for sc.Next() {
			out = append(out, slices.Clone(sc.Entry().Data))
		}
		if sc.Err() != nil {
			t.Fatal(sc.Err())
		}
		return out
	}
	first, second := segBatches(segs[0]), segBatches(segs[1])
	// The next segment's last batch, in a file replacing the one before
	// it (the shape a cleaner that kept a group's last batch in front
	// of its own produced).
	reject("a batch of the next segment", []int64{segs[0].BaseOffset}, second[len(second)-1])
	reject("a batch below the first base", []int64{segs[1].BaseOffset}, slices.Concat(first[len(first)-1], second[0]))
	reject("offsets that go back", []int64{segs[0].BaseOffset}, slices.Concat(first[1], first[0]))
	reject("nothing of the last segment", []int64{segs[0].BaseOffset, segs[1].BaseOffset}, first[0])
	reject("an empty file for two segments", []int64{segs[0].BaseOffset, segs[1].BaseOffset}, nil)

	// A file that ends before the next segment's base (a compacted
	// segment whose tail was removed) fits, and so does an empty one for
	// one segment.
	r, err := c.NewReplacement([]int64{segs[0].BaseOffset, segs[1].BaseOffset})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Write(slices.Concat(first[0], second[0])); err != nil {
		t.Fatal(err)
	}
	if err := r.Commit(); err != nil {
		t.Fatalf("a file ending inside the last segment: %v", err)
	}
	if r, err = c.NewReplacement([]int64{segs[2].BaseOffset}); err != nil {
		t.Fatal(err)
	}
	if err := r.Commit(); err != nil {
		t.Fatalf("an empty file for one segment: %v", err)
	}
	var want []int64
	for _, b := range before {
		if b == record.Batch(first[0]).BaseOffset() || b == record.Batch(second[0]).BaseOffset() || b >= segs[3].BaseOffset {
			want = append(want, b)
		}
	}
	if got := batchOffsets(t, l); !slices.Equal(got, want) {
		t.Fatalf("after the replacements the log holds %v, want %v", got, want)
	}
}

// TestEmptySwapReplacesItsSegment: a crash after an empty cleaned file
// became <base>.log.swap leaves the old segment's files beside it;
// recovery replaces that segment (its .log and indexes), and nothing else.
func TestEmptySwapReplacesItsSegment(t *testing.T) {
	dir := t.TempDir()
	l := newCleanTestLog(t, dir, nil, "cleanup.policy", "compact")
	segs := l.SegmentInfos()
	before := batchOffsets(t, l)
	cfg, end := l.Config(), l.Offsets().LogEnd
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	gone := segs[1]
	swap := filepath.Join(dir, FileName(gone.BaseOffset, LogSuffix)+SwapSuffix)
	if err := os.WriteFile(swap, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	// Flushed to the end before the crash: recovery scans no segment.
	r, err := Open(dir, Options{Config: cfg, HighWatermark: -1, RecoveryPoint: end})
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	defer r.Close()
	for _, suf := range []string{IndexSuffix, TimeIndexSuffix} {
		if b, err := os.ReadFile(filepath.Join(dir, FileName(gone.BaseOffset, suf))); err == nil && len(b) > 0 {
			t.Fatalf("the replaced segment's %s survived recovery (%d bytes)", suf, len(b))
		}
	}
	var want []int64
	for _, b := range before {
		if b < gone.BaseOffset || b >= gone.NextOffset {
			want = append(want, b)
		}
	}
	if got := batchOffsets(t, r); !slices.Equal(got, want) {
		t.Fatalf("after recovery the log holds %v, want %v", got, want)
	}
	after := r.SegmentInfos()
	if len(after) != len(segs) || after[1].BaseOffset != gone.BaseOffset || after[1].Size != 0 {
		t.Fatalf("after recovery the segments are %+v, want %d of them with an empty %d", after, len(segs), gone.BaseOffset)
	}
	if _, _, _, err := r.OffsetForTimestamp(context.Background(), 0); err != nil {
		t.Fatal(err)
	}
}
