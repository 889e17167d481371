package local

// Test hooks for package local_test: the segment list as a reader holds it.

// HeldSegment is a segment of a list a reader holds: its base, and which
// segment file it is.
type HeldSegment struct {
	Base int64
	s    *segFile
}

// HoldSegmentList takes the log's segment list as a reader takes it, and
// returns what that list shows each time it is called.
func HoldSegmentList(l *Log) func() []HeldSegment {
	segs := l.segments()
	return func() []HeldSegment {
		out := make([]HeldSegment, len(segs))
		for i, s := range segs {
			out[i] = HeldSegment{s.base, s}
		}
		return out
	}
}
