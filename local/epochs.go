package local

import (
	"context"
	"path/filepath"
	"slices"

	"github.com/tierlog/tierlog/record"
)

// epochCache is the leader epoch cache (Kafka's LeaderEpochFileCache): for
// each leader epoch, the first offset written in it, kept in
// leader-epoch-checkpoint. Every change goes through here: appends assign,
// retention and DeleteRecordsBefore truncate from the start, truncation
// from the end. REQUIRES: Log.mu held for every method (load: the log not
// yet shared).
type epochCache struct {
	entries []EpochEntry
	// stale says the file and the cache differ only in entries at or
	// past the log end: the file still holds ones load dropped (an epoch
	// that began at the log end and never got a record, as a leader's does
	// when the broker stops before its first append), or lacks the one
	// BecomeLeader assigned at the log end (or, after a failed write,
	// the file holds entries the cache put back). Harmless while the log end
	// stays there, and a reopen drops such entries either way, so neither
	// the open nor BecomeLeader writes the file; the next append writes it
	// before its batches (which would make the file's entries look real,
	// or need the cache's), as do retention and truncation.
	stale bool
}

// load reads leader-epoch-checkpoint, or rebuilds the cache from the
// batches when the file is missing or damaged, then fits it to the log.
func (c *epochCache) load(l *Log) error {
	path := filepath.Join(l.dir, LeaderEpochCheckpoint)
	epochs, exists, err := readLeaderEpochFile(l.segOpts.fs, path)
	rebuilt := false
	if err != nil {
		l.logger.Warn("leader epoch checkpoint unreadable; rebuilding it from the log", "err", err)
		rebuilt = true
	} else if !exists {
		rebuilt = true // missing: rebuild once and write it, so the next open need not scan
	}
	if rebuilt {
		if epochs, err = l.scanEpochs(); err != nil {
			return err
		}
	}
	c.entries = fitEpochs(epochs, l.logStart.Load(), l.leo.Load())
	if !rebuilt && slices.Equal(c.entries, epochs) {
		return nil // unchanged: no write (and no fsync) on the open path
	}
	if !rebuilt && slices.Equal(c.entries, fitEpochs(epochs, -1, l.leo.Load())) {
		// Only entries at or past the log end went: no write at open
		// (restarting a broker of idle partitions cost two fsyncs and a
		// rename a partition); the next append writes the file.
		c.stale = true
		return nil
	}
	return c.persist(l)
}

// scanEpochs reads every v2 batch header for its leader epoch.
func (l *Log) scanEpochs() ([]EpochEntry, error) {
	var out []EpochEntry
	for _, s := range l.segments() {
		err := s.walkHeaders(0, s.size.Load(), -1, func(e *record.Entry) bool {
			if e.Magic != 2 {
				return true
			}
			pe := e.Batch().PartitionLeaderEpoch()
			if pe >= 0 && (len(out) == 0 || pe > out[len(out)-1].Epoch) {
				out = append(out, EpochEntry{Epoch: pe, StartOffset: e.BaseOffset})
			}
			return true
		})
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// assign records that epoch began at startOffset, when it is newer than
// the latest cached epoch; it reports whether the cache changed. Entries
// starting at or after startOffset go (Kafka's assign: an epoch that
// began at the log end and never got a record, as a leader's epoch does
// when leadership moves on before its first append).
func (c *epochCache) assign(epoch int32, startOffset int64) bool {
	if n := len(c.entries); epoch < 0 || (n > 0 && epoch <= c.entries[n-1].Epoch) {
		return false
	}
	n := len(c.entries)
	for n > 0 && c.entries[n-1].StartOffset >= startOffset {
		n--
	}
	c.entries = append(c.entries[:n:n], EpochEntry{Epoch: epoch, StartOffset: startOffset})
	return true
}

// fit fits the cache to the log start and end (Kafka's truncateFromStart
// and truncateFromEnd) and persists it when that changed it, or when the
// file is stale (a new log end could pass its dropped entries).
func (c *epochCache) fit(l *Log) error {
	fitted := fitEpochs(c.entries, l.logStart.Load(), l.leo.Load())
	if slices.Equal(fitted, c.entries) && !c.stale {
		return nil
	}
	c.entries = fitted
	return c.persist(l)
}

func (c *epochCache) persist(l *Log) error {
	if err := writeLeaderEpochs(l.segOpts.fs, l.dir, c.entries); err != nil {
		// The file may hold the new entries (the write can fail after
		// its rename, at the directory's fsync) while the caller puts
		// the cache back: they differ where a reopen fits the file
		// anyway (at the log end, or below the log start), and the next
		// append, retention or truncation writes the file again
		// (TestEpochCheckpointFailingAfterRename).
		c.stale = true
		return err
	}
	c.stale = false
	return nil
}

// endOffsetFor answers OffsetForLeaderEpoch: the largest epoch <= epoch,
// and the start offset of the epoch after it (or leo). found is false when
// epoch is below every cached epoch.
func (c *epochCache) endOffsetFor(epoch int32, leo int64) (foundEpoch int32, endOffset int64, found bool) {
	for i := len(c.entries) - 1; i >= 0; i-- {
		if c.entries[i].Epoch <= epoch {
			end := leo
			if i+1 < len(c.entries) {
				end = c.entries[i+1].StartOffset
			}
			return c.entries[i].Epoch, end, true
		}
	}
	return -1, -1, false
}

// fitEpochs drops entries at or past leo and clamps the first entry to
// logStart (Kafka's truncateFromEnd / truncateFromStart).
func fitEpochs(epochs []EpochEntry, logStart, leo int64) []EpochEntry {
	var out []EpochEntry
	for _, e := range epochs {
		if e.StartOffset >= leo {
			break
		}
		out = append(out, e)
	}
	// Keep the last entry starting at or below logStart, moved to logStart.
	first := 0
	for i, e := range out {
		if e.StartOffset <= logStart {
			first = i
		}
	}
	out = append([]EpochEntry(nil), out[first:]...)
	if len(out) > 0 && out[0].StartOffset < logStart {
		out[0].StartOffset = logStart
	}
	return out
}

// LeaderEpochs returns a copy of the leader epoch cache.
func (l *Log) LeaderEpochs() []EpochEntry {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]EpochEntry(nil), l.epochs.entries...)
}

// LatestLeaderEpoch returns the largest epoch of the leader epoch cache
// (the epoch the log's newest records were written in), or -1 when it is
// empty.
func (l *Log) LatestLeaderEpoch() int32 {
	l.mu.Lock()
	defer l.mu.Unlock()
	if n := len(l.epochs.entries); n > 0 {
		return l.epochs.entries[n-1].Epoch
	}
	return -1
}

// EndOffsetForEpoch answers OffsetForLeaderEpoch: the largest epoch <=
// epoch, and the start offset of the epoch after it (or the log end); see
// backend.Partition. found is false when epoch is below every cached epoch.
func (l *Log) EndOffsetForEpoch(ctx context.Context, epoch int32) (foundEpoch int32, endOffset int64, found bool, err error) {
	if err := checkCtx(ctx); err != nil {
		return -1, -1, false, err
	}
	if l.closed.Load() {
		return -1, -1, false, l.closedErr()
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	foundEpoch, endOffset, found = l.epochs.endOffsetFor(epoch, l.leo.Load())
	return foundEpoch, endOffset, found, nil
}
