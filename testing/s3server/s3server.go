// Package s3server starts real S3 servers for tests and tears them down.
//
// Two kinds of server, so that every suite can run against both:
//
//   - MinIO: where a Docker engine answers, the MinIO image through
//     testcontainers-go; otherwise the MinIO server binary, built from the
//     Go module proxy into the repository's .cache/bin by `make test` (or
//     named by $TIERLOG_MINIO).
//   - versitygw: an Apache-2.0 S3 server with its posix backend on a
//     temporary directory, installed into .cache/bin the same way (or
//     named by $TIERLOG_VERSITYGW).
//   - A MinIO cluster: ClusterNodes processes of the MinIO binary on
//     loopback, one erasure set over all their drives, as MinIO is
//     deployed (always the binary, never a container). NewCluster gives a
//     test a private one whose nodes it may SIGKILL and start again.
//
// Shared gives a test binary's preferred server (MinIO where it can be
// started, else versitygw); SharedKind a server of a given kind, and Kinds
// the kinds this machine can start. One server of each kind serves a whole
// test binary; each test gets a fresh bucket (BucketName, NewBucket). A
// test whose server cannot be had is skipped with a message saying how to
// get it. Tests never download anything; servers die with the test
// process (RunTests stops them; a killed test process takes its servers
// with it).
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
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/wait"

	"github.com/tierlog/tierlog/objstore"
	"github.com/tierlog/tierlog/objstore/s3"
)

// MinIOImage is the pinned image used where a Docker engine exists.
const MinIOImage = "minio/minio:RELEASE.2025-04-22T22-12-26Z"

// EnvBinary names an environment variable pointing at a versitygw binary;
// by default it is looked for in <repo>/.cache/bin, then on PATH.
const EnvBinary = "TIERLOG_VERSITYGW"

// EnvMinIO names an environment variable pointing at a MinIO server
// binary; by default it is looked for in <repo>/.cache/bin, then on PATH.
const EnvMinIO = "TIERLOG_MINIO"

// Kind names an S3 server implementation.
type Kind string

// The kinds of server.
const (
	// MinIO: a container where Docker answers, else the binary.
	MinIO Kind = "minio"
	// VersityGW: versitygw's posix backend.
	VersityGW Kind = "versitygw"
	// MinIOCluster: a distributed MinIO of ClusterNodes nodes (Cluster).
	MinIOCluster Kind = "minio-cluster"
)

// Server is a running S3 server.
type Server struct {
	Endpoint  string // http://127.0.0.1:port
	AccessKey string
	SecretKey string
	Region    string
	Kind      Kind

	pids    []int    // the server's processes, when not a container
	cluster *Cluster // the cluster, when Kind is MinIOCluster
	stop    func()
}

// Cluster returns the nodes of a MinIOCluster server, nil for any other.
func (s *Server) Cluster() *Cluster { return s.cluster }

// processes returns the server's process ids (none for a container).
func (s *Server) processes() []int {
	if s.cluster == nil {
		return s.pids
	}
	var out []int
	for _, n := range s.cluster.Nodes {
		if pid := n.pid(); pid != 0 {
			out = append(out, pid)
		}
	}
	return out
}

// Close stops the server.
func (s *Server) Close() {
	if s.stop != nil {
		s.stop()
	}
}

// NewBucket creates a fresh bucket named for the test (BucketName) and
// returns its name.
func (s *Server) NewBucket(t testing.TB) string {
	t.Helper()
	name := BucketName(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// A retryable refusal (a busy MinIO cluster's SlowDownWrite) is tried
	// again, as a Store would, until the minute is up.
	for wait := 100 * time.Millisecond; ; wait = min(2*wait, 5*time.Second) {
		err := s3.CreateBucket(ctx, s3.Config{Bucket: name, Endpoint: s.Endpoint, Region: s.Region, PathStyle: true,
			AccessKey: s.AccessKey, SecretKey: s.SecretKey})
		if err == nil {
			return name
		}
		if !errors.Is(err, objstore.ErrRetryable) || ctx.Err() != nil {
			t.Fatalf("s3server: create bucket %s on %s: %v", name, s.Kind, err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
	}
}

// shared holds the test binary's servers, one per kind.
var shared struct {
	mu      sync.Mutex
	servers map[Kind]*sharedServer
}

type sharedServer struct {
	once sync.Once
	srv  *Server
	err  error
}

// Shared returns the test binary's preferred server (the first of Kinds),
// starting it on first use. When none can be started (no Docker engine
// and neither binary) the test is skipped with a message saying how to
// get one: `make test` installs both. The server dies with the test
// process.
func Shared(t testing.TB) *Server {
	t.Helper()
	kinds := Kinds()
	if len(kinds) == 0 {
		t.Skipf("s3server: %v: no Docker engine, no MinIO and no versitygw binary (run `make test`, or `make s3servers` to install them into .cache/bin)", errNoServer)
	}
	return SharedKind(t, kinds[0])
}

// SharedKind returns the test binary's server of kind k, starting it on
// first use; a test whose kind cannot be started here is skipped with a
// message saying why and how to get it.
func SharedKind(t testing.TB, k Kind) *Server {
	t.Helper()
	shared.mu.Lock()
	if shared.servers == nil {
		shared.servers = map[Kind]*sharedServer{}
	}
	ss := shared.servers[k]
	if ss == nil {
		ss = &sharedServer{}
		shared.servers[k] = ss
	}
	shared.mu.Unlock()
	ss.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		ss.srv, ss.err = StartKind(ctx, k)
	})
	if errors.Is(ss.err, errNoServer) {
		t.Skipf("s3server: %v", ss.err)
	}
	if ss.err != nil {
		t.Fatalf("s3server: %v", ss.err)
	}
	return ss.srv
}

// Kinds returns the kinds of server this machine can start, MinIO first
// and the cluster last.
func Kinds() []Kind {
	var out []Kind
	for _, k := range []Kind{MinIO, VersityGW, MinIOCluster} {
		if available(k) == nil {
			out = append(out, k)
		}
	}
	return out
}

// available says why kind k cannot be started here (an error wrapping
// errNoServer), or nil.
func available(k Kind) error {
	switch k {
	case MinIO:
		if hasDocker() {
			return nil
		}
		_, err := findBinary("minio", EnvMinIO, "make minio")
		return err
	case VersityGW:
		_, err := findBinary("versitygw", EnvBinary, "make versitygw")
		return err
	case MinIOCluster:
		_, err := findBinary("minio", EnvMinIO, "make minio")
		return err
	}
	return fmt.Errorf("%w: unknown kind %q (want %s, %s or %s)", errNoServer, k, MinIO, VersityGW, MinIOCluster)
}

var errNoServer = errors.New("no S3 server available")

// Start starts the preferred server (the first of Kinds).
func Start(ctx context.Context) (*Server, error) {
	kinds := Kinds()
	if len(kinds) == 0 {
		return nil, fmt.Errorf("%w: no Docker engine, no MinIO and no versitygw binary", errNoServer)
	}
	return StartKind(ctx, kinds[0])
}

// StartKind starts a server of kind k: for MinIO a container when a
// Docker engine answers, else the binary; for MinIOCluster a Cluster
// (Server.Cluster gives its nodes). The caller closes it.
func StartKind(ctx context.Context, k Kind) (*Server, error) {
	if err := available(k); err != nil {
		return nil, err
	}
	switch k {
	case MinIO:
		if hasDocker() {
			return startMinIOContainer(ctx)
		}
		bin, err := findBinary("minio", EnvMinIO, "make minio")
		if err != nil {
			return nil, err
		}
		return startMinIOBinary(ctx, bin)
	case MinIOCluster:
		c, err := StartCluster(ctx)
		if err != nil {
			return nil, err
		}
		return c.Server, nil
	default:
		bin, err := findBinary("versitygw", EnvBinary, "make versitygw")
		if err != nil {
			return nil, err
		}
		return startVersitygw(ctx, bin)
	}
}

var (
	dockerOnce sync.Once
	dockerOK   bool
)

// hasDocker reports, once per test binary, whether a Docker engine answers.
func hasDocker() bool {
	dockerOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		dockerOK = dockerAvailable(ctx)
	})
	return dockerOK
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

func startMinIOContainer(ctx context.Context) (*Server, error) {
	access, secret := "tierlog"+randomHex(4), randomHex(16)
	c, err := testcontainers.Run(ctx, MinIOImage,
		testcontainers.WithExposedPorts("9000/tcp"),
		testcontainers.WithCmd("server", "/data"),
		testcontainers.WithEnv(map[string]string{"MINIO_ROOT_USER": access, "MINIO_ROOT_PASSWORD": secret}),
		testcontainers.WithWaitStrategy(wait.ForHTTP("/minio/health/live").WithPort("9000/tcp").
			WithResponseHeadersMatcher(minioReady).WithStartupTimeout(90*time.Second)),
	)
	if err != nil {
		return nil, fmt.Errorf("s3server: start %s: %w", MinIOImage, err)
	}
	ep, err := c.PortEndpoint(ctx, "9000/tcp", "http")
	if err != nil {
		testcontainers.TerminateContainer(c)
		return nil, fmt.Errorf("s3server: %w", err)
	}
	return &Server{Endpoint: ep, AccessKey: access, SecretKey: secret, Region: "us-east-1", Kind: MinIO,
		stop: func() { testcontainers.TerminateContainer(c) }}, nil
}

// findBinary finds a server binary: $env, else <repo>/.cache/bin/name,
// else name on PATH.
func findBinary(name, env, target string) (string, error) {
	if p := os.Getenv(env); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("%w: %s=%s: %w", errNoServer, env, p, err)
		}
		return p, nil
	}
	if dir, err := os.Getwd(); err == nil {
		for {
			if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
				p := filepath.Join(dir, ".cache", "bin", name)
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
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("%w: no %s binary in .cache/bin, $%s or PATH (run `make test`, or `%s` to install it into .cache/bin)", errNoServer, name, env, target)
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
	return startProcess(ctx, VersityGW, bin, "/health", nil, func(dir, access, secret string, port, _ int) ([]string, []string) {
		return []string{"--port", fmt.Sprintf("127.0.0.1:%d", port), "--access", access, "--secret", secret,
			"--region", "us-east-1", "--health", "/health", "--quiet", "posix", dir}, nil
	})
}

// minioReady: MinIO's liveness check answers 200 before its object layer
// is up (S3 requests then get 503 XMinioServerNotInitialized) and says so
// in X-Minio-Server-Status: offline. Ready is 200 without that header.
func minioReady(h http.Header) bool { return h.Get("X-Minio-Server-Status") == "" }

func startMinIOBinary(ctx context.Context, bin string) (*Server, error) {
	return startProcess(ctx, MinIO, bin, "/minio/health/live", minioReady, func(dir, access, secret string, port, console int) ([]string, []string) {
		return []string{"server", dir, "--address", fmt.Sprintf("127.0.0.1:%d", port),
				"--console-address", fmt.Sprintf("127.0.0.1:%d", console), "--quiet"},
			[]string{"MINIO_ROOT_USER=" + access, "MINIO_ROOT_PASSWORD=" + secret, "MINIO_REGION=us-east-1",
				"MINIO_UPDATE=off", "MINIO_BROWSER=off"}
	})
}

// startProcess runs a server binary on a temporary directory and free
// ports until health answers 200 while the process is alive.
func startProcess(ctx context.Context, kind Kind, bin, health string, ready func(http.Header) bool,
	args func(dir, access, secret string, port, console int) (argv, env []string)) (*Server, error) {
	dir, err := os.MkdirTemp("", "tierlog-"+string(kind)+"-")
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
		console, err := freePort()
		if err != nil {
			return nil, err
		}
		argv, env := args(dir, access, secret, port, console)
		p, err := spawn(bin, argv, env)
		if err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		endpoint := fmt.Sprintf("http://127.0.0.1:%d", port)
		if err := waitHealthy(ctx, endpoint+health, ready, p.exited); err != nil {
			p.stop()
			lastErr = fmt.Errorf("s3server: %s on port %d: %w\n%s", kind, port, err, strings.TrimSpace(p.out.String()))
			continue
		}
		var stopOnce sync.Once
		return &Server{Endpoint: endpoint, AccessKey: access, SecretKey: secret, Region: "us-east-1", Kind: kind, pids: []int{p.pid},
			stop: func() {
				stopOnce.Do(func() {
					p.stop()
					os.RemoveAll(dir)
				})
			}}, nil
	}
	os.RemoveAll(dir)
	return nil, lastErr
}

// process is a server process started by spawn.
type process struct {
	pid    int
	out    *syncBuffer   // its stdout and stderr
	exited chan struct{} // closed once it has exited and been reaped
	err    error         // how it exited, set before exited is closed
	kill   chan struct{}
	once   sync.Once
}

// spawn starts bin. The process is started from a goroutine locked to its
// OS thread for the server's life, so Pdeathsig (tied to the starting
// thread, not the process) kills it only when the test process dies, and
// then surely.
func spawn(bin string, argv, env []string) (*process, error) {
	p := &process{out: new(syncBuffer), exited: make(chan struct{}), kill: make(chan struct{})}
	cmd := exec.Command(bin, argv...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = p.out, p.out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // dies with the test process
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread lives as long as the server
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		p.pid = cmd.Process.Pid
		started <- nil
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case p.err = <-done:
		case <-p.kill:
			cmd.Process.Kill() // SIGKILL
			p.err = <-done
		}
		close(p.exited)
	}()
	if err := <-started; err != nil {
		return nil, fmt.Errorf("s3server: start %s: %w", bin, err)
	}
	return p, nil
}

// stop SIGKILLs the process, if it still runs, and returns once it has
// been reaped; it may be called more than once.
func (p *process) stop() {
	p.once.Do(func() { close(p.kill) })
	<-p.exited
}

// syncBuffer is a bytes.Buffer safe for the process's writes and our read.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// waitHealthy polls url until it answers 200 (and ready, when not nil,
// accepts the headers) while the process is alive (a stale server on the
// same port could answer for a dead one).
func waitHealthy(ctx context.Context, url string, ready func(http.Header) bool, exited <-chan struct{}) error {
	client := &http.Client{Timeout: time.Second}
	for {
		select {
		case <-exited:
			return errors.New("exited before it was ready")
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		resp, err := client.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK && (ready == nil || ready(resp.Header)) {
				select {
				case <-exited:
					return errors.New("exited right after answering")
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

// RunTests runs a test binary's tests and then stops the shared servers
// (those that were started), removing their data. Use it from TestMain:
//
//	func TestMain(m *testing.M) { os.Exit(s3server.RunTests(m)) }
func RunTests(m *testing.M) int {
	code := m.Run()
	shared.mu.Lock()
	defer shared.mu.Unlock()
	for _, ss := range shared.servers {
		if ss.srv != nil {
			ss.srv.Close()
		}
	}
	return code
}
