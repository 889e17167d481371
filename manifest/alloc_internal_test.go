package manifest

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
	"testing"
)

// craftedHead returns a CRC-valid version 3 head (about 30 bytes a part)
// naming n tier 3 parts that each claim 65,536 segments.
func craftedHead(n int) []byte {
	parts := make([]Part, n)
	for i := range parts {
		base := int64(i) * 65536
		parts[i] = Part{Tier: MaxTier, ObjectBase: base, ObjectLast: base + 65535, ObjectSegments: 65536,
			Bytes: 100, DirSize: 10, Segments: 65536, BaseOffset: base, LastOffset: base + 65535, Size: 65536}
		binary.BigEndian.PutUint64(parts[i].ID[:], uint64(i+1))
	}
	b := append([]byte(nil), magic[:]...)
	b = binary.BigEndian.AppendUint16(b, Version)
	b = binary.AppendUvarint(b, 1) // generation
	b = binary.AppendVarint(b, 1)  // writer epoch
	b = binary.AppendVarint(b, 0)  // log start
	b = binary.AppendUvarint(b, 0) // flags
	b = appendParts(b, parts)
	b = appendSegments(b, nil, parts[n-1].LastOffset)
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

// TestCraftedHeadAllocatesNothingUnchecked: a ~150 KB head naming 5,000
// tier 3 parts claims 327 million segments (about 60 GB decoded).
// DecodeLayered must fail with the first part's error, reserving nothing
// on the claim's word (it once ran the process out of memory).
func TestCraftedHeadAllocatesNothingUnchecked(t *testing.T) {
	head := craftedHead(5000)
	t.Logf("head of %d bytes", len(head))
	_, err := DecodeLayered(head, func(Part) ([]Segment, error) { return nil, errors.New("not found") })
	if err == nil {
		t.Fatal("a crafted head decoded")
	}
}
