package tiered

import "testing"

// TestGroupLen: Offload's groups take UploadConcurrency segments
// whatever their size, and more small ones, up to four times that,
// within 1 GiB.
func TestGroupLen(t *testing.T) {
	pending := func(n int, size int64) []pendingSegment {
		out := make([]pendingSegment, n)
		for i := range out {
			out[i].size = size
		}
		return out
	}
	for _, tc := range []struct {
		name    string
		opts    Options
		pending []pendingSegment
		want    int
	}{
		{"fewer than a group", Options{UploadConcurrency: 4}, pending(3, 1<<20), 3},
		{"small segments", Options{UploadConcurrency: 4}, pending(40, 1<<20), 16},
		{"within 1 GiB", Options{UploadConcurrency: 4}, pending(40, 100<<20), 10},
		{"large segments", Options{UploadConcurrency: 4}, pending(40, 1<<30), 4},
		{"one at a time", Options{UploadConcurrency: 1}, pending(40, 1<<20), 4},
	} {
		p := &Partition{opts: tc.opts}
		if got := p.groupLen(tc.pending); got != tc.want {
			t.Errorf("%s: a group of %d; want %d", tc.name, got, tc.want)
		}
	}
}
