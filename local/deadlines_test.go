package local_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/local"
	"github.com/tierlog/tierlog/producerstate"
	"github.com/tierlog/tierlog/record"
	"github.com/tierlog/tierlog/timingwheel"
)

// fakeClock is the one clock of a deadline test: the Backend's Now, its
// logs' and the manual timing wheel's.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) set(t time.Time) {
	c.mu.Lock()
	c.now = t
	c.mu.Unlock()
}

// wheelHarness is a Backend whose deadlines run on a manual timing wheel
// driven by a fake clock.
type wheelHarness struct {
	t     *testing.T
	dir   string
	b     *local.Backend
	clock *fakeClock
	wheel *timingwheel.Manual
	t0    time.Time
}

// t0 is a whole second, so deadlines in milliseconds fall on ticks of the
// wheels the tests use.
var t0 = time.UnixMilli(1_750_000_000_000)

func newWheelHarness(t *testing.T, tick time.Duration) *wheelHarness {
	t.Helper()
	clock := &fakeClock{now: t0}
	wheel, err := timingwheel.NewManual(timingwheel.Options{Tick: tick, Clock: timingwheel.ClockFunc(clock.Now)})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	// A huge BackgroundInterval: the old sweep would run once an hour, so
	// every deadline met here is met by the wheel.
	b, err := local.OpenBackend(dir, local.BackendOptions{Now: clock.Now, Timer: wheel.Timer, BackgroundInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	h := &wheelHarness{t: t, dir: dir, b: b, clock: clock, wheel: wheel, t0: t0}
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Error(err)
		}
		wheel.Close()
	})
	return h
}

// at moves the clock to t0+d, fires what is due and waits for the work it
// queued, until nothing more is due; then it checks that a sweep of every
// partition (the old background loop) finds nothing left to do.
func (h *wheelHarness) at(d time.Duration) {
	h.t.Helper()
	h.clock.set(h.t0.Add(d))
	h.settle()
}

func (h *wheelHarness) settle() {
	h.t.Helper()
	for {
		h.b.WaitDeadlines()
		if h.wheel.Advance() == 0 {
			h.b.WaitDeadlines()
			break
		}
	}
	if n := h.b.SweepFinds(); n != 0 {
		h.t.Fatalf("at %v: the sweep found %d things the deadlines had not done", h.clock.Now().Sub(h.t0), n)
	}
}

// appendAt appends one batch (about 700 bytes) timestamped with the clock.
func appendAt(t *testing.T, l *local.Log, ts time.Time) {
	t.Helper()
	if _, err := l.Append(ctx, batchOf(10, ts.UnixMilli(), "d"), backend.AppendOptions{AssignOffsets: true}); err != nil {
		t.Fatal(err)
	}
}

func deletedFiles(t *testing.T, dir string) int {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), local.DeletedSuffix) {
			n++
		}
	}
	return n
}

// TestFlushMsDeadline: a flush.ms deadline is met within one tick of the
// wheel and never before, with nothing appended after the data it flushes.
func TestFlushMsDeadline(t *testing.T) {
	for _, tick := range []time.Duration{time.Millisecond, 7 * time.Millisecond} {
		t.Run(fmt.Sprint("tick=", tick), func(t *testing.T) {
			h := newWheelHarness(t, tick)
			l, err := h.b.OpenLog(ctx, "f", 0, cfg(t, "flush.ms", "1000"))
			if err != nil {
				t.Fatal(err)
			}
			h.settle()
			appendAt(t, l, h.t0)
			flushes := l.Metrics().Flushes.Load()
			// The deadline is the last flush (the open, at t0) plus flush.ms.
			h.at(time.Second - time.Nanosecond)
			if l.RecoveryPoint() != 0 || l.Metrics().Flushes.Load() != flushes {
				t.Fatalf("flushed before flush.ms: recovery point %d", l.RecoveryPoint())
			}
			h.at(time.Second + tick - time.Nanosecond)
			if rp, leo := l.RecoveryPoint(), l.Offsets().LogEnd; rp != leo {
				t.Fatalf("flush.ms passed a tick ago: recovery point %d, log end %d", rp, leo)
			}
			// Nothing unflushed: no flush task is left on the wheel (the
			// checkpoint task, the retention deadline, the segment.ms
			// roll of the segment holding the record and the producer
			// expiry check are).
			pending := h.wheel.Pending()
			h.at(time.Hour - time.Nanosecond)
			if got := l.Metrics().Flushes.Load(); got != flushes+1 {
				t.Fatalf("%d flushes of an idle log, want 1", got-flushes)
			}
			if pending != 4 {
				t.Fatalf("%d tasks pending after the flush, want 4 (retention, segment.ms, producer expiry, checkpoint)", pending)
			}
		})
	}
}

// TestRetentionMsDeadline: each segment goes when its largest timestamp is
// retention.ms old, within one tick and never before; one held above the
// high watermark goes when the high watermark passes it.
func TestRetentionMsDeadline(t *testing.T) {
	h := newWheelHarness(t, time.Millisecond)
	c := cfg(t, "segment.bytes", "1000", "retention.ms", "5000", "file.delete.delay.ms", "0")
	l, err := h.b.OpenLog(ctx, "r", 0, c)
	if err != nil {
		t.Fatal(err)
	}
	h.settle()
	for i := 0; i < 3; i++ { // three segments, timestamps t0, t0+1s, t0+2s
		h.at(time.Duration(i) * time.Second)
		appendAt(t, l, h.clock.Now())
	}
	if n := len(l.SegmentInfos()); n != 3 {
		t.Fatalf("%d segments, want 3", n)
	}
	// Overdue at t0+5001ms, but above the high watermark: kept.
	h.at(5001 * time.Millisecond)
	if n := len(l.SegmentInfos()); n != 3 {
		t.Fatalf("retention passed the high watermark: %d segments", n)
	}
	if err := l.SetHighWatermark(l.Offsets().LogEnd); err != nil {
		t.Fatal(err)
	}
	h.settle()
	if n := len(l.SegmentInfos()); n != 2 {
		t.Fatalf("after the high watermark moved: %d segments, want 2", n)
	}
	// The second segment's deadline: t0+1s+5s+1ms.
	h.at(6000 * time.Millisecond)
	if n := len(l.SegmentInfos()); n != 2 {
		t.Fatalf("retention before retention.ms: %d segments", n)
	}
	h.at(6001 * time.Millisecond)
	if n := len(l.SegmentInfos()); n != 1 {
		t.Fatalf("retention.ms passed: %d segments, want 1", n)
	}
	// The last segment holds data: it goes too (rolled first, as Kafka).
	h.at(7000 * time.Millisecond)
	if o := l.Offsets(); o.LogStart != 20 {
		t.Fatalf("log start %d before the last segment's deadline", o.LogStart)
	}
	h.at(7001 * time.Millisecond)
	if o := l.Offsets(); o.LogStart != 30 || o.LogEnd != 30 {
		t.Fatalf("offsets %+v after every segment's deadline", o)
	}
	// An empty log has no deadline until it holds data again.
	h.at(time.Hour)
	appendAt(t, l, h.clock.Now())
	h.settle()
	h.at(time.Hour + 5001*time.Millisecond)
	if o := l.Offsets(); o.LogStart != 30 {
		t.Fatalf("high watermark 30: log start %d", o.LogStart)
	}
	l.SetHighWatermark(l.Offsets().LogEnd)
	h.settle()
	if o := l.Offsets(); o.LogStart != 40 {
		t.Fatalf("offsets %+v: the new data's deadline passed", o)
	}
}

// TestRetentionBytesAfterRoll: size retention is checked after each roll,
// with no clock move at all.
func TestRetentionBytesAfterRoll(t *testing.T) {
	h := newWheelHarness(t, time.Millisecond)
	l, err := h.b.OpenLog(ctx, "s", 0, cfg(t, "segment.bytes", "1000", "retention.bytes", "1500", "file.delete.delay.ms", "0"))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 6; i++ {
		appendAt(t, l, h.t0)
		l.SetHighWatermark(l.Offsets().LogEnd)
		h.settle()
	}
	if n, size := l.Size(); size > 1500+1000 || n > 3 {
		t.Fatalf("%d segments, %d bytes, retention.bytes 1500", n, size)
	}
}

// TestFileDeleteDelayDeadline: a retired segment's .deleted files go
// file.delete.delay.ms after it was retired, within one tick, never before.
func TestFileDeleteDelayDeadline(t *testing.T) {
	h := newWheelHarness(t, time.Millisecond)
	l, err := h.b.OpenLog(ctx, "d", 0, cfg(t, "segment.bytes", "1000", "file.delete.delay.ms", "2000"))
	if err != nil {
		t.Fatal(err)
	}
	appendAt(t, l, h.t0)
	appendAt(t, l, h.t0)
	l.SetHighWatermark(l.Offsets().LogEnd)
	h.at(time.Second)
	if err := l.DeleteRecordsBefore(ctx, 10); err != nil { // retires the first segment at t0+1s
		t.Fatal(err)
	}
	if n := deletedFiles(t, l.Dir()); n == 0 {
		t.Fatal("no .deleted files after retention")
	}
	h.at(3*time.Second - time.Nanosecond)
	if n := deletedFiles(t, l.Dir()); n == 0 {
		t.Fatal(".deleted files removed before file.delete.delay.ms")
	}
	h.at(3 * time.Second)
	if n := deletedFiles(t, l.Dir()); n != 0 {
		t.Fatalf("%d .deleted files left after file.delete.delay.ms", n)
	}
}

// TestSetConfigShortensDeadlines: a config change that brings a deadline
// forward takes effect at once, with no append.
func TestSetConfigShortensDeadlines(t *testing.T) {
	h := newWheelHarness(t, time.Millisecond)
	long := cfg(t, "segment.bytes", "1000", "flush.ms", "3600000", "retention.ms", "3600000", "file.delete.delay.ms", "3600000")
	l, err := h.b.OpenLog(ctx, "c", 0, long)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		appendAt(t, l, h.t0)
	}
	l.SetHighWatermark(l.Offsets().LogEnd)
	if err := l.DeleteRecordsBefore(ctx, 10); err != nil {
		t.Fatal(err)
	}
	h.at(10 * time.Second)
	if l.RecoveryPoint() == l.Offsets().LogEnd || len(l.SegmentInfos()) != 2 || deletedFiles(t, l.Dir()) == 0 {
		t.Fatal("deadlines an hour away were met after 10 s")
	}
	// One at a time, each met at once (its new deadline is past) and
	// without the others.
	first := filepath.Join(l.Dir(), local.FileName(0, local.LogSuffix)+local.DeletedSuffix)
	if err := l.SetConfig(cfg(t, "segment.bytes", "1000", "flush.ms", "3600000", "retention.ms", "3600000", "file.delete.delay.ms", "5000")); err != nil {
		t.Fatal(err)
	}
	h.settle()
	if _, err := os.Stat(first); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("file.delete.delay.ms shortened: %s still there (%v)", first, err)
	}
	if l.RecoveryPoint() == l.Offsets().LogEnd || len(l.SegmentInfos()) != 2 {
		t.Fatal("a shorter file.delete.delay.ms flushed or applied retention")
	}
	if err := l.SetConfig(cfg(t, "segment.bytes", "1000", "flush.ms", "5000", "retention.ms", "3600000", "file.delete.delay.ms", "5000")); err != nil {
		t.Fatal(err)
	}
	h.settle()
	if rp, leo := l.RecoveryPoint(), l.Offsets().LogEnd; rp != leo {
		t.Fatalf("flush.ms shortened: recovery point %d, log end %d", rp, leo)
	}
	if len(l.SegmentInfos()) != 2 {
		t.Fatal("a shorter flush.ms applied retention")
	}
	if err := l.SetConfig(cfg(t, "segment.bytes", "1000", "flush.ms", "5000", "retention.ms", "5000", "file.delete.delay.ms", "5000")); err != nil {
		t.Fatal(err)
	}
	h.settle()
	if o := l.Offsets(); o.LogStart != 30 {
		t.Fatalf("retention.ms shortened: %+v", o)
	}
	// Retention retired the others at t0+10s: they go 5 s later.
	h.at(15*time.Second - time.Nanosecond)
	if n := deletedFiles(t, l.Dir()); n == 0 {
		t.Fatal(".deleted files removed before file.delete.delay.ms")
	}
	h.at(15 * time.Second)
	if n := deletedFiles(t, l.Dir()); n != 0 {
		t.Fatalf("%d .deleted files left", n)
	}
}

// TestCloseAndDeleteCancelDeadlines: a closed or deleted partition leaves
// no task on the wheel, and no work runs for it afterwards.
func TestCloseAndDeleteCancelDeadlines(t *testing.T) {
	h := newWheelHarness(t, time.Millisecond)
	c := cfg(t, "segment.bytes", "1000", "flush.ms", "1000", "retention.ms", "5000", "file.delete.delay.ms", "2000")
	base := h.wheel.Pending() // the checkpoint task
	var logs []*local.Log
	for p := range int32(2) {
		l, err := h.b.OpenLog(ctx, "x", p, c)
		if err != nil {
			t.Fatal(err)
		}
		appendAt(t, l, h.t0)
		appendAt(t, l, h.t0)
		l.SetHighWatermark(l.Offsets().LogEnd)
		if err := l.DeleteRecordsBefore(ctx, 10); err != nil {
			t.Fatal(err)
		}
		logs = append(logs, l)
	}
	h.settle()
	if got := h.wheel.Pending() - base; got != 10 {
		t.Fatalf("%d tasks for two partitions, want 10 (flush, retention, deletion, segment.ms, producer expiry each)", got)
	}
	if err := logs[0].Close(); err != nil {
		t.Fatal(err)
	}
	if err := h.b.Delete(ctx, "x", 1); err != nil {
		t.Fatal(err)
	}
	if got := h.wheel.Pending() - base; got != 0 {
		t.Fatalf("%d tasks left after Close and Delete", got)
	}
	if n := deletedFiles(t, logs[0].Dir()); n != 0 {
		t.Fatalf("Close left %d .deleted files", n)
	}
	runs := h.b.DeadlineRuns()
	h.at(24 * time.Hour)
	if got := h.b.DeadlineRuns(); got != runs+1 { // the checkpoint's
		t.Fatalf("%d runs after the partitions closed, want the checkpoint's only", got-runs)
	}
}

// TestDeadlinesRacingClose closes partitions while their deadlines fire on
// a real wheel with millisecond deadlines (run with -race): a Close waits
// for its partition's work, and no work starts after it.
func TestDeadlinesRacingClose(t *testing.T) {
	b, err := local.OpenBackend(t.TempDir(), local.BackendOptions{BackgroundInterval: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	c := cfg(t, "segment.bytes", "1000", "flush.ms", "1", "retention.ms", "2", "file.delete.delay.ms", "1")
	var wg sync.WaitGroup
	for p := range int32(4) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for round := range 20 {
				l, err := b.OpenLog(ctx, "race", p, c)
				if err != nil {
					t.Error(err)
					return
				}
				for range round % 5 {
					if _, err := l.Append(ctx, batchOf(10, time.Now().UnixMilli(), "r"), backend.AppendOptions{AssignOffsets: true}); err != nil {
						t.Error(err)
						return
					}
					l.SetHighWatermark(l.Offsets().LogEnd)
				}
				time.Sleep(time.Duration(round%3) * time.Millisecond)
				if round%4 == 3 {
					err = b.Delete(ctx, "race", p)
				} else {
					err = l.Close()
				}
				if err != nil {
					t.Error(err)
					return
				}
				if _, err := l.Append(ctx, batchOf(1, 0, "r"), backend.AppendOptions{AssignOffsets: true}); !errors.Is(err, backend.ErrClosed) {
					t.Errorf("append after close: %v", err)
				}
			}
		}()
	}
	wg.Wait()
}

// TestDeadlinesWithoutTheSweep runs on the real clock with a background
// interval of an hour: flush.ms, retention.ms and file.delete.delay.ms of
// a fraction of a second are still met (a sweep every hour would not
// meet them).
func TestDeadlinesWithoutTheSweep(t *testing.T) {
	b, err := local.OpenBackend(t.TempDir(), local.BackendOptions{BackgroundInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	l, err := b.OpenLog(ctx, "idle", 0, cfg(t, "segment.bytes", "1000", "flush.ms", "50", "retention.ms", "200", "file.delete.delay.ms", "100"))
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := l.Append(ctx, batchOf(10, time.Now().UnixMilli(), "i"), backend.AppendOptions{AssignOffsets: true}); err != nil {
			t.Fatal(err)
		}
	}
	l.SetHighWatermark(l.Offsets().LogEnd)
	deadline := time.Now().Add(20 * time.Second) // liveness only: the deadlines are under a second
	for {
		o := l.Offsets()
		ents, _ := filepath.Glob(filepath.Join(l.Dir(), "*"+local.DeletedSuffix))
		if l.RecoveryPoint() == o.LogEnd && o.LogStart == o.LogEnd && len(ents) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 20 s: recovery point %d, offsets %+v, %d .deleted files", l.RecoveryPoint(), o, len(ents))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestSegmentMsIdleRoll: a segment that took its first record rolls
// segment.ms later by the wall clock, within one tick and never before,
// though no append arrives; an empty segment never rolls, and an append
// after the roll starts the next segment's clock.
func TestSegmentMsIdleRoll(t *testing.T) {
	for _, tick := range []time.Duration{time.Millisecond, 7 * time.Millisecond} {
		t.Run(fmt.Sprint("tick=", tick), func(t *testing.T) {
			h := newWheelHarness(t, tick)
			l, err := h.b.OpenLog(ctx, "r", 0, cfg(t, "segment.ms", "10000", "segment.jitter.ms", "0"))
			if err != nil {
				t.Fatal(err)
			}
			h.at(time.Hour) // an empty log: nothing rolls
			if n := len(l.SegmentInfos()); n != 1 {
				t.Fatalf("an empty log rolled: %d segments", n)
			}
			start := time.Hour
			h.at(start)
			appendAt(t, l, h.clock.Now())
			h.at(start + 10*time.Second - time.Nanosecond)
			if n := len(l.SegmentInfos()); n != 1 {
				t.Fatalf("rolled before segment.ms: %d segments", n)
			}
			h.at(start + 10*time.Second + tick - time.Nanosecond)
			segs := l.SegmentInfos()
			if len(segs) != 2 || segs[0].Active || !segs[1].Active || segs[1].Size != 0 || segs[1].BaseOffset != l.Offsets().LogEnd {
				t.Fatalf("segment.ms passed a tick ago: segments %+v", segs)
			}
			// The new, empty segment never rolls; its first record starts
			// its clock.
			h.at(start + 2*time.Hour)
			if n := len(l.SegmentInfos()); n != 2 {
				t.Fatalf("an empty active segment rolled: %d segments", n)
			}
			appendAt(t, l, h.clock.Now())
			h.at(start + 2*time.Hour + 10*time.Second - time.Nanosecond)
			if n := len(l.SegmentInfos()); n != 2 {
				t.Fatalf("the second segment rolled early: %d segments", n)
			}
			h.at(start + 2*time.Hour + 10*time.Second + tick - time.Nanosecond)
			if n := len(l.SegmentInfos()); n != 3 {
				t.Fatalf("the second segment did not roll: %d segments", n)
			}
			// A shorter segment.ms applies at once to a segment holding data.
			h.at(start + 3*time.Hour)
			appendAt(t, l, h.clock.Now())
			if err := l.SetConfig(cfg(t, "segment.ms", "1000", "segment.jitter.ms", "0")); err != nil {
				t.Fatal(err)
			}
			h.at(start + 3*time.Hour + time.Second - time.Nanosecond)
			if n := len(l.SegmentInfos()); n != 3 {
				t.Fatalf("the third segment rolled early: %d segments", n)
			}
			h.at(start + 3*time.Hour + time.Second + tick - time.Nanosecond)
			if n := len(l.SegmentInfos()); n != 4 {
				t.Fatalf("segment.ms shortened to 1 s: %d segments, want 4", n)
			}
		})
	}
}

// TestSegmentMsIdleRollAfterACleanOpen: a segment holding data when the
// log opens cleanly (not written to since, so not yet the writer's) rolls
// segment.ms after the open, like one written to since.
func TestSegmentMsIdleRollAfterACleanOpen(t *testing.T) {
	h := newWheelHarness(t, time.Millisecond)
	c := cfg(t, "segment.ms", "10000", "segment.jitter.ms", "0")
	l, err := h.b.OpenLog(ctx, "r", 0, c)
	if err != nil {
		t.Fatal(err)
	}
	appendAt(t, l, h.clock.Now())
	// A clean shutdown of the whole log directory, and a new Backend on it.
	if err := h.b.Close(); err != nil {
		t.Fatal(err)
	}
	h.at(time.Minute)
	if h.b, err = local.OpenBackend(h.dir, local.BackendOptions{Now: h.clock.Now, Timer: h.wheel.Timer, BackgroundInterval: time.Hour}); err != nil {
		t.Fatal(err)
	}
	b2 := h.b
	t.Cleanup(func() { b2.Close() }) // before the harness's, which closes the first
	if l, err = h.b.OpenLog(ctx, "r", 0, c); err != nil {
		t.Fatal(err)
	}
	h.settle()
	h.at(time.Minute + 10*time.Second - time.Nanosecond)
	if n := len(l.SegmentInfos()); n != 1 {
		t.Fatalf("rolled before segment.ms after the open: %d segments", n)
	}
	h.at(time.Minute + 10*time.Second + time.Millisecond)
	if segs := l.SegmentInfos(); len(segs) != 2 || segs[0].Size == 0 || segs[1].Size != 0 {
		t.Fatalf("segment.ms after a clean open: segments %+v; want the one with data rolled", segs)
	}
}

// TestProducerExpiryDeadline: a log with background work removes a
// producer idle for producer.id.expiration.ms (1 day) at its next
// producer.id.expiration.check.interval.ms (10 minutes), as Kafka's
// LogManager does; a producer that wrote since stays. Without it a
// partition that sees many short-lived idempotent producers keeps every
// one of them.
func TestProducerExpiryDeadline(t *testing.T) {
	h := newWheelHarness(t, time.Second)
	l, err := h.b.OpenLog(ctx, "pe", 0, cfg(t))
	if err != nil {
		t.Fatal(err)
	}
	produce := func(pid int64, seq int32) { t.Helper(); appendIdempotent(t, l, pid, seq, h.clock.Now()) }
	ids := func() []int64 {
		var out []int64
		for _, p := range l.Producers() {
			out = append(out, p.ProducerID)
		}
		return out
	}
	const day, check = 24 * time.Hour, 10 * time.Minute
	produce(1, 0)
	produce(2, 0)
	h.at(12 * time.Hour)
	produce(2, 1) // producer 2 writes again: its clock starts over
	// Each producer stays until it is a day idle (Kafka: idle >=
	// producer.id.expiration.ms), and is gone by the check after that,
	// at most 10 minutes later.
	idleSince := map[int64]time.Duration{1: 0, 2: 12 * time.Hour}
	for at := 12 * time.Hour; at <= 12*time.Hour+day+2*check; at += time.Minute {
		h.at(at)
		got := map[int64]bool{}
		for _, id := range ids() {
			got[id] = true
		}
		for id, since := range idleSince {
			switch idle := at - since; {
			case idle < day && !got[id]:
				t.Fatalf("at %v: producer %d, idle %v, removed before its day", at, id, idle)
			case idle >= day+check && got[id]:
				t.Fatalf("at %v: producer %d, idle %v, still there past the check after its day", at, id, idle)
			}
		}
	}
	if got := ids(); len(got) != 0 {
		t.Fatalf("producers %v at the end, want none", got)
	}
}

// TestRemoveExpiredProducers: a log without background work (opened on
// its own, no Backend's BackgroundInterval) keeps its producers until the
// embedder calls RemoveExpiredProducers, which removes those idle for
// producer.id.expiration.ms and keeps the others.
func TestRemoveExpiredProducers(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	dir := t.TempDir()
	ps := producerstate.DefaultConfig()
	ps.ProducerIDExpirationMs, ps.TransactionVerification = 60_000, false
	l, err := local.Open(dir, local.Options{Config: cfg(t), LogStartOffset: -1, HighWatermark: -1, Now: func() time.Time { return now },
		ProducerState: ps})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	produce := func(pid int64, seq int32) { t.Helper(); appendIdempotent(t, l, pid, seq, now) }
	produce(1, 0)
	now = now.Add(45 * time.Second)
	produce(2, 0)
	now = now.Add(30 * time.Second) // producer 1 idle 75 s, producer 2 30 s
	if n := len(l.Producers()); n != 2 {
		t.Fatalf("%d producers before the call, want 2: nothing removes them on its own", n)
	}
	n, err := l.RemoveExpiredProducers()
	if err != nil || n != 1 {
		t.Fatalf("RemoveExpiredProducers: %d, %v; want 1", n, err)
	}
	if ps := l.Producers(); len(ps) != 1 || ps[0].ProducerID != 2 {
		t.Fatalf("producers left %+v, want producer 2 alone", ps)
	}
}

// appendIdempotent appends one record of producer pid (epoch 0) at
// sequence seq, timestamped at.
func appendIdempotent(t *testing.T, l *local.Log, pid int64, seq int32, at time.Time) {
	t.Helper()
	var b record.Builder
	hd := record.NewBatchHeader()
	hd.ProducerID, hd.ProducerEpoch, hd.BaseSequence = pid, 0, seq
	b.Reset(hd)
	b.Append(at.UnixMilli(), nil, []byte("v"), nil)
	bt, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Append(ctx, bt, backend.AppendOptions{AssignOffsets: true}); err != nil {
		t.Fatal(err)
	}
}
