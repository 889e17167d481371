package producerstate_test

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"hash/crc32"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/tierlog/tierlog/producerstate"
)

// unhex decodes hex written with spaces between fields.
func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.Join(strings.Fields(s), ""))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// goldenSnapshot is a two-producer snapshot worked by hand from the layout
// in the package doc. The CRC-32C of bytes 6..end was computed with a
// bitwise CRC-32C written separately from this package (it gives
// 0xe3069283 for "123456789").
const goldenSnapshot = `
0001 ac1aa621 00000002
0000000000000001 0000 00000004 0000000000000009 00000004 0000018bcfe56800 ffffffff ffffffffffffffff
00000000000003e8 0003 7fffffff 000000000000002a 00000002 0000018bcfe5687b 00000005 0000000000000028
`

var goldenSnapshotEntries = []producerstate.SnapshotEntry{
	{ProducerID: 1, Epoch: 0, LastSequence: 4, LastOffset: 9, OffsetDelta: 4, Timestamp: 1700000000000,
		CoordinatorEpoch: -1, CurrentTxnFirstOffset: -1},
	{ProducerID: 1000, Epoch: 3, LastSequence: math.MaxInt32, LastOffset: 42, OffsetDelta: 2, Timestamp: 1700000000123,
		CoordinatorEpoch: 5, CurrentTxnFirstOffset: 40},
}

func TestSnapshotGolden(t *testing.T) {
	want := unhex(t, goldenSnapshot)
	if len(want) != producerstate.SnapshotHeaderSize+2*producerstate.SnapshotEntrySize {
		t.Fatalf("golden is %d bytes", len(want))
	}
	got := producerstate.EncodeSnapshot(nil, goldenSnapshotEntries)
	if !bytes.Equal(got, want) {
		t.Fatalf("encode:\n got %x\nwant %x", got, want)
	}
	dec, err := producerstate.DecodeSnapshot(want)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(dec, goldenSnapshotEntries) {
		t.Fatalf("decode: %+v", dec)
	}
	// Appending to a prefix keeps the prefix and checksums only the snapshot.
	pre := producerstate.EncodeSnapshot([]byte("xyz"), goldenSnapshotEntries)
	if !bytes.Equal(pre[3:], want) || string(pre[:3]) != "xyz" {
		t.Fatalf("encode after a prefix: %x", pre)
	}
}

func TestSnapshotEmpty(t *testing.T) {
	want := unhex(t, "0001 48674bc7 00000000")
	if got := producerstate.EncodeSnapshot(nil, nil); !bytes.Equal(got, want) {
		t.Fatalf("got %x", got)
	}
	dec, err := producerstate.DecodeSnapshot(want)
	if err != nil || len(dec) != 0 {
		t.Fatalf("%v %v", dec, err)
	}
}

func TestSnapshotCorrupt(t *testing.T) {
	good := unhex(t, goldenSnapshot)
	withCRC := func(b []byte) []byte {
		b = bytes.Clone(b)
		binary.BigEndian.PutUint32(b[2:], crc32c(b[6:]))
		return b
	}
	cases := []struct {
		name   string
		data   []byte
		pos    int
		detail string
	}{
		{"empty", nil, 0, "shorter than the 10-byte header"},
		{"short header", good[:9], 0, "shorter than the 10-byte header"},
		{"version 0", append([]byte{0, 0}, good[2:]...), 0, "unknown version 0"},
		{"version 2", append([]byte{0, 2}, good[2:]...), 0, "unknown version 2"},
		{"crc", func() []byte { b := bytes.Clone(good); b[50] ^= 1; return b }(), 2, "crc mismatch"},
		{"torn entry", withCRC(good[:len(good)-1]), 6, "entry count 2 needs 102 bytes"},
		{"trailing", withCRC(append(bytes.Clone(good), 0)), 102, "1 trailing bytes"},
		{"negative count", withCRC(append(unhex(t, "0001 00000000 80000000"), good[10:]...)), 6, "negative entry count"},
		{"huge count", withCRC(unhex(t, "0001 00000000 7fffffff")), 6, "entry count 2147483647"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := producerstate.DecodeSnapshot(c.data)
			var fe *producerstate.FormatError
			if !errors.As(err, &fe) || !errors.Is(err, producerstate.ErrCorruptSnapshot) {
				t.Fatalf("err = %v", err)
			}
			if fe.Pos != c.pos || !strings.Contains(fe.Detail, c.detail) {
				t.Fatalf("pos %d detail %q, want %d %q", fe.Pos, fe.Detail, c.pos, c.detail)
			}
			s := newState(t, producerstate.DefaultConfig())
			if err := s.Load(c.data, 7, 0); !errors.Is(err, producerstate.ErrCorruptSnapshot) {
				t.Fatalf("Load: %v", err)
			}
		})
	}
}

func TestSnapshotFileNames(t *testing.T) {
	if got := producerstate.SnapshotFileName(13); got != "00000000000000000013.snapshot" {
		t.Fatal(got)
	}
	if got := producerstate.TxnIndexFileName(1234567); got != "00000000000001234567.txnindex" {
		t.Fatal(got)
	}
	for name, want := range map[string]int64{
		"00000000000000000013.snapshot": 13,
		"13.snapshot":                   13,
		"09223372036854775807.snapshot": math.MaxInt64,
	} {
		if got, ok := producerstate.ParseSnapshotFileName(name); !ok || got != want {
			t.Errorf("%s: %d %v", name, got, ok)
		}
	}
	for _, name := range []string{".snapshot", "x.snapshot", "-1.snapshot", "+1.snapshot", "00000000000000000013.snapshot.deleted",
		"00000000000000000013.txnindex", "99999999999999999999.snapshot"} {
		if _, ok := producerstate.ParseSnapshotFileName(name); ok {
			t.Errorf("%s parsed", name)
		}
	}
}

// goldenTxnEntry is one .txnindex entry worked by hand: producer 1000, a
// transaction from offset 40 aborted by a marker at 45, LSO 46.
const goldenTxnEntry = "0000 00000000000003e8 0000000000000028 000000000000002d 000000000000002e"

func TestTxnIndexGolden(t *testing.T) {
	want := unhex(t, goldenTxnEntry)
	a := producerstate.AbortedTxn{ProducerID: 1000, FirstOffset: 40, LastOffset: 45, LastStableOffset: 46}
	if got := a.AppendTo(nil); !bytes.Equal(got, want) {
		t.Fatalf("encode: %x", got)
	}
	got, err := producerstate.DecodeAbortedTxn(want)
	if err != nil || got != a {
		t.Fatalf("decode: %+v %v", got, err)
	}
	all, err := producerstate.DecodeTxnIndex(append(bytes.Clone(want), want...))
	if err != nil || len(all) != 2 || all[1] != a {
		t.Fatalf("index: %+v %v", all, err)
	}
}

func txnIndexBytes(entries ...producerstate.AbortedTxn) []byte {
	var b []byte
	for _, e := range entries {
		b = e.AppendTo(b)
	}
	return b
}

func TestTxnIndexCorrupt(t *testing.T) {
	good := unhex(t, goldenTxnEntry)
	bad := bytes.Clone(good)
	bad[1] = 1 // version 1
	if _, err := producerstate.DecodeAbortedTxn(bad); !errors.Is(err, producerstate.ErrCorruptTxnIndex) {
		t.Fatalf("version: %v", err)
	}
	if _, err := producerstate.DecodeAbortedTxn(good[:33]); !errors.Is(err, producerstate.ErrCorruptTxnIndex) {
		t.Fatalf("short: %v", err)
	}
	if _, err := producerstate.DecodeTxnIndex(append(bytes.Clone(good), 0)); !errors.Is(err, producerstate.ErrCorruptTxnIndex) {
		t.Fatalf("partial: %v", err)
	}
	// The error names where: the second entry's version.
	_, err := producerstate.DecodeTxnIndex(append(bytes.Clone(good), bad...))
	var fe *producerstate.FormatError
	if !errors.As(err, &fe) || fe.Pos != 34 || !strings.Contains(fe.Detail, "version 1") {
		t.Fatalf("%v", err)
	}
	if _, _, err := producerstate.CollectAbortedTxns(nil, bad, 0, 100); !errors.Is(err, producerstate.ErrCorruptTxnIndex) {
		t.Fatalf("collect: %v", err)
	}
}

func TestTxnIndexSanityCheck(t *testing.T) {
	idx := txnIndexBytes(
		producerstate.AbortedTxn{ProducerID: 1, FirstOffset: 90, LastOffset: 105, LastStableOffset: 106},
		producerstate.AbortedTxn{ProducerID: 2, FirstOffset: 100, LastOffset: 110, LastStableOffset: 111},
	)
	if err := producerstate.SanityCheckTxnIndex(idx, 100); err != nil {
		t.Fatal(err)
	}
	if err := producerstate.SanityCheckTxnIndex(nil, 100); err != nil {
		t.Fatal(err)
	}
	// A transaction may start before the segment, but its marker may not.
	err := producerstate.SanityCheckTxnIndex(idx, 106)
	var fe *producerstate.FormatError
	if !errors.As(err, &fe) || fe.Pos != 0 || !strings.Contains(fe.Detail, "last offset 105") {
		t.Fatalf("%v", err)
	}
	if err := producerstate.SanityCheckTxnIndex(idx[:40], 100); !errors.Is(err, producerstate.ErrCorruptTxnIndex) {
		t.Fatalf("partial: %v", err)
	}
	if _, err := producerstate.NewTxnIndex(106, idx); !errors.Is(err, producerstate.ErrCorruptTxnIndex) {
		t.Fatalf("NewTxnIndex: %v", err)
	}
}

func TestCollectAbortedTxns(t *testing.T) {
	e := []producerstate.AbortedTxn{
		{ProducerID: 1, FirstOffset: 0, LastOffset: 10, LastStableOffset: 5},
		{ProducerID: 2, FirstOffset: 5, LastOffset: 20, LastStableOffset: 11},
		{ProducerID: 3, FirstOffset: 25, LastOffset: 30, LastStableOffset: 31},
		{ProducerID: 4, FirstOffset: 32, LastOffset: 40, LastStableOffset: 41},
	}
	idx := txnIndexBytes(e...)
	cases := []struct {
		fetch, upper int64
		want         []producerstate.AbortedTxn
		complete     bool
	}{
		// Overlap: last >= fetch and first < upper.
		{0, 5, e[:1], true},     // e[0]'s LSO 5 >= 5 completes at once
		{11, 25, e[1:2], true},  // e[2] (first 25) is outside; its LSO 31 >= 25 completes
		{21, 25, nil, true},     // nothing overlaps; e[2] completes
		{0, 100, e, false},      // every entry, never complete
		{31, 100, e[3:], false}, // e[0..2] end before 31
		{10, 11, e[:2], true},   // e[1]'s LSO 11 >= 11 stops the scan there
		{41, 50, nil, false},    // past everything
		{30, 32, e[2:3], true},  // e[3] first 32 is not < 32; its LSO completes
		{0, 0, nil, true},       // empty range: e[0]'s LSO 5 >= 0
		{100, 200, nil, false},  // after the index
		{-1, math.MaxInt64, e, false},
	}
	for _, c := range cases {
		got, complete, err := producerstate.CollectAbortedTxns(nil, idx, c.fetch, c.upper)
		if err != nil {
			t.Fatal(err)
		}
		if !sameTxns(got, c.want) || complete != c.complete {
			t.Errorf("[%d, %d): got %v complete %v, want %v %v", c.fetch, c.upper, got, complete, c.want, c.complete)
		}
	}
	// A partial trailing entry is ignored, as Kafka's reader does.
	got, _, err := producerstate.CollectAbortedTxns(nil, append(bytes.Clone(idx), 1, 2, 3), 0, 100)
	if err != nil || len(got) != 4 {
		t.Fatalf("%v %v", got, err)
	}
}

func sameTxns(a, b []producerstate.AbortedTxn) bool {
	return len(a) == len(b) && (len(a) == 0 || reflect.DeepEqual(a, b))
}

func crc32c(b []byte) uint32 { return crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli)) }

func TestTruncateTxnIndex(t *testing.T) {
	e := []producerstate.AbortedTxn{
		{ProducerID: 1, FirstOffset: 0, LastOffset: 10, LastStableOffset: 11},
		{ProducerID: 2, FirstOffset: 5, LastOffset: 20, LastStableOffset: 21},
		{ProducerID: 3, FirstOffset: 25, LastOffset: 30, LastStableOffset: 31},
	}
	idx := txnIndexBytes(e...)
	for _, c := range []struct {
		offset int64
		keep   int
	}{{0, 0}, {10, 0}, {11, 34}, {20, 34}, {21, 68}, {30, 68}, {31, 102}, {1000, 102}} {
		n, err := producerstate.TruncateTxnIndex(idx, c.offset)
		if err != nil || n != c.keep {
			t.Errorf("truncate to %d: %d %v, want %d", c.offset, n, err, c.keep)
		}
	}
}

func TestTxnIndexType(t *testing.T) {
	x, err := producerstate.NewTxnIndex(100, nil)
	if err != nil || x.Len() != 0 || x.BaseOffset() != 100 {
		t.Fatal(x, err)
	}
	a := producerstate.AbortedTxn{ProducerID: 1, FirstOffset: 90, LastOffset: 105, LastStableOffset: 106}
	b, err := x.Append(a)
	if err != nil || !bytes.Equal(b, a.AppendTo(nil)) {
		t.Fatalf("%x %v", b, err)
	}
	if _, err := x.Append(producerstate.AbortedTxn{ProducerID: 2, FirstOffset: 100, LastOffset: 105}); !errors.Is(err, producerstate.ErrTxnIndexOrder) {
		t.Fatalf("order: %v", err)
	}
	c := producerstate.AbortedTxn{ProducerID: 2, FirstOffset: 100, LastOffset: 110, LastStableOffset: 111}
	if _, err := x.Append(c); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(x.Entries(), []producerstate.AbortedTxn{a, c}) || !bytes.Equal(x.Bytes(), txnIndexBytes(a, c)) {
		t.Fatal(x.Entries())
	}
	got, complete := x.Collect(nil, 106, 108)
	if !reflect.DeepEqual(got, []producerstate.AbortedTxn{c}) || !complete {
		t.Fatal(got, complete)
	}
	// Reopening from the bytes keeps the order rule.
	y, err := producerstate.NewTxnIndex(100, x.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := y.Append(a); !errors.Is(err, producerstate.ErrTxnIndexOrder) {
		t.Fatalf("reopened order: %v", err)
	}
	if n := x.TruncateTo(106); n != 34 || x.Len() != 1 {
		t.Fatal(n, x.Len())
	}
	x.Reset()
	if x.Len() != 0 || len(x.Bytes()) != 0 {
		t.Fatal("reset")
	}
}
