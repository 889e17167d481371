package manifest

import (
	"errors"
	"fmt"
	"math"
	"os"
	"strings"
	"testing"
)

// goldenSegment is the fixed segment of the golden keys.
var goldenSegment = Segment{BaseOffset: 100, LastOffset: 199, ID: [8]byte{0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef}}

// TestLayoutGolden formats every kind's key of a fixed partition and
// segment and parses each back.
func TestLayoutGolden(t *testing.T) {
	l := PartitionLayout("tl", "orders", 3)
	golden := map[Kind]string{
		KindManifest:       "tl/orders-3/manifest",
		KindLog:            "tl/orders-3/00000000000000000100-00000000000000000199-0123456789abcdef.log",
		KindIndex:          "tl/orders-3/00000000000000000100-00000000000000000199-0123456789abcdef.index",
		KindTimeIndex:      "tl/orders-3/00000000000000000100-00000000000000000199-0123456789abcdef.timeindex",
		KindTxnIndex:       "tl/orders-3/00000000000000000100-00000000000000000199-0123456789abcdef.txnindex",
		KindSnapshot:       "tl/orders-3/00000000000000000100-00000000000000000199-0123456789abcdef.snapshot",
		KindEpochs:         "tl/orders-3/00000000000000000100-00000000000000000199-0123456789abcdef.leader-epoch-checkpoint",
		KindIntent:         "tl/orders-3/0123456789abcdef.intent",
		KindManifestBackup: "tl/orders-3/manifest.00000000000000000007",
		KindPart:           "tl/orders-3/00000000000000000100-00000000000000000199-0123456789abcdef.part",
	}
	if len(golden) != len(Kinds()) {
		t.Fatalf("%d golden keys for %d kinds", len(golden), len(Kinds()))
	}
	for _, k := range Kinds() {
		var o Object
		switch {
		case k == KindManifest:
			o = Object{Kind: k}
		case k == KindIntent:
			o = Object{Kind: k, ID: goldenSegment.ID}
		case k == KindManifestBackup:
			o = Object{Kind: k, Generation: 7}
			if got := l.Backup(7); got != golden[k] {
				t.Errorf("Backup(7) = %q, want %q", got, golden[k])
			}
		case k == KindPart:
			o = Object{Kind: k, BaseOffset: 100, LastOffset: 199, ID: goldenSegment.ID}
			if got := l.Part(Part{ObjectBase: 100, ObjectLast: 199, ID: goldenSegment.ID}); got != golden[k] {
				t.Errorf("Part = %q, want %q", got, golden[k])
			}
		default:
			o = SegmentObject(goldenSegment, k)
			if got := l.Segment(goldenSegment, k.Suffix()); got != golden[k] {
				t.Errorf("Segment(%s) = %q, want %q", k, got, golden[k])
			}
		}
		if got := l.Key(o); got != golden[k] {
			t.Errorf("%s: Key = %q, want %q", k, got, golden[k])
		}
		back, err := l.Parse(golden[k])
		if err != nil || back != o {
			t.Errorf("%s: Parse(%q) = %+v, %v; want %+v", k, golden[k], back, err, o)
		}
		key, err := ParseKey(golden[k])
		want := Key{Root: "tl", Topic: "orders", Partition: 3, Object: o}
		if err != nil || key != want {
			t.Errorf("%s: ParseKey(%q) = %+v, %v; want %+v", k, golden[k], key, err, want)
		}
		if key.String() != golden[k] {
			t.Errorf("%s: ParseKey(%q).String() = %q", k, golden[k], key.String())
		}
	}
	if got := l.Manifest(); got != golden[KindManifest] {
		t.Errorf("Manifest() = %q", got)
	}
	if got := l.Intent(goldenSegment.ID); got != golden[KindIntent] {
		t.Errorf("Intent() = %q", got)
	}
	// Without a root, and a layout made from the prefix alone.
	if k, err := ParseKey("orders-3/manifest"); err != nil || k.Root != "" || k.String() != "orders-3/manifest" {
		t.Errorf("ParseKey without a root = %+v, %v", k, err)
	}
	if NewLayout("tl/orders-3/") != l {
		t.Errorf("NewLayout(%q) = %+v, want %+v", "tl/orders-3/", NewLayout("tl/orders-3/"), l)
	}
	// Every segment suffix is a kind's, and every segment kind's suffix is
	// in AllSuffixes.
	for _, suf := range AllSuffixes {
		if k, ok := KindOfSuffix(suf); !ok || k.Suffix() != suf || !k.Segment() {
			t.Errorf("suffix %q: kind %v, %v", suf, k, ok)
		}
	}
	n := 0
	for _, k := range Kinds() {
		if k.Segment() {
			n++
		}
	}
	if n != len(AllSuffixes) {
		t.Errorf("%d segment kinds, %d suffixes", n, len(AllSuffixes))
	}
}

// TestParseKeyErrors: a malformed key is a *KeyError naming it.
func TestParseKeyErrors(t *testing.T) {
	const seg = "00000000000000000100-00000000000000000199-0123456789abcdef"
	for _, key := range []string{
		"",
		"manifest",               // no partition
		"/orders-3/manifest",     // empty root
		"tl/orders/manifest",     // no partition number
		"tl/orders-03/manifest",  // not canonical
		"tl/orders-x/manifest",   // not a number
		"tl/-3/manifest",         // no topic
		"tl/ord ers-3/manifest",  // not a topic
		"tl/orders-3/manifests",  // unknown name
		"tl/orders-3/manifest.7", // a backup's generation not 20 digits
		"tl/orders-3/manifest.0000000000000000000x", // nor decimal
		"tl/orders-3/manifest.+0000000000000000007", // nor unsigned digits
		"tl/orders-3/" + seg + ".bin",               // unknown suffix
		"tl/orders-3/" + seg[1:] + ".log",           // short base
		"tl/orders-3/00000000000000000100_00000000000000000199-0123456789abcdef.log",
		"tl/orders-3/0000000000000000010x-00000000000000000199-0123456789abcdef.log",
		"tl/orders-3/00000000000000000100-00000000000000000199-0123456789ABCDEF.log", // upper-case hex
		"tl/orders-3/00000000000000000200-00000000000000000199-0123456789abcdef.log", // last < base
		"tl/orders-3/99999999999999999999-99999999999999999999-0123456789abcdef.log", // past int64
		"tl/orders-3/0123456789abcde.intent",
		"tl/orders-3/0123456789abcdeg.intent",
		"tl/orders-3/.intent",
	} {
		_, err := ParseKey(key)
		var ke *KeyError
		if !errors.As(err, &ke) || !errors.Is(err, ErrBadKey) || ke.Key != key || !strings.Contains(err.Error(), key) {
			t.Errorf("ParseKey(%q) = %v, want a *KeyError naming it", key, err)
		}
	}
	l := PartitionLayout("tl", "orders", 3)
	if _, err := l.Parse("tl/orders-4/manifest"); !errors.Is(err, ErrBadKey) {
		t.Errorf("another partition's key parsed under %q: %v", l.Prefix(), err)
	}
}

// FuzzParseKey: ParseKey never panics, and whatever parses formats back
// to the same key.
func FuzzParseKey(f *testing.F) {
	l := PartitionLayout("tl", "orders", 3)
	f.Add(l.Manifest())
	f.Add(l.Intent(goldenSegment.ID))
	for _, suf := range AllSuffixes {
		f.Add(l.Segment(goldenSegment, suf))
	}
	f.Add("a/b/c/orders.v2-0/manifest")
	f.Fuzz(func(t *testing.T, key string) {
		k, err := ParseKey(key)
		if err != nil {
			if !errors.Is(err, ErrBadKey) {
				t.Fatalf("ParseKey(%q): %v is not ErrBadKey", key, err)
			}
			return
		}
		if got := k.String(); got != key {
			t.Fatalf("ParseKey(%q).String() = %q", key, got)
		}
		if o, err := NewLayout(strings.TrimSuffix(key, "/"+k.Name())).Parse(key); err != nil || o != k.Object {
			t.Fatalf("Layout.Parse(%q) = %+v, %v; ParseKey gave %+v", key, o, err, k.Object)
		}
	})
}

// TestDocsBucketTables keeps the bucket layout tables of docs/formats.md
// and docs/operators.md honest: every kind the layout has is a row, with
// a name ending in the kind's suffix, and every row is a kind.
func TestDocsBucketTables(t *testing.T) {
	for _, doc := range []string{"../docs/formats.md", "../docs/operators.md"} {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		_, section, ok := strings.Cut(string(b), "\n## The bucket\n")
		if !ok {
			t.Fatalf("%s has no section \"The bucket\"", doc)
		}
		if i := strings.Index(section, "\n## "); i >= 0 {
			section = section[:i]
		}
		rows := map[string]string{} // kind -> name
		for _, line := range strings.Split(section, "\n") {
			cols := strings.Split(line, "|")
			if !strings.HasPrefix(line, "| `") || len(cols) < 4 {
				continue
			}
			name, kind := strings.Trim(strings.TrimSpace(cols[1]), "`"), strings.TrimSpace(cols[2])
			if _, dup := rows[kind]; dup {
				t.Errorf("%s: kind %s has two rows", doc, kind)
			}
			rows[kind] = name
		}
		for _, k := range Kinds() {
			name, ok := rows[k.String()]
			switch {
			case !ok:
				t.Errorf("%s's bucket table has no row for kind %s", doc, k)
			case !strings.HasSuffix(name, k.Suffix()):
				t.Errorf("%s's bucket table names kind %s %q, which does not end in %q", doc, k, name, k.Suffix())
			}
			delete(rows, k.String())
		}
		for kind, name := range rows {
			t.Errorf("%s's bucket table has %q (kind %s), which the layout does not", doc, name, kind)
		}
	}
}

// TestSegmentNameFormat: the segment name builder writes what
// fmt.Sprintf("%020d-%020d-%x%s") wrote, for every kind of offset, and a
// layout's Segment key is its prefix, a slash and that name.
func TestSegmentNameFormat(t *testing.T) {
	id := [8]byte{0xde, 0xad, 0xbe, 0xef, 0, 1, 2, 0xff}
	for _, off := range []int64{0, 1, 9, 10, 4991, 1 << 31, 99999999999999999, math.MaxInt64, -1, math.MinInt64} {
		for _, suffix := range []string{".log", ".index", ".timeindex", ".snapshot", ".leader-epoch-checkpoint", ".txnindex", ""} {
			want := fmt.Sprintf("%020d-%020d-%x%s", off, off/2, id, suffix)
			if got := segmentName(off, off/2, id, suffix); got != want {
				t.Fatalf("segmentName(%d, %d, %x, %q) = %q, want %q", off, off/2, id, suffix, got, want)
			}
			s := Segment{BaseOffset: off, LastOffset: off / 2, ID: id}
			for _, prefix := range []string{"", "tl/orders-0", strings.Repeat("p/", 100) + "t-0"} {
				l := NewLayout(prefix)
				if got, want := l.Segment(s, suffix), l.Join(want); got != want {
					t.Fatalf("Layout(%q).Segment = %q, want %q", prefix, got, want)
				}
			}
		}
	}
}
