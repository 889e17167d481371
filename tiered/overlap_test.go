package tiered_test

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
	"github.com/tierlog/tierlog/manifest"
	"github.com/tierlog/tierlog/objstore"
	"github.com/tierlog/tierlog/objstore/mem"
	"github.com/tierlog/tierlog/record"
	"github.com/tierlog/tierlog/tiered"
)

// A batch's base offset is outside its CRC: moved by any distance, in the
// bucket or in a local segment about to be uploaded, every reader either
// returns exactly the records that were written or an error naming the
// object (or file) and position. Never a duplicate, a record under another
// offset, or a silent gap.

// overlapRand returns a seeded random source (TIERLOG_OVERLAP_SEED to
// replay), logging the seed.
func overlapRand(t *testing.T) *rand.Rand {
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

// movedBase picks a damaged base offset for b: exactly its record count
// forward (over the next batch whole), a small or large step either way,
// far past the segment's end, or anything at all.
func movedBase(rng *rand.Rand, b record.Batch) int64 {
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

// batchStarts returns the position of every batch of a segment's bytes.
func batchStarts(t *testing.T, data []byte) []int64 {
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

// produceSmall appends n batches of 1 to 6 records each.
func produceSmall(t *testing.T, rng *rand.Rand, p backend.Partition, n int) {
	t.Helper()
	var b record.Builder
	ts := int64(1_700_000_000_000)
	for i := range n {
		b.Reset(record.NewBatchHeader())
		for j := range 1 + rng.IntN(6) {
			b.Append(ts, fmt.Appendf(nil, "k%d", j), fmt.Appendf(nil, "b%d-%d-%s", i, j, strings.Repeat("x", 60)), nil)
		}
		batch, _ := b.Build()
		if _, err := p.Append(ctx, append([]byte(nil), batch...), backend.AppendOptions{AssignOffsets: true, LeaderEpoch: 1}); err != nil {
			t.Fatal(err)
		}
		ts += 10
	}
	if err := p.SetHighWatermark(p.Offsets().LogEnd); err != nil {
		t.Fatal(err)
	}
}

// consumeRecords reads [from, to) maxBytes at a time, as a consumer does:
// records below the offset asked for are skipped. It returns what it read
// and the first error.
func consumeRecords(p backend.Partition, from, to int64, maxBytes int) ([]record.Record, error) {
	var out []record.Record
	var it record.Iterator
	for off := from; off < to; {
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
		next := off
		sc := record.NewScanner(bytes.NewReader(buf.Bytes()), 0, int64(buf.Len()), record.ScanOptions{Validate: true})
		for sc.Next() {
			if err := it.Reset(sc.Entry().Data); err != nil {
				return out, err
			}
			for it.Next() {
				if r := *it.Record(); r.Offset >= off && r.Offset < to {
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

// firstDifference reports where got and want first differ ("" when equal).
func firstDifference(got, want []record.Record) string {
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

// checkExactOrNamed fails t unless a reader gave exactly want, or an
// ErrCorruptRecord naming name and a position after a correct prefix.
func checkExactOrNamed(t *testing.T, what, name string, got, want []record.Record, err error) {
	t.Helper()
	if err != nil {
		if !errors.Is(err, backend.ErrCorruptRecord) || !strings.Contains(err.Error(), name) || !strings.Contains(err.Error(), "position") {
			t.Errorf("%s: %v; want ErrCorruptRecord naming %s and a position", what, err, name)
		}
		if diff := firstDifference(got, want[:min(len(got), len(want))]); diff != "" {
			t.Errorf("%s: before its error, a wrong answer: %s", what, diff)
		}
		return
	}
	if diff := firstDifference(got, want); diff != "" {
		t.Errorf("%s: no error and a wrong answer: %s", what, diff)
	}
}

// TestPropertyMovedBaseOffsetInBucket: one batch of one segment in the
// bucket gets a new base offset; remote reads from the start and from a
// random offset, at every MaxBytes, give the records or name the object.
func TestPropertyMovedBaseOffsetInBucket(t *testing.T) {
	rng := overlapRand(t)
	trials := 10
	if testing.Short() {
		trials = 3
	}
	for trial := range trials {
		store := objstore.New(mem.New(), "mem://overlap", objstore.Options{})
		dir := filepath.Join(t.TempDir(), "orders-0")
		c := cfg(t, "segment.bytes", "8192", "index.interval.bytes", strconv.Itoa(100+rng.IntN(1000)),
			"local.retention.ms", "0", "file.delete.delay.ms", "0", "retention.ms", "-1")
		p := open(t, dir, store, 1, c)
		produceSmall(t, rng, p, 250)
		if err := p.Roll(); err != nil {
			t.Fatal(err)
		}
		if _, err := p.Offload(ctx); err != nil {
			t.Fatal(err)
		}
		remoteEnd := p.Offsets().LocalLogStart
		want, err := consumeRecords(p, 0, remoteEnd, 1<<20)
		if err != nil || len(want) == 0 || int64(len(want)) != remoteEnd {
			t.Fatalf("before the damage: %d records of %d, %v", len(want), remoteEnd, err)
		}
		segs := manifestOf(t, p).Segments
		p.Close()
		seg := segs[rng.IntN(len(segs))]
		name := seg.Name(manifest.LogSuffix)
		key := "tl/orders-0/" + name
		data, err := store.ReadAll(ctx, key, 0, seg.Size)
		if err != nil {
			t.Fatal(err)
		}
		starts := batchStarts(t, data)
		pos := starts[rng.IntN(len(starts))]
		b := record.Batch(data[pos:])
		old, nb := b.BaseOffset(), movedBase(rng, b)
		binary.BigEndian.PutUint64(data[pos:], uint64(nb)) // outside the CRC
		if _, err := store.Put(ctx, key, bytes.NewReader(data), int64(len(data)), objstore.PutOptions{}); err != nil {
			t.Fatal(err)
		}
		from := want[rng.IntN(len(want))].Offset
		checkTimestampsOrNamed(t, open(t, dir, store, 1, c), want, name, fmt.Sprintf("trial %d: %s position %d base %d moved to %d", trial, name, pos, old, nb))
		for _, maxBytes := range []int{1, 300, 1500, 20000, math.MaxInt32} {
			for _, start := range []int64{0, from} {
				p := open(t, dir, store, 1, c) // a fresh chunk cache
				what := fmt.Sprintf("trial %d: %s position %d base %d moved to %d (%d records), reading from %d %d bytes at a time",
					trial, name, pos, old, nb, b.LastOffsetDelta()+1, start, maxBytes)
				got, err := consumeRecords(p, start, remoteEnd, maxBytes)
				checkExactOrNamed(t, what, name, got, want[start:], err)
				p.Close()
			}
		}
	}
}

// TestPropertyMovedBaseOffsetNeverUploaded: one batch of a closed local
// segment gets a new base offset before the upload; the upload scan
// refuses that segment, naming the file and position, and the bucket
// never holds it (so local retention keeps it).
func TestPropertyMovedBaseOffsetNeverUploaded(t *testing.T) {
	rng := overlapRand(t)
	trials := 10
	if testing.Short() {
		trials = 3
	}
	for trial := range trials {
		store := objstore.New(mem.New(), "mem://overlap-up", objstore.Options{})
		dir := filepath.Join(t.TempDir(), "orders-0")
		c := cfg(t, "segment.bytes", "8192", "local.retention.ms", "0", "file.delete.delay.ms", "0", "retention.ms", "-1")
		p := open(t, dir, store, 1, c)
		produceSmall(t, rng, p, 120)
		if err := p.Roll(); err != nil {
			t.Fatal(err)
		}
		infos := p.LocalSegments()
		victim := infos[rng.IntN(len(infos)-1)] // closed
		p.Close()
		data, err := os.ReadFile(victim.Path)
		if err != nil {
			t.Fatal(err)
		}
		starts := batchStarts(t, data)
		pos := starts[rng.IntN(len(starts))]
		b := record.Batch(data[pos:])
		old, nb := b.BaseOffset(), movedBase(rng, b)
		binary.BigEndian.PutUint64(data[pos:], uint64(nb))
		if err := os.WriteFile(victim.Path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		p, err = openErr(dir, store, c)
		if err != nil {
			// Opening may already refuse the damaged segment.
			if !errors.Is(err, backend.ErrCorruptRecord) || !strings.Contains(err.Error(), filepath.Base(victim.Path)) {
				t.Errorf("trial %d: open after moving %s position %d from %d to %d: %v", trial, filepath.Base(victim.Path), pos, old, nb, err)
			}
			continue
		}
		if err := p.SetHighWatermark(p.Offsets().LogEnd); err != nil {
			t.Fatal(err)
		}
		_, err = p.Offload(ctx)
		what := fmt.Sprintf("trial %d: %s position %d base %d moved to %d", trial, filepath.Base(victim.Path), pos, old, nb)
		if !errors.Is(err, backend.ErrCorruptRecord) || !strings.Contains(err.Error(), filepath.Base(victim.Path)) || !strings.Contains(err.Error(), "position") {
			t.Errorf("%s: offload gave %v; want ErrCorruptRecord naming the file and a position", what, err)
		}
		for _, s := range manifestOf(t, p).Segments {
			if s.BaseOffset >= victim.BaseOffset {
				t.Errorf("%s: the bucket holds segment %d..%d, at or after the damaged one", what, s.BaseOffset, s.LastOffset)
			}
		}
		if _, err := os.Stat(victim.Path); err != nil {
			t.Errorf("%s: the damaged segment's local file is gone: %v", what, err)
		}
		p.Close()
	}
}

// openErr opens the partition of dir, shut down cleanly (no recovery
// scan), returning the error.
func openErr(dir string, store *objstore.Store, c backend.Config) (*tiered.Partition, error) {
	l, err := local.Open(dir, local.Options{Config: c, CleanShutdown: true, LogStartOffset: -1, HighWatermark: -1})
	if err != nil {
		return nil, err
	}
	p, err := tiered.Open(ctx, l, tiered.Options{Store: store, Prefix: "tl/orders-0", LeaderEpoch: 1})
	if err != nil {
		l.Close()
	}
	return p, err
}

// checkTimestampsOrNamed asks p (and closes it) for the first offset at
// or after every timestamp of want: the answer is want's, or an
// ErrCorruptRecord naming name.
func checkTimestampsOrNamed(t *testing.T, p *tiered.Partition, want []record.Record, name, what string) {
	t.Helper()
	defer p.Close()
	for i, r := range want {
		if i > 0 && want[i-1].Timestamp == r.Timestamp {
			continue
		}
		off, _, found, err := p.OffsetForTimestamp(ctx, r.Timestamp)
		if err != nil {
			if !errors.Is(err, backend.ErrCorruptRecord) || !strings.Contains(err.Error(), name) || !strings.Contains(err.Error(), "position") {
				t.Errorf("%s: OffsetForTimestamp(%d): %v; want ErrCorruptRecord naming %s and a position", what, r.Timestamp, err, name)
			}
			continue
		}
		if !found || off != r.Offset {
			t.Errorf("%s: OffsetForTimestamp(%d) = %d, %v; want %d", what, r.Timestamp, off, found, r.Offset)
		}
	}
}

// A segment whose offset index names, at a batch's position, an offset
// inside that batch (Kafka's cleaner before 3.8 indexes a thinned batch by
// the last record it kept, below the batch's last offset) opens, uploads
// and reads from the bucket: an entry inside its batch is Kafka's, not
// damage (record.Entry.Holds).
func TestKafkaCleanedIndexInBucket(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	store := objstore.New(mem.New(), "mem://cleaned", objstore.Options{})
	dir := filepath.Join(t.TempDir(), "orders-0")
	c := cfg(t, "segment.bytes", "8192", "index.interval.bytes", "100", "local.retention.ms", "0", "file.delete.delay.ms", "0", "retention.ms", "-1")
	p := open(t, dir, store, 1, c)
	produceSmall(t, rng, p, 250)
	if err := p.Roll(); err != nil {
		t.Fatal(err)
	}
	end := p.Offsets().LogEnd
	want, err := consumeRecords(p, 0, end, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	// Each closed segment's entries renamed to the base offset of the
	// batch at their position (inside it when it holds several records).
	inside := 0
	logs, _ := filepath.Glob(filepath.Join(dir, "*"+local.LogSuffix))
	for _, path := range logs[:len(logs)-1] {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		ip := strings.TrimSuffix(path, local.LogSuffix) + local.IndexSuffix
		ix, err := os.ReadFile(ip)
		if err != nil {
			t.Fatal(err)
		}
		base, _ := strconv.ParseInt(strings.TrimSuffix(filepath.Base(path), local.LogSuffix), 10, 64)
		for i := 0; i+8 <= len(ix); i += 8 {
			b := record.Batch(data[binary.BigEndian.Uint32(ix[i+4:]):])
			if b.BaseOffset() < b.LastOffset() {
				inside++
			}
			binary.BigEndian.PutUint32(ix[i:], uint32(b.BaseOffset()-base))
		}
		if err := os.WriteFile(ip, ix, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if inside == 0 {
		t.Fatal("no entry moved inside its batch")
	}
	l, err := local.Open(dir, local.Options{Config: c, CleanShutdown: true, LogStartOffset: -1, HighWatermark: -1})
	if err != nil {
		t.Fatal(err)
	}
	p, err = tiered.Open(ctx, l, tiered.Options{Store: store, Prefix: "tl/orders-0", LeaderEpoch: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := p.SetHighWatermark(end); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Offload(ctx); err != nil {
		t.Fatal(err)
	}
	if p.Offsets().LocalLogStart == 0 {
		t.Fatal("nothing offloaded")
	}
	for _, maxBytes := range []int{1, 1 << 20} {
		for _, from := range []int64{0, end / 3, end / 2} {
			got, err := consumeRecords(p, from, end, maxBytes)
			if err != nil {
				t.Fatalf("reading from %d, %d bytes at a time, from the bucket: %v", from, maxBytes, err)
			}
			if len(got) != int(end-from) || got[0].Offset != from || !bytes.Equal(got[0].Value, want[from].Value) {
				t.Fatalf("reading from %d, %d bytes at a time: %d records from %d; want %d", from, maxBytes, len(got), got[0].Offset, end-from)
			}
		}
	}
}
