package wal

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"hash/crc32"
	"strings"
	"testing"
)

// testObject lays out an object of the given extents' bytes the way the
// writer does.
func testObject(t testing.TB, f Footer, data map[TopicPartition][]byte) []byte {
	t.Helper()
	var body []byte
	for i := range f.Extents {
		e := &f.Extents[i]
		d := data[e.TopicPartition]
		e.Position, e.Size, e.CRC = int64(len(body)), int32(len(d)), crc32.Checksum(d, castagnoli)
		body = append(body, d...)
	}
	if err := f.validate(int64(len(body))); err != nil {
		t.Fatal(err)
	}
	return f.appendTo(body)
}

func goldenFooter() (Footer, map[TopicPartition][]byte) {
	a, b := TopicPartition{"a", 0}, TopicPartition{"b", 3}
	f := Footer{
		Writer: WriterID{1, 2, 3, 4, 5, 6, 7, 8}, Sequence: 7, CreatedMs: 1700000000000,
		Extents: []Extent{{TopicPartition: a, FirstOffset: 10, LastOffset: 12}, {TopicPartition: b, FirstOffset: 0, LastOffset: 0}},
	}
	return f, map[TopicPartition][]byte{a: []byte("AAAA"), b: []byte("BB")}
}

// The golden bytes of a small object: the format is frozen, so these never
// change.
const goldenHex = "" +
	"414141414242" + // data: a-0's 4 bytes, b-3's 2
	"0100" + "0102030405060708" + "0000000000000007" + "0000018bcfe56800" + "00000000" + "00000002" +
	"0001" + "61" + "00000000" + "000000000000000a" + "000000000000000c" + "0000000000000000" + "00000004" + "03056cf3" +
	"0001" + "62" + "00000003" + "0000000000000000" + "0000000000000000" + "0000000000000004" + "00000002" + "8973ec73" +
	"c307517d" + // footer CRC-32C
	"00000074" + "544c57414c000001" // footer length, magic

func TestGoldenObject(t *testing.T) {
	f, data := goldenFooter()
	got := testObject(t, f, data)
	want, err := hex.DecodeString(goldenHex)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("object bytes changed (the format is frozen):\n got %x\nwant %x", got, want)
	}
	back, err := DecodeFooter(want, int64(len(want)))
	if err != nil {
		t.Fatal(err)
	}
	if back.Writer != f.Writer || back.Sequence != 7 || back.CreatedMs != f.CreatedMs || back.Fence || len(back.Extents) != 2 {
		t.Fatalf("decoded %+v", back)
	}
	for _, e := range back.Extents {
		if err := CheckExtent(e, want[e.Position:e.Position+int64(e.Size)]); err != nil {
			t.Fatal(err)
		}
	}
	if e, ok := back.Find(TopicPartition{"b", 3}); !ok || e.Position != 4 || e.Size != 2 {
		t.Fatalf("Find b-3 = %+v, %v", e, ok)
	}
	if _, ok := back.Find(TopicPartition{"b", 2}); ok {
		t.Fatal("Find found a partition the object does not hold")
	}
}

func TestFenceRoundTrip(t *testing.T) {
	tps := []TopicPartition{{"t", 2}, {"s", 1}, {"t", 2}}
	b, err := EncodeFence(Footer{Writer: WriterID{9}, Sequence: 4, FenceEpoch: 11, Extents: extentsOf(tps)})
	if err != nil {
		t.Fatal(err)
	}
	f, err := DecodeFooter(b, int64(len(b)))
	if err != nil {
		t.Fatal(err)
	}
	if !f.Fence || f.FenceEpoch != 11 || len(f.Extents) != 2 || !f.Fences(TopicPartition{"s", 1}) || !f.Fences(TopicPartition{"t", 2}) || f.Fences(TopicPartition{"t", 1}) {
		t.Fatalf("fence decoded as %+v", f)
	}
	if _, ok := f.Find(TopicPartition{"s", 1}); ok {
		t.Fatal("a fence holds no data, yet Find found an extent")
	}
}

// Every damaged object is ErrCorrupt, never a panic or a footer.
func TestCorruptObjects(t *testing.T) {
	f, data := goldenFooter()
	good := testObject(t, f, data)
	n := len(good)
	footerAt := n - trailerSize - int(binary.BigEndian.Uint32(good[n-trailerSize:]))
	mutate := func(fn func(b []byte) []byte) []byte { return fn(bytes.Clone(good)) }
	cases := map[string][]byte{
		"empty":             {},
		"trailer only":      good[n-trailerSize:],
		"bad magic":         mutate(func(b []byte) []byte { b[n-1] ^= 1; return b }),
		"footer len huge":   mutate(func(b []byte) []byte { binary.BigEndian.PutUint32(b[n-trailerSize:], 1<<30); return b }),
		"footer len short":  mutate(func(b []byte) []byte { binary.BigEndian.PutUint32(b[n-trailerSize:], 3); return b }),
		"footer bit flip":   mutate(func(b []byte) []byte { b[footerAt+12] ^= 0x40; return b }),
		"crc flip":          mutate(func(b []byte) []byte { b[n-trailerSize-1] ^= 1; return b }),
		"data cut":          good[1:],
		"data added":        append([]byte{0}, good...),
		"unknown flag":      reCRC(mutate(func(b []byte) []byte { b[footerAt+1] = 2; return b }), footerAt),
		"version 2":         reCRC(mutate(func(b []byte) []byte { b[footerAt] = 2; return b }), footerAt),
		"count huge":        reCRC(mutate(func(b []byte) []byte { binary.BigEndian.PutUint32(b[footerAt+30:], 1<<31); return b }), footerAt),
		"extent overlaps":   reCRC(mutate(func(b []byte) []byte { binary.BigEndian.PutUint64(b[footerAt+34+2+1+4+16:], 1); return b }), footerAt),
		"sequence zero":     reCRC(mutate(func(b []byte) []byte { binary.BigEndian.PutUint64(b[footerAt+10:], 0); return b }), footerAt),
		"offsets backwards": reCRC(mutate(func(b []byte) []byte { binary.BigEndian.PutUint64(b[footerAt+34+2+1+4:], 99); return b }), footerAt),
	}
	for name, b := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := DecodeFooter(b, int64(len(b)))
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("DecodeFooter = %v, want ErrCorrupt", err)
			}
		})
	}
	// An extent whose bytes changed fails its CRC, naming the partition.
	back, _ := DecodeFooter(good, int64(n))
	e := back.Extents[0]
	d := bytes.Clone(good[e.Position : e.Position+int64(e.Size)])
	d[0] ^= 1
	if err := CheckExtent(e, d); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "a-0") {
		t.Fatalf("CheckExtent of damaged bytes = %v", err)
	}
}

// reCRC recomputes the footer CRC of an object whose footer starts at at,
// so that a test reaches the checks behind the CRC.
func reCRC(b []byte, at int) []byte {
	end := len(b) - trailerSize - 4
	binary.BigEndian.PutUint32(b[end:], crc32.Checksum(b[at:end], castagnoli))
	return b
}

func TestLayout(t *testing.T) {
	w := WriterID{0xab, 0xcd, 0, 0, 0, 0, 0, 1}
	for _, root := range []string{"", "tenant", "/a/b/"} {
		l := NewLayout(root)
		k := l.Key(w, 42)
		id, seq, err := l.Parse(k)
		if err != nil || id != w || seq != 42 {
			t.Fatalf("root %q: Parse(%q) = %v %d %v", root, k, id, seq, err)
		}
		if !strings.HasPrefix(k, l.WriterPrefix(w)) || !strings.HasPrefix(l.WriterPrefix(w), l.Prefix()) {
			t.Fatalf("root %q: key %q outside its prefixes", root, k)
		}
	}
	l := NewLayout("r")
	if got := l.Key(w, 42); got != "r/_wal/abcd000000000001/00000000000000000042" {
		t.Fatalf("key %q (the layout is frozen)", got)
	}
	for _, bad := range []string{"r/_wal/abcd000000000001/42", "r/_wal/xyz/00000000000000000042", "r/other/abcd000000000001/00000000000000000042", "r/_wal/abcd000000000001/00000000000000000000"} {
		if _, _, err := l.Parse(bad); err == nil {
			t.Fatalf("Parse(%q) took a key the layout does not make", bad)
		}
	}
}

// FuzzDecodeFooter: no panic, and a footer that decodes encodes back to
// the same bytes.
func FuzzDecodeFooter(f *testing.F) {
	fo, data := goldenFooter()
	f.Add(testObject(f, fo, data))
	fence, _ := EncodeFence(Footer{Writer: WriterID{1}, Sequence: 1, Extents: extentsOf([]TopicPartition{{"x", 0}})})
	f.Add(fence)
	fo.Marks = []Mark{{TopicPartition: TopicPartition{"a", 0}, Epoch: 3, End: 13}}
	f.Add(testObject(f, fo, data))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := DecodeFooter(b, int64(len(b)))
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v does not wrap ErrCorrupt", err)
			}
			return
		}
		flen, _ := FooterLen(b, int64(len(b)))
		dataEnd := len(b) - trailerSize - flen
		again := got.appendTo(bytes.Clone(b[:dataEnd]))
		if !bytes.Equal(again, b) {
			t.Fatalf("re-encoding changed the object:\n%x\n%x", b, again)
		}
	})
}

// The golden bytes of an object that carries marks (format version 2):
// version 1's layout with the version byte 2 and the marks after the
// extents. Frozen too.
const goldenMarksHex = "" +
	"414141414242" +
	"0200" + "0102030405060708" + "0000000000000007" + "0000018bcfe56800" + "00000000" + "00000002" +
	"0001" + "61" + "00000000" + "000000000000000a" + "000000000000000c" + "0000000000000000" + "00000004" + "03056cf3" +
	"0001" + "62" + "00000003" + "0000000000000000" + "0000000000000000" + "0000000000000004" + "00000002" + "8973ec73" +
	"00000002" + // marks
	"0001" + "61" + "00000000" + "00000003" + "000000000000000d" +
	"0001" + "63" + "00000007" + "00000000" + "0000000000000000" +
	"4b632670" + // footer CRC-32C
	"0000009e" + "544c57414c000001"

func TestGoldenObjectWithMarks(t *testing.T) {
	f, data := goldenFooter()
	f.Marks = []Mark{{TopicPartition: TopicPartition{"a", 0}, Epoch: 3, End: 13}, {TopicPartition: TopicPartition{"c", 7}}}
	got := testObject(t, f, data)
	want, err := hex.DecodeString(goldenMarksHex)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("object bytes changed (the format is frozen):\n got %x\nwant %x", got, want)
	}
	back, err := DecodeFooter(want, int64(len(want)))
	if err != nil {
		t.Fatal(err)
	}
	if len(back.Marks) != 2 || back.Marks[0] != f.Marks[0] || back.Marks[1] != f.Marks[1] {
		t.Fatalf("marks decoded as %+v", back.Marks)
	}
	if m, ok := back.FindMark(TopicPartition{"a", 0}); !ok || m.End != 13 || m.Epoch != 3 {
		t.Fatalf("FindMark a-0 = %+v, %v", m, ok)
	}
	if _, ok := back.FindMark(TopicPartition{"b", 3}); ok {
		t.Fatal("FindMark found a partition the object does not mark")
	}
	// An object without marks is still version 1, byte for byte.
	f.Marks = nil
	if got, _ := hex.DecodeString(goldenHex); !bytes.Equal(testObject(t, f, data), got) {
		t.Fatal("an object without marks is no longer version 1's bytes")
	}
}

// Damaged marks are ErrCorrupt.
func TestCorruptMarks(t *testing.T) {
	f, data := goldenFooter()
	f.Marks = []Mark{{TopicPartition: TopicPartition{"a", 0}, Epoch: 3, End: 13}}
	good := testObject(t, f, data)
	n := len(good)
	footerAt := n - trailerSize - int(binary.BigEndian.Uint32(good[n-trailerSize:]))
	marksAt := n - trailerSize - 4 - (4 + 2 + 1 + 4 + 4 + 8)
	mutate := func(fn func(b []byte) []byte) []byte { return reCRC(fn(bytes.Clone(good)), footerAt) }
	cases := map[string][]byte{
		"no marks in version 2": mutate(func(b []byte) []byte { binary.BigEndian.PutUint32(b[marksAt:], 0); return b }),
		"count past the footer": mutate(func(b []byte) []byte { binary.BigEndian.PutUint32(b[marksAt:], 2); return b }),
		"topic length past":     mutate(func(b []byte) []byte { binary.BigEndian.PutUint16(b[marksAt+4:], 200); return b }),
		"negative end":          mutate(func(b []byte) []byte { b[marksAt+4+2+1+4+4] = 0x80; return b }),
		"negative epoch":        mutate(func(b []byte) []byte { b[marksAt+4+2+1+4] = 0x80; return b }),
		"version 1 with marks":  mutate(func(b []byte) []byte { b[footerAt] = 1; return b }),
	}
	for name, b := range cases {
		t.Run(name, func(t *testing.T) {
			if _, err := DecodeFooter(b, int64(len(b))); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("DecodeFooter = %v, want ErrCorrupt", err)
			}
		})
	}
	// Marks out of order, twice the same partition, or on a fence: the
	// encoder's checks refuse them as the decoder's do.
	for name, m := range map[string][]Mark{
		"out of order": {{TopicPartition: TopicPartition{"b", 0}}, {TopicPartition: TopicPartition{"a", 0}}},
		"twice":        {{TopicPartition: TopicPartition{"a", 0}}, {TopicPartition: TopicPartition{"a", 0}, End: 1}},
		"no topic":     {{}},
	} {
		g := f
		g.Marks = m
		if err := g.validate(6); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("%s: validate = %v, want ErrCorrupt", name, err)
		}
	}
	fence := Footer{Writer: WriterID{1}, Sequence: 1, Fence: true, Marks: f.Marks}
	if err := fence.validate(0); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("a fence with marks: validate = %v, want ErrCorrupt", err)
	}
}
