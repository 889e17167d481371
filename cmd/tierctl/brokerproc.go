package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/tierlog/tierlog/local"
)

// The reference broker (examples/broker) as its own process, for demo's
// step 10. tierctl links nothing of examples/: it starts the binary
// --broker names and knows it only by its command line, the address it
// prints on stdout ("listening on ADDR"), Kafka's protocol and the files
// it writes.
//
// Every wait is bounded: brokerStartTimeout for the address, and Stop
// sends SIGTERM, waits brokerStopTimeout for a clean exit, then SIGKILLs.
// On Linux the broker also gets SIGTERM when tierctl dies without
// stopping it (brokerSysProcAttr).
const (
	brokerStartTimeout = time.Minute
	brokerStopTimeout  = 10 * time.Second
	// brokerOutputBytes is how much of the broker's output (the tail of
	// stdout and stderr together) an error carries.
	brokerOutputBytes = 16 << 10
)

// brokerProcess is a started broker.
type brokerProcess struct {
	path string
	Addr string // what it printed: "listening on ADDR"
	cmd  *exec.Cmd
	out  *tailBuffer

	// exited is closed once cmd.Wait has returned; cmd.ProcessState is
	// then set. ctx is canceled then, so that whatever waits on the
	// broker ends when it exits, not at its own deadline.
	exited chan struct{}
	ctx    context.Context

	stopOnce sync.Once
	stopErr  error
}

// lookBroker resolves --broker: a path to an executable file, or a name
// found in $PATH. A usage error (exit 2) names the flag's value and says
// how to build the broker.
func lookBroker(name string) (string, error) {
	p, err := exec.LookPath(name)
	if err == nil {
		return p, nil
	}
	why := err.Error()
	switch {
	case errors.Is(err, fs.ErrNotExist):
		why = "no such file"
	case errors.Is(err, exec.ErrNotFound):
		why = "not found in $PATH"
	case errors.Is(err, exec.ErrDot):
		why = "found in the current directory through $PATH; give it as ./" + name
	case errors.Is(err, fs.ErrPermission):
		why = "not an executable file"
	case errors.Is(err, syscall.EISDIR):
		why = "a directory, not the broker's binary"
	}
	return "", usagef("--broker %s: %s; build the reference broker with `go build -o PATH ./examples/broker` (make demo does)", name, why)
}

// startBroker starts the broker at path with args and waits, at most
// brokerStartTimeout, for the address it prints. On failure the broker
// is stopped and the error names path and carries its output.
func startBroker(ctx context.Context, path string, args ...string) (*brokerProcess, error) {
	p := &brokerProcess{path: path, out: &tailBuffer{max: brokerOutputBytes}, exited: make(chan struct{})}
	addr := make(chan string, 1)
	p.cmd = exec.Command(path, args...)
	p.cmd.Stdout = &addrWriter{tail: p.out, addr: addr}
	p.cmd.Stderr = p.out
	p.cmd.SysProcAttr = brokerSysProcAttr()
	// Once the broker has exited, Wait waits no longer than this for its
	// output pipes (a child of the broker could hold them open).
	p.cmd.WaitDelay = time.Second
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("demo: start the broker %s: %w", path, err)
	}
	var exit context.CancelCauseFunc
	p.ctx, exit = context.WithCancelCause(ctx)
	go func() {
		p.cmd.Wait()
		exit(fmt.Errorf("demo: the broker %s exited (%v)", path, p.cmd.ProcessState))
		close(p.exited)
	}()
	wait, cancel := context.WithTimeout(ctx, brokerStartTimeout)
	defer cancel()
	var err error
	select {
	case p.Addr = <-addr:
		return p, nil
	case <-p.exited:
		err = fmt.Errorf("demo: the broker %s exited (%v) before it printed its address", path, p.cmd.ProcessState)
	case <-wait.Done():
		if ctx.Err() != nil {
			err = fmt.Errorf("demo: the broker %s: %w", path, ctx.Err())
		} else {
			err = fmt.Errorf("demo: the broker %s printed no %q line within %v", path, "listening on ADDR", brokerStartTimeout)
		}
	}
	p.Stop()
	return nil, p.withOutput(err)
}

// Context is ctx of startBroker, canceled also once the broker exits.
func (p *brokerProcess) Context() context.Context { return p.ctx }

// Stop sends the broker SIGTERM and waits for it to exit, killing it if
// it has not within brokerStopTimeout. It returns nil when the broker shut
// down cleanly (exit 0), else an error naming the binary and carrying its
// output. Later calls return what the first did.
func (p *brokerProcess) Stop() error {
	p.stopOnce.Do(func() {
		select {
		case <-p.exited:
			// It exited on its own: whatever it did, it was not asked to.
			p.stopErr = p.withOutput(fmt.Errorf("demo: the broker %s exited (%v) while the demo used it", p.path, p.cmd.ProcessState))
			return
		default:
		}
		// An error here means it has just exited; Wait says how.
		p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.exited:
		case <-time.After(brokerStopTimeout):
			p.cmd.Process.Kill()
			<-p.exited
			p.stopErr = p.withOutput(fmt.Errorf("demo: the broker %s did not exit within %v of SIGTERM; killed it", p.path, brokerStopTimeout))
			return
		}
		if !p.cmd.ProcessState.Success() {
			p.stopErr = p.withOutput(fmt.Errorf("demo: the broker %s did not shut down cleanly on SIGTERM (%v)", p.path, p.cmd.ProcessState))
		}
	})
	return p.stopErr
}

// withOutput adds the broker's output to err.
func (p *brokerProcess) withOutput(err error) error {
	out := strings.TrimSpace(p.out.String())
	if out == "" {
		return fmt.Errorf("%w; the broker printed nothing", err)
	}
	return fmt.Errorf("%w; the broker's output:\n%s", err, out)
}

// addrWriter is the broker's stdout: kept in tail, and the address of its
// first "listening on ADDR" line sent on addr (buffered, one slot).
// exec.Cmd writes to it from one goroutine.
type addrWriter struct {
	tail *tailBuffer
	addr chan<- string
	line []byte
	sent bool
}

// maxLine caps the line addrWriter keeps while it looks for the address.
const maxLine = 4096

func (w *addrWriter) Write(b []byte) (int, error) {
	w.tail.Write(b)
	for _, c := range b {
		if w.sent {
			break
		}
		if c != '\n' {
			if len(w.line) < maxLine {
				w.line = append(w.line, c)
			}
			continue
		}
		if a, ok := strings.CutPrefix(strings.TrimSpace(string(w.line)), "listening on "); ok && a != "" {
			w.addr <- a
			w.sent = true
		}
		w.line = w.line[:0]
	}
	return len(b), nil
}

// tailBuffer keeps the last max bytes written to it. Safe for concurrent
// use: the broker's stdout and stderr are copied by two goroutines.
type tailBuffer struct {
	max int

	mu  sync.Mutex // guards b and cut
	b   []byte
	cut bool
}

func (t *tailBuffer) Write(b []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, b...)
	if len(t.b) > t.max {
		t.b = append(t.b[:0], t.b[len(t.b)-t.max:]...)
		t.cut = true
	}
	return len(b), nil
}

// String is what the buffer holds, marked when earlier output was cut.
func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.cut {
		return fmt.Sprintf("[… only its last %d bytes:]\n%s", t.max, t.b)
	}
	return string(t.b)
}

// brokerDirSegments lists the base offsets of the segments in a partition
// directory the broker owns, from their file names alone (read-only: the
// demo opens none of its files).
func brokerDirSegments(dir string) ([]int64, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var bases []int64
	for _, e := range ents {
		if base, suffix, err := local.ParseFileName(e.Name()); err == nil && suffix == local.LogSuffix && !e.IsDir() {
			bases = append(bases, base)
		}
	}
	return bases, nil
}
