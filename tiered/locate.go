package tiered

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"sort"
	"unsafe"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/index"
	"github.com/tierlog/tierlog/local"
	"github.com/tierlog/tierlog/manifest"
	"github.com/tierlog/tierlog/record"
)

// The window reader every remote read goes through: locate finds a
// batch by the remote offset index and windows of the object, checking
// order as it scans.
//
// The checks stay where the bytes arrive. A window fetched from the
// bucket is walked once, whole, as it lands in the chunk cache
// (walkBatches: each batch's header read, and its order checked against
// the batch before it); the chunk keeps what the walk read. A read that
// finds its window cached walks that instead of the headers: it checks
// only what depends on where it starts (the first batch it reads against
// the offset before it, the index entry it starts from) and the batch
// after the chunk's last walked one, whose header the walk did not have.

// located is a batch of a remote segment found by locate, and how: the
// remote index entry step 2 chose, and the window of bytes (from the chunk
// cache or one ranged GET) that holds the batch.
type located struct {
	indexEntry   index.OffsetEntry
	indexSlot    int // -1: none, the segment's start
	indexEntries int
	scanned      int   // batches scanned to get there
	cached       bool  // the window came from the chunk cache
	pos          int64 // the window's position in the .log
	data         []byte
	walked       walked // data's batches as its chunk's walk on arrival read them
	at           int64  // the batch's offset in data
	entry        record.Entry
	key          objectKey // the segment's .log object
}

// whole reports whether the window holds the found batch whole.
func (l *located) whole() bool { return l.at+l.entry.Size <= int64(len(l.data)) }

// locate finds the first batch of seg holding an offset >= target, as every
// remote read does: the remote offset index gives the position, then
// windows of window bytes from there (each from the chunk cache, or one
// ranged GET that then lands in it) are scanned batch by batch: by what
// the window's walk on arrival read of them, else by their headers. found
// is false when no batch of seg holds target or a later offset. The scan
// checks, for free, that offsets rise strictly from batch to batch inside
// the segment's range (where the walk on arrival did not) and that a
// batch from the index entry ends at its offset (none past it); damage is
// backend.ErrCorruptRecord naming the object and position.
func (p *Partition) locate(ctx context.Context, seg manifest.Segment, target, window int64) (l located, found bool, err error) {
	oi, err := p.remoteOffsetIndex(ctx, seg)
	if err != nil {
		return l, false, err
	}
	l.indexEntry, l.indexSlot, l.indexEntries = oi.LookupSlot(target)
	key := p.objectKey(seg, manifest.LogSuffix)
	l.key = key
	// The scan starts one index entry before the chosen one (at the
	// segment's start before the first), so the batch before any batch it
	// returns is read too: a base offset moved back into the batch before
	// shows as an overlap (checkOrder) instead of a wrong answer.
	var from index.OffsetEntry
	prevLast := seg.BaseOffset - 1
	if scan := l.indexSlot - 1; scan >= 0 {
		from = oi.Entry(scan)
		if scan > 0 {
			prevLast = oi.Entry(scan - 1).Offset // offsets up to it come before the entry's position
		}
	}
	reached := l.indexSlot < 1 // a batch ended at the scan's index entry's offset (see local's translateOffset)
	// whole: the batch at pos is larger than the last window, which is
	// now its size: the next window must hold it whole (the cache's part
	// of it, however large, is not enough).
	whole := false
	for pos := int64(from.Position); pos < seg.Size; {
		n := min(seg.Size-pos, window)
		least := n / 2
		if whole {
			least = n
		}
		data, w, cached, err := p.window(ctx, seg, key, pos, n, least)
		if err != nil {
			return l, false, err
		}
		l.pos, l.data, l.walked, l.cached = pos, data, w, cached
		at := int64(0)
		for at < int64(len(data)) {
			e, known, ordered := w.batch(at)
			if !known {
				if e, err = record.HeaderAt(data, at, int64(len(data))); errors.Is(err, record.ErrTornTail) || err == io.EOF {
					break // the window ends inside this batch
				} else if err != nil {
					return l, false, fmt.Errorf("%w: %s position %d: %w", backend.ErrCorruptRecord, key, pos+at, err)
				}
			}
			if !ordered {
				if err := checkOrder(e, prevLast, seg, key, pos+at); err != nil {
					return l, false, err
				}
			}
			if !reached && e.LastOffset > from.Offset && !e.Holds(from.Offset) {
				return l, false, fmt.Errorf("%w: %s position %d holds offsets up to %d, but its offset index says an append of offsets up to %d starts at position %d",
					backend.ErrCorruptRecord, key, pos+at, e.LastOffset, from.Offset, from.Position)
			}
			reached = reached || e.Holds(from.Offset)
			l.scanned++
			if e.LastOffset >= target {
				l.at, l.entry = at, e
				return l, true, nil
			}
			prevLast = e.LastOffset
			at += e.Size
		}
		if at > 0 {
			pos += at // the next window starts at the batch the last one cut
			whole = false
			continue
		}
		if whole {
			// Asked for whole, and still cut: the object ends inside
			// the batch its header declares.
			return l, false, fmt.Errorf("%w: %s position %d: the batch there declares %d bytes, the object holds %d from there",
				backend.ErrCorruptRecord, key, pos, n, len(data))
		}
		// The batch at pos is larger than the window: its header says how
		// large, and the scan fetches it whole.
		size, err := declaredSize(data, seg.Size-pos, key, pos)
		if err != nil {
			return l, false, err
		}
		window, whole = size, true
	}
	return l, false, nil
}

// checkOrder checks a remote batch header at position pos of the object
// key against the one before it (whose last offset is prevLast) and the
// segment's range: local.SegmentOrder, the rule every reader of a
// segment holds its batches to.
func checkOrder(e record.Entry, prevLast int64, seg manifest.Segment, key objectKey, pos int64) error {
	o := local.NewSegmentOrder(seg.BaseOffset, seg.LastOffset, false)
	o.From(max(prevLast, seg.BaseOffset-1))
	e.Position = pos
	if err := o.Check(&e); err != nil {
		return fmt.Errorf("%w: %s: %w", backend.ErrCorruptRecord, key, err)
	}
	return nil
}

// checkNext checks the batch that starts at pos, just after a read's last
// batch (whose last offset is prevLast), so that no read returns a batch
// the next one overlaps: a base offset moved forward shows only there.
// data holds the object's bytes from pos, perhaps fewer than a header;
// the header is then fetched (through the chunk cache). At the segment's
// end there is nothing to check: the next segment starts past
// seg.LastOffset, which checkOrder holds every batch to.
func (p *Partition) checkNext(ctx context.Context, seg manifest.Segment, key objectKey, pos int64, data []byte, prevLast int64) error {
	left := seg.Size - pos
	if left <= 0 {
		return nil
	}
	n := min(left, record.BatchHeaderSize)
	if int64(len(data)) < n {
		var err error
		if data, _, _, err = p.window(ctx, seg, key, pos, n, n); err != nil {
			return err
		}
	}
	var buf [record.BatchHeaderSize]byte
	e, err := record.ReadHeader(bytesAt{data, pos}, pos, seg.Size, buf[:])
	if err != nil {
		return fmt.Errorf("%w: %s position %d: %w", backend.ErrCorruptRecord, key, pos, err)
	}
	return checkOrder(e, prevLast, seg, key, pos)
}

// bytesAt reads bytes that begin at position pos of an object.
type bytesAt struct {
	data []byte
	pos  int64
}

func (b bytesAt) ReadAt(p []byte, off int64) (int, error) {
	if off < b.pos || off-b.pos > int64(len(b.data)) {
		return 0, io.EOF
	}
	n := copy(p, b.data[off-b.pos:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// window returns bytes of seg's object key from pos, where a batch
// starts, n of them or at least least: from the chunk cache when the
// cached ranges from pos (one, or consecutive ones joined, as read-ahead
// leaves them) hold n bytes, or at least least (a read returns whole
// batches up to MaxBytes, so fewer bytes make a smaller answer, not a
// wrong one), or whole batches up to where the next cached range goes on
// (rangeCache.span's more: the caller's next window starts there, with no
// copy joining the two); else one ranged GET of n bytes, walked
// (walkBatches) and cached. w is what a walk on arrival read of the
// batches from pos on.
func (p *Partition) window(ctx context.Context, seg manifest.Segment, key objectKey, pos, n, least int64) (data []byte, w walked, cached bool, err error) {
	chunks := p.caches.chunks
	data, w, more := chunks.span(key, pos, n)
	if (int64(len(data)) >= min(n, least) || more) && len(data) > 0 {
		chunks.lru.hits.Add(1)
		return data, w, true, nil
	}
	if a := p.ahead.Load(); a != nil && a.key == key && a.start <= pos+int64(len(data)) && a.end > pos {
		// Read-ahead is fetching what follows the cached bytes: a
		// sequential consumer that caught up with it waits for it rather
		// than fetching the same range a second time.
		select {
		case <-a.done:
		case <-ctx.Done():
			return nil, walked{}, false, ctx.Err()
		}
		if data, w, more = chunks.span(key, pos, n); (int64(len(data)) >= min(n, least) || more) && len(data) > 0 {
			chunks.lru.hits.Add(1)
			return data, w, true, nil
		}
	}
	chunks.lru.misses.Add(1)
	if data, err = p.store.ReadAll(ctx, key.String(), pos, n); err != nil {
		return nil, walked{}, false, fmt.Errorf("tiered: %w", err)
	}
	ch := chunk{data: data, batches: walkBatches(data, seg, key, pos), atBatch: true}
	chunks.put(key, pos, ch)
	return data, walkedFrom(ch.batches, 0, pos), false, nil
}

// walkedBatch is a batch of a chunk as walkBatches read its header: where
// it ends in the chunk, and what the order checks and a read use of it.
type walkedBatch struct {
	base, last int64  // record.Entry's BaseOffset and LastOffset
	end        uint32 // its end's offset in the chunk
	magic      int8
}

// walkedBatchBytes is what a walkedBatch takes in memory.
const walkedBatchBytes = int64(unsafe.Sizeof(walkedBatch{}))

// walkBatches walks the whole batches of data, seg's object key's bytes
// from pos, where a batch starts, as they arrive from the bucket: each
// header read (record.HeaderAt) and, from the second on, checked against
// the one before it (checkOrder). It stops at the first batch the window
// cuts or that fails either (the read that gets there reads its header
// again, and reports what is wrong with it).
func walkBatches(data []byte, seg manifest.Segment, key objectKey, pos int64) []walkedBatch {
	if int64(len(data)) > math.MaxUint32 {
		return nil
	}
	var out []walkedBatch
	for at := int64(0); at < int64(len(data)); {
		e, err := record.HeaderAt(data, at, int64(len(data)))
		if err != nil {
			break
		}
		if len(out) > 0 && checkOrder(e, out[len(out)-1].last, seg, key, pos+at) != nil {
			break
		}
		if out == nil {
			// As many as batches of the first's size (a guess: the first may
			// be a marker), trimmed below once the walk is done.
			out = make([]walkedBatch, 0, min(int64(len(data))/e.Size+1, 4096))
		}
		at += e.Size
		out = append(out, walkedBatch{base: e.BaseOffset, last: e.LastOffset, end: uint32(at), magic: e.Magic})
	}
	if cap(out) > len(out)+len(out)/4 {
		// The chunk cache holds the list as long as the bytes: no room
		// beyond the batches it lists.
		out = append(make([]walkedBatch, 0, len(out)), out...)
	}
	return out
}

// walked is what a chunk's walk on arrival read of its batches from one
// of them on: the bytes from pos in the object, skip in the chunk.
type walked struct {
	batches []walkedBatch // from the batch at skip
	skip    int64
	pos     int64
}

// edge is where the walked batches end, from the bytes w starts at: 0
// when none was walked there.
func (w walked) edge() int64 {
	if len(w.batches) == 0 {
		return 0
	}
	return int64(w.batches[len(w.batches)-1].end) - w.skip
}

// walkedFrom is what batches, a chunk's walk, read from skip, pos in the
// object, on: none unless a batch starts there.
func walkedFrom(batches []walkedBatch, skip, pos int64) walked {
	i, start := walkedAt(batches, skip, 0)
	if i == len(batches) || start != skip {
		return walked{}
	}
	return walked{batches: batches[i:], skip: skip, pos: pos}
}

// walkedAt returns the first of batches that ends past off in the chunk,
// and where it starts (batches start at first).
func walkedAt(batches []walkedBatch, off, first int64) (int, int64) {
	i := sort.Search(len(batches), func(i int) bool { return int64(batches[i].end) > off })
	if i == 0 || i == len(batches) {
		return i, first
	}
	return i, int64(batches[i-1].end)
}

// batch returns the batch at at in the bytes w starts at, as the walk on
// arrival read it (known; the Entry has what the order checks and a read
// use, not its Data or MaxTimestamp), and whether that walk checked its
// order against the batch before it there (ordered): a read that walks
// to it from that batch need not again.
func (w walked) batch(at int64) (e record.Entry, known, ordered bool) {
	i, start := walkedAt(w.batches, w.skip+at, w.skip)
	if i == len(w.batches) || start != w.skip+at {
		return e, false, false
	}
	b := w.batches[i]
	return record.Entry{Position: w.pos + at, Size: int64(b.end) - start, Magic: b.magic, BaseOffset: b.base, LastOffset: b.last}, true, i > 0
}
