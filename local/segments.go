package local

// Segments is a Log's face for the packages that move its segments to
// another tier or replace them: tiered (segment handles to upload, the
// spans past the bucket's end, the remote log start, the tier-state
// record, trimming the local start below the bucket's end, a follower's
// start at an offset the bucket holds) and compaction (a cleaner's
// session, the transactions and timestamps it keeps). A broker needs none
// of it: it uses the Log's own methods, backend.Partition's. A tool uses
// the read-only ones (Offsets, SegmentInfos, Lookup, Read) and reads the
// remote log start here.
type Segments struct{ l *Log }

// Segments returns the log's face for tiered and compaction.
func (l *Log) Segments() Segments { return Segments{l} }
