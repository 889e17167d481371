package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tierlog/tierlog/local"
)

// buildBroker builds this command into a temporary directory.
func buildBroker(t *testing.T) string {
	t.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go command to build the broker with: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "broker")
	cmd := exec.Command(gobin, "build", "-o", bin, ".")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// brokerProc is the broker binary running as a child process.
type brokerProc struct {
	cmd    *exec.Cmd
	addr   string
	stderr *syncBuffer
	done   chan struct{} // closed when the process has exited
	err    error         // cmd.Wait's, once done
}

// syncBuffer is a bytes.Buffer the child's stderr copier and the test
// share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startBrokerProc starts bin on dir, listening on a port of its choice,
// with extra flags after the test's own, and waits until it says where.
// The process is killed with the test if it still runs.
func startBrokerProc(t *testing.T, bin, dir string, extra ...string) *brokerProc {
	t.Helper()
	p := &brokerProc{stderr: &syncBuffer{}, done: make(chan struct{})}
	p.cmd = exec.Command(bin, append([]string{"--dir", dir, "--listen", "127.0.0.1:0", "--config", "retention.ms=-1"}, extra...)...)
	p.cmd.Stderr = p.stderr
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if a, ok := strings.CutPrefix(sc.Text(), "listening on "); ok {
				lines <- a
			}
		}
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		<-p.done
		if t.Failed() {
			t.Logf("broker stderr:\n%s", p.stderr.String())
		}
	})
	select {
	case p.addr = <-lines:
		return p
	case <-p.done:
		t.Fatalf("the broker exited before it listened: %v\n%s", p.err, p.stderr.String())
	case <-time.After(time.Minute):
		t.Fatalf("the broker did not say its address within a minute\n%s", p.stderr.String())
	}
	return nil
}

// TestSIGTERM runs the broker binary, produces to it with kgo (the last
// records still in flight), and sends SIGTERM: the broker exits with
// status 0 within a bound, leaves the log directory's clean-shutdown
// marker (so the next start recovers nothing), and, started again, serves
// every record it acknowledged, each once.
func TestSIGTERM(t *testing.T) {
	bin, dir := buildBroker(t), t.TempDir()
	p := startBrokerProc(t, bin, dir)
	const topic = "sigterm"
	prod, err := kgo.NewClient(kgo.SeedBrokers(p.addr), kgo.AllowAutoTopicCreation(), kgo.DefaultProduceTopic(topic),
		kgo.RequiredAcks(kgo.AllISRAcks()), kgo.RecordDeliveryTimeout(5*time.Second), kgo.ProducerLinger(0))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	var (
		mu    sync.Mutex
		acked = map[string]bool{}
		wg    sync.WaitGroup
	)
	produce := func(i int) {
		wg.Add(1)
		prod.Produce(context.Background(), &kgo.Record{Value: fmt.Appendf(nil, "v-%d", i)}, func(r *kgo.Record, err error) {
			defer wg.Done()
			if err == nil {
				mu.Lock()
				acked[string(r.Value)] = true
				mu.Unlock()
			}
		})
	}
	// A first part, all acknowledged before the signal.
	const first = 5000
	for i := range first {
		produce(i)
	}
	wg.Wait()
	if len(acked) != first {
		t.Fatalf("%d of %d records acknowledged before any signal", len(acked), first)
	}
	// More while the signal arrives.
	stop, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		for i := first; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			produce(i)
			if i%100 == 0 {
				time.Sleep(time.Millisecond)
			}
		}
	}()
	time.Sleep(50 * time.Millisecond)
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		t.Fatal("the broker did not exit within 30s of SIGTERM")
	}
	close(stop)
	<-stopped
	prod.Close() // fails what is still buffered: not acknowledged
	wg.Wait()
	if p.err != nil { // an *exec.ExitError: a status other than 0, or killed by the signal
		t.Fatalf("after SIGTERM the broker exited with %v, want status 0", p.err)
	}
	if _, err := os.Stat(filepath.Join(dir, "logs", local.CleanShutdownFile)); err != nil {
		t.Fatalf("after SIGTERM the log directory has no clean-shutdown marker: %v", err)
	}

	p2 := startBrokerProc(t, bin, dir)
	if _, err := os.Stat(filepath.Join(dir, "logs", local.CleanShutdownFile)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the restarted broker left the clean-shutdown marker in place (stat: %v)", err)
	}
	cons, err := kgo.NewClient(kgo.SeedBrokers(p2.addr), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	seen := map[string]int{}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var last int64 = -1
	for missing := len(acked); missing > 0; {
		fs := cons.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("after the restart %d of %d acknowledged records are missing", missing, len(acked))
		}
		fs.EachError(func(topic string, p int32, err error) { t.Fatalf("fetch %s-%d: %v", topic, p, err) })
		for _, r := range fs.Records() {
			if r.Offset != last+1 {
				t.Fatalf("offset %d follows %d", r.Offset, last)
			}
			last = r.Offset
			seen[string(r.Value)]++
			if seen[string(r.Value)] > 1 {
				t.Fatalf("%q is in the log twice (offset %d)", r.Value, r.Offset)
			}
			if acked[string(r.Value)] {
				missing--
			}
		}
	}
	t.Logf("%d records acknowledged (%d after the first %d, while SIGTERM arrived), all served after the restart; the log ends at %d",
		len(acked), len(acked)-first, first, last+1)
	if !strings.Contains(p.stderr.String(), "broker stopped") {
		t.Errorf("the broker's log does not say it stopped:\n%s", p.stderr.String())
	}
}

// TestSIGTERMAtOnce sends SIGTERM the moment the broker says where it
// listens: the signal is the broker's to handle from then on (exit
// status 0, the clean-shutdown marker), not the Go runtime's default
// (killed by the signal).
func TestSIGTERMAtOnce(t *testing.T) {
	bin := buildBroker(t)
	for i := range 10 {
		dir := t.TempDir()
		p := startBrokerProc(t, bin, dir)
		if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		select {
		case <-p.done:
		case <-time.After(30 * time.Second):
			t.Fatalf("start %d: the broker did not exit within 30s of SIGTERM", i)
		}
		if p.err != nil {
			t.Fatalf("start %d: SIGTERM at once: the broker exited with %v, want status 0", i, p.err)
		}
		if _, err := os.Stat(filepath.Join(dir, "logs", local.CleanShutdownFile)); err != nil {
			t.Fatalf("start %d: SIGTERM at once: no clean-shutdown marker: %v", i, err)
		}
	}
}
