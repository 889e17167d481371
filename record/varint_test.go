package record

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"
)

// checkVarints holds every varint reader of varint.go to encoding/binary
// on p, and at each position of p for the positional ones.
func checkVarints(t *testing.T, p []byte) {
	t.Helper()
	want, wn := binary.Varint(p)

	// varint64 is binary.Varint, errors included: 0 for a varint that
	// does not end, negative for one past 64 bits.
	if v, n := varint64(p); v != want || n != wn {
		t.Fatalf("varint64(% x) = %d, %d; binary.Varint %d, %d", p, v, n, want, wn)
	}

	// varint32 is binary.Varint when that reads at most 5 bytes and a
	// value within int32, else it fails: 0 when p ends inside the first
	// 5 bytes without the varint ending, negative when it does not end
	// in 5 bytes or its value is past 32 bits.
	v32, n32 := varint32(p)
	fits := wn >= 1 && wn <= 5 && want >= math.MinInt32 && want <= math.MaxInt32
	switch {
	case fits && (n32 != wn || int64(v32) != want):
		t.Fatalf("varint32(% x) = %d, %d; binary.Varint %d, %d", p, v32, n32, want, wn)
	case !fits && n32 > 0:
		t.Fatalf("varint32(% x) = %d, %d; binary.Varint %d, %d is not an int32 of at most 5 bytes", p, v32, n32, want, wn)
	case !fits && (n32 == 0) != (wn == 0 && len(p) < 5):
		t.Fatalf("varint32(% x) n = %d; binary.Varint n %d on %d bytes", p, n32, wn, len(p))
	}

	// The positional readers agree with the slice ones at every position,
	// and out of range they fail.
	for pos := -1; pos <= len(p)+1; pos++ {
		var rest []byte
		if pos >= 0 && pos <= len(p) {
			rest = p[pos:]
		}
		w32, m32 := varint32(rest)
		w64, m64 := binary.Varint(rest)
		inRange := pos >= 0 && pos < len(p)

		v, next := readVarint32Slow(p, pos)
		if ok := inRange && m32 > 0; ok != (next >= 0) || ok && (v != w32 || next != pos+m32) {
			t.Fatalf("readVarint32Slow(% x, %d) = %d, %d; varint32 %d, %d", p, pos, v, next, w32, m32)
		}
		v64, next := readVarint64Slow(p, pos)
		if ok := inRange && m64 > 0; ok != (next >= 0) || ok && (v64 != w64 || next != pos+m64) {
			t.Fatalf("readVarint64Slow(% x, %d) = %d, %d; binary.Varint %d, %d", p, pos, v64, next, w64, m64)
		}
		if pos < 0 {
			continue // fastVarint's callers never pass one
		}
		// fastVarint reads the one- and two-byte varints that are not
		// among p's last two bytes, and gives every other up.
		v, next = fastVarint(p, pos)
		fast := inRange && pos+1 < len(p) && (m32 == 1 || m32 == 2)
		if fast != (next >= 0) || fast && (v != w32 || next != pos+m32) {
			t.Fatalf("fastVarint(% x, %d) = %d, %d; varint32 %d, %d", p, pos, v, next, w32, m32)
		}
	}
}

// checkEncoding holds the writers to encoding/binary for v, and the
// readers to what they wrote.
func checkEncoding(t *testing.T, v int64) {
	t.Helper()
	enc := binary.AppendVarint(nil, v)
	if got := appendVarint([]byte{0xaa}, v); string(got[1:]) != string(enc) || got[0] != 0xaa {
		t.Fatalf("appendVarint(%d) = % x, binary.AppendVarint % x", v, got[1:], enc)
	}
	if n := varintSize(v); n != len(enc) {
		t.Fatalf("varintSize(%d) = %d, encoding of %d bytes", v, n, len(enc))
	}
	checkVarints(t, enc)
	// What follows the varint is not read.
	checkVarints(t, append(enc, 0x80, 0x01))
	// Every truncation of it is refused, as binary.Varint refuses it.
	for i := range enc {
		checkVarints(t, enc[:i])
	}
}

// varintEdges are values at the ends of each encoded length and of the
// int32 and int64 ranges.
func varintEdges() []int64 {
	vs := []int64{0, 1, -1, math.MaxInt32, math.MinInt32, math.MaxInt32 + 1, math.MinInt32 - 1,
		math.MaxInt64, math.MinInt64, math.MaxInt64 - 1, math.MinInt64 + 1}
	for s := 0; s < 64; s++ {
		b := int64(1) << s
		vs = append(vs, b, b-1, b+1, -b, -b-1, -b+1)
	}
	return vs
}

// TestVarintsAgreeWithBinary runs every encoding of the edge values,
// every input of up to 2 bytes, the inputs of up to 5 bytes made of the
// bytes where varints change meaning, over-long and overflowing ones up
// to 12 bytes, and random bytes.
func TestVarintsAgreeWithBinary(t *testing.T) {
	for _, v := range varintEdges() {
		checkEncoding(t, v)
	}
	checkVarints(t, nil)
	for i := range 1 << 16 {
		checkVarints(t, []byte{byte(i)})
		checkVarints(t, []byte{byte(i), byte(i >> 8)})
	}
	// Bytes where a varint's meaning changes: a last byte (< 0x80) or
	// not, the fifth byte's limit 0x0f, the tenth byte's 0x01.
	edge := []byte{0x00, 0x01, 0x02, 0x0f, 0x10, 0x7f, 0x80, 0x81, 0x8f, 0x90, 0xff}
	p := make([]byte, 0, 5)
	var walk func()
	walk = func() {
		checkVarints(t, p)
		if len(p) == cap(p) {
			return
		}
		for _, c := range edge {
			p = append(p, c)
			walk()
			p = p[:len(p)-1]
		}
	}
	walk()
	// Over-long encodings (zero padding: Go reads them, Kafka's readVarint
	// not past 5 bytes) and overflowing ones, ended by each edge byte.
	for k := 0; k <= 11; k++ {
		for _, cont := range []byte{0x80, 0xff, 0x81} {
			for _, last := range edge {
				p := make([]byte, 0, k+1)
				for range k {
					p = append(p, cont)
				}
				checkVarints(t, append(p, last))
				checkVarints(t, p)
			}
		}
	}
	rng := rand.New(rand.NewPCG(41, 42))
	for range 100000 {
		p := make([]byte, rng.IntN(13))
		for i := range p {
			p[i] = byte(rng.Uint32())
			if rng.IntN(4) != 0 {
				p[i] |= 0x80 // longer varints
			}
		}
		checkVarints(t, p)
		checkEncoding(t, int64(rng.Uint64())>>rng.IntN(64))
	}
}

// FuzzVarints: the varint readers agree with encoding/binary on any
// bytes, and the writers on any value.
func FuzzVarints(f *testing.F) {
	for _, v := range varintEdges() {
		f.Add(binary.AppendVarint(nil, v), v)
	}
	f.Add([]byte{0x80, 0x80, 0x80, 0x80, 0x10}, int64(0))
	f.Add([]byte{0x80, 0x80, 0x80, 0x80, 0x80, 0x00}, int64(0))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02}, int64(0))
	f.Fuzz(func(t *testing.T, p []byte, v int64) {
		checkVarints(t, p)
		checkEncoding(t, v)
	})
}
