package local_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/index"
	"github.com/tierlog/tierlog/local"
	"github.com/tierlog/tierlog/record"
)

// budgetLog writes segs indexed segments of 16 batches and opens them with
// a bound of maxOpen segments' files and of indexBytes of in-memory
// indexes (-1: no bound at all, every file kept open).
func budgetLog(t *testing.T, dir string, segs, maxOpen int, indexBytes int64) *local.Log {
	t.Helper()
	end := int64(segs * 16)
	opts := local.Options{Config: backend.DefaultConfig(), CleanShutdown: true, RecoveryPoint: end, LogStartOffset: -1, HighWatermark: end, MaxOpenSegmentFiles: maxOpen}
	var l *local.Log
	var err error
	if maxOpen < 0 {
		l, err = local.Open(dir, opts)
	} else {
		l, err = local.OpenWithIndexBounds(dir, opts, indexBytes, 8192)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// batchBytes reads the batch holding off.
func batchBytes(l *local.Log, off int64) ([]byte, error) {
	r, err := l.Read(ctx, off, backend.ReadOptions{MaxBytes: 1, MinOneBatch: true})
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	_, err = local.ReadAll(r, &buf)
	return buf.Bytes(), err
}

// TestEvictedSegmentsReadTheSame: random reads over many more segments
// than the bound, with the evicted segments' offset indexes kept in memory
// and with them dropped at once, give the bytes a log keeping every file
// open gives, and keep at most the bound's descriptors and mappings open.
func TestEvictedSegmentsReadTheSame(t *testing.T) {
	const segs, maxOpen = 120, 6
	dir := filepath.Join(t.TempDir(), "t-0")
	writeIndexedSegments(t, dir, segs, 16)
	all := budgetLog(t, dir, segs, -1, 0)
	want := make([][]byte, segs*16)
	for off := range want {
		b, err := batchBytes(all, int64(off))
		if err != nil {
			t.Fatal(err)
		}
		want[off] = b
	}
	all.Close()
	for _, c := range []struct {
		name       string
		indexBytes int64
		drops      bool
	}{{"indexes kept", 64 << 20, false}, {"indexes dropped", 1, true}} {
		t.Run(c.name, func(t *testing.T) {
			l := budgetLog(t, dir, segs, maxOpen, c.indexBytes)
			fds, maps := openFDs(t), mappingsUnder(t, dir)
			rng := rand.New(rand.NewPCG(1, 2))
			for range 4 * len(want) {
				off := rng.Int64N(int64(len(want)))
				got, err := batchBytes(l, off)
				if err != nil {
					t.Fatalf("read %d: %v", off, err)
				}
				if !bytes.Equal(got, want[off]) {
					t.Fatalf("read %d: %d bytes differ from the %d of a log keeping every file open", off, len(got), len(want[off]))
				}
				if n := openFDs(t) - fds; n > maxOpen+2 {
					t.Fatalf("%d more descriptors open, with a bound of %d segments", n, maxOpen)
				}
				if n := mappingsUnder(t, dir) - maps; n > 3*maxOpen {
					t.Fatalf("%d more mappings, with a bound of %d segments", n, maxOpen)
				}
			}
			if l.BudgetEvictions() == 0 {
				t.Fatal("no segment was evicted")
			}
			if drops := l.BudgetIndexDrops() > 0; drops != c.drops {
				t.Fatalf("%d in-memory indexes dropped; want some: %v", l.BudgetIndexDrops(), c.drops)
			}
		})
	}
}

// TestIndexDamagedAfterEviction: an offset index damaged on disk while its
// segment is evicted. Kept in memory, the index is what the file held when
// it was read and checked (a sealed segment's files do not change while
// the log holds it): reads serve the right batch. Dropped, it is read
// again on the next use and gives what a damaged index gave before indexes
// were kept: an entry pointing inside a batch or at another batch is
// backend.ErrCorruptRecord naming the segment, never another batch; a cut
// index only has fewer entries and reads the right batches.
func TestIndexDamagedAfterEviction(t *testing.T) {
	const segs, maxOpen, victim = 40, 2, 5
	dir := filepath.Join(t.TempDir(), "t-0")
	writeIndexedSegments(t, dir, segs, 16)
	ixPath := filepath.Join(dir, local.FileName(victim*16, local.IndexSuffix))
	orig, err := os.ReadFile(ixPath)
	if err != nil {
		t.Fatal(err)
	}
	if len(orig) < 3*index.OffsetEntrySize {
		t.Fatalf("%s has %d entries; the test needs 3", ixPath, len(orig)/index.OffsetEntrySize)
	}
	damages := []struct {
		name    string
		damage  func([]byte) []byte
		corrupt bool // once read again: ErrCorruptRecord for some offsets
	}{
		{"inside a batch", func(ix []byte) []byte {
			binary.BigEndian.PutUint32(ix[12:], binary.BigEndian.Uint32(ix[12:])+7)
			return ix
		}, true},
		{"another batch's offset", func(ix []byte) []byte {
			binary.BigEndian.PutUint32(ix[8:], binary.BigEndian.Uint32(ix[8:])-2)
			return ix
		}, true},
		{"cut short", func(ix []byte) []byte { return ix[:index.OffsetEntrySize+3] }, false},
	}
	for _, d := range damages {
		for _, keep := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/kept=%v", d.name, keep), func(t *testing.T) {
				if err := os.WriteFile(ixPath, orig, 0o644); err != nil {
					t.Fatal(err)
				}
				indexBytes := int64(64 << 20)
				if !keep {
					indexBytes = 1
				}
				l := budgetLog(t, dir, segs, maxOpen, indexBytes)
				want := map[int64][]byte{}
				for off := int64(victim * 16); off < victim*16+16; off++ {
					b, err := batchBytes(l, off)
					if err != nil {
						t.Fatal(err)
					}
					want[off] = b
				}
				for off := int64(0); off < segs*16; off += 16 { // evicts the victim
					if off/16 != victim {
						if _, err := batchBytes(l, off); err != nil {
							t.Fatal(err)
						}
					}
				}
				if err := os.WriteFile(ixPath, d.damage(append([]byte(nil), orig...)), 0o644); err != nil {
					t.Fatal(err)
				}
				errs := 0
				for off, w := range want {
					got, err := batchBytes(l, off)
					switch {
					case err != nil:
						if !errors.Is(err, backend.ErrCorruptRecord) || !strings.Contains(err.Error(), local.FileName(victim*16, "")) {
							t.Fatalf("read %d: %v; want ErrCorruptRecord naming the segment", off, err)
						}
						errs++
					case !bytes.Equal(got, w):
						t.Fatalf("read %d after the damage served other bytes", off)
					}
				}
				t.Logf("%d of %d reads failed naming the segment, the others served the right batch", errs, len(want))
				if wantErrs := d.corrupt && !keep; (errs > 0) != wantErrs {
					t.Fatalf("%d of %d reads failed; want failures: %v", errs, len(want), wantErrs)
				}
			})
		}
	}
}

// TestReadsThroughPreadAndMapping: a log that reopens a segment for every
// read walks its headers with pread, through the window a read shares
// between its walks, and must return what a log reading through its
// mappings returns: batches from one record to past the window's size
// (so headers straddle the window's end or lie past it), every offset,
// several byte limits.
func TestReadsThroughPreadAndMapping(t *testing.T) {
	dir := t.TempDir()
	c := cfg(t, "segment.bytes", "40000", "index.interval.bytes", "4096")
	l := openLog(t, dir, c, false)
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range 120 {
		n := 1 + rng.IntN(8)
		if i%9 == 0 {
			n = 150 + rng.IntN(200) // 10-25 KiB, past the 8 KiB window
		}
		if _, err := l.Append(ctx, batchOf(n, int64(1000+i), "w"), backend.AppendOptions{AssignOffsets: true}); err != nil {
			t.Fatal(err)
		}
	}
	end := l.Offsets().LogEnd
	l.Close()
	open := func(maxOpen int) *local.Log {
		l, err := local.Open(dir, local.Options{Config: c, CleanShutdown: true, RecoveryPoint: end, LogStartOffset: -1, HighWatermark: end, MaxOpenSegmentFiles: maxOpen})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		return l
	}
	mapped, reopened := open(-1), open(1)
	segs := reopened.SegmentInfos()
	if len(segs) < 4 {
		t.Fatalf("only %d segments", len(segs))
	}
	other := segs[len(segs)-1].BaseOffset
	read := func(l *local.Log, off int64, maxBytes int) ([]byte, int64) {
		r, err := l.Read(ctx, off, backend.ReadOptions{MaxBytes: maxBytes, MinOneBatch: true})
		if err != nil {
			t.Fatalf("read %d (%d bytes): %v", off, maxBytes, err)
		}
		var buf bytes.Buffer
		if _, err := local.ReadAll(r, &buf); err != nil {
			t.Fatal(err)
		}
		return buf.Bytes(), r.(backend.OffsetRange).NextOffset()
	}
	for range 5 { // every segment of the first log read enough to be mapped
		for _, s := range mapped.SegmentInfos() {
			read(mapped, s.BaseOffset, 1)
		}
	}
	// What each read must return, from the files: the whole batches from
	// the one holding the offset that fit in the limit (at least one),
	// in its segment.
	type batch struct {
		seg, last int64
		data      []byte
	}
	var batches []batch
	for _, s := range segs {
		data, err := os.ReadFile(filepath.Join(dir, local.FileName(s.BaseOffset, local.LogSuffix)))
		if err != nil {
			t.Fatal(err)
		}
		for len(data) > 0 {
			b, err := record.Parse(data)
			if err != nil {
				t.Fatal(err)
			}
			batches = append(batches, batch{s.BaseOffset, b.LastOffset(), data[:b.Size()]})
			data = data[b.Size():]
		}
	}
	expect := func(off int64, maxBytes int) ([]byte, int64) {
		i := 0
		for batches[i].last < off {
			i++
		}
		out := append([]byte(nil), batches[i].data...)
		next := batches[i].last + 1
		for j := i + 1; j < len(batches) && batches[j].seg == batches[i].seg && len(out)+len(batches[j].data) <= maxBytes; j++ {
			out = append(out, batches[j].data...)
			next = batches[j].last + 1
		}
		return out, next
	}
	for _, maxBytes := range []int{1, 3000, 9000, 40000} {
		for off := int64(0); off < end; off++ {
			want, wantNext := expect(off, maxBytes)
			read(reopened, other, 1) // evicts the segment holding off
			for name, l := range map[string]*local.Log{"pread": reopened, "the mapping": mapped} {
				if got, next := read(l, off, maxBytes); !bytes.Equal(got, want) || next != wantNext {
					t.Fatalf("read %d (%d bytes) through %s: %d bytes up to %d, want %d up to %d", off, maxBytes, name, len(got), next, len(want), wantNext)
				}
			}
		}
	}
	if reopened.BudgetEvictions() == 0 {
		t.Fatal("no segment was evicted")
	}
}

// TestSegmentMappedOnlyOnceRead: a sealed segment is mapped only on its
// mapAfterReads-th read since its files opened (the reads before use
// pread), so a segment reopened for a read or two costs no mmap and no
// munmap.
func TestSegmentMappedOnlyOnceRead(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "t-0")
	writeIndexedSegments(t, dir, 3, 16)
	l := budgetLog(t, dir, 3, 8, 64<<20)
	maps := mappingsUnder(t, dir)
	for i := 1; i <= 5; i++ {
		if _, err := batchBytes(l, int64(i)); err != nil {
			t.Fatal(err)
		}
		want := 0
		if i >= 4 {
			want = 1
		}
		if n := mappingsUnder(t, dir) - maps; n != want {
			t.Fatalf("%d mappings after %d reads of a segment, want %d", n, i, want)
		}
	}
}

// TestEvictedSegmentsKeepMappedIndexes: offset indexes too large to be
// read into memory are mapped; eviction keeps them (they hold no
// descriptor) under a bound of their own on mappings. Kept or dropped at
// once, with a reader holding a segment whose index is dropped, reads
// give the bytes a log keeping every file open gives, and the mappings
// stay within the bounds.
func TestEvictedSegmentsKeepMappedIndexes(t *testing.T) {
	dir := t.TempDir()
	// An index entry a batch: 1,100 entries (8.8 KiB) a segment.
	c := cfg(t, "segment.bytes", "140000", "index.interval.bytes", "1")
	l := openLog(t, dir, c, false)
	for i := range 6000 {
		if _, err := l.Append(ctx, batchOf(1, int64(1000+i), "m"), backend.AppendOptions{AssignOffsets: true}); err != nil {
			t.Fatal(err)
		}
	}
	end := l.Offsets().LogEnd
	l.Close()
	segs := len(segmentFiles(t, dir))
	ix, err := os.Stat(filepath.Join(dir, local.FileName(0, local.IndexSuffix)))
	if err != nil || ix.Size() <= 8<<10 {
		t.Fatalf("the first segment's index: %v, %v; the test needs one past 8 KiB", ix, err)
	}
	opts := local.Options{Config: c, CleanShutdown: true, RecoveryPoint: end, LogStartOffset: -1, HighWatermark: end}
	all, err := local.Open(dir, local.Options{Config: c, CleanShutdown: true, RecoveryPoint: end, LogStartOffset: -1, HighWatermark: end, MaxOpenSegmentFiles: -1})
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(7, 8))
	offs, want := make([]int64, 1500), make([][]byte, 1500)
	for i := range offs {
		offs[i] = rng.Int64N(end)
		if want[i], err = batchBytes(all, offs[i]); err != nil {
			t.Fatal(err)
		}
	}
	all.Close()
	const maxOpen = 1
	opts.MaxOpenSegmentFiles = maxOpen
	for _, c := range []struct {
		name string
		maps int
	}{{"indexes kept", 8192}, {"indexes dropped", 1}} {
		t.Run(c.name, func(t *testing.T) {
			l, err := local.OpenWithIndexBounds(dir, opts, 64<<20, c.maps)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			fds, maps := openFDs(t), mappingsUnder(t, dir)
			held, err := l.Read(ctx, 0, backend.ReadOptions{MaxBytes: 1, MinOneBatch: true})
			if err != nil {
				t.Fatal(err)
			}
			for i, off := range offs {
				got, err := batchBytes(l, off)
				if err != nil {
					t.Fatalf("read %d: %v", off, err)
				}
				if !bytes.Equal(got, want[i]) {
					t.Fatalf("read %d: %d bytes differ from the %d of a log keeping every file open", off, len(got), len(want[i]))
				}
				if n := openFDs(t) - fds; n > maxOpen+3 { // the held reader's besides
					t.Fatalf("%d more descriptors open, with a bound of %d segments", n, maxOpen)
				}
				// The counted segments' .log and index mappings, the kept
				// indexes', and the held reader's.
				if n := mappingsUnder(t, dir) - maps; n > 3*maxOpen+c.maps+3 {
					data, _ := os.ReadFile("/proc/self/maps")
					for _, line := range strings.Split(string(data), "\n") {
						if strings.Contains(line, dir) {
							t.Log(line)
						}
					}
					t.Fatalf("%d more mappings, with bounds of %d segments and %d index mappings", n, maxOpen, c.maps)
				}
			}
			if c.maps > segs && mappingsUnder(t, dir)-maps < segs-maxOpen {
				t.Fatalf("%d mappings under the log: the evicted segments' offset indexes were not kept", mappingsUnder(t, dir)-maps)
			}
			if drops := l.BudgetIndexDrops() > 0; drops != (c.maps < segs) {
				t.Fatalf("%d read-only indexes dropped, with a bound of %d mappings and %d segments", l.BudgetIndexDrops(), c.maps, segs)
			}
			var buf bytes.Buffer
			if _, err := local.ReadAll(held, &buf); err != nil || buf.Len() == 0 {
				t.Fatalf("the held read after its index was dropped: %d bytes, %v", buf.Len(), err)
			}
		})
	}
}
