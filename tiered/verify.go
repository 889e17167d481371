package tiered

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/local"
	"github.com/tierlog/tierlog/manifest"
	"github.com/tierlog/tierlog/objstore"
	"github.com/tierlog/tierlog/record"
	"github.com/tierlog/tierlog/vfs"
)

// Before local retention deletes a local segment, the bucket must hold
// that segment, byte for byte: a manifest entry with the same base and
// last offset, size and CRC-32C as the local file (the CRC computed from
// the local file, never taken from the manifest alone), whose objects
// exist. When no entry lines up with the local segment (a follower, or a
// leader whose segments were rolled elsewhere than the bucket's), the
// bucket's bytes for the same offsets are read back and compared with the
// local file's. A writer whose local log diverged from the bucket's
// (another writer's data under the same offsets) keeps its own.

// ErrDiverged means a local segment differs from the bucket's copy of the
// same offsets: local retention keeps it, and an operator must decide
// which copy is right.
var ErrDiverged = errors.New("tiered: local log and bucket disagree")

// verifiedSegment is a local segment known to be in the bucket: the
// manifest entry (by id) and the local file's size.
type verifiedSegment struct {
	id     [8]byte
	size   int64
	last   int64
	ranged bool // compared with the bucket's bytes, not one entry's
	// headed says the objects were seen in the bucket; until then only
	// the bytes are known to match (the upload's CRC was the local file's).
	headed bool
}

// uploadedLocked records segments this writer just committed from its own
// local files: their CRCs were computed from those files, so only the
// objects' presence is left to check, when local retention is about to
// rely on them (a PUT that succeeded is durable; the check guards against
// anything that removed them since). REQUIRES: p.mu held.
func (p *Partition) uploadedLocked(segs []manifest.Segment) {
	for _, seg := range segs {
		p.markVerifiedLocked(seg, false)
	}
}

func (p *Partition) markVerifiedLocked(seg manifest.Segment, headed bool) {
	if p.verified == nil {
		p.verified = map[int64]verifiedSegment{}
	}
	p.verified[seg.BaseOffset] = verifiedSegment{id: seg.ID, size: seg.Size, last: seg.LastOffset, headed: headed}
}

// headObjects checks that a segment's objects exist with the sizes the
// manifest records (the bucket check's shallow check of each).
func (p *Partition) headObjects(ctx context.Context, seg manifest.Segment) error {
	for _, suf := range seg.Objects() {
		size, crc := seg.Object(suf)
		if err := checkObject(ctx, p.store, nil, p.layout().Segment(seg, suf), size, crc, "", CheckOptions{}, nil); err != nil {
			return err
		}
	}
	return nil
}

// bucketHoldsLocked says whether the bucket holds exactly the local
// segment si; an error says why not (ErrDiverged when the copies differ).
// REQUIRES: p.mu held.
func (p *Partition) bucketHoldsLocked(ctx context.Context, head *manifest.Head, si local.SegmentInfo) error {
	v, known := p.verified[si.BaseOffset]
	if known && v.ranged && v.size == si.Size && v.last == si.NextOffset-1 {
		return nil
	}
	seg, ok, err := p.holding(ctx, head, si.BaseOffset)
	if err != nil {
		return err
	}
	if !ok || seg.BaseOffset != si.BaseOffset || seg.LastOffset != si.NextOffset-1 {
		return p.compareWithBucketLocked(ctx, head, si)
	}
	if known && v.id == seg.ID && v.size == si.Size && v.last == si.NextOffset-1 {
		if !v.headed {
			if err := p.headObjects(ctx, seg); err != nil {
				return err
			}
			p.markVerifiedLocked(seg, true)
		}
		return nil
	}
	h, err := p.segs.OpenSegment(si.BaseOffset)
	if err != nil {
		return fmt.Errorf("tiered: %w", err)
	}
	defer h.Close()
	var mine manifest.Segment
	mine.BaseOffset, mine.MaxTimestamp = si.BaseOffset, -1
	if err := p.scanForUpload(ctx, h, 0, &mine, nil); err != nil {
		return err
	}
	if h.Size() != seg.Size || mine.LogCRC != seg.LogCRC {
		return fmt.Errorf("%w: local segment %s (%d bytes, CRC-32C %08x) is not the bucket's %s (%d bytes, CRC-32C %08x)",
			ErrDiverged, h.Path(), h.Size(), mine.LogCRC, p.layout().Segment(seg, manifest.LogSuffix), seg.Size, seg.LogCRC)
	}
	if err := p.headObjects(ctx, seg); err != nil {
		return err
	}
	p.markVerifiedLocked(seg, true)
	return nil
}

// compareWithBucketLocked shows that the bucket holds the local segment
// si's offsets as the same bytes when no manifest entry lines up with it:
// for each remote segment covering part of it, from the batch where that
// part begins, the bucket's bytes are read (streamed, never held whole)
// and compared with the local file's. REQUIRES: p.mu held.
func (p *Partition) compareWithBucketLocked(ctx context.Context, head *manifest.Head, si local.SegmentInfo) error {
	h, err := p.openCovered(head, si)
	if err != nil {
		return err
	}
	defer h.Close()
	off, localPos := si.BaseOffset, int64(0)
	if first := head.FirstOffset(); first > off {
		// The bucket starts inside the segment: what lies below it is below
		// the partition's log start, deletable without a copy.
		if localPos, err = batchStart(h, first); err != nil {
			return err
		}
		off = first
	}
	buf := make([]byte, 2*compareChunk)
	for localPos < h.Size() {
		seg, ok, err := p.holding(ctx, head, off)
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("%w: the bucket does not hold offset %d of local segment %s", ErrDiverged, off, h.Path())
		}
		l, found, err := p.locate(ctx, seg, off, 64<<10)
		if err != nil {
			return err
		}
		key := p.layout().Segment(seg, manifest.LogSuffix)
		if !found || l.entry.BaseOffset != off {
			return fmt.Errorf("%w: %s has no batch beginning at offset %d, where local segment %s has one", ErrDiverged, key, off, h.Path())
		}
		remotePos := l.pos + l.at
		n := min(seg.Size-remotePos, h.Size()-localPos)
		if err := p.compareRange(ctx, key, remotePos, h, localPos, n, buf); err != nil {
			return err
		}
		localPos += n
		off = seg.LastOffset + 1
	}
	p.markRangeVerifiedLocked(si)
	return nil
}

// openCovered opens the local segment si, which the bucket must hold
// the offsets of (head's segments reach its end; ErrDiverged otherwise).
func (p *Partition) openCovered(head *manifest.Head, si local.SegmentInfo) (*local.SegmentHandle, error) {
	if last := head.LastOffset(); si.NextOffset-1 > last {
		return nil, fmt.Errorf("%w: local segment %d..%d is not wholly in the bucket, which ends at %d", ErrDiverged, si.BaseOffset, si.NextOffset-1, last)
	}
	h, err := p.segs.OpenSegment(si.BaseOffset)
	if err != nil {
		return nil, fmt.Errorf("tiered: %w", err)
	}
	return h, nil
}

// compareChunk is how much of a remote range compareRange compares at once.
const compareChunk = 1 << 20

// compareRange compares n bytes of the object key from remotePos with the
// local segment's from localPos.
func (p *Partition) compareRange(ctx context.Context, key string, remotePos int64, h *local.SegmentHandle, localPos, n int64, buf []byte) error {
	rc, _, err := p.store.Get(ctx, key, remotePos, n)
	if err != nil {
		return fmt.Errorf("tiered: compare %s with the local segment: %w", key, err)
	}
	defer rc.Close()
	remote, mine := buf[:compareChunk], buf[compareChunk:]
	for done := int64(0); done < n; {
		k := int(min(n-done, compareChunk))
		if _, err := io.ReadFull(rc, remote[:k]); err != nil {
			return fmt.Errorf("tiered: compare %s with the local segment: %w", key, err)
		}
		if _, err := h.ReadAt(mine[:k], localPos+done); err != nil {
			return fmt.Errorf("tiered: %s: %w", h.Path(), err)
		}
		if !bytes.Equal(remote[:k], mine[:k]) {
			return fmt.Errorf("%w: %s at %d and local segment %s at %d differ", ErrDiverged, key, remotePos+done, h.Path(), localPos+done)
		}
		done += int64(k)
		p.metrics.VerifyBytes.Add(int64(k))
	}
	return nil
}

func (p *Partition) markRangeVerifiedLocked(si local.SegmentInfo) {
	if p.verified == nil {
		p.verified = map[int64]verifiedSegment{}
	}
	p.verified[si.BaseOffset] = verifiedSegment{size: si.Size, last: si.NextOffset - 1, ranged: true}
}

// The bucket check: the one check of a manifest's objects, behind tierctl
// verify --store and tierctl manifest verify. Every object each segment
// records (manifest.Segment.Objects: the .log, its indexes and whichever
// of the .txnindex, producer snapshot and leader-epoch checkpoint it has)
// is headed for its size and, when deep, read whole for its CRC-32C, and
// what is wrong is reported on that object.

// ObjectCheck is what the bucket check found of one object of a segment.
type ObjectCheck struct {
	Key  string
	Kind manifest.Kind
	// Size is the object's size the manifest records.
	Size int64
	// Path is, with CheckOptions.Dir, the local file holding the
	// object's bytes (only when Err is nil); it is removed once the
	// segment's callback returns.
	Path string
	// Err says what is wrong with the object, naming Key: missing (or
	// unreadable: the store's error), of another size or, when deep,
	// another CRC-32C than the manifest records (backend.ErrCorruptRecord).
	// nil: the object is as the manifest records.
	Err error
}

// CheckOptions configure CheckBucket.
type CheckOptions struct {
	// Deep reads every object and checks its CRC-32C too.
	Deep bool
	// Dir, with Deep, keeps the bytes of each object that checks in Dir
	// under its local file name (Kafka's) while the segment's callback
	// runs, for checks of the content.
	Dir string
	// FS is the file system Dir is on (vfs.Default when nil).
	FS vfs.FS
	// OnProgress is called with the bytes read, when Deep.
	OnProgress func(n int64)
}

// CheckBucket checks every object each of m's segments records under
// prefix (a partition's prefix), segment by segment, and calls fn with
// each segment and the check of each of its objects, in the order of
// Segment.Objects; an error fn returns ends the check and is returned, as
// is ctx's. What is wrong with an object is in its ObjectCheck, not in the
// error CheckBucket returns.
func CheckBucket(ctx context.Context, store *objstore.Store, prefix string, m *manifest.Manifest, opts CheckOptions,
	fn func(s manifest.Segment, objects []ObjectCheck) error) error {
	l := manifest.NewLayout(prefix)
	fsys := opts.FS
	if fsys == nil {
		fsys = vfs.Default
	}
	var buf []byte
	if opts.Deep {
		buf = make([]byte, 1<<20)
	}
	for _, s := range m.Segments {
		if err := ctx.Err(); err != nil {
			return err
		}
		checks := make([]ObjectCheck, 0, len(manifest.AllSuffixes))
		for _, suf := range s.Objects() {
			kind, _ := manifest.KindOfSuffix(suf)
			size, crc := s.Object(suf)
			c := ObjectCheck{Key: l.Segment(s, suf), Kind: kind, Size: size}
			var path string
			if opts.Deep && opts.Dir != "" {
				path = filepath.Join(opts.Dir, localName(s, suf))
			}
			if c.Err = checkObject(ctx, store, fsys, c.Key, size, crc, path, opts, buf); c.Err == nil {
				c.Path = path
			}
			checks = append(checks, c)
		}
		err := fn(s, checks)
		for _, c := range checks {
			if c.Path != "" {
				fsys.Remove(c.Path)
			}
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// checkObject checks one object: its size by a HEAD and, when deep, its
// CRC-32C by reading it (into the file path when not "").
func checkObject(ctx context.Context, store *objstore.Store, fsys vfs.FS, key string, size int64, crc uint32, path string, opts CheckOptions, buf []byte) error {
	info, err := store.Head(ctx, key)
	if err != nil {
		return fmt.Errorf("tiered: check %s: %w", key, err)
	}
	if info.Size != size {
		return fmt.Errorf("%w: tiered: %s is %d bytes, the manifest says %d", backend.ErrCorruptRecord, key, info.Size, size)
	}
	if !opts.Deep {
		return nil
	}
	if path != "" {
		return restoreObject(ctx, store, fsys, key, size, crc, path, buf, opts.OnProgress)
	}
	rc, _, err := store.Get(ctx, key, 0, -1)
	if err != nil {
		return fmt.Errorf("tiered: check %s: %w", key, err)
	}
	defer rc.Close()
	h := crc32.New(castagnoli)
	n, err := io.CopyBuffer(io.MultiWriter(h, progressWriter(opts.OnProgress)), io.LimitReader(rc, size+1), buf)
	if err != nil {
		return fmt.Errorf("tiered: check %s: %w", key, err)
	}
	if got := h.Sum32(); n != size || got != crc {
		return fmt.Errorf("%w: tiered: %s: %d bytes with CRC-32C %08x, the manifest recorded %d bytes with %08x", backend.ErrCorruptRecord, key, n, got, size, crc)
	}
	return nil
}

// progressWriter counts the bytes written to it into a progress callback.
type progressWriter func(n int64)

func (w progressWriter) Write(b []byte) (int, error) {
	if w != nil {
		w(int64(len(b)))
	}
	return len(b), nil
}

// bucketCleanedLocked shows that the bucket holds a cleaning of the local
// segment si, when the bucket's cleaner has cleaned the partition there
// (si begins below the manifest's checkpoint): the bucket's cleaner
// rewrites a segment once the leader no longer holds it locally, and a
// follower, or this log after another led for a while, may still hold
// its copy, which is then not the bucket's bytes. It may go all the same
// when the two are the same log cleaned apart: the same leader epochs
// over si's offsets (the manifest's segment epochs and the local epoch
// cache: a log that diverged differs there), and every offset both hold
// the same record (key, value, headers, timestamp). A record only one
// holds is one the other's cleaner removed (the bucket's cleaner keeps
// transaction markers a local cleaner run before the log was tiered
// removed). files keeps the last bucket segment read, for the local
// segments after si it covers too. REQUIRES: p.mu held.
func (p *Partition) bucketCleanedLocked(ctx context.Context, head *manifest.Head, si local.SegmentInfo, files *segmentFiles) error {
	if si.BaseOffset >= head.CleanedTo() {
		return fmt.Errorf("%w: local segment %d..%d lies where the bucket's cleaner has not cleaned (its checkpoint is %d)",
			ErrDiverged, si.BaseOffset, si.NextOffset-1, head.CleanedTo())
	}
	h, err := p.openCovered(head, si)
	if err != nil {
		return err
	}
	defer h.Close()
	mine := newRecordStream(h, 0, h.Size())
	from := max(si.BaseOffset, head.FirstOffset())
	var theirEpochs []manifest.EpochStart
	for off := from; off < si.NextOffset; {
		seg, ok, err := p.holding(ctx, head, off)
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("%w: the bucket does not hold offset %d of local segment %s", ErrDiverged, off, h.Path())
		}
		if len(seg.Epochs) == 0 {
			return fmt.Errorf("%w: bucket segment %d..%d records no leader epochs to match local segment %s's", ErrDiverged, seg.BaseOffset, seg.LastOffset, h.Path())
		}
		theirEpochs = appendEpochs(theirEpochs, epochsFrom(seg.Epochs, off))
		key := p.layout().Segment(seg, manifest.LogSuffix)
		if err := p.cleaningOf(ctx, seg, key, files, mine, off, si.NextOffset); err != nil {
			return fmt.Errorf("%w (%s and local segment %s)", err, key, h.Path())
		}
		off = seg.LastOffset + 1
	}
	var upTo []local.EpochEntry
	for _, e := range p.local.LeaderEpochs() {
		if e.StartOffset < si.NextOffset {
			upTo = append(upTo, e)
		}
	}
	mineEpochs := segmentEpochs(upTo, from)
	for i := range theirEpochs {
		theirEpochs[i].StartOffset = max(theirEpochs[i].StartOffset, from)
	}
	if !slices.Equal(mineEpochs, epochsBelow(theirEpochs, si.NextOffset)) {
		return fmt.Errorf("%w: local segment %s has leader epochs %v over offsets %d..%d, the bucket %v",
			ErrDiverged, h.Path(), mineEpochs, from, si.NextOffset-1, theirEpochs)
	}
	p.markRangeVerifiedLocked(si)
	return nil
}

// epochsFrom is a segment's epochs from offset on: the one in effect at
// offset (starting there) and those after.
func epochsFrom(epochs []manifest.EpochStart, offset int64) []manifest.EpochStart {
	i := sort.Search(len(epochs), func(i int) bool { return epochs[i].StartOffset > offset }) - 1
	out := slices.Clone(epochs[max(i, 0):])
	if len(out) > 0 && out[0].StartOffset < offset {
		out[0].StartOffset = offset
	}
	return out
}

// epochsBelow is epochs without those starting at or past end.
func epochsBelow(epochs []manifest.EpochStart, end int64) []manifest.EpochStart {
	i := sort.Search(len(epochs), func(i int) bool { return epochs[i].StartOffset >= end })
	return epochs[:i]
}

// segmentFiles keeps the last bucket segment a local retention pass read
// whole, for the next local segments it covers.
type segmentFiles struct {
	id [8]byte
	f  *os.File
}

func (c *segmentFiles) close() {
	if c.f != nil {
		closeScratch(c.f)
		c.f = nil
	}
}

// cleaningOf holds the records of the bucket segment seg in [from, to)
// to those of mine at the same offsets (see bucketCleanedLocked), reading
// seg from its batch at or before from (its offset index says where).
func (p *Partition) cleaningOf(ctx context.Context, seg manifest.Segment, key string, files *segmentFiles, mine *recordStream, from, to int64) error {
	if files.f == nil || files.id != seg.ID {
		files.close()
		f, err := p.downloadSegment(ctx, seg, "")
		if err != nil {
			return err
		}
		files.id, files.f = seg.ID, f
		p.metrics.VerifyBytes.Add(seg.Size)
	}
	ix, err := p.remoteOffsetIndex(ctx, seg)
	if err != nil {
		return err
	}
	theirs := newRecordStream(files.f, int64(ix.Lookup(from).Position), seg.Size)
	for {
		r, ok, err := theirs.peek()
		if err != nil {
			return fmt.Errorf("%w: %w", backend.ErrCorruptRecord, err)
		}
		if !ok || r.Offset >= to {
			return nil
		}
		theirs.skip()
		if r.Offset < from {
			continue
		}
		m, ok, err := mine.peek()
		for err == nil && ok && m.Offset < r.Offset {
			mine.skip() // a record the bucket's cleaner removed
			m, ok, err = mine.peek()
		}
		if err != nil {
			return fmt.Errorf("%w: %w", backend.ErrCorruptRecord, err)
		}
		if !ok || m.Offset > r.Offset {
			continue // a record the local copy's cleaner removed
		}
		if !bytes.Equal(m.Key, r.Key) || !bytes.Equal(m.Value, r.Value) || (m.Value == nil) != (r.Value == nil) || m.Timestamp != r.Timestamp ||
			!slices.EqualFunc(m.Headers, r.Headers, func(a, b record.Header) bool {
				return bytes.Equal(a.Key, b.Key) && bytes.Equal(a.Value, b.Value)
			}) {
			return fmt.Errorf("%w: the record at offset %d differs", ErrDiverged, r.Offset)
		}
		mine.skip()
	}
}

// recordStream reads the records of a segment's batches one by one, in
// offset order, each batch validated first.
type recordStream struct {
	sc  *record.Scanner
	it  record.Iterator
	in  bool           // in a batch
	cur *record.Record // the record peek returned, until skip
}

func newRecordStream(r io.ReaderAt, start, size int64) *recordStream {
	return &recordStream{sc: record.NewScanner(r, start, size, record.ScanOptions{Validate: true, Ordered: true, BufferSize: 1 << 20})}
}

// peek returns the next record (valid until skip), or false at the end.
func (s *recordStream) peek() (*record.Record, bool, error) {
	for s.cur == nil {
		if s.in {
			if s.it.Next() {
				s.cur = s.it.Record()
				break
			}
			if err := s.it.Err(); err != nil {
				return nil, false, err
			}
			s.in = false
		}
		if !s.sc.Next() {
			return nil, false, s.sc.Err()
		}
		if err := s.it.Reset(s.sc.Entry().Data); err != nil {
			return nil, false, err
		}
		s.in = true
	}
	return s.cur, true, nil
}

// skip moves past the record peek returned.
func (s *recordStream) skip() { s.cur = nil }
