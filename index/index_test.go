package index_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/tierlog/tierlog/index"
	"github.com/tierlog/tierlog/record"
	"github.com/tierlog/tierlog/testing/fixtures"
	"github.com/tierlog/tierlog/vfs"
)

const tenMiB = 10 << 20

func openPair(t *testing.T, dir string, base int64, max int) (*index.OffsetIndex, *index.TimeIndex) {
	t.Helper()
	oi, err := index.OpenOffsetIndex(vfs.Default, filepath.Join(dir, "00000000000000000000.index"), base, max)
	if err != nil {
		t.Fatal(err)
	}
	ti, err := index.OpenTimeIndex(vfs.Default, filepath.Join(dir, "00000000000000000000.timeindex"), base, max)
	if err != nil {
		t.Fatal(err)
	}
	return oi, ti
}

func fileSize(t *testing.T, p string) int64 {
	t.Helper()
	st, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	return st.Size()
}

// TestReplayKafkaRuleOverFixture replays Kafka's index rule over a segment a
// Kafka broker wrote (one batch per append, index.interval.bytes=4096) and
// expects trimmed .index and .timeindex files byte-identical to Kafka's.
func TestReplayKafkaRuleOverFixture(t *testing.T) {
	dirRel := "ldi-poc/__consumer_offsets-6/"
	logBytes := fixtures.Read(t, dirRel+"00000000000000000000.log")
	wantIndex := fixtures.Read(t, dirRel+"00000000000000000000.index")
	wantTime := fixtures.Read(t, dirRel+"00000000000000000000.timeindex")

	dir := t.TempDir()
	oi, ti := openPair(t, dir, 0, tenMiB)
	if got := fileSize(t, oi.Path()); got != 10485760 {
		t.Fatalf("preallocated .index is %d bytes, want 10485760", got)
	}
	if got := fileSize(t, ti.Path()); got != 10485756 {
		t.Fatalf("preallocated .timeindex is %d bytes, want 10485756", got)
	}
	x := index.NewIndexer(oi, ti, 4096)
	s := record.NewScanner(bytes.NewReader(logBytes), 0, int64(len(logBytes)), record.ScanOptions{Validate: true})
	for s.Next() {
		e := s.Entry()
		if err := x.Append(e.Position, e.Size, e.LastOffset, e.MaxTimestamp, e.LastOffset); err != nil {
			t.Fatal(err)
		}
	}
	if s.Err() != nil {
		t.Fatal(s.Err())
	}
	if err := x.Roll(); err != nil {
		t.Fatal(err)
	}
	if err := oi.Close(); err != nil {
		t.Fatal(err)
	}
	if err := ti.Close(); err != nil {
		t.Fatal(err)
	}
	gotIndex, _ := os.ReadFile(oi.Path())
	gotTime, _ := os.ReadFile(ti.Path())
	if !bytes.Equal(gotIndex, wantIndex) {
		t.Errorf(".index differs from Kafka's:\n got %x\nwant %x", gotIndex, wantIndex)
	}
	if !bytes.Equal(gotTime, wantTime) {
		t.Errorf(".timeindex differs from Kafka's:\n got %x\nwant %x", gotTime, wantTime)
	}
}

// TestWorkedExample reproduces the reference's worked example: 500 records
// of 200-byte values in producer batches of up to 16384 bytes, interval 512.
func TestWorkedExample(t *testing.T) {
	dir := t.TempDir()
	oi, ti := openPair(t, dir, 0, tenMiB)
	defer oi.Close()
	defer ti.Close()
	x := index.NewIndexer(oi, ti, 512)
	var b record.Builder
	val := bytes.Repeat([]byte("v"), 200)
	pos, next := int64(0), int64(0)
	var sizes []int
	for next < 500 {
		h := record.NewBatchHeader()
		h.BaseOffset = next
		b.Reset(h)
		for next < 500 && (b.NumRecords() == 0 || b.SizeWith(1000, nil, val, nil) <= 16384) {
			b.Append(1000, nil, val, nil)
			next++
		}
		batch, err := b.Build()
		if err != nil {
			t.Fatal(err)
		}
		sizes = append(sizes, len(batch))
		if err := x.Append(pos, int64(len(batch)), batch.LastOffset(), batch.MaxTimestamp(), batch.LastOffset()); err != nil {
			t.Fatal(err)
		}
		pos += int64(len(batch))
	}
	if sizes[0] != 16377 || sizes[len(sizes)-1] != 6749 || len(sizes) != 7 {
		t.Fatalf("batch sizes %v, want six of 16377 then 6749", sizes)
	}
	want := []index.OffsetEntry{{155, 16377}, {233, 32754}, {311, 49131}, {389, 65508}, {467, 81885}, {499, 98262}}
	if oi.Entries() != len(want) {
		t.Fatalf("%d entries, want %d", oi.Entries(), len(want))
	}
	for i, w := range want {
		if got := oi.Entry(i); got != w {
			t.Errorf("entry %d = %+v, want %+v", i, got, w)
		}
	}
}

func TestOffsetIndexRules(t *testing.T) {
	dir := t.TempDir()
	oi, err := index.OpenOffsetIndex(vfs.Default, filepath.Join(dir, "00000000000000000100.index"), 100, 8*4+5)
	if err != nil {
		t.Fatal(err)
	}
	defer oi.Close()
	if oi.MaxEntries() != 4 {
		t.Fatalf("max entries %d, want 4 (size rounded down)", oi.MaxEntries())
	}
	if got := oi.Lookup(150); got != (index.OffsetEntry{Offset: 100, Position: 0}) {
		t.Fatalf("empty lookup = %+v, want (base, 0)", got)
	}
	for _, e := range []index.OffsetEntry{{110, 1000}, {120, 2000}, {130, 3000}} {
		if err := oi.Append(e.Offset, e.Position); err != nil {
			t.Fatal(err)
		}
	}
	if err := oi.Append(130, 4000); !errors.Is(err, index.ErrInvalidOffset) {
		t.Fatalf("equal offset: %v", err)
	}
	if err := oi.Append(99, 4000); !errors.Is(err, index.ErrInvalidOffset) {
		t.Fatalf("offset below base: %v", err)
	}
	if err := oi.Append(100+1<<31, 4000); !errors.Is(err, index.ErrInvalidOffset) {
		t.Fatalf("relative offset overflow: %v", err)
	}
	cases := map[int64]index.OffsetEntry{
		99: {100, 0}, 100: {100, 0}, 109: {100, 0}, 110: {110, 1000}, 119: {110, 1000},
		120: {120, 2000}, 129: {120, 2000}, 130: {130, 3000}, 1 << 40: {130, 3000},
	}
	for target, want := range cases {
		if got := oi.Lookup(target); got != want {
			t.Errorf("Lookup(%d) = %+v, want %+v", target, got, want)
		}
	}
	if err := oi.Append(140, 4000); err != nil {
		t.Fatal(err)
	}
	if !oi.IsFull() {
		t.Fatal("4 of 4 entries: not full")
	}
	if err := oi.Append(150, 5000); !errors.Is(err, index.ErrFull) {
		t.Fatalf("append to full index: %v", err)
	}
	// Truncation: entries with offset >= target go.
	if err := oi.TruncateTo(125); err != nil {
		t.Fatal(err)
	}
	if oi.Entries() != 2 || oi.LastEntry().Offset != 120 {
		t.Fatalf("after TruncateTo(125): %d entries, last %+v", oi.Entries(), oi.LastEntry())
	}
	if err := oi.TruncateTo(120); err != nil {
		t.Fatal(err)
	}
	if oi.Entries() != 1 {
		t.Fatalf("after TruncateTo(120): %d entries", oi.Entries())
	}
	if err := oi.Reset(); err != nil || oi.Entries() != 0 {
		t.Fatalf("reset: %v, %d entries", err, oi.Entries())
	}
}

func TestTimeIndexRules(t *testing.T) {
	dir := t.TempDir()
	ti, err := index.OpenTimeIndex(vfs.Default, filepath.Join(dir, "00000000000000000100.timeindex"), 100, 12*3)
	if err != nil {
		t.Fatal(err)
	}
	defer ti.Close()
	if got := ti.Lookup(5); got != (index.TimeEntry{Timestamp: -1, Offset: 100}) {
		t.Fatalf("empty lookup = %+v, want (-1, base)", got)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(ti.MaybeAppend(1000, 105, false))
	must(ti.MaybeAppend(1000, 107, false)) // equal timestamp: skipped
	if ti.Entries() != 1 {
		t.Fatalf("equal timestamp was written")
	}
	if err := ti.MaybeAppend(999, 110, false); !errors.Is(err, index.ErrInvalidTimestamp) {
		t.Fatalf("earlier timestamp: %v", err)
	}
	if err := ti.MaybeAppend(2000, 104, false); !errors.Is(err, index.ErrInvalidOffset) {
		t.Fatalf("earlier offset: %v", err)
	}
	must(ti.MaybeAppend(2000, 110, false))
	if !ti.IsFull() {
		t.Fatal("2 of 3 slots: the last is reserved, so the index is full")
	}
	if err := ti.MaybeAppend(3000, 120, false); !errors.Is(err, index.ErrFull) {
		t.Fatalf("append past the reserved slot: %v", err)
	}
	must(ti.MaybeAppend(3000, 120, true)) // the roll entry uses the reserved slot
	if err := ti.MaybeAppend(4000, 130, true); !errors.Is(err, index.ErrFull) {
		t.Fatalf("append with every slot used: %v", err)
	}
	cases := map[int64]index.TimeEntry{
		999: {-1, 100}, 1000: {1000, 105}, 1999: {1000, 105}, 2000: {2000, 110}, 5000: {3000, 120},
	}
	for ts, want := range cases {
		if got := ti.Lookup(ts); got != want {
			t.Errorf("Lookup(%d) = %+v, want %+v", ts, got, want)
		}
	}
	// Truncation searches on the offset value.
	must(ti.TruncateTo(110))
	if ti.Entries() != 1 || ti.LastEntry() != (index.TimeEntry{1000, 105}) {
		t.Fatalf("after TruncateTo(110): %d entries, last %+v", ti.Entries(), ti.LastEntry())
	}
}

// TestReopenFindsValidPrefix writes entries into a preallocated index and
// reopens it without trimming (an unclean shutdown): the zero tail is not
// counted, and truncated entries never come back.
func TestReopenFindsValidPrefix(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "00000000000000000000.index")
	oi, err := index.OpenOffsetIndex(vfs.Default, p, 0, 4096)
	if err != nil {
		t.Fatal(err)
	}
	for i := int64(1); i <= 10; i++ {
		if err := oi.Append(i*10, int32(i*1000)); err != nil {
			t.Fatal(err)
		}
	}
	if err := oi.TruncateTo(80); err != nil {
		t.Fatal(err)
	}
	if err := oi.Flush(); err != nil {
		t.Fatal(err)
	}
	// A second handle sees the untrimmed file, as a restarted process would.
	ro, err := index.OpenOffsetIndexReadOnly(vfs.Default, p, 0)
	if err != nil {
		t.Fatal(err)
	}
	if ro.Entries() != 7 || ro.MaxEntries() != 512 {
		t.Fatalf("reopened: %d entries of %d slots, want 7 of 512", ro.Entries(), ro.MaxEntries())
	}
	if err := ro.SanityCheck(); err != nil {
		t.Fatalf("zero tail flagged as corrupt: %v", err)
	}
	ro.Close()
	if err := oi.Close(); err != nil {
		t.Fatal(err)
	}
	if got := fileSize(t, p); got != 56 {
		t.Fatalf("closed index is %d bytes, want 56 (trimmed)", got)
	}
	// A writable reopen re-expands to the max size and keeps the entries.
	oi, err = index.OpenOffsetIndex(vfs.Default, p, 0, 4096)
	if err != nil {
		t.Fatal(err)
	}
	defer oi.Close()
	if oi.Entries() != 7 || fileSize(t, p) != 4096 {
		t.Fatalf("writable reopen: %d entries, %d bytes", oi.Entries(), fileSize(t, p))
	}
}

func TestSanityCheckFindsDisorder(t *testing.T) {
	data := make([]byte, 8*3)
	binary.BigEndian.PutUint32(data[0:], 10)
	binary.BigEndian.PutUint32(data[4:], 100)
	binary.BigEndian.PutUint32(data[8:], 5) // goes back
	binary.BigEndian.PutUint32(data[12:], 200)
	binary.BigEndian.PutUint32(data[16:], 30)
	binary.BigEndian.PutUint32(data[20:], 300)
	v := index.NewOffsetIndexView(data, 0)
	if v.Entries() != 1 {
		t.Fatalf("valid prefix %d, want 1", v.Entries())
	}
	if err := v.SanityCheck(); !errors.Is(err, index.ErrCorrupt) {
		t.Fatalf("sanity check: %v, want corrupt", err)
	}
	if err := v.Append(40, 1); !errors.Is(err, index.ErrReadOnly) {
		t.Fatalf("append to a view: %v", err)
	}
}

// TestViewMatchesFile: the byte view and the mmap'd file answer every
// lookup the same way.
func TestViewMatchesFile(t *testing.T) {
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(1, 2))
	oi, ti := openPair(t, dir, 1000, 1<<16)
	off, pos, ts := int64(1000), int32(0), int64(1_000_000)
	for i := 0; i < 2000; i++ {
		off += 1 + rng.Int64N(50)
		pos += 1 + rng.Int32N(5000)
		ts += 1 + rng.Int64N(100)
		if err := oi.Append(off, pos); err != nil {
			t.Fatal(err)
		}
		if err := ti.MaybeAppend(ts, off, false); err != nil {
			t.Fatal(err)
		}
	}
	if err := oi.Close(); err != nil {
		t.Fatal(err)
	}
	if err := ti.Close(); err != nil {
		t.Fatal(err)
	}
	ob, _ := os.ReadFile(oi.Path())
	tb, _ := os.ReadFile(ti.Path())
	ov, tv := index.NewOffsetIndexView(ob, 1000), index.NewTimeIndexView(tb, 1000)
	of, err := index.OpenOffsetIndexReadOnly(vfs.Default, oi.Path(), 1000)
	if err != nil {
		t.Fatal(err)
	}
	defer of.Close()
	tf, err := index.OpenTimeIndexReadOnly(vfs.Default, ti.Path(), 1000)
	if err != nil {
		t.Fatal(err)
	}
	defer tf.Close()
	if ov.Entries() != 2000 || of.Entries() != 2000 || tv.Entries() != 2000 || tf.Entries() != 2000 {
		t.Fatalf("entries: %d %d %d %d", ov.Entries(), of.Entries(), tv.Entries(), tf.Entries())
	}
	for i := 0; i < 5000; i++ {
		target := 900 + rng.Int64N(off-800)
		if a, b := ov.Lookup(target), of.Lookup(target); a != b {
			t.Fatalf("offset lookup %d: view %+v file %+v", target, a, b)
		}
		// Brute force agrees.
		want := index.OffsetEntry{Offset: 1000}
		for j := 0; j < ov.Entries(); j++ {
			if e := ov.Entry(j); e.Offset <= target {
				want = e
			}
		}
		if got := ov.Lookup(target); got != want {
			t.Fatalf("offset lookup %d = %+v, brute force %+v", target, got, want)
		}
		tsTarget := 999_000 + rng.Int64N(ts-998_000)
		if a, b := tv.Lookup(tsTarget), tf.Lookup(tsTarget); a != b {
			t.Fatalf("time lookup %d: view %+v file %+v", tsTarget, a, b)
		}
	}
}

func TestClosedIndex(t *testing.T) {
	dir := t.TempDir()
	oi, ti := openPair(t, dir, 0, 1024)
	oi.Close()
	ti.Close()
	if err := oi.Append(1, 1); !errors.Is(err, index.ErrClosed) {
		t.Fatalf("append after close: %v", err)
	}
	if err := ti.MaybeAppend(1, 1, false); !errors.Is(err, index.ErrClosed) {
		t.Fatalf("append after close: %v", err)
	}
	if got := oi.Lookup(5); got.Offset != 0 {
		t.Fatalf("lookup after close = %+v", got)
	}
	if err := oi.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
}

func TestLookupPosition(t *testing.T) {
	oi, err := index.OpenOffsetIndex(vfs.Default, filepath.Join(t.TempDir(), "00000000000000000000.index"), 0, 1024)
	if err != nil {
		t.Fatal(err)
	}
	defer oi.Close()
	if _, ok := oi.LookupPosition(100); ok {
		t.Fatal("empty index found a position")
	}
	for i := int64(1); i <= 5; i++ {
		oi.Append(i*10, int32(i*100))
	}
	for pos, want := range map[int32]int64{99: -1, 100: 10, 150: 10, 500: 50, 9999: 50} {
		e, ok := oi.LookupPosition(pos)
		if (want < 0) == ok || (ok && e.Offset != want) {
			t.Errorf("LookupPosition(%d) = %+v, %v; want offset %d", pos, e, ok, want)
		}
	}
}

// TestReadOnlyIndexesEitherSide: read-only indexes at and around the size
// read into memory rather than mapped (8 KiB) answer every lookup alike,
// and refuse use after Close.
func TestReadOnlyIndexesEitherSide(t *testing.T) {
	dir := t.TempDir()
	for _, n := range []int{1, 682, 683, 1023, 1024, 1025, 3000} {
		op := filepath.Join(dir, fmt.Sprintf("%d.index", n))
		tp := filepath.Join(dir, fmt.Sprintf("%d.timeindex", n))
		oi, err := index.OpenOffsetIndex(vfs.Default, op, 100, 64<<10)
		if err != nil {
			t.Fatal(err)
		}
		ti, err := index.OpenTimeIndex(vfs.Default, tp, 100, 64<<10)
		if err != nil {
			t.Fatal(err)
		}
		for i := int64(1); i <= int64(n); i++ {
			if err := oi.Append(100+i*4, int32(i*4096)); err != nil {
				t.Fatal(err)
			}
			if err := ti.MaybeAppend(1000+i*10, 100+i*4, false); err != nil {
				t.Fatal(err)
			}
		}
		if err := errors.Join(oi.Close(), ti.Close()); err != nil { // trimmed to their entries
			t.Fatal(err)
		}
		ro, err := index.OpenOffsetIndexReadOnly(vfs.Default, op, 100)
		if err != nil {
			t.Fatal(err)
		}
		rt, err := index.OpenTimeIndexReadOnly(vfs.Default, tp, 100)
		if err != nil {
			t.Fatal(err)
		}
		if ro.Entries() != n || rt.Entries() != n {
			t.Fatalf("%d entries: read-only indexes hold %d and %d", n, ro.Entries(), rt.Entries())
		}
		for i := int64(1); i <= int64(n); i++ {
			if e := ro.Lookup(100 + i*4 + 1); e.Offset != 100+i*4 || e.Position != int32(i*4096) {
				t.Fatalf("%d entries: Lookup(%d) = %+v", n, 100+i*4+1, e)
			}
			if e := rt.Lookup(1000 + i*10); e.Offset != 100+i*4 || e.Timestamp != 1000+i*10 {
				t.Fatalf("%d entries: time Lookup(%d) = %+v", n, 1000+i*10, e)
			}
		}
		if err := errors.Join(ro.Close(), rt.Close()); err != nil {
			t.Fatal(err)
		}
		if e := ro.Lookup(200); e.Offset != 100 || e.Position != 0 {
			t.Fatalf("%d entries: a lookup after Close = %+v, want the base", n, e)
		}
	}
}
