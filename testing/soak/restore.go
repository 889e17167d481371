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

// restore loses A's partition directory (or the whole log dir, C's with
// it) and rebuilds it from the bucket: first the bucket is brought up to
// the log end (bringUpToDate; a bucket still behind then skips the
// restore), then the ledger records, durably, where the restored logs
// will end, then finishRestore.
func (c *child) restore(ctx context.Context, variant byte) error {
	c.count("restores_begun", 1)
	end, ok, err := c.bringUpToDate(ctx, c.la, c.p, topicA)
	if err != nil || !ok {
		return err
	}
	endC := int64(-1)
	if variant == restoreLostLogDir {
		if endC, ok, err = c.bringUpToDate(ctx, c.lc, c.pc, topicC); err != nil || !ok {
			return err
		}
		c.count("b_records_dropped_with_the_log_dir", int64(len(c.led.b.recs)))
	}
	if err := c.led.restoreBegins(end, variant, endC); err != nil {
		return err
	}
	// From here on the restore must finish, faults or not, within the
	// bound of finishRestore: a failure ends the life (the next one
	// finishes it).
	rctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	if err := c.finishRestore(rctx, *c.led.pr); err != nil {
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

// bringUpToDate brings the bucket up to a tiered topic's log end: a roll,
// then offloads until nothing is left to upload, faults or not, for up to
// a minute. It returns the log end, and false (counted) when the bucket
// is still behind.
func (c *child) bringUpToDate(ctx context.Context, l *local.Log, p *tiered.Partition, topic byte) (int64, bool, error) {
	if err := l.Roll(); err != nil {
		return 0, false, err
	}
	if err := p.SetHighWatermark(p.Offsets().LogEnd); err != nil {
		return 0, false, err
	}
	end := p.Offsets().LogEnd
	if err := p.Flush(); err != nil {
		return 0, false, err
	}
	if err := c.led.flushed(topic, end); err != nil {
		return 0, false, err
	}
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); {
		if _, err := p.Offload(ctx); err != nil {
			if !retryable(err) {
				return 0, false, err
			}
			c.count("step_retries_restore_offload", 1)
			time.Sleep(100 * time.Millisecond)
			continue
		}
		if n, _ := p.CopyLag(); n == 0 {
			break
		}
	}
	last := p.Head().LastOffset()
	if last < 0 || last+1 != p.Offsets().LogEnd {
		c.count("restores_skipped", 1) // the bucket is behind: the directory stays
		return 0, false, nil
	}
	return last + 1, true, nil
}

// finishRestore loses A's directory, or the whole log dir (as the
// restore's variant says), restores A (and then C) from the bucket,
// opens them as tierctl restore does, and checks they end where the
// ledger says.
func (c *child) finishRestore(ctx context.Context, pr pendingRestore) error {
	end, variant := pr.end, pr.variant
	if c.p != nil {
		if err := c.p.Close(); err != nil {
			return err
		}
		c.p, c.la = nil, nil
	}
	if variant == restoreLostLogDir && c.pc != nil {
		if err := c.pc.Close(); err != nil {
			return err
		}
		c.pc, c.lc = nil, nil
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
	m, err := c.restoreDir(ctx, prefix, dir)
	if err != nil {
		return err
	}
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
	if variant == restoreLostLogDir {
		if _, err := c.restoreDir(ctx, prefixC, filepath.Join(c.logDir(), nameC+"-0")); err != nil {
			return err
		}
		if err := c.openC(ctx); err != nil {
			return err
		}
		c.count("c_restores", 1)
		if got := c.lc.Offsets().LogEnd; got != pr.endC {
			return violation("C", "the restored log ends at %d, the bucket's manifest at %d when the restore began", got, pr.endC)
		}
		if err := c.pc.SetHighWatermark(pr.endC); err != nil {
			return err
		}
	}
	if err := c.led.restoreEnds(); err != nil {
		return err
	}
	c.count("restores", 1)
	c.newProducers()
	c.logStartA = -1
	return nil
}

// restoreDir rebuilds a partition directory from the bucket, retrying
// while the bucket fails retryably.
func (c *child) restoreDir(ctx context.Context, prefix, dir string) (*manifest.Manifest, error) {
	for {
		m, err := tiered.Restore(ctx, c.store, prefix, dir, tiered.RestoreOptions{Backend: c.b})
		if err == nil {
			c.count("restore_bytes", m.Size())
			return m, nil
		}
		if !retryable(err) || ctx.Err() != nil {
			return nil, fmt.Errorf("restore of %s: %w", dir, err)
		}
		c.count("step_retries_restore", 1)
		time.Sleep(200 * time.Millisecond)
	}
}
