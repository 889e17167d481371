package tiered

import (
	"testing"

	"github.com/tierlog/tierlog/manifest"
)

// TestObjectKeyIsTheKey: the caches' key of a segment's object builds
// the key the layout gives it, under any prefix.
func TestObjectKeyIsTheKey(t *testing.T) {
	seg := manifest.Segment{BaseOffset: 100, LastOffset: 199, ID: [8]byte{1, 2, 3, 4, 5, 6, 7, 0xef}}
	for _, prefix := range []string{"", "orders-0", "tl/orders-0", "tl/orders-0/"} {
		p := &Partition{prefix: prefix}
		for _, suffix := range manifest.AllSuffixes {
			if got, want := p.objectKey(seg, suffix).String(), p.layout().Segment(seg, suffix); got != want {
				t.Errorf("prefix %q suffix %s: objectKey builds %q, the layout %q", prefix, suffix, got, want)
			}
		}
	}
}
