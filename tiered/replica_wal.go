package tiered

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/manifest"
	"github.com/tierlog/tierlog/objstore"
	"github.com/tierlog/tierlog/vfs"
	"github.com/tierlog/tierlog/wal"
)

// A read replica of a diskless partition.
//
// Past the bucket's segments, a diskless partition's records are in WAL
// objects: the manifest's record names the extents of earlier writers
// (final: a claim chose them) and the writer that leads it, whose objects
// above the record's number hold the rest. Those objects are not all
// final: one that landed may hold appends its writer then failed and
// appended again in a later object (wal.Chain tells which win), and the
// last ones may hold appends that are never acknowledged. So the origin's
// writer marks what it acknowledged (wal.Mark: a partition's end, at the
// epoch of the manifest commit that named the writer), in the footers of
// its next objects, or in an object of marks alone when it has nothing
// else to put. An acknowledged record is never replaced, so below the
// highest mark of the manifest's writer and epoch, the chain of the
// record's extents and the writer's objects above its number is the
// origin's log.
//
// The replica reads the writer's objects in number order, each footer
// once (the Backend's caches keep them: a footer serves every partition
// it names), stopping at the first number not in the bucket yet (an
// object still in flight, whose extents may come before a mark above
// it). Its local log holds that chain from the segments' end up to the
// mark, appended as a follower's appends (producer state, transactions
// and epochs as the origin's), and its high watermark is there. Every
// record in it is final in any view, so a new manifest (another writer,
// epoch or segments' end) only extends it; the copies below the segments'
// end go. It starts over at the segments' end only at the first step
// after open, or when it no longer joins the segments (it fell behind a
// whole consolidation).
//
// The replica trails the origin by the writer's commit interval (a mark
// is put with the next object, or alone within a commit interval) plus
// one step.

// replicaWAL is what a read replica of a diskless partition has read of
// its writer's objects past the manifest. Guarded by p.mu.
type replicaWAL struct {
	writer wal.WriterID
	epoch  int32
	after  uint64
	// seen: every number in (after, seen] was read.
	seen uint64
	// own are the partition's extents in them, in number order.
	own []wal.Located
	// acked is the highest mark at (writer, epoch) read; -1: none.
	acked int64
	// skipped: the last read passed numbers WAL gc removed. gc judged by
	// a manifest newer than the one this step holds: an object it removed
	// may have held the final copy of offsets an older object holds a
	// failed copy of, below the segments' end gc read. So nothing is
	// served until a step whose manifest was read after the skip (the
	// next), whose segments reach past what gc removed.
	skipped bool
}

// replicaTP is the partition a replica's prefix names ("<root>/<topic>-<n>"),
// and the root its WAL objects are under.
func replicaTP(prefix string) (wal.TopicPartition, string, error) {
	dir, name := path.Split(strings.TrimSuffix(prefix, "/"))
	i := strings.LastIndexByte(name, '-')
	if i <= 0 {
		return wal.TopicPartition{}, "", fmt.Errorf("tiered: %s: the prefix does not end in <topic>-<partition>", prefix)
	}
	n, err := strconv.ParseInt(name[i+1:], 10, 32)
	if err != nil || n < 0 {
		return wal.TopicPartition{}, "", fmt.Errorf("tiered: %s: the prefix does not end in <topic>-<partition>", prefix)
	}
	return wal.TopicPartition{Topic: name[:i], Partition: int32(n)}, strings.Trim(dir, "/"), nil
}

// followWALLocked moves a diskless replica's local log to what the
// manifest h and its writer's marks say is final (see above).
// REQUIRES: p.mu held.
func (p *Partition) followWALLocked(ctx context.Context, h *manifest.Head) error {
	tp, root, err := replicaTP(p.prefix)
	if err != nil {
		return err
	}
	rec, base := h.WAL(), remoteEnd(h)
	w := wal.WriterID(rec.Writer)
	r := p.rwal
	if r == nil || r.writer != w || r.epoch != h.WriterEpoch() || rec.After < r.after {
		r = &replicaWAL{writer: w, epoch: h.WriterEpoch(), after: rec.After, seen: rec.After, acked: -1}
		p.rwal = r
	}
	if rec.After > r.after {
		// A commit moved the record past objects the segments cover.
		i := 0
		for i < len(r.own) && r.own[i].Sequence <= rec.After {
			i++
		}
		r.own, r.after, r.seen = r.own[i:], rec.After, max(r.seen, rec.After)
	}
	layout := wal.NewLayout(root)
	r.skipped = false // this step's manifest was read after any earlier skip
	if err := p.readWriterObjects(ctx, layout, tp, r); err != nil {
		return storageError(ctx, fmt.Errorf("tiered: %s: read replica: follow WAL writer %s: %w", p.prefix, w, err))
	}
	if r.skipped {
		return nil // serve from the next step's manifest (see replicaWAL.skipped)
	}

	// The chain: the record's extents (final), then the writer's.
	var recExtents []manifest.WALExtent
	for _, e := range rec.Extents {
		if e.LastOffset >= base {
			recExtents = append(recExtents, e)
		}
	}
	recLocs := walLocated(layout, tp, recExtents)
	limit := max(base, r.acked)
	if sp := wal.Chain(base, recLocs); len(sp) > 0 {
		limit = max(limit, sp[len(sp)-1].To+1)
	}
	spans := wal.Chain(base, append(recLocs, r.own...))
	var served []wal.Span
	for _, sp := range spans {
		if sp.From >= limit {
			break
		}
		sp.To = min(sp.To, limit-1)
		served = append(served, sp)
	}

	// The local log keeps what it holds when it joins the bucket's
	// segments: every record in it is final, in any view (this process
	// made it from marks), so a new manifest (consolidation, another
	// writer or epoch) only extends it. Otherwise (the first step since
	// open, or the replica fell behind a whole consolidation) it starts
	// over at the segments' end.
	lo := p.local.Offsets()
	from := lo.LogEnd
	if !p.rlocal || lo.LogStart > base || lo.LogEnd < base {
		p.rlocal = false
		if err := p.startAtLocked(ctx, h, base); err != nil {
			return err
		}
		from = base
	}
	var todo []wal.Span
	for _, sp := range served {
		if sp.To < from {
			continue
		}
		sp.From = max(sp.From, from)
		todo = append(todo, sp)
	}
	if len(todo) > 0 {
		if err := markReplicaDir(p.local.Dir()); err != nil {
			return err
		}
	}
	if err := p.readTail(ctx, todo, func(sp wal.Span, data []byte) error {
		return p.appendTailLocked(ctx, data, sp)
	}); err != nil {
		p.rlocal = false // a part of a span may be in: start over next step
		return err
	}
	p.rlocal = true
	lo = p.local.Offsets() // after the appends: one view for the rest
	if lo.LogEnd != lo.HighWatermark {
		if err := p.local.SetHighWatermark(lo.LogEnd); err != nil {
			return err
		}
	}
	if lo.LogStart < base {
		// The bucket's segments hold these now: the local copies go.
		if err := p.segs.TrimLocalBefore(ctx, base); err != nil {
			return err
		}
		for b := range p.verified {
			if b < base {
				delete(p.verified, b)
			}
		}
	}
	p.adopt(p.man.Load()) // the local log's checkpointed start follows the bucket's
	p.replicaSynced.Store(true)
	return nil
}

// ReplicaMarker is the file a read replica keeps in a partition's
// directory once its local log holds records it read from the origin's
// WAL (a diskless topic's tail): a replica Backend opening the directory
// again takes those records for its own cache of the bucket, not for a
// partition's own records, which it refuses.
const ReplicaMarker = "tierlog-read-replica"

// isReplicaDir says whether a read replica's records are in dir.
func isReplicaDir(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, ReplicaMarker))
	return err == nil
}

// markReplicaDir writes the marker, durably, unless it is there.
func markReplicaDir(dir string) error {
	name := filepath.Join(dir, ReplicaMarker)
	if _, err := os.Stat(name); err == nil {
		return nil
	}
	f, err := os.Create(name)
	if err != nil {
		return fmt.Errorf("%w: tiered: read replica: %w", backend.ErrStorage, err)
	}
	err = errors.Join(f.Sync(), f.Close())
	if err == nil {
		err = vfs.Default.SyncDir(dir)
	}
	if err != nil {
		return fmt.Errorf("%w: tiered: read replica: %s: %w", backend.ErrStorage, name, err)
	}
	return nil
}

// readWriterObjects reads the footers of r's writer's objects above
// r.seen, in number order, and takes tp's extents and marks from them. It
// stops at the first missing number the writer may still be putting (one
// of its newest wal.MaxInFlight: the writer settles its numbers in order,
// so one below those holds an object, or held one WAL gc removed: a void,
// a fence its writer passed, or data every partition consolidated past).
func (p *Partition) readWriterObjects(ctx context.Context, layout wal.Layout, tp wal.TopicPartition, r *replicaWAL) error {
	objs, err := p.caches.walLists.list(ctx, p.wal(), layout, r.writer, r.seen, p.opts.Now())
	if err != nil {
		return err
	}
	if len(objs) == 0 {
		return nil
	}
	highest := objs[len(objs)-1].seq
	for _, o := range objs {
		if o.seq <= r.seen {
			continue
		}
		if o.seq != r.seen+1 {
			if r.seen+1+wal.MaxInFlight > highest {
				return nil // a number still in flight: read on from it next step
			}
			r.skipped = true // settled, and gone: WAL gc removed it
		}
		f, err := p.walFooter(ctx, o.info)
		if errors.Is(err, objstore.ErrNotFound) && o.seq+wal.MaxInFlight <= highest {
			// WAL gc removed it since the listing: it held nothing this
			// partition needs past the segments of the manifest gc read
			// (newer than this one: the next step reads it).
			r.seen, r.skipped = o.seq, true
			continue
		}
		if err != nil {
			return err
		}
		if f.Writer != r.writer || f.Sequence != o.seq {
			return fmt.Errorf("%w: %s holds the footer of writer %s sequence %d", wal.ErrCorrupt, o.info.Key, f.Writer, f.Sequence)
		}
		if e, ok := f.Find(tp); ok {
			r.own = append(r.own, wal.Located{Key: o.info.Key, Writer: r.writer, Sequence: o.seq, Extent: e})
		}
		if m, ok := f.FindMark(tp); ok && m.Epoch == r.epoch && m.End > r.acked {
			r.acked = m.End
		}
		r.seen = o.seq
	}
	return nil
}

// walListed is a WAL object a listing found.
type walListed struct {
	info objstore.ObjectInfo
	seq  uint64
}

// walLists shares the listings of WAL writers' objects among a Backend's
// read replicas: one listing of a writer, fresh for a while, serves every
// partition that follows it (a Backend's service steps them all each task
// interval), so a step costs one LIST a writer, not one a partition.
type walLists struct {
	// fresh is how long a listing serves (0: each call lists).
	fresh time.Duration
	mu    sync.Mutex
	m     map[wal.WriterID]*walListing
}

// walListing is one writer's objects above from, listed at at.
type walListing struct {
	at   time.Time
	from uint64
	objs []walListed
}

// maxListed bounds one listing: a replica far behind reads on at its next
// step.
const maxListed = 10_000

// list returns writer w's objects numbered above after, in number order,
// at most maxListed: from a listing younger than fresh that began at or
// below after, or from a new one.
func (c *walLists) list(ctx context.Context, store *objstore.Store, l wal.Layout, w wal.WriterID, after uint64, now time.Time) ([]walListed, error) {
	if c.fresh > 0 {
		c.mu.Lock()
		for id, e := range c.m {
			if now.Sub(e.at) > 10*c.fresh {
				delete(c.m, id) // a writer no replica follows any more
			}
		}
		e := c.m[w]
		c.mu.Unlock()
		if e != nil && now.Sub(e.at) <= c.fresh && e.from <= after && len(e.objs) < maxListed {
			i, _ := slices.BinarySearchFunc(e.objs, after+1, func(o walListed, seq uint64) int { return cmp.Compare(o.seq, seq) })
			return e.objs[i:], nil
		}
	}
	start := ""
	if after > 0 {
		start = l.Key(w, after)
	}
	var objs []walListed
	var ferr error
	err := store.ListAfter(ctx, l.WriterPrefix(w), start, func(info objstore.ObjectInfo) bool {
		id, seq, err := l.Parse(info.Key)
		if err != nil || id != w {
			ferr = fmt.Errorf("%w: %s: %v", wal.ErrCorrupt, info.Key, err)
			return false
		}
		if seq > after {
			objs = append(objs, walListed{info: info, seq: seq})
		}
		return len(objs) < maxListed
	})
	if err == nil {
		err = ferr
	}
	if err != nil {
		return nil, err
	}
	if c.fresh > 0 {
		c.mu.Lock()
		if c.m == nil {
			c.m = map[wal.WriterID]*walListing{}
		}
		if e := c.m[w]; e == nil || now.Sub(e.at) > c.fresh || after <= e.from {
			c.m[w] = &walListing{at: now, from: after, objs: objs}
		}
		c.mu.Unlock()
	}
	return objs, nil
}

// walFooter reads the footer of a WAL object through the Backend's
// caches: objects are put create-only, so a footer read once serves every
// partition it names.
func (p *Partition) walFooter(ctx context.Context, info objstore.ObjectInfo) (wal.Footer, error) {
	if f, ok := p.caches.footers.get(info.Key); ok {
		return f, nil
	}
	f, err := wal.ReadFooter(ctx, p.wal(), info.Key, info.Size)
	if err != nil {
		return wal.Footer{}, err
	}
	p.caches.footers.put(info.Key, f)
	return f, nil
}

// footerBytes is about what a decoded footer holds in memory.
func footerBytes(f wal.Footer) int64 {
	n := int64(96 + 64*len(f.Extents) + 48*len(f.Marks))
	for _, e := range f.Extents {
		n += int64(len(e.Topic))
	}
	for _, m := range f.Marks {
		n += int64(len(m.Topic))
	}
	return n
}

// walLocated is where a record's extents of tp are, as wal.Chain takes
// them.
func walLocated(l wal.Layout, tp wal.TopicPartition, extents []manifest.WALExtent) []wal.Located {
	out := make([]wal.Located, len(extents))
	for i, e := range extents {
		w := wal.WriterID(e.Writer)
		out[i] = wal.Located{Key: l.Key(w, e.Sequence), Writer: w, Sequence: e.Sequence,
			Extent: wal.Extent{TopicPartition: tp, FirstOffset: e.FirstOffset, LastOffset: e.LastOffset, Position: e.Position, Size: int32(e.Size), CRC: e.CRC}}
	}
	return out
}
