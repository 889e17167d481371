package local_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/local"
	"github.com/tierlog/tierlog/record"
)

var ctx = context.Background()

func cfg(t testing.TB, kv ...string) backend.Config {
	t.Helper()
	m := map[string]string{}
	for i := 0; i < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	c, err := backend.ParseConfig(m)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// batchOf builds one batch of n records with values "v<i>" and timestamp ts.
func batchOf(n int, ts int64, tag string) []byte {
	var b record.Builder
	b.Reset(record.NewBatchHeader())
	for i := 0; i < n; i++ {
		b.Append(ts, []byte(fmt.Sprintf("k%d", i%7)), []byte(fmt.Sprintf("%s-%d-%s", tag, i, bytes.Repeat([]byte("x"), 50))), nil)
	}
	out, _ := b.Build()
	return append([]byte(nil), out...)
}

func openLog(t testing.TB, dir string, c backend.Config, clean bool) *local.Log {
	t.Helper()
	l, err := local.Open(dir, local.Options{Config: c, CleanShutdown: clean, LogStartOffset: -1, HighWatermark: -1})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// readAll reads every record from offset to the log end.
func readAll(t testing.TB, l *local.Log, from int64) []record.Record {
	t.Helper()
	var out []record.Record
	var it record.Iterator
	off := from
	for off < l.Offsets().LogEnd {
		recs, err := l.Read(ctx, off, backend.ReadOptions{MaxBytes: 64 << 10, MinOneBatch: true})
		if err != nil {
			t.Fatalf("read %d: %v", off, err)
		}
		var buf bytes.Buffer
		if _, err := local.ReadAll(recs, &buf); err != nil {
			t.Fatal(err)
		}
		if buf.Len() == 0 {
			t.Fatalf("empty read at %d below the log end %d", off, l.Offsets().LogEnd)
		}
		sc := record.NewScanner(bytes.NewReader(buf.Bytes()), 0, int64(buf.Len()), record.ScanOptions{Validate: true})
		for sc.Next() {
			if err := it.Reset(sc.Entry().Data); err != nil {
				t.Fatal(err)
			}
			for it.Next() {
				r := *it.Record()
				if r.Offset >= off {
					r.Key = append([]byte(nil), r.Key...)
					r.Value = append([]byte(nil), r.Value...)
					r.Headers = nil
					out = append(out, r)
				}
			}
			off = sc.Entry().LastOffset + 1
		}
		if sc.Err() != nil {
			t.Fatal(sc.Err())
		}
	}
	return out
}

func TestAppendReadRollReopen(t *testing.T) {
	dir := t.TempDir()
	c := cfg(t, "segment.bytes", "4096", "index.interval.bytes", "512")
	l := openLog(t, dir, c, false)
	var want int64
	for i := 0; i < 100; i++ {
		n := 1 + i%5
		info, err := l.Append(ctx, batchOf(n, 1000+int64(i), fmt.Sprint(i)), backend.AppendOptions{AssignOffsets: true, LeaderEpoch: 3})
		if err != nil {
			t.Fatal(err)
		}
		if info.FirstOffset != want || info.LastOffset != want+int64(n)-1 {
			t.Fatalf("append %d: offsets %d..%d, want from %d", i, info.FirstOffset, info.LastOffset, want)
		}
		want += int64(n)
	}
	if got := l.Offsets().LogEnd; got != want {
		t.Fatalf("log end %d, want %d", got, want)
	}
	if len(l.SegmentInfos()) < 5 {
		t.Fatalf("%d segments: segment.bytes=4096 did not roll", len(l.SegmentInfos()))
	}
	recs := readAll(t, l, 0)
	if int64(len(recs)) != want {
		t.Fatalf("read %d records, want %d", len(recs), want)
	}
	for i, r := range recs {
		if r.Offset != int64(i) {
			t.Fatalf("record %d has offset %d", i, r.Offset)
		}
	}
	// Every offset reads back from its own batch.
	for off := int64(0); off < want; off++ {
		got := readAll(t, l, off)
		if len(got) == 0 || got[0].Offset != off {
			t.Fatalf("read from %d starts at %v", off, got)
		}
		if off > 20 {
			break
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	// Every closed segment's indexes are trimmed; a clean reopen continues.
	l = openLog(t, dir, c, true)
	defer l.Close()
	if l.Offsets().LogEnd != want {
		t.Fatalf("after reopen: log end %d, want %d", l.Offsets().LogEnd, want)
	}
	if _, err := l.Append(ctx, batchOf(2, 5000, "after"), backend.AppendOptions{AssignOffsets: true, LeaderEpoch: 4}); err != nil {
		t.Fatal(err)
	}
	if got := len(readAll(t, l, 0)); int64(got) != want+2 {
		t.Fatalf("after reopen and append: %d records", got)
	}
	if e := l.LeaderEpochs(); len(e) != 2 || e[0] != (local.EpochEntry{Epoch: 3, StartOffset: 0}) || e[1] != (local.EpochEntry{Epoch: 4, StartOffset: want}) {
		t.Fatalf("epochs %v", e)
	}
}

func TestUncleanReopenRecoversTornTail(t *testing.T) {
	dir := t.TempDir()
	c := cfg(t, "segment.bytes", "100000")
	l := openLog(t, dir, c, false)
	for i := 0; i < 10; i++ {
		if _, err := l.Append(ctx, batchOf(3, 1000, "a"), backend.AppendOptions{AssignOffsets: true}); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Flush(); err != nil {
		t.Fatal(err)
	}
	// Simulate a crash mid-append: half a batch at the end of the file,
	// and no Close (indexes untrimmed).
	p := filepath.Join(dir, local.FileName(0, local.LogSuffix))
	f, _ := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
	half := batchOf(3, 1000, "torn")
	f.Write(half[:len(half)/2])
	f.Close()
	l2, err := local.Open(dir, local.Options{Config: c, LogStartOffset: -1, HighWatermark: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Close()
	if l2.Offsets().LogEnd != 30 {
		t.Fatalf("log end after recovery %d, want 30", l2.Offsets().LogEnd)
	}
	if got := len(readAll(t, l2, 0)); got != 30 {
		t.Fatalf("%d records after recovery, want 30", got)
	}
	if _, err := l2.Append(ctx, batchOf(1, 1000, "b"), backend.AppendOptions{AssignOffsets: true}); err != nil {
		t.Fatal(err)
	}
}

func TestAppendValidation(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, dir, cfg(t, "max.message.bytes", "2000"), false)
	defer l.Close()
	good := batchOf(2, 1, "g")
	if _, err := l.Append(ctx, good, backend.AppendOptions{AssignOffsets: true}); err != nil {
		t.Fatal(err)
	}
	bad := append([]byte(nil), good...)
	bad[len(bad)-3] ^= 1
	cases := []struct {
		name string
		data []byte
		opts backend.AppendOptions
		want error
	}{
		{"crc", append(append([]byte(nil), good...), bad...), backend.AppendOptions{AssignOffsets: true}, backend.ErrCorruptRecord},
		{"too large", batchOf(40, 1, "big"), backend.AppendOptions{AssignOffsets: true}, backend.ErrRecordTooLarge},
		{"torn", good[:len(good)-1], backend.AppendOptions{AssignOffsets: true}, backend.ErrCorruptRecord},
		{"empty", nil, backend.AppendOptions{AssignOffsets: true}, backend.ErrInvalidRecord},
		{"follower gap backwards", good, backend.AppendOptions{}, backend.ErrInvalidRecord},
	}
	for _, c := range cases {
		before := l.Offsets()
		size := l.SegmentInfos()[0].Size
		_, err := l.Append(ctx, c.data, c.opts)
		if !errors.Is(err, c.want) {
			t.Errorf("%s: err %v, want %v", c.name, err, c.want)
		}
		if l.Offsets() != before || l.SegmentInfos()[0].Size != size {
			t.Errorf("%s: a failed append changed the log", c.name)
		}
	}
	// A follower append continues at the log end with its own offsets.
	fb := batchOf(2, 1, "f")
	record.Batch(fb).SetBaseOffset(2)
	if _, err := l.Append(ctx, fb, backend.AppendOptions{}); err != nil {
		t.Fatal(err)
	}
	if l.Offsets().LogEnd != 4 {
		t.Fatalf("log end %d", l.Offsets().LogEnd)
	}
}

func TestOffsetForTimestampAndRetention(t *testing.T) {
	dir := t.TempDir()
	now := time.UnixMilli(1_000_000)
	c := cfg(t, "segment.bytes", "2000", "retention.ms", "5000", "file.delete.delay.ms", "0")
	l, err := local.Open(dir, local.Options{Config: c, Now: func() time.Time { return now }, LogStartOffset: -1, HighWatermark: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for i := 0; i < 30; i++ {
		if _, err := l.Append(ctx, batchOf(2, int64(1000*i), "t"), backend.AppendOptions{AssignOffsets: true}); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		ts, off int64
		found   bool
	}{{0, 0, true}, {1, 2, true}, {1000, 2, true}, {14500, 30, true}, {29000, 58, true}, {29001, 0, false}} {
		off, _, found, err := l.OffsetForTimestamp(ctx, c.ts)
		if err != nil || found != c.found || (found && off != c.off) {
			t.Errorf("OffsetForTimestamp(%d) = %d, %v, %v; want %d, %v", c.ts, off, found, err, c.off, c.found)
		}
	}
	// Nothing is deleted above the high watermark.
	if n, err := l.DeleteOldSegments(); err != nil || n != 0 {
		t.Fatalf("retention with high watermark 0 deleted %d (%v)", n, err)
	}
	l.SetHighWatermark(l.Offsets().LogEnd)
	now = time.UnixMilli(15000 + 5001)
	segsBefore := len(l.SegmentInfos())
	n, err := l.DeleteOldSegments()
	if err != nil || n == 0 {
		t.Fatalf("time retention deleted %d (%v)", n, err)
	}
	if len(l.SegmentInfos()) != segsBefore-n {
		t.Fatal("segment count")
	}
	ls := l.Offsets().LogStart
	if ls == 0 || ls != l.SegmentInfos()[0].BaseOffset {
		t.Fatalf("log start %d after retention", ls)
	}
	if _, err := l.Read(ctx, 0, backend.ReadOptions{}); !errors.Is(err, backend.ErrOffsetOutOfRange) {
		t.Fatalf("read below log start: %v", err)
	}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if filepath.Ext(e.Name()) == ".deleted" {
			t.Fatalf("%s left behind with file.delete.delay.ms=0", e.Name())
		}
	}
	// DeleteRecordsBefore raises the log start inside a segment.
	if err := l.DeleteRecordsBefore(ctx, ls+1); err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, l, ls+1); got[0].Offset != ls+1 {
		t.Fatalf("read after DeleteRecordsBefore starts at %d", got[0].Offset)
	}
	if err := l.DeleteRecordsBefore(ctx, l.Offsets().HighWatermark+1); !errors.Is(err, backend.ErrOffsetOutOfRange) {
		t.Fatalf("DeleteRecordsBefore past the high watermark: %v", err)
	}
}

func TestTruncateTo(t *testing.T) {
	dir := t.TempDir()
	c := cfg(t, "segment.bytes", "1500")
	l := openLog(t, dir, c, false)
	defer l.Close()
	for i := 0; i < 20; i++ {
		if _, err := l.Append(ctx, batchOf(2, int64(i), "t"), backend.AppendOptions{AssignOffsets: true, LeaderEpoch: int32(i / 5)}); err != nil {
			t.Fatal(err)
		}
	}
	l.SetHighWatermark(40)
	if err := l.TruncateTo(13); err != nil { // inside the batch 12..13
		t.Fatal(err)
	}
	if l.Offsets().LogEnd != 12 || l.Offsets().HighWatermark != 12 {
		t.Fatalf("after TruncateTo(13): %+v", l.Offsets())
	}
	if got := len(readAll(t, l, 0)); got != 12 {
		t.Fatalf("%d records after truncation", got)
	}
	if e := l.LeaderEpochs(); len(e) != 2 || e[1].Epoch != 1 {
		t.Fatalf("epochs after truncation: %v", e)
	}
	if _, err := l.Append(ctx, batchOf(2, 99, "n"), backend.AppendOptions{AssignOffsets: true, LeaderEpoch: 9}); err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, l, 12); len(got) != 2 || got[0].Offset != 12 {
		t.Fatalf("append after truncation: %v", got)
	}
	if err := l.TruncateTo(0); err != nil {
		t.Fatal(err)
	}
	if o := l.Offsets(); o.LogEnd != 0 || o.LogStart != 0 {
		t.Fatalf("after TruncateTo(0): %+v", o)
	}
}

// TestSendfileToSocket writes a read to a loopback TCP connection and
// compares the bytes with the file's.
func TestSendfileToSocket(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, dir, cfg(t), false)
	defer l.Close()
	for i := 0; i < 50; i++ {
		l.Append(ctx, batchOf(10, 1, "s"), backend.AppendOptions{AssignOffsets: true})
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	got := make(chan []byte, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			got <- nil
			return
		}
		b, _ := io.ReadAll(c)
		c.Close()
		got <- b
	}()
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	recs, err := l.Read(ctx, 0, backend.ReadOptions{MaxBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	n, err := recs.WriteTo(conn)
	recs.Close()
	conn.Close()
	if err != nil || n != recs.Len() {
		t.Fatalf("WriteTo: %d of %d, %v", n, recs.Len(), err)
	}
	want, _ := os.ReadFile(filepath.Join(dir, local.FileName(0, local.LogSuffix)))
	if b := <-got; !bytes.Equal(b, want[:n]) {
		t.Fatalf("socket received %d bytes that differ from the file", len(b))
	}
}

func TestReadOnlyOpenChangesNothing(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, dir, cfg(t, "segment.bytes", "3000"), false)
	for i := 0; i < 20; i++ {
		l.Append(ctx, batchOf(3, int64(i), "r"), backend.AppendOptions{AssignOffsets: true})
	}
	l.Flush() // not closed: the active indexes stay preallocated, as on a live broker
	// A torn tail as well.
	p := filepath.Join(dir, local.FileName(l.SegmentInfos()[len(l.SegmentInfos())-1].BaseOffset, local.LogSuffix))
	f, _ := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
	f.Write([]byte{0, 0, 0, 0, 0, 0, 0, 99, 0, 0, 1})
	f.Close()
	snapshot := func() map[string]string {
		m := map[string]string{}
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			b, _ := os.ReadFile(filepath.Join(dir, e.Name()))
			st, _ := e.Info()
			m[e.Name()] = fmt.Sprintf("%x %d %v", b, len(b), st.ModTime())
		}
		return m
	}
	before := snapshot()
	ro, err := local.Open(dir, local.Options{ReadOnly: true, LogStartOffset: -1, HighWatermark: -1})
	if err != nil {
		t.Fatal(err)
	}
	if got := len(readAll(t, ro, 0)); got != 60 {
		t.Fatalf("read-only open read %d records, want 60", got)
	}
	if _, err := ro.Lookup(31); err != nil {
		t.Fatal(err)
	}
	if _, err := ro.Append(ctx, batchOf(1, 1, "x"), backend.AppendOptions{AssignOffsets: true}); !errors.Is(err, local.ErrReadOnly) {
		t.Fatalf("append to a read-only log: %v", err)
	}
	if err := ro.TruncateTo(0); !errors.Is(err, local.ErrReadOnly) {
		t.Fatalf("truncate of a read-only log: %v", err)
	}
	ro.Close()
	after := snapshot()
	if len(after) != len(before) {
		t.Fatalf("files changed: %d before, %d after", len(before), len(after))
	}
	for k, v := range before {
		if after[k] != v {
			t.Fatalf("%s changed under a read-only open", k)
		}
	}
	l.Close()
	if _, err := local.Open(filepath.Join(dir, "missing"), local.Options{ReadOnly: true}); !errors.Is(err, backend.ErrNotFound) {
		t.Fatalf("read-only open of a missing dir: %v", err)
	}
}

// TestCleanMarkerOverTornTail: a directory marked clean whose last segment
// still ends in a partial batch is recovered, never appended after garbage.
func TestCleanMarkerOverTornTail(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, dir, cfg(t), false)
	for i := 0; i < 5; i++ {
		l.Append(ctx, batchOf(2, 1, "c"), backend.AppendOptions{AssignOffsets: true})
	}
	l.Close()
	p := filepath.Join(dir, local.FileName(0, local.LogSuffix))
	f, _ := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
	f.Write(batchOf(2, 1, "torn")[:30])
	f.Close()
	l = openLog(t, dir, cfg(t), true)
	defer l.Close()
	if l.Offsets().LogEnd != 10 {
		t.Fatalf("log end %d, want 10", l.Offsets().LogEnd)
	}
	if _, err := l.Append(ctx, batchOf(1, 1, "after"), backend.AppendOptions{AssignOffsets: true}); err != nil {
		t.Fatal(err)
	}
	if got := len(readAll(t, l, 0)); got != 11 {
		t.Fatalf("%d records, want 11", got)
	}
}

// TestReaderSurvivesTruncation: a reader holding records of a sealed
// segment keeps reading the original bytes while TruncateTo rewrites it.
func TestReaderSurvivesTruncation(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, dir, cfg(t, "segment.bytes", "1000"), false)
	defer l.Close()
	for i := 0; i < 30; i++ {
		l.Append(ctx, batchOf(2, int64(i), "s"), backend.AppendOptions{AssignOffsets: true})
	}
	if len(l.SegmentInfos()) < 3 {
		t.Fatal("want several segments")
	}
	// Warm the first segment's mapping, then hold a read of it.
	if _, err := l.Lookup(3); err != nil {
		t.Fatal(err)
	}
	held, err := l.Read(ctx, 0, backend.ReadOptions{MaxBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	var want bytes.Buffer
	if r, err := l.Read(ctx, 0, backend.ReadOptions{MaxBytes: 1 << 20}); err == nil {
		local.ReadAll(r, &want)
	}
	if err := l.TruncateTo(5); err != nil {
		t.Fatal(err)
	}
	var got bytes.Buffer
	if _, err := local.ReadAll(held, &got); err != nil {
		t.Fatalf("held read after truncation: %v", err)
	}
	if !bytes.Equal(got.Bytes(), want.Bytes()) {
		t.Fatal("held read returned different bytes after truncation")
	}
	if l.Offsets().LogEnd != 4 {
		t.Fatalf("log end %d after TruncateTo(5) inside batch 4..5", l.Offsets().LogEnd)
	}
	if got := readAll(t, l, 0); len(got) != 4 {
		t.Fatalf("%d records after truncation", len(got))
	}
	if _, err := l.Lookup(3); err != nil {
		t.Fatal(err)
	}
}

func TestPartitionMetadata(t *testing.T) {
	dir := t.TempDir()
	const id = "gSnfpEbtQfSDpxM2lhEn9A"
	l, err := local.Open(dir, local.Options{TopicID: id})
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
	b, _ := os.ReadFile(filepath.Join(dir, local.PartitionMetadataFile))
	if string(b) != "version: 0\ntopic_id: "+id || len(b) != 43 {
		t.Fatalf("partition.metadata = %q (%d bytes), want Kafka's 43-byte form", b, len(b))
	}
	if _, err := local.Open(dir, local.Options{TopicID: "AAAAAAAAAAAAAAAAAAAAAA"}); !errors.Is(err, local.ErrTopicIDMismatch) {
		t.Fatalf("open with another topic id: %v", err)
	}
	l, err = local.Open(dir, local.Options{TopicID: id})
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
}

func TestRollOnSegmentMsAndFlushMessages(t *testing.T) {
	dir := t.TempDir()
	c := cfg(t, "segment.ms", "1000", "flush.messages", "5")
	l := openLog(t, dir, c, false)
	defer l.Close()
	ts := int64(1_000_000)
	for i := 0; i < 3; i++ {
		l.Append(ctx, batchOf(2, ts+int64(i)*400, "t"), backend.AppendOptions{AssignOffsets: true})
	}
	// 0, 400, 800: within segment.ms of the first batch.
	if n := len(l.SegmentInfos()); n != 1 {
		t.Fatalf("%d segments before segment.ms passed", n)
	}
	l.Append(ctx, batchOf(2, ts+1001, "t"), backend.AppendOptions{AssignOffsets: true})
	if n := len(l.SegmentInfos()); n != 2 || l.SegmentInfos()[1].BaseOffset != 6 {
		t.Fatalf("segment.ms did not roll at offset 6: %+v", l.SegmentInfos())
	}
	// flush.messages=5: 8 records appended, so a flush happened after the
	// batch that crossed 5 (recovery point moved past 0).
	if rp := l.RecoveryPoint(); rp < 6 {
		t.Fatalf("recovery point %d after 8 records with flush.messages=5", rp)
	}
}

func openFDs(t *testing.T) int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip("no /proc/self/fd")
	}
	return len(ents)
}

// TestOpenFileBudget: reading every closed segment of a long log keeps at
// most MaxOpenSegmentFiles of them open; records held by a reader stay
// readable while other segments are evicted.
func TestOpenFileBudget(t *testing.T) {
	dir := t.TempDir()
	c := cfg(t, "segment.bytes", "1000")
	l := openLog(t, dir, c, false)
	for i := 0; i < 300; i++ {
		l.Append(ctx, batchOf(2, int64(i), "b"), backend.AppendOptions{AssignOffsets: true})
	}
	l.Close()
	l, err := local.Open(dir, local.Options{Config: c, CleanShutdown: true, RecoveryPoint: 600, LogStartOffset: -1, HighWatermark: -1, MaxOpenSegmentFiles: 5})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if n := len(l.SegmentInfos()); n < 50 {
		t.Fatalf("only %d segments", n)
	}
	before := openFDs(t)
	held, err := l.Read(ctx, 0, backend.ReadOptions{MaxBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	peak := 0
	for off := int64(0); off < l.Offsets().LogEnd; off += 2 {
		if _, err := l.Lookup(off); err != nil {
			t.Fatal(err)
		}
		peak = max(peak, openFDs(t)-before)
	}
	if peak > 5+2 {
		t.Fatalf("%d more descriptors open at the peak, with a budget of 5", peak)
	}
	var buf bytes.Buffer
	if _, err := local.ReadAll(held, &buf); err != nil || buf.Len() == 0 {
		t.Fatalf("a held read failed after evictions: %v", err)
	}
	if got := len(readAll(t, l, 0)); got != 600 {
		t.Fatalf("read %d records after evictions, want 600", got)
	}
}

// TestReadNextOffset: Records.NextOffset is one past the last batch a read
// returned, whatever the byte limit, so a consumer that fetches from it
// reads every record once. (A limit that fell inside an indexed batch used
// to report 0.)
func TestReadNextOffset(t *testing.T) {
	l := openLog(t, t.TempDir(), cfg(t, "index.interval.bytes", "512"), false)
	defer l.Close()
	for i := range 200 {
		if _, err := l.Append(ctx, batchOf(1+i%9, 1000, "n"), backend.AppendOptions{AssignOffsets: true}); err != nil {
			t.Fatal(err)
		}
	}
	l.SetHighWatermark(l.Offsets().LogEnd)
	for _, maxBytes := range []int{1, 700, 1500, 4000, 10_500, 1 << 20} {
		var seen int64
		for off := int64(0); off < l.Offsets().LogEnd; {
			r, err := l.Read(ctx, off, backend.ReadOptions{MaxBytes: maxBytes, MinOneBatch: true})
			if err != nil {
				t.Fatal(err)
			}
			var buf bytes.Buffer
			r.WriteTo(&buf)
			r.Close()
			last := int64(-1)
			for data := buf.Bytes(); len(data) > 0; {
				b, err := record.Parse(data)
				if err != nil {
					t.Fatal(err)
				}
				last = b.LastOffset()
				seen += int64(b.NextOffset()) - max(int64(b.BaseOffset()), off)
				data = data[b.Size():]
			}
			next := r.(backend.OffsetRange).NextOffset()
			if next != last+1 || next <= off {
				t.Fatalf("max %d bytes from %d: NextOffset %d, last offset returned %d", maxBytes, off, next, last)
			}
			off = next
		}
		if seen != l.Offsets().LogEnd {
			t.Fatalf("max %d bytes: %d records read through NextOffset, %d in the log", maxBytes, seen, l.Offsets().LogEnd)
		}
	}
}

// TestDeleteRecordsBeforeFinishesAfterACrash: a crash after the log start
// checkpoint moved and before the segments below it went leaves a log
// whose first segment lies wholly below its start. DeleteRecordsBefore at
// that same start deletes it (a retry finishes what the crash cut short).
func TestDeleteRecordsBeforeFinishesAfterACrash(t *testing.T) {
	dir := t.TempDir()
	c := cfg(t, "segment.bytes", "2000", "retention.ms", "-1", "file.delete.delay.ms", "0")
	l := openLog(t, dir, c, false)
	for i := 0; i < 30; i++ {
		if _, err := l.Append(ctx, batchOf(2, int64(1000*i), "t"), backend.AppendOptions{AssignOffsets: true}); err != nil {
			t.Fatal(err)
		}
	}
	start := l.SegmentInfos()[1].BaseOffset
	hw := l.Offsets().LogEnd
	l.Close()
	l, err := local.Open(dir, local.Options{Config: c, LogStartOffset: start, HighWatermark: hw})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if got := l.SegmentInfos()[0].BaseOffset; got != 0 {
		t.Fatalf("the reopened log starts with segment %d, want the stale one at 0", got)
	}
	if err := l.DeleteRecordsBefore(ctx, start); err != nil {
		t.Fatal(err)
	}
	if got := l.SegmentInfos()[0].BaseOffset; got != start {
		t.Fatalf("after DeleteRecordsBefore(%d) the first segment is %d", start, got)
	}
	if o := l.Offsets(); o.LogStart != start {
		t.Fatalf("log start %d, want %d", o.LogStart, start)
	}
}

// mappingsUnder counts the process's memory mappings of files under dir.
func mappingsUnder(t *testing.T, dir string) int {
	data, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Skip("no /proc/self/maps")
	}
	n := 0
	for _, line := range strings.Split(string(data), "\n") {
		if strings.Contains(line, dir+string(os.PathSeparator)) {
			n++
		}
	}
	return n
}

// TestOpenFileBudgetCountsMappings: a log opened alone bounds its closed
// segments' index mappings as it bounds their descriptors: writing 300
// segments keeps the writer's index mappings of at most the budget's
// sealed segments (each roll used to keep two for good, and a log of
// 65,000 segments failed on vm.max_map_count), and timestamp lookups
// that open only indexes stay within it too.
func TestOpenFileBudgetCountsMappings(t *testing.T) {
	dir := t.TempDir()
	c := cfg(t, "segment.bytes", "1000")
	const budget = 8
	l, err := local.Open(dir, local.Options{Config: c, LogStartOffset: -1, HighWatermark: -1, MaxOpenSegmentFiles: budget})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for i := 0; i < 300; i++ {
		if _, err := l.Append(ctx, batchOf(2, int64(1000+i), "b"), backend.AppendOptions{AssignOffsets: true}); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Flush(); err != nil { // the rolls' background syncs are done
		t.Fatal(err)
	}
	if n := len(l.SegmentInfos()); n < 50 {
		t.Fatalf("only %d segments", n)
	}
	// Per counted segment: two index mappings and the .log's; the active
	// segment's two besides.
	if got := mappingsUnder(t, dir); got > 3*budget+2 {
		t.Fatalf("%d mappings under the log after writing %d segments, with a budget of %d segments", got, len(l.SegmentInfos()), budget)
	}
	for i := 0; i < 300; i += 7 {
		if _, _, found, err := l.OffsetForTimestamp(ctx, int64(1000+i)); err != nil || !found {
			t.Fatalf("timestamp %d: %v, %v", 1000+i, found, err)
		}
		if got := mappingsUnder(t, dir); got > 3*budget+2 {
			t.Fatalf("%d mappings under the log after timestamp lookups, with a budget of %d segments", got, budget)
		}
	}
}
