package record

import "encoding/binary"

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

// readVarint64Slow reads the varlong at p[pos:] and returns it with the
// position after it, or a negative position.
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
// readVarlong reads).
func varint64(p []byte) (int64, int) {
	if len(p) > 0 && p[0] < 0x80 {
		u := uint64(p[0])
		return int64(u>>1) ^ -int64(u&1), 1
	}
	return binary.Varint(p)
}
