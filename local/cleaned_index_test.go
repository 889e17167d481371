package local_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/local"
	"github.com/tierlog/tierlog/record"
)

// cleanedLog writes nextEntryLog (a second segment after it), then rewrites
// segment 0 as Kafka's cleaner (before 3.8, LogSegment.append indexing per
// append with largestOffset = FilterResult.maxOffset) leaves it when batch 9
// lost its last two records to compaction: the batch keeps its last offset
// (overrideLastOffset), but the index entry at its position names its last
// retained record's offset (MemoryRecords.filterBatch's maxOffset), two
// below. Each batch is a cleaner chunk of its own. It returns the config,
// each batch's first offset and position, and the records of the log
// (scanned from the files, not through tierlog).
func cleanedLog(t *testing.T, dir string, roll bool) (c backend.Config, firsts, positions []int64, recs []record.Record) {
	t.Helper()
	c, firsts, _, _ = nextEntryLog(t, dir, roll)
	seg := filepath.Join(dir, local.FileName(0, local.LogSuffix))
	data, err := os.ReadFile(seg)
	if err != nil {
		t.Fatal(err)
	}
	var out []byte
	var entryOffsets []int64 // what an index entry at each batch would say
	for i, pos := range batchPositions(t, data) {
		b := record.Batch(data[pos:])
		b = b[:12+int(b.Length())]
		if i != 9 {
			positions = append(positions, int64(len(out)))
			out = append(out, b...)
			entryOffsets = append(entryOffsets, b.LastOffset())
			continue
		}
		// Batch 9 keeps its first record only (padded so that the batch
		// stays over index.interval.bytes) and its last offset delta.
		var it record.Iterator
		if err := it.Reset(b); err != nil || !it.Next() {
			t.Fatal(err)
		}
		r := it.Record()
		var bl record.Builder
		bl.Reset(record.NewBatchHeader())
		if err := bl.AppendAt(0, r.Timestamp, r.Key, append(bytes.Repeat([]byte("y"), 13000), r.Value...), nil); err != nil {
			t.Fatal(err)
		}
		bl.SetLastOffsetDelta(b.LastOffsetDelta())
		nb, err := bl.Build()
		if err != nil {
			t.Fatal(err)
		}
		nb.SetBaseOffset(b.BaseOffset())
		positions = append(positions, int64(len(out)))
		out = append(out, nb...)
		entryOffsets = append(entryOffsets, b.BaseOffset()) // filterBatch's maxOffset: the retained record's
	}
	if err := os.WriteFile(seg, out, 0o644); err != nil {
		t.Fatal(err)
	}
	// Kafka's per-append rule at index.interval.bytes=12000, one append
	// (cleaner chunk) a batch.
	writeIndexByRule(t, filepath.Join(dir, local.FileName(0, local.IndexSuffix)), 0, 12000, batchAppends(positions, int64(len(out)), entryOffsets))
	recs = dirRecords(t, dir)
	return c, firsts, positions, recs
}

// recsFrom returns the records of recs at or after off.
func recsFrom(recs []record.Record, off int64) []record.Record {
	for i, r := range recs {
		if r.Offset >= off {
			return recs[i:]
		}
	}
	return nil
}

// short describes records by offset and value prefix.
func short(rs []record.Record) string {
	var b bytes.Buffer
	for _, r := range rs {
		v := r.Value
		if i := bytes.Index(v, []byte("n")); i >= 0 {
			v = v[i:]
		}
		fmt.Fprintf(&b, "%d:%.5s ", r.Offset, v)
	}
	return b.String()
}

// In a segment Kafka's cleaner wrote (an index entry may name a rebuilt
// batch's last retained record, below the batch's last offset), batch 9's
// base moved down by the two dropped offsets ends at its entry's offset:
// the index must not vouch for it (it holds fewer records than its span),
// or a read would serve it at batch 8's offsets.
func TestKafkaCleanedIndexMovedBase(t *testing.T) {
	for _, readOnly := range []bool{false, true} {
		t.Run(fmt.Sprintf("read-only=%v", readOnly), func(t *testing.T) {
			dir := t.TempDir()
			c, firsts, positions, recs := cleanedLog(t, dir, true)
			seg := filepath.Join(dir, local.FileName(0, local.LogSuffix))
			moveBase(t, seg, positions[9], firsts[9]-2) // ends at 27: the entry's offset
			l, err := local.Open(dir, local.Options{Config: c, CleanShutdown: true, ReadOnly: readOnly, LogStartOffset: -1, HighWatermark: -1})
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			for _, off := range []int64{firsts[9] - 2, firsts[9] - 1} {
				got, next, err := readOnce(l, off, 1)
				want := recsFrom(recs, off)
				if err == nil && len(got) == 0 && next > want[0].Offset {
					t.Errorf("one batch at %d: no error, no records, and the next read at %d: %s skipped", off, next, short(want[:next-off]))
				}
				want = want[:min(len(got), len(want))]
				if err != nil {
					if !errors.Is(err, backend.ErrCorruptRecord) {
						t.Errorf("one batch at %d: %v; want ErrCorruptRecord", off, err)
					}
					continue
				}
				if short(got) != short(want) {
					t.Errorf("one batch at %d: no error and got %s; want %s", off, short(got), short(want))
				}
			}
		})
	}
}

// The same Kafka-cleaned segment, undamaged: every offset reads (an entry
// naming an offset inside the batch that ends its append is Kafka's, not
// damage).
func TestKafkaCleanedIndexReads(t *testing.T) {
	dir := t.TempDir()
	c, _, _, recs := cleanedLog(t, dir, true)
	l, err := local.Open(dir, local.Options{Config: c, CleanShutdown: true, ReadOnly: true, LogStartOffset: -1, HighWatermark: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for off := int64(0); off < l.Offsets().LogEnd; off++ {
		got, _, err := readOnce(l, off, 1)
		if err != nil {
			t.Errorf("undamaged, one batch at %d: %v", off, err)
			continue
		}
		want := recsFrom(recs, off)
		if w := want[:min(len(got), len(want))]; short(got) != short(w) {
			t.Errorf("undamaged, one batch at %d: got %s; want %s", off, short(got), short(w))
		}
	}
}

// TruncateTo inside the moved batch of TestKafkaCleanedIndexMovedBase: the
// lookup starts at the batch (its entry names an offset inside it) and a
// cut there would keep batch 8, which holds offsets past the new log end;
// the batch before a cut is checked, so the truncation is refused, of the
// active segment (cut in place) and of a sealed one (its prefix rewritten).
func TestKafkaCleanedIndexTruncate(t *testing.T) {
	for _, sealed := range []bool{false, true} {
		t.Run(fmt.Sprintf("sealed=%v", sealed), func(t *testing.T) {
			dir := t.TempDir()
			c, firsts, positions, _ := cleanedLog(t, dir, sealed)
			seg := filepath.Join(dir, local.FileName(0, local.LogSuffix))
			moveBase(t, seg, positions[9], firsts[9]-2)
			l := openLog(t, dir, c, true)
			defer l.Close()
			end := l.Offsets().LogEnd
			before, err := os.Stat(seg)
			if err != nil {
				t.Fatal(err)
			}
			infos := l.SegmentInfos()
			err = l.TruncateTo(firsts[9])
			if err == nil {
				t.Fatalf("TruncateTo(%d) inside the moved batch: no error; the log end is %d, and batch 8 (offsets %d..%d) is kept", firsts[9], l.Offsets().LogEnd, firsts[8], firsts[9]-1)
			}
			if !errors.Is(err, backend.ErrCorruptRecord) || !strings.Contains(err.Error(), filepath.Base(seg)) {
				t.Fatalf("TruncateTo(%d): %v; want ErrCorruptRecord naming %s", firsts[9], err, filepath.Base(seg))
			}
			// Nothing was cut, nor any segment after it removed, on disk
			// either.
			if after, err := os.Stat(seg); err != nil || after.Size() != before.Size() || l.Offsets().LogEnd != end {
				t.Errorf("after the refused truncation: the log end %d (was %d), %s %v bytes (was %d)", l.Offsets().LogEnd, end, filepath.Base(seg), after.Size(), before.Size())
			}
			for _, si := range infos {
				if _, err := os.Stat(si.Path); err != nil {
					t.Errorf("after the refused truncation: %v", err)
				}
			}
			l.Close()
			if l = openLog(t, dir, c, true); l.Offsets().LogEnd != end {
				t.Errorf("reopened after the refused truncation: the log end %d, was %d", l.Offsets().LogEnd, end)
			}
		})
	}
}

// A truncation to every offset of a compacted follower's log, whose
// batches leave gaps between them and inside them (a batch keeps its last
// offset when the cleaner thinned it): the new log end is the offset, or
// the base of the batch holding it, and no gap reads as an overlap.
func TestTruncateCompactedGaps(t *testing.T) {
	c := cfg(t, "cleanup.policy", "compact", "segment.bytes", "1500", "index.interval.bytes", "150")
	src := t.TempDir()
	l := openLog(t, src, c, false)
	type span struct{ base, last int64 }
	var spans []span
	next := int64(0)
	for i := range 40 {
		next += int64(i % 3) // a gap before most batches
		h := record.NewBatchHeader()
		h.BaseOffset = next
		var b record.Builder
		b.Reset(h)
		for _, delta := range []int32{0, 2} { // a gap inside
			if err := b.AppendAt(delta, 1_700_000_000_000, []byte("k"), bytes.Repeat([]byte("v"), 60), nil); err != nil {
				t.Fatal(err)
			}
		}
		batch, err := b.Build()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := l.Append(ctx, append([]byte(nil), batch...), backend.AppendOptions{}); err != nil {
			t.Fatal(err)
		}
		spans = append(spans, span{next, next + 2})
		next += 3
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	for off := int64(0); off < next; off++ {
		want := off
		for _, s := range spans {
			if s.base < off && off <= s.last {
				want = s.base
			}
		}
		dir := filepath.Join(t.TempDir(), "log")
		if err := os.CopyFS(dir, os.DirFS(src)); err != nil {
			t.Fatal(err)
		}
		l := openLog(t, dir, c, true)
		if err := l.TruncateTo(off); err != nil || l.Offsets().LogEnd != want {
			t.Fatalf("TruncateTo(%d): %v, log end %d, want %d", off, err, l.Offsets().LogEnd, want)
		}
		l.Close()
	}
}
