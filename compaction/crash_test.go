package compaction

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/local"
	"github.com/tierlog/tierlog/testing/crashchild"
	"github.com/tierlog/tierlog/testing/faultfs"
	"github.com/tierlog/tierlog/vfs"
)

// The crash test cleans a log in a child process (this test binary,
// re-executed by testing/crashchild) that kills itself with SIGKILL before its k-th operation
// that changes the disk (through testing/faultfs): each write to a .cleaned
// file (in 512-byte pieces), each fsync, rename and removal of the segment
// replacement, each write of the index rebuilds. The parent
// reopens the directory as after a crash and checks, for every group of
// segments the clean replaces, that the log holds either the old
// segments' records or the cleaned ones, exactly, never a mix; then that
// cleaning resumes to the same result a plain map predicts.

func TestMain(m *testing.M) {
	if code, ok := crashchild.Dispatch(map[string]crashchild.Role{"clean": crashChild}); ok {
		os.Exit(code)
	}
	os.Exit(m.Run())
}

// crashTime is the clock of every clean in the test, so the child and the
// reference clean decide the same.
var crashTime = time.UnixMilli(1_700_000_000_000)

func crashOpen(dir string, clean bool, fsys vfs.FS) (*local.Log, error) {
	cfg, err := backend.ParseConfig(map[string]string{"cleanup.policy": "compact", "segment.bytes": "4096",
		"delete.retention.ms": strconv.Itoa(retentionMs), "file.delete.delay.ms": "0"})
	if err != nil {
		return nil, err
	}
	l, err := local.Open(dir, local.Options{Config: cfg, CleanShutdown: clean, HighWatermark: -1, LogStartOffset: -1,
		Now: func() time.Time { return crashTime }, FS: fsys})
	if err != nil {
		return nil, err
	}
	return l, l.SetHighWatermark(l.Offsets().LogEnd)
}

// crashChild cleans args[0] once and kills itself at write args[1]; if it
// gets to the end, it prints how many writes there were ("writes n").
func crashChild(args []string) int {
	dir := args[0]
	k, _ := strconv.Atoi(args[1])
	ffs := faultfs.New(vfs.Default)
	l, err := crashOpen(dir, true, ffs)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	kill := crashchild.NewKillAt(k)
	ffs.SetHook(func(op faultfs.Op) error {
		if op.Mutates() {
			kill.Step()
		}
		return nil
	})
	if _, err := Clean(context.Background(), l, -1, Options{MemoryBytes: 1 << 20, Now: func() time.Time { return crashTime }, WriteBufferBytes: 512}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	fmt.Println("writes", kill.Steps())
	return 0
}

// runCrashChild cleans dir in a child that dies at write k: it returns
// the child's count of writes if it got to the end, or killed.
func runCrashChild(t *testing.T, dir string, k int) (out string, killed bool) {
	t.Helper()
	c := crashchild.Start(t, "clean", []string{dir, strconv.Itoa(k)}, crashchild.Options{})
	switch exit := c.Wait(); {
	case exit.Killed():
		return "", true
	case !exit.Exited(0):
		t.Fatalf("child (k=%d): %v\n%s", k, exit, c.Output())
	}
	line, err := c.WaitLine("writes ", 0)
	if err != nil {
		t.Fatalf("child (k=%d): %v\n%s", k, err, c.Output())
	}
	return strings.TrimPrefix(line, "writes "), false
}

func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	if err := os.CopyFS(dst, os.DirFS(src)); err != nil {
		t.Fatal(err)
	}
}

// recsIn returns the records of rs with offsets in [lo, hi).
func recsIn(rs []rec, lo, hi int64) []rec {
	var out []rec
	for _, r := range rs {
		if r.offset >= lo && r.offset < hi {
			out = append(out, r)
		}
	}
	return out
}

// crashTempDir is a directory for the crash runs: in memory (/dev/shm)
// where there is one, since the runs create thousands of files (a SIGKILL
// leaves the page cache as it is either way).
func crashTempDir(t *testing.T) string {
	t.Helper()
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		if d, err := os.MkdirTemp("/dev/shm", "tierlog-clean-crash-"); err == nil {
			t.Cleanup(func() { os.RemoveAll(d) })
			return d
		}
	}
	return t.TempDir()
}

func TestCleanCrashAtEveryWrite(t *testing.T) {
	root := crashTempDir(t)
	fixture := filepath.Join(root, "fixture", "users-0")
	c := &clock{t: crashTime}
	l, err := crashOpen(fixture, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	w := newTxnWriter(l, rand.New(rand.NewPCG(5, 5)), c, 40)
	for range 600 {
		w.step(t)
	}
	for pid := range w.open {
		w.end(t, pid, pid%2 == 0)
	}
	if err := l.Roll(); err != nil {
		t.Fatal(err)
	}
	before := readAll(t, l)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}

	// The reference: the same clean, uninterrupted.
	ref := filepath.Join(root, "ref", "users-0")
	copyTree(t, fixture, ref)
	out, killed := runCrashChild(t, ref, 1<<30)
	events, _ := strconv.Atoi(out)
	if killed || events < 50 {
		t.Fatalf("the reference clean made %q writes (killed %v)", out, killed)
	}
	rl, err := crashOpen(ref, true, nil)
	if err != nil {
		t.Fatal(err)
	}
	after := readAll(t, rl)
	var bounds []int64
	for _, s := range rl.SegmentInfos() {
		bounds = append(bounds, s.BaseOffset)
	}
	bounds = append(bounds, rl.Offsets().LogEnd)
	rl.Close()
	if reflect.DeepEqual(before, after) {
		t.Fatal("the clean changed nothing; the test proves nothing")
	}

	// Every write when there are few enough, else an even spread.
	ks := (crashchild.Plan{Runs: 300, Short: 30, Steps: events, Spread: true}).Ks(nil)
	mixed := 0
	for _, k := range ks {
		dir := filepath.Join(root, fmt.Sprintf("k%d", k), "users-0")
		copyTree(t, fixture, dir)
		if _, killed := runCrashChild(t, dir, k); !killed {
			t.Fatalf("k=%d of %d: the child was not killed", k, events)
		}
		l, err := crashOpen(dir, false, nil) // as after a crash: recovery runs
		if err != nil {
			t.Fatalf("k=%d: reopen: %v", k, err)
		}
		got := readAll(t, l)
		sawOld, sawNew := false, false
		for i := 0; i+1 < len(bounds); i++ {
			lo, hi := bounds[i], bounds[i+1]
			g, o, n := recsIn(got, lo, hi), recsIn(before, lo, hi), recsIn(after, lo, hi)
			switch {
			case reflect.DeepEqual(g, n) && !reflect.DeepEqual(o, n):
				sawNew = true
			case reflect.DeepEqual(g, o):
				sawOld = sawOld || !reflect.DeepEqual(o, n)
			default:
				t.Fatalf("k=%d of %d: offsets %d..%d hold neither the old records (%d) nor the cleaned ones (%d), but %d",
					k, events, lo, hi, len(o), len(n), len(g))
			}
		}
		if sawOld && sawNew {
			mixed++ // some groups replaced, others not yet: fine, group by group
		}
		// Cleaning resumes and ends where the model says.
		cleanToEnd(t, l, 1<<20, c)
		checkCleaned(t, readAll(t, l), w.written, l.Offsets().LogEnd)
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		os.RemoveAll(filepath.Dir(dir))
	}
	t.Logf("%d writes in a clean; killed at %d of them; %d runs died between two groups' replacements", events, len(ks), mixed)
}
