package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// brokerBinary builds the reference broker (examples/broker) once per test
// binary, for demo's step 10: tierctl runs it as its own process.
func brokerBinary(t testing.TB) string { return brokerBin.get(t) }

// TestDemoWithoutBroker: without --broker, or with a mem:// bucket the
// broker's process could not see, step 10 says it is skipped and how to
// run it, the demo still exits 0, and --json's brokerRecords is 0.
func TestDemoWithoutBroker(t *testing.T) {
	code, out, errOut := tierctl(t, "demo", "--records", "1000")
	if code != 0 || !strings.Contains(out, "10. A Kafka client through the reference broker") ||
		!strings.Contains(out, "skipped: no --broker") || !strings.Contains(out, "make demo builds it and passes --broker") ||
		strings.Contains(out, "consumed them back") {
		t.Fatalf("exit %d\n%s%s", code, out, errOut)
	}
	code, out, errOut = tierctl(t, "demo", "--records", "1000", "--json")
	var sum demoSummary
	if err := json.Unmarshal([]byte(out), &sum); code != 0 || err != nil || sum.BrokerRecords != 0 || sum.BrokerSkipped == "" {
		t.Fatalf("demo --json: exit %d %v\n%s%s", code, err, out, errOut)
	}
	// Step 11: the diskless topic's records all back after its log
	// directory was removed.
	if sum.DisklessRecords != 1000 || sum.DisklessRecordsBack != 1000 || sum.DisklessWALObjects < 1 {
		t.Fatalf("demo --json: diskless step %d records, %d back, %d WAL objects", sum.DisklessRecords, sum.DisklessRecordsBack, sum.DisklessWALObjects)
	}
	// --broker is checked before it is skipped, so any executable does:
	// this test binary, never started.
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	code, out, errOut = tierctl(t, "demo", "--records", "1000", "--store", "mem://demo-without-broker", "--broker", self)
	if code != 0 || !strings.Contains(out, "skipped: the broker runs as its own process, which cannot see this process's mem:// bucket") {
		t.Fatalf("with a mem:// bucket: exit %d\n%s%s", code, out, errOut)
	}
}

// TestDemoBrokerErrors: a --broker that is not there fails at once, exit 2,
// naming it; one that exits before it prints its address fails, naming it
// and with its output.
func TestDemoBrokerErrors(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "no-such-broker")
	code, out, errOut := tierctl(t, "demo", "--records", "1000", "--broker", missing)
	if code != 2 || out != "" || !strings.HasPrefix(errOut, "tierctl: --broker "+missing+": no such file") ||
		!strings.Contains(errOut, "./examples/broker") {
		t.Fatalf("--broker %s: exit %d, stdout %q, stderr %q; want 2 and a message naming it", missing, code, out, errOut)
	}
	if code, _, errOut := tierctl(t, "demo", "--records", "1000", "--broker", dir); code != 2 || !strings.Contains(errOut, dir+": a directory") {
		t.Fatalf("--broker DIR: exit %d, stderr %q", code, errOut)
	}
	if runtime.GOOS == "windows" {
		return
	}
	quits := filepath.Join(dir, "quits.sh")
	if err := os.WriteFile(quits, []byte("#!/bin/sh\necho 'cannot open --dir' >&2\nexit 3\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	code, _, errOut = tierctl(t, "demo", "--records", "1000", "--broker", quits)
	if code != 2 || !strings.Contains(errOut, "the broker "+quits+" exited (exit status 3) before it printed its address") ||
		!strings.Contains(errOut, "cannot open --dir") {
		t.Fatalf("a broker that exits at once: exit %d, stderr %q", code, errOut)
	}
}

// TestBrokerStoreURL: the broker's --store is the demo's bucket under
// demoBrokerPrefix, whatever the scheme.
func TestBrokerStoreURL(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"file:///tmp/d/bucket?create=true", "file:///tmp/d/bucket/demo/broker?create=true"},
		{"file:///tmp/d/bucket", "file:///tmp/d/bucket/demo/broker?create=true"},
		{"s3://bkt/tl?endpoint=http://127.0.0.1:9000&path-style=true", "s3://bkt/tl/demo/broker?endpoint=http://127.0.0.1:9000&path-style=true"},
		{"s3://bkt?region=eu-west-1", "s3://bkt/demo/broker?region=eu-west-1"},
		{"minio://bkt/a/b/?endpoint=http://127.0.0.1:9000", "minio://bkt/a/b/demo/broker?endpoint=http://127.0.0.1:9000"},
	} {
		if got, err := brokerStoreURL(c.in); err != nil || got != c.want {
			t.Errorf("brokerStoreURL(%s) = %s, %v; want %s", c.in, got, err, c.want)
		}
	}
}

// TestAddrWriter: the address is read from the first "listening on" line
// of the broker's stdout, however the writes split it.
func TestAddrWriter(t *testing.T) {
	addr := make(chan string, 1)
	tail := &tailBuffer{max: 16}
	w := &addrWriter{tail: tail, addr: addr}
	for _, s := range []string{"starting\nlisten", "ing on 127.0.0.1:", "4242\nlistening on 127.0.0.1:1\n"} {
		w.Write([]byte(s))
	}
	if got := <-addr; got != "127.0.0.1:4242" {
		t.Fatalf("address %q, want 127.0.0.1:4242", got)
	}
	if got := tail.String(); !strings.HasSuffix(got, "on 127.0.0.1:1\n") || !strings.Contains(got, "last 16 bytes") {
		t.Fatalf("tail %q", got)
	}
}
