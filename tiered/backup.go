package tiered

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/tierlog/tierlog/manifest"
	"github.com/tierlog/tierlog/objstore"
)

// Manifest backups.
//
// A store can lose the object a failed overwrite was replacing. Under the
// soak, a 4-node MinIO whose client went away in the middle of the
// manifest's PUT (the fault proxy reset the connection) kept the new
// version on 5 of its 8 drives, removed the object from the other 3, and
// answered 404 for the manifest from then on, restarted and healthy (read
// off its drives). The manifest is the one record of which objects make
// the partition's remote log, so the partition could no longer be
// opened, with every segment object still there.
//
// So a partition does not keep its only copy of a generation where the
// next commit overwrites it: each committed generation is also written
// to <prefix>/manifest.<generation, 20 digits> (manifest.Layout's
// KindManifestBackup), create-only, and the backup keptBackups
// generations older is deleted. The rules that make a restore safe:
//
//   - A backup is written only once its generation is committed (the
//     manifest's PUT succeeded, or a commit whose answer was lost is found
//     to have landed), so it never holds a generation the bucket did not
//     acknowledge.
//   - Nothing is deleted on the strength of a generation before its
//     backup is written (ensureBackupLocked, before remote retention's
//     deletes, local retention and a local log start that follows the
//     manifest): a generation without a backup has changed nothing that
//     an older one cannot describe, so the newest backup is never behind
//     a deletion.
//   - Only a leader restores, and only when the bucket answers that the
//     manifest is gone where the partition's record says one must be (a
//     recorded generation, or a log start below the local log); it takes
//     the newest readable backup at or above the recorded generation, puts
//     it back with a create-only PUT (a manifest that is there after all,
//     or one another writer restored first, wins), and judges it as any
//     manifest read (an older incarnation, a lower generation than
//     recorded, a moved log start are refused as before).
//   - A read-only partition (tools) and a follower restore nothing;
//     without a backup new enough the partition is refused, retryably, as
//     before.
//
// gc removes backups older than the last keptBackups (a delete that
// failed), and with RemovePastEnd (an older bucket accepted) those above
// the manifest's generation; it refuses a prefix whose manifest is gone
// while backups remain. The deletion of a partition removes them with its
// other objects.

// pendingBackup is a committed generation whose backup is not written.
type pendingBackup struct {
	gen  uint64
	data []byte
}

// keptBackups is how many generations' backups a partition keeps.
const keptBackups = 2

// backupManifest writes the committed generation gen (its encoded
// bytes, data) to its backup, create-only, and deletes the one
// keptBackups older. The commit stands either way: a failure is logged
// and counted and left due (backupDue), and ensureBackupLocked writes it
// before anything is deleted. REQUIRES: p.mu held.
func (p *Partition) backupManifest(ctx context.Context, gen uint64, data []byte) {
	p.backupDue = &pendingBackup{gen: gen, data: data}
	if err := p.ensureBackupLocked(ctx); err != nil {
		p.metrics.ManifestBackupErrors.Add(1)
		p.opts.Logger.Warn("could not back up the manifest; nothing is deleted on its strength until it is", "prefix", p.prefix, "generation", gen, "err", err)
	}
}

// ensureBackupLocked writes the backup of the committed generation if it
// is due; an error (retryable) means it is still due and the caller
// deletes nothing. REQUIRES: p.mu held.
func (p *Partition) ensureBackupLocked(ctx context.Context) error {
	due := p.backupDue
	if due == nil {
		return nil
	}
	key := p.layout().Backup(due.gen)
	_, err := p.store.Put(ctx, key, bytes.NewReader(due.data), int64(len(due.data)), objstore.PutOptions{IfNoneMatch: true})
	if errors.Is(err, objstore.ErrPreconditionFailed) {
		// There already: ours from an attempt whose answer was lost, or
		// a deleted incarnation's of the same generation, which this
		// committed one replaces.
		var old []byte
		if old, err = p.store.ReadAll(ctx, key, 0, -1); err == nil && !bytes.Equal(old, due.data) {
			_, err = p.store.Put(ctx, key, bytes.NewReader(due.data), int64(len(due.data)), objstore.PutOptions{})
		}
	}
	if err != nil {
		return fmt.Errorf("%w: tiered: back up manifest generation %d to %s: %w", objstore.ErrRetryable, due.gen, key, err)
	}
	p.backupDue = nil
	if due.gen > keptBackups {
		if err := p.store.Delete(ctx, p.layout().Backup(due.gen-keptBackups)); err != nil {
			p.opts.Logger.Debug("could not delete an old manifest backup", "prefix", p.prefix, "generation", due.gen-keptBackups, "err", err)
		}
	}
	return nil
}

// manifestExpected says whether the partition's record says the bucket
// holds its manifest: a recorded generation, or a log start (the
// log-start-offset-checkpoint) below the local log.
func (p *Partition) manifestExpected() bool {
	_, below := p.segs.RemoteLogStart()
	return below || p.recordedGeneration() > 0
}

// restoreManifest puts the newest readable backup at or above the
// recorded generation back under the manifest's key (see the top of this
// file) and returns the manifest then under it: the backup's, or one that
// was there after all. It returns a missing manifest (no ETag) when there
// is no such backup, and changes nothing for a read-only partition or one
// that does not lead.
func (p *Partition) restoreManifest(ctx context.Context) (*manifestState, error) {
	missing := noManifest()
	if p.segs.ReadOnly() || p.role.Load() != roleLeader {
		return missing, nil
	}
	floor := p.recordedGeneration()
	layout := p.layout()
	var gens []uint64
	if err := p.store.List(ctx, layout.Join(manifest.BackupPrefix), func(o objstore.ObjectInfo) bool {
		if b, err := layout.Parse(o.Key); err == nil && b.Kind == manifest.KindManifestBackup && b.Generation >= floor {
			gens = append(gens, b.Generation)
		}
		return true
	}); err != nil {
		return nil, fmt.Errorf("%w: tiered: list the manifest's backups: %w", objstore.ErrRetryable, err)
	}
	slices.Sort(gens)
	for i := len(gens) - 1; i >= 0; i-- {
		key := layout.Backup(gens[i])
		data, h, err := p.readBackup(ctx, key, gens[i])
		if errors.Is(err, objstore.ErrNotFound) || errors.Is(err, manifest.ErrCorrupt) {
			p.opts.Logger.Warn("skipped an unreadable manifest backup", "prefix", p.prefix, "backup", key, "err", err)
			continue // gone meanwhile, or damaged: the next older one
		}
		if err != nil {
			return nil, err
		}
		info, err := p.store.Put(ctx, layout.Manifest(), bytes.NewReader(data), int64(len(data)), objstore.PutOptions{IfNoneMatch: true})
		if errors.Is(err, objstore.ErrPreconditionFailed) {
			return p.readManifest(ctx) // there after all, or restored by another writer first
		}
		if err != nil {
			return nil, fmt.Errorf("%w: tiered: restore %s from %s: %w", objstore.ErrRetryable, layout.Manifest(), key, err)
		}
		p.metrics.ManifestsRestored.Add(1)
		p.opts.Logger.Warn("the bucket answered that the manifest is gone; restored it from its backup", "prefix", p.prefix,
			"generation", gens[i], "recorded_generation", floor, "backup", key)
		return &manifestState{head: h, etag: info.ETag}, nil
	}
	return missing, nil
}

// readBackup reads and decodes the backup of generation gen under key.
// The parts its head names are read too: a backup whose parts are not
// all there (and sound) is damaged.
func (p *Partition) readBackup(ctx context.Context, key string, gen uint64) ([]byte, *manifest.Head, error) {
	data, h, _, err := p.readManifestObject(ctx, key)
	if err != nil {
		return nil, nil, err
	}
	if h.Generation() != gen {
		return nil, nil, fmt.Errorf("tiered: %s: %w: it holds generation %d", key, manifest.ErrCorrupt, h.Generation())
	}
	if _, err := p.whole(ctx, h); err != nil {
		return nil, nil, fmt.Errorf("tiered: %s: %w", key, err)
	}
	return data, h, nil
}
