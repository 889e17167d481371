package broker_test

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tierlog/tierlog/examples/broker/broker"
	"github.com/tierlog/tierlog/local"
)

// TestCompactedTopicWithKcat is TestCompactedTopicStaysReadable with
// librdkafka's client, kcat, as the issue saw it: keyed records produced
// without a producer id (-K:, batch.size=16000, acks=all) in rounds over a
// small key set, the cleaner run, then a consumer from the beginning
// reads to the end and gets every key's latest value. It used to stop
// with "Message at offset ... might be too large to fetch": every cleaned
// segment held one empty batch, and each fetch returned only that.
func TestCompactedTopicWithKcat(t *testing.T) {
	kcat, err := exec.LookPath("kcat")
	if err != nil {
		t.Skip("kcat is not installed (the Debian package kcat): skipping the librdkafka check")
	}
	dir := t.TempDir()
	opts := testOptions(dir)
	opts.CleanerBackoff = time.Hour // the test runs the cleaner itself
	b := startBroker(t, opts)
	topic := "compacted-kcat"
	pdir := filepath.Join(dir, "logs", topic+"-0")
	createTopic(t, newClient(t, b.Addr()), topic, 1, compactTopicConfig)
	const keys = 400
	latest := map[string]string{}
	produce := func(round, n int) {
		var in bytes.Buffer
		for i := range n {
			k := fmt.Sprintf("key-%03d", i%keys)
			v := fmt.Sprintf("round-%d-record-%04d-%s", round, i, strings.Repeat("v", 64))
			fmt.Fprintf(&in, "%s:%s\n", k, v)
			latest[k] = v
		}
		runKcat(t, kcat, &in, "-P", "-b", b.Addr(), "-t", topic, "-K:", "-X", "batch.size=16000", "-X", "acks=all")
	}
	consume := func(when string) {
		out := runKcat(t, kcat, nil, "-C", "-b", b.Addr(), "-t", topic, "-o", "beginning", "-e", "-q", "-f", "%k:%s\n")
		got := map[string]string{}
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			k, v, ok := strings.Cut(line, ":")
			if !ok {
				t.Fatalf("%s: kcat printed %q", when, line)
			}
			got[k] = v
		}
		for k, v := range latest {
			if got[k] != v {
				t.Fatalf("%s: key %s reads %q, its latest value is %q", when, k, got[k], v)
			}
		}
	}
	// Five rounds, then one clean: the first four rounds' segments keep
	// nothing.
	for round := range 5 {
		produce(round, 4000)
	}
	consume("before the clean")
	cleanNow(t, b, pdir)
	consume("after the clean")
	// Another round and clean: the cleaned segments are cleaned again.
	produce(5, 4000)
	cleanNow(t, b, pdir)
	consume("after the second clean")
}

// cleanNow runs the broker's cleaner until it has cleaned the partition in
// dir up to its active segment, as its cleaner-offset-checkpoint says.
func cleanNow(t *testing.T, b *broker.Broker, dir string) {
	t.Helper()
	tp, err := local.ParsePartitionDirName(filepath.Base(dir))
	if err != nil {
		t.Fatal(err)
	}
	for range 100 {
		if _, err := b.Cleaner().RunOnce(context.Background()); err != nil {
			t.Fatal(err)
		}
		cp, err := local.ReadOffsetCheckpoint(filepath.Join(filepath.Dir(dir), local.CleanerCheckpoint))
		if err != nil {
			t.Fatal(err)
		}
		if cp[tp] == activeBase(t, dir) {
			return
		}
	}
	t.Fatalf("100 rounds of the cleaner did not reach the active segment of %s: %+v", dir, b.Cleaner().Stats())
}

// runKcat runs kcat with args and stdin, and returns its output; a
// failure, an error on its stderr or a minute without an end fails the
// test.
func runKcat(t *testing.T, kcat string, stdin *bytes.Buffer, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, kcat, args...)
	if stdin != nil {
		cmd.Stdin = stdin
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("kcat %s did not end in a minute; it said:\n%s", strings.Join(args, " "), stderr.String())
	}
	if err != nil || strings.Contains(stderr.String(), "ERROR") {
		t.Fatalf("kcat %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String()
}
