package manifest_test

import (
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/tierlog/tierlog/manifest"
)

// TestLayerAdversarial: appends, front cuts (many small ones, deep
// ones, to zero), end truncations, a cut and an append in one commit, a
// cut plus a change, deletion; after every commit the head reads back, no
// part exceeds its tier, and gc keeps only what the last two heads name.
func TestLayerAdversarial(t *testing.T) {
	for seed := uint64(1); seed <= 3; seed++ {
		rng := rand.New(rand.NewPCG(seed, 99))
		b := newBucket()
		prev := &manifest.Manifest{}
		var prevHead []byte
		base, i := int64(0), 0
		add := func(segs []manifest.Segment, n int) []manifest.Segment {
			for range n {
				span := 1 + rng.Int64N(50)
				segs = append(segs, synthSegment(base, span, i))
				base += span + rng.Int64N(2)
				i++
			}
			return segs
		}
		for step := range 2500 {
			next := *prev
			next.Generation++
			segs := append([]manifest.Segment(nil), prev.Segments...)
			switch r := rng.IntN(30); {
			case r < 16 || len(segs) < 2:
				segs = add(segs, 1+rng.IntN(1+rng.IntN(300)))
			case r < 21: // small front cuts
				segs = segs[1+rng.IntN(min(len(segs), 3)):]
			case r < 23: // deep cut
				segs = segs[rng.IntN(len(segs)+1):]
			case r < 24: // to zero
				segs = nil
			case r < 26: // truncate the end (a rollback of an unclean leader)
				segs = segs[:rng.IntN(len(segs))]
				if len(segs) > 0 {
					base = segs[len(segs)-1].LastOffset + 1
				}
			case r < 28: // cut and append
				segs = add(segs[rng.IntN(len(segs)):], 1+rng.IntN(40))
			default: // cut and change
				segs = segs[rng.IntN(len(segs)):]
				if len(segs) > 0 {
					k := rng.IntN(len(segs))
					segs[k].Size++
				}
			}
			next.Segments = segs
			if len(segs) > 0 {
				next.LogStartOffset = max(prev.LogStartOffset, segs[0].BaseOffset)
			} else {
				next.LogStartOffset = max(prev.LogStartOffset, base)
			}
			b.commit(t, prev, &next)
			got := b.read(t)
			if !reflect.DeepEqual(got.Segments, next.Segments) && !(len(got.Segments) == 0 && len(next.Segments) == 0) {
				t.Fatalf("seed %d step %d: does not read back", seed, step)
			}
			for _, p := range next.Parts {
				if p.ObjectSegments > manifest.TierSegments(p.Tier) || p.Segments > p.ObjectSegments || p.Skip < 0 {
					t.Fatalf("seed %d step %d: part %+v", seed, step, p)
				}
			}
			if prevHead != nil {
				b.gc(t, prevHead, b.head)
			}
			prevHead = b.head
			prev = &next
		}
		// Deletion: no segments, no parts.
		del := manifest.Manifest{Generation: prev.Generation + 1, WriterEpoch: prev.WriterEpoch, Deleted: true, LogStartOffset: base}
		b.commit(t, prev, &del)
		if got := b.read(t); len(got.Parts) != 0 || !got.Deleted {
			t.Fatal("deleted")
		}
	}
}

// FuzzDecodeLayered: mutated layered heads, loaded against the real
// parts: an error or a manifest that encodes back, never a panic.
func FuzzDecodeLayered(f *testing.F) {
	b, m := committedBucket(f, 700)
	f.Add(b.head)
	cut := *m
	cut.Generation++
	cut.Segments = m.Segments[37:]
	b.commit(f, m, &cut)
	f.Add(b.head)
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) >= 4 { // keep the CRC right so mutations reach the decoder
			body := data[:len(data)-4]
			data = append(append([]byte(nil), body...), 0, 0, 0, 0)
			c := crc32c(body)
			data[len(data)-4], data[len(data)-3], data[len(data)-2], data[len(data)-1] = byte(c>>24), byte(c>>16), byte(c>>8), byte(c)
		}
		got, err := manifest.DecodeLayered(data, b.load)
		if err != nil {
			return
		}
		if _, err := got.Encode(); err != nil {
			t.Fatalf("decoded but does not encode: %v", err)
		}
	})
}
