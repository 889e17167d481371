package local

import (
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/tierlog/tierlog/index"
	"github.com/tierlog/tierlog/record"
	"github.com/tierlog/tierlog/vfs"
)

// This file is Kafka's LogSegment.recover: validate a segment's batches
// from its start and rebuild its indexes by the index rule.

// recoverResult is what rebuilding a segment found.
type recoverResult struct {
	validBytes    int64
	truncated     int64 // bytes cut from the tail
	nextOffset    int64 // one past the last valid batch; base when empty
	firstOffset   int64 // -1 when empty
	maxTs         int64
	offsetOfMaxTs int64
	corruption    error // why the tail is invalid, when it is
	epochs        []EpochEntry
}

// scanAndIndex validates every batch of the .log read through f (size
// bytes) and feeds each to ix, stopping at the first torn or corrupt batch
// or at offsets that do not follow. It writes nothing but the indexes.
func scanAndIndex(f vfs.File, size, base int64, ix *index.Indexer) recoverResult {
	res := recoverResult{nextOffset: base, firstOffset: -1, maxTs: -1, offsetOfMaxTs: -1}
	sc := record.NewScanner(f, 0, size, record.ScanOptions{Validate: true})
	order := LocalSegmentOrder(base)
	var epoch int32 = -1
	oi, ti := ix.Offsets, ix.Times
	for sc.Next() {
		e := sc.Entry()
		first := e.BaseOffset
		if first < 0 {
			first = e.LastOffset
		}
		if err := order.Check(e); err != nil {
			res.corruption = err
			break
		}
		if !oi.IsFull() && !ti.IsFull() {
			if err := ix.Append(e.Position, e.Size, e.LastOffset, e.MaxTimestamp, e.LastOffset); err != nil {
				res.corruption = fmt.Errorf("index batch at position %d: %w", e.Position, err)
				break
			}
		}
		if e.Magic == 2 {
			if pe := e.Batch().PartitionLeaderEpoch(); pe >= 0 && pe > epoch {
				epoch = pe
				res.epochs = append(res.epochs, EpochEntry{Epoch: pe, StartOffset: first})
			}
		}
		if res.firstOffset < 0 {
			res.firstOffset = first
		}
		res.validBytes = e.Position + e.Size
		res.nextOffset = e.LastOffset + 1
	}
	if res.corruption == nil {
		res.corruption = sc.Err()
	}
	res.maxTs, res.offsetOfMaxTs = ix.MaxTimestamp()
	if res.validBytes == size {
		res.corruption = nil
	}
	return res
}

// newIndexes removes a segment's index files and creates them empty and
// writable, sized for a log of logSize bytes (active: segment.index.bytes).
func newIndexes(opts *segmentOptions, base, logSize int64, active bool) (*index.OffsetIndex, *index.TimeIndex, error) {
	for _, suf := range []string{IndexSuffix, TimeIndexSuffix} {
		p := opts.path(base, suf)
		if err := opts.fs.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, nil, fmt.Errorf("local: remove %s: %w", p, err)
		}
	}
	// A closed segment's indexes are trimmed right after, so size them to
	// what the index rule can produce for this log (at most one entry per
	// interval, or per batch) rather than segment.index.bytes.
	maxBytes := opts.maxIndexBytes
	if !active {
		perEntry := max(opts.intervalBytes+1, record.BatchHeaderSize)
		maxBytes = int(min(int64(maxBytes), (logSize/perEntry+2)*index.TimeEntrySize))
	}
	oi, err := index.OpenOffsetIndex(opts.fs, opts.path(base, IndexSuffix), base, maxBytes)
	if err != nil {
		return nil, nil, err
	}
	ti, err := index.OpenTimeIndex(opts.fs, opts.path(base, TimeIndexSuffix), base, maxBytes)
	if err != nil {
		oi.Close()
		return nil, nil, err
	}
	return oi, ti, nil
}

// rebuildSealed rebuilds a closed segment's indexes from its .log, which
// it does not change (readers may hold it): damage is reported in
// res.corruption, never cut. The new indexes are published; the old ones
// retire. REQUIRES: s.mu held.
func rebuildSealed(s *segFile) (res recoverResult, err error) {
	f, err := s.fileLocked()
	if err != nil {
		return res, err
	}
	size := s.size.Load()
	oi, ti, err := newIndexes(s.opts, s.base, size, false)
	if err != nil {
		return res, err
	}
	defer func() {
		if err != nil {
			oi.Close()
			ti.Close()
		}
	}()
	ix := index.NewIndexer(oi, ti, s.opts.intervalBytes)
	res = scanAndIndex(f, size, s.base, ix)
	if err := ix.Roll(); err != nil {
		return res, err
	}
	if err := errors.Join(oi.TrimToValidSize(), ti.TrimToValidSize(), oi.Flush(), ti.Flush()); err != nil {
		return res, err
	}
	s.publishIndexesLocked(oi, ti)
	s.checkedIndex = true // built from the log itself
	s.maxTs, s.offsetOfMaxTs = res.maxTs, res.offsetOfMaxTs
	return res, nil
}

// recoverSegment is LogSegment.recover for a segment being loaded (not yet
// shared with readers): validate every batch, rebuild both indexes, and
// cut the .log at the first torn or corrupt batch. With active the segment
// becomes the log's writable last segment (its indexes stay at full size);
// otherwise its indexes are trimmed and published.
func recoverSegment(s *segFile, active bool) (res recoverResult, a *activeSegment, err error) {
	w, err := s.opts.fs.OpenFile(s.logPath, os.O_RDWR, 0)
	if err != nil {
		return res, nil, fmt.Errorf("local: open %s: %w", s.logPath, err)
	}
	defer func() {
		if a == nil {
			w.Close()
		}
	}()
	st, err := w.Stat()
	if err != nil {
		return res, nil, fmt.Errorf("local: stat %s: %w", s.logPath, err)
	}
	oi, ti, err := newIndexes(s.opts, s.base, st.Size(), active)
	if err != nil {
		return res, nil, err
	}
	defer func() {
		if err != nil {
			oi.Close()
			ti.Close()
		}
	}()
	ix := index.NewIndexer(oi, ti, s.opts.intervalBytes)
	res = scanAndIndex(w, st.Size(), s.base, ix)
	if res.validBytes < st.Size() {
		res.truncated = st.Size() - res.validBytes
		if err := w.Truncate(res.validBytes); err != nil {
			return res, nil, fmt.Errorf("local: truncate %s to %d: %w", s.logPath, res.validBytes, err)
		}
	}
	s.size.Store(res.validBytes)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.publishIndexesLocked(oi, ti)
	s.checkedIndex = true
	if active {
		// As a reloaded Kafka segment: the index rule's byte counter
		// starts at zero.
		ix.Restore(0, res.maxTs, res.offsetOfMaxTs)
		s.maxTs, s.offsetOfMaxTs = res.maxTs, res.offsetOfMaxTs
		return res, &activeSegment{f: s, w: w, ix: ix, rollingBasedTs: -1, created: s.mtime}, nil
	}
	if err := ix.Roll(); err != nil {
		return res, nil, err
	}
	s.maxTs, s.offsetOfMaxTs = res.maxTs, res.offsetOfMaxTs
	return res, nil, errors.Join(oi.TrimToValidSize(), ti.TrimToValidSize())
}
