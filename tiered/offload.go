package tiered

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"sync"
	"time"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/index"
	"github.com/tierlog/tierlog/local"
	"github.com/tierlog/tierlog/manifest"
	"github.com/tierlog/tierlog/objstore"
	"github.com/tierlog/tierlog/producerstate"
	"github.com/tierlog/tierlog/record"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Offload uploads, in offset order, every closed local segment that lies
// wholly below the last stable offset (so below the high watermark, and
// holding no undecided transaction) and that the manifest does not name
// yet, up to UploadConcurrency segments at a time, committing the
// manifest once per group of up to four times that many (see groupLen; a
// group that fails part-way commits the segments before the failure);
// then it applies local retention (local.retention.ms/bytes) to segments
// a committed manifest names, once their objects are seen in the bucket.
// It returns how many segments it uploaded and committed.
//
// Only the leader uploads (ErrNotLeader otherwise). A segment that begins
// below the bucket's last offset (a new leader whose segments do not line
// up with the old leader's) uploads from the first offset the bucket lacks.
func (p *Partition) Offload(ctx context.Context) (int, error) {
	n, _, err := p.offload(ctx, false)
	return n, err
}

// CopyTurn is one turn of a Backend's copier: one segment uploaded and
// committed, with up to three more after it, one at a time, while the
// turn's bytes stay within 128 MiB (small segments share the turn's
// intent and commit: see groupLen), then local retention. more says
// whether another segment waits, so the copier can queue the partition
// again behind the others (fair turns: a long backlog holds no other
// partition back longer than one large segment's turn would).
func (p *Partition) CopyTurn(ctx context.Context) (uploaded int, more bool, err error) {
	return p.offload(ctx, true)
}

// offload uploads every pending segment, or, as a copier's turn, one
// group of them at one upload at a time.
func (p *Partition) offload(ctx context.Context, turn bool) (n int, more bool, err error) {
	ctx, done, err := p.beginLeaderChange(ctx)
	if err != nil {
		return 0, false, err
	}
	defer done()
	want := -1
	if turn {
		want = maxTurnSegments + 1 // one more, to tell whether more wait
	}
	pending, err := p.pendingLocked(want)
	if err != nil {
		return 0, false, err
	}
	for len(pending) > 0 {
		concurrency, group := p.opts.UploadConcurrency, groupLen(pending, p.opts.UploadConcurrency, maxGroupSegments*p.opts.UploadConcurrency, groupBytes)
		if turn {
			concurrency, group = 1, groupLen(pending, 1, maxTurnSegments, turnBytes)
		}
		k, err := p.offloadGroupLocked(ctx, pending[:group], concurrency)
		n += k
		if err != nil {
			return n, true, err
		}
		pending = pending[k:] // a group cut short by time: the rest go in the next
		if turn {
			more = len(pending) > 0
			break
		}
	}
	return n, more, p.applyLocalRetentionLocked(ctx)
}

// Offload's groups: each is committed with one manifest write, after an
// intent naming its objects, so a group's fixed cost is five requests
// (the intent, the manifest and its backup, and two deletes). A group
// holds UploadConcurrency segments, and more while it stays within
// maxGroupSegments times that and groupBytes: small segments share those
// requests, and a failure abandons at most a few large ones. A group's
// segments past its first UploadConcurrency start only within a quarter
// of the commit window and are stopped at half of it
// (offloadGroupLocked), so a slow store, a rate cap or a shared quota
// shortens groups: no group commits later than its first
// UploadConcurrency segments alone would have, or half the window,
// whichever is later.
//
// A copier's turn is a group of one upload at a time (the copier pool is
// the service's concurrency): its first segment whatever its size, and up
// to maxTurnSegments while the turn stays within turnBytes. A partition
// of Kafka's 1 GiB segments takes one a turn; one of small segments (a
// segment.ms roll of a quiet topic, a backlog after an outage) shares a
// commit among four, and its turn is no longer than a large segment's.
const (
	maxGroupSegments = 4
	groupBytes       = 1 << 30
	maxTurnSegments  = 4
	turnBytes        = 128 << 20
)

// groupLen returns how many of pending's first segments form the next
// group: first whatever their size, then more, up to most, while the
// group's bytes stay within bytes.
func groupLen(pending []pendingSegment, first, most int, bytes int64) int {
	n, size := 0, int64(0)
	for n < len(pending) && n < most {
		if n >= first && size+pending[n].size > bytes {
			break
		}
		size += pending[n].size
		n++
	}
	return n
}

// pendingSegment is a closed local segment to upload: the whole of it, or
// its part from the first offset the bucket lacks.
type pendingSegment struct {
	base, next, size int64
	from             int64 // the first offset to upload: base, or inside the segment
}

// offloadGroupLocked uploads a group of segments in parallel and commits
// the manifest naming those that uploaded (a prefix of the group, so the
// bucket has no hole). It returns how many it committed: fewer than the
// group with a nil error when time cut the group short (see the
// workers below). An upload intent naming the group's objects goes to
// the bucket first, so gc leaves them alone while the commit may still
// happen; it is removed once the commit names them. After the commit the
// objects are checked to exist before anything may rely on them.
// REQUIRES: p.mu held.
func (p *Partition) offloadGroupLocked(ctx context.Context, group []pendingSegment, concurrency int) (int, error) {
	segs := make([]manifest.Segment, len(group))
	for i, ps := range group {
		segs[i].BaseOffset, segs[i].LastOffset = ps.from, ps.next-1
		if _, err := rand.Read(segs[i].ID[:]); err != nil {
			return 0, err
		}
	}
	st := p.man.Load()
	// The parts the commit builds on, read (once) before anything is
	// uploaded: a part that cannot be read costs no upload.
	if err := p.checkPartsLocked(ctx, st.head); err != nil {
		return 0, err
	}
	in, err := p.writeIntent(ctx, st.head.Generation(), segs)
	if err != nil {
		return 0, err
	}
	// concurrency workers take the group's segments in offset order.
	// Once one fails, no later segment starts: only those before the
	// first failure can be committed. The segments past the first
	// concurrency are bounded in time: none starts once a quarter of
	// the commit window has gone since the intent, and those still
	// uploading at half of it are stopped (errCutShort). The group then
	// commits the segments before the first one cut, and the rest go in
	// the next group (those started after it and finished are uploaded
	// again): it commits no later than its first concurrency segments
	// alone would have, or half the window, whichever is later. Only an
	// upload ended by that stop is a cut: a bounded segment's own error
	// (a refusal, damage its scan found) is the group's error whenever
	// it comes.
	created := time.UnixMilli(in.CreatedMs)
	startBy := created.Add(p.opts.CommitWindow / 4)
	cctx, cancel := context.WithTimeout(ctx, created.Add(p.opts.CommitWindow/2).Sub(p.opts.Now()))
	defer cancel()
	errs := make([]error, len(group))
	took := make([]time.Duration, len(group))
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		next   int
		failed bool
	)
	take := func() (int, bool) {
		mu.Lock()
		defer mu.Unlock()
		if failed || next == len(group) || next >= concurrency && p.opts.Now().After(startBy) {
			return 0, false
		}
		next++
		return next - 1, true
	}
	for range min(len(group), concurrency) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i, ok := take(); ok; i, ok = take() {
				start := time.Now()
				bounded := i >= concurrency
				uctx := ctx
				if bounded {
					uctx = cctx
				}
				segs[i], errs[i] = p.upload(uctx, group[i], segs[i].ID)
				if errs[i] != nil {
					if bounded && cctx.Err() != nil && ctx.Err() == nil && errors.Is(errs[i], context.DeadlineExceeded) {
						errs[i] = errCutShort
					} else {
						p.metrics.UploadErrors.Add(1)
					}
					mu.Lock()
					failed = true
					mu.Unlock()
					continue
				}
				took[i] = time.Since(start)
			}
		}()
	}
	wg.Wait()
	ok := 0 // the segments started (next) and uploaded before any failure or cut
	for ok < next && errs[ok] == nil {
		ok++
	}
	if ok > 0 {
		logStart := st.head.LogStartOffset()
		if st.head.Count() == 0 {
			logStart = max(logStart, segs[0].BaseOffset, p.local.Offsets().LogStart)
		}
		// A DeleteRecordsBefore past the bucket's end raised the partition's
		// log start beyond what the manifest could record then: it does now.
		logStart = max(logStart, min(p.Offsets().LogStart, segs[ok-1].LastOffset+1))
		// The head and the parts a carry merges: not the whole manifest.
		if err := p.commitInWindowLocked(ctx, in, func(ctx context.Context) error {
			return p.commitAppendLocked(ctx, st, segs[:ok], logStart)
		}); err != nil {
			return 0, err
		}
		for i, seg := range segs[:ok] {
			p.opts.Logger.Info("offloaded segment", "base", seg.BaseOffset, "last", seg.LastOffset, "bytes", seg.Size)
			// Counted once committed: an upload abandoned after a
			// failure or a cut is uploaded again by the next group.
			p.metrics.SegmentsUploaded.Add(1)
			p.metrics.BytesUploaded.Add(seg.Size + seg.IndexSize + seg.TimeIndexSize)
			p.metrics.UploadLatency.Observe(took[i])
		}
		p.uploadedLocked(segs[:ok])
	}
	if ok == next {
		p.removeIntent(ctx, in)
		return ok, nil
	}
	p.abandonLocked(in, segs[ok:next])
	if errs[ok] == errCutShort {
		p.opts.Logger.Info("offload group cut short at half the commit window; its slow segment goes in the next group",
			"committed", ok, "next_base", segs[ok].BaseOffset, "window", p.opts.CommitWindow)
		return ok, nil // at least the first concurrency: they are never cut
	}
	return ok, errs[ok]
}

// errCutShort marks a group's upload stopped at half the commit window
// (see offloadGroupLocked): the segment goes in the next group.
var errCutShort = errors.New("tiered: upload cut short to commit its group within the window")

// abandonLocked removes what a group's uploads after its committed
// prefix left (failed, cancelled or cut ones, and those that finished
// after them: their objects, then the intent naming them), best effort
// and even when the upload's context has ended: a stopped upload leaves
// nothing behind, or, when this fails too, an intent that tells gc
// exactly what to remove. The segments are none a commit names.
// REQUIRES: p.mu held.
func (p *Partition) abandonLocked(in *intent, segs []manifest.Segment) {
	ctx, cancel := context.WithTimeout(context.Background(), p.store.Timeout())
	defer cancel()
	var keys []string
	for _, seg := range segs {
		for _, suf := range manifest.AllSuffixes {
			keys = append(keys, p.layout().Segment(seg, suf))
		}
	}
	if err := p.store.Delete(ctx, keys...); err != nil {
		p.opts.Logger.Warn("could not remove an abandoned upload's objects; gc will, by its intent", "intent", in.key, "err", err)
		return
	}
	p.removeIntent(ctx, in)
}

// pendingLocked lists, in offset order, up to max (all with -1) closed
// local segments below the last stable offset holding offsets past the
// bucket's last one. It finds the first by binary search, so a partition
// whose local log holds many uploaded segments costs no scan of them.
// REQUIRES: p.mu held.
func (p *Partition) pendingLocked(limit int) ([]pendingSegment, error) {
	lastRemote := p.Head().LastOffset()
	// Only what is committed and decided: segments wholly below the last
	// stable offset (itself at most the high watermark).
	lso := p.local.Offsets().LastStableOffset
	var out []pendingSegment
	for after := lastRemote; limit < 0 || len(out) < limit; {
		s, ok := p.segs.SpanAfter(after)
		if !ok || s.Active || s.NextOffset > lso {
			break
		}
		out = append(out, pendingSegment{base: s.BaseOffset, next: s.NextOffset, size: s.Size, from: max(s.BaseOffset, lastRemote+1)})
		after = s.NextOffset - 1
	}
	return out, nil
}

// CopyLag returns how many closed segments below the last stable offset
// (at most the high watermark), and how many bytes of them, are not in the
// bucket yet. It takes no lock (an
// Offload in progress does not hold it up) and allocates nothing, so a
// metrics scrape over many partitions stays cheap.
func (p *Partition) CopyLag() (segments int, bytes int64) {
	lastRemote := p.Head().LastOffset()
	hw := p.local.Offsets().LastStableOffset
	for after := lastRemote; ; {
		s, ok := p.segs.SpanAfter(after)
		if !ok || s.Active || s.NextOffset > hw {
			return segments, bytes
		}
		segments++
		bytes += s.Size
		after = s.NextOffset - 1
	}
}

// upload puts one closed segment's .log, .index and .timeindex under new
// keys and returns its manifest entry. The segment is read through a handle
// that pins it, and validated batch by batch before a byte is sent (see
// scanForUpload): the bucket never receives a copy that is not whole and
// correct. The segment is not visible to readers until a manifest naming
// it is committed.
//
// A segment that begins below the bucket's end uploads from ps.from, the
// first offset the bucket lacks: its bytes from the batch starting there,
// with indexes built for them by Kafka's rule.
func (p *Partition) upload(ctx context.Context, ps pendingSegment, id [8]byte) (manifest.Segment, error) {
	seg := manifest.Segment{BaseOffset: ps.from, LastOffset: ps.next - 1, UploadTimeMs: p.opts.Now().UnixMilli(), MaxTimestamp: -1, ID: id}
	h, err := p.segs.OpenSegment(ps.base)
	if err != nil {
		return seg, fmt.Errorf("tiered: %w", err)
	}
	defer h.Close()
	var idx, tidx []byte
	var ix *indexBuilder
	start := int64(0)
	if ps.from > ps.base {
		if start, err = batchStart(h, ps.from); err != nil {
			return seg, err
		}
		ix = newIndexBuilder(ps.from, p.local.Config().IndexIntervalBytes)
	} else {
		if idx, err = h.IndexBytes(); err != nil {
			return seg, fmt.Errorf("tiered: %w", err)
		}
		if tidx, err = h.TimeIndexBytes(); err != nil {
			return seg, fmt.Errorf("tiered: %w", err)
		}
		if t := index.NewTimeIndexView(tidx, ps.base); t.Entries() > 0 {
			seg.MaxTimestamp = t.LastEntry().Timestamp
		}
	}
	if err := p.scanForUpload(ctx, h, start, &seg, ix); err != nil {
		if ctx.Err() != nil && !errors.Is(err, backend.ErrCorruptRecord) {
			return seg, err // stopped, not refused
		}
		p.metrics.UploadsRefused.Add(1)
		p.opts.Logger.Error("refusing to upload a damaged segment; it stays local", "segment", h.Path(), "err", err)
		return seg, err
	}
	if ix != nil {
		idx, tidx = ix.finish()
	}
	extras, err := p.segmentExtras(h, &seg)
	if err != nil {
		return seg, err
	}
	seg.Size, seg.IndexSize, seg.TimeIndexSize = h.Size()-start, int64(len(idx)), int64(len(tidx))
	seg.IndexCRC, seg.TimeIndexCRC = crc32.Checksum(idx, castagnoli), crc32.Checksum(tidx, castagnoli)
	var body io.ReadSeeker = io.NewSectionReader(h, start, seg.Size)
	if p.opts.OnUploadProgress != nil {
		body = &progressBody{rs: body, report: p.opts.OnUploadProgress}
	}
	for _, lim := range p.uploadRate {
		body = &limitedBody{ctx: ctx, rs: body, lim: lim}
	}
	extras[manifest.IndexSuffix], extras[manifest.TimeIndexSuffix] = idx, tidx
	if err := p.putObjects(ctx, seg, body, extras); err != nil {
		return seg, err
	}
	// Warm the index cache: the first remote read needs it.
	p.caches.indexes.put(p.objectKey(seg, manifest.IndexSuffix), newCachedIndex(seg, manifest.IndexSuffix, idx))
	p.caches.indexes.put(p.objectKey(seg, manifest.TimeIndexSuffix), newCachedIndex(seg, manifest.TimeIndexSuffix, tidx))
	return seg, nil
}

// putObjects puts seg's objects at once, each under its own key: its
// .log from log, the others from objects by their suffix (those seg
// records, manifest.Segment.Objects: its indexes always, the others when
// it records their size). Nothing names them until a commit, which waits
// for them all, so their order does not matter; put one after another,
// a segment's small objects took longer than its .log. A put that fails
// does not cancel the others: each ends with its outcome known, so an
// abandoned upload's deletes come after every put it made (a cancelled
// put may still land). The first to fail, in the segment's order, is the
// error.
func (p *Partition) putObjects(ctx context.Context, seg manifest.Segment, log io.ReadSeeker, objects map[string][]byte) error {
	sufs := seg.Objects()
	errs := make([]error, len(sufs))
	var wg sync.WaitGroup
	for i, suf := range sufs {
		body, size, crc := log, seg.Size, seg.LogCRC
		if suf != manifest.LogSuffix {
			data := objects[suf]
			body, size, crc = bytes.NewReader(data), int64(len(data)), crc32.Checksum(data, castagnoli)
		}
		key := p.layout().Segment(seg, suf)
		wg.Go(func() { errs[i] = p.putObject(ctx, key, body, size, crc) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// putObject puts one of a segment's objects under its key, new to this
// upload attempt (so never over another's), with its CRC-32C checked by
// the store.
func (p *Partition) putObject(ctx context.Context, key string, body io.ReadSeeker, size int64, crc uint32) error {
	_, err := p.store.Put(ctx, key, body, size, objstore.PutOptions{CRC32C: crc, HasCRC32C: true, IfNoneMatch: true})
	if errors.Is(err, objstore.ErrPreconditionFailed) {
		// The key is new to this attempt: if it exists, an earlier try
		// of this very put succeeded before its answer was lost.
		info, herr := p.store.Head(ctx, key)
		if herr == nil && info.Size == size {
			return p.confirmPut(ctx, key, body, size, info.ETag, crc)
		}
		if herr != nil {
			return fmt.Errorf("tiered: upload %s: %w: its outcome is unknown: %w", key, objstore.ErrRetryable, herr)
		}
	}
	if err != nil {
		return fmt.Errorf("tiered: upload %s: %w", key, err)
	}
	return nil
}

// confirmPut makes durable an object this writer put under key whose
// answer was lost, and that a read (a HEAD, a GET) now shows: on a store
// whose failed writes can leave a version that some reads see and others
// do not (an erasure-coded cluster short of its write quorum: a MinIO
// node killed mid-write), a read is no proof. It puts the same bytes again
// over it (If-Match its ETag): an answered put is. A failure is retryable;
// the outcome stays unknown.
func (p *Partition) confirmPut(ctx context.Context, key string, body io.ReadSeeker, size int64, etag string, crc uint32) error {
	if _, err := body.Seek(0, io.SeekStart); err != nil {
		return fmt.Errorf("tiered: confirm %s: %w", key, err)
	}
	if _, err := p.store.Put(ctx, key, body, size, objstore.PutOptions{IfMatch: etag, CRC32C: crc, HasCRC32C: true}); err != nil {
		return fmt.Errorf("tiered: confirm %s: %w: its outcome is unknown: %w", key, objstore.ErrRetryable, err)
	}
	p.metrics.PutsConfirmed.Add(1)
	return nil
}

// segmentExtras gathers the rest of what Kafka's LogSegmentData carries
// for a segment: its .txnindex (when it has aborted transactions), the
// producer snapshot at its end (when the log has one), and the leader
// epochs up to its end, in leader-epoch-checkpoint's text; seg records
// their sizes, CRCs and the segment's epochs.
func (p *Partition) segmentExtras(h *local.SegmentHandle, seg *manifest.Segment) (map[string][]byte, error) {
	txn, err := h.TxnIndexBytes()
	if err != nil {
		return nil, fmt.Errorf("tiered: %w", err)
	}
	if seg.BaseOffset > h.BaseOffset() && len(txn) > 0 {
		// Part of the segment: the transactions aborted in that part.
		all, err := producerstate.DecodeTxnIndex(txn)
		if err != nil {
			return nil, fmt.Errorf("%w: tiered: %s: %w", backend.ErrCorruptRecord, h.Path(), err)
		}
		txn = nil
		for _, a := range all {
			if a.LastOffset >= seg.BaseOffset {
				txn = a.AppendTo(txn)
			}
		}
	}
	snap, err := h.SnapshotBytes()
	if err != nil {
		return nil, fmt.Errorf("tiered: %w", err)
	}
	var upTo []local.EpochEntry
	for _, e := range p.local.LeaderEpochs() {
		if e.StartOffset < h.NextOffset() {
			upTo = append(upTo, e)
		}
	}
	seg.Epochs = segmentEpochs(upTo, seg.BaseOffset)
	epochs := local.FormatLeaderEpochs(upTo)
	out := map[string][]byte{manifest.TxnIndexSuffix: txn, manifest.SnapshotSuffix: snap, manifest.EpochsSuffix: epochs}
	seg.TxnIndexSize, seg.TxnIndexCRC = int64(len(txn)), crc32.Checksum(txn, castagnoli)
	seg.SnapshotSize, seg.SnapshotCRC = int64(len(snap)), crc32.Checksum(snap, castagnoli)
	seg.EpochsSize, seg.EpochsCRC = int64(len(epochs)), crc32.Checksum(epochs, castagnoli)
	return out, nil
}

// segmentEpochs is the segment's leader-epoch map from the epochs up to
// its end: the epoch in effect at base (its start clamped to base), then
// each that began inside the segment.
func segmentEpochs(upTo []local.EpochEntry, base int64) []manifest.EpochStart {
	var out []manifest.EpochStart
	for i, e := range upTo {
		if e.StartOffset <= base && (i+1 == len(upTo) || upTo[i+1].StartOffset > base) {
			out = append(out, manifest.EpochStart{Epoch: e.Epoch, StartOffset: base})
		} else if e.StartOffset > base {
			out = append(out, manifest.EpochStart{Epoch: e.Epoch, StartOffset: e.StartOffset})
		}
	}
	if len(out) > 0 && out[0].StartOffset > base {
		out[0].StartOffset = base // records before the first known epoch: take it as theirs
	}
	return out
}

// scanForUpload reads the whole segment once, validating every batch (its
// CRC, and local.SegmentOrder, contiguous unless the log may have gaps, a
// compacted log or one a cleaner cleaned before: offsets that start at the
// segment's base, follow one another without a gap and end where the next
// segment begins) and computing what
// the manifest records: the .log's CRC-32C, the record count, the highest
// leader epoch and the largest timestamp. Damage is backend.ErrCorruptRecord
// naming the file and position.
//
// The scan starts at position start, where the batch holding seg's base
// offset begins; ix, when set, builds the indexes of that part as it goes.
// It stops, with ctx's error and not ErrCorruptRecord, when ctx ends: a
// segment's scan reads up to its whole size.
func (p *Partition) scanForUpload(ctx context.Context, h *local.SegmentHandle, start int64, seg *manifest.Segment, ix *indexBuilder) error {
	if h.Size() <= start {
		return fmt.Errorf("%w: tiered: %s holds nothing from position %d", backend.ErrCorruptRecord, h.Path(), start)
	}
	crc := uint32(0)
	// A compacted log's segments have holes where the cleaner removed
	// batches (before the log became tiered), and so does a log cleaned
	// before it was set to cleanup.policy=delete: its offsets only rise.
	compacted := p.local.GapsAllowed()
	order := local.NewSegmentOrder(seg.BaseOffset, h.NextOffset()-1, !compacted)
	sc := record.NewScanner(h, start, h.Size(), record.ScanOptions{Validate: true, BufferSize: 1 << 20})
	done := ctx.Done()
	for sc.Next() {
		select {
		case <-done:
			return fmt.Errorf("tiered: scanning %s: %w", h.Path(), ctx.Err())
		default:
		}
		e := sc.Entry()
		if ix != nil {
			ix.add(e.Position-start, e.Size, e.LastOffset, e.MaxTimestamp)
		}
		if err := order.Check(e); err != nil {
			return fmt.Errorf("%w: tiered: %s: %w", backend.ErrCorruptRecord, h.Path(), err)
		}
		crc = crc32.Update(crc, castagnoli, e.Data)
		if e.Magic == 2 {
			b := e.Batch()
			seg.Records += int64(b.NumRecords())
			seg.LeaderEpoch = max(seg.LeaderEpoch, b.PartitionLeaderEpoch())
		} else {
			seg.Records++
		}
		seg.MaxTimestamp = max(seg.MaxTimestamp, e.MaxTimestamp)
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("%w: tiered: %s: %w", backend.ErrCorruptRecord, h.Path(), err)
	}
	if order.Next() != h.NextOffset() && !compacted {
		return fmt.Errorf("%w: tiered: %s ends at offset %d, but the next segment starts at %d",
			backend.ErrCorruptRecord, h.Path(), order.Next()-1, h.NextOffset())
	}
	seg.LogCRC = crc
	return nil
}

// applyLocalRetentionLocked deletes local copies of segments the bucket
// holds, oldest first, while local.retention.ms (by the segment's largest
// timestamp) or local.retention.bytes says so. Each one must be shown to be
// in the bucket as it is on disk first (bucketHoldsLocked); the first that
// cannot stops local retention with an error, and it and everything after
// it stay. REQUIRES: p.mu held.
func (p *Partition) applyLocalRetentionLocked(ctx context.Context) error {
	cfg := p.local.Config()
	ms, maxBytes := cfg.EffectiveLocalRetentionMs(), cfg.EffectiveLocalRetentionBytes()
	head := p.Head()
	lastRemote := head.LastOffset()
	if lastRemote < 0 || (ms < 0 && maxBytes < 0) {
		return nil
	}
	infos := p.local.SegmentInfos()
	var total int64
	for _, si := range infos {
		total += si.Size
	}
	now := p.opts.Now().UnixMilli()
	localStart := p.local.Offsets().LogStart
	cut := int64(-1)
	var refused error
	var files segmentFiles // bucketCleanedLocked's
	defer files.close()
	for _, si := range infos {
		if si.Active || si.NextOffset-1 > lastRemote {
			break
		}
		if si.NextOffset <= localStart {
			// Wholly below the log start (a crash between the log start
			// checkpoint and the deletes it called for leaves such a
			// segment): no reader may see its records, and the bucket
			// need not hold them. Kafka deletes these first, too.
			total -= si.Size
			cut = si.NextOffset
			continue
		}
		del := false
		if ms >= 0 {
			seg, ok, err := p.holding(ctx, head, si.BaseOffset)
			if err != nil {
				return err
			}
			if ok && now-seg.MaxTimestamp > ms {
				del = true
			}
		}
		if maxBytes >= 0 && total-si.Size >= maxBytes {
			del = true
		}
		if !del {
			break
		}
		err := p.bucketHoldsLocked(ctx, head, si)
		if errors.Is(err, ErrDiverged) && head.CleanedTo() > 0 {
			// The bucket's cleaner may have rewritten what this copy
			// holds (it was the leader's to clean, not this log's).
			err = p.bucketCleanedLocked(ctx, head, si, &files)
		}
		if err != nil {
			p.metrics.LocalDeletesRefused.Add(1)
			p.opts.Logger.Error("local retention keeps a segment the bucket does not hold as it is", "base", si.BaseOffset, "err", err)
			refused = fmt.Errorf("tiered: local retention stopped at segment %d: %w", si.BaseOffset, err)
			break
		}
		total -= si.Size
		cut = si.NextOffset
	}
	if cut >= 0 {
		if err := p.ensureBackupLocked(ctx); err != nil {
			return err // local copies go once the manifest naming their upload has a backup
		}
		if err := p.segs.TrimLocalBefore(ctx, cut); err != nil {
			return err
		}
		for base := range p.verified {
			if base < cut {
				delete(p.verified, base)
			}
		}
	}
	return refused
}

// batchStart returns the position of the batch of h that begins at offset
// from. A segment whose batches do not begin there holds other batches
// than the bucket's copy ends with: ErrDiverged.
func batchStart(h *local.SegmentHandle, from int64) (int64, error) {
	sc := record.NewScanner(h, 0, h.Size(), record.ScanOptions{BufferSize: 64 << 10})
	for sc.Next() {
		e := sc.Entry()
		switch {
		case e.BaseOffset == from:
			return e.Position, nil
		case e.LastOffset >= from:
			return 0, fmt.Errorf("%w: %s: the bucket ends at offset %d, inside the local batch of offsets %d..%d",
				ErrDiverged, h.Path(), from-1, e.BaseOffset, e.LastOffset)
		}
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("%w: tiered: %s: %w", backend.ErrCorruptRecord, h.Path(), err)
	}
	return 0, fmt.Errorf("%w: %s: no batch begins at offset %d", ErrDiverged, h.Path(), from)
}

// indexBuilder builds the offset and time index of part of a segment, by
// Kafka's rule (index.Indexer's, one batch per append), in memory.
type indexBuilder struct {
	base, interval   int64
	idx, tidx        []byte
	since            int64 // bytes since the last offset index entry
	maxTs, offsetMax int64 // the largest timestamp so far and its batch's last offset
	lastTs           int64 // the last time index entry's timestamp
}

func newIndexBuilder(base, interval int64) *indexBuilder {
	return &indexBuilder{base: base, interval: interval, maxTs: -1, lastTs: -1}
}

// add records a batch at pos (relative to the part's start).
func (b *indexBuilder) add(pos, size, lastOffset, maxTs int64) {
	if maxTs > b.maxTs {
		b.maxTs, b.offsetMax = maxTs, lastOffset
	}
	if b.since > b.interval {
		b.idx = binary.BigEndian.AppendUint32(b.idx, uint32(lastOffset-b.base))
		b.idx = binary.BigEndian.AppendUint32(b.idx, uint32(pos))
		b.appendTime()
		b.since = 0
	}
	b.since += size
}

// appendTime adds a time index entry for the largest timestamp so far, if
// it is larger than the last entry's (TimeIndex.MaybeAppend).
func (b *indexBuilder) appendTime() {
	if b.maxTs < 0 || (len(b.tidx) > 0 && b.maxTs <= b.lastTs) {
		return
	}
	b.tidx = binary.BigEndian.AppendUint64(b.tidx, uint64(b.maxTs))
	b.tidx = binary.BigEndian.AppendUint32(b.tidx, uint32(b.offsetMax-b.base))
	b.lastTs = b.maxTs
}

// finish adds the time index entry a roll writes and returns both indexes.
func (b *indexBuilder) finish() (idx, tidx []byte) {
	b.appendTime()
	return b.idx, b.tidx
}
