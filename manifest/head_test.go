package manifest_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/tierlog/tierlog/manifest"
)

// TestDecodeHeadValidates: a CRC-valid head that Decode refuses as
// invalid (a log start past the last segment; a deleted partition that
// names segments) is refused by DecodeHead too. WAL gc reads heads with
// it (tiered/walgc.go readPartitionEnd): taking such a head, it would take
// offsets below the bogus log start as consolidated, or the partition as
// deleted, and remove WAL objects the partition needs.
func TestDecodeHeadValidates(t *testing.T) {
	m := &manifest.Manifest{Generation: 1, WriterEpoch: 1, LogStartOffset: 10,
		Segments: []manifest.Segment{{BaseOffset: 0, LastOffset: 19, Size: 100, Records: 20}}}
	good, err := m.Encode()
	if err != nil {
		t.Fatal(err)
	}
	// magic 4, version 2, generation 1 byte, writer epoch 1 byte: the log
	// start (zigzag varint) at 8, the flags at 9.
	if good[8] != 20 || good[9] != 0 {
		t.Fatalf("layout: % x", good[:12])
	}
	patch := func(at int, v byte) []byte {
		b := append([]byte(nil), good[:len(good)-4]...)
		b[at] = v
		return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli)))
	}
	for name, bad := range map[string][]byte{
		"log start 60 past the end (19)": patch(8, 120),
		"deleted, naming a segment":      patch(9, 1),
	} {
		if _, err := manifest.Decode(bad); !errors.Is(err, manifest.ErrInvalid) {
			t.Fatalf("%s: Decode: %v", name, err)
		}
		h, err := manifest.DecodeHead(bad)
		if err == nil {
			t.Errorf("%s: DecodeHead accepts it: deleted %v, WAL gc's end max(%d+1, %d)", name, h.Deleted(), h.LastOffset(), h.LogStartOffset())
		}
	}
}

// TestDecodePartChecksItsReference: DecodePart (exported) checks its
// reference first: one not from DecodeHead (hand-made, or a tool's) with
// a Skip out of range fails with a typed error, never a panic.
func TestDecodePartChecksItsReference(t *testing.T) {
	b, m := committedBucket(t, 40)
	p := m.Parts[0]
	data := b.parts[p.Name()]
	for _, skip := range []int{-1, p.ObjectSegments + 1} {
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Errorf("Skip %d: panic: %v", skip, r)
				}
			}()
			q := p
			q.Skip = skip
			if _, err := manifest.DecodePart(q, data); !errors.Is(err, manifest.ErrCorrupt) && !errors.Is(err, manifest.ErrInvalid) {
				t.Errorf("Skip %d: %v", skip, err)
			}
		}()
	}
}

// TestHeadEncodesAsItsManifest: a manifest's head encodes to the bytes
// the manifest does (a commit puts the head's), with and without parts.
func TestHeadEncodesAsItsManifest(t *testing.T) {
	b := newBucket()
	prev := &manifest.Manifest{}
	for i := range 600 {
		next := *prev
		next.Generation++
		next.Segments = append(prev.Segments[:len(prev.Segments):len(prev.Segments)], synthSegment(int64(i)*10, 10, i))
		b.commit(t, prev, &next)
		h, err := next.Head()
		if err != nil {
			t.Fatal(err)
		}
		want, err := next.Encode()
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(h.Encode(), want) {
			t.Fatalf("commit %d: the head's bytes are not the manifest's", i)
		}
		prev = &next
	}
}

// TestHeadSameLog: two heads describe the same log when they differ at
// most in generation and writer epoch (a claim); a different log start,
// incarnation, segment or part is a different log.
func TestHeadSameLog(t *testing.T) {
	var segs []manifest.Segment
	for i := range 300 {
		segs = append(segs, synthSegment(int64(i)*10, 10, i))
	}
	m := &manifest.Manifest{Generation: 4, WriterEpoch: 1, Segments: segs}
	if _, err := m.Layer(nil, func() (id [8]byte) { return id }); err != nil {
		t.Fatal(err)
	}
	h, err := m.Head()
	if err != nil {
		t.Fatal(err)
	}
	if !h.Layered() {
		t.Fatal("300 segments made no part")
	}
	edit := func(f func(*manifest.Manifest)) *manifest.Head {
		t.Helper()
		e, err := h.Edit(f)
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	if claim := edit(func(m *manifest.Manifest) { m.Generation, m.WriterEpoch = 5, 2 }); !h.SameLog(claim) || !claim.SameLog(h) {
		t.Fatal("a claim's head is not the same log")
	}
	if cut := edit(func(m *manifest.Manifest) { m.Generation, m.LogStartOffset = 5, 5 }); h.SameLog(cut) {
		t.Fatal("a moved log start is the same log")
	}
	if reborn := edit(func(m *manifest.Manifest) { m.Generation, m.Born = 5, 5 }); h.SameLog(reborn) {
		t.Fatal("another incarnation is the same log")
	}
	more := *m
	more.Generation++
	more.Segments = append(segs[:len(segs):len(segs)], synthSegment(3000, 10, 300))
	if _, err := more.Layer(m, func() (id [8]byte) { id[0] = 1; return id }); err != nil {
		t.Fatal(err)
	}
	if h2, err := more.Head(); err != nil || h.SameLog(h2) {
		t.Fatalf("a head with one more segment is the same log (%v)", err)
	}
}

// TestHeadAppendIsLayer: appending segments to a head lays them out
// exactly as Layer lays out the whole manifest (the same head bytes, the
// same parts, byte for byte, with the same ids), through carries up to
// tier 2, after cuts at the front that skip into parts or drop them, and
// it reads only the parts a carry merges.
func TestHeadAppendIsLayer(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 9))
	b := newBucket()
	prev := &manifest.Manifest{Generation: 1, WriterEpoch: 1}
	b.commit(t, nil, prev)
	head, err := prev.Head()
	if err != nil {
		t.Fatal(err)
	}
	i := 0
	for step := 0; i < 6000; step++ {
		if step%97 == 96 && len(prev.Segments) > 40 {
			// A cut at the front, through the whole manifest (retention).
			next := *prev
			k := 1 + rng.IntN(len(prev.Segments)/2)
			next.Segments = slices.Clone(prev.Segments[k:])
			next.LogStartOffset = next.Segments[0].BaseOffset
			next.Generation++
			b.commit(t, prev, &next)
			prev = &next
			if head, err = prev.Head(); err != nil {
				t.Fatal(err)
			}
			continue
		}
		var segs []manifest.Segment
		for range 1 + rng.IntN(40) {
			segs = append(segs, synthSegment(int64(i)*10, 10, i))
			i++
		}
		// The whole manifest's way.
		next := *prev
		next.Segments = append(slices.Clone(prev.Segments), segs...)
		next.Generation++
		idBefore := b.nextID
		made, err := next.Layer(prev, b.id)
		if err != nil {
			t.Fatal(err)
		}
		want, err := next.Encode()
		if err != nil {
			t.Fatal(err)
		}
		// The head's way, with the same ids.
		ids := newBucket()
		ids.nextID = idBefore
		loads := 0
		load := func(p manifest.Part) ([]manifest.Segment, error) { loads++; return b.load(p) }
		got, gotMade, err := head.Append(segs, next.LogStartOffset, load, ids.id)
		if err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
		got, err = got.Edit(func(m *manifest.Manifest) { m.Generation = next.Generation })
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got.Encode(), want) {
			t.Fatalf("step %d (%d segments): the appended head's bytes are not the layered manifest's", step, len(next.Segments))
		}
		if len(gotMade) != len(made) {
			t.Fatalf("step %d: %d parts made, Layer made %d", step, len(gotMade), len(made))
		}
		for k := range made {
			if made[k].Part != gotMade[k].Part || !bytes.Equal(made[k].Data, gotMade[k].Data) {
				t.Fatalf("step %d: part %d differs from Layer's", step, k)
			}
			b.parts[made[k].Name()] = made[k].Data
		}
		if loads > (manifest.Fanout-1)*manifest.MaxTier { // a carry through every tier
			t.Fatalf("step %d: %d parts read for one append", step, loads)
		}
		prev, head = &next, got
	}
	if len(head.Parts) == 0 || slices.IndexFunc(head.Parts, func(p manifest.Part) bool { return p.Tier == 2 }) < 0 {
		t.Fatalf("no tier 2 part after %d segments: the carries were not tried", i)
	}
}
