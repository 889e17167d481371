package soak

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/compaction"
	"github.com/tierlog/tierlog/local"
	"github.com/tierlog/tierlog/manifest"
	"github.com/tierlog/tierlog/tiered"
)

// restore loses A's partition directory and rebuilds it from the bucket:
// first the bucket is brought up to the log end (a roll, then offloads
// until nothing is left to upload, faults or not, for up to a minute; a
// bucket still behind then skips the restore), then the ledger records,
// durably, where the restored log will end, then finishRestore.
func (c *child) restore(ctx context.Context, variant byte) error {
	c.count("restores_begun", 1)
	if err := c.la.Roll(); err != nil {
		return err
	}
	if err := c.p.SetHighWatermark(c.p.Offsets().LogEnd); err != nil {
		return err
	}
	if err := c.flushA(ctx); err != nil {
		return err
	}
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); {
		if err := c.offload(ctx); err != nil {
			if !retryable(err) {
				return err
			}
			c.count("step_retries_restore_offload", 1)
			time.Sleep(100 * time.Millisecond)
			continue
		}
		if n, _ := c.p.CopyLag(); n == 0 {
			break
		}
	}
	last := c.p.Head().LastOffset()
	if last < 0 || last+1 != c.p.Offsets().LogEnd {
		c.count("restores_skipped", 1) // the bucket is behind: the directory stays
		return nil
	}
	end := last + 1
	if variant == restoreLostLogDir {
		c.count("b_records_dropped_with_the_log_dir", int64(len(c.led.b.recs)))
	}
	if err := c.led.restoreBegins(end, variant); err != nil {
		return err
	}
	// From here on the restore must finish, faults or not, within the
	// bound of finishRestore: a failure ends the life (the next one
	// finishes it).
	rctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	if err := c.finishRestore(rctx, end, variant); err != nil {
		return err
	}
	if c.lb == nil { // lost with the log dir
		var err error
		if c.lb, err = c.b.OpenLog(rctx, nameB, 0, c.cfgB); err != nil {
			return err
		}
		if c.cleaner, err = compaction.NewCleaner(c.b, compaction.CleanerOptions{MemoryBytes: c.spec.CleanerMemory, Backoff: time.Second}); err != nil {
			return err
		}
	}
	return nil
}

// finishRestore loses A's directory (as variant says), restores it from
// the bucket, opens it as tierctl restore does, and checks it ends where
// the ledger says.
func (c *child) finishRestore(ctx context.Context, end int64, variant byte) error {
	if c.p != nil {
		if err := c.p.Close(); err != nil {
			return err
		}
		c.p, c.la = nil, nil
	}
	dir := filepath.Join(c.logDir(), nameA+"-0")
	switch variant {
	case restoreDelete:
		if err := c.b.Delete(ctx, nameA, 0); err != nil && !errors.Is(err, backend.ErrNotFound) {
			return err
		}
	case restoreLostLogDir:
		if err := c.b.Close(); err != nil {
			return err
		}
		c.b, c.lb, c.cleaner = nil, nil, nil
		doomed := fmt.Sprintf("%s.lost%d-delete", c.logDir(), time.Now().UnixNano())
		if err := os.Rename(c.logDir(), doomed); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		if err := os.RemoveAll(doomed); err != nil {
			return err
		}
		var err error
		if c.b, err = local.OpenBackend(c.logDir(), local.BackendOptions{Logger: c.logger(), RemoteStorage: true}); err != nil {
			return err
		}
	default:
		doomed := fmt.Sprintf("%s.lost%d-delete", dir, time.Now().UnixNano())
		if err := os.Rename(dir, doomed); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		if err := os.RemoveAll(doomed); err != nil {
			return err
		}
	}
	var m *manifest.Manifest
	for try := 0; ; try++ {
		var err error
		m, err = tiered.Restore(ctx, c.store, prefix, dir, tiered.RestoreOptions{Backend: c.b})
		if err == nil {
			break
		}
		if !retryable(err) || ctx.Err() != nil {
			return fmt.Errorf("restore: %w", err)
		}
		c.count("step_retries_restore", 1)
		time.Sleep(200 * time.Millisecond)
	}
	c.count("restore_bytes", m.Size())
	var err error
	if c.la, err = c.b.OpenLog(ctx, nameA, 0, c.cfgA); err != nil {
		return err
	}
	if got := c.la.Offsets().LogEnd; got != end {
		return violation("A", "the restored log ends at %d, the bucket's manifest at %d when the restore began", got, end)
	}
	if err := c.la.SetHighWatermark(end); err != nil {
		return err
	}
	if m.LogStartOffset > c.la.Offsets().LogStart {
		if err := c.la.DeleteRecordsBefore(ctx, m.LogStartOffset); err != nil {
			return err
		}
	}
	if err := c.openTiered(ctx); err != nil {
		return err
	}
	if err := c.led.restoreEnds(); err != nil {
		return err
	}
	c.count("restores", 1)
	c.newProducers()
	c.logStartA = -1
	return nil
}
