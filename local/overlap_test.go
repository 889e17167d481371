package local_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/index"
	"github.com/tierlog/tierlog/local"
	"github.com/tierlog/tierlog/record"
	"github.com/tierlog/tierlog/vfs"
)

// A batch's base offset is outside its CRC: damage there (or a bad hand)
// can move it any distance. Every reader must then either return exactly
// the records that were written or an error naming the file and position;
// never a duplicate, a record under another offset, or a silent gap.

// overlapSeed returns a seeded random source (TIERLOG_OVERLAP_SEED to
// replay), logging the seed.
func overlapSeed(t *testing.T) *rand.Rand {
	t.Helper()
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("TIERLOG_OVERLAP_SEED"); s != "" {
		var err error
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("TIERLOG_OVERLAP_SEED=%q: %v", s, err)
		}
	}
	t.Logf("seed %d (set TIERLOG_OVERLAP_SEED to replay)", seed)
	return rand.New(rand.NewPCG(seed, 21))
}

// batchPositions returns the position of every batch of a .log file.
func batchPositions(t *testing.T, data []byte) []int64 {
	t.Helper()
	var out []int64
	for pos := int64(0); pos < int64(len(data)); {
		b, err := record.Parse(data[pos:])
		if err != nil {
			t.Fatalf("position %d: %v", pos, err)
		}
		out = append(out, pos)
		pos += int64(len(b))
	}
	return out
}

// newBase picks a damaged base offset for the batch b, whose segment
// holds the batches after after it: exactly its record count forward (over
// the next batch whole), forward so that it ends where one of the next
// few batches ends (an append of several batches then looks whole to an
// index entry of Kafka's per-append rule), a small or large step either
// way, far past the segment's end, or anything at all.
func newBase(rng *rand.Rand, b record.Batch, after []record.Batch) int64 {
	base, count := b.BaseOffset(), int64(b.LastOffsetDelta())+1
	for {
		var nb int64
		switch rng.IntN(8) {
		case 0:
			nb = base + count
		case 7:
			if len(after) == 0 {
				continue
			}
			nb = after[rng.IntN(min(len(after), 3))].LastOffset() - count + 1
		case 1:
			nb = base + count*int64(1+rng.IntN(4))
		case 2:
			nb = base + int64(1+rng.IntN(int(count)))
		case 3:
			nb = base - int64(1+rng.IntN(8))
		case 4:
			nb = base + 1_000_000 + rng.Int64N(1<<40)
		case 5:
			nb = -1 - rng.Int64N(1<<20)
		default:
			nb = int64(rng.Uint64())
		}
		if nb != base {
			return nb
		}
	}
}

// moveBase rewrites the base offset of the batch at pos in the file path.
func moveBase(t *testing.T, path string, pos, base int64) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	binary.BigEndian.PutUint64(data[pos:], uint64(base)) // outside the CRC
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// The shapes of overlapLog's logs.
const (
	smallBatches = iota // 1 to 6 small records a batch: index entries a few batches apart
	mixedBatches        // some batches bigger than a lookup's header window (8 KiB), some small
	// mixedAppends is mixedBatches appended one to three batches at a
	// time, with offset indexes rewritten by Kafka's per-append rule, as
	// a Kafka follower writes them: an entry names the append's last
	// offset at its first batch's position.
	mixedAppends
)

// overlapLog writes a log of small segments in the given shape, closes it
// and returns its config and records. In the mixed shapes offset index
// entries lie both near each other and far apart, with appends between
// them that have none.
func overlapLog(t *testing.T, rng *rand.Rand, dir string, shape int) (backend.Config, []record.Record) {
	t.Helper()
	c := cfg(t, "segment.bytes", "4096", "index.interval.bytes", strconv.Itoa(100+rng.IntN(400)))
	if shape != smallBatches {
		c = cfg(t, "segment.bytes", strconv.Itoa(96<<10), "index.interval.bytes", strconv.Itoa(100+rng.IntN(6000)))
	}
	l := openLog(t, dir, c, false)
	appendFirsts := map[int64]bool{}
	for i := range 100 {
		batches := 1
		if shape == mixedAppends {
			batches += rng.IntN(3)
		}
		var b []byte
		for range batches {
			tag := fmt.Sprint("o", i, "-", len(b))
			if shape != smallBatches && rng.IntN(2) == 0 {
				b = append(b, paddedBatchOf(1+rng.IntN(6), 1_700_000_000_000+int64(i), tag, 2000+rng.IntN(3000))...)
			} else {
				b = append(b, batchOf(1+rng.IntN(6), 1_700_000_000_000+int64(i), tag)...)
			}
		}
		info, err := l.Append(ctx, b, backend.AppendOptions{AssignOffsets: true})
		if err != nil {
			t.Fatal(err)
		}
		appendFirsts[info.FirstOffset] = true
	}
	recs := readAll(t, l, 0)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if shape == mixedAppends {
		for _, seg := range segmentFiles(t, dir) {
			indexByAppend(t, seg, c.IndexIntervalBytes, appendFirsts)
		}
	}
	return c, recs
}

// indexByAppend rewrites the offset index of the segment whose .log is
// seg by Kafka's rule applied to whole appends (LogSegment.append): an
// append, once more than interval bytes came since the last entry, gets
// one entry, its last offset at its first batch's position. An append
// begins at each batch whose base offset is in firsts.
func indexByAppend(t *testing.T, seg string, interval int64, firsts map[int64]bool) {
	t.Helper()
	data, err := os.ReadFile(seg)
	if err != nil {
		t.Fatal(err)
	}
	base, err := strconv.ParseInt(strings.TrimSuffix(filepath.Base(seg), local.LogSuffix), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	var appends []appended
	for _, pos := range batchPositions(t, data) {
		b := record.Batch(data[pos:])
		if len(appends) == 0 || firsts[b.BaseOffset()] {
			appends = append(appends, appended{pos: pos})
		}
		a := &appends[len(appends)-1]
		a.size, a.last = pos+12+int64(b.Length())-a.pos, b.LastOffset()
	}
	writeIndexByRule(t, strings.TrimSuffix(seg, local.LogSuffix)+local.IndexSuffix, base, interval, appends)
}

// appended is an append to a segment, for writeIndexByRule: its position,
// its bytes, and the offset its index entry names (Kafka: the append's
// last offset; its cleaner before 3.8: the last record it kept).
type appended struct{ pos, size, last int64 }

// batchAppends makes each batch of a segment an append of its own: the
// batches at positions (the segment size bytes), whose entries would name
// lasts.
func batchAppends(positions []int64, size int64, lasts []int64) []appended {
	out := make([]appended, len(positions))
	for i, pos := range positions {
		end := size
		if i+1 < len(positions) {
			end = positions[i+1]
		}
		out[i] = appended{pos: pos, size: end - pos, last: lasts[i]}
	}
	return out
}

// writeIndexByRule writes the offset index at path (of the segment based
// at base) anew by Kafka's rule (LogSegment.append): an append, once more
// than interval bytes came since the last entry, gets one entry.
func writeIndexByRule(t *testing.T, path string, base, interval int64, appends []appended) {
	t.Helper()
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	oi, err := index.OpenOffsetIndex(vfs.Default, path, base, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	var since int64
	for _, a := range appends {
		if since > interval {
			if err := oi.Append(a.last, int32(a.pos)); err != nil {
				t.Fatal(err)
			}
			since = 0
		}
		since += a.size
	}
	for _, err := range []error{oi.TrimToValidSize(), oi.Flush(), oi.Close()} {
		if err != nil {
			t.Fatal(err)
		}
	}
}

// dirRecords returns the records of every .log of dir, in order, read
// from the files (not through tierlog).
func dirRecords(t *testing.T, dir string) []record.Record {
	t.Helper()
	var recs []record.Record
	segs, err := filepath.Glob(filepath.Join(dir, "*"+local.LogSuffix))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range segs {
		d, err := os.ReadFile(s)
		if err != nil {
			t.Fatal(err)
		}
		sc := record.NewScanner(bytes.NewReader(d), 0, int64(len(d)), record.ScanOptions{Validate: true})
		var it record.Iterator
		for sc.Next() {
			if err := it.Reset(sc.Entry().Data); err != nil {
				t.Fatal(err)
			}
			for it.Next() {
				r := *it.Record()
				r.Key, r.Value, r.Headers = bytes.Clone(r.Key), bytes.Clone(r.Value), nil
				recs = append(recs, r)
			}
		}
		if sc.Err() != nil {
			t.Fatal(sc.Err())
		}
	}
	return recs
}

// paddedBatchOf is batchOf with values of pad bytes more.
func paddedBatchOf(n int, ts int64, tag string, pad int) []byte {
	var b record.Builder
	b.Reset(record.NewBatchHeader())
	for i := range n {
		b.Append(ts, []byte(fmt.Sprintf("k%d", i%7)), []byte(fmt.Sprintf("%s-%d-%s", tag, i, bytes.Repeat([]byte("x"), pad))), nil)
	}
	out, _ := b.Build()
	return append([]byte(nil), out...)
}

// readRecords reads from offset from to the log end, maxBytes at a time,
// as a consumer does: records below the offset asked for are skipped.
// It returns what it read and the first error.
func readRecords(p backend.Partition, from int64, maxBytes int) ([]record.Record, error) {
	var out []record.Record
	for off := from; off < p.Offsets().LogEnd; {
		got, next, err := readOnce(p, off, maxBytes)
		out = append(out, got...)
		if err != nil {
			return out, err
		}
		off = next
	}
	return out, nil
}

// readOnce is one read of readRecords: the records at or after off it
// returned, and the offset to read next.
func readOnce(p backend.Partition, off int64, maxBytes int) ([]record.Record, int64, error) {
	var out []record.Record
	var it record.Iterator
	rs, err := p.Read(ctx, off, backend.ReadOptions{MaxBytes: maxBytes, MinOneBatch: true})
	if err != nil {
		return nil, off, err
	}
	var buf bytes.Buffer
	_, err = rs.WriteTo(&buf)
	rs.Close()
	if err != nil {
		return nil, off, err
	}
	if buf.Len() == 0 {
		return nil, off, fmt.Errorf("an empty read at %d below the log end", off)
	}
	next := off
	sc := record.NewScanner(bytes.NewReader(buf.Bytes()), 0, int64(buf.Len()), record.ScanOptions{Validate: true})
	for sc.Next() {
		if err := it.Reset(sc.Entry().Data); err != nil {
			return out, off, err
		}
		for it.Next() {
			r := *it.Record()
			if r.Offset >= off {
				r.Key, r.Value, r.Headers = slices.Clone(r.Key), slices.Clone(r.Value), nil
				out = append(out, r)
			}
		}
		next = max(next, sc.Entry().LastOffset+1)
	}
	if sc.Err() != nil {
		return out, off, sc.Err()
	}
	if next <= off {
		return out, off, fmt.Errorf("a read at %d made no progress", off)
	}
	return out, next, nil
}

// sameRecords reports where got and want first differ ("" when equal).
func sameRecords(got, want []record.Record) string {
	for i := range min(len(got), len(want)) {
		g, w := got[i], want[i]
		if g.Offset != w.Offset || g.Timestamp != w.Timestamp || !bytes.Equal(g.Key, w.Key) || !bytes.Equal(g.Value, w.Value) {
			return fmt.Sprintf("record %d: got offset %d value %q, want offset %d value %q", i, g.Offset, g.Value, w.Offset, w.Value)
		}
	}
	if len(got) != len(want) {
		return fmt.Sprintf("got %d records, want %d", len(got), len(want))
	}
	return ""
}

// checkOverlapRead fails t unless a reader gave exactly want, or an
// ErrCorruptRecord naming file and a position.
func checkOverlapRead(t *testing.T, what, file string, got, want []record.Record, err error) {
	t.Helper()
	if err != nil {
		if !errors.Is(err, backend.ErrCorruptRecord) || !strings.Contains(err.Error(), file) || !strings.Contains(err.Error(), "position") {
			t.Errorf("%s: %v; want ErrCorruptRecord naming %s and a position", what, err, file)
		}
		if diff := sameRecords(got, want[:min(len(got), len(want))]); diff != "" {
			t.Errorf("%s: before its error, a wrong answer: %s", what, diff)
		}
		return
	}
	if diff := sameRecords(got, want); diff != "" {
		t.Errorf("%s: no error and a wrong answer: %s", what, diff)
	}
}

func TestPropertyMovedBaseOffset(t *testing.T) {
	rng := overlapSeed(t)
	trials := 36
	if testing.Short() {
		trials = 12
	}
	for trial := range trials {
		dir := t.TempDir()
		c, recs := overlapLog(t, rng, dir, trial%3)
		segs := segmentFiles(t, dir)
		seg := segs[rng.IntN(len(segs)-1)] // a closed segment
		data, err := os.ReadFile(seg)
		if err != nil {
			t.Fatal(err)
		}
		positions := batchPositions(t, data)
		pos := positions[rng.IntN(len(positions))]
		b := record.Batch(data[pos:])
		var after []record.Batch
		for _, p := range positions {
			if p > pos {
				after = append(after, record.Batch(data[p:]))
			}
		}
		nb := newBase(rng, b, after)
		moveBase(t, seg, pos, nb)
		file := filepath.Base(seg)
		from := recs[rng.IntN(len(recs))].Offset
		for _, readOnly := range []bool{false, true} {
			l, err := local.Open(dir, local.Options{Config: c, CleanShutdown: true, ReadOnly: readOnly, LogStartOffset: -1, HighWatermark: -1})
			if err != nil {
				if !errors.Is(err, backend.ErrCorruptRecord) || !strings.Contains(err.Error(), file) {
					t.Errorf("trial %d: open (read-only %v) after moving %s position %d from %d to %d: %v", trial, readOnly, file, pos, b.BaseOffset(), nb, err)
				}
				continue
			}
			for _, maxBytes := range []int{1, 300, 1500, math.MaxInt32} {
				for _, start := range []int64{0, from} {
					what := fmt.Sprintf("trial %d: %s position %d base %d moved to %d (%d records), read-only %v, reading from %d %d bytes at a time",
						trial, file, pos, b.BaseOffset(), nb, b.LastOffsetDelta()+1, readOnly, start, maxBytes)
					got, err := readRecords(l, start, maxBytes)
					i, _ := slices.BinarySearchFunc(recs, start, func(r record.Record, o int64) int { return int(r.Offset - o) })
					checkOverlapRead(t, what, file, got, recs[i:], err)
				}
			}
			// One read of one batch at every offset: a lookup starts from
			// the index entry at or below it, so each offset tries a start
			// of its own (the entry's own offset, one past it, ...).
			for i, r := range recs {
				got, _, err := readOnce(l, r.Offset, 1)
				what := fmt.Sprintf("trial %d: %s position %d base %d moved to %d (%d records), read-only %v, one batch at %d",
					trial, file, pos, b.BaseOffset(), nb, b.LastOffsetDelta()+1, readOnly, r.Offset)
				checkOverlapRead(t, what, file, got, recs[i:i+min(len(got), len(recs)-i)], err)
			}
			checkTimestampsAfterMove(t, l, recs, file, fmt.Sprintf("trial %d: %s position %d base %d moved to %d, read-only %v", trial, file, pos, b.BaseOffset(), nb, readOnly))
			l.Close()
		}
	}
}

// checkTimestampsAfterMove asks for the first offset at or after every
// timestamp of recs: the answer is theirs, or an ErrCorruptRecord naming
// file and a position.
func checkTimestampsAfterMove(t *testing.T, l *local.Log, recs []record.Record, file, what string) {
	t.Helper()
	for i, r := range recs {
		if i > 0 && recs[i-1].Timestamp == r.Timestamp {
			continue
		}
		off, _, found, err := l.OffsetForTimestamp(ctx, r.Timestamp)
		if err != nil {
			if !errors.Is(err, backend.ErrCorruptRecord) || !strings.Contains(err.Error(), file) || !strings.Contains(err.Error(), "position") {
				t.Errorf("%s: OffsetForTimestamp(%d): %v; want ErrCorruptRecord naming %s and a position", what, r.Timestamp, err, file)
			}
			continue
		}
		if !found || off != r.Offset {
			t.Errorf("%s: OffsetForTimestamp(%d) = %d, %v; want %d", what, r.Timestamp, off, found, r.Offset)
		}
	}
}

// nextEntryLog writes a log whose offset index entries lie more than a
// header window apart, some with batches between them that have none,
// closes it, and returns its config, each batch's first offset and
// position, and the records. Kafka's rule at index.interval.bytes=12000:
// an append gets an entry once more than 12,000 bytes came since the last
// one. Batch sizes 200, 13,000, 13,000, 13,000, then 2,800 five times,
// 13,000 and 200 give entries at batches 2, 3, 4, 9 and 10: 13,000 bytes
// between the first three, 14,000 between 4 and 9 with batches 5 to 8 (no
// entry) between them. With roll, a second segment follows (the first is
// then sealed, read through its mapping once looked up often enough).
func nextEntryLog(t *testing.T, dir string, roll bool) (c backend.Config, firsts, positions []int64, recs []record.Record) {
	t.Helper()
	c = cfg(t, "index.interval.bytes", "12000")
	l := openLog(t, dir, c, false)
	var pos int64
	for i, size := range []int{200, 13000, 13000, 13000, 2800, 2800, 2800, 2800, 2800, 13000, 200} {
		b := paddedBatchOf(3, 1_700_000_000_000+int64(i), fmt.Sprint("n", i), max(0, size/3-60))
		info, err := l.Append(ctx, b, backend.AppendOptions{AssignOffsets: true})
		if err != nil {
			t.Fatal(err)
		}
		firsts, positions = append(firsts, info.FirstOffset), append(positions, pos)
		pos += int64(len(b))
	}
	if roll {
		if err := l.Roll(); err != nil {
			t.Fatal(err)
		}
		if _, err := l.Append(ctx, batchOf(2, 1_700_000_000_100, "tail"), backend.AppendOptions{AssignOffsets: true}); err != nil {
			t.Fatal(err)
		}
	}
	recs = readAll(t, l, 0)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return c, firsts, positions, recs
}

// checkReadsFrom reads from each offset of offs to the log end, maxBytes
// at a time, and fails t unless each read gives the records written or an
// ErrCorruptRecord naming file (checkOverlapRead); with file "" (an
// undamaged log), any error fails it.
func checkReadsFrom(t *testing.T, l backend.Partition, what, file string, recs []record.Record, maxBytes int, offs ...int64) {
	t.Helper()
	for _, off := range offs {
		got, err := readRecords(l, off, maxBytes)
		if file == "" && err != nil {
			t.Errorf("%s: reading from %d, %d bytes at a time: %v", what, off, maxBytes, err)
			continue
		}
		i, _ := slices.BinarySearchFunc(recs, off, func(r record.Record, o int64) int { return int(r.Offset - o) })
		checkOverlapRead(t, fmt.Sprintf("%s: reading from %d, %d bytes at a time", what, off, maxBytes), file, got, recs[i:], err)
	}
}

// A lookup whose index entries lie more than a header window apart starts
// at the next entry's batch when it begins at or before the offset and the
// index vouches for it, alone between that entry and the one after (one
// header read, not two), and at the entry found otherwise; every read
// answers the same either way. Entries at most a window apart (the default
// with small batches) keep the one start.
func TestLookupFromNextEntry(t *testing.T) {
	dir := t.TempDir()
	c, firsts, positions, recs := nextEntryLog(t, dir, false)
	l := openLog(t, dir, c, true)
	defer l.Close()
	for _, want := range []struct {
		batch, scanned int
		from           int64
	}{
		{1, 2, 0},            // no entry at or below: from the segment's start
		{3, 1, positions[3]}, // entry 2's, then entry 3's batch holds it, alone up to entry 4's
		// Entry 3's, then entry 4's batch, followed by batches without an
		// entry: it proves nothing; the probe, then 3 and 4.
		{4, 3, positions[3]},
		{6, 4, positions[4]},  // entry 4's; entry 9's batch begins past it: the probe, then 4, 5 and 6
		{9, 1, positions[9]},  // entry 4's, then entry 9's, alone up to entry 10's
		{10, 2, positions[9]}, // entry 9's; entry 10 is the last: nothing after it to vouch
	} {
		off := firsts[want.batch] + 1
		r, err := l.Lookup(off)
		if err != nil {
			t.Fatal(err)
		}
		if r.BatchPosition != positions[want.batch] || r.BatchesScanned != want.scanned || r.ScanPosition != want.from {
			t.Errorf("Lookup(%d) in batch %d: %+v; want the batch at %d, %d header(s) scanned from %d", off, want.batch, r, positions[want.batch], want.scanned, want.from)
		}
		for _, maxBytes := range []int{1, 20000, math.MaxInt32} {
			checkReadsFrom(t, l, "undamaged", "", recs, maxBytes, off)
		}
	}
}

// The batch at the next entry's position with its base moved down onto
// the offsets of batches without an entry (between the entry found and
// the next): its base rises past the entry found and lies at or before
// the offset, but it does not end at its entry; the lookup must not start
// there, or it would serve its records under the other batches' offsets
// (a TruncateTo would cut at it and keep them).
func TestLookupProbeRefusesMovedBase(t *testing.T) {
	for _, sealed := range []bool{false, true} {
		for _, readOnly := range []bool{false, true} {
			t.Run(fmt.Sprintf("sealed=%v,read-only=%v", sealed, readOnly), func(t *testing.T) {
				dir := t.TempDir()
				c, firsts, positions, recs := nextEntryLog(t, dir, sealed)
				seg := filepath.Join(dir, local.FileName(0, local.LogSuffix))
				moveBase(t, seg, positions[9], firsts[8]) // batch 9 now says it holds batch 8's offsets
				l, err := local.Open(dir, local.Options{Config: c, CleanShutdown: true, ReadOnly: readOnly, LogStartOffset: -1, HighWatermark: -1})
				if err != nil {
					t.Fatal(err)
				}
				defer l.Close()
				for range 2 { // through pread windows, then (sealed) the mapping
					checkReadsFrom(t, l, "batch 9's base moved onto batch 8's offsets", filepath.Base(seg), recs, 1, firsts[8], firsts[8]+1, firsts[8]+2, firsts[7])
				}
			})
		}
	}
	dir := t.TempDir()
	c, firsts, positions, _ := nextEntryLog(t, dir, false)
	seg := filepath.Join(dir, local.FileName(0, local.LogSuffix))
	moveBase(t, seg, positions[9], firsts[8])
	l := openLog(t, dir, c, true)
	defer l.Close()
	if err := l.TruncateTo(firsts[8] + 1); err != nil {
		if !errors.Is(err, backend.ErrCorruptRecord) {
			t.Fatalf("TruncateTo(%d): %v; want success or ErrCorruptRecord", firsts[8]+1, err)
		}
		return
	}
	if st, err := os.Stat(seg); err != nil || st.Size() != positions[8] {
		t.Errorf("after TruncateTo(%d), inside batch 8 (position %d), the .log is %v bytes (%v); want batch 8 cut", firsts[8]+1, positions[8], st.Size(), err)
	}
}

// An offset index written by Kafka's per-append rule (a follower's append
// of many batches gets one entry: the append's last offset, at its first
// batch's position), the append's first batch's base moved up by the
// others' record counts so that it ends at the entry's offset: a read of
// one batch must still look at the batch after it.
func TestOneBatchReadPerAppendIndex(t *testing.T) {
	for _, readOnly := range []bool{false, true} {
		t.Run(fmt.Sprintf("read-only=%v", readOnly), func(t *testing.T) {
			dir := t.TempDir()
			c := cfg(t, "index.interval.bytes", "1")
			l := openLog(t, dir, c, false)
			for _, a := range [][][]byte{ // A; B1 B2 B3 in one append; C; D
				{batchOf(3, 1_700_000_000_000, "a")},
				{batchOf(3, 1_700_000_000_001, "b1"), batchOf(3, 1_700_000_000_002, "b2"), batchOf(3, 1_700_000_000_003, "b3")},
				{batchOf(3, 1_700_000_000_004, "c")},
				{batchOf(3, 1_700_000_000_005, "d")},
			} {
				if _, err := l.Append(ctx, bytes.Join(a, nil), backend.AppendOptions{AssignOffsets: true}); err != nil {
					t.Fatal(err)
				}
			}
			if err := l.Roll(); err != nil {
				t.Fatal(err)
			}
			if _, err := l.Append(ctx, batchOf(2, 1_700_000_000_100, "tail"), backend.AppendOptions{AssignOffsets: true}); err != nil {
				t.Fatal(err)
			}
			recs := readAll(t, l, 0)
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			seg := filepath.Join(dir, local.FileName(0, local.LogSuffix))
			data, err := os.ReadFile(seg)
			if err != nil {
				t.Fatal(err)
			}
			ps := batchPositions(t, data) // A B1 B2 B3 C D
			if len(ps) != 6 {
				t.Fatalf("%d batches, want 6", len(ps))
			}
			bat := func(i int) record.Batch { return record.Batch(data[ps[i]:]) }
			ip := filepath.Join(dir, local.FileName(0, local.IndexSuffix))
			if err := os.Remove(ip); err != nil {
				t.Fatal(err)
			}
			oi, err := index.OpenOffsetIndex(vfs.Default, ip, 0, 1<<20)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range []struct{ last, first int }{{3, 1}, {4, 4}, {5, 5}} { // A is the segment's first: no entry
				if err := oi.Append(bat(e.last).LastOffset(), int32(ps[e.first])); err != nil {
					t.Fatal(err)
				}
			}
			for _, err := range []error{oi.TrimToValidSize(), oi.Flush(), oi.Close()} {
				if err != nil {
					t.Fatal(err)
				}
			}
			open := func() *local.Log {
				l, err := local.Open(dir, local.Options{Config: c, CleanShutdown: true, ReadOnly: readOnly, LogStartOffset: -1, HighWatermark: -1})
				if err != nil {
					t.Fatal(err)
				}
				return l
			}
			l = open()
			var all []int64
			for _, r := range recs {
				all = append(all, r.Offset)
			}
			checkReadsFrom(t, l, "undamaged, an index by append", "", recs, 1, all...)
			l.Close()
			moveBase(t, seg, ps[1], bat(3).BaseOffset()) // B1 now ends at B3's last offset, the entry's
			l = open()
			defer l.Close()
			last := bat(3).LastOffset()
			for range 2 {
				checkReadsFrom(t, l, "B1's base moved onto B3's offsets", filepath.Base(seg), recs, 1, last, last-1, last-2)
			}
		})
	}
}
