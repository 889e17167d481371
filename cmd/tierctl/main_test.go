package main

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/tierlog/tierlog/testing/fixtures"
)

func tierctl(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var o, e bytes.Buffer
	code = run(args, &o, &e)
	return code, o.String(), e.String()
}

func copyDir(t *testing.T, src string) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), filepath.Base(src))
	if err := os.CopyFS(dst, os.DirFS(src)); err != nil {
		t.Fatal(err)
	}
	return dst
}

func TestDumpFixtureSegment(t *testing.T) {
	dir := fixtures.Path(t, "ldi-poc/__consumer_offsets-6")
	code, out, errOut := tierctl(t, "dump", filepath.Join(dir, "00000000000000000000.log"))
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2+13 {
		t.Fatalf("%d lines, want a header, the starting offset and 13 batch lines:\n%s", len(lines), out)
	}
	if !strings.HasPrefix(lines[2], "baseOffset: 0 lastOffset: 0 count: 1 baseSequence: -1 lastSequence: -1 producerId: -1") ||
		!strings.Contains(lines[2], " position: 0 CreateTime: ") || !strings.HasSuffix(lines[2], "magic: 2 compresscodec: none crc: "+lines[2][strings.LastIndex(lines[2], "crc: ")+5:]) ||
		!strings.Contains(lines[2], "isvalid: true") {
		t.Fatalf("first batch line not in kafka-dump-log's format: %s", lines[2])
	}
	code, out, _ = tierctl(t, "dump", filepath.Join(dir, "00000000000000000000.index"), filepath.Join(dir, "00000000000000000000.timeindex"))
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	for _, want := range []string{"offset: 3 position: 4730\n", "offset: 7 position: 9571\n",
		"timestamp: 1769791783399 offset: 3\n", "timestamp: 1769793578176 offset: 12\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("index dump lacks %q:\n%s", want, out)
		}
	}
}

func TestDumpJSONAndPrintData(t *testing.T) {
	p := fixtures.Path(t, "kafkalite-legacy/tests/test-data/fs-data/hamlet-gzip-0/00000000000000000000.log")
	code, out, _ := tierctl(t, "dump", "--json", "--print-data", p)
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	batches, records := 0, 0
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("not JSON: %q: %v", l, err)
		}
		if _, ok := m["isValid"]; ok {
			batches++
			if m["compressCodec"] != "gzip" || m["isValid"] != true {
				t.Fatalf("batch %v", m)
			}
		} else if _, ok := m["payload"]; ok {
			records++
		}
	}
	if batches != 22 || records != 5382 {
		t.Fatalf("%d batches and %d records, want 22 and 5382", batches, records)
	}
}

func TestVerifyFixtures(t *testing.T) {
	for _, rel := range []string{
		"ldi-poc/__consumer_offsets-6",
		"ldi-poc",
		"kafka-starter-windows/kafka-logs",
		"kafkalite-legacy/tests/test-data/fs-data",
		"ldi-poc/__consumer_offsets-6/00000000000000000000.index",
	} {
		code, out, errOut := tierctl(t, "verify", fixtures.Path(t, rel))
		if code != 0 || !strings.Contains(out, ": 0 with problems") {
			t.Errorf("verify %s: exit %d\n%s%s", rel, code, out, errOut)
		}
	}
}

func TestVerifyFindsDamage(t *testing.T) {
	src := fixtures.Path(t, "ldi-poc/__consumer_offsets-6")
	cases := []struct {
		name string
		mut  func(dir string)
		want string
	}{
		{"flipped byte", func(dir string) {
			p := filepath.Join(dir, "00000000000000000000.log")
			b, _ := os.ReadFile(p)
			b[5000] ^= 0x40
			os.WriteFile(p, b, 0o644)
		}, "crc mismatch at position"},
		{"torn tail", func(dir string) {
			p := filepath.Join(dir, "00000000000000000000.log")
			b, _ := os.ReadFile(p)
			os.WriteFile(p, b[:len(b)-100], 0o644)
		}, "torn tail"},
		{"index entry off by one", func(dir string) {
			p := filepath.Join(dir, "00000000000000000000.index")
			b, _ := os.ReadFile(p)
			binary.BigEndian.PutUint32(b[0:], 4) // offset 4 instead of 3
			os.WriteFile(p, b, 0o644)
		}, "entry 0: offset 4, but the batch at position 4730 ends at offset 3"},
		{"time index timestamp", func(dir string) {
			p := filepath.Join(dir, "00000000000000000000.timeindex")
			b, _ := os.ReadFile(p)
			b[7]++
			os.WriteFile(p, b, 0o644)
		}, "has max timestamp"},
		{"orphan index", func(dir string) {
			os.WriteFile(filepath.Join(dir, "00000000000000000099.index"), make([]byte, 8), 0o644)
		}, "index file without its 00000000000000000099.log"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := copyDir(t, src)
			c.mut(dir)
			code, out, _ := tierctl(t, "verify", dir)
			if code != 1 || !strings.Contains(out, c.want) {
				t.Fatalf("exit %d, want 1 and %q in:\n%s", code, c.want, out)
			}
			code, out, _ = tierctl(t, "verify", "--json", dir)
			if code != 1 {
				t.Fatalf("--json: exit %d", code)
			}
			found := false
			for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
				var r fileReport
				if err := json.Unmarshal([]byte(l), &r); err != nil {
					t.Fatalf("not JSON: %q", l)
				}
				for _, p := range r.Problems {
					found = found || strings.Contains(p, c.want)
				}
			}
			if !found {
				t.Fatalf("--json output lacks %q:\n%s", c.want, out)
			}
		})
	}
}

func TestUsageErrors(t *testing.T) {
	dir := t.TempDir()
	other := filepath.Join(dir, "notes.txt")
	os.WriteFile(other, []byte("hi"), 0o644)
	idx := filepath.Join(dir, "my.index")
	os.WriteFile(idx, make([]byte, 8), 0o644)
	for _, args := range [][]string{
		{"dump"},
		{"verify"},
		{"dump", "--no-such-flag", other},
		{"dump", filepath.Join(dir, "missing.log")},
		{"dump", other},
		{"dump", idx}, // base offset not in the name
		{"verify", filepath.Join(dir, "missing")},
		{"demo", "extra"},
		{"no-such-command"},
	} {
		code, _, errOut := tierctl(t, args...)
		if code != 2 || !strings.HasPrefix(errOut, "tierctl: ") {
			t.Errorf("%v: exit %d, stderr %q; want 2 and a message", args, code, errOut)
		}
	}
	if code, _, _ := tierctl(t, "dump", "--base-offset", "0", idx); code != 0 {
		t.Errorf("dump with --base-offset: exit %d", code)
	}
}

// TestDemo runs the demo with the reference broker for step 10 (built by
// brokerBinary); TestDemoWithoutBroker runs it without.
func TestDemo(t *testing.T) {
	broker := brokerBinary(t)
	dir := t.TempDir()
	code, out, errOut := tierctl(t, "demo", "--records", "5000", "--keep", "--dir", dir, "--broker", broker)
	if code != 0 || !strings.Contains(out, "0 with problems") || !strings.Contains(out, "5000 of 5000 records") ||
		!strings.Contains(out, "keys once, at its latest offset") || !strings.Contains(out, "consumed them back in order") {
		t.Fatalf("exit %d\n%s%s", code, out, errOut)
	}
	// What the demo wrote verifies on its own.
	if code, out, _ := tierctl(t, "verify", filepath.Join(dir, "logs")); code != 0 {
		t.Fatalf("verify of the demo's files: exit %d\n%s", code, out)
	}
	// --json: the measured summary alone.
	code, out, errOut = tierctl(t, "demo", "--records", "8000", "--json", "--broker", broker)
	var sum demoSummary
	if err := json.Unmarshal([]byte(out), &sum); code != 0 || err != nil || sum.RecordsRead != 8000 || sum.RemoteSegments == 0 ||
		sum.Requests["put"] == 0 || len(sum.Lookups) != 3 || sum.FilesVerified == 0 || sum.FilesWithProblems != 0 ||
		sum.BrokerRecords != 8000 || sum.BrokerSkipped != "" {
		t.Fatalf("demo --json: exit %d %v\n%s%s", code, err, out, errOut)
	}
	// Without --keep nothing is left behind, the broker's directory
	// neither.
	dir2 := t.TempDir()
	if code, out, errOut := tierctl(t, "demo", "--records", "1000", "--dir", filepath.Join(dir2, "d"), "--broker", broker); code != 0 {
		t.Fatalf("demo failed: exit %d\n%s%s", code, out, errOut)
	}
	if _, err := os.Stat(filepath.Join(dir2, "d")); !os.IsNotExist(err) {
		t.Fatalf("demo left %s behind", filepath.Join(dir2, "d"))
	}
}

// TestBinary builds tierctl and runs it as a user would.
func TestBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := filepath.Join(t.TempDir(), "tierctl")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "--help").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "verify") || !strings.Contains(string(out), "dump") {
		t.Fatalf("--help: %v\n%s", err, out)
	}
	cmd := exec.Command(bin, "verify", "/nonexistent/path")
	err = cmd.Run()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 {
		t.Fatalf("verify of a missing path: %v, want exit 2", err)
	}
	dir := t.TempDir()
	if out, err := exec.Command(bin, "demo", "--records", "2000", "--keep", "--dir", dir).CombinedOutput(); err != nil {
		t.Fatalf("demo: %v\n%s", err, out)
	}
	seg := filepath.Join(dir, "logs", "orders-0", "00000000000000000000.log")
	b, _ := os.ReadFile(seg)
	b[len(b)/2] ^= 1
	os.WriteFile(seg, b, 0o644)
	cmd = exec.Command(bin, "verify", seg)
	out, err = cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !strings.Contains(string(out), "FAIL") {
		t.Fatalf("verify of a damaged segment: %v, want exit 1\n%s", err, out)
	}
}

func TestProduceConsumeLookup(t *testing.T) {
	logs := t.TempDir()
	code, out, errOut := tierctl(t, "produce", logs, "--partition", "orders-2", "--count", "20000",
		"--record-size", "200", "--key-space", "100", "--config", "segment.bytes=1048576", "--json")
	if code != 0 {
		t.Fatalf("produce: exit %d: %s", code, errOut)
	}
	var sum map[string]any
	if err := json.Unmarshal([]byte(out), &sum); err != nil || sum["records"] != float64(20000) || sum["lastOffset"] != float64(19999) {
		t.Fatalf("produce --json: %v %q", err, out)
	}
	part := filepath.Join(logs, "orders-2")
	if code, out, _ := tierctl(t, "verify", part); code != 0 {
		t.Fatalf("verify of a produced partition: exit %d\n%s", code, out)
	}
	// consume: text, JSON, quiet.
	code, out, _ = tierctl(t, "consume", part, "--from", "19998")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 2 || !strings.HasPrefix(lines[0], "offset: 19998 timestamp: ") || !strings.Contains(lines[0], " key: key-") {
		t.Fatalf("consume: exit %d\n%s", code, out)
	}
	code, out, _ = tierctl(t, "consume", part, "--from", "100", "--count", "3", "--json")
	lines = strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 3 {
		t.Fatalf("consume --json: exit %d\n%s", code, out)
	}
	var rec struct {
		Offset    int64  `json:"offset"`
		Timestamp int64  `json:"timestamp"`
		Key       string `json:"key"`
		Value     string `json:"value"`
	}
	if err := json.Unmarshal([]byte(lines[2]), &rec); err != nil || rec.Offset != 102 || len(rec.Value) != 200 || rec.Timestamp == 0 {
		t.Fatalf("consume --json record: %v %+v", err, rec)
	}
	if code, out, _ = tierctl(t, "consume", part, "--quiet"); code != 0 || strings.TrimSpace(out) != "20000" {
		t.Fatalf("consume --quiet: exit %d %q", code, out)
	}
	// lookup by offset and by timestamp.
	code, out, _ = tierctl(t, "lookup", part, "--offset", "10000")
	if code != 0 || !strings.Contains(out, "step 1: binary search over") || !strings.Contains(out, "step 2:") || !strings.Contains(out, "found:  batch ") {
		t.Fatalf("lookup: exit %d\n%s", code, out)
	}
	code, out, _ = tierctl(t, "lookup", part, "--offset", "10000", "--json")
	var lr map[string]any
	if err := json.Unmarshal([]byte(out), &lr); err != nil || code != 0 {
		t.Fatalf("lookup --json: %v %q", err, out)
	}
	batch := lr["batch"].(map[string]any)
	if batch["baseOffset"].(float64) > 10000 || batch["lastOffset"].(float64) < 10000 {
		t.Fatalf("lookup found %v", batch)
	}
	code, out, _ = tierctl(t, "lookup", part, "--timestamp", fmt.Sprint(rec.Timestamp), "--json")
	if err := json.Unmarshal([]byte(out), &lr); err != nil || code != 0 || lr["found"] != true || lr["offset"].(float64) > 102 {
		t.Fatalf("lookup --timestamp: %v %q", err, out)
	}
	if code, out, _ = tierctl(t, "lookup", part, "--timestamp", "99999999999999"); code != 0 || !strings.Contains(out, "no record") {
		t.Fatalf("lookup of a future timestamp: exit %d %q", code, out)
	}
	// Usage errors name what was wrong.
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"produce", logs, "--partition", "orders-0", "--count", "1", "--config", "segment.bytez=1"}, "segment.bytez"},
		{[]string{"produce", logs, "--partition", "orders-0", "--count", "1", "--codec", "brotli"}, "brotli"},
		{[]string{"produce", logs, "--partition", "bad/name-0", "--count", "1"}, "bad/name"},
		{[]string{"produce", logs, "--count", "1"}, "--partition"},
		{[]string{"lookup", part}, "exactly one"},
		{[]string{"lookup", part, "--offset", "1", "--timestamp", "1"}, "exactly one"},
		{[]string{"lookup", part, "--offset", "20000"}, "out of range"},
		{[]string{"consume", part, "--from", "30000"}, "out of range"},
		{[]string{"consume", filepath.Join(logs, "nope-0")}, "not found"},
	} {
		code, _, errOut := tierctl(t, c.args...)
		if code != 2 || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", c.args, code, errOut, c.want)
		}
	}
}

// TestConsumeKafkaFixtureReadOnly reads a real Kafka partition in place and
// checks that not a byte of it changed.
func TestConsumeKafkaFixtureReadOnly(t *testing.T) {
	part := fixtures.Path(t, "kafka-starter-windows/kafka-logs/test-0")
	snapshot := func() string {
		var b strings.Builder
		ents, _ := os.ReadDir(part)
		for _, e := range ents {
			data, _ := os.ReadFile(filepath.Join(part, e.Name()))
			info, _ := e.Info()
			fmt.Fprintf(&b, "%s %x %v\n", e.Name(), data, info.ModTime())
		}
		return b.String()
	}
	before := snapshot()
	defer func() {
		if snapshot() != before {
			t.Error("reading the Kafka fixture changed its files")
		}
	}()
	code, out, errOut := tierctl(t, "consume", part, "--quiet")
	if code != 0 || strings.TrimSpace(out) != "97" {
		t.Fatalf("consume of a Kafka partition: exit %d %q %s", code, out, errOut)
	}
	code, out, _ = tierctl(t, "lookup", part, "--offset", "50")
	if code != 0 || !strings.Contains(out, "found:") {
		t.Fatalf("lookup in a Kafka partition: exit %d %q", code, out)
	}
}

func TestOffloadLsManifestConsume(t *testing.T) {
	root := t.TempDir()
	logs, bucket := filepath.Join(root, "logs"), filepath.Join(root, "bucket")
	if code, _, errOut := tierctl(t, "produce", logs, "--partition", "orders-0", "--count", "20000", "--record-size", "200",
		"--config", "segment.bytes=1048576"); code != 0 {
		t.Fatalf("produce: %s", errOut)
	}
	part := filepath.Join(logs, "orders-0")
	store := "file://" + bucket + "?create=true"
	code, out, errOut := tierctl(t, "offload", part, "--store", store, "--config", "local.retention.ms=0", "--json")
	if code != 0 {
		t.Fatalf("offload: exit %d %s", code, errOut)
	}
	var res map[string]any
	if err := json.Unmarshal([]byte(out), &res); err != nil || res["uploaded"].(float64) < 3 || res["localSegmentsDeleted"] != res["uploaded"] {
		t.Fatalf("offload --json: %v %q", err, out)
	}
	code, out, _ = tierctl(t, "ls", part, "--store", "file://"+bucket)
	if code != 0 || strings.Count(out, "remote ") < 3 || !strings.Contains(out, "local (active)") {
		t.Fatalf("ls: exit %d\n%s", code, out)
	}
	if code, out, _ = tierctl(t, "manifest", "verify", "--store", "file://"+bucket, "--partition", "orders-0", "--deep"); code != 0 || !strings.Contains(out, " 0 problems") {
		t.Fatalf("manifest verify: exit %d\n%s", code, out)
	}
	code, out, _ = tierctl(t, "manifest", "show", "--store", "file://"+bucket, "--partition", "orders-0", "--json")
	if code != 0 || !strings.Contains(out, `"Segments"`) {
		t.Fatalf("manifest show --json: exit %d %q", code, out)
	}
	if code, out, _ = tierctl(t, "consume", part, "--store", "file://"+bucket, "--quiet"); code != 0 || strings.TrimSpace(out) != "20000" {
		t.Fatalf("consume through both tiers: exit %d %q", code, out)
	}
	code, out, _ = tierctl(t, "lookup", part, "--store", "file://"+bucket, "--offset", "1234")
	if code != 0 || !strings.Contains(out, "is offloaded") || !strings.Contains(out, "segments in the manifest") || !strings.Contains(out, "found:  batch") {
		t.Fatalf("lookup --store of an offloaded offset: exit %d\n%s", code, out)
	}
	// A missing object is reported, exit 1.
	ents, _ := os.ReadDir(filepath.Join(bucket, "orders-0"))
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".index") {
			os.Remove(filepath.Join(bucket, "orders-0", e.Name()))
			break
		}
	}
	if code, out, _ = tierctl(t, "manifest", "verify", "--store", "file://"+bucket, "--partition", "orders-0"); code != 1 || !strings.Contains(out, "problem:") {
		t.Fatalf("manifest verify with a missing object: exit %d\n%s", code, out)
	}
	// Usage errors.
	for _, args := range [][]string{
		{"offload", part},
		{"offload", part, "--store", "ftp://nowhere"},
		{"offload", filepath.Join(root, "not-a-partition"), "--store", store},
		{"manifest", "show", "--store", "file://" + bucket, "--partition", "no-dash"},
	} {
		if code, _, errOut := tierctl(t, args...); code != 2 {
			t.Errorf("%v: exit %d (%s), want 2", args, code, errOut)
		}
	}
}

func TestRestoreAndGCCommands(t *testing.T) {
	root := t.TempDir()
	logs, bucket := filepath.Join(root, "logs"), filepath.Join(root, "bucket")
	tierctl(t, "produce", logs, "--partition", "orders-0", "--count", "20000", "--record-size", "200", "--config", "segment.bytes=1048576")
	part := filepath.Join(logs, "orders-0")
	if code, _, errOut := tierctl(t, "offload", part, "--store", "file://"+bucket+"?create=true"); code != 0 {
		t.Fatalf("offload: %s", errOut)
	}
	_, out, _ := tierctl(t, "manifest", "show", "--store", "file://"+bucket, "--partition", "orders-0", "--json")
	var m struct {
		Segments []struct{ LastOffset int64 }
	}
	json.Unmarshal([]byte(out), &m)
	remoteEnd := m.Segments[len(m.Segments)-1].LastOffset + 1
	if code, out, _ := tierctl(t, "gc", "--store", "file://"+bucket, "--partition", "orders-0", "--grace", "0s", "--force", "--dry-run"); code != 0 || !strings.Contains(out, "would delete 0 object(s)") {
		t.Fatalf("gc --dry-run on a clean bucket: %d %q", code, out)
	}
	os.RemoveAll(part) // the disk is lost
	code, out, errOut := tierctl(t, "restore", logs, "--store", "file://"+bucket, "--partition", "orders-0")
	if code != 0 || !strings.Contains(out, "restored ") {
		t.Fatalf("restore: exit %d %q %s", code, out, errOut)
	}
	if code, out, _ := tierctl(t, "consume", part, "--quiet"); code != 0 || strings.TrimSpace(out) != fmt.Sprint(remoteEnd) {
		t.Fatalf("consume after restore: %q, want %d records", out, remoteEnd)
	}
	if code, out, _ := tierctl(t, "verify", part); code != 0 {
		t.Fatalf("verify after restore: %s", out)
	}
	if code, _, _ := tierctl(t, "restore", logs, "--store", "file://"+bucket, "--partition", "orders-0"); code == 0 {
		t.Fatal("restore over an existing partition directory succeeded")
	}
}

func TestCompact(t *testing.T) {
	logs := t.TempDir()
	if code, _, errOut := tierctl(t, "produce", logs, "--partition", "users-0", "--count", "30000", "--record-size", "100",
		"--key-space", "500", "--config", "segment.bytes=262144"); code != 0 {
		t.Fatalf("produce: exit %d: %s", code, errOut)
	}
	part := filepath.Join(logs, "users-0")
	snapshot := func() map[string]int64 {
		m := map[string]int64{}
		ents, _ := os.ReadDir(part)
		for _, e := range ents {
			if fi, err := e.Info(); err == nil {
				m[e.Name()] = fi.Size()
			}
		}
		return m
	}
	before := snapshot()

	// A dry run reports and changes nothing.
	code, out, errOut := tierctl(t, "compact", part, "--dry-run", "--config", "segment.bytes=262144", "--json")
	var dry map[string]any
	if code != 0 || json.Unmarshal([]byte(out), &dry) != nil || dry["recordsRemoved"].(float64) == 0 || dry["dryRun"] != true {
		t.Fatalf("compact --dry-run: exit %d %s\n%s", code, errOut, out)
	}
	if after := snapshot(); !maps.Equal(before, after) {
		t.Fatalf("a dry run changed the partition:\n%v\n%v", before, after)
	}
	if _, err := os.Stat(filepath.Join(logs, "cleaner-offset-checkpoint")); err == nil {
		t.Fatal("a dry run wrote the cleaner checkpoint")
	}

	if code, _, errOut := tierctl(t, "compact", part); code != 2 || !strings.Contains(errOut, "cleanup.policy=compact") {
		t.Fatalf("compact without the topic's cleanup.policy: exit %d %s", code, errOut)
	}
	code, out, errOut = tierctl(t, "compact", part, "--config", "segment.bytes=262144", "--config", "cleanup.policy=compact", "--json")
	var res map[string]any
	if code != 0 || json.Unmarshal([]byte(out), &res) != nil || res["recordsRemoved"] != dry["recordsRemoved"] {
		t.Fatalf("compact: exit %d %s\n%s (dry run said %v)", code, errOut, out, dry["recordsRemoved"])
	}
	if code, out, _ := tierctl(t, "verify", part); code != 0 {
		t.Fatalf("verify after compact: exit %d\n%s", code, out)
	}
	// Each key once below the cleaned end, plus the uncleaned active segment.
	code, out, _ = tierctl(t, "consume", part, "--quiet")
	n, _ := strconv.Atoi(strings.Fields(out)[0])
	if code != 0 || n != 30000-int(res["recordsRemoved"].(float64)) {
		t.Fatalf("consume after compact: exit %d, %q", code, out)
	}
	if code, out, _ := tierctl(t, "compact", part, "--config", "cleanup.policy=compact,delete"); code != 0 || !strings.Contains(out, "nothing to clean") {
		t.Fatalf("a second compact: exit %d\n%s", code, out)
	}
	if code, _, errOut := tierctl(t, "compact", part, "--memory", "10"); code != 2 || !strings.Contains(errOut, "memory") {
		t.Fatalf("--memory 10: exit %d %s", code, errOut)
	}
}

// TestVerifyStore: verify --store checks a bucket's objects against their
// manifests; --deep re-reads them and finds a flipped byte the sizes
// cannot show.
func TestVerifyStore(t *testing.T) {
	root := t.TempDir()
	logs, bucket := filepath.Join(root, "logs"), filepath.Join(root, "bucket")
	for _, topic := range []string{"orders", "payments"} {
		if code, _, errOut := tierctl(t, "produce", logs, "--partition", topic+"-0", "--count", "20000", "--record-size", "200",
			"--config", "segment.bytes=1048576"); code != 0 {
			t.Fatalf("produce: %s", errOut)
		}
		if code, _, errOut := tierctl(t, "offload", filepath.Join(logs, topic+"-0"), "--store", "file://"+bucket+"?create=true"); code != 0 {
			t.Fatalf("offload: %s", errOut)
		}
	}
	store := "file://" + bucket
	// Every partition in the bucket, shallow and deep.
	for _, deep := range []bool{false, true} {
		args := []string{"verify", "--store", store, "--json"}
		if deep {
			args = append(args, "--deep")
		}
		code, out, errOut := tierctl(t, args...)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if code != 0 || len(lines) < 12 {
			t.Fatalf("%v: exit %d, %d reports\n%s%s", args, code, len(lines), out, errOut)
		}
		var seen = map[string]bool{}
		for _, l := range lines {
			var r fileReport
			if err := json.Unmarshal([]byte(l), &r); err != nil || len(r.Problems) > 0 {
				t.Fatalf("%v: %v %s", args, err, l)
			}
			seen[strings.Split(r.Path, "/")[0]] = true
			if deep && r.Kind == "log" && r.Records == 0 {
				t.Fatalf("deep report without records: %s", l)
			}
		}
		if !seen["orders-0"] || !seen["payments-0"] {
			t.Fatalf("%v checked %v", args, seen)
		}
	}
	// Flip a byte of one remote log: same size, so only --deep sees it.
	ents, _ := os.ReadDir(filepath.Join(bucket, "orders-0"))
	var victim string
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".log") {
			victim = filepath.Join(bucket, "orders-0", e.Name())
			break
		}
	}
	b, _ := os.ReadFile(victim)
	b[len(b)/3] ^= 1
	os.WriteFile(victim, b, 0o644)
	if code, out, _ := tierctl(t, "verify", "--store", store, "--partition", "orders-0"); code != 0 {
		t.Fatalf("shallow verify of a same-size damage: exit %d\n%s", code, out)
	}
	code, out, _ := tierctl(t, "verify", filepath.Join(logs, "orders-0"), "--store", store, "--deep")
	if code != 1 || !strings.Contains(out, "FAIL orders-0/"+filepath.Base(victim)) || !strings.Contains(out, "CRC-32C") || strings.Contains(out, "payments-0/") {
		t.Fatalf("deep verify of a damaged object: exit %d\n%s", code, out)
	}
	os.Remove(victim)
	if code, out, _ := tierctl(t, "verify", "--store", store, "--partition", "orders-0"); code != 1 || !strings.Contains(out, "FAIL orders-0/"+filepath.Base(victim)) {
		t.Fatalf("shallow verify of a missing object: exit %d\n%s", code, out)
	}
	for _, args := range [][]string{{"verify"}, {"verify", "--deep", logs}, {"verify", "--store", store, "--partition", "nodash"}, {"verify", "--store", "gopher://x"}} {
		if code, _, errOut := tierctl(t, args...); code != 2 {
			t.Errorf("%v: exit %d (%s), want 2", args, code, errOut)
		}
	}
}
