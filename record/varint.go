package record

import "encoding/binary"

// The varints of the record format (see the record layout in doc.go):
// zigzag, seven bits a byte, least significant first, as Kafka's
// ByteUtils writes them. Every varint this package reads or writes goes
// through the functions below; varint_test.go checks each of them
// against encoding/binary (TestVarintsAgreeWithBinary, FuzzVarints).
//
// Two readings:
//
//   - varint32 (and readVarint32Slow, and fastVarint for the one- and
//     two-byte ones): an int32 field as Kafka's readVarint reads it, at
//     most 5 bytes and a value that fits in 32 bits. The leader's
//     validator reads every int32 field so.
//   - varint64 (and readVarint64Slow): a varlong, exactly binary.Varint
//     (at most 10 bytes, as Kafka's readVarlong). The validator reads the
//     timestamp delta so; the Iterator reads every field so and checks
//     the int32 ones' range itself, so it accepts the over-long
//     (zero-padded) int32 varints of 6 to 10 bytes that Go reads and the
//     validator refuses.
//
// Writers use appendVarint and varintSize, which always give the
// shortest encoding, as Kafka's producer writes.

// fastVarint decodes the one- or two-byte zigzag varint at p[pos:], pos
// >= 0, and returns it with the position after it; the position is
// negative when the varint is longer or is among p's last two bytes (the
// caller then takes its slow path). Small enough to inline.
func fastVarint(p []byte, pos int) (int32, int) {
	if uint(pos+1) >= uint(len(p)) {
		return 0, -1
	}
	u := uint32(p[pos])
	if u >= 0x80 {
		if p[pos+1] >= 0x80 {
			return 0, -1
		}
		u = u&0x7f | uint32(p[pos+1])<<7
		pos++
	}
	return int32(u>>1) ^ -int32(u&1), pos + 1
}

// readVarint32Slow reads the int32 varint at p[pos:] (see varint32) and
// returns it with the position after it, or a negative position.
func readVarint32Slow(p []byte, pos int) (int32, int) {
	if pos < 0 || pos >= len(p) {
		return 0, -1
	}
	v, n := varint32(p[pos:])
	if n <= 0 {
		return 0, -1
	}
	return v, pos + n
}

// readVarint64Slow reads the varlong at p[pos:] (see varint64) and returns
// it with the position after it, or a negative position. It calls
// binary.Varint at once: its caller has tried fastVarint.
func readVarint64Slow(p []byte, pos int) (int64, int) {
	if pos < 0 || pos >= len(p) {
		return 0, -1
	}
	v, n := binary.Varint(p[pos:])
	if n <= 0 {
		return 0, -1
	}
	return v, pos + n
}

// varint32 decodes a zigzag varint Kafka reads as an int32
// (ByteUtils.readVarint): at most 5 bytes, and here a value that fits in
// 32 bits (Kafka drops the extra bits of a fifth byte above 0x0f; such a
// varint is refused). n <= 0 when p does not hold one.
func varint32(p []byte) (int32, int) {
	if len(p) > 1 && p[0] >= 0x80 && p[1] < 0x80 {
		u := uint32(p[0]&0x7f) | uint32(p[1])<<7
		return int32(u>>1) ^ -int32(u&1), 2
	}
	var u uint32
	for i := 0; i < 5 && i < len(p); i++ {
		c := p[i]
		if i == 4 {
			if c > 0x0f {
				return 0, -1
			}
			u |= uint32(c) << 28
			return int32(u>>1) ^ -int32(u&1), 5
		}
		u |= uint32(c&0x7f) << (7 * i)
		if c < 0x80 {
			return int32(u>>1) ^ -int32(u&1), i + 1
		}
	}
	return 0, 0
}

// varint64 decodes a zigzag varlong (at most 10 bytes, as Kafka's
// readVarlong reads): binary.Varint, with the one- and two-byte varints
// decoded inline.
func varint64(p []byte) (int64, int) {
	if len(p) > 0 && p[0] < 0x80 {
		u := uint64(p[0])
		return int64(u>>1) ^ -int64(u&1), 1
	}
	if len(p) > 1 && p[1] < 0x80 {
		u := uint64(p[0]&0x7f) | uint64(p[1])<<7
		return int64(u>>1) ^ -int64(u&1), 2
	}
	return binary.Varint(p)
}

// appendVarint appends the shortest zigzag encoding of v.
func appendVarint(p []byte, v int64) []byte { return binary.AppendVarint(p, v) }

// varintSize is the length of appendVarint's encoding of v.
func varintSize(v int64) int {
	u := uint64(v<<1) ^ uint64(v>>63)
	n := 1
	for u >= 0x80 {
		u >>= 7
		n++
	}
	return n
}
