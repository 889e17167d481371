package tiered

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"

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
// and epochs as the origin's), and its high watermark is there. A new
// manifest (another writer, epoch or segments' end) starts the local log
// over at its segments' end: at most the partition's unconsolidated tail
// is read again.
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
	if err := p.readWriterObjects(ctx, layout, tp, r); err != nil {
		return storageError(ctx, fmt.Errorf("tiered: %s: read replica: follow WAL writer %s: %w", p.prefix, w, err))
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
		var snap []byte
		last, ok, err := p.lastSegment(ctx, h)
		if err != nil {
			return storageError(ctx, err)
		}
		if ok && last.LastOffset+1 == base && last.SnapshotSize > 0 {
			if snap, err = p.remoteIndex(ctx, last, manifest.SnapshotSuffix); err != nil {
				return storageError(ctx, err)
			}
		}
		if err := p.segs.StartAt(ctx, base, snap); err != nil {
			return err
		}
		p.verified = nil
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
	if hw := p.local.Offsets().LogEnd; hw != p.local.Offsets().HighWatermark {
		if err := p.local.SetHighWatermark(hw); err != nil {
			return err
		}
	}
	if lo := p.local.Offsets(); lo.LogStart < base {
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
// r.seen, in number order, up to the first number the bucket does not
// hold yet, and takes tp's extents and marks from them.
func (p *Partition) readWriterObjects(ctx context.Context, layout wal.Layout, tp wal.TopicPartition, r *replicaWAL) error {
	start := ""
	if r.seen > 0 {
		start = layout.Key(r.writer, r.seen)
	}
	var ferr error
	err := p.store.ListAfter(ctx, layout.WriterPrefix(r.writer), start, func(info objstore.ObjectInfo) bool {
		id, seq, err := layout.Parse(info.Key)
		if err != nil || id != r.writer {
			ferr = fmt.Errorf("%w: %v", wal.ErrCorrupt, err)
			return false
		}
		if seq <= r.seen {
			return true
		}
		if seq != r.seen+1 {
			return false // a number still in flight: read on from it next step
		}
		f, err := p.walFooter(ctx, info)
		if err != nil {
			ferr = err
			return false
		}
		if f.Writer != id || f.Sequence != seq {
			ferr = fmt.Errorf("%w: %s holds the footer of writer %s sequence %d", wal.ErrCorrupt, info.Key, f.Writer, f.Sequence)
			return false
		}
		if e, ok := f.Find(tp); ok {
			r.own = append(r.own, wal.Located{Key: info.Key, Writer: id, Sequence: seq, Extent: e})
		}
		if m, ok := f.FindMark(tp); ok && m.Epoch == r.epoch && m.End > r.acked {
			r.acked = m.End
		}
		r.seen = seq
		return true
	})
	if ferr != nil {
		if errors.Is(ferr, objstore.ErrNotFound) {
			// WAL gc removed it: the manifest held is older than the
			// one gc judged by; the next step reads the newer one.
			return fmt.Errorf("%w (the origin consolidated past it)", ferr)
		}
		return ferr
	}
	return err
}

// walFooter reads the footer of a WAL object through the Backend's
// caches: objects are put create-only, so a footer read once serves every
// partition it names.
func (p *Partition) walFooter(ctx context.Context, info objstore.ObjectInfo) (wal.Footer, error) {
	if f, ok := p.caches.footers.get(info.Key); ok {
		return f, nil
	}
	f, err := wal.ReadFooter(ctx, p.store, info.Key, info.Size)
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
