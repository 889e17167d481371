package soak

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/compaction"
	"github.com/tierlog/tierlog/local"
	"github.com/tierlog/tierlog/objstore"
	"github.com/tierlog/tierlog/objstore/minio"
	"github.com/tierlog/tierlog/objstore/s3"
	"github.com/tierlog/tierlog/record"
	"github.com/tierlog/tierlog/tiered"
)

// openStore opens the bucket through the fault proxy with the driver spec
// names, its writes and deletes journaled (journalDriver).
func openStore(spec childSpec, opts objstore.Options) (*objstore.Store, error) {
	var d objstore.Driver
	var err error
	switch spec.Driver {
	case "minio":
		d, err = minio.New(minio.Config{Bucket: spec.Bucket, Endpoint: spec.Endpoint, Region: spec.Region,
			AccessKey: spec.AccessKey, SecretKey: spec.SecretKey})
	default:
		d, err = s3.New(context.Background(), s3.Config{Bucket: spec.Bucket, Endpoint: spec.Endpoint, Region: spec.Region,
			PathStyle: true, AccessKey: spec.AccessKey, SecretKey: spec.SecretKey})
	}
	if err != nil {
		return nil, err
	}
	if d, err = newJournalDriver(d, filepath.Join(spec.Root, journalFile), spec.Life); err != nil {
		return nil, err
	}
	return objstore.New(d, spec.Driver+"://"+spec.Bucket, opts), nil
}

// openAll opens the log directory (recovering it after a SIGKILL),
// finishes a restore a killed life began, opens the topics, and brings
// the ledger up to what the logs hold.
func (c *child) openAll() error {
	if err := removeLeftovers(c.logDir()); err != nil {
		return err
	}
	if err := removeLeftovers(c.spec.Root); err != nil {
		return err
	}
	var err error
	c.b, err = local.OpenBackend(c.logDir(), local.BackendOptions{Logger: c.logger(), RemoteStorage: true})
	if err != nil {
		return err
	}
	ctx := context.Background()
	if pr := c.led.pr; pr != nil { // a life was killed restoring A: finish it
		rctx, cancel := context.WithTimeout(ctx, 4*time.Minute)
		err := c.finishRestore(rctx, *pr)
		cancel()
		if err != nil {
			return err
		}
	} else if err := c.openA(ctx); err != nil {
		return err
	}
	if c.pc == nil { // not opened by a restore of the whole log dir
		if err := c.openC(ctx); err != nil {
			return err
		}
	}
	if c.lb, err = c.b.OpenLog(ctx, nameB, 0, c.cfgB); err != nil {
		return err
	}
	if err := c.reconcileA(ctx); err != nil {
		return err
	}
	if err := c.reconcileKeyed(ctx, topicB, c.lb, c.led.b); err != nil {
		return err
	}
	if err := c.reconcileKeyed(ctx, topicC, c.pc, c.led.c); err != nil {
		return err
	}
	// A broker leader with no followers: the high watermark is the log end.
	if err := c.p.SetHighWatermark(c.p.Offsets().LogEnd); err != nil {
		return err
	}
	if err := c.lb.SetHighWatermark(c.lb.Offsets().LogEnd); err != nil {
		return err
	}
	if err := c.pc.SetHighWatermark(c.pc.Offsets().LogEnd); err != nil {
		return err
	}
	c.newProducers()
	if c.cleaner, err = compaction.NewCleaner(c.b, compaction.CleanerOptions{MemoryBytes: c.spec.CleanerMemory, Backoff: time.Second}); err != nil {
		return err
	}
	return nil
}

func (c *child) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// removeLeftovers removes directories a killed delete left ("-delete").
func removeLeftovers(dir string) error {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, e := range ents {
		if e.IsDir() && strings.HasSuffix(e.Name(), "-delete") && !strings.Contains(e.Name(), ".restoring-") {
			if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
				return err
			}
		}
	}
	return nil
}

// openA opens A's local log and the tiered partition over it, retrying
// while the bucket fails retryably.
func (c *child) openA(ctx context.Context) error {
	var err error
	if c.la, err = c.b.OpenLog(ctx, nameA, 0, c.cfgA); err != nil {
		return err
	}
	return c.openTiered(ctx)
}

// openTiered opens the tiered partition over c.la, retrying while the
// bucket fails retryably.
func (c *child) openTiered(ctx context.Context) error {
	var err error
	c.p, err = c.openPartition(ctx, c.la, prefix, c.metrics)
	return err
}

// openC opens C's local log and the tiered partition over it, retrying
// while the bucket fails retryably.
func (c *child) openC(ctx context.Context) error {
	var err error
	if c.lc, err = c.b.OpenLog(ctx, nameC, 0, c.cfgC); err != nil {
		return err
	}
	c.pc, err = c.openPartition(ctx, c.lc, prefixC, c.metricsC)
	return err
}

// openPartition opens a tiered partition over l at prefix, retrying while
// the bucket fails retryably.
func (c *child) openPartition(ctx context.Context, l *local.Log, prefix string, m *tiered.Metrics) (*tiered.Partition, error) {
	opts := tiered.Options{Store: c.store, Prefix: prefix, LeaderEpoch: int32(c.spec.Life), Metrics: m,
		ChunkCacheBytes: c.spec.ChunkCacheBytes, Logger: c.logger()}
	if c.spec.ChunkCacheBytes < 0 {
		opts.PrefetchBytes = -1
	}
	for try := 0; ; try++ {
		p, err := tiered.Open(ctx, l, opts)
		if err == nil || !retryable(err) || try > 50 {
			return p, err
		}
		c.count("retries_open", 1)
		time.Sleep(200 * time.Millisecond)
	}
}

// reconcileA brings the ledger of A up to the log after a restart: a tail
// appended but not yet in the ledger (killed between the two) is adopted;
// an unacknowledged tail the recovery cut is forgotten. Losing an
// acknowledged record is a Violation.
func (c *child) reconcileA(ctx context.Context) error {
	m := c.led.a
	o := c.p.Offsets()
	switch end := m.end(); {
	case o.LogEnd < end:
		if o.LogEnd < m.flushed {
			return violation("A", "after recovery the log ends at %d, but records up to %d were acknowledged (flushed)", o.LogEnd, m.flushed-1)
		}
		if i := m.find(o.LogEnd); i >= 0 && m.batches[i].base != o.LogEnd {
			return violation("A", "after recovery the log ends at %d, inside batch %d..%d", o.LogEnd, m.batches[i].base, m.batches[i].last)
		}
		_, unacked := (&modelA{batches: append([]aBatch(nil), m.batches...), flushed: m.flushed}).truncate(o.LogEnd)
		c.count("recovery_dropped_unflushed_records", unacked)
		return c.led.truncate(topicA, o.LogEnd)
	case o.LogEnd > end:
		if end < o.LogStart {
			return violation("A", "after recovery the log starts at %d, above the ledger's end %d", o.LogStart, end)
		}
		for off := end; off < o.LogEnd; {
			data, err := readAt(ctx, c.p, off, 1<<20)
			if err != nil || len(data) == 0 {
				return fmt.Errorf("adopt A's tail at %d: %w", off, err)
			}
			for b := record.Batch(data); len(b) > 0; {
				n := int(b.Length()) + record.LogOverhead
				batch := b[:n]
				if batch.BaseOffset() != off {
					return violation("A", "after recovery batch %d..%d follows offset %d", batch.BaseOffset(), batch.LastOffset(), off-1)
				}
				if err := c.led.batchA(batch); err != nil {
					return err
				}
				c.count("adopted_batches", 1)
				off = batch.NextOffset()
				b = b[n:]
			}
		}
	}
	return nil
}

// reconcileKeyed is reconcileA for a compacted topic (B or C).
func (c *child) reconcileKeyed(ctx context.Context, topic byte, p backend.Partition, m *modelB) error {
	name := string(topic)
	o := p.Offsets()
	switch {
	case o.LogEnd < m.end:
		if o.LogEnd < m.flushed {
			return violation(name, "after recovery the log ends at %d, but records up to %d were acknowledged (flushed)", o.LogEnd, m.flushed-1)
		}
		n := int64(0)
		for off := range m.recs {
			if off >= o.LogEnd {
				n++
			}
		}
		c.count("recovery_dropped_unflushed_records", n)
		return c.led.truncate(topic, o.LogEnd)
	case o.LogEnd > m.end:
		for off := m.end; off < o.LogEnd; {
			data, err := readAt(ctx, p, off, 1<<20)
			if err != nil || len(data) == 0 {
				return fmt.Errorf("adopt %s's tail at %d: %w", name, off, err)
			}
			for b := record.Batch(data); len(b) > 0; {
				n := int(b.Length()) + record.LogOverhead
				batch := b[:n]
				if batch.LastOffset() < off {
					return violation(name, "after recovery batch %d..%d is below offset %d", batch.BaseOffset(), batch.LastOffset(), off)
				}
				if err := c.led.batchKeyed(topic, batch, keyOf); err != nil {
					return err
				}
				c.count("adopted_batches", 1)
				off = batch.NextOffset()
				b = b[n:]
			}
		}
	}
	return nil
}

// keyOf is the key number of a record of B ("k00042" is 42).
func keyOf(r *record.Record) int32 {
	n, err := strconv.Atoi(strings.TrimPrefix(string(r.Key), "k"))
	if err != nil {
		return -1
	}
	return int32(n)
}

// newProducers starts new idempotent producers for every topic (a new
// producer id, sequence 0).
func (c *child) newProducers() {
	c.pids++
	c.pidA = int64(c.spec.Life)*1000 + 3*c.pids
	c.pidB = c.pidA + 1
	c.pidC = c.pidA + 2
	c.seqA, c.seqB, c.seqC = 0, 0, 0
}

// closeAll closes everything cleanly.
func (c *child) closeAll() error {
	var errs []error
	if c.p != nil {
		errs = append(errs, c.p.Close())
	}
	if c.pc != nil {
		errs = append(errs, c.pc.Close())
	}
	if c.b != nil {
		errs = append(errs, c.b.Close())
	}
	c.p, c.pc, c.b, c.la, c.lb, c.lc = nil, nil, nil, nil, nil, nil
	return errors.Join(errs...)
}
