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
	"github.com/tierlog/tierlog/local"
	"github.com/tierlog/tierlog/record"
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

// newBase picks a damaged base offset for the batch at pos of data, which
// is followed by next (-1 for the segment's last): exactly its record count
// forward (over the next batch whole), a small or large step either way,
// far past the segment's end, or anything at all.
func newBase(rng *rand.Rand, b record.Batch) int64 {
	base, count := b.BaseOffset(), int64(b.LastOffsetDelta())+1
	for {
		var nb int64
		switch rng.IntN(7) {
		case 0:
			nb = base + count
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

// overlapLog writes a log of small segments whose batches hold 1 to 6
// records each, closes it and returns its config and records. With big,
// some batches are bigger than a lookup's header window (8 KiB) and some
// small, so offset index entries lie both near each other and far apart,
// with appends between them that have none.
func overlapLog(t *testing.T, rng *rand.Rand, dir string, big bool) (backend.Config, []record.Record) {
	t.Helper()
	c := cfg(t, "segment.bytes", "4096", "index.interval.bytes", strconv.Itoa(100+rng.IntN(400)))
	if big {
		c = cfg(t, "segment.bytes", strconv.Itoa(96<<10), "index.interval.bytes", strconv.Itoa(100+rng.IntN(6000)))
	}
	l := openLog(t, dir, c, false)
	for i := range 100 {
		b := batchOf(1+rng.IntN(6), 1_700_000_000_000+int64(i), fmt.Sprint("o", i))
		if big && rng.IntN(2) == 0 {
			b = paddedBatchOf(1+rng.IntN(6), 1_700_000_000_000+int64(i), fmt.Sprint("o", i), 2000+rng.IntN(3000))
		}
		if _, err := l.Append(ctx, b, backend.AppendOptions{AssignOffsets: true}); err != nil {
			t.Fatal(err)
		}
	}
	recs := readAll(t, l, 0)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return c, recs
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
	var it record.Iterator
	for off := from; off < p.Offsets().LogEnd; {
		rs, err := p.Read(ctx, off, backend.ReadOptions{MaxBytes: maxBytes, MinOneBatch: true})
		if err != nil {
			return out, err
		}
		var buf bytes.Buffer
		_, err = rs.WriteTo(&buf)
		rs.Close()
		if err != nil {
			return out, err
		}
		if buf.Len() == 0 {
			return out, fmt.Errorf("an empty read at %d below the log end", off)
		}
		next := off
		sc := record.NewScanner(bytes.NewReader(buf.Bytes()), 0, int64(buf.Len()), record.ScanOptions{Validate: true})
		for sc.Next() {
			if err := it.Reset(sc.Entry().Data); err != nil {
				return out, err
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
			return out, sc.Err()
		}
		if next <= off {
			return out, fmt.Errorf("a read at %d made no progress", off)
		}
		off = next
	}
	return out, nil
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
	trials := 24
	if testing.Short() {
		trials = 8
	}
	for trial := range trials {
		dir := t.TempDir()
		c, recs := overlapLog(t, rng, dir, trial%2 == 1)
		segs := segmentFiles(t, dir)
		seg := segs[rng.IntN(len(segs)-1)] // a closed segment
		data, err := os.ReadFile(seg)
		if err != nil {
			t.Fatal(err)
		}
		positions := batchPositions(t, data)
		pos := positions[rng.IntN(len(positions))]
		b := record.Batch(data[pos:])
		nb := newBase(rng, b)
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

// A lookup whose index entries lie more than a header window apart starts
// at the next entry's batch when it begins at or before the offset (one
// header read, not two), and at the entry found when appends without an
// entry lie between; every read answers the same either way (the moved
// base offsets of TestPropertyMovedBaseOffset try both starts on damage;
// entries at most a window apart, the default with small batches, keep
// the one start everywhere else).
func TestLookupFromNextEntry(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, dir, cfg(t, "index.interval.bytes", "12000"), false)
	// Kafka's rule: an append gets an entry once more than 12,000 bytes
	// came since the last one. Batch sizes 200, 13,000, 13,000, 13,000,
	// then 2,800 five times, 13,000 and 200 give entries at batches 2, 3,
	// 4, 9 and 10: 13,000 bytes between the first three, 14,000 between 4
	// and 9 with batches 5 to 8 (no entry) between them.
	sizes := []int{200, 13000, 13000, 13000, 2800, 2800, 2800, 2800, 2800, 13000, 200}
	var firsts, positions []int64
	var pos int64
	var recs []record.Record
	for i, size := range sizes {
		b := paddedBatchOf(3, 1_700_000_000_000+int64(i), fmt.Sprint("n", i), max(0, size/3-60))
		info, err := l.Append(ctx, b, backend.AppendOptions{AssignOffsets: true})
		if err != nil {
			t.Fatal(err)
		}
		firsts, positions = append(firsts, info.FirstOffset), append(positions, pos)
		pos += int64(len(b))
	}
	recs = readAll(t, l, 0)
	for _, c := range []struct {
		batch, scanned int
		from           int64
	}{
		{1, 2, 0},              // no entry at or below: from the segment's start
		{3, 1, positions[3]},   // entry 2's, then entry 3's batch holds it
		{4, 1, positions[4]},   // entry 3's, then entry 4's
		{6, 4, positions[4]},   // entry 4's; entry 9's batch begins past it: the probe, then 4, 5 and 6
		{9, 1, positions[9]},   // entry 4's, then entry 9's
		{10, 1, positions[10]}, // entry 9's, then entry 10's
	} {
		off := firsts[c.batch] + 1
		r, err := l.Lookup(off)
		if err != nil {
			t.Fatal(err)
		}
		if r.BatchPosition != positions[c.batch] || r.BatchesScanned != c.scanned || r.ScanPosition != c.from {
			t.Errorf("Lookup(%d) in batch %d: %+v; want the batch at %d, %d header(s) scanned from %d", off, c.batch, r, positions[c.batch], c.scanned, c.from)
		}
		for _, maxBytes := range []int{1, 20000, math.MaxInt32} {
			got, err := readRecords(l, off, maxBytes)
			if err != nil {
				t.Fatal(err)
			}
			if diff := sameRecords(got, recs[off:]); diff != "" {
				t.Errorf("reading from %d, %d bytes at a time: %s", off, maxBytes, diff)
			}
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
}
