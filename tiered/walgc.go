package tiered

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/tierlog/tierlog/manifest"
	"github.com/tierlog/tierlog/objstore"
	"github.com/tierlog/tierlog/objstore/seal"
	"github.com/tierlog/tierlog/wal"
)

// Garbage collection of WAL objects (diskless partitions; see
// docs/diskless.md). A WAL object holds the extents of many partitions;
// it goes once none of them needs it, by the rule of every other delete:
// never the last copy of anything, and nothing a commit may still name.
//
//   - A data object is removed once it is older than the grace and every
//     partition its footer names has consolidated past its extent (the
//     committed manifest's segments reach past the extent's last offset)
//     or was deleted (its manifest says so). A partition whose manifest is
//     missing keeps the object: a wrong root or a lost manifest must not
//     cost records. A claim reads a tail only above the segments' end, and
//     a manifest's WAL record names only extents past it, so no claim or
//     commit can name what this removes.
//   - A fence or void is removed once it is older than the grace and its
//     writer has gone past it: put an object of its own (data, or a void
//     of its own) at a higher number. Claims' fences above a writer's
//     last own object stay, however many: the writer, idle, may still
//     come back and put at the lowest of them.
//   - A writer's newest wal.MaxInFlight numbers stay, whatever they hold:
//     a claim fences the number after a writer's highest and fills the
//     gaps among those below it (numbers the writer may still be putting),
//     so one removed there would let a fence land behind a writer still
//     alive, or stop a partition's tail at a number that held its data.
//   - An object that marks a partition's acknowledged end (wal.Mark)
//     past its segments' end stays, whatever else it holds: a read
//     replica serves the partition's tail up to that mark.
//   - An object whose footer does not check is kept and reported;
//     keys under the WAL folder that are not WAL keys are left alone.
//
// The grace (at least MinGCGrace without Force) covers a writer's put in
// flight, a claim in progress and clocks that disagree. Each object
// older than the grace costs one ranged GET (its footer), each partition
// its footers name one GET (its manifest).

// WALGCOptions configure GCWAL.
type WALGCOptions struct {
	// Grace: objects younger than this are kept unread (default and
	// floor: MinGCGrace, unless Force).
	Grace  time.Duration
	Force  bool
	DryRun bool
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Manifests is where the partitions' manifests are read (default
	// the WAL objects' store): a Backend that seals only the topics
	// that ask reads its WAL objects through the sealing store and the
	// manifests, of both kinds, through its own.
	Manifests *objstore.Store
}

// WALObject is one object under a root's WAL folder, as GCWAL judged it.
type WALObject struct {
	Key          string
	Writer       wal.WriterID
	Sequence     uint64
	Size         int64
	LastModified time.Time
	// Footer is the object's footer, when it was read (objects younger
	// than the grace are not).
	Footer *wal.Footer
	// Remove says GCWAL removed it (or would, in a dry run); Why says why
	// it was removed or kept.
	Remove bool
	Why    string
	// Damaged is set when its key or footer does not check.
	Damaged error
}

// ErrWALDamaged: GCWAL kept objects whose footer does not check.
var ErrWALDamaged = errors.New("tiered: damaged WAL objects")

// ListWAL lists the objects under root's WAL folder, in key order,
// reading no footer.
func ListWAL(ctx context.Context, store *objstore.Store, root string) ([]WALObject, error) {
	l := wal.NewLayout(root)
	var out []WALObject
	err := store.List(ctx, l.Prefix(), func(o objstore.ObjectInfo) bool {
		if strings.Contains(o.Key, seal.KeyDir) {
			return true // a sealed bucket's key (listed by a store that is not sealed)
		}
		w := WALObject{Key: o.Key, Size: o.Size, LastModified: o.LastModified}
		w.Writer, w.Sequence, w.Damaged = l.Parse(o.Key)
		out = append(out, w)
		return true
	})
	return out, err
}

// GCWAL removes the WAL objects under root no partition needs (see the
// rules above) unless opts.DryRun, and returns every object with its
// verdict. Damaged objects are kept and reported: the error then wraps
// ErrWALDamaged, after the rest was collected.
func GCWAL(ctx context.Context, store *objstore.Store, root string, opts WALGCOptions) ([]WALObject, error) {
	if opts.Grace == 0 {
		opts.Grace = MinGCGrace
	}
	if opts.Grace < 0 || (opts.Grace < MinGCGrace && !opts.Force) {
		return nil, fmt.Errorf("tiered: WAL gc grace %v is below the safe floor of %v (puts and claims in flight); pass Force to override", opts.Grace, MinGCGrace)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Manifests == nil {
		opts.Manifests = store
	}
	objs, err := ListWAL(ctx, store, root)
	if err != nil {
		return nil, err
	}
	highest := map[wal.WriterID]uint64{}
	numbers := map[wal.WriterID][]int{} // each writer's objects, in number order
	for i, o := range objs {
		if o.Damaged == nil {
			highest[o.Writer] = max(highest[o.Writer], o.Sequence)
			numbers[o.Writer] = append(numbers[o.Writer], i)
		}
	}
	// Each writer's last own object: read from its highest number down
	// past claims' fences (one footer read a writer, as a rule).
	own := map[wal.WriterID]uint64{}
	for w, idx := range numbers {
		slices.SortFunc(idx, func(a, b int) int { return cmp.Compare(objs[a].Sequence, objs[b].Sequence) })
		for k := len(idx) - 1; k >= 0; k-- {
			o := objs[idx[k]]
			f, err := wal.ReadFooter(ctx, store, o.Key, o.Size)
			if errors.Is(err, wal.ErrCorrupt) {
				continue // judged (kept, reported) below
			}
			if err != nil {
				return objs, err
			}
			if !f.Fence || len(f.Extents) == 0 {
				own[w] = o.Sequence
				break
			}
		}
	}
	ends := map[wal.TopicPartition]partitionEnd{}
	now := opts.Now()
	var remove []string
	var damaged int
	for i := range objs {
		o := &objs[i]
		switch {
		case o.Damaged != nil:
			o.Why = "not a WAL key: left alone"
			o.Damaged = nil
			continue
		case now.Sub(o.LastModified) < opts.Grace:
			o.Why = "younger than the grace"
			continue
		}
		if o.Sequence+wal.MaxInFlight > highest[o.Writer] {
			o.Why = fmt.Sprintf("among its writer's newest %d numbers (a claim fences after them and fills their gaps)", wal.MaxInFlight)
			continue
		}
		f, err := wal.ReadFooter(ctx, store, o.Key, o.Size)
		if errors.Is(err, wal.ErrCorrupt) {
			o.Damaged, o.Why = err, "its footer does not check: kept"
			damaged++
			continue
		}
		if err != nil {
			return objs, err
		}
		o.Footer = &f
		if f.Fence {
			if o.Sequence < own[o.Writer] {
				o.Remove, o.Why = true, "a fence its writer has passed"
				remove = append(remove, o.Key)
			} else {
				o.Why = "a fence above its writer's last own object: it may still stop it"
			}
			continue
		}
		o.Remove, o.Why = true, "every partition in it consolidated past it or was deleted"
		endOf := func(tp wal.TopicPartition) (partitionEnd, error) {
			end, ok := ends[tp]
			if !ok {
				if end, err = readPartitionEnd(ctx, opts.Manifests, root, tp); err != nil {
					return end, err
				}
				ends[tp] = end
			}
			return end, nil
		}
		for _, e := range f.Extents {
			end, err := endOf(e.TopicPartition)
			if err != nil {
				return objs, err
			}
			if why := end.needs(e); why != "" {
				o.Remove, o.Why = false, why
				break
			}
		}
		for _, m := range f.Marks {
			if !o.Remove {
				break
			}
			end, err := endOf(m.TopicPartition)
			if err != nil {
				return objs, err
			}
			if why := end.needsMark(m); why != "" {
				o.Remove, o.Why = false, why
			}
		}
		if o.Remove {
			remove = append(remove, o.Key)
		}
	}
	if !opts.DryRun && len(remove) > 0 {
		if err := store.Delete(ctx, remove...); err != nil {
			return objs, err
		}
	}
	if damaged > 0 {
		return objs, fmt.Errorf("%w: %d under %s kept (see each object's error)", ErrWALDamaged, damaged, wal.NewLayout(root).Prefix())
	}
	return objs, nil
}

// partitionEnd is what WAL gc needs of a partition's manifest.
type partitionEnd struct {
	missing, deleted bool
	end              int64 // offsets below are in the bucket's segments
}

// needs says why the partition still needs extent e ("" when it does
// not).
func (p partitionEnd) needs(e wal.Extent) string {
	switch {
	case p.deleted:
		return ""
	case p.missing:
		return fmt.Sprintf("%s has no manifest: kept", e.TopicPartition)
	case e.LastOffset >= p.end:
		return fmt.Sprintf("%s offsets %d..%d are not in its segments yet (they end at %d)", e.TopicPartition, e.FirstOffset, e.LastOffset, p.end)
	}
	return ""
}

// needsMark says why the partition's read replicas may still need mark m
// ("" when they do not): it says which of the writer's records are final
// past the segments' end.
func (p partitionEnd) needsMark(m wal.Mark) string {
	if p.deleted || p.missing || m.End <= p.end {
		return ""
	}
	return fmt.Sprintf("it marks %s acknowledged to %d, past its segments' end %d (read replicas serve the tail by it)", m.TopicPartition, m.End, p.end)
}

func readPartitionEnd(ctx context.Context, store *objstore.Store, root string, tp wal.TopicPartition) (partitionEnd, error) {
	key := manifest.PartitionLayout(strings.Trim(root, "/"), tp.Topic, tp.Partition).Manifest()
	data, err := store.ReadAll(ctx, key, 0, -1)
	if errors.Is(err, objstore.ErrNotFound) {
		return partitionEnd{missing: true}, nil
	}
	if err != nil {
		return partitionEnd{}, err
	}
	if seal.LooksSealed(data) {
		return partitionEnd{}, fmt.Errorf("tiered: WAL gc: %s: %w", key, seal.ErrSealedObject)
	}
	h, err := manifest.DecodeHead(data) // its end is in the head: no part is read
	if err != nil {
		return partitionEnd{}, fmt.Errorf("tiered: WAL gc: %s: %w", key, err)
	}
	return partitionEnd{deleted: h.Deleted(), end: max(h.LastOffset()+1, h.LogStartOffset())}, nil
}
