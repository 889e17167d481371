// Package soak is tierlog's soak test as a library: for a bounded time it
// runs produce → offload → retention → compaction of other topics, on disk
// and in the bucket → SIGKILL → recovery → restore from the bucket, in a loop, against a real
// MinIO of 4 nodes through a fault proxy (toxiproxy) whose faults switch
// on and off throughout, while the cluster's nodes are SIGKILLed and
// started again, and checks after every step that every acknowledged-and-
// flushed record reads back byte-identical at its offset, through both
// tiers.
//
//	func TestMain(m *testing.M) { os.Exit(soak.Main(m)) }
//
//	func TestSoak(t *testing.T) {
//		r := soak.Run(t, soak.Config{Duration: time.Minute})
//		t.Log(r.Summary())
//	}
//
// # The loop
//
// Run (the parent, in the test process) starts a distributed MinIO
// (s3server.Cluster: 4 nodes, one erasure set; a single MinIO container
// where only Docker can give one), a fault proxy in front of its load
// balancer (faultproxy) and then, one after the other, lives
// of a child process: the test binary re-executed (testing/crashchild),
// which Main sends to the workload. Each life opens one log directory
// (local.Backend), recovering it after the SIGKILL that ended the life
// before, with three topics:
//
//   - A, tiered: small segments, offloaded to the bucket (tiered.Partition
//     over A's local.Log), local retention keeping only a few segments on
//     disk, total retention (retention.bytes, retention.ms) removing the
//     oldest from the bucket.
//   - B, compacted: keyed records over a few hundred keys, some of them
//     tombstones, cleaned by the log cleaner (compaction.Cleaner) while
//     records are being appended.
//   - C, compacted and tiered: keyed records as B's, offloaded in small
//     segments that local retention (local.retention.ms 0, or a few
//     segments' bytes) then removes from the disk, and the bucket's
//     cleaner (tiered.Partition.CompactRemote, with a small map, now and
//     then forced) rewrites and merges in the bucket while records are
//     being appended.
//
// A life checks every topic against the ledger (below) as soon as it has
// recovered, then runs random steps (produce to A, B or C as a leader,
// idempotently or not, in any codec; flush; offload A or C; retention of
// A or C; clean B; clean C in the bucket; roll; checkpoint; DeleteRecords;
// reopen A or C; a clean restart of the whole directory) and checks every
// topic after every step, until it ends: the
// parent SIGKILLs it at a random moment, or it SIGKILLs itself during a
// random step, or it closes cleanly. Every few lives begins with a restore:
// the bucket is brought up to A's log end, A's partition directory is lost
// (deleted through the Backend; or removed behind the Backend's back, so
// its checkpoints still name it; or with the whole log directory, as for a
// new broker, B and C going with it: B is not tiered, so its ledger starts
// over; C is rebuilt from the bucket too) and rebuilt from the bucket with
// tiered.Restore, and the life goes on producing to it. A restore only
// begins once the bucket holds all of A (and of C, when C goes too; else
// it is skipped), so no acknowledged record goes with the disk. Meanwhile the
// parent switches faults on and off on the proxy (latency, bandwidth caps,
// connections reset on their first bytes or mid-request, bodies cut after
// some kilobytes, streams sliced into small delayed writes, short black
// holes), and now and then SIGKILLs one node of the cluster, any of them
// (the requests in flight through it break; the balancer sends the next
// ones to the others), and starts it again with the same drives a few
// seconds later, back in the balancer's rotation once it has rejoined: a
// request under a fault may fail retryably, and its step is then tried
// again later; it must never yield wrong bytes or lose a record. After the loop
// a last life runs with no faults and every node up (the bucket brought
// up to date, retention, B cleaned to the end, C cleaned in the bucket up
// to its local log start) and the parent checks everything once more
// in-process, before and after a forced tiered.GC of A's and C's prefixes
// (which removes the objects the bucket's cleaner replaced).
//
// # What is checked
//
// For A, through tiered.Partition.Read from the log start to the log end:
// every batch is the one appended at its offsets, byte for byte (so every
// record of it: nothing lost, altered, duplicated or out of place, from the
// bucket below the local log start and from disk above it); the log
// reaches every acknowledged offset; nothing below the log start is
// served; point reads (the tier border among them) return the batch
// holding the offset. The log start may only move in the steps that move
// it (retention, DeleteRecords, a restore), never in any other step or
// across a restart in the middle of another step. Retention may remove old
// records: they are never expected once below the log start.
//
// For B, and for C through tiered.Partition.Read (so from the bucket below
// the local log start, cleaned there, and from disk above it): every
// record served is one appended, unaltered (timestamp, key,
// value, headers), at its offset, offsets increasing; the log reaches every
// acknowledged offset; for every key the latest acknowledged write is
// still served, or a later write of the key, or, for a tombstone past its
// horizon, nothing of the key at all.
//
// A broken promise is a Violation: the child writes it to
// fail-<life>.txt and exits with code 3, and Run fails the test with the
// seed that replays the run's choices (EnvSeed). Faults and timing make a
// replay similar, not identical.
//
// # The ledger
//
// What the workload wrote is in <root>/ledger, outside the log directory
// (which restores replace). It is append-only; each entry is framed and
// checksummed, so a torn last entry is dropped:
//
//	entry   := length uint32 | crc32c(payload) uint32 | payload
//	payload := 'a' base int64 | last int64 | sha256(batch)[:16] | records uint32
//	         | 'b' base int64 | last int64 | n uint32 | n × (offset int64 | key uint32 | tombstone byte | sha256(record)[:16])
//	         | 'c' …                             C's batch, as 'b'
//	         | 'f' topic byte | end int64        a flush returned: all below end is acknowledged
//	         | 't' topic byte | end int64        recovery cut an unacknowledged tail: forget it
//	         | 'r' end int64 | variant byte [| endC int64]
//	                                             a restore of A begins; A ends at end from now on
//	                                             (variant 'w': the log dir goes, B starts over,
//	                                             C is restored too and ends at endC)
//	         | 'R'                               that restore is done
//
// Integers are big-endian. A batch entry follows its append at once (A's
// batch bytes as the log holds them: offsets and leader epoch assigned; B's
// and C's record by record, since the cleaners rewrite batches), written without
// fsync: a SIGKILL keeps it. 'f', 't', 'r' and 'R' are fsynced before the
// soak relies on them: a record is acknowledged only once the Flush that
// covers it has returned and its 'f' entry is on disk. After a restart the
// life adopts a tail appended but never written to the ledger (killed
// between the two) and forgets an unacknowledged tail recovery cut.
//
// # Files
//
// The parent: soak.go (Run, a life's start and end, faults, the final
// check) and nodes.go (MinIO node kills). A life: child.go (its spec, its
// run, and do and check around every step), recovery.go (opening the log
// directory after a SIGKILL and bringing the ledger up to it), steps.go
// (the workload's steps, and the final life's), restore.go (losing A's
// directory and rebuilding it from the bucket). Both: ledger.go (the
// ledger and its models of A and B), check.go (the checks and Violation),
// journal.go (the bucket journal).
package soak

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/local"
	"github.com/tierlog/tierlog/objstore"
	"github.com/tierlog/tierlog/testing/crashchild"
	"github.com/tierlog/tierlog/testing/faultproxy"
	"github.com/tierlog/tierlog/testing/s3server"
	"github.com/tierlog/tierlog/tiered"
)

// EnvSeed names an environment variable holding a seed to replay (Run
// logs the seed of every run).
const EnvSeed = "TIERLOG_SOAK_SEED"

// Main runs a test binary's tests, or, in a child the soak started, one
// life of the workload. Call it from TestMain:
//
//	func TestMain(m *testing.M) { os.Exit(soak.Main(m)) }
func Main(m *testing.M) int {
	if code, ok := crashchild.Dispatch(map[string]crashchild.Role{lifeRole: lifeChild}); ok {
		return code
	}
	return s3server.RunTests(m)
}

// lifeRole is the crashchild role of a life; its one argument is the
// childSpec in JSON.
const lifeRole = "soak-life"

func lifeChild(args []string) int {
	var s childSpec
	if len(args) != 1 {
		fmt.Fprintf(os.Stderr, "soak: a life takes one argument, not %d\n", len(args))
		return exitHarness
	}
	if err := json.Unmarshal([]byte(args[0]), &s); err != nil {
		fmt.Fprintf(os.Stderr, "soak: bad child spec: %v\n", err)
		return exitHarness
	}
	return runChild(s)
}

// Config tunes a soak.
type Config struct {
	// Duration is how long the loop runs (default one minute); the final
	// life and check come after it.
	Duration time.Duration
	// Seed replays a run's choices (0: from EnvSeed, else the clock).
	Seed uint64
	// MaxLife is the longest a life runs before the parent kills it
	// (default 8 s); lives last a random part of it.
	MaxLife time.Duration
	// KillNodes runs the soak on the 4-node MinIO cluster and SIGKILLs
	// its nodes at random times (make soak). Off, it runs on one MinIO:
	// the short form in make test, where TestMinIOClusterNodeKill and the
	// cluster's conformance runs cover the cluster.
	KillNodes bool
}

// Report is what a soak did.
type Report struct {
	Seed     uint64
	Duration time.Duration
	// Loops is how many lives the child had (the final one included);
	// Kills how many ended by SIGKILL (from the parent or itself);
	// Restores how many rebuilt A from the bucket.
	Loops, Kills, SelfKills, CleanExits int
	Restores                            int64
	// Faults is how many faults the proxy switched on, by kind.
	Faults       int64
	FaultsByKind map[string]int
	// NodeKills is how many times a node of the MinIO cluster was
	// SIGKILLed (and started again), by node; Nodes is the cluster's
	// size (0: a single MinIO, no node killed); NodeKillsUndrained is
	// the kills whose client connections had not drained in time
	// (nodeKiller).
	NodeKills          int
	NodeKillsByNode    map[int]int
	NodeKillsUndrained int
	Nodes              int
	// Counters sums the lives' counters (records_checked, bytes_produced,
	// bytes_uploaded, step_retries, …) and the parent's final check.
	Counters map[string]int64
}

// Summary is the report in one line.
func (r Report) Summary() string {
	c := r.Counters
	mb := func(n int64) string { return fmt.Sprintf("%.1f MB", float64(n)/1e6) }
	return fmt.Sprintf("soak: seed %d, %v: %d loops, %d SIGKILLs (%d self-inflicted), %d clean exits, %d restores; "+
		"%d faults injected, %d MinIO node kills (of %d nodes), %d failed store requests, %d steps retried; produced %d records (%s), uploaded %s, downloaded %s, read back %s; "+
		"%d records checked (%d from the bucket: %d of A, %d of C) in %d checks (%d cut short by faults); lost or altered: 0",
		r.Seed, r.Duration.Round(time.Second), r.Loops, r.Kills, r.SelfKills, r.CleanExits, r.Restores,
		r.Faults, r.NodeKills, r.Nodes, c["store_attempts_failed"], c["step_retries"], c["records_produced"], mb(c["bytes_produced"]),
		mb(c["bytes_uploaded"]), mb(c["bytes_downloaded"]), mb(c["bytes_read"]),
		c["records_checked"], c["records_checked_a_remote"]+c["records_checked_c_remote"], c["records_checked_a_remote"], c["records_checked_c_remote"], c["checks"], c["checks_incomplete"])
}

// Run runs the soak and fails t on the first Violation, naming the seed.
// The S3 server is the test binary's MinIO (skipped, with s3server's
// message, when MinIO cannot be started here).
func Run(t *testing.T, cfg Config) Report {
	t.Helper()
	if cfg.Duration <= 0 {
		cfg.Duration = time.Minute
	}
	if cfg.MaxLife <= 0 {
		cfg.MaxLife = 8 * time.Second
	}
	if cfg.Seed == 0 {
		if s := os.Getenv(EnvSeed); s != "" {
			v, err := strconv.ParseUint(s, 10, 64)
			if err != nil {
				t.Fatalf("soak: %s=%q: %v", EnvSeed, s, err)
			}
			cfg.Seed = v
		} else {
			cfg.Seed = uint64(time.Now().UnixNano())
		}
	}
	var cluster *s3server.Cluster
	var srv *s3server.Server
	if cfg.KillNodes && slices.Contains(s3server.Kinds(), s3server.MinIOCluster) {
		cluster = s3server.NewCluster(t)
		srv = cluster.Server
	} else { // the short form, or no MinIO binary: one MinIO (a container where Docker answers, else skipped), no node to kill
		srv = s3server.SharedKind(t, s3server.MinIO)
	}
	bucket := srv.NewBucket(t)
	proxy := faultproxy.Start(t, srv.Endpoint)
	root, err := os.MkdirTemp("", "tierlog-soak-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("soak: the run failed; its work dir (logs, children's output, %s) is kept in %s", journalFile, root)
			return
		}
		os.RemoveAll(root)
	})
	r := &runner{t: t, cfg: cfg, srv: srv, bucket: bucket, proxy: proxy, root: root, nodes: newNodeKiller(cluster),
		rng: rand.New(rand.NewPCG(cfg.Seed, 0x50a4)), report: Report{Seed: cfg.Seed, Counters: map[string]int64{}, FaultsByKind: map[string]int{}, NodeKillsByNode: map[int]int{}}}
	r.report.Nodes = r.nodes.size()
	t.Logf("soak: seed %d (replay with %s=%d), %v against %s through a fault proxy, work dir %s", cfg.Seed, EnvSeed, cfg.Seed, cfg.Duration, srv.Kind, r.root)
	r.topics()
	start := time.Now()
	deadline := start.Add(cfg.Duration)
	for life := 1; time.Now().Before(deadline); life++ {
		r.life(life, deadline)
	}
	r.clearFaults()
	r.nodes.restoreAll(t)
	r.life(r.report.Loops+1, time.Time{})
	r.finalCheck()
	r.report.Duration = time.Since(start)
	r.report.Faults = proxy.Added()
	r.logReport()
	return r.report
}

type runner struct {
	t      *testing.T
	cfg    Config
	srv    *s3server.Server
	bucket string
	proxy  *faultproxy.Proxy
	nodes  *nodeKiller
	root   string
	rng    *rand.Rand
	report Report
	topicA map[string]string
	topicB map[string]string
	topicC map[string]string
	faults map[string]time.Time // active toxic -> when it goes off
}

// topics chooses the topics' configs for the run.
func (r *runner) topics() {
	seg := int64(64<<10) << r.rng.IntN(3) // 64, 128 or 256 KiB
	r.topicA = map[string]string{
		"segment.bytes":         strconv.FormatInt(seg, 10),
		"index.interval.bytes":  strconv.Itoa(1024 << r.rng.IntN(3)),
		"retention.bytes":       strconv.FormatInt(24*seg, 10),
		"retention.ms":          strconv.Itoa(90_000 + r.rng.IntN(120_000)),
		"file.delete.delay.ms":  "500",
		"remote.storage.enable": "true",
	}
	if r.rng.IntN(2) == 0 {
		r.topicA["local.retention.ms"] = "0" // offloaded segments leave the disk at once
	} else {
		r.topicA["local.retention.bytes"] = strconv.FormatInt(int64(2+r.rng.IntN(4))*seg, 10)
	}
	r.topicB = map[string]string{
		"cleanup.policy":            "compact",
		"segment.bytes":             strconv.Itoa(32<<10 + r.rng.IntN(64<<10)),
		"min.cleanable.dirty.ratio": "0.01",
		"delete.retention.ms":       strconv.Itoa(1000 + r.rng.IntN(4000)),
		"file.delete.delay.ms":      "500",
	}
	r.topicC = map[string]string{
		"cleanup.policy":            "compact",
		"remote.storage.enable":     "true",
		"segment.bytes":             strconv.Itoa(16<<10 + r.rng.IntN(48<<10)),
		"min.cleanable.dirty.ratio": "0.01",
		"delete.retention.ms":       strconv.Itoa(1000 + r.rng.IntN(4000)),
		"file.delete.delay.ms":      "500",
	}
	if r.rng.IntN(2) == 0 {
		r.topicC["local.retention.ms"] = "0" // offloaded segments leave the disk at once, for the bucket's cleaner
	} else {
		r.topicC["local.retention.bytes"] = strconv.Itoa((1 + r.rng.IntN(3)) * 64 << 10)
	}
	r.t.Logf("soak: topic A %v; topic B %v; topic C %v", r.topicA, r.topicB, r.topicC)
}

// life runs one life of the child; a zero deadline means the final one.
func (r *runner) life(life int, deadline time.Time) {
	t := r.t
	spec := childSpec{Root: r.root, Endpoint: r.proxy.Endpoint, Region: r.srv.Region, AccessKey: r.srv.AccessKey,
		SecretKey: r.srv.SecretKey, Bucket: r.bucket, Seed: r.rng.Uint64(), Life: life,
		TopicA: r.topicA, TopicB: r.topicB, TopicC: r.topicC, Driver: []string{"s3", "minio"}[r.rng.IntN(2)],
		ChunkCacheBytes: []int64{-1, 256 << 10, 0}[r.rng.IntN(3)], CleanerMemory: []int{64 << 10, 1 << 20}[r.rng.IntN(2)],
		StoreTimeout: 3 * time.Second, StoreAttempts: 4}
	if r.rng.IntN(2) == 0 { // faults then fail steps, which are tried again later
		spec.StoreTimeout, spec.StoreAttempts = time.Second, 2
	}
	var killAfter time.Duration
	switch n := r.rng.IntN(10); {
	case deadline.IsZero():
		spec.Mode, spec.StopBy = modeFinal, time.Now().Add(10*time.Minute)
	case n < 6:
		spec.Mode = modeKill
		killAfter = time.Duration(r.rng.Int64N(int64(r.cfg.MaxLife))) + 500*time.Millisecond
	case n < 9:
		spec.Mode, spec.KillAtOp = modeSelfKill, 1+r.rng.IntN(60)
	default:
		spec.Mode, spec.CleanAfterOps = modeClean, 1+r.rng.IntN(40)
	}
	if spec.StopBy.IsZero() {
		spec.StopBy = deadline.Add(r.cfg.MaxLife) // a life never outlasts the soak by much
	}
	if !deadline.IsZero() && life > 1 && r.rng.IntN(3) == 0 {
		spec.Restore = []byte{restoreDelete, restoreLostDir, restoreLostLogDir}[r.rng.IntN(3)]
	}
	specJSON, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	out, err := os.Create(filepath.Join(r.root, fmt.Sprintf("child-%d.out", life)))
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	began := time.Now()
	c := crashchild.Start(t, lifeRole, []string{string(specJSON)}, crashchild.Options{Output: out})
	var kill <-chan time.Time
	if killAfter > 0 {
		kill = time.After(killAfter)
	}
	hang := time.After(15 * time.Minute)
	tick := time.NewTicker(300 * time.Millisecond)
	defer tick.Stop()
	killed := false
	for waiting := true; waiting; {
		select {
		case <-c.Done():
			waiting = false
		case <-kill:
			c.Kill()
			killed = true
		case <-hang:
			c.Kill()
			c.Wait()
			r.failLife(life, spec, "the child has not ended after 15 minutes")
		case <-tick.C:
			if !deadline.IsZero() {
				r.toggleFaults()
				r.nodes.toggle(t, r.rng, &r.report)
			}
		}
	}
	r.report.Loops++
	lc := r.addCounters(life)
	exit := c.Wait()
	switch {
	case exit.Exited(0):
		r.report.CleanExits++
	case exit.Killed() && (killed || spec.Mode == modeSelfKill):
		r.report.Kills++
		if !killed {
			r.report.SelfKills++
		}
	default:
		r.failLife(life, spec, fmt.Sprintf("the child failed: %v", exit))
	}
	how := "exited"
	if killed {
		how = "killed by the parent"
	} else if !exit.Exited(0) {
		how = "killed itself"
	}
	t.Logf("soak: life %d (%s, restore %q, %s store) %s after %v: %d steps, %d checks, %d restores",
		life, spec.Mode, spec.Restore, spec.Driver, how, time.Since(began).Round(time.Millisecond), lc["steps"], lc["checks"], lc["restores"])
}

// failLife fails the test with the child's report and the seed.
func (r *runner) failLife(life int, spec childSpec, why string) {
	r.t.Helper()
	msg, _ := os.ReadFile(filepath.Join(r.root, fmt.Sprintf("fail-%d.txt", life)))
	out, _ := os.ReadFile(filepath.Join(r.root, fmt.Sprintf("child-%d.out", life)))
	if len(out) > 8000 {
		out = out[len(out)-8000:]
	}
	r.logReport()
	r.t.Fatalf("soak: life %d (mode %s, restore %q, driver %s): %s\n%s\n--- the child's output (tail) ---\n%s\n%s"+
		"replay the run's choices with %s=%d (work dir %s)", life, spec.Mode, spec.Restore, spec.Driver, why, msg, out, r.journalFor(string(msg)), EnvSeed, r.cfg.Seed, r.root)
}

// objectKey finds the bucket object keys a failure names.
var objectKey = regexp.MustCompile(`[A-Za-z0-9._/-]+/(?:manifest|[0-9]{20}-[0-9]{20}-[0-9a-f]+\.[a-z-]+|[0-9a-f]+\.intent)`)

// journalFor is the journal's lines about the objects msg names, and
// its last lines, for a failure's message.
func (r *runner) journalFor(msg string) string {
	path := filepath.Join(r.root, journalFile)
	var b strings.Builder
	seen := map[string]bool{}
	for _, key := range objectKey.FindAllString(msg, -1) {
		if seen[key] {
			continue
		}
		seen[key] = true
		fmt.Fprintf(&b, "--- the bucket journal's writes and deletes of %s ---\n%s\n", key, journalLines(path, key, 30))
	}
	fmt.Fprintf(&b, "--- the bucket journal's last lines ---\n%s\n", journalLines(path, "", 30))
	return b.String()
}

// addCounters adds a life's counters to the report and returns them.
func (r *runner) addCounters(life int) map[string]int64 {
	data, err := os.ReadFile(filepath.Join(r.root, "stats", fmt.Sprintf("life-%d.json", life)))
	if err != nil {
		return nil // killed before it wrote any
	}
	var p progress
	if json.Unmarshal(data, &p) != nil {
		return nil
	}
	for k, v := range p.Counters {
		r.report.Counters[k] += v
	}
	r.report.Restores = r.report.Counters["restores"]
	return p.Counters
}

// The faults the proxy switches on, at most two at a time.
var faultKinds = []struct {
	name   string
	tox    func(rng *rand.Rand) faultproxy.Toxic
	maxFor time.Duration
	slows  bool // only slows requests down
}{
	{"latency", func(rng *rand.Rand) faultproxy.Toxic {
		return faultproxy.Latency(time.Duration(20+rng.IntN(150))*time.Millisecond, 20*time.Millisecond)
	}, 4 * time.Second, true},
	{"bandwidth-down", func(rng *rand.Rand) faultproxy.Toxic { return faultproxy.Bandwidth(int64(256 + rng.IntN(2048))) }, 4 * time.Second, true},
	{"bandwidth-up", func(rng *rand.Rand) faultproxy.Toxic {
		t := faultproxy.Bandwidth(int64(256 + rng.IntN(2048)))
		t.Stream = faultproxy.Upstream
		return t
	}, 4 * time.Second, true},
	{"reset-peer", func(rng *rand.Rand) faultproxy.Toxic {
		t := faultproxy.ResetPeer(0)
		t.Toxicity = 0.5
		return t
	}, 3 * time.Second, false},
	{"reset-mid-request", func(rng *rand.Rand) faultproxy.Toxic {
		t := faultproxy.ResetPeer(time.Duration(5+rng.IntN(40)) * time.Millisecond)
		t.Stream, t.Toxicity = faultproxy.Upstream, 0.5
		return t
	}, 3 * time.Second, false},
	{"cut-mid-body", func(rng *rand.Rand) faultproxy.Toxic {
		t := faultproxy.LimitData(int64(8<<10 + rng.IntN(120<<10)))
		t.Toxicity = 0.5
		return t
	}, 3 * time.Second, false},
	{"slicer", func(rng *rand.Rand) faultproxy.Toxic { return faultproxy.Slicer(512, 256, 100*time.Microsecond) }, 4 * time.Second, true},
	{"black-hole", func(rng *rand.Rand) faultproxy.Toxic { return faultproxy.Timeout(0) }, 3 * time.Second, false},
}

// toggleFaults removes the faults whose time is up and sometimes adds one.
func (r *runner) toggleFaults() {
	if r.faults == nil {
		r.faults = map[string]time.Time{}
	}
	now := time.Now()
	for name, off := range r.faults {
		if now.After(off) {
			r.proxy.Remove(r.t, name)
			delete(r.faults, name)
		}
	}
	if len(r.faults) >= 2 || r.rng.IntN(2) != 0 {
		return
	}
	// The faults that fail requests (resets, cut bodies, black holes)
	// twice as often as those that only slow them.
	k := faultKinds[r.rng.IntN(len(faultKinds))]
	if k.slows && r.rng.IntN(2) == 0 {
		k = faultKinds[r.rng.IntN(len(faultKinds))]
	}
	name := r.proxy.Add(r.t, k.tox(r.rng))
	r.faults[name] = now.Add(200*time.Millisecond + time.Duration(r.rng.Int64N(int64(k.maxFor))))
	r.report.FaultsByKind[k.name]++
}

func (r *runner) clearFaults() {
	r.proxy.Reset(r.t)
	r.faults = nil
}

// finalCheck checks every topic in-process, with the store reached
// directly, then again after a forced gc of the bucket (with a partition
// opened afresh, so every remote read is a GET).
func (r *runner) finalCheck() {
	t := r.t
	ctx := context.Background()
	led, err := openLedger(filepath.Join(r.root, "ledger"))
	if err != nil {
		t.Fatal(err)
	}
	defer led.close()
	spec := childSpec{Root: r.root, Endpoint: r.srv.Endpoint, Region: r.srv.Region, AccessKey: r.srv.AccessKey, SecretKey: r.srv.SecretKey, Bucket: r.bucket, Driver: "s3"}
	store, err := openStore(spec, objstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	cfgA, _ := backend.ParseConfig(r.topicA)
	cfgB, _ := backend.ParseConfig(r.topicB)
	cfgC, _ := backend.ParseConfig(r.topicC)
	b, err := local.OpenBackend(filepath.Join(r.root, "logs"), local.BackendOptions{RemoteStorage: true})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	lb, err := b.OpenLog(ctx, nameB, 0, cfgB)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(r.cfg.Seed, 1))
	var total checked
	for round := 0; round < 2; round++ {
		if round == 1 {
			for _, pre := range []string{prefix, prefixC} {
				removed, err := tiered.GC(ctx, store, pre, tiered.GCOptions{Grace: time.Nanosecond, Force: true})
				if err != nil {
					t.Fatalf("soak: final gc of %s: %v", pre, err)
				}
				r.report.Counters["gc_removed_objects"] += int64(len(removed))
			}
		}
		la, err := b.OpenLog(ctx, nameA, 0, cfgA)
		if err != nil {
			t.Fatal(err)
		}
		p, err := tiered.Open(ctx, la, tiered.Options{Store: store, Prefix: prefix, LeaderEpoch: int32(r.report.Loops + 1), ChunkCacheBytes: -1, PrefetchBytes: -1})
		if err != nil {
			t.Fatal(err)
		}
		lc, err := b.OpenLog(ctx, nameC, 0, cfgC)
		if err != nil {
			t.Fatal(err)
		}
		pc, err := tiered.Open(ctx, lc, tiered.Options{Store: store, Prefix: prefixC, LeaderEpoch: int32(r.report.Loops + 1), ChunkCacheBytes: -1, PrefetchBytes: -1})
		if err != nil {
			t.Fatal(err)
		}
		if round == 0 {
			h, hc := p.Head(), pc.Head()
			t.Logf("soak: at the end: A %+v, %d segments in the bucket (generation %d), %d on disk; B %+v; C %+v, %d segments in the bucket (cleaned to %d), %d on disk",
				p.Offsets(), h.Count(), h.Generation(), len(la.SegmentInfos()), lb.Offsets(), pc.Offsets(), hc.Count(), hc.CleanedTo(), len(lc.SegmentInfos()))
		}
		ca, err := checkA(ctx, p, led.a, rng)
		if err == nil {
			var cb checked
			cb, err = checkKeyed(ctx, "B", lb, led.b)
			ca.add(cb)
		}
		if err == nil {
			var cc checked
			cc, err = checkKeyed(ctx, "C", pc, led.c)
			ca.add(cc)
		}
		if err != nil {
			r.logReport()
			t.Fatalf("soak: the final check (round %d) found: %v\n%sreplay the run's choices with %s=%d (work dir %s)", round, err, r.journalFor(err.Error()), EnvSeed, r.cfg.Seed, r.root)
		}
		total.add(ca)
		if err := p.Close(); err != nil {
			t.Fatal(err)
		}
		if err := pc.Close(); err != nil {
			t.Fatal(err)
		}
	}
	c := r.report.Counters
	c["records_checked"] += total.recordsA + total.recordsB + total.recordsC
	c["records_checked_a"] += total.recordsA
	c["records_checked_a_remote"] += total.remoteRecordsA
	c["records_checked_b"] += total.recordsB
	c["records_checked_c"] += total.recordsC
	c["records_checked_c_remote"] += total.remoteRecordsC
	c["bytes_read"] += total.bytes
	c["checks"] += 2
	c["final_records_a"] = total.recordsA / 2
	c["final_records_b"] = total.recordsB / 2
	c["final_records_c"] = total.recordsC / 2
}

func (r *runner) logReport() {
	keys := make([]string, 0, len(r.report.Counters))
	for k := range r.report.Counters {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, " %s=%d", k, r.report.Counters[k])
	}
	r.t.Logf("soak: counters:%s", b.String())
	r.t.Logf("soak: faults by kind: %v", r.report.FaultsByKind)
	if r.report.Nodes > 0 {
		r.t.Logf("soak: MinIO node kills by node (of %d): %v; killed before their client connections drained: %d", r.report.Nodes, r.report.NodeKillsByNode, r.report.NodeKillsUndrained)
	}
}
