package crashchild

import (
	"bufio"
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

var roles = map[string]Role{
	// echo exits with args[0] after printing the others, one a line.
	"echo": func(args []string) int {
		for _, a := range args[1:] {
			fmt.Printf("arg %s\n", a)
		}
		code, _ := strconv.Atoi(args[0])
		return code
	},
	// killat takes 100 steps in each of args[1] goroutines with a KillAt
	// at args[0]; with one goroutine it prints each step around it.
	"killat": func(args []string) int {
		k, _ := strconv.Atoi(args[0])
		g, _ := strconv.Atoi(args[1])
		kill := NewKillAt(k)
		var wg sync.WaitGroup
		for range g {
			wg.Go(func() {
				for i := 1; i <= 100; i++ {
					if g == 1 {
						fmt.Printf("step %d\n", i)
					}
					kill.Step()
					if g == 1 {
						fmt.Printf("stepped %d\n", i)
					}
				}
			})
		}
		wg.Wait()
		fmt.Printf("steps %d\n", kill.Steps())
		return 0
	},
	// wait says it is ready and waits to be killed.
	"wait": func([]string) int {
		fmt.Println("ready")
		for {
			time.Sleep(time.Hour)
		}
	},
	// parent starts a child that waits, prints its pid, and waits.
	"parent": func([]string) int {
		c, err := start("wait", nil, Options{})
		if err != nil {
			fmt.Println("ERR", err)
			return 1
		}
		if _, err := c.WaitLine("ready", time.Minute); err != nil {
			fmt.Println("ERR", err)
			return 1
		}
		fmt.Printf("PID %d\n", c.Pid())
		for {
			time.Sleep(time.Hour)
		}
	},
	// unfinished ends its output without a newline.
	"unfinished": func([]string) int {
		fmt.Print("first\nlast words")
		return 0
	},
	// flood writes args[0] numbered lines to stdout and one to stderr.
	"flood": func(args []string) int {
		n, _ := strconv.Atoi(args[0])
		w := bufio.NewWriter(os.Stdout)
		for i := range n {
			fmt.Fprintf(w, "line %08d\n", i)
		}
		w.Flush()
		fmt.Fprintln(os.Stderr, "stderr too")
		return 0
	},
}

func TestMain(m *testing.M) {
	if code, ok := Dispatch(roles); ok {
		os.Exit(code)
	}
	os.Exit(m.Run())
}

func lines(b []byte) []string { return strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") }

func TestArgsAndExitCode(t *testing.T) {
	args := []string{"7", "a b", "", `"quoted" \ and, commas`, "ünïcode"}
	c := Start(t, "echo", args, Options{})
	if exit := c.Wait(); !exit.Exited(7) || exit.Killed() {
		t.Fatalf("exit %v, want exit status 7\n%s", exit, c.Output())
	}
	var want []string
	for _, a := range args[1:] {
		want = append(want, "arg "+a)
	}
	if got := lines(c.Output()); !slices.Equal(got, want) {
		t.Fatalf("the child printed %q, want %q", got, want)
	}
	if exit := Start(t, "echo", []string{"0"}, Options{}).Wait(); !exit.Exited(0) || exit.String() != "exit status 0" {
		t.Fatalf("exit %v, want exit status 0", exit)
	}
}

func TestUnknownRole(t *testing.T) {
	c := Start(t, "no-such-role", nil, Options{})
	if exit := c.Wait(); !exit.Exited(ExitNoRole) {
		t.Fatalf("exit %v, want %d", exit, ExitNoRole)
	}
	if !bytes.Contains(c.Output(), []byte(`no role "no-such-role"`)) {
		t.Fatalf("the child's output does not name the role: %q", c.Output())
	}
}

func TestKillAt(t *testing.T) {
	c := Start(t, "killat", []string{"4", "1"}, Options{})
	exit := c.Wait()
	if !exit.Killed() || exit.String() != "killed by SIGKILL" {
		t.Fatalf("exit %v, want killed by SIGKILL\n%s", exit, c.Output())
	}
	want := []string{"step 1", "stepped 1", "step 2", "stepped 2", "step 3", "stepped 3", "step 4"}
	if got := lines(c.Output()); !slices.Equal(got, want) {
		t.Fatalf("the child printed %q, want %q: killed at another step", got, want)
	}
	for _, k := range []string{"0", "101"} {
		c := Start(t, "killat", []string{k, "1"}, Options{})
		if exit := c.Wait(); !exit.Exited(0) {
			t.Fatalf("k=%s of 100 steps: exit %v, want exit status 0", k, exit)
		}
		if line, err := c.WaitLine("steps ", 0); err != nil || line != "steps 100" {
			t.Fatalf("k=%s: %q %v, want steps 100", k, line, err)
		}
	}
}

// TestKillAtConcurrent: with steps from many goroutines, exactly one is
// the k-th.
func TestKillAtConcurrent(t *testing.T) {
	if exit := Start(t, "killat", []string{"250", "4"}, Options{}).Wait(); !exit.Killed() {
		t.Fatalf("k=250 of 400 steps in 4 goroutines: exit %v, want killed", exit)
	}
	c := Start(t, "killat", []string{"0", "4"}, Options{})
	if line, err := c.WaitLine("steps ", time.Minute); err != nil || line != "steps 400" {
		t.Fatalf("%q %v, want steps 400: steps lost", line, err)
	}
	if exit := c.Wait(); !exit.Exited(0) {
		t.Fatalf("exit %v", exit)
	}
}

func TestKillAndWaitLine(t *testing.T) {
	c := Start(t, "wait", nil, Options{})
	if line, err := c.WaitLine("rea", time.Minute); err != nil || line != "ready" {
		t.Fatalf("WaitLine: %q %v", line, err)
	}
	// A line written before the call counts.
	if line, err := c.WaitLine("ready", time.Minute); err != nil || line != "ready" {
		t.Fatalf("WaitLine again: %q %v", line, err)
	}
	if _, err := c.WaitLine("never", 50*time.Millisecond); err == nil || !strings.Contains(err.Error(), "in 50ms") {
		t.Fatalf("WaitLine for a line that never comes: %v, want a timeout", err)
	}
	select {
	case <-c.Done():
		t.Fatal("Done is closed while the child runs")
	default:
	}
	c.Kill()
	<-c.Done()
	if exit := c.Wait(); !exit.Killed() {
		t.Fatalf("exit %v, want killed", exit)
	}
	c.Kill() // ended: nothing happens
}

func TestWaitLineAtTheEnd(t *testing.T) {
	c := Start(t, "unfinished", nil, Options{})
	if _, err := c.WaitLine("never", 0); err == nil || !strings.Contains(err.Error(), "exit status 0") {
		t.Fatalf("WaitLine for a line the child never wrote: %v, want an error naming its end", err)
	}
	// Once the output has ended, its last line counts without a newline.
	if line, err := c.WaitLine("last", 0); err != nil || line != "last words" {
		t.Fatalf("WaitLine for the last line: %q %v", line, err)
	}
}

// TestOutput: all of the output, stdout and stderr, reaches
// Options.Output; the child keeps its last MaxOutput bytes, whole lines.
func TestOutput(t *testing.T) {
	const n = 400_000 // 14 bytes a line: past MaxOutput
	var fwd bytes.Buffer
	c := Start(t, "flood", []string{strconv.Itoa(n)}, Options{Output: &fwd})
	if exit := c.Wait(); !exit.Exited(0) {
		t.Fatalf("exit %v", exit)
	}
	got := lines(fwd.Bytes())
	if len(got) != n+1 || got[0] != "line 00000000" || got[n-1] != fmt.Sprintf("line %08d", n-1) || got[n] != "stderr too" {
		t.Fatalf("Options.Output got %d lines (%q … %q), want %d", len(got), got[0], got[len(got)-1], n+1)
	}
	kept := c.Output()
	if len(kept) > MaxOutput || !bytes.HasPrefix(kept, []byte("line ")) || !bytes.HasSuffix(fwd.Bytes(), kept) {
		t.Fatalf("kept %d bytes beginning %q; want at most %d, the tail, whole lines", len(kept), kept[:20], MaxOutput)
	}
	if _, err := c.WaitLine("line 00000000", 0); err == nil {
		t.Fatal("WaitLine found a line no longer kept")
	}
	if _, err := c.WaitLine(fmt.Sprintf("line %08d", n-1), 0); err != nil {
		t.Fatal(err)
	}
}

// TestChildDiesWithItsParent: a child whose parent process is SIGKILLed
// (no cleanup runs) goes with it.
func TestChildDiesWithItsParent(t *testing.T) {
	c := Start(t, "parent", nil, Options{})
	line, err := c.WaitLine("PID ", time.Minute)
	if err != nil {
		t.Fatalf("%v\n%s", err, c.Output())
	}
	pid, err := strconv.Atoi(strings.TrimPrefix(line, "PID "))
	if err != nil || !Alive(pid) {
		t.Fatalf("%q: the grandchild is not running (%v)", line, err)
	}
	c.Kill()
	c.Wait()
	for deadline := time.Now().Add(10 * time.Second); Alive(pid); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			killPid(pid)
			t.Fatalf("child %d outlived its killed parent", pid)
		}
	}
}

// TestCleanupKills: a child still running when its test ends is killed
// and reaped.
func TestCleanupKills(t *testing.T) {
	var c *Child
	t.Run("start", func(t *testing.T) {
		c = Start(t, "wait", nil, Options{})
		if _, err := c.WaitLine("ready", time.Minute); err != nil {
			t.Fatal(err)
		}
	})
	select {
	case <-c.Done():
	default:
		t.Fatal("the child runs after its test ended")
	}
	if exit := c.Wait(); !exit.Killed() {
		t.Fatalf("exit %v, want killed", exit)
	}
}

func TestStartFailureIsAnExitWithErr(t *testing.T) {
	e := exitOf(os.ErrNotExist)
	if e.Killed() || e.Exited(0) || e.Exited(-1) || !strings.HasPrefix(e.String(), "unknown end") {
		t.Fatalf("%+v (%v): want an unknown end", e, e)
	}
}

func TestPlan(t *testing.T) {
	spread := Plan{Runs: 300, Short: 30, Steps: 1000, Spread: true}
	for _, short := range []bool{false, true} {
		ks := spread.ks(nil, short)
		want := 300
		if short {
			want = 30
		}
		if len(ks) != want || ks[0] != 1 || !slices.IsSorted(ks) || ks[len(ks)-1] > 1000 || ks[len(ks)-1] < 1000-1000/want {
			t.Fatalf("short %v: %d k's from %d to %d, want %d spread over 1..1000", short, len(ks), ks[0], ks[len(ks)-1], want)
		}
		if len(slices.Compact(slices.Clone(ks))) != len(ks) {
			t.Fatalf("short %v: a k twice: %v", short, ks)
		}
	}
	// Fewer steps than runs: every step once.
	if ks := (Plan{Runs: 300, Short: 30, Steps: 20, Spread: true}).ks(nil, false); !slices.Equal(ks, []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20}) {
		t.Fatalf("20 steps: %v, want each once", ks)
	}
	random := Plan{Runs: 200, Short: 40, Steps: 45}
	ks := random.ks(rand.New(rand.NewPCG(1, 2)), false)
	if len(ks) != 200 || slices.Min(ks) != 1 || slices.Max(ks) != 45 {
		t.Fatalf("%d random k's from %d to %d, want 200 over 1..45", len(ks), slices.Min(ks), slices.Max(ks))
	}
	if again := random.ks(rand.New(rand.NewPCG(1, 2)), false); !slices.Equal(ks, again) {
		t.Fatal("the same seed drew other k's")
	}
	if short := random.ks(rand.New(rand.NewPCG(1, 2)), true); len(short) != 40 {
		t.Fatalf("%d k's under -short, want 40", len(short))
	}
}

func TestSeed(t *testing.T) {
	t.Setenv(EnvSeed, "42")
	if s := Seed(t); s != 42 {
		t.Fatalf("Seed is %d with %s=42", s, EnvSeed)
	}
	if got, want := Rand(t, 3).Uint64(), rand.New(rand.NewPCG(42, 3)).Uint64(); got != want {
		t.Fatalf("Rand(t, 3) is not seeded with (42, 3)")
	}
	t.Setenv(EnvSeed, "forty-two")
	ft := &fakeTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		Seed(ft)
	}()
	<-done
	if !strings.Contains(ft.fatal, "forty-two") {
		t.Fatalf("a seed that is not a number: %q, want a failure naming it", ft.fatal)
	}
	t.Setenv(EnvSeed, "")
	if a, b := Seed(t), Seed(t); a == b {
		t.Fatalf("two seeds from the clock are both %d", a)
	}
}

// fakeTB records a Fatalf and ends its goroutine.
type fakeTB struct {
	testing.TB
	fatal string
}

func (*fakeTB) Helper()             {}
func (*fakeTB) Logf(string, ...any) {}
func (f *fakeTB) Fatalf(format string, args ...any) {
	f.fatal = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func killPid(pid int) {
	if p, err := os.FindProcess(pid); err == nil {
		p.Kill()
	}
}
