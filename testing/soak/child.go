package soak

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/compaction"
	"github.com/tierlog/tierlog/local"
	"github.com/tierlog/tierlog/manifest"
	"github.com/tierlog/tierlog/objstore"
	"github.com/tierlog/tierlog/testing/crashchild"
	"github.com/tierlog/tierlog/tiered"
)

// The topics: A is tiered, B compacted, C compacted and tiered; all in
// one log directory.
const (
	nameA   = "soak-a"
	nameB   = "soak-b"
	nameC   = "soak-c"
	prefix  = "soak/" + nameA + "-0"
	prefixC = "soak/" + nameC + "-0"
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
	restoreLostLogDir byte = 'w' // the whole log dir vanishes (a new broker): B, not tiered, with it; C restored too
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
	TopicA, TopicB, TopicC                         map[string]string
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
	// C: its local log and the tiered partition over it, whose segments
	// the bucket's cleaner (CompactRemote) cleans once they leave the disk.
	lc       *local.Log
	pc       *tiered.Partition
	metricsC *tiered.Metrics
	cfgC     backend.Config

	pidA, pidB, pidC int64 // idempotent producers (new ones each life and restore)
	seqA, seqB, seqC int32
	pids             int64

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
	h := c.p.Head()
	fmt.Fprintf(&b, "A: %+v\nmanifest (generation %d, log start %d):", c.p.Offsets(), h.Generation(), h.LogStartOffset())
	m, err := c.p.Manifest(context.Background())
	if err != nil {
		fmt.Fprintf(&b, " (its parts: %v)", err)
		m = &manifest.Manifest{}
	}
	for _, s := range m.Segments {
		fmt.Fprintf(&b, " %d..%d", s.BaseOffset, s.LastOffset)
	}
	b.WriteString("\nlocal segments:")
	for _, s := range c.la.SegmentInfos() {
		fmt.Fprintf(&b, " %d..%d(%d bytes)", s.BaseOffset, s.NextOffset-1, s.Size)
	}
	if c.pc != nil {
		fmt.Fprintf(&b, "\nC: %+v, %d segments in the bucket (cleaned to %d); local segments:", c.pc.Offsets(), c.pc.Head().Count(), c.pc.Head().CleanedTo())
		for _, s := range c.lc.SegmentInfos() {
			fmt.Fprintf(&b, " %d..%d(%d bytes)", s.BaseOffset, s.NextOffset-1, s.Size)
		}
	}
	fmt.Fprintf(&b, "\nledger: A ends at %d, acknowledged below %d; B ends at %d, acknowledged below %d; C ends at %d, acknowledged below %d\n",
		c.led.a.end(), c.led.a.flushed, c.led.b.end, c.led.b.flushed, c.led.c.end, c.led.c.flushed)
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
		c.st["c_remote_read_errors"], c.st["c_upload_errors"] = c.metricsC.RemoteReadErrors.Load(), c.metricsC.UploadErrors.Load()
		c.st["c_compact_errors"] = c.metricsC.CompactErrors.Load()
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
	for _, d := range []string{"stats", "scratch"} {
		if err := os.MkdirAll(filepath.Join(c.spec.Root, d), 0o755); err != nil {
			return err
		}
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
	if c.cfgC, err = backend.ParseConfig(c.spec.TopicC); err != nil {
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
	c.metrics, c.metricsC = new(tiered.Metrics), new(tiered.Metrics)
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
		case c.prevUnsettled && c.logStartA == c.p.Head().LogStartOffset():
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

// stepTimeout bounds one step's context; hangAfter is when a step that has
// not returned is reported hung.
const (
	stepTimeout = 2 * time.Minute
	hangAfter   = 8 * time.Minute
)

// do runs one step, then checks every topic. A step the bucket failed
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
	if err != nil && (c.p == nil || c.lb == nil || c.pc == nil) {
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
		reopen := c.reopenA
		if strings.HasSuffix(name, "-c") {
			reopen = c.reopenC
		}
		if err := reopen(context.Background()); err != nil {
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

// check checks every topic; a check the bucket cut short is counted, not
// failed. jump lets A's log start move up to the manifest's in any step
// (see child.unsettled).
func (c *child) check(step string, jump bool) error {
	ctx, cancel := context.WithTimeout(context.Background(), stepTimeout)
	defer cancel()
	before := c.logStartA
	ca, err := checkA(ctx, c.p, c.led.a, c.rng)
	if err == nil {
		cb, errB := checkKeyed(ctx, "B", c.lb, c.led.b)
		ca.add(cb)
		err = errB
	}
	if err == nil {
		cc, errC := checkKeyed(ctx, "C", c.pc, c.led.c)
		ca.add(cc)
		err = errC
	}
	c.count("checks", 1)
	c.count("records_checked", ca.recordsA+ca.recordsB+ca.recordsC)
	c.count("records_checked_a", ca.recordsA)
	c.count("records_checked_a_remote", ca.remoteRecordsA)
	c.count("records_checked_b", ca.recordsB)
	c.count("records_checked_c", ca.recordsC)
	c.count("records_checked_c_remote", ca.remoteRecordsC)
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
		case jump && ls > before && ls == c.p.Head().LogStartOffset():
			c.count("log_start_adopted_unknown_outcome", 1) // see child.unsettled
		case ls < before || !movesLogStart(step):
			return violation("A", "step %s moved the log start from %d to %d", step, before, ls)
		}
	}
	c.logStartA = ls
	c.saveProgress()
	return nil
}
