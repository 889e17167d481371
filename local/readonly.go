package local

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/record"
)

// loadReadOnly opens the segments of an existing directory as they are:
// temporary files are ignored, every segment is treated as closed, and the
// log end is where the last segment's whole batches end.
func (l *Log) loadReadOnly(opts Options) error {
	ents, err := os.ReadDir(l.dir)
	if err != nil {
		return fmt.Errorf("local: read %s: %w", l.dir, err)
	}
	var segs []*segment
	for _, e := range ents {
		base, suffix, err := ParseFileName(e.Name())
		if err != nil || suffix != LogSuffix || e.IsDir() {
			continue
		}
		st, err := os.Stat(filepath.Join(l.dir, e.Name()))
		if err != nil {
			return fmt.Errorf("local: %w", err)
		}
		s := newSegment(l.dir, base, st.Size(), &l.segOpts, st.ModTime())
		s.readOnly = true
		segs = append(segs, s)
	}
	if len(segs) == 0 {
		return fmt.Errorf("%w: no segments in %s", backend.ErrNotFound, l.dir)
	}
	sort.Slice(segs, func(i, j int) bool { return segs[i].base < segs[j].base })
	l.setSegments(segs)
	last := segs[len(segs)-1]
	oi, _, err := last.indexes()
	if err != nil {
		return err
	}
	f, err := last.file()
	if err != nil {
		return err
	}
	next := last.base
	sc := record.NewScanner(f, int64(oi.LastEntry().Position), last.size.Load(), record.ScanOptions{HeadersOnly: true, BufferSize: 4096})
	for sc.Next() {
		next = sc.Entry().LastOffset + 1
	}
	if sc.Err() != nil {
		// Serve the whole batches only; say what was left out.
		l.logger.Warn("the last segment ends in a torn or damaged tail; not serving it", "base", last.base, "err", sc.Err())
		last.size.Store(sc.ValidEnd())
	}
	l.leo.Store(next)
	logStart := max(opts.LogStartOffset, segs[0].base)
	l.logStart.Store(min(logStart, next))
	hw := opts.HighWatermark
	if hw < 0 {
		hw = next
	}
	l.hw.Store(min(max(hw, l.logStart.Load()), next))
	l.recoveryPoint.Store(next)
	if epochs, err := ReadLeaderEpochCheckpoint(filepath.Join(l.dir, LeaderEpochCheckpoint)); err == nil {
		l.epochs = epochs
	}
	return nil
}

// checkWritable returns ErrReadOnly or ErrClosed for a log that cannot be
// written.
func (l *Log) checkWritable() error {
	if l.closed.Load() {
		return l.closedErr()
	}
	if l.readOnly {
		return fmt.Errorf("%w: %s", ErrReadOnly, l.dir)
	}
	return nil
}
