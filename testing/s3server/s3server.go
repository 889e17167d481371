// Package s3server starts a real S3 server for tests and tears it down.
//
// Where a Docker engine answers, it runs the MinIO image through
// testcontainers-go. Otherwise (this project's machines and CI have no
// engine) it starts versitygw, an Apache-2.0 S3 server, with its posix
// backend on a temporary directory. `make test` installs versitygw into the
// repository's .cache/bin; tests never download anything.
//
// One server serves a whole test binary (Shared); each test gets a fresh
// bucket (NewBucket).
package s3server

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/wait"
)

// MinIOImage is the pinned image used where a Docker engine exists.
const MinIOImage = "minio/minio:RELEASE.2025-04-22T22-12-26Z"

// EnvBinary names an environment variable pointing at a versitygw binary;
// by default it is looked for in <repo>/.cache/bin, then on PATH.
const EnvBinary = "TIERLOG_VERSITYGW"

// Server is a running S3 server.
type Server struct {
	Endpoint  string // http://127.0.0.1:port
	AccessKey string
	SecretKey string
	Region    string
	Kind      string // "versitygw" or "minio"

	stop func()
}

// Close stops the server.
func (s *Server) Close() {
	if s.stop != nil {
		s.stop()
	}
}

var (
	sharedOnce sync.Once
	shared     *Server
	sharedErr  error
)

// Shared returns the test binary's server, starting it on first use. When
// no server can be started (no Docker engine and no versitygw binary) the
// test is skipped with a message saying how to get one: `make test`
// installs it. The server dies with the test process.
func Shared(t testing.TB) *Server {
	t.Helper()
	sharedOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		shared, sharedErr = Start(ctx)
	})
	if errors.Is(sharedErr, errNoServer) {
		t.Skipf("s3server: %v", sharedErr)
	}
	if sharedErr != nil {
		t.Fatalf("s3server: %v", sharedErr)
	}
	return shared
}

var errNoServer = errors.New("no S3 server available")

// Start starts a server: MinIO in a container when a Docker engine answers,
// else versitygw.
func Start(ctx context.Context) (*Server, error) {
	if dockerAvailable(ctx) {
		return startMinIO(ctx)
	}
	bin, err := findVersitygw()
	if err != nil {
		return nil, err
	}
	return startVersitygw(ctx, bin)
}

// dockerAvailable asks testcontainers for a provider and its health; with
// no engine this fails in microseconds.
func dockerAvailable(ctx context.Context) bool {
	p, err := testcontainers.ProviderDefault.GetProvider()
	if err != nil {
		return false
	}
	hctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	return p.Health(hctx) == nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

func startMinIO(ctx context.Context) (*Server, error) {
	access, secret := "tierlog"+randomHex(4), randomHex(16)
	c, err := testcontainers.Run(ctx, MinIOImage,
		testcontainers.WithExposedPorts("9000/tcp"),
		testcontainers.WithCmd("server", "/data"),
		testcontainers.WithEnv(map[string]string{"MINIO_ROOT_USER": access, "MINIO_ROOT_PASSWORD": secret}),
		testcontainers.WithWaitStrategy(wait.ForHTTP("/minio/health/live").WithPort("9000/tcp").WithStartupTimeout(90*time.Second)),
	)
	if err != nil {
		return nil, fmt.Errorf("s3server: start %s: %w", MinIOImage, err)
	}
	ep, err := c.PortEndpoint(ctx, "9000/tcp", "http")
	if err != nil {
		testcontainers.TerminateContainer(c)
		return nil, fmt.Errorf("s3server: %w", err)
	}
	return &Server{Endpoint: ep, AccessKey: access, SecretKey: secret, Region: "us-east-1", Kind: "minio",
		stop: func() { testcontainers.TerminateContainer(c) }}, nil
}

func findVersitygw() (string, error) {
	if p := os.Getenv(EnvBinary); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("%w: %s=%s: %v", errNoServer, EnvBinary, p, err)
		}
		return p, nil
	}
	if dir, err := os.Getwd(); err == nil {
		for {
			if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
				p := filepath.Join(dir, ".cache", "bin", "versitygw")
				if _, err := os.Stat(p); err == nil {
					return p, nil
				}
				break
			}
			parent := filepath.Dir(dir)
			if parent == dir {
				break
			}
			dir = parent
		}
	}
	if p, err := exec.LookPath("versitygw"); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("%w: no Docker engine and no versitygw binary (run `make test`, or `make versitygw` to install it into .cache/bin)", errNoServer)
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func startVersitygw(ctx context.Context, bin string) (*Server, error) {
	dir, err := os.MkdirTemp("", "tierlog-s3-")
	if err != nil {
		return nil, err
	}
	access, secret := "tierlog"+randomHex(4), randomHex(16)
	var lastErr error
	for try := 0; try < 3; try++ { // a free port can be taken before we bind it
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		var out bytes.Buffer
		cmd := exec.Command(bin, "--port", fmt.Sprintf("127.0.0.1:%d", port), "--access", access, "--secret", secret,
			"--region", "us-east-1", "--health", "/health", "--quiet", "posix", dir)
		cmd.Stdout, cmd.Stderr = &out, &out
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // dies with the test process
		if err := cmd.Start(); err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("s3server: start %s: %w", bin, err)
		}
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		endpoint := fmt.Sprintf("http://127.0.0.1:%d", port)
		if err := waitHealthy(ctx, endpoint+"/health", exited); err != nil {
			cmd.Process.Kill()
			lastErr = fmt.Errorf("s3server: versitygw on port %d: %w\n%s", port, err, strings.TrimSpace(out.String()))
			continue
		}
		return &Server{Endpoint: endpoint, AccessKey: access, SecretKey: secret, Region: "us-east-1", Kind: "versitygw",
			stop: func() {
				cmd.Process.Kill()
				<-exited
				os.RemoveAll(dir)
			}}, nil
	}
	os.RemoveAll(dir)
	return nil, lastErr
}

// waitHealthy polls url until it answers 200 while the process is alive (a
// stale server on the same port could answer for a dead one).
func waitHealthy(ctx context.Context, url string, exited <-chan error) error {
	client := &http.Client{Timeout: time.Second}
	for {
		select {
		case err := <-exited:
			return fmt.Errorf("exited before it was ready: %v", err)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		resp, err := client.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				select {
				case err := <-exited:
					return fmt.Errorf("exited right after answering: %v", err)
				default:
					return nil
				}
			}
		}
	}
}

// BucketName returns a fresh, valid bucket name for a test.
func BucketName(t testing.TB) string {
	name := strings.ToLower(t.Name())
	var b strings.Builder
	for _, r := range name {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
		} else {
			b.WriteByte('-')
		}
	}
	n := strings.Trim(b.String(), "-")
	if len(n) > 40 {
		n = n[len(n)-40:]
	}
	return strings.Trim("t-"+n+"-"+randomHex(6), "-")
}

// RunTests runs a test binary's tests and then stops the shared server (if
// one was started), removing its data. Use it from TestMain:
//
//	func TestMain(m *testing.M) { os.Exit(s3server.RunTests(m)) }
func RunTests(m *testing.M) int {
	code := m.Run()
	if shared != nil {
		shared.Close()
	}
	return code
}
