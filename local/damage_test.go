package local_test

import (
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/index"
	"github.com/tierlog/tierlog/local"
	"github.com/tierlog/tierlog/record"
)

// Damaged local files give an error naming the file and position, or the
// right answer (a damaged time index is rebuilt, or bypassed read-only);
// never a wrong answer.

// damageLog writes a log of many small segments with rising timestamps,
// closes it cleanly and returns its config and every record.
func damageLog(t *testing.T, dir string) (backend.Config, []record.Record) {
	t.Helper()
	c := cfg(t, "segment.bytes", "8192", "index.interval.bytes", "300")
	l := openLog(t, dir, c, false)
	for i := range 120 {
		if _, err := l.Append(ctx, batchOf(3, 1_700_000_000_000+int64(i)*10, "d"), backend.AppendOptions{AssignOffsets: true}); err != nil {
			t.Fatal(err)
		}
	}
	recs := readAll(t, l, 0)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return c, recs
}

// checkTimestamps asks OffsetForTimestamp for every record's timestamp
// (and one before each) and compares with the records themselves.
func checkTimestamps(t *testing.T, l *local.Log, recs []record.Record, what string) {
	t.Helper()
	for _, r := range recs {
		for _, ts := range []int64{r.Timestamp - 1, r.Timestamp} {
			var want int64 = -1
			for _, x := range recs {
				if x.Timestamp >= ts {
					want = x.Offset
					break
				}
			}
			off, _, found, err := l.OffsetForTimestamp(ctx, ts)
			if err != nil || !found || off != want {
				t.Fatalf("%s: OffsetForTimestamp(%d) = %d, %v, %v; want %d", what, ts, off, found, err, want)
			}
		}
	}
}

// flipTimeIndexEntry flips the 8 timestamp bytes of entry i of a segment's
// time index.
func flipTimeIndexEntry(t *testing.T, path string, i int) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if (i+1)*index.TimeEntrySize > len(data) {
		t.Fatalf("%s has %d entries", path, len(data)/index.TimeEntrySize)
	}
	for j := 0; j < 8; j++ {
		data[i*index.TimeEntrySize+j] ^= 0xff
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestDamagedTimeIndexIsNotTrusted(t *testing.T) {
	for _, entry := range []string{"first", "middle", "last"} {
		for _, readOnly := range []bool{false, true} {
			dir := t.TempDir()
			c, recs := damageLog(t, dir)
			segs := segmentFiles(t, dir)
			tidx := strings.TrimSuffix(segs[1], local.LogSuffix) + local.TimeIndexSuffix
			fi, _ := os.Stat(tidx)
			n := int(fi.Size()) / index.TimeEntrySize
			i := map[string]int{"first": 0, "middle": n / 2, "last": n - 1}[entry]
			flipTimeIndexEntry(t, tidx, i)
			l, err := local.Open(dir, local.Options{Config: c, CleanShutdown: true, ReadOnly: readOnly, LogStartOffset: -1, HighWatermark: -1})
			if err != nil {
				t.Fatal(err)
			}
			checkTimestamps(t, l, recs, "time index entry "+entry+" flipped")
			l.Close()
		}
	}
}

func TestMissingTimeIndexReadOnly(t *testing.T) {
	dir := t.TempDir()
	c, recs := damageLog(t, dir)
	for _, seg := range segmentFiles(t, dir) {
		if err := os.Remove(strings.TrimSuffix(seg, local.LogSuffix) + local.TimeIndexSuffix); err != nil {
			t.Fatal(err)
		}
	}
	l, err := local.Open(dir, local.Options{Config: c, ReadOnly: true, LogStartOffset: -1, HighWatermark: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	checkTimestamps(t, l, recs, "every time index deleted, read-only")
	if _, err := os.Stat(strings.TrimSuffix(segmentFiles(t, dir)[0], local.LogSuffix) + local.TimeIndexSuffix); err == nil {
		t.Fatal("a read-only log wrote a time index")
	}
}

// segmentFiles lists a partition's .log files in offset order.
func segmentFiles(t *testing.T, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "*"+local.LogSuffix))
	if err != nil || len(m) < 3 {
		t.Fatalf("segments: %v %v", m, err)
	}
	return m
}

// readThrough reads the whole log batch by batch and returns the first
// error.
func readThrough(l *local.Log) error {
	for off := l.Offsets().LogStart; off < l.Offsets().LogEnd; {
		rs, err := l.Read(ctx, off, backend.ReadOptions{MaxBytes: 1 << 20, MinOneBatch: true})
		if err != nil {
			return err
		}
		next := rs.(backend.OffsetRange).NextOffset()
		rs.Close()
		if next <= off {
			return errors.New("no progress")
		}
		off = next
	}
	return nil
}

func TestClosedSegmentCutShort(t *testing.T) {
	for _, cut := range []string{"inside a batch", "at a batch boundary", "after the last index entry"} {
		dir := t.TempDir()
		c, _ := damageLog(t, dir)
		seg := segmentFiles(t, dir)[1]
		data, _ := os.ReadFile(seg)
		var size int64
		switch cut {
		case "inside a batch":
			size = int64(len(data)) / 2
		case "at a batch boundary":
			b, _ := record.Parse(data)
			size = int64(len(b)) // only the first batch is left
		case "after the last index entry":
			// Drop the last batch: its offsets come after every index
			// entry of the segment.
			pos := int64(0)
			for pos < int64(len(data)) {
				b, _ := record.Parse(data[pos:])
				if pos+int64(len(b)) == int64(len(data)) {
					break
				}
				pos += int64(len(b))
			}
			size = pos
		}
		if err := os.Truncate(seg, size); err != nil {
			t.Fatal(err)
		}
		for _, readOnly := range []bool{false, true} {
			l, err := local.Open(dir, local.Options{Config: c, CleanShutdown: true, ReadOnly: readOnly, LogStartOffset: -1, HighWatermark: -1})
			if err != nil {
				t.Fatal(err)
			}
			err = readThrough(l)
			l.Close()
			if !errors.Is(err, backend.ErrCorruptRecord) || !strings.Contains(err.Error(), filepath.Base(seg)) {
				t.Fatalf("%s (read-only %v): reading through gave %v; want ErrCorruptRecord naming %s", cut, readOnly, err, filepath.Base(seg))
			}
		}
	}
}

func TestBatchWithChangedBaseOffset(t *testing.T) {
	for _, delta := range []int64{-2, -1, 1, 2, 5} {
		for _, which := range []string{"first", "middle", "last"} {
			dir := t.TempDir()
			c, _ := damageLog(t, dir)
			seg := segmentFiles(t, dir)[1]
			data, _ := os.ReadFile(seg)
			var positions []int64
			for pos := int64(0); pos < int64(len(data)); {
				b, _ := record.Parse(data[pos:])
				positions = append(positions, pos)
				pos += int64(len(b))
			}
			pos := map[string]int64{"first": positions[0], "middle": positions[len(positions)/2], "last": positions[len(positions)-1]}[which]
			base := int64(binary.BigEndian.Uint64(data[pos:]))
			binary.BigEndian.PutUint64(data[pos:], uint64(base+delta)) // outside the CRC
			if err := os.WriteFile(seg, data, 0o644); err != nil {
				t.Fatal(err)
			}
			l := openLog(t, dir, c, true)
			err := readThrough(l)
			l.Close()
			if !errors.Is(err, backend.ErrCorruptRecord) || !strings.Contains(err.Error(), filepath.Base(seg)) {
				t.Fatalf("base offset of the %s batch moved by %d: reading through gave %v; want ErrCorruptRecord naming the file", which, delta, err)
			}
		}
	}
}
