package tiered

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"strings"
	"time"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/manifest"
	"github.com/tierlog/tierlog/objstore"
	"github.com/tierlog/tierlog/objstore/seal"
)

// The manifest and its commits. A change of the bucket (an upload,
// retention, a new log start) runs under p.mu (beginChange, or
// beginLeaderChange for the leader's), commits the next manifest by a
// conditional put on the ETag of the one it knew (commitLocked), and
// settles a commit whose answer was lost by reading the manifest back
// (reconcileLocked). A lost condition means another writer: a newer
// leader fences this one (fence).

// maxManifestBytes bounds the manifest a partition reads: about 100
// bytes a segment, so room for over half a million segments. A larger
// object under the manifest's key is not one tierlog wrote.
const maxManifestBytes = 64 << 20

// readManifest GETs and decodes the manifest (one request); a missing one
// is empty.
func (p *Partition) readManifest(ctx context.Context) (*manifestState, error) {
	_, h, info, err := p.readManifestObject(ctx, p.layout().Manifest())
	if errors.Is(err, objstore.ErrNotFound) && !errors.Is(err, objstore.ErrBucketNotFound) {
		return noManifest(), nil
	}
	if err != nil {
		return nil, err
	}
	return &manifestState{head: h, etag: info.ETag}, nil
}

// readHead GETs the manifest's head and decodes it alone, loading no
// part (what a deletion needs: its generation, flags and end). A missing
// manifest is a nil head and no error.
func (p *Partition) readHead(ctx context.Context) (*manifest.Head, string, error) {
	key := p.layout().Manifest()
	data, info, err := p.readHeadBytes(ctx, key)
	if errors.Is(err, objstore.ErrNotFound) && !errors.Is(err, objstore.ErrBucketNotFound) {
		return nil, "", nil
	}
	if err != nil {
		return nil, "", err
	}
	h, err := manifest.DecodeHead(data)
	if err != nil {
		return nil, "", fmt.Errorf("tiered: %s: %w", key, err)
	}
	return h, info.ETag, nil
}

// readManifestObject GETs and decodes the manifest's head (or a backup
// of one) under key, at most maxManifestBytes, returning its bytes too.
// No part is read: a partition keeps the head (see segs.go).
func (p *Partition) readManifestObject(ctx context.Context, key string) ([]byte, *manifest.Head, objstore.ObjectInfo, error) {
	data, info, err := p.readHeadBytes(ctx, key)
	if err != nil {
		return nil, nil, info, err
	}
	h, err := manifest.DecodeHead(data)
	if err != nil {
		return nil, nil, info, fmt.Errorf("tiered: %s: %w", key, err)
	}
	return data, h, info, nil
}

// noManifest is the state of a partition whose manifest does not exist.
func noManifest() *manifestState {
	h, _ := (&manifest.Manifest{}).Head()
	return &manifestState{head: h}
}

// readHeadBytes GETs the manifest's head (or a backup's) under key, at
// most maxManifestBytes.
func (p *Partition) readHeadBytes(ctx context.Context, key string) ([]byte, objstore.ObjectInfo, error) {
	data, info, err := readManifestBytes(ctx, p.store, key)
	s := p.opts.selective
	switch {
	case s != nil && s.sealed && errors.Is(err, seal.ErrNotSealed):
		return p.otherKind(ctx, key)
	case err != nil:
		return nil, info, err
	case seal.LooksSealed(data) && s != nil && !s.sealed:
		return p.otherKind(ctx, key)
	case seal.LooksSealed(data):
		return nil, info, fmt.Errorf("tiered: %s: %w", key, seal.ErrSealedObject)
	case s != nil && s.sealed:
		// Opened, or, with the URL's read-plaintext=true, passed as it
		// is: the kept header says which (no request when sealed).
		sd, err := seal.Sealed(p.store)
		if err != nil {
			return nil, info, err
		}
		if _, sealed, err := sd.ObjectKey(ctx, key); err != nil {
			return nil, info, fmt.Errorf("tiered: read %s: %w", key, err)
		} else if !sealed {
			return p.otherKind(ctx, key)
		}
	}
	return data, info, nil
}

// readManifestBytes GETs key through store, at most maxManifestBytes.
func readManifestBytes(ctx context.Context, store *objstore.Store, key string) ([]byte, objstore.ObjectInfo, error) {
	rc, info, err := store.Get(ctx, key, 0, -1)
	if err != nil {
		return nil, info, fmt.Errorf("tiered: read %s: %w", key, err)
	}
	if info.Size > maxManifestBytes {
		rc.Close()
		return nil, info, fmt.Errorf("tiered: %s: %w: %d bytes, more than the %d a manifest may have", key, manifest.ErrCorrupt, info.Size, maxManifestBytes)
	}
	data, err := io.ReadAll(io.LimitReader(rc, maxManifestBytes+1))
	rc.Close()
	if err != nil {
		return nil, info, fmt.Errorf("tiered: read %s: %w", key, err)
	}
	if len(data) > maxManifestBytes {
		return nil, info, fmt.Errorf("tiered: %s: %w: more than the %d bytes a manifest may have", key, manifest.ErrCorrupt, maxManifestBytes)
	}
	return data, info, nil
}

// otherKind reads key, a manifest sealed when the partition's topic does
// not ask for sealing or the other way round, in a Backend that seals
// only the topics that ask. A deleted partition's manifest is returned
// (a topic of the name created anew is of the kind it asks for; its
// first commit replaces the manifest); any other is an
// ErrInvalidConfig naming the topic config, since a topic is sealed or
// not from its creation.
func (p *Partition) otherKind(ctx context.Context, key string) ([]byte, objstore.ObjectInfo, error) {
	s := p.opts.selective
	data, info, err := readManifestBytes(ctx, s.either, key)
	if err != nil {
		return nil, info, err
	}
	is, asks := "sealed", "false"
	if s.sealed {
		is, asks = "not sealed", "true"
	}
	h, err := manifest.DecodeHead(data)
	if err != nil || !h.Deleted() {
		return nil, info, fmt.Errorf("%w: %s is %s, but the partition's topic has remote.storage.seal.enable=%s: a topic is sealed or not from its creation (docs/operators.md, Sealed buckets)",
			backend.ErrInvalidConfig, key, is, asks)
	}
	if !s.sealed {
		return data, info, nil // a sealed manifest: one only the keys make
	}
	// A plaintext manifest anyone who may write to the bucket can make:
	// a sealed topic takes its word that the partition is deleted only
	// when nothing else is left of it, lest one forged over a sealed
	// partition's hide its data.
	var left []string
	if err := s.either.List(ctx, p.layout().ListPrefix(), func(o objstore.ObjectInfo) bool {
		if o.Key != key {
			left = append(left, o.Key)
		}
		return len(left) < 3
	}); err != nil {
		return nil, info, fmt.Errorf("tiered: %s: %w", p.prefix, err)
	}
	if len(left) > 0 {
		return nil, info, fmt.Errorf("%w: %s says the partition is deleted, but is not sealed while its topic has remote.storage.seal.enable=true, and objects of the partition remain (%s): "+
			"a sealed topic takes over a deleted plaintext partition only once its deletion finished (Delete it again); else the manifest was replaced",
			backend.ErrInvalidConfig, key, strings.Join(left, ", "))
	}
	return data, info, nil
}

// adopt makes st the committed manifest, and tells the local log where the
// partition begins (its log-start-offset-checkpoint records that).
//
// Only a bucket that runs on into the local log holds the partition's
// first offsets: once DeleteRecordsBefore moved the local log start past
// the bucket's end, the local start is the partition's.
//
// A manifest of a new generation is recorded in the partition's
// tier-state-checkpoint first (see rollback.go), so nothing is deleted on
// its strength before the record is on disk.
func (p *Partition) adopt(st *manifestState) {
	defer p.notifyTieredEnd(p.Offsets().TieredEnd)
	p.record(st)
	p.man.Store(st)
	if last := st.head.LastOffset(); last >= 0 && last+1 >= p.local.Offsets().LogStart {
		p.segs.SetRemoteLogStart(st.head.LogStartOffset())
	} else {
		p.segs.SetRemoteLogStart(-1)
	}
}

// fence stops this writer: the manifest was committed by writerEpoch
// (another writer). BecomeLeader with a higher epoch lifts it.
func (p *Partition) fence(writerEpoch int32, cause error) {
	err := fmt.Errorf("%w: %s: %w", backend.ErrFenced, p.layout().Manifest(), cause)
	if p.fenc.CompareAndSwap(nil, &fencing{err: err, epoch: writerEpoch}) {
		p.metrics.Fenced.Add(1)
		p.opts.Logger.Warn("fenced: another writer owns the partition", "err", err)
	}
}

// Fenced returns the fencing error, or nil while this writer owns the
// partition.
func (p *Partition) Fenced() error {
	if f := p.fenc.Load(); f != nil {
		return f.err
	}
	return nil
}

// beginChange starts a change of the bucket (an offload, retention, a new
// log start): it takes p.mu, with ctx also cancelled by Close, and fails
// with ErrClosed once the partition is closed. done releases both.
func (p *Partition) beginChange(ctx context.Context) (_ context.Context, done func(), err error) {
	if err := p.checkOpen(); err != nil {
		return nil, nil, err
	}
	ctx, cancel := p.withClose(ctx)
	p.mu.Lock()
	if err := p.checkOpen(); err != nil {
		p.mu.Unlock()
		cancel()
		return nil, nil, err
	}
	if err := p.attach(ctx); err != nil {
		p.mu.Unlock()
		cancel()
		return nil, nil, err
	}
	return ctx, func() { p.mu.Unlock(); cancel() }, nil
}

// beginLeaderChange is beginChange for the leader's changes (uploads,
// retention, the log start): it fails with ErrNotLeader unless the
// partition leads, and claims the bucket for the current epoch first.
func (p *Partition) beginLeaderChange(ctx context.Context) (_ context.Context, done func(), err error) {
	if p.role.Load() != roleLeader {
		return nil, nil, p.notLeader()
	}
	ctx, done, err = p.beginChange(ctx)
	if err != nil {
		return nil, nil, err
	}
	if err := p.reconcileLocked(ctx); err != nil {
		done()
		return nil, nil, err
	}
	if err := p.claimLocked(ctx); err != nil {
		done()
		return nil, nil, err
	}
	if err := p.fitLocalStartLocked(ctx); err != nil {
		done()
		return nil, nil, err
	}
	return ctx, done, nil
}

// withClose returns ctx, also cancelled when the partition closes.
func (p *Partition) withClose(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	if p.closing == nil {
		return ctx, cancel // a tool's view of a prefix (no Open): nothing closes it
	}
	stop := context.AfterFunc(p.closing, cancel)
	return ctx, func() { stop(); cancel() }
}

// commitLocked replaces the manifest st (whose whole manifest is prev)
// with next by a conditional put. A
// lost condition fences this writer, unless the manifest now in the bucket
// is exactly next (a retried put whose first try had succeeded). When the
// outcome cannot be known (the put failed retryably, or the bucket cannot
// be read back), the error is retryable and the next change reconciles.
// REQUIRES: p.mu held.
func (p *Partition) commitLocked(ctx context.Context, st *manifestState, prev, next *manifest.Manifest) error {
	return p.commitBuiltLocked(ctx, st, func(gen uint64, epoch int32) (*manifest.Head, []manifest.PartObject, error) {
		next.Generation = gen
		next.WriterEpoch = epoch
		if p.dl != nil {
			next.WAL = p.walRecordLocked(st.head, next.LogStartOffset, lastOffsetOf(next.Segments))
		}
		made, err := next.Layer(prev, newPartID)
		if err != nil {
			return nil, nil, err
		}
		head, err := next.Head() // what the partition keeps, and what is put
		return head, made, err
	})
}

// commitAppendLocked commits segs appended to the manifest st holds,
// with its log start at logStart: commitLocked's commit, built from the
// head alone (manifest.Head.Append), reading only the parts a carry
// merges, so a commit's cost does not grow with the partition's length.
// REQUIRES: p.mu held.
func (p *Partition) commitAppendLocked(ctx context.Context, st *manifestState, segs []manifest.Segment, logStart int64) error {
	if err := p.checkPartsLocked(ctx, st.head); err != nil {
		return err
	}
	return p.commitBuiltLocked(ctx, st, func(gen uint64, epoch int32) (*manifest.Head, []manifest.PartObject, error) {
		load := func(ref manifest.Part) ([]manifest.Segment, error) { return p.partSegments(ctx, ref) }
		head, made, err := st.head.Append(segs, logStart, load, newPartID)
		if err != nil {
			return nil, nil, err
		}
		wal := st.head.WAL()
		if p.dl != nil {
			wal = p.walRecordLocked(st.head, logStart, head.LastOffset())
		}
		head, err = head.Edit(func(m *manifest.Manifest) { m.Generation, m.WriterEpoch, m.WAL = gen, epoch, wal })
		return head, made, err
	})
}

// checkPartsLocked reads each part h names that this partition has not
// read yet, and fails on the first that cannot be read or does not hold
// what h says: nothing is committed over a manifest whose parts are gone
// or damaged (an append commit reads only the parts a carry merges, so
// without this it would go on over them). Parts are immutable, so each
// is read once (from the caches when they hold it). REQUIRES: p.mu held.
func (p *Partition) checkPartsLocked(ctx context.Context, h *manifest.Head) error {
	for _, ref := range h.Parts {
		if _, ok := p.partsRead[ref.ID]; ok {
			continue
		}
		if _, err := p.partSegments(ctx, ref); err != nil {
			return err
		}
		if p.partsRead == nil {
			p.partsRead = map[[8]byte]struct{}{}
		}
		p.partsRead[ref.ID] = struct{}{}
	}
	if len(p.partsRead) > 2*len(h.Parts)+manifest.Fanout {
		// Forget the parts the head no longer names.
		keep := make(map[[8]byte]struct{}, len(h.Parts))
		for _, ref := range h.Parts {
			keep[ref.ID] = struct{}{}
		}
		p.partsRead = keep
	}
	return nil
}

// lastOffsetOf is the last offset of segs' last segment, -1 for none.
func lastOffsetOf(segs []manifest.Segment) int64 {
	if n := len(segs); n > 0 {
		return segs[n-1].LastOffset
	}
	return -1
}

// commitBuiltLocked is commitLocked's commit of the head build makes for
// the next generation at the writer's epoch, with the parts it names.
// REQUIRES: p.mu held.
func (p *Partition) commitBuiltLocked(ctx context.Context, st *manifestState, build func(gen uint64, epoch int32) (*manifest.Head, []manifest.PartObject, error)) error {
	if err := p.reconcileLocked(ctx); err != nil {
		return err
	}
	if st != p.man.Load() {
		return fmt.Errorf("%w: the manifest changed while this commit was prepared", objstore.ErrRetryable)
	}
	epoch := p.epoch.Load()
	if p.role.Load() != roleLeader {
		return p.notLeader()
	}
	if st.head.WriterEpoch() > epoch {
		p.fence(st.head.WriterEpoch(), fmt.Errorf("the manifest was committed by leader epoch %d, this writer has %d", st.head.WriterEpoch(), epoch))
		return p.Fenced()
	}
	if st.head.Deleted() {
		return fmt.Errorf("%w: partition %s: its deletion has begun", backend.ErrNotFound, p.prefix)
	}
	head, made, err := build(st.head.Generation()+1, epoch)
	if err == nil && head.Lineage() == ([8]byte{}) && !head.Deleted() {
		head, err = head.Edit(giveLineage)
	}
	if err != nil {
		return err
	}
	data := head.Encode() // the whole manifest's bytes, without validating it again
	if len(made) > 0 {
		// The parts first (named by an intent): the head names them, and
		// must land within the intent's window, by this writer's clock.
		in, err := p.putPartsLocked(ctx, st.head.Generation(), made)
		if err != nil {
			return err
		}
		now := p.opts.Now()
		if err := in.checkWindow(now); err != nil {
			return err
		}
		wctx, cancel := context.WithTimeout(ctx, time.UnixMilli(in.CreatedMs+in.Window).Sub(now))
		defer cancel()
		outer := ctx
		ctx = wctx
		defer func() {
			if p.man.Load().head == head {
				p.removeIntent(outer, in) // committed: the head names them
			}
		}()
	}
	opts := objstore.PutOptions{IfMatch: st.etag, IfNoneMatch: st.etag == ""}
	info, err := p.store.Put(ctx, p.layout().Manifest(), bytes.NewReader(data), int64(len(data)), opts)
	p.metrics.ManifestBytesPut.Add(int64(len(data)))
	switch {
	case err == nil:
		p.adopt(&manifestState{head: head, etag: info.ETag})
		if p.dl != nil {
			p.dl.claimCommitted(epoch) // before claimed: see claimedFor
		}
		p.claimed.Store(epoch)
		p.metrics.ManifestCommits.Add(1)
		p.backupManifest(ctx, head.Generation(), data)
		return nil
	case errors.Is(err, objstore.ErrPreconditionFailed):
		p.unknown = head
		return p.reconcileLocked(ctx)
	default:
		p.unknown = head // it may have landed
		return fmt.Errorf("tiered: commit manifest generation %d: %w", head.Generation(), err)
	}
}

// reconcileLocked settles a commit whose outcome is unknown by reading the
// bucket's manifest: if it is the one this writer tried to commit, adopt
// it; if it is still the one this writer knew, the commit did not happen;
// anything else was written by another writer, which fences this one.
// REQUIRES: p.mu held.
func (p *Partition) reconcileLocked(ctx context.Context) error {
	if err := p.Fenced(); err != nil {
		return err
	}
	if p.unknown == nil {
		return nil
	}
	now, err := p.judged(ctx)
	if err != nil {
		return fmt.Errorf("tiered: reconcile the manifest: %w", err)
	}
	nowBytes, cur := now.head.Encode(), p.man.Load()
	switch {
	case bytes.Equal(nowBytes, p.unknown.Encode()):
		// Our commit landed, as far as this read shows: confirmPut
		// makes it durable before it is adopted (and recorded), or
		// leaves it unknown.
		if err := p.confirmPut(ctx, p.layout().Manifest(), bytes.NewReader(nowBytes), int64(len(nowBytes)), now.etag, crc32.Checksum(nowBytes, castagnoli)); err != nil {
			return err
		}
		p.adopt(now) // our commit landed
		if p.dl != nil {
			p.dl.claimCommitted(now.head.WriterEpoch()) // before claimed: see claimedFor
		}
		p.claimed.Store(now.head.WriterEpoch())
		p.metrics.ManifestCommits.Add(1)
		p.backupManifest(ctx, now.head.Generation(), nowBytes)
	case bytes.Equal(nowBytes, cur.head.Encode()):
		// Our commit did not land; the manifest is the one we knew (under
		// a new ETag when it was restored from its backup meanwhile).
		if now.etag != cur.etag {
			p.adopt(now)
		}
	case recreatedSince(cur, now):
		p.unknown = nil
		p.adopt(now)
		p.fence(now.head.WriterEpoch(), recreatedError(cur, now))
		return p.Fenced()
	case now.head.WriterEpoch() < p.epoch.Load() && p.claimed.Load() != p.epoch.Load() && !now.head.Deleted():
		// An older leader committed before this one claimed the bucket:
		// its commit stands (what it uploaded was below its high
		// watermark); this one claims over it and tries again.
		p.unknown = nil
		p.adopt(now)
		return fmt.Errorf("%w: an older leader (epoch %d) committed generation %d first", objstore.ErrRetryable, now.head.WriterEpoch(), now.head.Generation())
	default:
		p.unknown = nil
		p.fence(now.head.WriterEpoch(), fmt.Errorf("the manifest moved from generation %d to %d, written by leader epoch %d", cur.head.Generation(), now.head.Generation(), now.head.WriterEpoch()))
		return p.Fenced()
	}
	p.unknown = nil
	return nil
}
