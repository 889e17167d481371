package manifest_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/tierlog/tierlog/manifest"
)

// randomManifest builds n segments with gaps, timestamps that sometimes go
// back, rising epochs and upload times.
func randomManifest(rng *rand.Rand, n int) *manifest.Manifest {
	m := &manifest.Manifest{Generation: rng.Uint64N(1 << 40), WriterEpoch: int32(rng.IntN(100)), LogStartOffset: 0}
	base, ts, epoch, up := int64(rng.IntN(1000)), int64(1_700_000_000_000), int32(0), int64(1_700_000_000_000)
	for i := 0; i < n; i++ {
		span := rng.Int64N(50_000)
		s := manifest.Segment{
			BaseOffset: base, LastOffset: base + span, MaxTimestamp: ts + rng.Int64N(1000) - 200,
			Size: 1 + rng.Int64N(1<<30), Records: rng.Int64N(span + 2), LeaderEpoch: epoch,
			UploadTimeMs: up, IndexSize: 8 * rng.Int64N(100_000), TimeIndexSize: 12 * rng.Int64N(80_000),
			LogCRC: rng.Uint32(), IndexCRC: rng.Uint32(), TimeIndexCRC: rng.Uint32(),
		}
		if s.Records > span+1 {
			s.Records = span + 1
		}
		if rng.IntN(3) > 0 { // a version 2 segment: epochs and objects
			s.Epochs = []manifest.EpochStart{{Epoch: epoch, StartOffset: base}}
			if span > 10 && rng.IntN(2) == 0 {
				s.Epochs = append(s.Epochs, manifest.EpochStart{Epoch: epoch + 1 + int32(rng.IntN(3)), StartOffset: base + 1 + rng.Int64N(span)})
			}
			s.SnapshotSize, s.SnapshotCRC = 10+46*rng.Int64N(100), rng.Uint32()
			s.EpochsSize, s.EpochsCRC = 6+rng.Int64N(100), rng.Uint32()
			if rng.IntN(4) == 0 {
				s.TxnIndexSize, s.TxnIndexCRC = 34*(1+rng.Int64N(50)), rng.Uint32()
			}
		}
		for j := range s.ID {
			s.ID[j] = byte(rng.Uint32())
		}
		m.Segments = append(m.Segments, s)
		base = s.LastOffset + 1
		if rng.IntN(10) == 0 {
			base += 1 + rng.Int64N(500) // a gap
		}
		ts += rng.Int64N(60_000)
		up += rng.Int64N(60_000)
		if rng.IntN(20) == 0 {
			epoch++
		}
	}
	if n > 0 {
		m.LogStartOffset = m.Segments[0].BaseOffset + rng.Int64N(m.Segments[0].LastOffset-m.Segments[0].BaseOffset+1)
	}
	return m
}

func TestRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{0, 1, 2, 10, 1000} {
		m := randomManifest(rng, n)
		b, err := m.Encode()
		if err != nil {
			t.Fatal(err)
		}
		got, err := manifest.Decode(b)
		if err != nil {
			t.Fatalf("%d segments: %v", n, err)
		}
		if got.Generation != m.Generation || got.WriterEpoch != m.WriterEpoch || got.LogStartOffset != m.LogStartOffset || len(got.Segments) != n {
			t.Fatalf("%d segments: header differs", n)
		}
		for i := range m.Segments {
			if !reflect.DeepEqual(got.Segments[i], m.Segments[i]) {
				t.Fatalf("segment %d differs:\n got %+v\nwant %+v", i, got.Segments[i], m.Segments[i])
			}
		}
		again, _ := got.Encode()
		if !bytes.Equal(again, b) {
			t.Fatalf("%d segments: re-encoding differs", n)
		}
	}
}

func TestEveryByteFlipDetected(t *testing.T) {
	m := randomManifest(rand.New(rand.NewPCG(3, 4)), 20)
	b, _ := m.Encode()
	for i := range b {
		bad := append([]byte(nil), b...)
		bad[i] ^= 0x20
		if _, err := manifest.Decode(bad); err == nil {
			t.Fatalf("flipping byte %d of %d went unnoticed", i, len(b))
		}
	}
	for cut := 0; cut < len(b); cut++ {
		if _, err := manifest.Decode(b[:cut]); !errors.Is(err, manifest.ErrCorrupt) {
			t.Fatalf("manifest cut at %d: %v", cut, err)
		}
	}
}

// TestReadsVersion1And2: version 1 (no epochs, no optional objects) and
// version 2 (no parts) manifests still decode; both re-encode as version 3.
func TestReadsVersion1And2(t *testing.T) {
	m := &manifest.Manifest{Generation: 3, LogStartOffset: 10, Segments: []manifest.Segment{{BaseOffset: 10, LastOffset: 99,
		MaxTimestamp: 5, Size: 4096, Records: 90, LeaderEpoch: 2, IndexSize: 8, TimeIndexSize: 12, LogCRC: 1, IndexCRC: 2, TimeIndexCRC: 3}}}
	v3, err := m.Encode()
	if err != nil {
		t.Fatal(err)
	}
	// Version 2 is version 3 without the part count (the byte after
	// magic, version, generation, writer epoch, log start and flags:
	// 4+2+1+1+1+1). Version 1 is version 2 without the header's flags and
	// without a segment's last four bytes (no epochs, three object sizes
	// of 0).
	const flagsAt = 9
	if v3[flagsAt] != 0 || v3[flagsAt+1] != 0 {
		t.Fatalf("version 3 header flags %x, part count %x", v3[flagsAt], v3[flagsAt+1])
	}
	seal := func(body []byte, version uint16) []byte {
		body = append([]byte(nil), body...)
		binary.BigEndian.PutUint16(body[4:], version)
		return binary.BigEndian.AppendUint32(body, crc32.Checksum(body, crc32.MakeTable(crc32.Castagnoli)))
	}
	v2 := seal(append(append([]byte(nil), v3[:flagsAt+1]...), v3[flagsAt+2:len(v3)-4]...), 2)
	if !bytes.Equal(v2[len(v2)-8:len(v2)-4], []byte{0, 0, 0, 0}) {
		t.Fatalf("version 2 tail %x", v2[len(v2)-8:len(v2)-4])
	}
	v1 := seal(append(append([]byte(nil), v2[:flagsAt]...), v2[flagsAt+1:len(v2)-4-4]...), 1)
	for name, old := range map[string][]byte{"version 1": v1, "version 2": v2} {
		got, err := manifest.Decode(old)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !reflect.DeepEqual(got.Segments, m.Segments) || got.LogStartOffset != 10 || got.Parts != nil {
			t.Fatalf("%s decoded as %+v", name, got)
		}
		if again, _ := got.Encode(); !bytes.Equal(again, v3) {
			t.Fatalf("a %s manifest does not re-encode as the version 3 bytes", name)
		}
	}
}

func TestDeletedFlag(t *testing.T) {
	m := &manifest.Manifest{Generation: 7, WriterEpoch: 3, LogStartOffset: 500, Deleted: true}
	b, err := m.Encode()
	if err != nil {
		t.Fatal(err)
	}
	got, err := manifest.Decode(b)
	if err != nil || !got.Deleted || got.Generation != 7 || got.LogStartOffset != 500 {
		t.Fatalf("decoded %+v, %v", got, err)
	}
	m.Segments = []manifest.Segment{{BaseOffset: 500, LastOffset: 501, Size: 10, Records: 2}}
	if _, err := m.Encode(); !errors.Is(err, manifest.ErrInvalid) {
		t.Fatalf("a deleted manifest naming a segment encoded: %v", err)
	}
	const flagsAt = 4 + 2 + 1 + 1 + 2 // magic, version, generation 7, epoch 3, log start 500
	b[flagsAt] = 32                   // the first flag no build knows
	body := b[:len(b)-4]
	b = binary.BigEndian.AppendUint32(body, crc32.Checksum(body, crc32.MakeTable(crc32.Castagnoli)))
	if _, err := manifest.Decode(b); !errors.Is(err, manifest.ErrUnsupportedVersion) {
		t.Fatalf("an unknown flag: %v", err)
	}
}

func walManifest() *manifest.Manifest {
	return &manifest.Manifest{Generation: 4, WriterEpoch: 2,
		Segments: []manifest.Segment{{BaseOffset: 0, LastOffset: 99, Size: 10, Records: 100}},
		WAL: &manifest.WAL{Writer: [8]byte{1, 2}, After: 17, Extents: []manifest.WALExtent{
			{Writer: [8]byte{9}, Sequence: 3, Position: 0, Size: 40, FirstOffset: 100, LastOffset: 120, CRC: 0xdeadbeef},
			{Writer: [8]byte{9}, Sequence: 5, Position: 4096, Size: 7, FirstOffset: 121, LastOffset: 121, CRC: 1},
		}}}
}

// TestWALRecord: a diskless partition's WAL record round-trips, and
// extents out of order are refused.
func TestWALRecord(t *testing.T) {
	m := walManifest()
	b, err := m.Encode()
	if err != nil {
		t.Fatal(err)
	}
	got, err := manifest.Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if got.WAL == nil || got.WAL.Writer != m.WAL.Writer || got.WAL.After != 17 || len(got.WAL.Extents) != 2 || got.WAL.Extents[1] != m.WAL.Extents[1] {
		t.Fatalf("decoded WAL record %+v", got.WAL)
	}
	if b2, _ := (&manifest.Manifest{Generation: 4, WriterEpoch: 2, Segments: m.Segments}).Encode(); len(b2) >= len(b) {
		t.Fatal("a manifest without a WAL record is not shorter than one with it")
	}
	m.WAL.Extents[1].FirstOffset = 110
	if _, err := m.Encode(); !errors.Is(err, manifest.ErrInvalid) {
		t.Fatalf("overlapping WAL extents encoded: %v", err)
	}
}

func TestUnsupportedVersion(t *testing.T) {
	b, _ := (&manifest.Manifest{}).Encode()
	binary.BigEndian.PutUint16(b[4:], 9)
	if _, err := manifest.Decode(b); !errors.Is(err, manifest.ErrUnsupportedVersion) {
		t.Fatal(err)
	}
}

func TestValidation(t *testing.T) {
	seg := func(base, last int64) manifest.Segment {
		return manifest.Segment{BaseOffset: base, LastOffset: last, Size: 100, Records: last - base + 1}
	}
	cases := map[string]*manifest.Manifest{
		"overlap":        {Segments: []manifest.Segment{seg(0, 10), seg(10, 20)}},
		"out of order":   {Segments: []manifest.Segment{seg(20, 30), seg(0, 10)}},
		"last < base":    {Segments: []manifest.Segment{seg(5, 4)}},
		"zero size":      {Segments: []manifest.Segment{{BaseOffset: 0, LastOffset: 1}}},
		"too many recs":  {Segments: []manifest.Segment{{BaseOffset: 0, LastOffset: 1, Size: 1, Records: 3}}},
		"index size":     {Segments: []manifest.Segment{{BaseOffset: 0, LastOffset: 1, Size: 1, IndexSize: 7}}},
		"log start past": {LogStartOffset: 50, Segments: []manifest.Segment{seg(0, 10)}},
	}
	for name, m := range cases {
		if _, err := m.Encode(); !errors.Is(err, manifest.ErrInvalid) {
			t.Errorf("%s: %v", name, err)
		}
	}
	m := &manifest.Manifest{}
	if err := m.Append(seg(0, 10)); err != nil {
		t.Fatal(err)
	}
	if err := m.Append(seg(5, 20)); !errors.Is(err, manifest.ErrInvalid) || len(m.Segments) != 1 {
		t.Fatalf("overlapping append: %v, %d segments", err, len(m.Segments))
	}
}

func TestFindAgainstBruteForce(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	m := randomManifest(rng, 300)
	b, _ := m.Encode()
	m, _ = manifest.Decode(b)
	last := m.Segments[len(m.Segments)-1].LastOffset
	for k := 0; k < 5000; k++ {
		o := rng.Int64N(last + 100)
		want, wantOK := -1, false
		if o >= m.LogStartOffset {
			for i, s := range m.Segments {
				if s.LastOffset >= o {
					want, wantOK = i, true
					break
				}
			}
		}
		got, ok := m.Find(o)
		if ok != wantOK || (ok && got != want) {
			t.Fatalf("Find(%d) = %d, %v; want %d, %v", o, got, ok, want, wantOK)
		}
		ts := m.Segments[0].MaxTimestamp - 500 + rng.Int64N(m.Segments[len(m.Segments)-1].MaxTimestamp-m.Segments[0].MaxTimestamp+1000)
		wt, wtOK := -1, false
		for i, s := range m.Segments {
			if s.MaxTimestamp >= ts {
				wt, wtOK = i, true
				break
			}
		}
		gt, gtOK := m.FindTimestamp(ts)
		if gtOK != wtOK || (gtOK && gt != wt) {
			t.Fatalf("FindTimestamp(%d) = %d, %v; want %d, %v", ts, gt, gtOK, wt, wtOK)
		}
	}
}

func TestSegmentName(t *testing.T) {
	s := manifest.Segment{BaseOffset: 155, LastOffset: 3000, ID: [8]byte{0xde, 0xad, 0xbe, 0xef, 0, 1, 2, 3}}
	if got := s.Name(manifest.LogSuffix); got != "00000000000000000155-00000000000000003000-deadbeef00010203.log" {
		t.Fatal(got)
	}
}

// FuzzDecode: any bytes decode to a valid manifest or an error, never a
// panic; a manifest that decodes re-encodes to the same bytes.
func FuzzDecode(f *testing.F) {
	for _, n := range []int{0, 1, 5} {
		b, _ := randomManifest(rand.New(rand.NewPCG(uint64(n), 9)), n).Encode()
		f.Add(b)
	}
	b, _ := walManifest().Encode()
	f.Add(b)
	withLineage := walManifest()
	withLineage.Lineage, withLineage.CleanedTo = [8]byte{1, 2, 3, 4, 5, 6, 7, 8}, 3
	b, _ = withLineage.Encode()
	f.Add(b)
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := manifest.Decode(data)
		if err != nil {
			return
		}
		b, err := m.Encode()
		if err != nil {
			t.Fatalf("a decoded manifest does not encode: %v", err)
		}
		if binary.BigEndian.Uint16(data[4:]) == manifest.Version && !bytes.Equal(b, data) {
			t.Fatal("re-encoding a decoded manifest changed its bytes")
		}
		if again, err := manifest.Decode(b); err != nil || !reflect.DeepEqual(again, m) {
			t.Fatalf("an older manifest written as version %d does not read back: %v", manifest.Version, err)
		}
	})
}

func BenchmarkEncode100k(b *testing.B) {
	m := randomManifest(rand.New(rand.NewPCG(7, 8)), 100_000)
	var size int
	for b.Loop() {
		out, err := m.Encode()
		if err != nil {
			b.Fatal(err)
		}
		size = len(out)
	}
	b.ReportMetric(float64(size), "bytes")
}

func BenchmarkDecode100k(b *testing.B) {
	data, _ := randomManifest(rand.New(rand.NewPCG(7, 8)), 100_000).Encode()
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if _, err := manifest.Decode(data); err != nil {
			b.Fatal(err)
		}
	}
}

// TestBorn: the generation an incarnation was born at round-trips (a
// header flag and a varint, absent when 0, so older manifests' bytes are
// unchanged), and cannot be after the manifest's own generation.
func TestBorn(t *testing.T) {
	m := &manifest.Manifest{Generation: 12, WriterEpoch: 1, Born: 9,
		Segments: []manifest.Segment{{BaseOffset: 0, LastOffset: 9, Size: 100, Records: 10}}}
	b, err := m.Encode()
	if err != nil {
		t.Fatal(err)
	}
	got, err := manifest.Decode(b)
	if err != nil || got.Born != 9 || got.Generation != 12 || len(got.Segments) != 1 || got.Deleted {
		t.Fatalf("decoded %+v, %v", got, err)
	}
	m.Born = 0
	plain, err := m.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if len(plain) != len(b)-1 {
		t.Fatalf("without Born the manifest is %d bytes, with it %d: want one byte less", len(plain), len(b))
	}
	m.Born = 13
	if _, err := m.Encode(); !errors.Is(err, manifest.ErrInvalid) {
		t.Fatalf("born after its own generation: %v", err)
	}
}

// TestCleanedTo: the bucket's cleaner checkpoint round-trips with every
// other header field (a flag and a varint, absent when 0, so the bytes
// of a manifest without one are unchanged); a head with the flag and a 0
// is refused, and a build that does not know the flag refuses the
// manifest rather than drop the checkpoint.
func TestCleanedTo(t *testing.T) {
	m := &manifest.Manifest{Generation: 12, WriterEpoch: 1, Born: 9, CleanedTo: 300,
		WAL:      &manifest.WAL{Writer: [8]byte{1}, After: 4},
		Segments: []manifest.Segment{{BaseOffset: 0, LastOffset: 999, Size: 100, Records: 10}}}
	b, err := m.Encode()
	if err != nil {
		t.Fatal(err)
	}
	got, err := manifest.Decode(b)
	if err != nil || got.CleanedTo != 300 || got.Born != 9 || got.WAL == nil || got.WAL.After != 4 || len(got.Segments) != 1 {
		t.Fatalf("decoded %+v, %v", got, err)
	}
	h, err := manifest.DecodeHead(b)
	if err != nil || h.CleanedTo() != 300 {
		t.Fatalf("head: %v, %v", h, err)
	}
	m.CleanedTo = 0
	plain, err := m.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if len(plain) != len(b)-2 {
		t.Fatalf("without the checkpoint the manifest is %d bytes, with it %d: want two bytes less", len(plain), len(b))
	}
	// The flag with a 0 checkpoint after it: magic, version, generation,
	// epoch, log start, flags, born (one byte each but the first two),
	// the WAL's writer, after and count, then the checkpoint's two bytes.
	at := 4 + 2 + 1 + 1 + 1 + 1 + 1 + 8 + 1 + 1
	if b[at] != 0xac || b[at+1] != 0x02 {
		t.Fatalf("the checkpoint is not at byte %d: % x", at, b[at:at+2])
	}
	bad := append(append(append([]byte(nil), b[:at]...), 0), b[at+2:len(b)-4]...)
	bad = binary.BigEndian.AppendUint32(bad, crc32.Checksum(bad, crc32.MakeTable(crc32.Castagnoli)))
	if _, err := manifest.Decode(bad); !errors.Is(err, manifest.ErrCorrupt) {
		t.Fatalf("a checkpoint flag with a 0 checkpoint: %v", err)
	}
	m.CleanedTo = -1
	if _, err := m.Encode(); !errors.Is(err, manifest.ErrInvalid) {
		t.Fatalf("a negative checkpoint: %v", err)
	}
}

// TestLineage: the lineage round-trips through a head and its edits and
// appends, costs nine bytes (eight and no more than the flag's), is absent
// from a manifest without one, and a zero lineage under its flag is
// corrupt.
func TestLineage(t *testing.T) {
	lin := [8]byte{0xde, 0xad, 0xbe, 0xef, 1, 2, 3, 4}
	m := &manifest.Manifest{Generation: 3, WriterEpoch: 1, CleanedTo: 7, Lineage: lin,
		Segments: []manifest.Segment{{BaseOffset: 0, LastOffset: 9, Size: 100, Records: 10}}}
	b, err := m.Encode()
	if err != nil {
		t.Fatal(err)
	}
	got, err := manifest.Decode(b)
	if err != nil || got.Lineage != lin || got.CleanedTo != 7 {
		t.Fatalf("decoded %+v, %v", got, err)
	}
	h, err := manifest.DecodeHead(b)
	if err != nil || h.Lineage() != lin {
		t.Fatalf("head: %v, %v", h, err)
	}
	h2, _, err := h.Append([]manifest.Segment{{BaseOffset: 10, LastOffset: 19, Size: 100, Records: 10}}, 0, nil, nil)
	if err != nil || h2.Lineage() != lin {
		t.Fatalf("an append lost the lineage: %v, %v", h2, err)
	}
	h3, err := h2.Edit(func(m *manifest.Manifest) { m.Generation++ })
	if err != nil || h3.Lineage() != lin {
		t.Fatalf("an edit lost the lineage: %v, %v", h3, err)
	}
	m.Lineage = [8]byte{}
	plain, err := m.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if len(plain) != len(b)-8 {
		t.Fatalf("without a lineage the manifest is %d bytes, with it %d: want eight less", len(plain), len(b))
	}
	if got, err := manifest.Decode(plain); err != nil || got.Lineage != ([8]byte{}) {
		t.Fatalf("no lineage: %+v, %v", got, err)
	}
	// The flag with a zero lineage after it: magic, version, generation,
	// epoch, log start, flags, the checkpoint, then the lineage.
	const at = 4 + 2 + 1 + 1 + 1 + 1 + 1
	if !bytes.Equal(b[at:at+8], lin[:]) {
		t.Fatalf("the lineage is not at byte %d: % x", at, b[at:at+8])
	}
	bad := append([]byte(nil), b[:len(b)-4]...)
	copy(bad[at:at+8], make([]byte, 8))
	bad = binary.BigEndian.AppendUint32(bad, crc32.Checksum(bad, crc32.MakeTable(crc32.Castagnoli)))
	if _, err := manifest.Decode(bad); !errors.Is(err, manifest.ErrCorrupt) {
		t.Fatalf("a lineage flag with a zero lineage: %v", err)
	}
}
