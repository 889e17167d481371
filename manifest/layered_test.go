package manifest_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"os"
	"reflect"
	"strconv"
	"testing"

	"github.com/tierlog/tierlog/manifest"
)

// bucket is a map standing in for a bucket's part objects, and the head
// committed last.
type bucket struct {
	parts     map[string][]byte
	head      []byte
	bytesPut  int64
	nextID    uint64
	maxCommit int64 // the most bytes one commit put
	maxHead   int   // the largest head
}

func newBucket() *bucket { return &bucket{parts: map[string][]byte{}} }

func (b *bucket) id() (id [8]byte) {
	b.nextID++
	binary.BigEndian.PutUint64(id[:], b.nextID)
	return id
}

// commit layers next over prev, puts its new parts and its head.
func (b *bucket) commit(t testing.TB, prev, next *manifest.Manifest) {
	t.Helper()
	made, err := next.Layer(prev, b.id)
	if err != nil {
		t.Fatal(err)
	}
	var put int64
	for _, po := range made {
		if _, dup := b.parts[po.Name()]; dup {
			t.Fatalf("part %s put twice", po.Name())
		}
		b.parts[po.Name()] = po.Data
		put += int64(len(po.Data))
	}
	head, err := next.Encode()
	if err != nil {
		t.Fatal(err)
	}
	b.head = head
	put += int64(len(head))
	b.bytesPut += put
	b.maxCommit = max(b.maxCommit, put)
	b.maxHead = max(b.maxHead, len(head))
}

func (b *bucket) load(p manifest.Part) ([]manifest.Segment, error) {
	data, ok := b.parts[p.Name()]
	if !ok {
		return nil, fmt.Errorf("%s: not found", p.Name())
	}
	return manifest.DecodePart(p, data)
}

// read decodes the committed head with its parts.
func (b *bucket) read(t testing.TB) *manifest.Manifest {
	t.Helper()
	m, err := manifest.DecodeLayered(b.head, b.load)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// gc removes every part the last two heads do not name.
func (b *bucket) gc(t testing.TB, heads ...[]byte) {
	keep := map[string]bool{}
	for _, h := range heads {
		hd, err := manifest.DecodeHead(h)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range hd.Parts {
			keep[p.Name()] = true
		}
	}
	for k := range b.parts {
		if !keep[k] {
			delete(b.parts, k)
		}
	}
}

// committedBucket is a bucket holding one commit of a manifest of n
// segments of 10 offsets each, and the manifest.
func committedBucket(tb testing.TB, n int) (*bucket, *manifest.Manifest) {
	tb.Helper()
	b := newBucket()
	m := &manifest.Manifest{}
	for i := range n {
		m.Segments = append(m.Segments, synthSegment(int64(i)*10, 10, i))
	}
	b.commit(tb, nil, m)
	return b, m
}

func synthSegment(base int64, span int64, i int) manifest.Segment {
	s := manifest.Segment{BaseOffset: base, LastOffset: base + span - 1, MaxTimestamp: 1_700_000_000_000 + int64(i)*1000,
		Size: 1 << 20, Records: span, LeaderEpoch: int32(i / 1000), UploadTimeMs: 1_700_000_000_000 + int64(i)*1000,
		IndexSize: 8 * 100, TimeIndexSize: 12 * 100, LogCRC: uint32(i), IndexCRC: uint32(i) * 3, TimeIndexCRC: uint32(i) * 7,
		Epochs: []manifest.EpochStart{{Epoch: int32(i / 1000), StartOffset: base}}, SnapshotSize: 10, SnapshotCRC: 1, EpochsSize: 20, EpochsCRC: 2}
	binary.BigEndian.PutUint64(s.ID[:], uint64(i)*0x9e3779b97f4a7c15)
	return s
}

// TestLayeredBytesLinear commits 2,000 segments one at a time: the bytes
// PUT in all grow linearly (the goal: at most 2 MB at 2,000 segments),
// every head reads back to the same manifest, and no commit puts more
// than its head and one new part.
func TestLayeredBytesLinear(t *testing.T) {
	b := newBucket()
	prev := &manifest.Manifest{}
	for i := range 2000 {
		next := *prev
		next.Generation++
		next.Segments = append(prev.Segments[:len(prev.Segments):len(prev.Segments)], synthSegment(int64(i)*1000, 1000, i))
		b.commit(t, prev, &next)
		if i%97 == 0 || i == 1999 {
			got := b.read(t)
			if !reflect.DeepEqual(got.Segments, next.Segments) || !reflect.DeepEqual(got.Parts, next.Parts) {
				t.Fatalf("commit %d does not read back", i)
			}
		}
		prev = &next
	}
	t.Logf("2,000 segments: %d bytes PUT in all (%d parts), the largest head %d bytes, the largest commit %d bytes", b.bytesPut, len(b.parts), b.maxHead, b.maxCommit)
	if b.bytesPut > 2_000_000 {
		t.Fatalf("%d bytes PUT for 2,000 segments, more than 2 MB", b.bytesPut)
	}
	perTier := map[int]int{}
	for _, p := range prev.Parts {
		perTier[p.Tier]++
	}
	for tier, n := range perTier {
		if tier < manifest.MaxTier && n >= manifest.Fanout {
			t.Fatalf("the head names %d parts of tier %d", n, tier)
		}
	}
}

// TestLayeredCuts: random appends, front cuts (retention) and changes in
// the middle; after every commit the head and its parts read back to the
// manifest committed, gc keeping only what the last two heads name.
func TestLayeredCuts(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	b := newBucket()
	prev := &manifest.Manifest{}
	var prevHead []byte
	base, i := int64(0), 0
	for step := range 1500 {
		next := *prev
		next.Generation++
		segs := append([]manifest.Segment(nil), prev.Segments...)
		switch r := rng.IntN(20); {
		case r < 14 || len(segs) < 2: // appends
			for range 1 + rng.IntN(1+rng.IntN(60)) {
				span := 1 + rng.Int64N(100)
				segs = append(segs, synthSegment(base, span, i))
				base += span + rng.Int64N(2)
				i++
			}
		case r < 19: // retention from the front
			cut := 1 + rng.IntN(min(len(segs), 1+rng.IntN(100)))
			segs = segs[cut:]
		default: // a segment in the middle replaced
			k := rng.IntN(len(segs))
			segs[k].ID[0]++
			segs[k].Size++
		}
		next.Segments = segs
		if len(segs) > 0 {
			next.LogStartOffset = segs[0].BaseOffset
		}
		b.commit(t, prev, &next)
		got := b.read(t)
		if !reflect.DeepEqual(got.Segments, next.Segments) || got.LogStartOffset != next.LogStartOffset {
			t.Fatalf("step %d does not read back (%d segments, %d read)", step, len(next.Segments), len(got.Segments))
		}
		if prevHead != nil {
			b.gc(t, prevHead, b.head)
		}
		prevHead = b.head
		prev = &next
	}
	t.Logf("%d segments left in %d parts; %d bytes PUT, the largest commit %d", len(prev.Segments), len(prev.Parts), b.bytesPut, b.maxCommit)
}

// TestLayeredRetentionPutsHeadOnly: a cut at the front, however deep,
// puts the head alone (the parts it cuts into are skipped, not written).
func TestLayeredRetentionPutsHeadOnly(t *testing.T) {
	b, m := committedBucket(t, 20000)
	parts := len(b.parts)
	for _, cut := range []int{1, 15, 17, 300, 4095, 4097, 10000, 19990} {
		next := *m
		next.Generation++
		next.Segments = m.Segments[cut:]
		next.LogStartOffset = next.Segments[0].BaseOffset
		made, err := next.Layer(m, b.id)
		if err != nil || len(made) != 0 {
			t.Fatalf("cut %d: %d parts made, %v", cut, len(made), err)
		}
		head, _ := next.Encode()
		got, err := manifest.DecodeLayered(head, b.load)
		if err != nil || !reflect.DeepEqual(got.Segments, next.Segments) {
			t.Fatalf("cut %d: %v", cut, err)
		}
	}
	if len(b.parts) != parts {
		t.Fatal("parts written by cuts")
	}
}

// TestLayeredTenMillion: a commit at N segments puts at most 64 KiB of
// head plus the new part. N is 200,000 in make test and 10 million with
// TIERLOG_MANIFEST_SEGMENTS=10000000 (make test-scale: about 2 GB of heap
// and 6 minutes).
func TestLayeredTenMillion(t *testing.T) {
	n := 200_000
	if s := testingScale(); s > 0 {
		n = s
	}
	b := newBucket()
	m := &manifest.Manifest{Segments: make([]manifest.Segment, 0, n+64)}
	for i := range n {
		s := synthSegment(int64(i)*100, 100, i)
		s.Epochs = nil
		m.Segments = append(m.Segments, s)
	}
	b.commit(t, nil, m)
	first := b.bytesPut
	t.Logf("%d segments in %d parts, %d bytes (head %d)", n, len(m.Parts), first, len(b.head))
	// Then 300 commits of one segment each.
	b.maxCommit, b.maxHead = 0, 0
	prev := m
	for i := n; i < n+300; i++ {
		next := *prev
		next.Generation++
		next.Segments = append(prev.Segments, synthSegment(int64(i)*100, 100, i))
		b.commit(t, prev, &next)
		prev = &next
	}
	t.Logf("then one segment a commit: the largest head %d bytes, the largest commit %d bytes", b.maxHead, b.maxCommit)
	if b.maxHead > 64<<10 {
		t.Fatalf("a head of %d bytes at %d segments", b.maxHead, n)
	}
	maxPart := 0
	for _, p := range prev.Parts {
		if p.Tier < manifest.MaxTier {
			maxPart = max(maxPart, int(p.Bytes))
		}
	}
	if b.maxCommit > 64<<10+int64(maxPart) {
		t.Fatalf("a commit of %d bytes", b.maxCommit)
	}
}

func TestPartCorruptionDetected(t *testing.T) {
	b, m := committedBucket(t, 40)
	p := m.Parts[0]
	data := b.parts[p.Name()]
	if _, err := manifest.DecodePart(p, data); err != nil {
		t.Fatal(err)
	}
	for i := range data {
		bad := bytes.Clone(data)
		bad[i] ^= 0x10
		if _, err := manifest.DecodePart(p, bad); !errors.Is(err, manifest.ErrCorrupt) {
			t.Fatalf("byte %d flipped: %v", i, err)
		}
	}
	wrong := p
	wrong.Size++
	if _, err := manifest.DecodePart(wrong, data); !errors.Is(err, manifest.ErrCorrupt) {
		t.Fatalf("a reference that does not match: %v", err)
	}
	// Decode refuses a head that names parts; DecodeHead reads it alone.
	if _, err := manifest.Decode(b.head); !errors.Is(err, manifest.ErrLayered) {
		t.Fatalf("Decode of a layered head: %v", err)
	}
	h, err := manifest.DecodeHead(b.head)
	if err != nil || len(h.Parts) != len(m.Parts) || h.LastOffset() != m.Segments[39].LastOffset {
		t.Fatalf("DecodeHead: %v", err)
	}
	// A part missing is an error that names it.
	delete(b.parts, p.Name())
	if _, err := manifest.DecodeLayered(b.head, b.load); err == nil || !bytes.Contains([]byte(err.Error()), []byte(p.Name())) {
		t.Fatalf("a missing part: %v", err)
	}
}

// TestSameSegmentsCoversEveryField keeps Layer's comparison of segments
// whole: a field added to Segment must be added there.
func TestSameSegmentsCoversEveryField(t *testing.T) {
	if n := reflect.TypeFor[manifest.Segment]().NumField(); n != 20 {
		t.Fatalf("Segment has %d fields: add the new ones to sameSegments in layered.go, then change this count", n)
	}
}

func FuzzDecodePart(f *testing.F) {
	b, m := committedBucket(f, 300)
	for _, p := range m.Parts {
		f.Add(b.parts[p.Name()])
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, p := range m.Parts {
			p.Bytes = int64(len(data))
			p.CRC = crc32c(data)
			p.DirSize = min(p.DirSize, max(int64(len(data))-8, 1))
			segs, err := manifest.DecodePart(p, data)
			if err == nil && len(segs) != p.Segments {
				t.Fatalf("%d segments decoded, the reference says %d", len(segs), p.Segments)
			}
		}
	})
}

func crc32c(b []byte) uint32 { return crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli)) }

// testingScale is TIERLOG_MANIFEST_SEGMENTS, the segments
// TestLayeredTenMillion builds instead of 200,000 (0: unset).
func testingScale() int {
	n, _ := strconv.Atoi(os.Getenv("TIERLOG_MANIFEST_SEGMENTS"))
	return n
}
