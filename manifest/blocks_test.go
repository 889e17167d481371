package manifest_test

import (
	"bytes"
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
		"the directory's block count": func(d []byte) { d[off] ^= 1 },
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
}

func FuzzDecodePartDirectory(f *testing.F) {
	b, m := committedBucket(f, 5000)
	for _, p := range m.Parts {
		off, n := p.DirRange()
		f.Add(b.parts[p.Name()][off:off+n], []byte{})
	}
	f.Fuzz(func(t *testing.T, dir, block []byte) {
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
