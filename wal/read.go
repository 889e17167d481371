package wal

import (
	"context"
	"errors"
	"fmt"

	"github.com/tierlog/tierlog/objstore"
	"github.com/tierlog/tierlog/objstore/seal"
)

// tailRead is how many bytes of an object's end one read of its footer
// asks for: the footer of an object of up to about 1,000 partitions fits.
const tailRead = 64 << 10

// ReadFooter reads and checks the footer of the object at key, of size
// bytes (from a List), in one ranged GET when the footer fits in the last
// 64 KiB, else two. A footer that does not check at that size is read
// again at the size a HEAD gives, when that differs: a sealed store's List
// computes its sizes with its own chunk size (objstore/seal), which an
// object sealed with another lists a few bytes off.
func ReadFooter(ctx context.Context, store *objstore.Store, key string, size int64) (Footer, error) {
	f, err := readFooter(ctx, store, key, size)
	if errors.Is(err, ErrCorrupt) || errors.Is(err, objstore.ErrInvalidRange) {
		if info, herr := store.Head(ctx, key); herr == nil && info.Size != size {
			f, err = readFooter(ctx, store, key, info.Size)
		}
	}
	if errors.Is(err, ErrCorrupt) {
		// A sealed object read through a store that is not sealed is
		// not a damaged one: say what it needs.
		if front, ferr := store.ReadAll(ctx, key, 0, 8); ferr == nil && seal.LooksSealed(front) {
			return Footer{}, fmt.Errorf("wal: %s: %w", key, seal.ErrSealedObject)
		}
	}
	return f, err
}

func readFooter(ctx context.Context, store *objstore.Store, key string, size int64) (Footer, error) {
	n := min(size, tailRead)
	tail, err := store.ReadAll(ctx, key, size-n, n)
	if err != nil {
		return Footer{}, err
	}
	flen, err := FooterLen(tail, size)
	if err != nil {
		return Footer{}, fmt.Errorf("%s: %w", key, err)
	}
	if need := int64(flen + trailerSize); need > n {
		if tail, err = store.ReadAll(ctx, key, size-need, need); err != nil {
			return Footer{}, err
		}
	}
	f, err := DecodeFooter(tail, size)
	if err != nil {
		return Footer{}, fmt.Errorf("%s: %w", key, err)
	}
	return f, nil
}

// ReadObjectFooter reads the footer of the object at key, its size
// (and ETag) found by a HEAD.
func ReadObjectFooter(ctx context.Context, store *objstore.Store, key string) (Footer, objstore.ObjectInfo, error) {
	info, err := store.Head(ctx, key)
	if err != nil {
		return Footer{}, info, err
	}
	f, err := ReadFooter(ctx, store, key, info.Size)
	return f, info, err
}

// ReadExtent reads an extent's bytes from the object at key with one
// ranged GET and checks them against the extent's CRC-32C.
func ReadExtent(ctx context.Context, store *objstore.Store, key string, e Extent) ([]byte, error) {
	b, err := store.ReadAll(ctx, key, e.Position, int64(e.Size))
	if err != nil {
		return nil, err
	}
	if err := CheckExtent(e, b); err != nil {
		return nil, fmt.Errorf("%s: %w", key, err)
	}
	return b, nil
}

// Object is one WAL object as a scan finds it.
type Object struct {
	Key    string
	Size   int64
	Footer Footer
}

// errStop ends a Scan early without an error.
var errStop = errors.New("wal: scan stopped")

// Scan calls fn with each of writer w's objects whose sequence number is
// above after, in order, their footers read and checked, until fn returns
// false. An object whose key or footer does not check is an error naming
// it (ErrCorrupt), as is a footer that names another writer or sequence
// number than its key.
func Scan(ctx context.Context, store *objstore.Store, l Layout, w WriterID, after uint64, fn func(Object) bool) error {
	prefix, start := l.WriterPrefix(w), ""
	if after > 0 {
		start = l.Key(w, after)
	}
	var ferr error
	err := store.ListAfter(ctx, prefix, start, func(info objstore.ObjectInfo) bool {
		id, seq, err := l.Parse(info.Key)
		if err != nil {
			ferr = fmt.Errorf("%w: %v", ErrCorrupt, err)
			return false
		}
		if seq <= after {
			return true
		}
		f, err := ReadFooter(ctx, store, info.Key, info.Size)
		if err != nil {
			ferr = err
			return false
		}
		if f.Writer != id || f.Sequence != seq {
			ferr = fmt.Errorf("%w: %s holds the footer of writer %s sequence %d", ErrCorrupt, info.Key, f.Writer, f.Sequence)
			return false
		}
		if !fn(Object{Key: info.Key, Size: info.Size, Footer: f}) {
			ferr = errStop
			return false
		}
		return true
	})
	if errors.Is(ferr, errStop) {
		return nil
	}
	if ferr != nil {
		return ferr
	}
	return err
}

// Located is a partition's extent in one object.
type Located struct {
	Key      string
	Writer   WriterID
	Sequence uint64
	Extent   Extent
}

// Tail returns the extents of each of tps in writer w's objects
// numbered above after and below below (0: no bound), in order, each
// partition's stopping at the first fence that names it at an epoch of
// at least epoch (the epoch w leads them at, from the claim that named
// it: a fence below it is stale, see Writer.Lead): what w acknowledged of
// them in that range. One scan serves every partition, so a new leader of
// many partitions reads each footer once. Fences that name none of a
// partition, and voided numbers, hold nothing of it.
func Tail(ctx context.Context, store *objstore.Store, l Layout, w WriterID, after, below uint64, epoch int32, tps ...TopicPartition) (map[TopicPartition][]Located, error) {
	out := make(map[TopicPartition][]Located, len(tps))
	live := make(map[TopicPartition]bool, len(tps))
	for _, tp := range tps {
		live[tp] = true
	}
	err := Scan(ctx, store, l, w, after, func(o Object) bool {
		if below > 0 && o.Footer.Sequence >= below {
			return false
		}
		for tp := range live {
			if o.Footer.Fences(tp) && o.Footer.FenceEpoch >= epoch {
				delete(live, tp)
			} else if e, ok := o.Footer.Find(tp); ok {
				out[tp] = append(out[tp], Located{Key: o.Key, Writer: w, Sequence: o.Footer.Sequence, Extent: e})
			}
		}
		return len(live) > 0
	})
	return out, err
}

// Span is the part of an extent a partition's log takes: the batches of
// its offsets From to To.
type Span struct {
	Located
	From, To int64
}

// Chain returns a partition's log from offset next on as its extents make
// it (in the order they were appended: a manifest's record of them, then
// a writer's tail in number order, as Tail returns it). A later extent
// wins over the earlier ones it overlaps: a writer appends an offset
// again only after cutting its log back below it, so the later bytes are
// the log's (an earlier extent that landed but was failed, as appends
// above a failed one or dropped by a Reset are, is cut off so). An extent
// that starts past the log's end so far is left out: it lies above a
// voided number, was failed, and its offsets were appended again later
// or never acknowledged. Extents wholly below next are left out (the log
// holds them already), and one that straddles it is taken from next.
func Chain(next int64, extents []Located) []Span {
	floor := next
	var out []Span
	for _, l := range extents {
		e := l.Extent
		if e.LastOffset < floor || e.FirstOffset > next {
			continue
		}
		from := max(e.FirstOffset, floor)
		for len(out) > 0 && out[len(out)-1].From >= from {
			out = out[:len(out)-1]
		}
		if n := len(out); n > 0 && out[n-1].To >= from {
			out[n-1].To = from - 1
		}
		out = append(out, Span{Located: l, From: from, To: e.LastOffset})
		next = e.LastOffset + 1
	}
	return out
}
