package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/tierlog/tierlog/index"
	"github.com/tierlog/tierlog/local"
	"github.com/tierlog/tierlog/producerstate"
	"github.com/tierlog/tierlog/record"
)

// verify of a segment's other files: its indexes, producer snapshot and .txnindex.

// verifyIndexFile checks an index file, against its log when sum is not nil.
func verifyIndexFile(path string, sum *logSummary) fileReport {
	kind := fileKind(path)
	rep, base, data, ok := readSegmentFile(path, kind)
	if !ok {
		return rep
	}
	if sum == nil {
		rep.Notes = append(rep.Notes, "no .log beside it: only the entries' order was checked")
	}
	byPos := map[int64]int{}
	byLast := map[int64]int{}
	if sum != nil {
		for i, b := range sum.batches {
			byPos[b.position] = i
			byLast[b.lastOffset] = i
		}
	}
	switch kind {
	case "index":
		x := index.NewOffsetIndexView(data, base)
		rep.Entries = x.Entries()
		if len(data)%index.OffsetEntrySize != 0 {
			rep.problemf("length %d is not a multiple of %d", len(data), index.OffsetEntrySize)
		}
		if err := x.SanityCheck(); err != nil {
			rep.problemf("%v", err)
		} else if unused := len(data)/index.OffsetEntrySize - x.Entries(); unused > 0 {
			rep.Notes = append(rep.Notes, fmt.Sprintf("%d unused zero slots (not trimmed: an active segment, or an unclean shutdown)", unused))
		}
		for i := 0; sum != nil && i < x.Entries(); i++ {
			e := x.Entry(i)
			j, ok := byPos[int64(e.Position)]
			switch {
			case int64(e.Position) >= sum.size:
				rep.problemf("entry %d (offset %d) points at position %d, past the log's %d bytes", i, e.Offset, e.Position, sum.size)
			case !ok:
				rep.problemf("entry %d (offset %d) points at position %d, which is not the start of a batch", i, e.Offset, e.Position)
			case sum.batches[j].lastOffset != e.Offset:
				rep.problemf("entry %d: offset %d, but the batch at position %d ends at offset %d", i, e.Offset, e.Position, sum.batches[j].lastOffset)
			}
		}
	case "timeindex":
		x := index.NewTimeIndexView(data, base)
		rep.Entries = x.Entries()
		if len(data)%index.TimeEntrySize != 0 {
			rep.problemf("length %d is not a multiple of %d", len(data), index.TimeEntrySize)
		}
		if err := x.SanityCheck(); err != nil {
			rep.problemf("%v", err)
		} else if unused := len(data)/index.TimeEntrySize - x.Entries(); unused > 0 {
			rep.Notes = append(rep.Notes, fmt.Sprintf("%d unused zero slots (not trimmed: an active segment, or an unclean shutdown)", unused))
		}
		for i := 0; sum != nil && i < x.Entries(); i++ {
			e := x.Entry(i)
			j, ok := byLast[e.Offset]
			switch {
			case !ok:
				rep.problemf("entry %d (timestamp %d) names offset %d, which is not the last offset of any batch", i, e.Timestamp, e.Offset)
			case sum.batches[j].maxTimestamp != e.Timestamp:
				rep.problemf("entry %d: timestamp %d, but the batch ending at offset %d has max timestamp %d", i, e.Timestamp, e.Offset, sum.batches[j].maxTimestamp)
			}
		}
	}
	return rep
}

// offsetRange is the offsets a partition directory's log holds: from its
// first segment's base offset to its log end offset (one past the last
// batch of its last segment, or that segment's base when it is empty).
type offsetRange struct {
	start, end int64
}

// dirOffsetRange reads the range of the log in dir from the segment names
// and the batch headers of its last segment; nil when dir has no .log.
func dirOffsetRange(dir string) *offsetRange {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var bases []int64
	for _, e := range ents {
		if base, suffix, err := local.ParseFileName(e.Name()); err == nil && suffix == local.LogSuffix && !e.IsDir() {
			bases = append(bases, base)
		}
	}
	if len(bases) == 0 {
		return nil
	}
	slices.Sort(bases)
	last := bases[len(bases)-1]
	r := &offsetRange{start: bases[0], end: last}
	f, err := os.Open(filepath.Join(dir, local.FileName(last, local.LogSuffix)))
	if err != nil {
		return r
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return r
	}
	s := record.NewScanner(f, 0, st.Size(), record.ScanOptions{HeadersOnly: true})
	for s.Next() {
		r.end = s.Entry().LastOffset + 1
	}
	return r
}

// verifySnapshotFile checks a producer snapshot: that it decodes (version,
// CRC-32C, a count matching its length), that each producer is in it once
// with its last batch and open transaction below the snapshot's offset,
// and, when rng is not nil, that the offset lies in the log's range (Kafka
// deletes a snapshot outside it when it loads the partition).
func verifySnapshotFile(path string, rng *offsetRange) fileReport {
	rep := fileReport{Path: path, Kind: "snapshot"}
	name := filepath.Base(path)
	offset, ok := producerstate.ParseSnapshotFileName(name)
	if !ok {
		rep.problemf("%s is not a snapshot file name (an offset and %s)", name, producerstate.SnapshotSuffix)
		return rep
	}
	data, err := os.ReadFile(path)
	if err != nil {
		rep.problemf("%v", err)
		return rep
	}
	rep.Bytes = int64(len(data))
	entries, err := producerstate.DecodeSnapshot(data)
	if err != nil {
		rep.problemf("%v", err)
		return rep
	}
	rep.Entries = len(entries)
	seen := make(map[int64]int, len(entries))
	for i, e := range entries {
		if j, dup := seen[e.ProducerID]; dup {
			rep.problemf("entry %d: producer %d is also entry %d", i, e.ProducerID, j)
		}
		seen[e.ProducerID] = i
		if e.LastOffset >= 0 {
			if e.LastOffset >= offset {
				rep.problemf("entry %d: producer %d's last batch ends at offset %d, not below the snapshot's offset %d", i, e.ProducerID, e.LastOffset, offset)
			}
			if e.OffsetDelta < 0 || int64(e.OffsetDelta) > e.LastOffset {
				rep.problemf("entry %d: producer %d's last batch has offset delta %d with last offset %d", i, e.ProducerID, e.OffsetDelta, e.LastOffset)
			}
		}
		if t := e.CurrentTxnFirstOffset; t >= 0 {
			if t >= offset {
				rep.problemf("entry %d: producer %d's open transaction starts at offset %d, not below the snapshot's offset %d", i, e.ProducerID, t, offset)
			} else if e.LastOffset >= 0 && t > e.LastOffset {
				rep.problemf("entry %d: producer %d's open transaction starts at offset %d, after its last batch (offset %d)", i, e.ProducerID, t, e.LastOffset)
			}
		}
	}
	switch {
	case rng == nil:
		rep.Notes = append(rep.Notes, "no .log beside it: its offset was not checked against the log")
	case offset < rng.start || offset > rng.end:
		rep.problemf("offset %d (from its name) is outside the log's offsets %d..%d; Kafka deletes such a snapshot when it loads the partition",
			offset, rng.start, rng.end)
	}
	return rep
}

// verifyTxnIndexFile checks a segment's transaction index: Kafka's sanity
// check (whole entries of version 0, none below the segment's base
// offset), markers in strictly increasing order (Kafka's append rule),
// each transaction's first offset at or below its marker's and its last
// stable offset at most one past it, and, against the segment's log when
// sum is not nil, every marker within the segment's offsets.
func verifyTxnIndexFile(path string, sum *logSummary) fileReport {
	rep, base, data, ok := readSegmentFile(path, "txnindex")
	if !ok {
		return rep
	}
	rep.Entries = len(data) / producerstate.TxnIndexEntrySize
	if err := producerstate.SanityCheckTxnIndex(data, base); err != nil {
		rep.problemf("%v", err)
	}
	entries, err := producerstate.DecodeTxnIndex(data)
	if err != nil {
		var fe *producerstate.FormatError
		if errors.As(err, &fe) {
			entries, _ = producerstate.DecodeTxnIndex(data[:fe.Pos-fe.Pos%producerstate.TxnIndexEntrySize])
		}
	}
	segLast := int64(-1)
	if sum != nil {
		segLast = base - 1 // an empty segment holds no offset
		if n := len(sum.batches); n > 0 {
			segLast = sum.batches[n-1].lastOffset
		}
	} else {
		rep.Notes = append(rep.Notes, "no .log beside it: the markers were not checked against the segment")
	}
	prev := int64(-1)
	for i, a := range entries {
		if i > 0 && a.LastOffset <= prev {
			rep.problemf("entry %d: marker offset %d does not follow entry %d's %d", i, a.LastOffset, i-1, prev)
		}
		prev = a.LastOffset
		if a.FirstOffset > a.LastOffset {
			rep.problemf("entry %d: producer %d's transaction starts at offset %d, after its marker at %d", i, a.ProducerID, a.FirstOffset, a.LastOffset)
		}
		if a.LastStableOffset > a.LastOffset+1 {
			rep.problemf("entry %d: last stable offset %d is past the marker at %d", i, a.LastStableOffset, a.LastOffset)
		}
		if sum != nil && a.LastOffset > segLast {
			rep.problemf("entry %d: marker offset %d is past the segment's last offset %d", i, a.LastOffset, segLast)
		}
	}
	return rep
}
