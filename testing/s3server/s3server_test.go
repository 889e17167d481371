package s3server

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tierlog/tierlog/objstore"
	"github.com/tierlog/tierlog/objstore/s3"
	"github.com/tierlog/tierlog/testing/crashchild"
)

func TestMain(m *testing.M) {
	if code, ok := crashchild.Dispatch(map[string]crashchild.Role{"server": serverChild}); ok {
		os.Exit(code)
	}
	os.Exit(RunTests(m))
}

// serverChild starts a server of kind args[0], says its pids, and waits
// to be killed.
func serverChild(args []string) int {
	srv, err := StartKind(context.Background(), Kind(args[0]))
	if err != nil {
		fmt.Println("ERR", err)
		return 1
	}
	fmt.Println("PID", strings.Trim(fmt.Sprint(srv.processes()), "[]"))
	time.Sleep(time.Hour)
	return 0
}

func TestKinds(t *testing.T) {
	kinds := Kinds()
	t.Logf("kinds available: %v", kinds)
	if len(kinds) == 0 {
		t.Skip("no S3 server can be started here (run `make s3servers`)")
	}
	if got := Shared(t); got.Kind != kinds[0] {
		t.Errorf("Shared is %s, want the first kind %s", got.Kind, kinds[0])
	}
	for _, k := range []Kind{MinIO, VersityGW} {
		t.Run(string(k), func(t *testing.T) {
			srv := SharedKind(t, k)
			if srv.Kind != k {
				t.Fatalf("SharedKind(%s) gave a %s", k, srv.Kind)
			}
			if again := SharedKind(t, k); again != srv {
				t.Fatalf("a second SharedKind(%s) started another server", k)
			}
			bucket := srv.NewBucket(t)
			c := s3.Config{Bucket: bucket, Endpoint: srv.Endpoint, Region: srv.Region, PathStyle: true, AccessKey: srv.AccessKey, SecretKey: srv.SecretKey}
			if _, err := s3.Open(context.Background(), c); err != nil {
				t.Fatalf("open the new bucket: %v", err)
			}
			c.Bucket = "no-such-bucket-here"
			if _, err := s3.Open(context.Background(), c); !errors.Is(err, objstore.ErrBucketNotFound) {
				t.Fatalf("a missing bucket: %v", err)
			}
		})
	}
}

func TestUnknownKindSkips(t *testing.T) {
	if err := available("ceph"); !errors.Is(err, errNoServer) {
		t.Fatalf("an unknown kind: %v", err)
	}
}

// TestServerDiesWithTheTestProcess kills a test process that started a
// server (SIGKILL: no cleanup runs) and checks the server goes with it.
func TestServerDiesWithTheTestProcess(t *testing.T) {
	if hasDocker() {
		t.Skip("containers are reaped by testcontainers' reaper, not by this process")
	}
	for _, k := range Kinds() {
		t.Run(string(k), func(t *testing.T) {
			c := crashchild.Start(t, "server", []string{string(k)}, crashchild.Options{})
			line, err := c.WaitLine("PID ", 0)
			if err != nil {
				t.Fatalf("child: %v\n%s", err, c.Output())
			}
			var pids []int // a cluster has one per node
			for _, f := range strings.Fields(strings.TrimPrefix(line, "PID ")) {
				pid, err := strconv.Atoi(f)
				if err != nil {
					t.Fatalf("child: %q: %v", line, err)
				}
				pids = append(pids, pid)
			}
			if len(pids) == 0 {
				t.Fatalf("child: %q: no process ids", line)
			}
			for _, pid := range pids {
				if !crashchild.Alive(pid) {
					t.Fatalf("server %d is not running while its test process is", pid)
				}
			}
			c.Kill()
			c.Wait()
			deadline := time.Now().Add(10 * time.Second)
			for _, pid := range pids {
				for crashchild.Alive(pid) {
					if time.Now().After(deadline) {
						syscall.Kill(pid, syscall.SIGKILL)
						t.Fatalf("%s server %d outlived its killed test process", k, pid)
					}
					time.Sleep(20 * time.Millisecond)
				}
			}
		})
	}
}

// TestHealthyNeedsALiveProcess: a health answer from a process that has
// exited (a stale server on the port) is not readiness.
func TestHealthyNeedsALiveProcess(t *testing.T) {
	exited := make(chan struct{})
	close(exited)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := waitHealthy(ctx, "http://127.0.0.1:1/health", nil, exited); err == nil || !strings.Contains(err.Error(), "exited") {
		t.Fatalf("waitHealthy with a dead process: %v", err)
	}
}

// TestServerThatExitsAtOnce: a server binary that exits before it is
// healthy is an error naming the exit, after the tries, not a hang.
func TestServerThatExitsAtOnce(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := startProcess(ctx, VersityGW, "/bin/false", "/health", nil, func(dir, access, secret string, port, console int) ([]string, []string) {
		return nil, nil
	})
	if err == nil || !strings.Contains(err.Error(), "exited") {
		t.Fatalf("a server that exits at once: %v", err)
	}
}
