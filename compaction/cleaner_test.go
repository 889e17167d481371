package compaction

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/local"
	"github.com/tierlog/tierlog/record"
)

// rec is one record as read back.
type rec struct {
	offset int64
	key    string
	hasKey bool
	value  string
	tomb   bool
	// aborted: written by a transaction that was aborted (set by the
	// writer when it aborts; never read back).
	aborted bool
}

// clock is a settable test clock, safe to read from the goroutines of a
// Backend it is given to (its timing wheel).
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

const retentionMs = 60_000

func openCompacted(t testing.TB, dir string, c *clock, kv ...string) *local.Log {
	t.Helper()
	m := map[string]string{"cleanup.policy": "compact", "segment.bytes": "4096",
		"delete.retention.ms": strconv.Itoa(retentionMs), "file.delete.delay.ms": "0"}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	cfg, err := backend.ParseConfig(m)
	if err != nil {
		t.Fatal(err)
	}
	l, err := local.Open(dir, local.Options{Config: cfg, Now: c.now, HighWatermark: -1, LogStartOffset: -1})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// appendRandom appends n batches of 1..5 records: keys from a space of
// keys names, 10% tombstones, some keyless records; it returns what it
// wrote.
func appendRandom(t testing.TB, l *local.Log, rng *rand.Rand, n, keys int, c *clock, codec record.Codec) []rec {
	t.Helper()
	out, err := appendRecords(l, rng, n, keys, c, codec)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// appendRecords is appendRandom returning its error (for goroutines).
func appendRecords(l *local.Log, rng *rand.Rand, n, keys int, c *clock, codec record.Codec) ([]rec, error) {
	var b record.Builder
	var out []rec
	for range n {
		h := record.NewBatchHeader()
		h.Codec = codec
		b.Reset(h)
		var recs []rec
		for range 1 + rng.IntN(5) {
			r := rec{hasKey: rng.IntN(50) != 0}
			var k, v []byte
			if r.hasKey {
				r.key = fmt.Sprintf("key-%d", rng.IntN(keys))
				k = []byte(r.key)
			}
			if rng.IntN(10) == 0 {
				r.tomb = true
			} else {
				r.value = fmt.Sprintf("value-%d-%s", rng.Int64(), strings.Repeat("x", rng.IntN(64)))
				v = []byte(r.value)
			}
			b.Append(c.now().UnixMilli(), k, v, nil)
			recs = append(recs, r)
		}
		batch, err := b.Build()
		if err != nil {
			return out, err
		}
		opts := backend.AppendOptions{AssignOffsets: true}
		if slices.ContainsFunc(recs, func(r rec) bool { return !r.hasKey }) {
			// A leader refuses keyless records on a compacted topic (as
			// Kafka's does); a log gets them from a follower's append (or
			// from before its policy became compact).
			batch.SetBaseOffset(l.Offsets().LogEnd)
			opts = backend.AppendOptions{}
		}
		info, err := l.Append(context.Background(), batch, opts)
		if err != nil {
			return out, err
		}
		for i := range recs {
			recs[i].offset = info.FirstOffset + int64(i)
		}
		out = append(out, recs...)
		if err := l.SetHighWatermark(info.LastOffset + 1); err != nil {
			return out, err
		}
	}
	return out, nil
}

// readAll reads every record of l, checking offsets only increase.
func readAll(t testing.TB, l *local.Log) []rec {
	t.Helper()
	var out []rec
	var it record.Iterator
	off := l.Offsets().LogStart
	for off < l.Offsets().LogEnd {
		rs, err := l.Read(context.Background(), off, backend.ReadOptions{MaxBytes: 1 << 20, MinOneBatch: true})
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
			// The clean removed every batch from off to the log end (the
			// active segment is empty): the segments must say so.
			checkNothingFrom(t, l, off)
			break
		}
		for len(data) > 0 {
			b, err := record.Parse(data)
			if err != nil {
				t.Fatal(err)
			}
			if err := b.Validate(); err != nil {
				t.Fatalf("batch at %d: %v", b.BaseOffset(), err)
			}
			if b.IsControl() { // a transaction marker, not data
				off = b.NextOffset()
				data = data[b.Size():]
				continue
			}
			if err := it.Reset(b); err != nil {
				t.Fatal(err)
			}
			for it.Next() {
				r := it.Record()
				if len(out) > 0 && r.Offset <= out[len(out)-1].offset {
					t.Fatalf("offset %d after %d", r.Offset, out[len(out)-1].offset)
				}
				if r.Offset < off {
					continue
				}
				out = append(out, rec{offset: r.Offset, key: string(r.Key), hasKey: r.Key != nil, value: string(r.Value), tomb: r.Value == nil})
			}
			if err := it.Err(); err != nil {
				t.Fatal(err)
			}
			off = b.NextOffset()
			data = data[b.Size():]
		}
	}
	return out
}

// checkNothingFrom fails unless no segment of l holds a batch ending at or
// after off (what a read at off below the log end returning nothing
// means).
func checkNothingFrom(t testing.TB, l *local.Log, off int64) {
	t.Helper()
	segs := l.SegmentInfos()
	if last := segs[len(segs)-1]; last.Size > 0 {
		t.Fatalf("read at %d returned nothing, the active segment %d holds %d bytes", off, last.BaseOffset, last.Size)
	}
	for _, s := range segs[:len(segs)-1] {
		if s.NextOffset <= off {
			continue
		}
		h, err := l.Segments().OpenSegment(s.BaseOffset)
		if err != nil {
			t.Fatal(err)
		}
		sc := record.NewScanner(h, 0, h.Size(), record.ScanOptions{HeadersOnly: true})
		for sc.Next() {
			if e := sc.Entry(); e.LastOffset >= off {
				h.Close()
				t.Fatalf("read at %d returned nothing, segment %d holds the batch %d..%d", off, s.BaseOffset, e.BaseOffset, e.LastOffset)
			}
		}
		err = sc.Err()
		h.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
}

// checkCleaned checks the log against everything written: below end, each
// key keeps only the record with its latest offset below end among those
// not aborted (a tombstone may be gone), keyless and aborted records are
// gone; from end on, the log holds exactly what was written.
func checkCleaned(t *testing.T, got, written []rec, end int64) {
	t.Helper()
	latest := map[string]rec{}
	for _, r := range written {
		if r.offset < end && r.hasKey && !r.aborted {
			latest[r.key] = r
		}
	}
	byOffset := map[int64]rec{}
	for _, r := range written {
		if r.aborted && r.offset < end {
			continue // must be gone
		}
		r.aborted = false
		byOffset[r.offset] = r
	}
	seen := map[string]bool{}
	var above []rec
	for _, g := range got {
		w, ok := byOffset[g.offset]
		if !ok || w != g {
			t.Fatalf("offset %d reads %+v, was written as %+v", g.offset, g, w)
		}
		if g.offset >= end {
			above = append(above, g)
			continue
		}
		if !g.hasKey {
			t.Fatalf("keyless record at %d survived cleaning up to %d", g.offset, end)
		}
		if seen[g.key] {
			t.Fatalf("key %s kept twice below %d", g.key, end)
		}
		seen[g.key] = true
		if latest[g.key].offset != g.offset {
			t.Fatalf("key %s kept at %d, its latest below %d is %d", g.key, g.offset, end, latest[g.key].offset)
		}
	}
	for k, r := range latest {
		if !seen[k] && !r.tomb {
			t.Fatalf("key %s lost: its latest value (offset %d) is gone", k, r.offset)
		}
	}
	var want []rec
	for _, r := range written {
		if r.offset >= end {
			want = append(want, r)
		}
	}
	if len(above) != len(want) {
		t.Fatalf("%d records at or above %d, %d written", len(above), end, len(want))
	}
}

func TestCleanModel(t *testing.T) {
	for _, tc := range []struct {
		name  string
		keys  int
		codec record.Codec
		mem   int
	}{
		{"small-keyspace", 10, record.None, 1 << 20},
		{"large-keyspace", 2000, record.None, 1 << 20},
		{"zstd", 200, record.ZSTD, 1 << 20},
		{"tiny-map", 500, record.LZ4, 24 * 200}, // many rounds per dirty section
	} {
		t.Run(tc.name, func(t *testing.T) {
			for seed := range uint64(4) {
				rng := rand.New(rand.NewPCG(seed, 7))
				c := &clock{t: time.UnixMilli(1_700_000_000_000)}
				l := openCompacted(t, t.TempDir(), c)
				var written []rec
				checkpoint := int64(-1)
				for round := range 8 {
					written = append(written, appendRandom(t, l, rng, 50+rng.IntN(150), tc.keys, c, tc.codec)...)
					c.add(time.Duration(rng.IntN(2*retentionMs)) * time.Millisecond)
					st, err := Clean(context.Background(), l, checkpoint, Options{MemoryBytes: tc.mem, Now: c.now})
					if err != nil {
						t.Fatalf("seed %d round %d: %v", seed, round, err)
					}
					if st.End < checkpoint {
						t.Fatalf("the checkpoint went back from %d to %d", checkpoint, st.End)
					}
					checkpoint = st.End
					checkSegments(t, l, producerLasts(l), recopiedTo(st), fmt.Sprintf("seed %d round %d", seed, round))
					checkCleaned(t, readAll(t, l), written, st.End)
				}
				// Clean to the end twice, a retention apart: every tombstone
				// is given its horizon, then removed.
				if err := l.Roll(); err != nil {
					t.Fatal(err)
				}
				cleanToEnd(t, l, tc.mem, c)
				c.add(2 * retentionMs * time.Millisecond)
				cleanToEnd(t, l, tc.mem, c)
				got := readAll(t, l)
				checkCleaned(t, got, written, l.Offsets().LogEnd)
				for _, g := range got {
					if g.tomb {
						t.Fatalf("tombstone of %s at %d outlived its horizon", g.key, g.offset)
					}
				}
				if err := l.Close(); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// cleanToEnd runs rounds from the log start until one reaches the log end.
func cleanToEnd(t *testing.T, l *local.Log, mem int, c *clock) {
	t.Helper()
	cp := int64(-1)
	for {
		st, err := Clean(context.Background(), l, cp, Options{MemoryBytes: mem, Now: c.now})
		if err != nil {
			t.Fatal(err)
		}
		if st.End >= l.Offsets().LogEnd {
			return
		}
		if st.End <= cp {
			t.Fatalf("a round from %d made no progress", cp)
		}
		cp = st.End
	}
}

// TestCleanWhileAppendingAndReading cleans rounds while a writer appends
// (rolling segments) and a reader reads from the log start and looks
// offsets up by timestamp: no round fails other than by a changed segment
// list, no read or lookup fails, and the final log matches the model.
func TestCleanWhileAppendingAndReading(t *testing.T) {
	c := &clock{t: time.UnixMilli(1_700_000_000_000)}
	l := openCompacted(t, t.TempDir(), c)
	defer l.Close()
	var mu sync.Mutex
	var written []rec
	done := make(chan struct{})
	errs := make(chan error, 2)
	go func() { // writer: appendRandom's records, without t.Fatal
		defer close(done)
		rng := rand.New(rand.NewPCG(3, 3))
		for range 40 {
			recs, err := appendRecords(l, rng, 10, 50, c, record.None)
			if err != nil {
				errs <- err
				return
			}
			mu.Lock()
			written = append(written, recs...)
			mu.Unlock()
		}
		errs <- nil
	}()
	go func() { // reader
		for {
			select {
			case <-done:
				errs <- nil
				return
			default:
			}
			off := l.Offsets().LogStart
			rs, err := l.Read(context.Background(), off, backend.ReadOptions{MaxBytes: 64 << 10, MinOneBatch: true})
			if err != nil {
				errs <- fmt.Errorf("read at %d: %w", off, err)
				return
			}
			var buf bytes.Buffer
			_, err = rs.WriteTo(&buf)
			rs.Close()
			if err != nil {
				errs <- fmt.Errorf("read at %d: %w", off, err)
				return
			}
			if buf.Len() == 0 {
				continue // nothing written yet
			}
			// A lookup (tierctl's) reads the offset index of the
			// segment holding off, which the cleaner may replace.
			if _, err := l.Lookup(off); err != nil {
				errs <- fmt.Errorf("lookup %d: %w", off, err)
				return
			}
			// ListOffsets by timestamp reads the time indexes of the
			// segments the cleaner replaces.
			for _, ts := range []int64{c.now().UnixMilli(), backend.MaxTimestamp} {
				if _, _, found, err := l.OffsetForTimestamp(context.Background(), ts); err != nil || !found {
					errs <- fmt.Errorf("offset for timestamp %d: found %v, %w", ts, found, err)
					return
				}
			}
		}
	}()
	checkpoint := int64(-1)
	replaced := 0
	for running := true; running; {
		select {
		case <-done:
			running = false
		default:
		}
		st, err := Clean(context.Background(), l, checkpoint, Options{MemoryBytes: 1 << 20, Now: c.now})
		if errors.Is(err, local.ErrSegmentsChanged) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		checkpoint = st.End
		replaced += st.SegmentsWritten
	}
	if replaced == 0 {
		t.Fatal("no round replaced segments while the writer ran; the test proves nothing")
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Roll(); err != nil {
		t.Fatal(err)
	}
	cleanToEnd(t, l, 1<<20, c)
	checkCleaned(t, readAll(t, l), written, l.Offsets().LogEnd)
}

// TestCleanMapTooSmallForOneBatch: a map that cannot hold a single batch
// is an error naming the cure, not a round that silently makes no progress.
func TestCleanMapTooSmallForOneBatch(t *testing.T) {
	c := &clock{t: time.UnixMilli(1_700_000_000_000)}
	l := openCompacted(t, t.TempDir(), c)
	defer l.Close()
	var b record.Builder
	for range 3 {
		b.Reset(record.NewBatchHeader())
		for i := range 100 {
			b.Append(c.now().UnixMilli(), fmt.Appendf(nil, "k%d", i), make([]byte, 4), nil)
		}
		batch, err := b.Build()
		if err != nil {
			t.Fatal(err)
		}
		info, err := l.Append(context.Background(), batch, backend.AppendOptions{AssignOffsets: true})
		if err != nil {
			t.Fatal(err)
		}
		if err := l.SetHighWatermark(info.LastOffset + 1); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Roll(); err != nil {
		t.Fatal(err)
	}
	_, err := Clean(context.Background(), l, -1, Options{MemoryBytes: 24 * 50, Now: c.now})
	if !errors.Is(err, ErrMapFull) || !strings.Contains(err.Error(), "raise") {
		t.Fatalf("a 45-key map against 100-record batches: %v", err)
	}
}

// TestCleanTombstoneWithZeroRetention: with delete.retention.ms=0, a
// batch whose only record kept is a tombstone seen for the first time is
// rewritten with the tombstone and its delete horizon (each record is
// decided once, against the horizon the batch had, as Kafka's filterTo
// does), and the next round removes it. Deciding again after setting the
// horizon dropped the tombstone from the rebuilt batch, left it empty,
// and failed every round on that log.
func TestCleanTombstoneWithZeroRetention(t *testing.T) {
	c := &clock{t: time.UnixMilli(1_700_000_000_000)}
	l := openCompacted(t, t.TempDir(), c, "delete.retention.ms", "0")
	defer l.Close()
	var b record.Builder
	for _, kv := range [][2]string{{"a", "1"}, {"b", "1"}, {"a", ""}, {"c", "1"}} {
		b.Reset(record.NewBatchHeader())
		var v []byte
		if kv[1] != "" {
			v = []byte(kv[1])
		}
		b.Append(c.now().UnixMilli(), []byte(kv[0]), v, nil)
		batch, err := b.Build()
		if err != nil {
			t.Fatal(err)
		}
		info, err := l.Append(context.Background(), batch, backend.AppendOptions{AssignOffsets: true})
		if err != nil {
			t.Fatal(err)
		}
		if err := l.SetHighWatermark(info.LastOffset + 1); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Roll(); err != nil {
		t.Fatal(err)
	}
	keys := func() (out []string) {
		for _, r := range readAll(t, l) {
			out = append(out, fmt.Sprintf("%d:%s=%s", r.offset, r.key, r.value))
		}
		return out
	}
	for round, want := range [][]string{{"1:b=1", "2:a=", "3:c=1"}, {"1:b=1", "3:c=1"}} {
		st, err := Clean(context.Background(), l, -1, Options{Now: c.now})
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if got := keys(); !slices.Equal(got, want) {
			t.Fatalf("round %d: the log holds %v, want %v", round, got, want)
		}
		if round == 0 && st.TombstonesKept != 1 {
			t.Fatalf("round 0 kept %d tombstones, want 1", st.TombstonesKept)
		}
	}
}

// TestCleanCorruptSegment: a corrupt batch stops the round with an error
// naming the file; nothing is replaced and no .cleaned file is left.
func TestCleanCorruptSegment(t *testing.T) {
	c := &clock{t: time.UnixMilli(1_700_000_000_000)}
	dir := t.TempDir()
	l := openCompacted(t, dir, c)
	defer l.Close()
	appendRandom(t, l, rand.New(rand.NewPCG(5, 5)), 100, 10, c, record.None)
	if err := l.Roll(); err != nil {
		t.Fatal(err)
	}
	segs := l.SegmentInfos()
	f, err := os.OpenFile(segs[1].Path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte{0xff, 0xfe}, 70); err != nil { // inside the first batch's records
		t.Fatal(err)
	}
	f.Close()
	_, err = Clean(context.Background(), l, -1, Options{MemoryBytes: 1 << 20, Now: c.now})
	if !errors.Is(err, record.ErrCorrupt) || !strings.Contains(err.Error(), filepath.Base(segs[1].Path)) {
		t.Fatalf("cleaning a corrupt segment: %v", err)
	}
	if after := l.SegmentInfos(); len(after) != len(segs) {
		t.Fatalf("%d segments after a failed round, %d before", len(after), len(segs))
	}
	if m, _ := filepath.Glob(filepath.Join(dir, "*.cleaned")); len(m) != 0 {
		t.Fatalf("left behind: %v", m)
	}
}
