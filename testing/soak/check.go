package soak

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"sync/atomic"
	"time"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/objstore"
	"github.com/tierlog/tierlog/record"
	"github.com/tierlog/tierlog/tiered"
)

// Violation is a promise tierlog broke: an acknowledged-and-flushed record
// lost or altered, a hole or a duplicate between the log start and the log
// end, a record served below the log start, a compacted key whose latest
// value is gone. The soak stops at the first one.
type Violation struct {
	Topic string
	What  string
}

func (v *Violation) Error() string { return fmt.Sprintf("soak: %s: %s", v.Topic, v.What) }

func violation(topic, format string, args ...any) error {
	return &Violation{Topic: topic, What: fmt.Sprintf(format, args...)}
}

// errIncomplete means a check could not read everything because the
// bucket failed retryably (a fault was on): nothing wrong was seen, and
// the next check reads it all again.
var errIncomplete = errors.New("soak: check incomplete: the bucket failed retryably")

// retryable reports whether err is a failure that may pass when tried
// again: the bucket did not answer, or answered with a retryable error.
func retryable(err error) bool {
	return errors.Is(err, objstore.ErrRetryable) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, tiered.ErrCommitWindow)
}

// checked counts what one check read.
type checked struct {
	recordsA, remoteRecordsA, recordsB, recordsC, remoteRecordsC int64
	bytes                                                        int64
}

func (c *checked) add(o checked) {
	c.recordsA += o.recordsA
	c.remoteRecordsA += o.remoteRecordsA
	c.recordsB += o.recordsB
	c.recordsC += o.recordsC
	c.remoteRecordsC += o.remoteRecordsC
	c.bytes += o.bytes
}

// readRetries counts reads the bucket failed retryably and readAt tried
// again.
var readRetries atomic.Int64

// readAt reads whole batches from offset, retrying reads the bucket
// failed retryably a few times.
func readAt(ctx context.Context, p backend.Partition, offset int64, maxBytes int) ([]byte, error) {
	var err error
	for try := 0; try < 3; try++ {
		if try > 0 {
			readRetries.Add(1)
			time.Sleep(time.Duration(try) * 50 * time.Millisecond)
		}
		var recs backend.Records
		recs, err = p.Read(ctx, offset, backend.ReadOptions{MaxBytes: maxBytes, MinOneBatch: true})
		if err == nil {
			var buf bytes.Buffer
			_, err = recs.WriteTo(&buf)
			recs.Close()
			if err == nil {
				return buf.Bytes(), nil
			}
		}
		if !retryable(err) {
			return nil, err
		}
	}
	return nil, fmt.Errorf("%w: read at %d: %w", errIncomplete, offset, err)
}

// readErr turns a read's error into errIncomplete (retryable) or a
// violation (anything else: a read of a committed offset must succeed).
func readErr(topic string, offset int64, err error) error {
	if errors.Is(err, errIncomplete) {
		return err
	}
	return violation(topic, "read at offset %d failed: %v", offset, err)
}

// checkA checks topic A through the tiered partition against the ledger:
// every offset from the log start to the log end is read, in order, from
// the bucket below the local log start and from local disk above it;
// each batch must be the ledger's, byte for byte (so no record is lost,
// altered, duplicated or out of place), the log must reach every
// acknowledged offset, and nothing below the log start may be served.
// Then a few point reads (the tier border among them) must return the
// batch holding the offset asked for.
func checkA(ctx context.Context, p *tiered.Partition, m *modelA, rng *rand.Rand) (checked, error) {
	var c checked
	o := p.Offsets()
	if o.LogEnd < m.flushed {
		return c, violation("A", "the log ends at %d, but records up to %d were acknowledged (flushed): %d records lost",
			o.LogEnd, m.flushed-1, m.flushed-o.LogEnd)
	}
	if o.LogEnd != m.end() {
		return c, violation("A", "the log ends at %d, the ledger at %d", o.LogEnd, m.end())
	}
	if o.LogStart > o.LocalLogStart || o.LocalLogStart > o.LogEnd {
		return c, violation("A", "offsets out of order: %+v", o)
	}
	if o.LogStart > 0 {
		for _, below := range []int64{o.LogStart - 1, rng.Int64N(o.LogStart)} {
			recs, err := p.Read(ctx, below, backend.ReadOptions{MaxBytes: 1, MinOneBatch: true})
			if err == nil {
				n := recs.Len()
				recs.Close()
				return c, violation("A", "a read at %d, below the log start %d, served %d bytes", below, o.LogStart, n)
			}
			if !errors.Is(err, backend.ErrOffsetOutOfRange) {
				return c, violation("A", "a read at %d, below the log start %d: %v, want an offset out of range", below, o.LogStart, err)
			}
		}
	}
	off := o.LogStart
	for first := true; off < o.LogEnd; first = false {
		data, err := readAt(ctx, p, off, 512<<10)
		if err != nil {
			return c, readErr("A", off, err)
		}
		if len(data) == 0 {
			return c, violation("A", "an empty read at %d, below the log end %d", off, o.LogEnd)
		}
		c.bytes += int64(len(data))
		remote := off < o.LocalLogStart
		sc := record.NewScanner(bytes.NewReader(data), 0, int64(len(data)), record.ScanOptions{Validate: true})
		for k := 0; sc.Next(); k++ {
			e := sc.Entry()
			switch {
			case k == 0 && first && (e.BaseOffset > off || e.LastOffset < off):
				return c, violation("A", "a read at the log start %d returned batch %d..%d first", off, e.BaseOffset, e.LastOffset)
			case (k > 0 || !first) && e.BaseOffset != off:
				return c, violation("A", "batch %d..%d follows offset %d: %s", e.BaseOffset, e.LastOffset, off-1, gapOrDup(e.BaseOffset, off))
			}
			if err := matchA(m, e); err != nil {
				return c, err
			}
			n := int64(e.Batch().NumRecords())
			c.recordsA += n
			if remote {
				c.remoteRecordsA += n
			}
			off = e.LastOffset + 1
		}
		if err := sc.Err(); err != nil {
			return c, violation("A", "a read at %d returned damaged batches: %v", off, err)
		}
	}
	if off != o.LogEnd {
		return c, violation("A", "batches run to %d, past the log end %d", off, o.LogEnd)
	}
	// Point reads: random offsets, and the border between the tiers.
	points := []int64{o.LocalLogStart - 1, o.LocalLogStart}
	for range 4 {
		if o.LogEnd > o.LogStart {
			points = append(points, o.LogStart+rng.Int64N(o.LogEnd-o.LogStart))
		}
	}
	for _, x := range points {
		if x < o.LogStart || x >= o.LogEnd {
			continue
		}
		data, err := readAt(ctx, p, x, 1)
		if err != nil {
			return c, readErr("A", x, err)
		}
		sc := record.NewScanner(bytes.NewReader(data), 0, int64(len(data)), record.ScanOptions{Validate: true})
		if !sc.Next() {
			return c, violation("A", "a read at %d returned no batch (%v)", x, sc.Err())
		}
		e := sc.Entry()
		if e.BaseOffset > x || e.LastOffset < x {
			return c, violation("A", "a read at %d returned batch %d..%d first", x, e.BaseOffset, e.LastOffset)
		}
		if err := matchA(m, e); err != nil {
			return c, err
		}
		c.bytes += int64(len(data))
	}
	recs, err := p.Read(ctx, o.LogEnd, backend.ReadOptions{MaxBytes: 1, MinOneBatch: true})
	if err != nil {
		return c, violation("A", "a read at the log end %d: %v, want empty records", o.LogEnd, err)
	}
	n := recs.Len()
	recs.Close()
	if n != 0 {
		return c, violation("A", "a read at the log end %d served %d bytes", o.LogEnd, n)
	}
	return c, nil
}

func gapOrDup(base, want int64) string {
	if base > want {
		return fmt.Sprintf("offsets %d..%d are missing", want, base-1)
	}
	return fmt.Sprintf("offsets from %d are served twice", base)
}

// matchA checks a batch read from A against the ledger, byte for byte.
func matchA(m *modelA, e *record.Entry) error {
	i := m.find(e.BaseOffset)
	if i < 0 {
		return violation("A", "batch %d..%d is not in the ledger (which ends at %d)", e.BaseOffset, e.LastOffset, m.end())
	}
	want := m.batches[i]
	if want.base != e.BaseOffset || want.last != e.LastOffset {
		return violation("A", "batch %d..%d read where the ledger has batch %d..%d", e.BaseOffset, e.LastOffset, want.base, want.last)
	}
	if got := sum(e.Data); got != want.sum {
		return violation("A", "batch %d..%d (%d records) altered: its bytes differ from those appended", e.BaseOffset, e.LastOffset, want.records)
	}
	return nil
}

// checkKeyed checks a compacted topic against the ledger: B, a local
// log, or C, a tiered partition read through both tiers. Every
// record served is one that was appended, unaltered, at its offset, in
// increasing offsets; the log reaches every acknowledged offset; and for
// every key the latest acknowledged write is still served, or a later
// write of the key is, or (a tombstone past its horizon) the key is gone
// altogether, never leaving an older value behind.
func checkKeyed(ctx context.Context, topic string, l backend.Partition, m *modelB) (checked, error) {
	var c checked
	records := &c.recordsB
	if topic == "C" {
		records = &c.recordsC
	}
	o := l.Offsets()
	if o.LogEnd < m.flushed {
		return c, violation(topic, "the log ends at %d, but records up to %d were acknowledged (flushed)", o.LogEnd, m.flushed-1)
	}
	if o.LogEnd != m.end {
		return c, violation(topic, "the log ends at %d, the ledger at %d", o.LogEnd, m.end)
	}
	if o.LogStart > 0 {
		if recs, err := l.Read(ctx, o.LogStart-1, backend.ReadOptions{MaxBytes: 1, MinOneBatch: true}); err == nil {
			recs.Close()
			return c, violation(topic, "a read at %d, below the log start %d, succeeded", o.LogStart-1, o.LogStart)
		}
	}
	lastPresent := map[int32]int64{}
	var it record.Iterator
	next, prev := o.LogStart, int64(-1)
	for next < o.LogEnd {
		data, err := readAt(ctx, l, next, 1<<20)
		if err != nil {
			return c, readErr(topic, next, err)
		}
		if len(data) == 0 {
			return c, violation(topic, "an empty read at %d, below the log end %d", next, o.LogEnd)
		}
		c.bytes += int64(len(data))
		sc := record.NewScanner(bytes.NewReader(data), 0, int64(len(data)), record.ScanOptions{Validate: true})
		for sc.Next() {
			e := sc.Entry()
			if e.LastOffset < next {
				return c, violation(topic, "batch %d..%d read at %d: offsets go back", e.BaseOffset, e.LastOffset, next)
			}
			if err := it.Reset(e.Data); err != nil {
				return c, violation(topic, "batch %d..%d: %v", e.BaseOffset, e.LastOffset, err)
			}
			for it.Next() {
				r := it.Record()
				if r.Offset <= prev {
					return c, violation(topic, "record %d follows record %d: a duplicate or out of order", r.Offset, prev)
				}
				prev = r.Offset
				if r.Offset < o.LogStart {
					continue // the batch holding the log start
				}
				want, ok := m.recs[r.Offset]
				if !ok {
					return c, violation(topic, "record %d is not in the ledger", r.Offset)
				}
				if recordDigest(r) != want.sum {
					return c, violation(topic, "record %d (key %d) altered: its timestamp, key, value or headers differ from those appended", r.Offset, want.key)
				}
				lastPresent[want.key] = r.Offset
				*records++
				if topic == "C" && r.Offset < o.LocalLogStart {
					c.remoteRecordsC++
				}
			}
			if err := it.Err(); err != nil {
				return c, violation(topic, "batch %d..%d: %v", e.BaseOffset, e.LastOffset, err)
			}
			next = e.LastOffset + 1
		}
		if err := sc.Err(); err != nil {
			return c, violation(topic, "a read at %d returned damaged batches: %v", next, err)
		}
	}
	keys := make([]int32, 0, len(m.writes))
	for k := range m.writes {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i] < keys[j] })
	for _, k := range keys {
		w := m.writes[k]
		i := sort.Search(len(w), func(i int) bool { return w[i] >= m.flushed }) - 1
		if i < 0 {
			continue // no acknowledged write of the key
		}
		latest := w[i]
		lp, ok := lastPresent[k]
		switch {
		case ok && lp >= latest:
		case ok:
			return c, violation(topic, "key %d: its latest acknowledged write (offset %d) is gone but an older one (offset %d) is served", k, latest, lp)
		case !m.recs[latest].tomb:
			return c, violation(topic, "key %d: its latest acknowledged value (offset %d) is gone", k, latest)
		}
	}
	return c, nil
}
