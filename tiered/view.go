package tiered

import (
	"context"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/manifest"
)

// A view is one immutable picture of a partition's offsets and tiers,
// taken once per call: every read, timestamp lookup and epoch lookup
// decides from one view, and never goes back up for another snapshot
// halfway (pebble's readState, taken once per iterator).
//
// Two owners publish what a view holds, each atomically: the local log
// its offsets (local.Log.Offsets, one snapshot of log start, high
// watermark, LSO and log end) and this package the committed manifest
// (Partition.man, replaced whole by each commit). A view loads the local
// offsets first, then the manifest. The order matters: a segment leaves
// the local log only after a commit names it, so a manifest loaded after
// the local offsets names every segment the local log had dropped below
// them; loaded the other way round, a view could miss a segment both
// tiers hold. What moves after the view was taken (an append, local
// retention raising the local start, a new commit) is not in it: an
// answer from a view is the answer at its moment. The races that make a
// view's answer impossible (the local tier dropping a segment the view
// still reads locally; bucket retention deleting a segment the view
// names) come back as errViewMoved, and Read takes a new view, at most
// viewTries in all (see Read).
type view struct {
	local    backend.Offsets // the local tier's offsets
	head     *manifest.Head  // the bucket tier's committed manifest's head
	attached bool            // m was read from the bucket (else it is empty)
	// remoteStart is the log start the local log's checkpoint recorded
	// for offsets in the bucket, until the manifest is read (ok false:
	// none).
	remoteStart   int64
	remoteStartOK bool
}

// view takes a view of the partition (see view).
func (p *Partition) view() view {
	v := view{local: p.local.Offsets()}
	v.attached = p.attached.Load() // before the manifest: attach stores it first
	v.head = p.Head()
	if !v.attached {
		v.remoteStart, v.remoteStartOK = p.segs.RemoteLogStart()
	}
	return v
}

// attachedView takes a view in which the bucket's offsets are known:
// when the local log's checkpoint says old offsets live in the bucket and
// its manifest is not read yet, it reads it first (attach) and takes the
// view after.
func (p *Partition) attachedView(ctx context.Context) (view, error) {
	v := p.view()
	if v.attached || !v.remoteStartOK {
		return v, nil
	}
	if err := p.attach(ctx); err != nil {
		return view{}, err
	}
	return p.view(), nil
}

// offsets returns the partition's offsets in v: LogStart is the remote
// start when old segments live in the bucket; LocalLogStart the local
// one; TieredEnd the committed manifest's end (see tieredEnd).
func (v view) offsets() backend.Offsets {
	o := v.local
	o.TieredEnd = tieredEnd(v.head, v.logStart())
	o.LogStart = v.logStart()
	o.LocalLogStart = max(o.LocalLogStart, o.LogStart)
	return o
}

// logStart is the partition's log start in v.
func (v view) logStart() int64 {
	ls := v.local.LogStart
	switch {
	case !v.attached:
		// The log start the checkpoint recorded, until the manifest says.
		if v.remoteStartOK && v.remoteStart < ls {
			return v.remoteStart
		}
		return ls
	case v.head.Deleted():
		// A deleted partition's log start (where its records ended) is
		// nothing of this one's: a partition created anew under its name
		// starts where its own log does.
		return ls
	}
	if last := v.head.LastOffset(); last >= 0 && last+1 >= ls {
		// The bucket runs on into the local log: the partition starts
		// where the manifest says, also above the local log start when a
		// committed new log start has not reached the local log yet (it
		// does at the next change; see fitLocalStartLocked).
		return v.head.LogStartOffset()
	}
	return max(ls, v.head.LogStartOffset())
}

// inBucket reports whether offset is older than the local tier holds in
// v: only the bucket can serve it (once attached).
func (v view) inBucket(offset int64) bool { return offset < v.local.LogStart }

// readBound is the first offset a read with isolation may not return.
func (v view) readBound(isolation backend.Isolation) int64 {
	switch isolation {
	case backend.ReadHighWatermark:
		return v.local.HighWatermark
	case backend.ReadCommitted:
		return v.local.LastStableOffset
	}
	return v.local.LogEnd
}

// outOfRange is the error for offset, in v's terms.
func (v view) outOfRange(offset int64) error {
	return &backend.OffsetOutOfRangeError{Offset: offset, LogStart: v.logStart(), LogEnd: v.local.LogEnd}
}
