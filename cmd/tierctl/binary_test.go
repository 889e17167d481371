package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/tierlog/tierlog/objstore/s3"
	"github.com/tierlog/tierlog/testing/s3server"
)

// built is a binary go build makes once per test binary, in a temporary
// directory TestMain removes.
type built struct {
	name, pkg string // the binary's name, the package go build builds
	once      sync.Once
	dir, path string
	err       error
}

// The binaries the tests build: tierctl, and the reference broker demo's
// step 10 runs as its own process.
var (
	tierctlBin = &built{name: "tierctl", pkg: "."}
	brokerBin  = &built{name: "broker", pkg: "github.com/tierlog/tierlog/examples/broker"}
)

// get builds the binary the first time (a -short run skips the test
// instead) and returns its path.
func (b *built) get(t testing.TB) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds " + b.name)
	}
	b.once.Do(func() {
		if b.dir, b.err = os.MkdirTemp("", "tierctl-test-"+b.name+"-"); b.err != nil {
			return
		}
		b.path = filepath.Join(b.dir, b.name)
		if out, err := exec.Command("go", "build", "-o", b.path, b.pkg).CombinedOutput(); err != nil {
			b.err = fmt.Errorf("go build %s: %v\n%s", b.pkg, err, out)
		}
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}

func TestMain(m *testing.M) {
	code := s3server.RunTests(m)
	for _, b := range []*built{tierctlBin, brokerBin} {
		if b.dir != "" {
			os.RemoveAll(b.dir)
		}
	}
	os.Exit(code)
}

// tierctlBinary builds tierctl once per test binary.
func tierctlBinary(t testing.TB) string { return tierctlBin.get(t) }

// invocation is one run of the built binary.
type invocation struct {
	args           []string
	code           int
	stdout, stderr string
}

// binRun runs the built tierctl with env added to a clean environment
// (no TIERCTL_* or AWS_* of the caller's) and returns what it did.
func binRun(t *testing.T, env []string, args ...string) invocation {
	t.Helper()
	cmd := exec.Command(tierctlBinary(t), args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "TIERCTL_") && !strings.HasPrefix(kv, "AWS_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, env...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	inv := invocation{args: args, stdout: o.String(), stderr: e.String()}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		inv.code = ee.ExitCode()
	case err != nil:
		t.Fatalf("tierctl %v: %v", args, err)
	}
	return inv
}

// jsonLines parses every stdout line as a JSON object.
func (inv invocation) jsonLines(t *testing.T) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(inv.stdout), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("tierctl %v: stdout line is not JSON: %v\n%s", inv.args, err, l)
		}
		out = append(out, m)
	}
	return out
}

// leafCommands lists every runnable command path ("manifest show").
func leafCommands(c *cobra.Command, prefix string) []string {
	var out []string
	for _, sub := range c.Commands() {
		name := strings.TrimSpace(prefix + " " + sub.Name())
		if sub.Name() == "help" {
			continue
		}
		if sub.HasSubCommands() {
			out = append(out, leafCommands(sub, name)...)
		} else {
			out = append(out, name)
		}
	}
	return out
}

// TestEveryCommandAsBinary runs each tierctl command as a user would, from
// the built binary: a good run (its --json parsed where it has one) and a
// bad input, checking exit codes (0 ok, 1 problems, 2 usage or I/O) and
// that errors name what was wrong. It fails if a command is added without
// a case here.
func TestEveryCommandAsBinary(t *testing.T) {
	root := t.TempDir()
	logs, bucket := filepath.Join(root, "logs"), filepath.Join(root, "bucket")
	part := filepath.Join(logs, "orders-0")
	store := "file://" + bucket
	covered := map[string]bool{}
	ok := func(command string, args ...string) invocation {
		t.Helper()
		inv := binRun(t, nil, args...)
		if inv.code != 0 {
			t.Fatalf("tierctl %v: exit %d\n%s%s", args, inv.code, inv.stdout, inv.stderr)
		}
		covered[command] = true
		return inv
	}
	fails := func(wantCode int, wantInErr string, args ...string) {
		t.Helper()
		inv := binRun(t, nil, args...)
		if inv.code != wantCode || !strings.Contains(inv.stderr+inv.stdout, wantInErr) {
			t.Fatalf("tierctl %v: exit %d, want %d naming %q\nstdout: %s\nstderr: %s", args, inv.code, wantCode, wantInErr, inv.stdout, inv.stderr)
		}
	}

	// produce
	res := ok("produce", "produce", logs, "--partition", "orders-0", "--count", "20000", "--record-size", "200", "--config", "segment.bytes=1048576", "--json").jsonLines(t)
	if res[0]["records"] != 20000.0 || res[0]["segments"].(float64) < 3 {
		t.Fatalf("produce --json: %v", res)
	}
	fails(2, "--partition", "produce", logs, "--count", "10")
	fails(2, "TOPIC-PARTITION", "produce", logs, "--partition", "3", "--count", "10")
	fails(2, "segment.bytes", "produce", logs, "--partition", "x-0", "--count", "1", "--config", "segment.bytes=-5")
	fails(2, "brotli", "produce", logs, "--partition", "x-0", "--count", "1", "--codec", "brotli")

	// dump
	seg := filepath.Join(part, "00000000000000000000.log")
	if lines := ok("dump", "dump", seg, "--json").jsonLines(t); len(lines) < 10 {
		t.Fatalf("dump --json: %d lines", len(lines))
	}
	fails(2, "nope.log", "dump", filepath.Join(root, "nope.log"))

	// lookup
	lk := ok("lookup", "lookup", part, "--offset", "12345", "--json").jsonLines(t)[0]
	if b, _ := lk["batch"].(map[string]any); b == nil || b["baseOffset"].(float64) > 12345 || b["lastOffset"].(float64) < 12345 {
		t.Fatalf("lookup --json: %v", lk)
	}
	fails(2, "out of range", "lookup", part, "--offset", "99999999")
	fails(2, "--offset", "lookup", part)

	// consume
	if lines := ok("consume", "consume", part, "--from", "100", "--count", "5", "--json").jsonLines(t); len(lines) != 5 || lines[0]["offset"] != 100.0 {
		t.Fatalf("consume --json: %v", lines)
	}
	fails(2, "out of range", "consume", part, "--from", "99999999")

	// offload, ls, manifest, cost, verify --store
	off := ok("offload", "offload", part, "--store", store+"?create=true", "--config", "local.retention.ms=0", "--json").jsonLines(t)[0]
	if off["uploaded"].(float64) < 2 {
		t.Fatalf("offload --json: %v", off)
	}
	fails(2, "--store", "offload", part)
	fails(2, "unknown option", "offload", part, "--store", store+"?colour=blue")
	if rows := ok("ls", "ls", part, "--store", store, "--json").jsonLines(t); len(rows) < 3 || rows[0]["tier"] != "remote" {
		t.Fatalf("ls --json: %v", rows)
	}
	fails(2, "not-a-partition", "ls", filepath.Join(root, "not-a-partition"))
	if m := ok("manifest show", "manifest", "show", "--store", store, "--partition", "orders-0", "--json").jsonLines(t)[0]; m["Generation"].(float64) < 1 {
		t.Fatalf("manifest show --json: %v", m)
	}
	fails(2, "--partition", "manifest", "show", "--store", store, "--partition", "nodash")
	if inv := ok("manifest verify", "manifest", "verify", "--store", store, "--partition", "orders-0", "--deep"); !strings.Contains(inv.stdout, " 0 problems") {
		t.Fatalf("manifest verify: %s", inv.stdout)
	}
	fails(2, "bucket", "manifest", "verify", "--store", "file://"+filepath.Join(root, "no-such-bucket"), "--partition", "orders-0")
	if inv := ok("manifest accept", "manifest", "accept", part, "--store", store, "--dry-run"); !strings.Contains(inv.stdout, "nothing to accept") {
		t.Fatalf("manifest accept --dry-run over the partition's own bucket: %s", inv.stdout)
	}
	if c := ok("cost", "cost", "--store", store, "--json").jsonLines(t)[0]; c["total"].(map[string]any)["segments"].(float64) < 2 {
		t.Fatalf("cost --json: %v", c)
	}
	fails(2, "--fetch-bytes", "cost", "--store", store, "--fetch-bytes", "-1")

	// verify, local and remote
	for _, r := range ok("verify", "verify", logs, "--store", store, "--deep", "--json").jsonLines(t) {
		if r["problems"] != nil {
			t.Fatalf("verify: %v", r)
		}
	}
	fails(2, "--store", "verify", "--deep", logs)

	// compact (a keyed topic of its own)
	ok("produce", "produce", logs, "--partition", "users-0", "--count", "20000", "--key-space", "100", "--config", "segment.bytes=262144")
	cres := ok("compact", "compact", filepath.Join(logs, "users-0"), "--config", "cleanup.policy=compact", "--json").jsonLines(t)[0]
	if cres["recordsRemoved"].(float64) == 0 {
		t.Fatalf("compact --json: %v", cres)
	}
	fails(2, "memory", "compact", filepath.Join(logs, "users-0"), "--memory", "1")

	// gc and restore
	gc := ok("gc", "gc", "--store", store, "--partition", "orders-0", "--grace", "0s", "--force", "--dry-run", "--json").jsonLines(t)[0]
	if gc["dryRun"] != true {
		t.Fatalf("gc --json: %v", gc)
	}
	fails(2, "--grace", "gc", "--store", store, "--partition", "orders-0", "--grace", "soon")
	fails(2, "safe floor", "gc", "--store", store, "--partition", "orders-0", "--grace", "0s")
	fails(2, "negative", "gc", "--store", store, "--partition", "orders-0", "--grace", "-1h", "--force")
	fails(2, "--no-manifest-ok", "gc", "--store", store, "--partition", "orders-9")

	// wal: a bucket without diskless topics has no WAL objects (a diskless
	// bucket's are in TestWALCommands).
	if inv := ok("wal ls", "wal", "ls", "--store", store); !strings.Contains(inv.stdout, "0 WAL objects") {
		t.Fatalf("wal ls: %s", inv.stdout)
	}
	ok("wal verify", "wal", "verify", "--store", store, "--deep")
	ok("wal gc", "wal", "gc", "--store", store)
	fails(2, "safe floor", "wal", "gc", "--store", store, "--grace", "1m")
	fails(2, "--store", "wal", "ls")
	restored := filepath.Join(root, "restored")
	rst := ok("restore", "restore", restored, "--store", store, "--partition", "orders-0", "--json").jsonLines(t)[0]
	if rst["segments"] != off["remoteSegments"] {
		t.Fatalf("restore --json: %v (offload: %v)", rst, off)
	}
	fails(2, "not empty", "restore", restored, "--store", store, "--partition", "orders-0")

	// sealed buckets: a key file from key new, an offload sealed, key
	// list and rekey on it
	kf := filepath.Join(root, "keys")
	if err := os.WriteFile(kf, []byte(strings.TrimSpace(ok("key new", "key", "new", "k1").stdout)+"\nactive k1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	fails(2, "key id", "key", "new", "k/1")
	sealed := "file://" + filepath.Join(root, "sealed")
	if inv := binRun(t, nil, "produce", logs, "--partition", "sealed-0", "--count", "2000", "--config", "segment.bytes=65536"); inv.code != 0 {
		t.Fatalf("produce: %s", inv.stderr)
	}
	if inv := binRun(t, nil, "offload", filepath.Join(logs, "sealed-0"), "--store", sealed+"?create=true", "--key-file", kf); inv.code != 0 {
		t.Fatalf("offload sealed: %s", inv.stderr)
	}
	kl := ok("key list", "key", "list", "--store", sealed, "--key-file", kf, "--json").jsonLines(t)
	if len(kl) != 1 || kl[0]["wrappedBy"] != "k1" {
		t.Fatalf("key list --json: %v", kl)
	}
	if inv := ok("rekey", "rekey", "--store", sealed, "--key-file", kf); !strings.Contains(inv.stdout, "under k1 already") {
		t.Fatalf("rekey: %s", inv.stdout)
	}
	// rekey --json names the key as key list does.
	if rk := ok("rekey", "rekey", "--store", sealed, "--key-file", kf, "--json").jsonLines(t); len(rk) != 1 ||
		rk[0]["bucketKey"] != kl[0]["bucketKey"] || rk[0]["object"] != kl[0]["object"] {
		t.Fatalf("rekey --json %v, key list --json %v", rk, kl)
	}
	fails(2, "needs the bucket's key file", "rekey", "--store", sealed)
	open := filepath.Join(root, "keys-open")
	b, _ := os.ReadFile(kf)
	if err := os.WriteFile(open, b, 0o644); err != nil {
		t.Fatal(err)
	}
	fails(2, "chmod 600", "key", "list", "--store", sealed, "--key-file", open)

	// demo
	d := ok("demo", "demo", "--records", "8000", "--json").jsonLines(t)[0]
	if d["recordsReadThroughBothTiers"] != 8000.0 || d["filesWithProblems"] != 0.0 {
		t.Fatalf("demo --json: %v", d)
	}
	fails(2, "--records", "demo", "--records", "0")

	// completion, for every shell cobra knows
	for _, sh := range []string{"bash", "zsh", "fish", "powershell"} {
		inv := ok("completion "+sh, "completion", sh)
		if !strings.Contains(inv.stdout, "tierctl") {
			t.Fatalf("completion %s printed no script", sh)
		}
	}
	fails(2, "unknown command", "completion", "tcsh")

	// Problems found are exit 1.
	victim := filepath.Join(logs, "users-0", "00000000000000000000.log")
	b, err := os.ReadFile(victim)
	if err != nil || len(b) < 100 {
		t.Fatalf("%s: %v", victim, err)
	}
	b[len(b)/2] ^= 1
	os.WriteFile(victim, b, 0o644)
	fails(1, "FAIL", "verify", filepath.Join(logs, "users-0"))

	// --help with examples on every command; nothing left uncovered.
	all := leafCommands(newRootCmd(), "")
	sort.Strings(all)
	for _, c := range all {
		if !covered[c] {
			t.Errorf("command %q has no case in this test", c)
		}
		args := append(strings.Fields(c), "--help")
		inv := binRun(t, nil, args...)
		if inv.code != 0 || !strings.Contains(inv.stdout, "Usage:") {
			t.Errorf("tierctl %s --help: exit %d\n%s", c, inv.code, inv.stdout)
		}
		if !strings.HasPrefix(c, "completion") && !strings.Contains(inv.stdout, "Examples:") {
			t.Errorf("tierctl %s --help shows no examples", c)
		}
	}
}

// TestNoCommandPrintsSecrets runs every command that talks to a bucket
// against a real S3 server, with credentials in the environment and debug
// logging on, then with a wrong secret, then with credentials put in the
// URL, and greps everything printed for the secrets.
func TestNoCommandPrintsSecrets(t *testing.T) {
	srv := s3server.Shared(t)
	bucket := s3server.BucketName(t)
	if err := s3.CreateBucket(context.Background(), s3.Config{Bucket: bucket, Endpoint: srv.Endpoint, Region: srv.Region,
		PathStyle: true, AccessKey: srv.AccessKey, SecretKey: srv.SecretKey}); err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	logs := filepath.Join(root, "logs")
	part := filepath.Join(logs, "orders-0")
	store := fmt.Sprintf("s3://%s/tl?endpoint=%s&path-style=true&region=%s", bucket, srv.Endpoint, srv.Region)
	minioStore := fmt.Sprintf("minio://%s/tl?endpoint=%s&region=%s", bucket, srv.Endpoint, srv.Region)
	env := []string{"AWS_ACCESS_KEY_ID=" + srv.AccessKey, "AWS_SECRET_ACCESS_KEY=" + srv.SecretKey, "TIERCTL_LOG_LEVEL=debug"}
	var runs []invocation
	run := func(env []string, wantOK bool, args ...string) {
		t.Helper()
		inv := binRun(t, env, args...)
		if (inv.code == 0) != wantOK {
			t.Fatalf("tierctl %v: exit %d\n%s%s", args, inv.code, inv.stdout, inv.stderr)
		}
		runs = append(runs, inv)
	}
	run(env, true, "produce", logs, "--partition", "orders-0", "--count", "20000", "--config", "segment.bytes=1048576")
	run(env, true, "offload", part, "--store", store, "--config", "local.retention.ms=0")
	run(env, true, "ls", part, "--store", store)
	run(env, true, "ls", part, "--store", minioStore)
	run(env, true, "lookup", part, "--store", store, "--offset", "100")
	run(env, true, "consume", part, "--store", store, "--quiet")
	run(env, true, "manifest", "show", "--store", store, "--partition", "orders-0")
	run(env, true, "manifest", "verify", "--store", store, "--partition", "orders-0", "--deep")
	run(env, true, "verify", "--store", store, "--deep")
	run(env, true, "cost", "--store", store)
	run(env, true, "gc", "--store", store, "--partition", "orders-0", "--dry-run")
	run(env, true, "wal", "ls", "--store", store)
	run(env, true, "wal", "verify", "--store", store, "--deep")
	run(env, true, "wal", "gc", "--store", store)
	run(env, true, "restore", filepath.Join(root, "restored"), "--store", store, "--partition", "orders-0")
	run(env, true, "demo", "--records", "5000", "--store", store)

	wrong := srv.SecretKey + "Wrong"
	badEnv := []string{"AWS_ACCESS_KEY_ID=" + srv.AccessKey, "AWS_SECRET_ACCESS_KEY=" + wrong, "TIERCTL_LOG_LEVEL=debug"}
	run(badEnv, false, "ls", part, "--store", store)
	run(badEnv, false, "manifest", "show", "--store", minioStore, "--partition", "orders-0")
	inURL := strings.Replace(store, "s3://", "s3://"+srv.AccessKey+":"+srv.SecretKey+"@", 1)
	run(nil, false, "cost", "--store", inURL)
	run(append(env, "TIERCTL_STORE="+inURL), false, "gc", "--partition", "orders-0")

	for _, inv := range runs {
		for _, secret := range []string{srv.SecretKey, wrong} {
			if strings.Contains(inv.stdout, secret) || strings.Contains(inv.stderr, secret) {
				t.Errorf("tierctl %v printed a secret\nstdout: %s\nstderr: %s", inv.args, inv.stdout, inv.stderr)
			}
		}
	}
	// The failures still said what was wrong.
	for _, inv := range runs[len(runs)-4:] {
		if inv.stderr == "" {
			t.Errorf("tierctl %v failed without a word", inv.args)
		}
	}
	for _, inv := range runs[len(runs)-4:] {
		t.Logf("tierctl %s: %s", inv.args[0], strings.TrimSpace(inv.stderr))
	}
	if !strings.Contains(runs[len(runs)-2].stderr, "credentials do not belong in the URL") {
		t.Errorf("credentials in the URL: %s", runs[len(runs)-2].stderr)
	}
}

// BenchmarkLookupProcess runs `tierctl lookup` of random offsets in a
// 50,000-record partition (200-byte values, 1 MiB segments) as a whole
// process, start to exit, and reports the median.
func BenchmarkLookupProcess(b *testing.B) {
	bin := tierctlBinary(b)
	logs := b.TempDir()
	if out, err := exec.Command(bin, "produce", logs, "--partition", "orders-0", "--count", "50000", "--record-size", "200",
		"--config", "segment.bytes=1048576").CombinedOutput(); err != nil {
		b.Fatalf("produce: %v\n%s", err, out)
	}
	part := filepath.Join(logs, "orders-0")
	var times []time.Duration
	i := 0
	for b.Loop() {
		off := (i * 7919) % 50000
		i++
		start := time.Now()
		if out, err := exec.Command(bin, "lookup", part, "--offset", strconv.Itoa(off)).CombinedOutput(); err != nil {
			b.Fatalf("lookup %d: %v\n%s", off, err, out)
		}
		times = append(times, time.Since(start))
	}
	slices.Sort(times)
	b.ReportMetric(float64(times[len(times)/2].Microseconds())/1000, "median-ms")
}
