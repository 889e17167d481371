package soak

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/compaction"
	"github.com/tierlog/tierlog/local"
	"github.com/tierlog/tierlog/manifest"
	"github.com/tierlog/tierlog/objstore"
	"github.com/tierlog/tierlog/objstore/minio"
	"github.com/tierlog/tierlog/objstore/s3"
	"github.com/tierlog/tierlog/record"
	"github.com/tierlog/tierlog/testing/crashchild"
	"github.com/tierlog/tierlog/tiered"
)

// The topics: A is tiered, B compacted; both in one log directory.
const (
	nameA  = "soak-a"
	nameB  = "soak-b"
	prefix = "soak/" + nameA + "-0"
)

// How a life ends.
const (
	modeKill     = "kill"     // the parent SIGKILLs the child at a random moment
	modeSelfKill = "selfkill" // the child SIGKILLs itself during a random step
	modeClean    = "clean"    // the child closes everything cleanly after some steps
	modeFinal    = "final"    // no faults: bring the bucket up to date, check, close
)

// Restore variants: how A's partition directory is lost before a restore.
const (
	restoreNone       byte = 0
	restoreDelete     byte = 'd' // Backend.Delete (its checkpoint entries go too)
	restoreLostDir    byte = 'l' // the directory vanishes; the log dir's checkpoints still name it
	restoreLostLogDir byte = 'w' // the whole log dir vanishes (a new broker): B, not tiered, with it
)

// Exit codes of a child.
const (
	exitViolation = 3 // a Violation: the report is in fail-<life>.txt
	exitHarness   = 4 // the soak itself failed (see the output)
)

// childSpec is what the parent tells one life of the child.
type childSpec struct {
	Root                                           string
	Endpoint, Region, AccessKey, SecretKey, Bucket string
	Driver                                         string // "s3" or "minio"
	Seed                                           uint64
	Life                                           int
	Mode                                           string
	KillAtOp                                       int // modeSelfKill: the step during which it dies
	CleanAfterOps                                  int // modeClean: steps before the clean close
	Restore                                        byte
	StopBy                                         time.Time
	TopicA, TopicB                                 map[string]string
	ChunkCacheBytes                                int64
	CleanerMemory                                  int
	StoreTimeout                                   time.Duration // per request attempt
	StoreAttempts                                  int
}

// progress is what a life leaves for the next one (and the parent): its
// counters, the step it was in and A's log start at its last check.
type progress struct {
	Life      int
	Step      string
	LogStartA int64
	Unsettled bool // see child.unsettled
	Counters  map[string]int64
}

// runChild runs one life and returns the process's exit code.
func runChild(spec childSpec) int {
	c := &child{spec: spec, rng: rand.New(rand.NewPCG(spec.Seed, uint64(spec.Life))), st: map[string]int64{}}
	err := c.run()
	if err == nil {
		return 0
	}
	var v *Violation
	if errors.As(err, &v) {
		c.fail(err.Error())
		return exitViolation
	}
	c.fail("harness: " + err.Error())
	return exitHarness
}

type child struct {
	spec childSpec
	rng  *rand.Rand
	led  *ledger
	st   map[string]int64
	stMu sync.Mutex
	op   int
	step string
	pool []byte // random bytes values are cut from

	store   *objstore.Store
	b       *local.Backend
	la, lb  *local.Log
	p       *tiered.Partition
	cleaner *compaction.Cleaner
	metrics *tiered.Metrics
	cfgA    backend.Config
	cfgB    backend.Config

	pidA, pidB int64 // idempotent producers (new ones each life and restore)
	seqA, seqB int32
	pids       int64

	logStartA     int64 // A's log start at the last check
	prevLogStartA int64 // and at the last check of the life before
	prevStep      string
	recovered     bool // the life's first check passed
	// unsettled: a step that moves A's log start (retention,
	// delete-records) failed retryably, so its manifest commit may have
	// landed unbeknown. The partition adopts it at its next change (or
	// open), whatever the step: until a change is known to have
	// reconciled (see reconciles), A's log start may move up to the
	// manifest's in any step.
	unsettled, prevUnsettled bool
}

func (c *child) logDir() string { return filepath.Join(c.spec.Root, "logs") }

func (c *child) count(name string, n int64) {
	c.stMu.Lock()
	c.st[name] += n
	c.stMu.Unlock()
}

// fail writes the failure report the parent prints.
func (c *child) fail(msg string) {
	msg = fmt.Sprintf("life %d, step %d (%s): %s\n%s", c.spec.Life, c.op, c.step, msg, c.state())
	os.WriteFile(filepath.Join(c.spec.Root, fmt.Sprintf("fail-%d.txt", c.spec.Life)), []byte(msg), 0o644)
	fmt.Fprint(os.Stderr, msg)
}

// state describes A (offsets, manifest, local segments) for a failure
// report.
func (c *child) state() string {
	if c.p == nil {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "A: %+v\nmanifest (generation %d, log start %d):", c.p.Offsets(), c.p.Manifest().Generation, c.p.Manifest().LogStartOffset)
	for _, s := range c.p.Manifest().Segments {
		fmt.Fprintf(&b, " %d..%d", s.BaseOffset, s.LastOffset)
	}
	b.WriteString("\nlocal segments:")
	for _, s := range c.la.SegmentInfos() {
		fmt.Fprintf(&b, " %d..%d(%d bytes)", s.BaseOffset, s.NextOffset-1, s.Size)
	}
	fmt.Fprintf(&b, "\nledger: A ends at %d, acknowledged below %d; B ends at %d, acknowledged below %d\n",
		c.led.a.end(), c.led.a.flushed, c.led.b.end, c.led.b.flushed)
	return b.String()
}

// saveProgress replaces progress.json (no fsync: only a SIGKILL, never a
// power loss, is simulated).
func (c *child) saveProgress() {
	c.stMu.Lock()
	if c.store != nil {
		s := c.store.Stats()
		c.st["bytes_uploaded"], c.st["bytes_downloaded"] = s.BytesOut, s.BytesIn
		c.st["check_read_retries"] = readRetries.Load()
		total := func(m map[objstore.Op]int64) (n int64) {
			for _, v := range m {
				n += v
			}
			return n
		}
		c.st["store_requests"], c.st["store_attempts_failed"], c.st["store_retries"] = total(s.Requests), total(s.Errors), total(s.Retries)
	}
	if c.metrics != nil {
		c.st["remote_read_errors"], c.st["upload_errors"] = c.metrics.RemoteReadErrors.Load(), c.metrics.UploadErrors.Load()
	}
	data, _ := json.Marshal(progress{Life: c.spec.Life, Step: c.step, LogStartA: c.logStartA, Unsettled: c.unsettled, Counters: c.st})
	c.stMu.Unlock()
	replace := func(path string) {
		if os.WriteFile(path+".tmp", data, 0o644) == nil {
			os.Rename(path+".tmp", path)
		}
	}
	replace(filepath.Join(c.spec.Root, "stats", fmt.Sprintf("life-%d.json", c.spec.Life)))
	if c.recovered { // until then the life before's stays: it is the last state known
		replace(filepath.Join(c.spec.Root, "progress.json"))
	}
}

func (c *child) run() (err error) {
	if err := os.MkdirAll(filepath.Join(c.spec.Root, "stats"), 0o755); err != nil {
		return err
	}
	c.logStartA, c.prevLogStartA = -1, -1
	if data, err := os.ReadFile(filepath.Join(c.spec.Root, "progress.json")); err == nil {
		var prev progress
		if json.Unmarshal(data, &prev) == nil {
			c.prevLogStartA, c.prevStep, c.prevUnsettled = prev.LogStartA, prev.Step, prev.Unsettled
		}
	}
	c.pool = make([]byte, 1<<20)
	for i := range c.pool {
		c.pool[i] = byte(c.rng.Uint32())
	}
	if c.cfgA, err = backend.ParseConfig(c.spec.TopicA); err != nil {
		return err
	}
	if c.cfgB, err = backend.ParseConfig(c.spec.TopicB); err != nil {
		return err
	}
	if c.led, err = openLedger(filepath.Join(c.spec.Root, "ledger")); err != nil {
		return err
	}
	defer c.led.close()
	if c.store, err = openStore(c.spec, objstore.Options{Timeout: c.spec.StoreTimeout, MaxAttempts: c.spec.StoreAttempts,
		BaseBackoff: 50 * time.Millisecond, MaxBackoff: 500 * time.Millisecond}); err != nil {
		return err
	}
	defer c.store.Close()
	c.metrics = new(tiered.Metrics)
	c.step = "recover"
	c.saveProgress()
	if err := c.openAll(); err != nil {
		return err
	}
	c.count("lives", 1)
	if err := c.check("recover", false); err != nil {
		return err
	}
	c.recovered = true
	// Across the restart, A's log start may only have moved if the life
	// before was killed while moving it.
	if c.prevLogStartA >= 0 && c.logStartA != c.prevLogStartA && c.prevStep != "" {
		c.count("log_start_moved_across_restart", 1)
		switch {
		case c.logStartA < c.prevLogStartA:
			c.count("log_start_back_after_restart", 1) // records come back; checked above
		case c.prevUnsettled && c.logStartA == c.p.Manifest().LogStartOffset:
			c.count("log_start_adopted_unknown_outcome", 1) // see child.unsettled
		case !movesLogStart(c.prevStep):
			return violation("A", "across the restart the log start moved from %d to %d, but the life before was killed in step %q, which does not move it",
				c.prevLogStartA, c.logStartA, c.prevStep)
		}
	}
	if c.spec.Restore != restoreNone {
		if err := c.do("restore", func(ctx context.Context) error { return c.restore(ctx, c.spec.Restore) }); err != nil {
			return err
		}
	}
	if c.spec.Mode == modeFinal {
		return c.final()
	}
	for time.Now().Before(c.spec.StopBy) {
		if c.spec.Mode == modeClean && c.op >= c.spec.CleanAfterOps {
			break
		}
		name, fn := c.pick()
		if err := c.do(name, fn); err != nil {
			return err
		}
	}
	c.step = "close"
	c.saveProgress()
	return c.closeAll()
}

// reconciles says which steps, when they succeed, began a leader change
// of A, which first reconciles a commit whose outcome was unknown: the
// manifest is known after them.
func reconciles(step string) bool {
	switch step {
	case "offload", "retention", "delete-records":
		return true
	}
	return false
}

// movesLogStart says which steps may raise A's log start.
func movesLogStart(step string) bool {
	switch step {
	case "retention", "delete-records", "restore":
		return true
	}
	return false
}

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
// finishes a restore a killed life began, opens both topics, and brings
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
		err := c.finishRestore(rctx, pr.end, pr.variant)
		cancel()
		if err != nil {
			return err
		}
	} else if err := c.openA(ctx); err != nil {
		return err
	}
	if c.lb, err = c.b.OpenLog(ctx, nameB, 0, c.cfgB); err != nil {
		return err
	}
	if err := c.reconcileA(ctx); err != nil {
		return err
	}
	if err := c.reconcileB(ctx); err != nil {
		return err
	}
	// A broker leader with no followers: the high watermark is the log end.
	if err := c.p.SetHighWatermark(c.p.Offsets().LogEnd); err != nil {
		return err
	}
	if err := c.lb.SetHighWatermark(c.lb.Offsets().LogEnd); err != nil {
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
	opts := tiered.Options{Store: c.store, Prefix: prefix, LeaderEpoch: int32(c.spec.Life), Metrics: c.metrics,
		ChunkCacheBytes: c.spec.ChunkCacheBytes, Logger: c.logger()}
	if c.spec.ChunkCacheBytes < 0 {
		opts.PrefetchBytes = -1
	}
	for try := 0; ; try++ {
		c.p, err = tiered.Open(ctx, c.la, opts)
		if err == nil || !retryable(err) || try > 50 {
			return err
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

// reconcileB is reconcileA for B.
func (c *child) reconcileB(ctx context.Context) error {
	m := c.led.b
	o := c.lb.Offsets()
	switch {
	case o.LogEnd < m.end:
		if o.LogEnd < m.flushed {
			return violation("B", "after recovery the log ends at %d, but records up to %d were acknowledged (flushed)", o.LogEnd, m.flushed-1)
		}
		n := int64(0)
		for off := range m.recs {
			if off >= o.LogEnd {
				n++
			}
		}
		c.count("recovery_dropped_unflushed_records", n)
		return c.led.truncate(topicB, o.LogEnd)
	case o.LogEnd > m.end:
		for off := m.end; off < o.LogEnd; {
			data, err := readAt(ctx, c.lb, off, 1<<20)
			if err != nil || len(data) == 0 {
				return fmt.Errorf("adopt B's tail at %d: %w", off, err)
			}
			for b := record.Batch(data); len(b) > 0; {
				n := int(b.Length()) + record.LogOverhead
				batch := b[:n]
				if batch.LastOffset() < off {
					return violation("B", "after recovery batch %d..%d is below offset %d", batch.BaseOffset(), batch.LastOffset(), off)
				}
				if err := c.led.batchB(batch, keyOf); err != nil {
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

// newProducers starts new idempotent producers for both topics (a new
// producer id, sequence 0).
func (c *child) newProducers() {
	c.pids++
	c.pidA = int64(c.spec.Life)*1000 + 2*c.pids
	c.pidB = c.pidA + 1
	c.seqA, c.seqB = 0, 0
}

// closeAll closes everything cleanly.
func (c *child) closeAll() error {
	var errs []error
	if c.p != nil {
		errs = append(errs, c.p.Close())
	}
	if c.b != nil {
		errs = append(errs, c.b.Close())
	}
	c.p, c.b, c.la, c.lb = nil, nil, nil, nil
	return errors.Join(errs...)
}

// stepTimeout bounds one step's context; hangAfter is when a step that has
// not returned is reported hung.
const (
	stepTimeout = 2 * time.Minute
	hangAfter   = 8 * time.Minute
)

// do runs one step, then checks both topics. A step the bucket failed
// retryably is counted and tried again later; a fenced partition is
// reopened; any other error ends the life.
func (c *child) do(name string, fn func(ctx context.Context) error) error {
	c.op++
	c.step = name
	c.saveProgress()
	if c.spec.Mode == modeSelfKill && c.op == c.spec.KillAtOp {
		delay := time.Duration(c.rng.Int64N(int64(300 * time.Millisecond)))
		time.AfterFunc(delay, crashchild.KillSelf)
	}
	hung := time.AfterFunc(hangAfter, func() {
		buf := make([]byte, 1<<20)
		c.fail(fmt.Sprintf("step %s has not returned after %v: hung\n%s", name, hangAfter, buf[:runtime.Stack(buf, true)]))
		os.Exit(exitViolation)
	})
	ctx, cancel := context.WithTimeout(context.Background(), stepTimeout)
	err := fn(ctx)
	cancel()
	hung.Stop()
	c.count("steps", 1)
	if err != nil && (c.p == nil || c.lb == nil) {
		return fmt.Errorf("step %s failed and left a topic closed: %w", name, err)
	}
	jump := c.unsettled || (err != nil && retryable(err) && movesLogStart(name))
	switch {
	case err == nil && reconciles(name):
		c.unsettled = false
	case jump:
		c.unsettled = true
	}
	switch {
	case err == nil:
	case retryable(err):
		c.count("step_retries", 1)
		c.count("step_retries_"+name, 1)
	case errors.Is(err, backend.ErrFenced):
		c.count("fenced", 1)
		if err := c.reopenA(context.Background()); err != nil {
			return err
		}
	default:
		var v *Violation
		if errors.As(err, &v) {
			return err
		}
		return fmt.Errorf("step %s: %w", name, err)
	}
	return c.check(name, jump)
}

// check runs both checks; a check the bucket cut short is counted, not
// failed. jump lets A's log start move up to the manifest's in any step
// (see child.unsettled).
func (c *child) check(step string, jump bool) error {
	ctx, cancel := context.WithTimeout(context.Background(), stepTimeout)
	defer cancel()
	before := c.logStartA
	ca, err := checkA(ctx, c.p, c.led.a, c.rng)
	if err == nil {
		cb, errB := checkB(ctx, c.lb, c.led.b)
		ca.add(cb)
		err = errB
	}
	c.count("checks", 1)
	c.count("records_checked", ca.recordsA+ca.recordsB)
	c.count("records_checked_a", ca.recordsA)
	c.count("records_checked_a_remote", ca.remoteRecordsA)
	c.count("records_checked_b", ca.recordsB)
	c.count("bytes_read", ca.bytes)
	if errors.Is(err, errIncomplete) {
		c.count("checks_incomplete", 1)
		err = nil
	}
	if err != nil {
		return err
	}
	ls := c.p.Offsets().LogStart
	if before >= 0 && ls != before && step != "recover" {
		switch {
		case jump && ls > before && ls == c.p.Manifest().LogStartOffset:
			c.count("log_start_adopted_unknown_outcome", 1) // see child.unsettled
		case ls < before || !movesLogStart(step):
			return violation("A", "step %s moved the log start from %d to %d", step, before, ls)
		}
	}
	c.logStartA = ls
	c.saveProgress()
	return nil
}

// pick chooses the next step.
func (c *child) pick() (string, func(ctx context.Context) error) {
	steps := []struct {
		w    int
		name string
		fn   func(ctx context.Context) error
	}{
		{30, "produce-a", c.produceA},
		{12, "flush-a", c.flushA},
		{12, "produce-b", c.produceB},
		{6, "flush-b", c.flushB},
		{10, "offload", c.offload},
		{6, "retention", c.retention},
		{5, "clean-b", c.cleanB},
		{3, "checkpoint", func(context.Context) error { return c.b.Checkpoint() }},
		{2, "roll", c.roll},
		{1, "delete-records", c.deleteRecords},
		{2, "reopen-a", c.reopenA},
		{1, "restart-clean", c.restartClean},
	}
	total := 0
	for _, s := range steps {
		total += s.w
	}
	n := c.rng.IntN(total)
	for _, s := range steps {
		if n < s.w {
			return s.name, s.fn
		}
		n -= s.w
	}
	panic("unreachable")
}

func (c *child) codec() record.Codec {
	switch n := c.rng.IntN(20); {
	case n < 12:
		return record.None
	case n < 15:
		return record.LZ4
	case n < 17:
		return record.ZSTD
	case n < 19:
		return record.Snappy
	default:
		return record.GZIP
	}
}

func (c *child) value(lo, hi int) []byte {
	n := lo + c.rng.IntN(hi-lo+1)
	o := c.rng.IntN(len(c.pool) - n)
	return c.pool[o : o+n]
}

// produceA appends one to three batches to A as the leader does
// (idempotent or not, any codec), records them in the ledger, and moves
// the high watermark to the log end. Now and then an idempotent batch is
// sent again, as a producer retrying does: it must be answered as a
// duplicate with the first append's offsets.
func (c *child) produceA(ctx context.Context) error {
	var bl record.Builder
	idem := c.rng.IntN(10) < 7
	nb := 1
	if !idem {
		nb = 1 + c.rng.IntN(3)
	}
	var payload []byte
	records := 0
	for range nb {
		h := record.NewBatchHeader()
		h.Codec = c.codec()
		if idem {
			h.ProducerID, h.ProducerEpoch, h.BaseSequence = c.pidA, 0, c.seqA
		}
		bl.Reset(h)
		n := 1 + c.rng.IntN(30)
		ts := time.Now().UnixMilli()
		for range n {
			var key []byte
			if c.rng.IntN(3) == 0 {
				key = fmt.Appendf(nil, "a%d", c.rng.IntN(1000))
			}
			var hdrs []record.Header
			if c.rng.IntN(8) == 0 {
				hdrs = []record.Header{{Key: []byte("h"), Value: c.value(0, 16)}}
			}
			bl.Append(ts, key, c.value(8, 1000), hdrs)
		}
		b, err := bl.Build()
		if err != nil {
			return err
		}
		payload = append(payload, b...)
		records += n
	}
	retry := append([]byte(nil), payload...)
	end := c.la.Offsets().LogEnd
	info, err := c.p.Append(ctx, payload, backend.AppendOptions{AssignOffsets: true, LeaderEpoch: int32(c.spec.Life)})
	if err != nil {
		return err
	}
	if info.FirstOffset != end || info.Duplicate {
		return violation("A", "an append at the log end %d was given offsets %d..%d (duplicate %v)", end, info.FirstOffset, info.LastOffset, info.Duplicate)
	}
	for b := record.Batch(payload); len(b) > 0; {
		n := int(b.Length()) + record.LogOverhead
		if err := c.led.batchA(b[:n]); err != nil {
			return err
		}
		b = b[n:]
	}
	if idem {
		c.seqA += int32(records)
	}
	c.count("batches_produced", int64(nb))
	c.count("records_produced", int64(records))
	c.count("bytes_produced", int64(len(payload)))
	if err := c.p.SetHighWatermark(info.LastOffset + 1); err != nil {
		return err
	}
	if idem && c.rng.IntN(10) == 0 {
		dup, err := c.p.Append(ctx, retry, backend.AppendOptions{AssignOffsets: true, LeaderEpoch: int32(c.spec.Life)})
		if err != nil {
			return fmt.Errorf("resend an idempotent batch: %w", err)
		}
		if !dup.Duplicate || dup.FirstOffset != info.FirstOffset || dup.LastOffset != info.LastOffset {
			return violation("A", "a resent idempotent batch (first at %d..%d) was answered %+v", info.FirstOffset, info.LastOffset, dup)
		}
		c.count("duplicates_answered", 1)
	}
	return nil
}

// produceB appends a batch of keyed records (some tombstones) to B.
func (c *child) produceB(ctx context.Context) error {
	var bl record.Builder
	h := record.NewBatchHeader()
	h.Codec = c.codec()
	idem := c.rng.IntN(2) == 0
	if idem {
		h.ProducerID, h.ProducerEpoch, h.BaseSequence = c.pidB, 0, c.seqB
	}
	bl.Reset(h)
	n := 1 + c.rng.IntN(15)
	ts := time.Now().UnixMilli()
	for range n {
		k := c.rng.IntN(c.rng.IntN(keysB) + 1) // skewed: low keys are hot
		var v []byte
		if c.rng.IntN(12) != 0 {
			v = c.value(16, 400)
		}
		bl.Append(ts, fmt.Appendf(nil, "k%05d", k), v, nil)
	}
	b, err := bl.Build()
	if err != nil {
		return err
	}
	batch := append([]byte(nil), b...)
	end := c.lb.Offsets().LogEnd
	info, err := c.lb.Append(ctx, batch, backend.AppendOptions{AssignOffsets: true, LeaderEpoch: int32(c.spec.Life)})
	if err != nil {
		return err
	}
	if info.FirstOffset != end || info.Duplicate {
		return violation("B", "an append at the log end %d was given offsets %d..%d", end, info.FirstOffset, info.LastOffset)
	}
	if err := c.led.batchB(batch, keyOf); err != nil {
		return err
	}
	if idem {
		c.seqB += int32(n)
	}
	c.count("records_produced", int64(n))
	c.count("bytes_produced", int64(len(batch)))
	return c.lb.SetHighWatermark(info.LastOffset + 1)
}

// keysB is how many keys B's records spread over.
const keysB = 300

// flushA flushes A and then, durably, acknowledges its log end.
func (c *child) flushA(context.Context) error {
	end := c.p.Offsets().LogEnd
	if err := c.p.Flush(); err != nil {
		return err
	}
	c.count("flushes", 1)
	return c.led.flushed(topicA, end)
}

func (c *child) flushB(context.Context) error {
	end := c.lb.Offsets().LogEnd
	if err := c.lb.Flush(); err != nil {
		return err
	}
	c.count("flushes", 1)
	return c.led.flushed(topicB, end)
}

func (c *child) offload(ctx context.Context) error {
	before := c.metrics.BytesUploaded.Load()
	n, err := c.p.Offload(ctx)
	c.count("segments_uploaded", int64(n))
	c.count("segment_bytes_uploaded", c.metrics.BytesUploaded.Load()-before)
	return err
}

func (c *child) retention(ctx context.Context) error {
	n, err := c.p.ApplyRetention(ctx)
	c.count("remote_segments_deleted", int64(n))
	if err == nil {
		if m := c.p.Manifest(); len(m.Segments) > 0 && c.p.Offsets().LogStart != m.LogStartOffset {
			return violation("A", "after retention the log start is %d, the manifest's %d", c.p.Offsets().LogStart, m.LogStartOffset)
		}
	}
	return err
}

// cleanB runs the log cleaner over B while appending to it.
func (c *child) cleanB(ctx context.Context) error {
	var cleaned bool
	var err error
	done := make(chan struct{})
	go func() {
		defer close(done)
		cleaned, err = c.cleaner.RunOnce(ctx)
	}()
	for range c.rng.IntN(4) {
		if err := c.produceB(ctx); err != nil {
			<-done
			return err
		}
	}
	<-done
	if cleaned && err == nil {
		c.count("clean_rounds", 1)
	}
	st := c.cleaner.Stats()
	c.stMu.Lock()
	c.st["clean_records_removed"] = st.Removed
	c.stMu.Unlock()
	return err
}

func (c *child) roll(context.Context) error {
	if c.rng.IntN(2) == 0 {
		return c.lb.Roll()
	}
	return c.la.Roll()
}

// deleteRecords raises A's log start (Kafka's DeleteRecords) to any
// offset up to the high watermark: mostly to the end of the bucket's first
// segment; often a little, into the middle of a batch or a segment; now
// and then anywhere, past the bucket's end too, or to the high watermark
// itself (every record goes).
func (c *child) deleteRecords(ctx context.Context) error {
	o := c.p.Offsets()
	m := c.p.Manifest()
	hw := o.HighWatermark
	if hw <= o.LogStart {
		return c.p.DeleteRecordsBefore(ctx, o.LogStart) // nothing to delete: a no-op
	}
	to := o.LogStart + 1 + c.rng.Int64N(min(hw-o.LogStart, 300))
	switch n := c.rng.IntN(16); {
	case n == 0:
		to = hw
	case n < 3:
		to = o.LogStart + 1 + c.rng.Int64N(hw-o.LogStart)
	case n < 11 && len(m.Segments) > 1 && m.Segments[0].LastOffset >= o.LogStart:
		to = m.Segments[0].LastOffset + 1
	}
	return c.p.DeleteRecordsBefore(ctx, to)
}

// reopenA closes the tiered partition and opens it again (the manifest is
// read afresh, the caches are empty). The local log must come back with
// the high watermark it had and no lower a log start (the partition's log
// start is checked after every step).
func (c *child) reopenA(ctx context.Context) error {
	before := c.la.Offsets()
	if err := c.p.Close(); err != nil {
		return err
	}
	if err := c.openA(ctx); err != nil {
		return err
	}
	c.newProducers()
	if after := c.la.Offsets(); after.HighWatermark != before.HighWatermark || after.LogStart < before.LogStart {
		return violation("A", "closed with the local log at %+v, reopened at %+v", before, after)
	}
	return nil
}

// restartClean closes the whole log directory cleanly and opens it again.
func (c *child) restartClean(context.Context) error {
	if err := c.closeAll(); err != nil {
		return err
	}
	return c.openAll()
}

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
	m := c.p.Manifest()
	if len(m.Segments) == 0 || m.Segments[len(m.Segments)-1].LastOffset+1 != c.p.Offsets().LogEnd {
		c.count("restores_skipped", 1) // the bucket is behind: the directory stays
		return nil
	}
	end := m.Segments[len(m.Segments)-1].LastOffset + 1
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

// final brings the bucket up to date with no faults on, applies
// retention, cleans B until nothing is left to clean, checks, and closes
// cleanly.
func (c *child) final() error {
	steps := []struct {
		name string
		fn   func(ctx context.Context) error
	}{
		{"flush-a", c.flushA},
		{"flush-b", c.flushB},
		{"offload", func(ctx context.Context) error {
			for try := 0; ; try++ {
				if err := c.offload(ctx); err == nil || !retryable(err) || try > 20 {
					return err
				}
				time.Sleep(200 * time.Millisecond)
			}
		}},
		{"retention", c.retention},
		{"clean-b", func(ctx context.Context) error {
			for range 20 {
				cleaned, err := c.cleaner.RunOnce(ctx)
				if err != nil || !cleaned {
					return err
				}
				c.count("clean_rounds", 1)
			}
			return nil
		}},
	}
	for _, s := range steps {
		if err := c.do(s.name, s.fn); err != nil {
			return err
		}
	}
	c.step = "close"
	c.saveProgress()
	return c.closeAll()
}
