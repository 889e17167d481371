package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/local"
	"github.com/tierlog/tierlog/tiered"
	"github.com/tierlog/tierlog/vfs"
)

// bin runs the built tierctl in a test and checks exit codes and messages.
type bin struct{ t *testing.T }

// ok runs tierctl and fails the test unless it exits 0.
func (b bin) ok(args ...string) invocation {
	b.t.Helper()
	inv := binRun(b.t, nil, args...)
	if inv.code != 0 {
		b.t.Fatalf("tierctl %v: exit %d\nstdout: %s\nstderr: %s", args, inv.code, inv.stdout, inv.stderr)
	}
	return inv
}

// fails runs tierctl and fails the test unless it exits with code and
// prints every one of want (on stderr or stdout).
func (b bin) fails(code int, want []string, args ...string) invocation {
	b.t.Helper()
	inv := binRun(b.t, nil, args...)
	out := inv.stderr + inv.stdout
	missing := ""
	for _, w := range want {
		if !strings.Contains(out, w) {
			missing = w
			break
		}
	}
	if inv.code != code || missing != "" {
		b.t.Fatalf("tierctl %v: exit %d, want %d naming %q\nstdout: %s\nstderr: %s", args, inv.code, code, missing, inv.stdout, inv.stderr)
	}
	return inv
}

// setCheckpoint sets the partition's entry in one of the log directory's
// offset checkpoints, as a broker would have written it.
func setCheckpoint(t *testing.T, logDir, name string, tp local.TopicPartition, offset int64) {
	t.Helper()
	m, err := local.ReadOffsetCheckpoint(filepath.Join(logDir, name))
	if err != nil {
		t.Fatal(err)
	}
	m[tp] = offset
	if err := local.WriteOffsetCheckpoint(logDir, name, m); err != nil {
		t.Fatal(err)
	}
}

// TestReadOnlyCommandsReadCheckpoints: consume and lookup open a partition
// with the log start its log directory's checkpoint records (5000 here,
// inside the first segment, as DeleteRecords leaves it), as a broker does:
// nothing below it is served.
func TestReadOnlyCommandsReadCheckpoints(t *testing.T) {
	b := bin{t}
	logs := filepath.Join(t.TempDir(), "logs")
	part := filepath.Join(logs, "orders-0")
	b.ok("produce", logs, "--partition", "orders-0", "--count", "20000", "--record-size", "200", "--config", "segment.bytes=1048576")
	setCheckpoint(t, logs, local.LogStartCheckpoint, local.TopicPartition{Topic: "orders", Partition: 0}, 5000)

	if out := strings.TrimSpace(b.ok("consume", part, "--quiet").stdout); out != "15000" {
		t.Fatalf("consume --quiet with log start 5000: %s records, want 15000", out)
	}
	if first := b.ok("consume", part, "--count", "1", "--json").jsonLines(t)[0]; first["offset"] != 5000.0 {
		t.Fatalf("consume printed offset %v first, want the log start 5000", first["offset"])
	}
	b.fails(2, []string{"out of range", "100"}, "consume", part, "--from", "100")
	b.fails(2, []string{"out of range"}, "lookup", part, "--offset", "100")
	b.ok("lookup", part, "--offset", "5000")
}

// TestMemStoreRefused: a mem:// bucket lives only inside one tierctl
// process, so every command that takes --store refuses it (offload would
// otherwise upload into it, delete the local copies, and exit, losing the
// data); demo may use one, but not with --keep.
func TestMemStoreRefused(t *testing.T) {
	b := bin{t}
	root := t.TempDir()
	logs := filepath.Join(root, "logs")
	part := filepath.Join(logs, "orders-0")
	b.ok("produce", logs, "--partition", "orders-0", "--count", "20000", "--record-size", "200", "--config", "segment.bytes=1048576")
	before := len(b.ok("ls", part, "--json").jsonLines(t))
	mem := "mem://x"
	for _, args := range [][]string{
		{"offload", part, "--store", mem, "--config", "local.retention.ms=0"},
		{"gc", "--store", mem, "--partition", "orders-0", "--no-manifest-ok"},
		{"restore", filepath.Join(root, "restored"), "--store", mem, "--partition", "orders-0"},
		{"consume", part, "--store", mem, "--quiet"},
		{"lookup", part, "--store", mem, "--offset", "1"},
		{"ls", part, "--store", "MEM://x"},
		{"manifest", "show", "--store", mem, "--partition", "orders-0"},
		{"manifest", "verify", "--store", mem, "--partition", "orders-0"},
		{"verify", part, "--store", mem},
		{"cost", "--store", mem},
		{"demo", "--records", "1000", "--store", mem, "--keep", "--dir", filepath.Join(root, "demo")},
	} {
		b.fails(2, []string{"--store", "mem://", "vanish"}, args...)
	}
	if after := len(b.ok("ls", part, "--json").jsonLines(t)); after != before {
		t.Fatalf("the partition had %d segments, now %d", before, after)
	}
	b.ok("demo", "--records", "1000", "--store", mem)
}

// TestMissingManifestIsNotAnEmptyBucket: with a --store that is not the
// bucket a partition was offloaded to (a typo in the prefix), commands
// fail and name the partition and the URL, instead of reading the
// partition as if nothing had been offloaded.
func TestMissingManifestIsNotAnEmptyBucket(t *testing.T) {
	b := bin{t}
	root := t.TempDir()
	logs := filepath.Join(root, "logs")
	part := filepath.Join(logs, "orders-0")
	good, wrong := "file://"+filepath.Join(root, "bucket"), "file://"+filepath.Join(root, "bucket-typo")
	b.ok("produce", logs, "--partition", "orders-0", "--count", "20000", "--record-size", "200", "--config", "segment.bytes=1048576")
	b.ok("produce", logs, "--partition", "payments-0", "--count", "100")
	b.ok("offload", part, "--store", good+"?create=true", "--config", "local.retention.ms=0")
	if err := os.Mkdir(filepath.Join(root, "bucket-typo"), 0o755); err != nil { // there, but empty
		t.Fatal(err)
	}

	// The right bucket serves every offset.
	if n := strings.TrimSpace(b.ok("consume", part, "--store", good, "--quiet").stdout); n != "20000" {
		t.Fatalf("consume --store: %s records, want 20000", n)
	}
	b.ok("verify", logs, "--store", good, "--deep")

	// The wrong one: the offloaded partition's checkpoint says its log
	// starts below the local files.
	named := []string{"orders-0", "no manifest", wrong, "right"}
	b.fails(2, named, "offload", part, "--store", wrong)
	b.fails(2, named, "consume", part, "--store", wrong, "--quiet")
	b.fails(2, named, "lookup", part, "--store", wrong, "--offset", "1")
	b.fails(2, named, "ls", part, "--store", wrong)
	b.fails(2, named, "verify", part, "--store", wrong, "--deep")
	b.fails(2, named, "verify", logs, "--store", wrong, "--deep")
	b.fails(2, named, "manifest", "show", "--store", wrong, "--partition", "orders-0")
	b.fails(2, named, "manifest", "verify", "--store", wrong, "--partition", "orders-0")
	b.fails(2, named, "cost", "--store", wrong, "--partition", "orders-0")
	// Nothing at all under the URL is said, not "0 with problems".
	b.fails(2, []string{"no partition has a manifest", wrong}, "verify", "--store", wrong, "--deep")
	b.fails(2, []string{"no partition has a manifest", wrong}, "cost", "--store", wrong)
	// A partition named with --partition and missing is a problem.
	inv := b.fails(1, []string{"FAIL orders-9/manifest", "no manifest"}, "verify", "--store", good, "--partition", "orders-0", "--partition", "orders-9")
	if !strings.Contains(inv.stdout, "ok   orders-0/") {
		t.Fatalf("verify did not check orders-0 too:\n%s", inv.stdout)
	}

	// A partition that was never offloaded has nothing in any bucket.
	if n := strings.TrimSpace(b.ok("consume", filepath.Join(logs, "payments-0"), "--store", wrong, "--quiet").stdout); n != "100" {
		t.Fatalf("consume of a partition never offloaded: %s records, want 100", n)
	}
	b.ok("verify", filepath.Join(logs, "payments-0"), "--store", wrong)
}

// TestNegativeNumbersRefused: every numeric flag refuses values it has no
// meaning for (negative offsets, counts, sizes and prices), naming the flag
// and the value, wherever the value comes from.
func TestNegativeNumbersRefused(t *testing.T) {
	b := bin{t}
	root := t.TempDir()
	logs := filepath.Join(root, "logs")
	part := filepath.Join(logs, "orders-0")
	store := "file://" + filepath.Join(root, "bucket")
	b.ok("produce", logs, "--partition", "orders-0", "--count", "5000", "--config", "segment.bytes=100000")
	b.ok("offload", part, "--store", store+"?create=true")
	idx := filepath.Join(part, "00000000000000000000.index")
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"consume", part, "--from", "-5"}, []string{"--from", "-5", "negative"}},
		{[]string{"consume", part, "--from", "-1"}, []string{"--from", "-1", "negative"}},
		{[]string{"consume", part, "--count", "-1"}, []string{"--count", "-1"}},
		{[]string{"lookup", part, "--offset", "-1"}, []string{"--offset", "-1", "negative"}},
		{[]string{"lookup", part, "--timestamp", "-5"}, []string{"--timestamp", "-5", "negative"}},
		{[]string{"dump", idx, "--base-offset", "-3"}, []string{"--base-offset", "-3", "negative"}},
		{[]string{"produce", logs, "--partition", "x-0", "--count", "-1"}, []string{"--count", "-1"}},
		{[]string{"produce", logs, "--partition", "x-0", "--count", "1", "--record-size", "-1"}, []string{"--record-size", "-1"}},
		{[]string{"produce", logs, "--partition", "x-0", "--count", "1", "--batch-size", "10"}, []string{"--batch-size", "10"}},
		{[]string{"produce", logs, "--partition", "x-0", "--count", "1", "--key-space", "-2"}, []string{"--key-space", "-2"}},
		{[]string{"cost", "--store", store, "--price-storage", "-5"}, []string{"--price-storage", "-5"}},
		{[]string{"cost", "--store", store, "--price-put", "-0.01"}, []string{"--price-put", "-0.01"}},
		{[]string{"cost", "--store", store, "--price-get", "NaN"}, []string{"--price-get", "NaN"}},
		{[]string{"cost", "--store", store, "--price-transfer", "+Inf"}, []string{"--price-transfer", "Inf"}},
		{[]string{"cost", "--store", store, "--fetch-bytes", "0"}, []string{"--fetch-bytes", "0"}},
		{[]string{"compact", part, "--memory", "-1"}, []string{"--memory", "-1"}},
		{[]string{"compact", part, "--memory", "4294967296"}, []string{"--memory", "4294967296"}},
		{[]string{"demo", "--records", "-1"}, []string{"--records", "-1"}},
		{[]string{"gc", "--store", store, "--partition", "orders-0", "--grace", "-1h", "--force"}, []string{"--grace", "-1h", "negative"}},
	} {
		b.fails(2, c.want, c.args...)
	}
	// From the environment too, named by its variable.
	if inv := binRun(t, []string{"TIERCTL_FROM=-5"}, "consume", part); inv.code != 2 || !strings.Contains(inv.stderr, "TIERCTL_FROM") || !strings.Contains(inv.stderr, "negative") {
		t.Fatalf("TIERCTL_FROM=-5: exit %d: %s", inv.code, inv.stderr)
	}
	// Zero is an offset like any other.
	if lines := b.ok("consume", part, "--from", "0", "--count", "2", "--json").jsonLines(t); len(lines) != 2 || lines[0]["offset"] != 0.0 {
		t.Fatalf("consume --from 0: %v", lines)
	}
	b.ok("lookup", part, "--offset", "0")
	b.ok("cost", "--store", store, "--price-storage", "0", "--price-transfer", "0.09")
}

// TestRestoreIsAllOrNothing: restore locks the log directory before it
// writes, and a restore that fails on a damaged object leaves no partition
// directory (which verify would pass and a rerun would refuse): the rerun
// after the object is repaired succeeds. A killed restore's leftover goes.
func TestRestoreIsAllOrNothing(t *testing.T) {
	b := bin{t}
	root := t.TempDir()
	logs, bucket := filepath.Join(root, "logs"), filepath.Join(root, "bucket")
	store := "file://" + bucket
	b.ok("produce", logs, "--partition", "orders-0", "--count", "20000", "--record-size", "200", "--config", "segment.bytes=1048576")
	b.ok("offload", filepath.Join(logs, "orders-0"), "--store", store+"?create=true")
	ents, err := os.ReadDir(filepath.Join(bucket, "orders-0"))
	if err != nil {
		t.Fatal(err)
	}
	var logObjects []string
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".log") {
			logObjects = append(logObjects, filepath.Join(bucket, "orders-0", e.Name()))
		}
	}
	if len(logObjects) < 2 {
		t.Fatalf("offloaded %d segments, want 2 or more", len(logObjects))
	}
	victim := logObjects[1] // the first segment restores before it fails
	good, err := os.ReadFile(victim)
	if err != nil {
		t.Fatal(err)
	}
	bad := append([]byte(nil), good...)
	bad[len(bad)/2] ^= 0xff
	if err := os.WriteFile(victim, bad, 0o644); err != nil {
		t.Fatal(err)
	}

	restored := filepath.Join(root, "restored")
	part := filepath.Join(restored, "orders-0")
	b.fails(2, []string{"CRC-32C", filepath.Base(victim)}, "restore", restored, "--store", store, "--partition", "orders-0")
	left, _ := os.ReadDir(restored)
	for _, e := range left {
		if e.IsDir() {
			t.Errorf("a failed restore left %s in the log directory", e.Name())
		}
	}

	// A broker holds the log directory: restore writes nothing.
	if err := os.WriteFile(victim, good, 0o644); err != nil {
		t.Fatal(err)
	}
	lock, err := vfs.Default.Lock(filepath.Join(restored, local.LockFile))
	if err != nil {
		t.Fatal(err)
	}
	b.fails(2, []string{"in use", restored}, "restore", restored, "--store", store, "--partition", "orders-0")
	lock.Close()
	if _, err := os.Stat(part); !os.IsNotExist(err) {
		t.Fatalf("restore into a locked log directory wrote %s", part)
	}

	// A killed restore's leftover is removed; the rerun restores it all.
	leftover := filepath.Join(restored, "orders-0.restoring-00000000000000ff-delete")
	if err := os.MkdirAll(leftover, 0o755); err != nil {
		t.Fatal(err)
	}
	b.ok("restore", restored, "--store", store, "--partition", "orders-0")
	if _, err := os.Stat(leftover); !os.IsNotExist(err) {
		t.Fatalf("restore left the leftover %s", leftover)
	}
	b.ok("verify", part)
	b.ok("verify", restored)
}

// TestCompactTieredPartition: without --store, compact refuses a
// partition that was offloaded, or whose config enables remote storage,
// and changes nothing, dry run or not (its local copies are the bucket's
// exact bytes). With --store it cleans the bucket's own segments: a dry
// run reports what a round would remove and the requests it would make,
// and changes nothing; the round removes as much, every key's latest
// record still reads through both tiers, and the bucket verifies.
func TestCompactTieredPartition(t *testing.T) {
	b := bin{t}
	root := t.TempDir()
	logs := filepath.Join(root, "logs")
	part := filepath.Join(logs, "users-0")
	url := "file://" + filepath.Join(root, "bucket") + "?create=true"
	b.ok("produce", logs, "--partition", "users-0", "--count", "20000", "--key-space", "100", "--config", "segment.bytes=262144")
	b.ok("offload", part, "--store", url, "--config", "local.retention.ms=0")
	// Closed local segments a local cleaner would rewrite.
	b.ok("produce", logs, "--partition", "users-0", "--count", "20000", "--key-space", "100", "--config", "segment.bytes=262144")
	before := b.ok("ls", part, "--json", "--store", url).stdout
	for _, args := range [][]string{{"compact", part}, {"compact", part, "--dry-run"}} {
		b.fails(2, []string{part, "tiered", "--store"}, args...)
	}
	if after := b.ok("ls", part, "--json", "--store", url).stdout; after != before {
		t.Fatalf("compact of an offloaded partition changed it:\n%s\n%s", before, after)
	}

	var dry, res map[string]any
	if err := json.Unmarshal([]byte(b.ok("compact", part, "--store", url, "--dry-run", "--json").stdout), &dry); err != nil {
		t.Fatal(err)
	}
	if dry["dryRun"] != true || dry["recordsRemoved"].(float64) == 0 || dry["gets"].(float64) == 0 || dry["puts"].(float64) == 0 {
		t.Fatalf("compact --store --dry-run: %v", dry)
	}
	if dry["bucketBytesAfter"].(float64) >= dry["bucketBytesBefore"].(float64) {
		t.Fatalf("compact --store --dry-run: the bucket's bytes after (%v) are not below those before (%v): what the round would leave is not reported",
			dry["bucketBytesAfter"], dry["bucketBytesBefore"])
	}
	if after := b.ok("ls", part, "--json", "--store", url).stdout; after != before {
		t.Fatalf("a dry run changed the partition:\n%s\n%s", before, after)
	}
	// Without the topic's word that it is compacted, the bucket's only
	// copy is not rewritten (a topic that is not would lose nearly all).
	b.fails(2, []string{"cleanup.policy=compact", "--dry-run"}, "compact", part, "--store", url)
	if after := b.ok("ls", part, "--json", "--store", url).stdout; after != before {
		t.Fatalf("a refused compact --store changed the partition:\n%s\n%s", before, after)
	}
	if err := json.Unmarshal([]byte(b.ok("compact", part, "--store", url, "--json", "--config", "cleanup.policy=compact").stdout), &res); err != nil {
		t.Fatal(err)
	}
	if res["recordsRemoved"] != dry["recordsRemoved"] || res["segmentsReplaced"].(float64) == 0 || res["commits"].(float64) == 0 {
		t.Fatalf("compact --store: %v (the dry run: %v)", res, dry)
	}
	n, err := strconv.Atoi(strings.Fields(b.ok("consume", part, "--store", url, "--quiet").stdout)[0])
	if err != nil || n != 40000-int(res["recordsRemoved"].(float64)) {
		t.Fatalf("consume after compact: %d records, %v; want %d", n, err, 40000-int(res["recordsRemoved"].(float64)))
	}
	b.ok("verify", part, "--store", url)
	if out := b.ok("compact", part, "--store", url, "--config", "cleanup.policy=compact,delete").stdout; !strings.Contains(out, "nothing to clean") {
		t.Fatalf("a second compact --store: %s", out)
	}

	b.ok("produce", logs, "--partition", "profiles-0", "--count", "20000", "--key-space", "100", "--config", "segment.bytes=262144")
	b.fails(2, []string{"remote.storage.enable", "--store"}, "compact", filepath.Join(logs, "profiles-0"), "--config", "remote.storage.enable=true")
	b.ok("compact", filepath.Join(logs, "profiles-0"), "--dry-run")

	// Mistakes change nothing: a partition never offloaded there, a
	// directory that is not there, a topic said not to be compacted.
	before = b.ok("ls", part, "--json", "--store", url).stdout
	b.fails(2, []string{"no manifest", "profiles-0"}, "compact", filepath.Join(logs, "profiles-0"), "--store", url, "--dry-run")
	b.fails(2, []string{"no manifest", "profiles-0"}, "compact", filepath.Join(logs, "profiles-0"), "--store", url)
	if _, err := os.Stat(filepath.Join(root, "bucket", "profiles-0")); !os.IsNotExist(err) {
		t.Fatalf("compact --store of a partition never offloaded wrote to the bucket: %v", err)
	}
	b.fails(2, []string{"not found", "typo-0"}, "compact", filepath.Join(logs, "typo-0"), "--store", url, "--dry-run")
	if _, err := os.Stat(filepath.Join(logs, "typo-0")); !os.IsNotExist(err) {
		t.Fatalf("compact --store of a mistyped partition made it: %v", err)
	}
	b.fails(2, []string{"cleanup.policy=delete"}, "compact", part, "--store", url, "--config", "cleanup.policy=delete")
	b.fails(2, []string{"cleanup.policy=delete"}, "compact", filepath.Join(logs, "profiles-0"), "--config", "cleanup.policy=delete")
	if after := b.ok("ls", part, "--json", "--store", url).stdout; after != before {
		t.Fatalf("a refused compact changed the partition:\n%s\n%s", before, after)
	}
}

// TestProducePartitionSpellings: produce names its partition as every
// other command does, --partition TOPIC-PARTITION; the old --topic T
// --partition N still works, with a warning, and mixing the two is an
// error rather than a guess.
func TestProducePartitionSpellings(t *testing.T) {
	b := bin{t}
	logs := t.TempDir()
	b.ok("produce", logs, "--partition", "orders-3", "--count", "10")
	old := b.ok("produce", logs, "--topic", "orders", "--partition", "3", "--count", "10")
	if !strings.Contains(old.stderr, "--topic") || !strings.Contains(old.stderr, "deprecated") {
		t.Errorf("the old spelling ran without a warning: %q", old.stderr)
	}
	b.ok("produce", logs, "--topic", "payments", "--count", "10") // partition 0
	if n := strings.TrimSpace(b.ok("consume", filepath.Join(logs, "orders-3"), "--quiet").stdout); n != "20" {
		t.Fatalf("orders-3 holds %s records, want 20 (10 from each spelling)", n)
	}
	b.ok("consume", filepath.Join(logs, "payments-0"), "--quiet")
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"--count", "1"}, []string{"--partition", "required", "TOPIC-PARTITION"}},
		{[]string{"--partition", "3", "--count", "1"}, []string{"--partition 3", "TOPIC-PARTITION", "orders-3"}},
		{[]string{"--partition", "orders", "--count", "1"}, []string{"--partition", "orders", "TOPIC-PARTITION"}},
		{[]string{"--topic", "orders", "--partition", "orders-1", "--count", "1"}, []string{"--topic", "--partition", "orders-1"}},
		{[]string{"--topic", "orders", "--partition", "-1", "--count", "1"}, []string{"--partition", "-1"}},
		{[]string{"--topic", "bad/name", "--count", "1"}, []string{"--topic", "bad/name"}},
	} {
		b.fails(2, c.want, append([]string{"produce", logs}, c.args...)...)
	}
	if help := b.ok("produce", "--help").stdout; strings.Contains(help, "--topic string") || !strings.Contains(help, "--partition TOPIC-PARTITION") {
		t.Errorf("produce --help:\n%s", help)
	}
}

// TestLogDirIsNotAPartitionDir: produce and restore take a log directory;
// given a partition directory instead they refuse rather than nest a
// partition (and a lock and checkpoints) inside it. verify's --partition
// names a partition in a bucket and needs --store.
func TestLogDirIsNotAPartitionDir(t *testing.T) {
	b := bin{t}
	root := t.TempDir()
	logs := filepath.Join(root, "logs")
	part := filepath.Join(logs, "orders-0")
	store := "file://" + filepath.Join(root, "bucket")
	b.ok("produce", logs, "--partition", "orders-0", "--count", "20000", "--record-size", "200", "--config", "segment.bytes=1048576")
	b.ok("offload", part, "--store", store+"?create=true")
	b.fails(2, []string{part, "partition directory"}, "produce", part, "--partition", "orders-0", "--count", "1")
	b.fails(2, []string{part, "partition directory"}, "restore", part, "--store", store, "--partition", "orders-0")
	if _, err := os.Stat(filepath.Join(part, "orders-0")); !os.IsNotExist(err) {
		t.Fatalf("a partition was nested in %s", part)
	}
	b.fails(2, []string{"--partition", "--store"}, "verify", part, "--partition", "orders-0")
}

// TestCompactStoreAsBrokersWriter: compact --store on a partition whose
// manifest a broker committed at leader epoch 3 writes as its writer at
// that epoch (not the 0 tools open at, which the manifest fences).
func TestCompactStoreAsBrokersWriter(t *testing.T) {
	b := bin{t}
	root := t.TempDir()
	logs := filepath.Join(root, "logs")
	part := filepath.Join(logs, "users-0")
	bucket := filepath.Join(root, "bucket")
	url := "file://" + bucket + "?create=true"
	b.ok("produce", logs, "--partition", "users-0", "--count", "20000", "--key-space", "100", "--config", "segment.bytes=262144")
	// The broker's upload, at epoch 3.
	ctx := context.Background()
	store, err := openStore(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := backend.ParseConfig(map[string]string{"cleanup.policy": "compact", "remote.storage.enable": "true",
		"segment.bytes": "262144", "local.retention.ms": "0"})
	if err != nil {
		t.Fatal(err)
	}
	lb, err := local.OpenBackend(logs, local.BackendOptions{RemoteStorage: true})
	if err != nil {
		t.Fatal(err)
	}
	l, err := lb.OpenLog(ctx, "users", 0, cfg)
	if err != nil {
		t.Fatal(err)
	}
	p, err := tiered.Open(ctx, l, tiered.Options{Store: store, Prefix: "users-0", LeaderEpoch: 3})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Offload(ctx); err != nil {
		t.Fatal(err)
	}
	if e := p.Head().WriterEpoch(); e != 3 {
		t.Fatalf("the manifest's writer epoch is %d", e)
	}
	p.Close()
	lb.Close()
	store.Close()
	b.ok("produce", logs, "--partition", "users-0", "--count", "5000", "--key-space", "100", "--config", "segment.bytes=262144")
	var res map[string]any
	if err := json.Unmarshal([]byte(b.ok("compact", part, "--store", url, "--json", "--config", "cleanup.policy=compact").stdout), &res); err != nil {
		t.Fatal(err)
	}
	if res["commits"].(float64) == 0 || res["recordsRemoved"].(float64) == 0 {
		t.Fatalf("compact --store over a broker's manifest: %v", res)
	}
	b.ok("verify", logs, "--store", url)
}

// TestGCGraceZero: gc --grace 0 --force means no grace: an object no
// manifest names, written a moment ago, is collected (it was kept, the
// zero taken for the default grace of an hour).
func TestGCGraceZero(t *testing.T) {
	b := bin{t}
	root := t.TempDir()
	logs := filepath.Join(root, "logs")
	url := "file://" + filepath.Join(root, "bucket") + "?create=true"
	b.ok("produce", logs, "--partition", "orders-0", "--count", "5000", "--config", "segment.bytes=65536")
	b.ok("offload", filepath.Join(logs, "orders-0"), "--store", url)
	orphan := filepath.Join(root, "bucket", "orders-0", "00000000000000000000-00000000000000000009-00000000deadbeef.log")
	if err := os.WriteFile(orphan, []byte("left by a crashed upload"), 0o644); err != nil {
		t.Fatal(err)
	}
	var res map[string]any
	if err := json.Unmarshal([]byte(b.ok("gc", "--store", url, "--partition", "orders-0", "--grace", "0s", "--force", "--dry-run", "--json").stdout), &res); err != nil {
		t.Fatal(err)
	}
	keys, _ := res["keys"].([]any)
	if len(keys) != 1 || !strings.HasSuffix(keys[0].(string), filepath.Base(orphan)) {
		t.Fatalf("gc --grace 0 --force --dry-run: %v; want the orphan alone", res)
	}
	b.ok("gc", "--store", url, "--partition", "orders-0", "--grace", "0s", "--force")
	if _, err := os.Stat(orphan); !os.IsNotExist(err) {
		t.Fatalf("the orphan is still there after gc --grace 0 --force: %v", err)
	}
	b.ok("verify", filepath.Join(logs, "orders-0"), "--store", url)
}

// TestWrongBucketRefusedByTools: consume, ls and verify of a partition
// directory with --store naming another bucket, which holds a partition
// of the same name further along, refuse it as another partition's (it
// was read as this partition's, its higher generation taken for news).
func TestWrongBucketRefusedByTools(t *testing.T) {
	b := bin{t}
	root := t.TempDir()
	logs, other := filepath.Join(root, "logs"), filepath.Join(root, "other")
	part := filepath.Join(logs, "orders-0")
	right := "file://" + filepath.Join(root, "right") + "?create=true"
	wrong := "file://" + filepath.Join(root, "wrong") + "?create=true"
	b.ok("produce", logs, "--partition", "orders-0", "--count", "5000", "--config", "segment.bytes=65536")
	b.ok("offload", part, "--store", right)
	for range 3 {
		b.ok("produce", other, "--partition", "orders-0", "--count", "5000", "--config", "segment.bytes=65536")
		b.ok("offload", filepath.Join(other, "orders-0"), "--store", wrong)
	}
	for _, args := range [][]string{{"consume", part, "--store", wrong, "--quiet"}, {"ls", part, "--store", wrong}, {"verify", part, "--store", wrong}} {
		inv := binRun(t, nil, args...)
		if inv.code == 0 || !strings.Contains(inv.stderr+inv.stdout, "another partition's") {
			t.Fatalf("tierctl %v: exit %d\nstdout: %s\nstderr: %s", args, inv.code, inv.stdout, inv.stderr)
		}
	}
	// An accept takes back this partition's bucket gone back in time,
	// never another partition's: the other's records below the log start
	// would go from its bucket at the next offload.
	wrongDir := filepath.Join(root, "wrong", "orders-0")
	before := segmentObjects(t, wrongDir)
	b.fails(2, []string{"another partition's", "fix the store URL"}, "manifest", "accept", part, "--store", wrong)
	b.fails(2, []string{"another partition's"}, "manifest", "accept", part, "--store", wrong, "--dry-run")
	b.fails(2, []string{"another partition's"}, "offload", part, "--store", wrong)
	if after := segmentObjects(t, wrongDir); after != before {
		t.Fatalf("the other partition's bucket changed:\n%s\n%s", before, after)
	}
	b.ok("verify", part, "--store", right)
}

// segmentObjects lists a file:// bucket's partition directory.
func segmentObjects(t *testing.T, dir string) string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return strings.Join(names, "\n")
}
