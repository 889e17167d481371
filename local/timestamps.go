package local

import "sort"

// Timestamp lookups choose a segment as Kafka does: the first whose
// largest timestamp is at or past the target (fetchOffsetByTimestamp's
// segments.find). That is also the first segment whose prefix maximum
// (the largest timestamp of it and every segment before it) is at or past
// the target, and prefix maxima never decrease, so a log that knows them
// finds the segment by binary search, on a log whose timestamps rise and
// on one whose do not alike. Kafka walks the segments for every lookup,
// opening each one's time index to learn its largest timestamp.
//
// tsDirectory holds the prefix maxima of one segment list's first sealed
// segments (whose largest timestamps no longer change). A lookup past
// them extends it, segment by segment, stopping at the answer, so the
// first lookup costs what Kafka's does and later ones a binary search.
// A new segment list (a roll, retention, a truncation, the cleaner)
// starts a new one; the segments keep their largest timestamps once
// read, so rebuilding it reads no file again.
type tsDirectory struct {
	list   *[]*segFile // the list it describes (each publish makes a new one)
	prefix []int64     // prefix[i]: the largest timestamp of (*list)[0..i]
}

// firstSegmentForTimestamp returns the index in segs (the list behind
// list) of the first segment whose largest timestamp may be at or past ts:
// the answer, when it is sealed, or the first segment the directory does
// not cover (the active one, or one that could not be read), from which a
// caller goes on linearly. len(segs) means none can hold ts.
func (l *Log) firstSegmentForTimestamp(list *[]*segFile, ts int64) (int, error) {
	segs := *list
	l.tsMu.Lock()
	defer l.tsMu.Unlock()
	d := l.tsDir
	if d == nil || d.list != list {
		d = &tsDirectory{list: list}
		l.tsDir = d
	}
	if k := len(d.prefix); k > 0 && d.prefix[k-1] >= ts {
		return sort.Search(k, func(i int) bool { return d.prefix[i] >= ts }), nil
	}
	for i := len(d.prefix); i < len(segs); i++ {
		s := segs[i]
		if !s.isSealed() || !s.acquire() {
			return i, nil // from here the caller searches each segment
		}
		largest, _, err := s.largestTimestamp()
		s.release()
		if err != nil {
			return 0, err
		}
		if i > 0 {
			largest = max(largest, d.prefix[i-1])
		}
		d.prefix = append(d.prefix, largest)
		if largest >= ts {
			return i, nil
		}
	}
	return len(d.prefix), nil
}

// isSealed says whether s is no longer its log's last segment.
func (s *segFile) isSealed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sealed
}
