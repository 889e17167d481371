package tiered

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math/rand"
	"runtime"
	"strings"
	"testing"

	"github.com/tierlog/tierlog/manifest"
	"github.com/tierlog/tierlog/objstore"
	"github.com/tierlog/tierlog/objstore/mem"
)

// randomSegments makes n segments from base with random lengths, random
// gaps and (when wild) random, non-monotonic timestamps.
func randomSegments(r *rand.Rand, base int64, n int, wild bool) []manifest.Segment {
	out := make([]manifest.Segment, n)
	at := base
	for i := range out {
		if r.Intn(4) == 0 {
			at += int64(1 + r.Intn(50)) // a gap
		}
		l := int64(1 + r.Intn(100))
		ts := int64(1_000_000 + i)
		if wild {
			ts = int64(r.Intn(1_000_000))
		}
		out[i] = manifest.Segment{BaseOffset: at, LastOffset: at + l - 1, MaxTimestamp: ts, Size: 100, Records: l,
			LeaderEpoch: 1, IndexSize: 8, TimeIndexSize: 12}
		binary.BigEndian.PutUint64(out[i].ID[:], uint64(at)*0x9e3779b97f4a7c15+1)
		at += l
	}
	return out
}

var testPartID uint64

func nextTestID() (b [8]byte) {
	testPartID++
	binary.BigEndian.PutUint64(b[:], testPartID)
	return b
}

// layerInto lays m out over prev, puts the parts it makes into store.
func layerInto(t testing.TB, store *objstore.Store, prefix string, prev, m *manifest.Manifest) {
	t.Helper()
	made, err := m.Layer(prev, nextTestID)
	if err != nil {
		t.Fatal(err)
	}
	l := manifest.NewLayout(prefix)
	for _, po := range made {
		if _, err := store.Put(context.Background(), l.Part(po.Part), bytes.NewReader(po.Data), int64(len(po.Data)), objstore.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

// checkCursor compares the cursor with the whole manifest m (whose head is h).
func checkCursor(t *testing.T, p *Partition, m *manifest.Manifest, h *manifest.Head, offsets, stamps []int64) {
	t.Helper()
	ctx := context.Background()
	fails := 0
	fail := func(format string, args ...any) {
		t.Helper()
		fails++
		if fails <= 10 {
			t.Errorf(format, args...)
		}
	}
	// first returns where a seek put its cursor: the position and the
	// segment next returns first (ok false: none).
	first := func(c *segCursor, err error) (int, manifest.Segment, bool) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		pos := c.position()
		s, ok, err := c.next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return pos, s, ok
	}
	for _, off := range offsets {
		// seek vs Find
		pos, s, ok := first(p.seek(ctx, h, off))
		i, wok := m.Find(off)
		switch {
		case ok != wok:
			fail("seek(%d): ok %v, Find ok %v", off, ok, wok)
		case ok && s.BaseOffset != m.Segments[i].BaseOffset:
			fail("seek(%d): segment %d, Find's %d", off, s.BaseOffset, m.Segments[i].BaseOffset)
		case ok && pos != i:
			fail("seek(%d): position %d, Find's index %d", off, pos, i)
		}
		// holding vs Holding
		hs, hok, err := p.holding(ctx, h, off)
		if err != nil {
			t.Fatal(err)
		}
		j, wok := m.Holding(off)
		if hok != wok || hok && hs.BaseOffset != m.Segments[j].BaseOffset {
			fail("holding(%d): %v %d, Holding %v %d", off, hok, hs.BaseOffset, wok, j)
		}
		// cachedAfter: when it answers, the first segment starting after off
		if cs, cok := p.cachedAfter(h, off); cok {
			k := 0
			for k < len(m.Segments) && m.Segments[k].BaseOffset <= off {
				k++
			}
			if k == len(m.Segments) || cs.BaseOffset != m.Segments[k].BaseOffset {
				fail("cachedAfter(%d) = %d, want the first segment after it", off, cs.BaseOffset)
			}
		}
	}
	for _, ts := range stamps {
		pos, s, ok := first(p.seekTimestamp(ctx, h, ts))
		i, wok := m.FindTimestamp(ts)
		switch {
		case ok != wok:
			fail("seekTimestamp(%d): ok %v, FindTimestamp ok %v", ts, ok, wok)
		case ok && s.BaseOffset != m.Segments[i].BaseOffset:
			fail("seekTimestamp(%d): segment %d (max ts %d), FindTimestamp's %d (max ts %d), index %d, position %d",
				ts, s.BaseOffset, s.MaxTimestamp, m.Segments[i].BaseOffset, m.Segments[i].MaxTimestamp, i, pos)
		}
	}
	if fails > 0 {
		t.Errorf("%d mismatches", fails)
	}
}

// TestCursorMatchesWhole builds a layered manifest with a tier-2
// part (16 blocks, read by blocks) and tier-0/1 parts, cuts its front so
// that the first part's Skip falls inside its first block, past it, and
// deep inside, and compares seek/holding/seekTimestamp/cachedAfter with
// the whole manifest's Find/Holding/FindTimestamp.
func TestCursorMatchesWhole(t *testing.T) {
	for _, wild := range []bool{false, true} {
		for _, cut := range []int{0, 1, 255, 256, 700, 4095, 4100} {
			for _, lsoExtra := range []int64{7} {
				r := rand.New(rand.NewSource(int64(cut) + 1))
				store := objstore.New(mem.New(), "mem://cursor", objstore.Options{})
				prefix := "tl/orders-0"
				segs := randomSegments(r, 0, 4096+256+16*3+5, wild)
				m := &manifest.Manifest{Generation: 1, WriterEpoch: 1, Segments: segs}
				layerInto(t, store, prefix, nil, m)
				if cut > 0 {
					next := &manifest.Manifest{Generation: 2, WriterEpoch: 1, Segments: append([]manifest.Segment(nil), segs[cut:]...)}
					next.LogStartOffset = segs[cut-1].LastOffset + 1 + lsoExtra
					if next.LogStartOffset > next.Segments[0].LastOffset {
						next.LogStartOffset = next.Segments[0].BaseOffset
					}
					layerInto(t, store, prefix, m, next)
					m = next
				}
				h, err := m.Head()
				if err != nil {
					t.Fatal(err)
				}
				if cut > 0 && cut < 4096 && (len(h.Parts) == 0 || h.Parts[0].Skip != cut) {
					t.Fatalf("cut %d: first part skips %d", cut, h.Parts[0].Skip)
				}
				last := m.Segments[len(m.Segments)-1].LastOffset
				var offsets []int64
				for o := int64(-3); o <= 3; o++ {
					offsets = append(offsets, o)
				}
				for o := last - 3; o <= last+5; o++ {
					offsets = append(offsets, o)
				}
				all := m.Segments
				for k, s := range all {
					// every segment near part and block boundaries, a sample elsewhere
					if k < 600 || k%256 < 3 || k%256 > 253 || k > len(all)-300 || r.Intn(20) == 0 {
						offsets = append(offsets, s.BaseOffset-1, s.BaseOffset, (s.BaseOffset+s.LastOffset)/2, s.LastOffset, s.LastOffset+1)
					}
				}
				offsets = append(offsets, m.LogStartOffset-1, m.LogStartOffset, m.LogStartOffset+1)
				var stamps []int64
				for i := 0; i < 1500; i++ {
					stamps = append(stamps, int64(r.Intn(2_100_000)))
				}
				for _, withCaches := range []bool{true, cut == 255} { // without caches once
					t.Run(fmt.Sprintf("wild=%v/cut=%d/lso+%d/caches=%v", wild, cut, lsoExtra, withCaches), func(t *testing.T) {
						p := &Partition{store: store, prefix: prefix}
						if withCaches {
							p.caches = NewCaches(CacheOptions{})
						}
						checkCursor(t, p, m, h, offsets, stamps)
					})
				}
			}
		}
	}
}

// oldMaxTimestampSegment is bfc4b77's maxTimestampSegment over a whole manifest.
func oldMaxTimestampSegment(m *manifest.Manifest, end int64) int {
	best := -1
	for i, s := range m.Segments {
		if s.BaseOffset < end && s.LastOffset >= m.LogStartOffset && (best < 0 || s.MaxTimestamp > m.Segments[best].MaxTimestamp) {
			best = i
		}
	}
	return best
}

// oldEpochs is bfc4b77's bucketTier.epochs over a whole manifest.
func oldEpochs(m *manifest.Manifest, end int64, add func(int32, int64)) {
	for _, s := range m.Segments {
		if s.LastOffset < m.LogStartOffset || s.BaseOffset >= end {
			continue
		}
		if len(s.Epochs) == 0 {
			add(s.LeaderEpoch, max(s.BaseOffset, m.LogStartOffset))
		}
		for _, e := range s.Epochs {
			add(e.Epoch, max(e.StartOffset, m.LogStartOffset))
		}
	}
}

func epochList(f func(add func(int32, int64))) []string {
	var out []string
	var last int32 = -1
	f(func(e int32, start int64) {
		if len(out) > 0 && e <= last {
			return
		}
		last = e
		out = append(out, fmt.Sprintf("%d@%d", e, start))
	})
	return out
}

// TestMaxTimestampAndEpochsMatchWhole compares maxTimestampSegment and the
// bucket tier's epochs with bfc4b77's whole-manifest loops.
func TestMaxTimestampAndEpochsMatchWhole(t *testing.T) {
	ctx := context.Background()
	for seed := int64(1); seed <= 40; seed++ {
		r := rand.New(rand.NewSource(seed))
		store := objstore.New(mem.New(), "mem://cursor", objstore.Options{})
		prefix := "tl/orders-0"
		n := 16*(1+r.Intn(40)) + r.Intn(20)
		segs := randomSegments(r, 0, n, seed%2 == 0)
		if seed%3 == 0 { // some timestamps tie
			for i := range segs {
				segs[i].MaxTimestamp = int64(r.Intn(5))
			}
		}
		// epochs: non-decreasing, with changes inside segments now and then
		ep := int32(0)
		for i := range segs {
			s := &segs[i]
			s.Epochs = []manifest.EpochStart{{Epoch: ep, StartOffset: s.BaseOffset}}
			if r.Intn(30) == 0 && s.LastOffset > s.BaseOffset {
				ep++
				s.Epochs = append(s.Epochs, manifest.EpochStart{Epoch: ep, StartOffset: s.BaseOffset + 1})
			} else if r.Intn(40) == 0 {
				ep++
				s.Epochs[0].Epoch = ep
			}
			s.LeaderEpoch = ep
		}
		m := &manifest.Manifest{Generation: 1, WriterEpoch: 1, Segments: segs}
		layerInto(t, store, prefix, nil, m)
		if cut := r.Intn(n / 2); cut > 0 {
			next := &manifest.Manifest{Generation: 2, WriterEpoch: 1, Segments: append([]manifest.Segment(nil), segs[cut:]...)}
			next.LogStartOffset = min(segs[cut].BaseOffset+int64(r.Intn(3)), segs[cut].LastOffset)
			layerInto(t, store, prefix, m, next)
			m = next
		}
		h, err := m.Head()
		if err != nil {
			t.Fatal(err)
		}
		p := &Partition{store: store, prefix: prefix, caches: NewCaches(CacheOptions{})}
		last := m.Segments[len(m.Segments)-1].LastOffset
		for _, end := range []int64{0, m.LogStartOffset, m.LogStartOffset + 1, last / 3, last / 2, last, last + 1, 1 << 62} {
			v := view{head: h}
			seg, ok, err := p.maxTimestampSegment(ctx, v, end)
			if err != nil {
				t.Fatal(err)
			}
			i := oldMaxTimestampSegment(m, end)
			if ok != (i >= 0) || ok && seg.BaseOffset != m.Segments[i].BaseOffset {
				t.Errorf("seed %d end %d: maxTimestampSegment %v %d, old %d", seed, end, ok, seg.BaseOffset, i)
			}
			got := epochList(func(add func(int32, int64)) {
				if err := (bucketTier{p}).epochs(ctx, v, end, add); err != nil {
					t.Fatal(err)
				}
			})
			want := epochList(func(add func(int32, int64)) { oldEpochs(m, end, add) })
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("seed %d end %d: epochs %v, old %v", seed, end, got, want)
			}
		}
	}
}

// TestDamagedDirectoryDetected: a large part is read by its block
// directory and one block. A directory whose block 3 says it ends a
// segment early would send a seek of an offset in block 3's last segment
// to block 4's first segment: the directory's own CRC-32C catches it, the
// seek fails with ErrCorrupt naming the part, and no bad directory is
// cached.
func TestDamagedDirectoryDetected(t *testing.T) {
	ctx := context.Background()
	r := rand.New(rand.NewSource(3))
	store := objstore.New(mem.New(), "mem://cursor", objstore.Options{})
	prefix := "tl/orders-0"
	segs := randomSegments(r, 0, 4096+5, false)
	m := &manifest.Manifest{Generation: 1, WriterEpoch: 1, Segments: segs}
	layerInto(t, store, prefix, nil, m)
	h, err := m.Head()
	if err != nil {
		t.Fatal(err)
	}
	ref := h.Parts[0]
	key := manifest.NewLayout(prefix).Part(ref)
	data, err := store.ReadAll(ctx, key, 0, ref.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	off, n := ref.DirRange()
	blocks, err := manifest.DecodePartDirectory(ref, data[off:off+n])
	if err != nil {
		t.Fatal(err)
	}
	lastOf3 := segs[blocks[3].First+blocks[3].Segments-1]
	dir := []byte{0, 1} // a checked directory, version 1
	dir = binary.AppendUvarint(dir, uint64(len(blocks)))
	for j, b := range blocks {
		last := b.LastOffset
		if j == 3 {
			last = lastOf3.BaseOffset - 1 // block 3 "ends" before its last segment
		}
		dir = binary.AppendUvarint(dir, uint64(b.Offset))
		dir = binary.AppendUvarint(dir, uint64(b.Size))
		dir = binary.AppendUvarint(dir, uint64(b.Segments))
		dir = binary.AppendUvarint(dir, uint64(b.BaseOffset))
		dir = binary.AppendUvarint(dir, uint64(last))
		dir = binary.AppendVarint(dir, b.MaxTimestamp)
		dir = binary.BigEndian.AppendUint32(dir, b.CRC)
	}
	if int64(len(dir)+4) != n {
		t.Fatalf("re-encoded directory of %d bytes, want %d", len(dir)+4, n)
	}
	bad := append([]byte(nil), data...)
	copy(bad[off:], dir) // its stored CRC left as it was
	if _, err := store.Put(ctx, key, bytes.NewReader(bad), int64(len(bad)), objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	p := &Partition{store: store, prefix: prefix, caches: NewCaches(CacheOptions{})}
	_, err = p.seek(ctx, h, lastOf3.BaseOffset)
	if !errors.Is(err, manifest.ErrCorrupt) || !strings.Contains(err.Error(), ref.Name()) {
		t.Fatalf("seek(%d) over a damaged directory: %v; want ErrCorrupt naming %s", lastOf3.BaseOffset, err, ref.Name())
	}
	if _, ok := p.caches.dirs.get(p.dirKey(ref)); ok {
		t.Fatal("the damaged directory was cached")
	}
}

// TestRangedReadChecksVersions: a directory of a version this build does
// not read is ErrUnsupportedVersion on the ranged path too, and a part
// version 1 wrote (no CRC of its directory's own) is read whole, to the
// right segments.
func TestRangedReadChecksVersions(t *testing.T) {
	ctx := context.Background()
	r := rand.New(rand.NewSource(3))
	prefix := "tl/orders-0"
	segs := randomSegments(r, 0, 4096+5, false)
	for _, c := range []struct {
		name    string
		rewrite func(manifest.Part, []byte) (manifest.Part, []byte)
		wantErr error
	}{
		{"directory version 2", func(ref manifest.Part, data []byte) (manifest.Part, []byte) {
			off, n := ref.DirRange()
			data[off+1] = 2
			dir := data[off : off+n-4]
			binary.BigEndian.PutUint32(data[off+n-4:], crc32.Checksum(dir, castagnoli))
			binary.BigEndian.PutUint32(data[len(data)-4:], crc32.Checksum(data[:len(data)-4], castagnoli))
			ref.CRC = crc32.Checksum(data, castagnoli)
			return ref, data
		}, manifest.ErrUnsupportedVersion},
		{"a version 1 part", func(ref manifest.Part, data []byte) (manifest.Part, []byte) {
			off, n := ref.DirRange()
			v1 := append(bytes.Clone(data[:off]), data[off+2:off+n-4]...)
			v1[5] = 1
			v1 = binary.BigEndian.AppendUint32(v1, crc32.Checksum(v1, castagnoli))
			ref.Bytes, ref.CRC, ref.DirSize = int64(len(v1)), crc32.Checksum(v1, castagnoli), n-6
			return ref, v1
		}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			store := objstore.New(mem.New(), "mem://cursor", objstore.Options{})
			m := &manifest.Manifest{Generation: 1, WriterEpoch: 1, Segments: segs}
			layerInto(t, store, prefix, nil, m)
			key := manifest.NewLayout(prefix).Part(m.Parts[0])
			data, err := store.ReadAll(ctx, key, 0, m.Parts[0].Bytes)
			if err != nil {
				t.Fatal(err)
			}
			ref, data := c.rewrite(m.Parts[0], data)
			if err := store.Delete(ctx, key); err != nil {
				t.Fatal(err)
			}
			if _, err := store.Put(ctx, manifest.NewLayout(prefix).Part(ref), bytes.NewReader(data), int64(len(data)), objstore.PutOptions{}); err != nil {
				t.Fatal(err)
			}
			m.Parts[0] = ref
			h, err := m.Head()
			if err != nil {
				t.Fatal(err)
			}
			p := &Partition{store: store, prefix: prefix, caches: NewCaches(CacheOptions{})}
			s, ok, err := p.holding(ctx, h, segs[1000].BaseOffset)
			switch {
			case c.wantErr != nil && !errors.Is(err, c.wantErr):
				t.Fatalf("holding: %v, want %v", err, c.wantErr)
			case c.wantErr == nil && (err != nil || !ok || s.BaseOffset != segs[1000].BaseOffset):
				t.Fatalf("holding: segment %d (ok %v), %v; want %d", s.BaseOffset, ok, err, segs[1000].BaseOffset)
			}
		})
	}
}

// TestPartCacheCountsWhatItHolds: the cache of parts counts a part's live
// segments (partBytes(len)), but DecodePart's live slice keeps the whole
// object's decoded segments alive (segs[Skip:]). Each new Skip of a part
// (every retention or log-start cut into it) is a new key: a run of cuts
// near a part's end keeps many whole decoded parts while the cache
// believes it holds a few KiB.
func TestPartCacheCountsWhatItHolds(t *testing.T) {
	ctx := context.Background()
	r := rand.New(rand.NewSource(5))
	store := objstore.New(mem.New(), "mem://cursor", objstore.Options{})
	prefix := "tl/orders-0"
	segs := randomSegments(r, 0, 4096+5, false)
	m0 := &manifest.Manifest{Generation: 1, WriterEpoch: 1, Segments: segs}
	layerInto(t, store, prefix, nil, m0)
	p := &Partition{store: store, prefix: prefix, caches: NewCaches(CacheOptions{})}
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	for cut := 3996; cut < 4096; cut++ {
		next := &manifest.Manifest{Generation: 2, WriterEpoch: 1, Segments: append([]manifest.Segment(nil), segs[cut:]...)}
		next.LogStartOffset = next.Segments[0].BaseOffset
		if _, err := next.Layer(m0, nextTestID); err != nil {
			t.Fatal(err)
		}
		ref := next.Parts[0]
		if ref.Skip != cut {
			t.Fatalf("skip %d, want %d", ref.Skip, cut)
		}
		live, err := p.partSegments(ctx, ref) // what whole() does for each new head
		if err != nil {
			t.Fatal(err)
		}
		_ = live
	}
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	counted := p.caches.ManifestBytes()
	held := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	if held > 10*counted {
		t.Errorf("the cache of parts holds %d bytes of segments while it counts %d (bound: %d)", held, counted, 64<<20)
	}
}

// TestCursorHeadWithoutOwn: a head whose parts hold every segment (its own
// empty), with and without a cut into the first part.
func TestCursorHeadWithoutOwn(t *testing.T) {
	ctx := context.Background()
	for _, cut := range []int{0, 1, 300, 4096 + 100} {
		r := rand.New(rand.NewSource(int64(cut) + 9))
		store := objstore.New(mem.New(), "mem://cursor", objstore.Options{})
		prefix := "tl/orders-0"
		segs := randomSegments(r, 0, 4096+256+5, true)
		full := &manifest.Manifest{Generation: 1, WriterEpoch: 1, Segments: segs}
		layerInto(t, store, prefix, nil, full)
		// keep only the tier >= 1 parts and their segments
		var parts []manifest.Part
		covered := 0
		for _, pt := range full.Parts {
			if pt.Tier >= 1 {
				parts = append(parts, pt)
				covered += pt.Segments
			}
		}
		m := &manifest.Manifest{Generation: 1, WriterEpoch: 1, Segments: segs[:covered], Parts: parts}
		if cut > 0 {
			next := &manifest.Manifest{Generation: 2, WriterEpoch: 1, Segments: append([]manifest.Segment(nil), segs[cut:covered]...)}
			next.LogStartOffset = next.Segments[0].BaseOffset
			if _, err := next.Layer(m, nextTestID); err != nil {
				t.Fatal(err)
			}
			// drop the own segments Layer may have kept
			c := 0
			for _, pt := range next.Parts {
				c += pt.Segments
			}
			next.Segments = next.Segments[:c]
			m = next
		}
		if err := m.Validate(); err != nil {
			t.Fatal(err)
		}
		h, err := m.Head()
		if err != nil {
			t.Fatal(err)
		}
		if len(h.Own) != 0 {
			t.Fatalf("cut %d: own %d", cut, len(h.Own))
		}
		last := m.Segments[len(m.Segments)-1].LastOffset
		offsets := []int64{-1, 0, m.LogStartOffset - 1, m.LogStartOffset, last - 1, last, last + 1, last + 100}
		for _, s := range m.Segments {
			offsets = append(offsets, s.BaseOffset-1, s.BaseOffset, s.LastOffset, s.LastOffset+1)
		}
		var stamps []int64
		for i := 0; i < 500; i++ {
			stamps = append(stamps, int64(r.Intn(1_100_000)))
		}
		t.Run(fmt.Sprint("cut=", cut), func(t *testing.T) {
			p := &Partition{store: store, prefix: prefix, caches: NewCaches(CacheOptions{})}
			checkCursor(t, p, m, h, offsets, stamps)
			ls, ok, err := p.lastSegment(ctx, h)
			if err != nil || !ok || ls.BaseOffset != m.Segments[len(m.Segments)-1].BaseOffset {
				t.Errorf("lastSegment %v %v %d", err, ok, ls.BaseOffset)
			}
			st := &manifestState{head: h}
			fs, err := p.firstSegment(ctx, st)
			if err != nil || fs.BaseOffset != m.Segments[0].BaseOffset {
				t.Errorf("firstSegment %v %d, want %d", err, fs.BaseOffset, m.Segments[0].BaseOffset)
			}
		})
	}
}

// TestSeekTimestampPastSkippedBlockMax: the first 10 segments of a
// tier-2 part carry a far-future timestamp, and a cut (Skip 10) drops
// them. Block 0's directory entry still carries their timestamp, so
// seekTimestamp picks block 0, finds none of its live segments reaching
// ts, and next() returns block 1's first segment: not FindTimestamp's.
func TestSeekTimestampPastSkippedBlockMax(t *testing.T) {
	ctx := context.Background()
	r := rand.New(rand.NewSource(11))
	store := objstore.New(mem.New(), "mem://cursor", objstore.Options{})
	prefix := "tl/orders-0"
	segs := randomSegments(r, 0, 4096+5, false) // timestamps 1,000,000 + i
	for i := 0; i < 10; i++ {
		segs[i].MaxTimestamp = 9_000_000_000
	}
	m0 := &manifest.Manifest{Generation: 1, WriterEpoch: 1, Segments: segs}
	layerInto(t, store, prefix, nil, m0)
	m := &manifest.Manifest{Generation: 2, WriterEpoch: 1, Segments: append([]manifest.Segment(nil), segs[10:]...)}
	m.LogStartOffset = m.Segments[0].BaseOffset
	layerInto(t, store, prefix, m0, m)
	h, err := m.Head()
	if err != nil {
		t.Fatal(err)
	}
	ts := int64(1_000_000 + 3000) // in block 11
	i, ok := m.FindTimestamp(ts)
	if !ok {
		t.Fatal("no segment")
	}
	p := &Partition{store: store, prefix: prefix, caches: NewCaches(CacheOptions{}), metrics: &Metrics{}}
	c, err := p.seekTimestamp(ctx, h, ts)
	if err != nil {
		t.Fatal(err)
	}
	pos := c.position()
	s, _, err := c.next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if s.BaseOffset != m.Segments[i].BaseOffset || pos != i {
		t.Errorf("seekTimestamp(%d): segment %d (max ts %d, position %d); FindTimestamp: index %d, segment %d (max ts %d)",
			ts, s.BaseOffset, s.MaxTimestamp, pos, i, m.Segments[i].BaseOffset, m.Segments[i].MaxTimestamp)
	}
	// What offsetForTimestamp then does: walk on to the first segment reaching ts.
	for s.MaxTimestamp < ts {
		if s, _, err = c.next(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if n := p.metrics.ManifestRangeReads.Load(); n > 3 {
		t.Errorf("the seek took %d ranged reads of the part; the directory and the block reaching ts take 2 (3 with the skipped one)", n)
	}
}

// TestCursorConcurrent: many goroutines seek on shared caches (run
// with -race).
func TestCursorConcurrent(t *testing.T) {
	ctx := context.Background()
	r := rand.New(rand.NewSource(21))
	store := objstore.New(mem.New(), "mem://cursor", objstore.Options{})
	prefix := "tl/orders-0"
	segs := randomSegments(r, 0, 4096+256+5, true)
	m0 := &manifest.Manifest{Generation: 1, WriterEpoch: 1, Segments: segs}
	layerInto(t, store, prefix, nil, m0)
	m := &manifest.Manifest{Generation: 2, WriterEpoch: 1, Segments: append([]manifest.Segment(nil), segs[300:]...)}
	m.LogStartOffset = m.Segments[0].BaseOffset
	layerInto(t, store, prefix, m0, m)
	h, _ := m.Head()
	p := &Partition{store: store, prefix: prefix, caches: NewCaches(CacheOptions{ManifestBytes: 200 << 10})}
	st := &manifestState{head: h}
	last := m.Segments[len(m.Segments)-1].LastOffset
	done := make(chan struct{})
	for g := 0; g < 4; g++ {
		go func(seed int64) {
			defer func() { done <- struct{}{} }()
			rr := rand.New(rand.NewSource(seed))
			for i := 0; i < 300; i++ {
				off := rr.Int63n(last + 10)
				c, err := p.seek(ctx, h, off)
				if err != nil {
					t.Error(err)
					return
				}
				for k := 0; k < 300; k++ {
					if _, ok, err := c.next(ctx); err != nil || !ok {
						break
					}
				}
				p.cachedAfter(h, off)
				p.firstSegment(ctx, st)
				p.maxTimestampSegment(ctx, view{head: h}, last)
				p.whole(ctx, h)
			}
		}(int64(g))
	}
	for g := 0; g < 4; g++ {
		<-done
	}
}
