package tiered

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"

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
// next commit overwrites it: after each commit it also writes the
// committed bytes to <prefix>/manifest.<generation, 20 digits>, an object
// nothing overwrites, and deletes the backup keptBackups generations
// older. A backup is written only once its commit succeeded, so it never
// holds a generation the bucket did not acknowledge. When the bucket
// answers that the manifest is missing where the partition's record says
// one must be (a recorded generation, or a log start below the local
// log), the partition restores it from the newest backup at or above the
// recorded generation, with a create-only PUT (a manifest that is there
// after all, or that another writer restored first, wins), and judges it
// as any manifest read. A read-only partition (tools) restores nothing;
// without such a backup the partition is refused as before, retryably.
// gc removes backups older than the last keptBackups (a delete that
// failed); the deletion of a partition removes them with its other
// objects. Their names are manifest.Layout's (KindManifestBackup).

// keptBackups is how many generations' backups a partition keeps.
const keptBackups = 2

// backupManifest writes the committed generation gen (its encoded bytes,
// data) to its backup and deletes the one keptBackups older. Best effort:
// the commit stands either way; a failure is logged and counted, and the
// older backups stay.
func (p *Partition) backupManifest(ctx context.Context, gen uint64, data []byte) {
	if _, err := p.store.Put(ctx, p.layout().Backup(gen), bytes.NewReader(data), int64(len(data)), objstore.PutOptions{}); err != nil {
		p.metrics.ManifestBackupErrors.Add(1)
		p.opts.Logger.Warn("could not back up the manifest; the older backups stay", "prefix", p.prefix, "generation", gen, "err", err)
		return
	}
	if gen > keptBackups {
		if err := p.store.Delete(ctx, p.layout().Backup(gen-keptBackups)); err != nil {
			p.opts.Logger.Debug("could not delete an old manifest backup", "prefix", p.prefix, "generation", gen-keptBackups, "err", err)
		}
	}
}

// manifestExpected says whether the partition's record says the bucket
// holds its manifest: a recorded generation, or a log start (the
// log-start-offset-checkpoint) below the local log.
func (p *Partition) manifestExpected() bool {
	_, below := p.local.RemoteLogStart()
	return below || p.recordedGeneration() > 0
}

// restoreManifest puts the newest backup at or above the recorded
// generation back under the manifest's key (see the top of this file)
// and returns the manifest then under it: the backup's, or one that was
// there after all. It returns a missing manifest (no ETag) when there is
// no such backup, and changes nothing for a read-only partition.
func (p *Partition) restoreManifest(ctx context.Context) (*manifestState, error) {
	missing := &manifestState{m: &manifest.Manifest{}}
	if p.local.ReadOnly() {
		return missing, nil
	}
	floor := p.recordedGeneration()
	layout := p.layout()
	var best uint64
	found := false
	if err := p.store.List(ctx, layout.Join(manifest.BackupPrefix), func(o objstore.ObjectInfo) bool {
		if b, err := layout.Parse(o.Key); err == nil && b.Kind == manifest.KindManifestBackup && b.Generation >= floor && (!found || b.Generation > best) {
			best, found = b.Generation, true
		}
		return true
	}); err != nil {
		return nil, fmt.Errorf("tiered: list the manifest's backups: %w", err)
	}
	if !found {
		return missing, nil
	}
	key := layout.Backup(best)
	rc, _, err := p.store.Get(ctx, key, 0, -1)
	if err != nil {
		return nil, fmt.Errorf("tiered: read the manifest's backup: %w", err)
	}
	data, err := io.ReadAll(io.LimitReader(rc, maxManifestBytes+1))
	rc.Close()
	if err != nil {
		return nil, fmt.Errorf("tiered: read the manifest's backup %s: %w", key, err)
	}
	if len(data) > maxManifestBytes {
		return nil, fmt.Errorf("tiered: %s: %w: more than the %d bytes a manifest may have", key, manifest.ErrCorrupt, maxManifestBytes)
	}
	m, err := manifest.Decode(data)
	if err != nil {
		return nil, fmt.Errorf("tiered: %s: %w", key, err)
	}
	if m.Generation != best {
		return nil, fmt.Errorf("tiered: %s: %w: it holds generation %d", key, manifest.ErrCorrupt, m.Generation)
	}
	info, err := p.store.Put(ctx, layout.Manifest(), bytes.NewReader(data), int64(len(data)), objstore.PutOptions{IfNoneMatch: true})
	if errors.Is(err, objstore.ErrPreconditionFailed) {
		return p.readManifest(ctx) // there after all, or restored by another writer first
	}
	if err != nil {
		return nil, fmt.Errorf("tiered: restore %s from %s: %w", layout.Manifest(), key, err)
	}
	p.metrics.ManifestsRestored.Add(1)
	p.opts.Logger.Warn("the bucket answered that the manifest is gone; restored it from its backup", "prefix", p.prefix,
		"generation", best, "recorded_generation", floor, "backup", key)
	return &manifestState{m: m, etag: info.ETag}, nil
}
