package tiered

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/manifest"
	"github.com/tierlog/tierlog/record"
	"github.com/tierlog/tierlog/wal"
)

// Diskless partitions (diskless.enable=true; docs/diskless.md).
//
// A diskless partition is a tiered partition whose leader appends are
// durable once the WAL object holding them is in the bucket (package
// wal): the Backend's one wal.Writer gathers the appends of all its
// diskless partitions into shared objects. The local log still validates,
// assigns offsets and keeps producer state and epochs; it is a cache, and
// its closed segments upload as any tiered partition's (consolidation).
//
//   - The durable end is the offset up to which the partition's batches
//     are in the bucket: in WAL objects, or in segments. The high
//     watermark never passes it (SetHighWatermark asks; the writer's
//     acknowledgements let it through), so a consumer never reads, and a
//     broker never acknowledges, what the bucket does not hold. Flush
//     waits for it.
//   - A failed upload fails the appends in it and after it; before the
//     next append the local log is truncated back to the durable end, and
//     the producer state with it.
//   - The manifest says where the partition's data beyond its segments
//     is (manifest.WAL): extents in earlier writers' objects, and this
//     writer's objects above a number. Every commit carries it forward,
//     dropping what the segments now cover.
//   - Claiming the partition (the first change of a leader epoch, or the
//     first append) fences the writer the manifest names, reads the
//     partition's tail below the fence, rebuilds the local log's tail from
//     it (a restart with the log directory gone is the same claim), and
//     commits the manifest naming this writer, with the conditional put
//     that fences an older leader's manifest commits.
//
// Locks: Partition.mu, then diskless.mu (appends, truncation, the claim's
// rebuild), then diskless.ownMu and diskless.hwMu (leaves). The writer's
// callback takes only the leaves.
type diskless struct {
	// w is the Backend's WAL writer the partition appends through; it
	// moves to a new one (renew, the Backend's walWriter) when it halts,
	// under d.mu and ownMu, before the claim for the new one
	// (renewWriterLocked).
	w     atomic.Pointer[wal.Writer]
	renew func() (*wal.Writer, error)
	tp    wal.TopicPartition
	// claimedFor is the writer the last manifest this Partition committed
	// names (claimCommitted, called before the claimed epoch is stored,
	// so an append that finds the partition claimed finds it too): an
	// append goes through d.w only when it is that one, so none lands in
	// a new writer's objects before the claim that names the writer
	// commits.
	claimedFor atomic.Pointer[wal.Writer]
	// closed, when set, is called once the partition closes (the
	// Backend forgets it).
	closed func()

	// mu serializes leader appends (the local append and the WAL append,
	// in one order), the truncation after a failed upload, and the
	// claim's rebuild of the tail.
	mu sync.Mutex
	// failed says an upload of the partition's appends failed: the next
	// append truncates the local log back to the durable end first.
	failed atomic.Bool
	// durable is the end of what the bucket holds; wantHW the high
	// watermark the broker asked for.
	durable atomic.Int64
	wantHW  atomic.Int64
	// hwMu serializes setting the local high watermark from the two.
	hwMu sync.Mutex

	// ownMu guards own and lastSeq: this writer's acknowledged extents of
	// the partition not yet below the bucket's segments, oldest first,
	// and the number of the last object that held the partition's data
	// (or the claim's After).
	ownMu   sync.Mutex
	own     []wal.Location
	lastSeq uint64
	// floor (guarded by ownMu) is the writer's next number when the
	// partition was last reset (a truncation, a claim): objects below it
	// hold only appends from before, and what the writer says of them no
	// longer moves the durable end.
	floor uint64
	// rebuilt says this partition's log was made from the bucket by a
	// claim of this Partition that committed (rebuiltAt, its epoch):
	// until then, a claim of its own writer's record must rebuild too
	// (the partition may have been closed and opened again on this
	// Backend, its state new). pending is a rebuild whose claim has not
	// committed yet (pendingAt, its epoch).
	rebuilt   atomic.Bool
	rebuiltAt atomic.Int32
	pending   atomic.Bool
	pendingAt atomic.Int32
	// readClaim is when a read last tried to claim (unix nanoseconds;
	// disklessReady).
	readClaim atomic.Int64
}

// claimCommitted is told that a manifest of this Partition committed at
// epoch (naming this writer): a rebuild its claim made is now the
// partition's, and the writer marks the durable end at epoch for read
// replicas (wal.Mark: what the manifest and the writer's objects above
// its number hold below it is final).
func (d *diskless) claimCommitted(epoch int32) {
	// Under Partition.mu, as every change of the writer is: the manifest
	// just committed names this one.
	d.claimedFor.Store(d.writer())
	if d.pending.Swap(false) {
		d.rebuiltAt.Store(d.pendingAt.Load())
		d.rebuilt.Store(true)
	}
	d.writer().Mark(d.tp, epoch, d.durable.Load())
}

// Diskless says whether the partition is diskless (diskless.enable=true):
// an append is acknowledged once the bucket holds it, so a broker holds
// even an acks=1 answer until the high watermark passes the batch.
func (p *Partition) Diskless() bool { return p.dl != nil }

// writer is the WAL writer the partition appends through now.
func (d *diskless) writer() *wal.Writer { return d.w.Load() }

// renewWriterLocked moves a diskless partition whose WAL writer halted
// (wal.ErrHalted) to the Backend's new one, and has the next claim
// (claimLocked, at the same epoch) claim it for that writer: fence the
// halted one, read the partition's tail from the bucket and name the new
// writer in the manifest, as a restarted Backend's writer does. Until that
// claim commits, appends and reads answer with a retryable storage error.
// REQUIRES: p.mu.
func (p *Partition) renewWriterLocked() error {
	d := p.dl
	old := d.writer()
	halted := old.Halted()
	if halted == nil {
		return nil
	}
	nw, err := d.renew()
	if err != nil {
		return fmt.Errorf("%w: %s: start a WAL writer in place of %s, which halted (%v): %w", backend.ErrStorage, p.prefix, old.ID(), halted, err)
	}
	d.mu.Lock()
	p.claimed.Store(-1)
	d.ownMu.Lock()
	d.w.Store(nw)
	d.ownMu.Unlock()
	// The log past the durable end holds appends the old writer failed:
	// the claim makes it from the bucket again. Appends wait for it
	// (claimedFor).
	d.rebuilt.Store(false)
	d.failed.Store(true)
	d.mu.Unlock()
	old.Forget(d.tp)
	p.opts.Logger.Warn("diskless: the WAL writer halted; the partition is claimed for a new one", "prefix", p.prefix,
		"halted", old.ID(), "writer", nw.ID(), "err", halted)
	return nil
}

// walTP is the partition's name in WAL footers.
func walTP(tp backend.TopicPartition) wal.TopicPartition {
	return wal.TopicPartition{Topic: tp.Topic, Partition: tp.Partition}
}

// appendDiskless is Append for a diskless partition: leader appends only,
// into the local log and the writer's open object, in one order.
func (p *Partition) appendDiskless(ctx context.Context, batches []byte, opts backend.AppendOptions) (backend.AppendInfo, error) {
	d := p.dl
	if !opts.AssignOffsets || p.role.Load() != roleLeader {
		return backend.AppendInfo{}, fmt.Errorf("%w: %s is diskless: only its leader appends (the bucket is its replica)", backend.ErrNotLeader, p.prefix)
	}
	if err := p.claimDiskless(ctx); err != nil {
		return backend.AppendInfo{}, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := p.checkOpen(); err != nil { // Close forgets the partition under d.mu
		return backend.AppendInfo{}, err
	}
	if err := p.Fenced(); err != nil {
		return backend.AppendInfo{}, err
	}
	if w := d.writer(); d.claimedFor.Load() != w {
		// Moved to a new writer (the last one halted) and its claim has
		// not committed yet: the claim rebuilds the log, and an append
		// in the new writer's objects now could be left out of it.
		return backend.AppendInfo{}, fmt.Errorf("%w: %s: diskless: the partition is being claimed for WAL writer %s (the one before it halted); retry",
			backend.ErrStorage, p.prefix, w.ID())
	}
	if d.failed.Load() {
		if err := p.truncateToDurableLocked(); err != nil {
			return backend.AppendInfo{}, err
		}
	}
	info, err := p.local.Append(ctx, batches, opts)
	if err != nil || info.Duplicate {
		return info, err
	}
	data, err := p.readBack(ctx, info)
	if err == nil {
		// Close cancels the wait for the writer's buffer space: it takes
		// d.mu, which this append holds, to forget the partition.
		wctx, cancel := p.withClose(ctx)
		_, err = d.writer().Append(wctx, d.tp, data, info.FirstOffset, info.LastOffset)
		cancel()
	}
	if err != nil {
		// Nothing of it may stay: undo the local append.
		if terr := p.local.TruncateTo(info.FirstOffset); terr != nil {
			d.failed.Store(true)
		}
		if errors.Is(err, wal.ErrFenced) {
			p.fence(p.epoch.Load(), err)
			return backend.AppendInfo{}, p.Fenced()
		}
		return backend.AppendInfo{}, fmt.Errorf("%w: %s: the append could not go into a WAL object: %w", backend.ErrStorage, p.prefix, err)
	}
	return info, nil
}

// readBack reads an append's batches from the local log as written:
// offsets assigned, epochs stamped, recompressed where the topic says.
func (p *Partition) readBack(ctx context.Context, info backend.AppendInfo) ([]byte, error) {
	r, err := p.local.Read(ctx, info.FirstOffset, backend.ReadOptions{MaxBytes: info.Bytes, MinOneBatch: true})
	if err != nil {
		return nil, err
	}
	defer r.Close()
	var buf bytes.Buffer
	buf.Grow(info.Bytes)
	if _, err := r.WriteTo(&buf); err != nil {
		return nil, err
	}
	if buf.Len() != info.Bytes {
		return nil, fmt.Errorf("tiered: %s: the append of offsets %d..%d reads back as %d bytes, %d written", p.prefix, info.FirstOffset, info.LastOffset, buf.Len(), info.Bytes)
	}
	return buf.Bytes(), nil
}

// truncateToDurableLocked drops what a failed upload left above the
// durable end and lets the partition append again. REQUIRES: d.mu.
func (p *Partition) truncateToDurableLocked() error {
	d := p.dl
	// Reset first: appends in objects still in flight can no longer
	// become durable, and objects from now on hold only later appends;
	// then the floor, so that no late word on an earlier object moves the
	// durable end once it is read.
	d.writer().Reset(d.tp)
	end := d.resetFloor()
	if p.local.Offsets().LogEnd > end {
		if err := p.local.TruncateTo(end); err != nil {
			d.failed.Store(true)
			return fmt.Errorf("%w: %s: truncate to the durable end %d after a failed upload: %w", backend.ErrStorage, p.prefix, end, err)
		}
		p.opts.Logger.Warn("diskless: truncated to the durable end after a failed upload", "prefix", p.prefix, "durable_end", end)
	}
	d.failed.Store(false)
	return nil
}

// resetFloor sets the floor to the writer's next number (after a Reset)
// and returns the durable end, which objects below the floor no longer
// move.
func (d *diskless) resetFloor() int64 {
	d.ownMu.Lock()
	defer d.ownMu.Unlock()
	d.floor = d.writer().NextSequence()
	return d.durable.Load()
}

// settled is the word of the writer from on the partition's appends in
// one object; a writer the partition has moved away from (it halted) is
// not heard.
func (p *Partition) settled(from *wal.Writer, loc wal.Location, err error) {
	d := p.dl
	if d.writer() != from {
		return
	}
	if fe := (*wal.FencedError)(nil); errors.As(err, &fe) && fe.DataEpoch < p.epoch.Load() {
		// Appends of an older leadership of this partition: nothing of
		// the current one failed, but unless a claim since rebuilt the
		// log from the bucket, the local log may still hold them.
		if !d.rebuilt.Load() || fe.DataEpoch >= d.rebuiltAt.Load() {
			d.failed.Store(true)
		}
		return
	}
	if err != nil {
		d.failed.Store(true)
		if errors.Is(err, wal.ErrFenced) {
			p.fence(p.epoch.Load(), err)
		}
		p.opts.Logger.Warn("diskless: appends failed", "prefix", p.prefix, "err", err)
		return
	}
	d.ownMu.Lock()
	if d.writer() != from || loc.Sequence < d.floor {
		// From before the last reset: the log was cut back since.
		d.ownMu.Unlock()
		return
	}
	if first := loc.Extent.FirstOffset; first > d.durable.Load() {
		// Durable past a hole: appends before these failed unreported
		// (the writer forgot the partition meanwhile). Never move the
		// durable end over them: truncate and append again.
		d.ownMu.Unlock()
		d.failed.Store(true)
		p.opts.Logger.Warn("diskless: appends durable past a hole; truncating to the durable end", "prefix", p.prefix, "first", first, "durable_end", d.durable.Load())
		return
	}
	d.own = append(d.own, loc)
	d.lastSeq = loc.Sequence
	if end := loc.Extent.LastOffset + 1; end > d.durable.Load() {
		d.durable.Store(end)
	}
	end := d.durable.Load()
	d.ownMu.Unlock()
	p.applyHW()
	// Acknowledged: a read replica may serve it, in the view of the
	// manifest this Partition committed last (its epoch names this
	// writer; none yet: nothing to mark).
	if c := p.claimed.Load(); c >= 0 {
		d.writer().Mark(d.tp, c, end)
	}
}

// applyHW sets the local high watermark to the broker's, held below the
// durable end.
func (p *Partition) applyHW() {
	d := p.dl
	d.hwMu.Lock()
	defer d.hwMu.Unlock()
	hw := min(d.wantHW.Load(), d.durable.Load())
	if hw != p.local.Offsets().HighWatermark {
		if err := p.local.SetHighWatermark(hw); err != nil {
			p.opts.Logger.Warn("diskless: set the high watermark", "prefix", p.prefix, "hw", hw, "err", err)
		}
	}
}

// flushDiskless waits until everything appended is in the bucket.
func (p *Partition) flushDiskless() error {
	target := p.local.Offsets().LogEnd
	ctx, cancel := context.WithTimeout(p.closing, p.store.Bound())
	defer cancel()
	if err := p.dl.writer().Flush(ctx); err != nil {
		return storageError(ctx, fmt.Errorf("tiered: %s: flush the WAL: %w", p.prefix, err))
	}
	if end := p.dl.durable.Load(); end < target {
		if err := p.Fenced(); err != nil {
			return err
		}
		return fmt.Errorf("%w: %s: offsets %d..%d did not reach the bucket (the partition truncates to %d at its next append)",
			backend.ErrStorage, p.prefix, end, target-1, end)
	}
	return nil
}

// claimDiskless claims the partition for this leader epoch unless done
// (beginLeaderChange claims): a diskless partition appends only once the
// manifest names its writer.
func (p *Partition) claimDiskless(ctx context.Context) error {
	if p.claimed.Load() == p.epoch.Load() && p.dl.writer().Halted() == nil {
		return p.Fenced()
	}
	_, done, err := p.beginLeaderChange(ctx)
	if err != nil {
		return err
	}
	done()
	return nil
}

// disklessReady is nil once a diskless leader has claimed the partition
// for its epoch: until then its local log lacks the tail the bucket's WAL
// holds past the segments (BecomeLeader's claim may have failed: the
// bucket down, or an older leader committing meanwhile), and a read or a
// lookup would answer from a log that ends short of what was
// acknowledged (an out-of-range to a consumer ahead of it, which resets
// its offset). It claims now, at most once every readClaimEvery (a
// consumer's fetches retry fast; the service and the first append claim
// too); until a claim lands the answer is a retryable
// backend.ErrStorage. Followers and classic partitions are always ready.
func (p *Partition) disklessReady(ctx context.Context) error {
	if p.dl == nil || p.role.Load() != roleLeader || p.claimed.Load() == p.epoch.Load() {
		return nil
	}
	err := errors.New("a read tried the claim less than a second ago")
	now := p.opts.Now().UnixNano()
	if last := p.dl.readClaim.Load(); now-last >= int64(readClaimEvery) && p.dl.readClaim.CompareAndSwap(last, now) {
		err = p.claimDiskless(ctx)
	}
	if p.claimed.Load() == p.epoch.Load() {
		return nil // this read's claim landed, or another's did
	}
	if err == nil {
		err = errors.New("the claim did not land")
	}
	return storageError(ctx, fmt.Errorf("tiered: %s: diskless: the leader at epoch %d has not claimed the partition yet (its log's tail is in the bucket's WAL): %w",
		p.prefix, p.epoch.Load(), err))
}

// readClaimEvery is how often reads of a diskless leader that has not
// claimed its partition try the claim.
const readClaimEvery = time.Second

// walNamesOther says whether a diskless partition must commit a claim over
// m even at its own epoch: m does not name this writer (a restarted
// Backend has a new one).
func (p *Partition) walNamesOther(h *manifest.Head) bool {
	// A Partition that has not made its log from the bucket yet claims
	// even its own writer's record (opened anew on the same Backend).
	return p.dl != nil && (h.WAL() == nil || wal.WriterID(h.WAL().Writer) != p.dl.writer().ID() || !p.dl.rebuilt.Load())
}

// claimWALLocked prepares a claim of a diskless partition (next, over the
// manifest now, at epoch): it fences the writer now names, reads the
// partition's tail below the fence, rebuilds the local log's tail from the
// bucket, and names this writer in next. REQUIRES: p.mu.
func (p *Partition) claimWALLocked(ctx context.Context, now *manifestState, next **manifest.Head, epoch int32) error {
	d := p.dl
	d.mu.Lock()
	defer d.mu.Unlock()
	base := remoteEnd(now.head)
	var extents []manifest.WALExtent
	prev := now.head.WAL()
	if prev != nil {
		for _, e := range prev.Extents {
			if e.LastOffset >= base {
				extents = append(extents, e)
			}
		}
	}
	if prev == nil && ((now.etag != "" && !now.head.Deleted()) || p.local.Offsets().LogEnd > p.local.Offsets().LogStart) {
		// Records written before the partition was diskless are durable
		// on this disk only: a claim would cut them off.
		o := p.local.Offsets()
		return fmt.Errorf("%w: %s: diskless.enable=true, but the partition was written as a classic one (manifest generation %d names no WAL writer; local offsets %d..%d): a topic is diskless from its creation",
			backend.ErrInvalidConfig, p.prefix, now.head.Generation(), o.LogStart, o.LogEnd-1)
	}
	own := prev != nil && wal.WriterID(prev.Writer) == d.writer().ID()
	if own && d.rebuilt.Load() {
		// This writer's own record, and this Partition made its log from
		// the bucket before (a new epoch on the same Backend): its objects
		// and the local log agree, but for appends that failed meanwhile
		// (it may have been a follower, or a claim that never committed
		// may have fenced it), which the next append cuts back first.
		if err := p.local.BecomeLeader(ctx, epoch); err != nil {
			return err
		}
		d.writer().Lead(d.tp, epoch)
		w := d.recordLocked(base, extents)
		h, err := (*next).Edit(func(m *manifest.Manifest) { m.WAL = w })
		if err != nil {
			return err
		}
		*next = h
		return nil
	}
	if own {
		// This writer's own record, but this Partition's state is new
		// (closed and opened again on this Backend): its log is made from
		// the bucket as any claim's, from the writer's own objects, with
		// no fence (the writer is this Backend's; Reset stops what it had
		// buffered, and what it has in flight lands below the number read
		// to, or not at all).
		d.writer().Reset(d.tp)
		below := d.writer().NextSequence()
		tails, err := wal.Tail(ctx, p.wal(), d.writer().Layout(), d.writer().ID(), prev.After, below, now.head.WriterEpoch(), d.tp)
		if err != nil {
			return storageError(ctx, fmt.Errorf("tiered: %s: read the tail from this Backend's WAL writer: %w", p.prefix, err))
		}
		for _, l := range tails[d.tp] {
			extents = append(extents, manifest.WALExtent{Writer: [8]byte(l.Writer), Sequence: l.Sequence, Position: l.Extent.Position,
				Size: int64(l.Extent.Size), FirstOffset: l.Extent.FirstOffset, LastOffset: l.Extent.LastOffset, CRC: l.Extent.CRC})
		}
	} else if prev != nil {
		old := wal.WriterID(prev.Writer)
		f, err := wal.Fence(ctx, p.wal(), d.writer().Layout(), old, prev.After, epoch, []wal.TopicPartition{d.tp})
		if err != nil {
			return storageError(ctx, fmt.Errorf("tiered: %s: fence WAL writer %s: %w", p.prefix, old, err))
		}
		tails, err := wal.Tail(ctx, p.wal(), d.writer().Layout(), old, prev.After, f, now.head.WriterEpoch(), d.tp)
		if err != nil {
			return storageError(ctx, fmt.Errorf("tiered: %s: read the tail from WAL writer %s: %w", p.prefix, old, err))
		}
		for _, l := range tails[d.tp] {
			extents = append(extents, manifest.WALExtent{Writer: [8]byte(old), Sequence: l.Sequence, Position: l.Extent.Position,
				Size: int64(l.Extent.Size), FirstOffset: l.Extent.FirstOffset, LastOffset: l.Extent.LastOffset, CRC: l.Extent.CRC})
		}
		p.opts.Logger.Info("diskless: fenced the previous WAL writer", "prefix", p.prefix, "writer", old, "fence", f, "extents", len(tails[d.tp]))
	}
	// The log past the segments, as the record's extents and the old
	// writer's tail make it (a later extent wins over an earlier one it
	// overlaps; one past the log's end was failed: wal.Chain).
	spans := wal.Chain(base, p.walLocated(extents))
	if left := len(extents) - len(spans); left > 0 {
		p.opts.Logger.Info("diskless: left out extents the writer failed or that later ones replace", "prefix", p.prefix, "extents", left)
	}
	extents = extents[:0]
	for _, sp := range spans {
		if sp.To < sp.Extent.LastOffset {
			// A later extent overlaps part of this one: no append of
			// this protocol does that (a writer appends again only from
			// its durable end), and the record cannot say it.
			return fmt.Errorf("%w: %s: WAL extent %s offsets %d..%d is overlapped from %d by a later one: not a tail this protocol writes",
				backend.ErrCorruptRecord, p.prefix, sp.Key, sp.Extent.FirstOffset, sp.Extent.LastOffset, sp.To+1)
		}
		extents = append(extents, manifest.WALExtent{Writer: [8]byte(sp.Writer), Sequence: sp.Sequence, Position: sp.Extent.Position,
			Size: int64(sp.Extent.Size), FirstOffset: sp.Extent.FirstOffset, LastOffset: sp.Extent.LastOffset, CRC: sp.Extent.CRC})
	}
	// The writer's buffered appends of an older leadership of this
	// partition go (the log is rebuilt from the bucket): none may land in
	// the objects the new record names.
	d.writer().Reset(d.tp)
	if err := p.rebuildTailLocked(ctx, now.head, base, spans); err != nil {
		return err
	}
	// The leader's epoch begins at the rebuilt log's end, after the
	// tail's batches (appended as a follower's, with their own epochs).
	if err := p.local.BecomeLeader(ctx, epoch); err != nil {
		return err
	}
	d.writer().Lead(d.tp, epoch)
	d.failed.Store(false)
	d.ownMu.Lock()
	d.own, d.lastSeq = nil, d.writer().NextSequence()-1
	d.floor = d.writer().NextSequence()
	d.ownMu.Unlock()
	d.pendingAt.Store(epoch)
	d.pending.Store(true)
	// What the local log holds now is the bucket's: durable, and the
	// high watermark (on a diskless partition the bucket is the replica).
	end := p.local.Offsets().LogEnd
	d.durable.Store(end)
	d.wantHW.Store(max(d.wantHW.Load(), end))
	p.applyHW()
	w := d.recordLocked(base, extents)
	h, err := (*next).Edit(func(m *manifest.Manifest) { m.WAL = w })
	if err != nil {
		return err
	}
	*next = h
	return nil
}

// rebuildTailLocked makes the local log's tail above base exactly the
// extents' batches: it cuts the log back to base (or starts it there,
// after a lost directory, with the producer state of head's last
// segment), and appends each extent read from the bucket. head is the
// manifest the claim is made over, whose segments end at base.
// REQUIRES: p.mu, d.mu.
func (p *Partition) rebuildTailLocked(ctx context.Context, head *manifest.Head, base int64, spans []wal.Span) error {
	o := p.local.Offsets()
	// The log start to keep: the local log's, or the record's when an
	// earlier claim was cut short after it started the log over.
	keepStart := o.LogStart
	p.rec.mu.Lock()
	if p.rec.have {
		keepStart = max(keepStart, p.rec.st.LogStart)
	}
	p.rec.mu.Unlock()
	// Local offsets below the high watermark are the bucket's bytes (it
	// never passes the durable end); above it they may be appends that
	// never became durable (this Backend's, as a leader fenced since, or
	// before a crash), even below the segments' end, where another
	// leader's records now are: they go.
	keep := min(base, o.HighWatermark)
	switch {
	case o.LogEnd > keep && o.LogStart <= keep:
		if err := p.local.TruncateTo(keep); err != nil {
			return fmt.Errorf("tiered: %s: cut the local log back to %d (the bucket's segments end at %d): %w", p.prefix, keep, base, err)
		}
		if keep < base {
			if err := p.startAtLocked(ctx, head, base); err != nil {
				return err
			}
		}
	case o.LogEnd != base:
		// Behind the bucket (a lost directory), or starting past the
		// segments' end (DeleteRecordsBefore moved it there): start
		// over at the segments' end.
		if err := p.startAtLocked(ctx, head, base); err != nil {
			return err
		}
	}
	if err := p.readTail(ctx, spans, func(sp wal.Span, data []byte) error {
		return p.appendTailLocked(ctx, data, sp)
	}); err != nil {
		return err
	}
	// A log start past the segments' end (DeleteRecordsBefore) is kept:
	// the manifest's log start stops at its segments, the local log's
	// checkpoint holds the rest.
	if keepStart > base {
		// Every offset of the rebuilt tail is in the bucket: the high
		// watermark may pass it (the claim sets it so anyway).
		end := p.local.Offsets().LogEnd
		if err := p.local.SetHighWatermark(end); err != nil {
			return err
		}
		if err := p.local.DeleteRecordsBefore(ctx, min(keepStart, end)); err != nil {
			return fmt.Errorf("tiered: %s: keep the log start %d over the rebuilt tail: %w", p.prefix, keepStart, err)
		}
	}
	return nil
}

// tailReadsAhead is how many extents a claim reads ahead of the one it
// appends (ranged GETs at once; their bytes are held until appended).
const tailReadsAhead = 4

// readTail reads the spans' extents by ranged GETs, up to
// tailReadsAhead at once, and calls fn with each one's bytes in order; it
// stops at the first error.
func (p *Partition) readTail(ctx context.Context, spans []wal.Span, fn func(sp wal.Span, data []byte) error) error {
	type result struct {
		data []byte
		err  error
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	results := make([]chan result, len(spans))
	for i := range results {
		results[i] = make(chan result, 1)
	}
	slots := make(chan struct{}, tailReadsAhead)
	go func() {
		for i, sp := range spans {
			select {
			case slots <- struct{}{}:
			case <-ctx.Done():
				return
			}
			go func() {
				data, err := wal.ReadExtent(ctx, p.wal(), sp.Key, sp.Extent)
				results[i] <- result{data, err}
			}()
		}
	}()
	for i, sp := range spans {
		var r result
		select {
		case r = <-results[i]:
		case <-ctx.Done():
			return storageError(ctx, ctx.Err())
		}
		<-slots
		if r.err != nil {
			return storageError(ctx, fmt.Errorf("tiered: %s: read its tail from %s: %w", p.prefix, sp.Key, r.err))
		}
		if err := fn(sp, r.data); err != nil {
			return err
		}
	}
	return nil
}

// walLocated is where the record's extents are, as wal.Chain takes them.
func (p *Partition) walLocated(extents []manifest.WALExtent) []wal.Located {
	return walLocated(wal.NewLayout(p.walRoot()), p.dl.tp, extents)
}

// appendTailLocked appends a span's batches (those of its offsets From to
// To) as a follower appends, in runs no longer than a segment may hold (an
// extent holds every append of an upload interval). REQUIRES: d.mu (a
// replica's: p.mu).
func (p *Partition) appendTailLocked(ctx context.Context, data []byte, sp wal.Span) error {
	limit := min(p.local.Config().SegmentBytes, 1<<20)
	from, at := int64(-1), int64(0)
	flush := func(to int64) error {
		if from < 0 || to <= from {
			return nil
		}
		if _, err := p.local.Append(ctx, data[from:to], backend.AppendOptions{}); err != nil {
			return fmt.Errorf("%w: %s: the tail from %s position %d does not append: %w", backend.ErrCorruptRecord, p.prefix, sp.Key, sp.Extent.Position+from, err)
		}
		from = -1
		return nil
	}
	for at < int64(len(data)) {
		e, err := record.HeaderAt(data, at, int64(len(data)))
		if err != nil {
			return fmt.Errorf("%w: %s: the tail from %s position %d: %w", backend.ErrCorruptRecord, p.prefix, sp.Key, sp.Extent.Position+at, err)
		}
		switch {
		case e.LastOffset < sp.From:
			// Below the segments (the bucket holds it already), or
			// held from an earlier extent.
			if err := flush(at); err != nil {
				return err
			}
		case e.LastOffset > sp.To:
			// A later extent holds these offsets again: its bytes win.
			return flush(at)
		case from < 0:
			from = at
		case at+e.Size-from > limit:
			if err := flush(at); err != nil {
				return err
			}
			from = at
		}
		at += e.Size
	}
	return flush(at)
}

// startAtLocked starts an empty (or short) local log at the end of
// head's segments, next, with the producer state the last segment's
// snapshot holds. head is the manifest being claimed over, not the one
// the partition knew (a follower's may be older: its last segment would
// not end at next, and the producer state, the open transactions among
// it, would be lost). REQUIRES: p.mu.
func (p *Partition) startAtLocked(ctx context.Context, head *manifest.Head, next int64) error {
	var snap []byte
	last, ok, err := p.lastSegment(ctx, head)
	if err != nil {
		return storageError(ctx, err)
	}
	if ok && last.LastOffset+1 == next && last.SnapshotSize > 0 {
		if snap, err = p.remoteIndex(ctx, last, manifest.SnapshotSuffix); err != nil {
			return storageError(ctx, err)
		}
	}
	if err := p.segs.StartAt(ctx, next, snap); err != nil {
		return err
	}
	p.verified = nil
	return nil
}

// walRoot is the root the Backend's WAL objects live under.
func (p *Partition) walRoot() string { return p.dl.writer().Layout().Root() }

// recordLocked is the WAL record of a manifest whose segments end at
// base: the earlier writers' extents past it, and this writer's objects
// from the first that holds an acknowledged extent past it (or, with
// none, after the last that held any). It drops the writer's extents the
// segments cover. REQUIRES: d.mu or p.mu (own's owner in a commit).
func (d *diskless) recordLocked(base int64, extents []manifest.WALExtent) *manifest.WAL {
	d.ownMu.Lock()
	defer d.ownMu.Unlock()
	i := 0
	for i < len(d.own) && d.own[i].Extent.LastOffset < base {
		i++
	}
	d.own = d.own[i:]
	after := d.lastSeq
	if len(d.own) > 0 {
		after = d.own[0].Sequence - 1
	}
	return &manifest.WAL{Writer: [8]byte(d.writer().ID()), After: after, Extents: extents}
}

// walRecordLocked is the WAL record a commit carries of a manifest with
// log start logStart whose last segment ends at last (-1: none).
// REQUIRES: p.mu.
func (p *Partition) walRecordLocked(prev *manifest.Head, logStart, last int64) *manifest.WAL {
	base := max(logStart, 0, last+1)
	var extents []manifest.WALExtent
	if w := prev.WAL(); w != nil {
		for _, e := range w.Extents {
			if e.LastOffset >= base {
				extents = append(extents, e)
			}
		}
	}
	return p.dl.recordLocked(base, extents)
}
