package manifest_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/tierlog/tierlog/manifest"
)

// readByBlocks reads a part as a ranged reader does: its directory, then
// each block, keeping the live segments.
func readByBlocks(p manifest.Part, data []byte) ([]manifest.Segment, []manifest.Block, error) {
	off, n := p.DirRange()
	blocks, err := manifest.DecodePartDirectory(p, data[off:off+n])
	if err != nil {
		return nil, nil, err
	}
	var out []manifest.Segment
	for _, blk := range blocks {
		live, err := blk.LiveSegments(p, data[blk.Offset:blk.Offset+blk.Size])
		if err != nil {
			return nil, nil, err
		}
		out = append(out, live...)
	}
	return out, blocks, nil
}

// TestPartReadByBlocks: a part read by its directory and blocks gives
// what DecodePart gives, with the front cut (Skip) anywhere in it; a
// damaged block or directory is an error that names the part.
func TestPartReadByBlocks(t *testing.T) {
	b, m := committedBucket(t, 5000)
	multi := 0
	for _, cut := range []int{0, 1, 255, 256, 257, 3000, 4095} {
		next := *m
		next.Generation++
		next.Segments = m.Segments[cut:]
		next.LogStartOffset = next.Segments[0].BaseOffset
		b.commit(t, m, &next)
		for _, p := range next.Parts {
			data := b.parts[p.Name()]
			want, err := manifest.DecodePart(p, data)
			if err != nil {
				t.Fatal(err)
			}
			got, blocks, err := readByBlocks(p, data)
			if err != nil {
				t.Fatalf("cut %d, part %s by blocks: %v", cut, p.Name(), err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("cut %d, part %s: %d segments by blocks, %d whole", cut, p.Name(), len(got), len(want))
			}
			if len(blocks) > 1 {
				multi++
			}
		}
	}
	if multi == 0 {
		t.Fatal("no part of more than one block was read")
	}
	var big manifest.Part
	for _, p := range m.Parts {
		if p.Tier >= 2 {
			big = p
		}
	}
	data := b.parts[big.Name()]
	off, n := big.DirRange()
	blocks, err := manifest.DecodePartDirectory(big, data[off:off+n])
	if err != nil {
		t.Fatal(err)
	}
	for name, damage := range map[string]func([]byte){
		"a byte of a block":           func(d []byte) { d[blocks[3].Offset+blocks[3].Size/2] ^= 1 },
		"a byte of the directory":     func(d []byte) { d[off+n/2] ^= 0x40 },
		"the directory's block count": func(d []byte) { d[off+2] ^= 1 },
		"a block's last offset":       func(d []byte) { d[off+n-12] ^= 1 },
		"a block swapped with another": func(d []byte) {
			copy(d[blocks[1].Offset:], bytes.Clone(d[blocks[2].Offset:blocks[2].Offset+blocks[1].Size]))
		},
	} {
		d := bytes.Clone(data)
		damage(d)
		_, _, err := readByBlocks(big, d)
		if !errors.Is(err, manifest.ErrCorrupt) || !strings.Contains(err.Error(), big.Name()) {
			t.Errorf("%s damaged: %v", name, err)
		}
	}
	if _, err := (manifest.Block{Offset: 7, Size: 2}).LiveSegments(big, []byte{0, 0}); err == nil {
		t.Error("a block of no segments decoded")
	}
	// A directory whose marker is gone reads as a version 1 part's: not
	// to be trusted alone.
	d := bytes.Clone(data)
	d[off] = 1
	if _, _, err := readByBlocks(big, d); !errors.Is(err, manifest.ErrUncheckedDirectory) {
		t.Errorf("a directory without its marker: %v", err)
	}
	// Read whole, a version 2 part says it is damaged, even when its
	// object's CRC-32C was written over the damage.
	binary.BigEndian.PutUint32(d[len(d)-4:], crc32c(d[:len(d)-4]))
	p2 := big
	p2.CRC = crc32c(d)
	if _, err := manifest.DecodePart(p2, d); !errors.Is(err, manifest.ErrCorrupt) || errors.Is(err, manifest.ErrUncheckedDirectory) {
		t.Errorf("a version 2 part without its directory's marker, read whole: %v", err)
	}
}

// toVersion1 rewrites a part object as version 1 wrote it: its directory
// without the marker and its own CRC-32C.
func toVersion1(p manifest.Part, data []byte) (manifest.Part, []byte) {
	off, n := p.DirRange()
	dir := data[off+2 : off+n-4]
	v1 := append(bytes.Clone(data[:off]), dir...)
	v1[5] = 1 // the version's low byte
	v1 = binary.BigEndian.AppendUint32(v1, crc32c(v1))
	p.Bytes, p.CRC, p.DirSize = int64(len(v1)), crc32c(v1), int64(len(dir))
	return p, v1
}

// TestVersion1PartsRead: a part version 1 wrote (its directory with no
// CRC of its own) still decodes whole, to the same segments, and its
// directory alone is ErrUncheckedDirectory (a reader reads it whole).
func TestVersion1PartsRead(t *testing.T) {
	b, m := committedBucket(t, 5000)
	for _, p := range m.Parts {
		want, err := manifest.DecodePart(p, b.parts[p.Name()])
		if err != nil {
			t.Fatal(err)
		}
		p1, data := toVersion1(p, b.parts[p.Name()])
		got, err := manifest.DecodePart(p1, data)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Fatalf("part %s as version 1: %d segments, %v", p.Name(), len(got), err)
		}
		off, n := p1.DirRange()
		if _, err := manifest.DecodePartDirectory(p1, data[off:off+n]); !errors.Is(err, manifest.ErrUncheckedDirectory) {
			t.Fatalf("part %s as version 1, its directory alone: %v", p.Name(), err)
		}
	}
}

func FuzzDecodePartDirectory(f *testing.F) {
	b, m := committedBucket(f, 5000)
	for _, p := range m.Parts {
		off, n := p.DirRange()
		f.Add(b.parts[p.Name()][off+2:off+n-4], []byte{}) // the entries, between the marker and the CRC
	}
	f.Fuzz(func(t *testing.T, entries, block []byte) {
		// A checked directory around the fuzzed entries: its CRC holds,
		// so the entries themselves are parsed.
		dir := append([]byte{0, 1}, entries...)
		dir = binary.BigEndian.AppendUint32(dir, crc32c(dir))
		for _, p := range m.Parts {
			p.DirSize = int64(len(dir))
			p.Bytes = max(p.Bytes, p.DirSize+8)
			blocks, err := manifest.DecodePartDirectory(p, dir)
			if err != nil {
				continue
			}
			n := 0
			for _, blk := range blocks {
				n += blk.Segments
			}
			if n != p.ObjectSegments {
				t.Fatalf("the directory holds %d segments, the reference says %d", n, p.ObjectSegments)
			}
			blk := blocks[0]
			blk.Size = int64(len(block))
			blk.CRC = crc32c(block)
			if segs, err := blk.LiveSegments(p, block); err == nil && len(segs) > blk.Segments {
				t.Fatalf("%d segments from a block of %d", len(segs), blk.Segments)
			}
		}
	})
}
