// Package crashchild is the harness of tierlog's kill-a-child crash
// tests: a test re-executes its own binary as a child process in a named
// role, the child does some work and dies (SIGKILLed by the parent, or by
// itself at its k-th step, or it exits), and the parent recovers what the
// child left and checks it.
//
// The test binary's TestMain sends a child to its role before any test
// runs:
//
//	func TestMain(m *testing.M) {
//		if code, ok := crashchild.Dispatch(map[string]crashchild.Role{"append": appendChild}); ok {
//			os.Exit(code)
//		}
//		os.Exit(m.Run())
//	}
//
// and a test starts children and reads how they ended:
//
//	rng := crashchild.Rand(t, 0)
//	for _, k := range (crashchild.Plan{Runs: 200, Short: 40, Steps: 400}).Ks(rng) {
//		c := crashchild.Start(t, "append", []string{dir, strconv.Itoa(k)}, crashchild.Options{})
//		if exit := c.Wait(); !exit.Killed() {
//			t.Fatalf("k=%d: %v\n%s", k, exit, c.Output())
//		}
//		// recover dir and check it
//	}
//
// while the child counts its steps with a KillAt, which SIGKILLs the
// process at the k-th.
//
// # The child
//
// A child is the test binary (os.Executable) run with -test.run=^$ and
// two variables in its environment: EnvRole names the role and EnvArgs
// holds its arguments, a JSON array of strings. The rest of the
// environment is the parent's. Dispatch MUST be called at the top of
// TestMain, before m.Run: a role runs outside any test. A binary that
// does not dispatch runs no test and exits 0 (-test.run=^$), so a
// forgotten Dispatch is seen as a child that did nothing, never as a
// child that reruns the tests.
//
// The child's stdout and stderr go to one pipe, read in the parent (the
// last MaxOutput bytes kept, and each byte passed on to Options.Output
// when set). The child is SIGKILLed when the parent process dies (its
// Pdeathsig, tied to a thread locked for the child's life), and at the
// end of the test that started it (t.Cleanup), so no child outlives its
// test.
//
// # Seeds
//
// The k's a crash loop kills at, and its other choices, come from Rand,
// seeded from EnvSeed (TIERLOG_CRASH_SEED) when it is set and else from
// the clock; the seed is logged, so a failure can be replayed. What a
// child does within a step may still depend on goroutine timing.
package crashchild

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The environment of a child.
const (
	// EnvRole names the role a child runs (see Dispatch).
	EnvRole = "TIERLOG_CRASHCHILD_ROLE"
	// EnvArgs holds the role's arguments, a JSON array of strings.
	EnvArgs = "TIERLOG_CRASHCHILD_ARGS"
)

// ExitNoRole is the exit code of a child whose role is not among those
// given to Dispatch, or whose arguments do not decode.
const ExitNoRole = 125

// MaxOutput is how much of a child's output the parent keeps (the last
// bytes of it); Options.Output receives all of it.
const MaxOutput = 4 << 20

// waitDelay bounds how long Wait waits for the output pipe to close after
// the child has exited (a process the child started may hold it open).
const waitDelay = 5 * time.Second

// Role is what a child does; args are those given to Start. Its result
// is the child process's exit code. A role runs in the child before any
// test, with no *testing.T: it reports failures on stderr or stdout (the
// parent keeps both) and through its exit code.
type Role func(args []string) int

// Dispatch runs this process's role when it is a child (EnvRole is set)
// and returns the role's exit code and true; the caller MUST exit with
// that code. In the parent it returns 0, false at once. A role that is
// not in roles, or arguments that do not decode, is reported on stderr
// and gives ExitNoRole.
func Dispatch(roles map[string]Role) (code int, child bool) {
	name, ok := os.LookupEnv(EnvRole)
	if !ok {
		return 0, false
	}
	role, ok := roles[name]
	if !ok {
		fmt.Fprintf(os.Stderr, "crashchild: no role %q in this test binary\n", name)
		return ExitNoRole, true
	}
	var args []string
	if err := json.Unmarshal([]byte(os.Getenv(EnvArgs)), &args); err != nil {
		fmt.Fprintf(os.Stderr, "crashchild: role %q: bad %s: %v\n", name, EnvArgs, err)
		return ExitNoRole, true
	}
	return role(args), true
}

// Options tunes Start.
type Options struct {
	// Output, when not nil, receives the child's stdout and stderr as they
	// come (all of it, not only the last MaxOutput bytes). Writes come
	// from one goroutine at a time; an error from Output is ignored.
	Output io.Writer
}

// Exit is how a child ended: a signal (Signal, Code -1), an exit status
// (Code), or unknown (Err: the child could not be started or waited for).
type Exit struct {
	Signal syscall.Signal // the signal that ended the child; 0 if it exited
	Code   int            // the exit status; -1 if a signal ended the child or Err is set
	Err    error
}

// Killed reports whether a SIGKILL ended the child.
func (e Exit) Killed() bool { return e.Err == nil && e.Signal == syscall.SIGKILL }

// Exited reports whether the child exited with code.
func (e Exit) Exited(code int) bool { return e.Err == nil && e.Signal == 0 && e.Code == code }

func (e Exit) String() string {
	switch {
	case e.Err != nil:
		return "unknown end: " + e.Err.Error()
	case e.Signal != 0:
		return "killed by " + signalName(e.Signal)
	default:
		return fmt.Sprintf("exit status %d", e.Code)
	}
}

func signalName(s syscall.Signal) string {
	if s == syscall.SIGKILL {
		return "SIGKILL"
	}
	return fmt.Sprintf("signal %d (%v)", int(s), s)
}

// exitOf is the Exit a Cmd's Wait error describes.
func exitOf(err error) Exit {
	if err == nil {
		return Exit{}
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return Exit{Code: -1, Err: err}
	}
	if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return Exit{Signal: ws.Signal(), Code: -1}
	}
	return Exit{Code: ee.ExitCode()}
}

// Child is a child process started by Start. Its methods may be called
// from any goroutine.
type Child struct {
	role string
	proc *os.Process
	done chan struct{} // closed once the child is reaped and its output read
	exit Exit          // set before done is closed
	out  *output
}

// Start starts the test binary as a child in role with args, and fails t
// if it cannot. The child is SIGKILLed and reaped when t's test ends, if
// it still runs.
func Start(t testing.TB, role string, args []string, opts Options) *Child {
	t.Helper()
	c, err := start(role, args, opts)
	if err != nil {
		t.Fatalf("crashchild: start %s: %v", role, err)
	}
	t.Cleanup(func() {
		c.Kill()
		c.Wait()
	})
	return c
}

// start is Start without a test: a role may start children too.
func start(role string, args []string, opts Options) (*Child, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	if args == nil {
		args = []string{}
	}
	enc, err := json.Marshal(args)
	if err != nil {
		return nil, err
	}
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, EnvRole+"=") && !strings.HasPrefix(kv, EnvArgs+"=") {
			env = append(env, kv)
		}
	}
	c := &Child{role: role, done: make(chan struct{}), out: newOutput(opts.Output)}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(env, EnvRole+"="+role, EnvArgs+"="+string(enc))
	cmd.Stdout, cmd.Stderr = c.out, c.out // one pipe: the order of the two is kept
	cmd.WaitDelay = waitDelay
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	started := make(chan error, 1)
	go func() {
		// Pdeathsig is sent when the thread that started the child ends,
		// not the process: the thread stays locked to this goroutine
		// until the child is reaped.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		c.proc = cmd.Process
		started <- nil
		c.exit = exitOf(cmd.Wait())
		c.out.end()
		close(c.done)
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	return c, nil
}

// Pid is the child's process id.
func (c *Child) Pid() int { return c.proc.Pid }

// Kill sends the child SIGKILL; it does nothing once the child has
// ended. Wait for its end with Wait.
func (c *Child) Kill() {
	select {
	case <-c.done:
	default:
		c.proc.Signal(syscall.SIGKILL) // os.ErrProcessDone if it ended meanwhile
	}
}

// Done is closed once the child has ended and all its output is read;
// Wait then returns at once.
func (c *Child) Done() <-chan struct{} { return c.done }

// Wait waits for the child to end and returns how it ended.
func (c *Child) Wait() Exit {
	<-c.done
	return c.exit
}

// Output is the child's output so far (its last MaxOutput bytes).
func (c *Child) Output() []byte { return c.out.bytes() }

// WaitLine waits for a line of the child's output that begins with
// prefix and returns it, without its newline; a line written before the
// call counts (if still among the last MaxOutput bytes). It fails when
// the child's output ends without such a line, or when timeout (if
// positive) passes first.
func (c *Child) WaitLine(prefix string, timeout time.Duration) (string, error) {
	var expired <-chan time.Time
	if timeout > 0 {
		tm := time.NewTimer(timeout)
		defer tm.Stop()
		expired = tm.C
	}
	for {
		line, found, changed, ended := c.out.find(prefix)
		switch {
		case found:
			return line, nil
		case ended:
			return "", fmt.Errorf("crashchild: %s ended (%v) with no line beginning %q", c.role, c.Wait(), prefix)
		}
		select {
		case <-changed:
		case <-expired:
			return "", fmt.Errorf("crashchild: %s wrote no line beginning %q in %v", c.role, prefix, timeout)
		}
	}
}

// output is a child's output as the parent reads it.
type output struct {
	fwd io.Writer // Options.Output; called by the one goroutine exec copies with

	mu      sync.Mutex    // guards the fields below
	buf     []byte        // the last MaxOutput bytes
	changed chan struct{} // closed and replaced at every write and at the end
	ended   bool          // the child has ended and its output is all read
}

func newOutput(fwd io.Writer) *output {
	return &output{fwd: fwd, changed: make(chan struct{})}
}

func (o *output) Write(p []byte) (int, error) {
	if o.fwd != nil {
		o.fwd.Write(p)
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.buf = append(o.buf, p...)
	if len(o.buf) > MaxOutput {
		// Keep whole lines: a cut one could begin with a prefix WaitLine
		// looks for.
		keep := o.buf[len(o.buf)-MaxOutput:]
		if i := bytes.IndexByte(keep, '\n'); i >= 0 {
			keep = keep[i+1:]
		}
		o.buf = append(o.buf[:0], keep...)
	}
	o.wakeLocked()
	return len(p), nil
}

func (o *output) end() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.ended = true
	o.wakeLocked()
}

// wakeLocked wakes the goroutines waiting on a change.
// REQUIRES: o.mu held.
func (o *output) wakeLocked() {
	close(o.changed)
	o.changed = make(chan struct{})
}

func (o *output) bytes() []byte {
	o.mu.Lock()
	defer o.mu.Unlock()
	return bytes.Clone(o.buf)
}

// find looks for a whole line beginning with prefix (the last line too
// once the output has ended); changed is closed at the next change.
func (o *output) find(prefix string) (line string, found bool, changed <-chan struct{}, ended bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	rest := o.buf
	for len(rest) > 0 {
		l, after, whole := bytes.Cut(rest, []byte{'\n'})
		if !whole && !o.ended {
			break // a line still being written
		}
		if bytes.HasPrefix(l, []byte(prefix)) {
			return string(l), true, nil, o.ended
		}
		rest = after
	}
	return "", false, o.changed, o.ended
}

// Alive reports whether the process pid runs, as a test that killed a
// child (or its own parent died) checks: a zombie waiting for its reaper
// does not count. It reads /proc (Linux).
func Alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}
