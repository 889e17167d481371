package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestSmoke runs every row of bench-compare on a small log, each in this
// process as its child would: every system and the baselines through the
// whole workload (every record reads back, as runSystem checks values as
// it reads and scans, and a crash image reopens with its last record),
// the broker shapes, the cleaner and, when a versitygw binary is at hand,
// the remote reads under load; each figure comes out, and the report has
// every row with its goal.
func TestSmoke(t *testing.T) {
	const n, reads = 30_000, 3_000
	byKind := map[string][]result{}
	for _, s := range systems {
		res, err := runSystem(s.name, s.open, filepath.Join(t.TempDir(), "s"), n, reads)
		if err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if res.AppendMBps <= 0 || res.ReadsPerSec <= 0 || res.ReadP50us <= 0 || res.ScanMBps <= 0 ||
			res.ReopenCleanMs <= 0 || res.ReopenCrashMs <= 0 || res.PeakRSSMB <= 0 || res.Note != "" {
			t.Fatalf("%s: %+v", s.name, res)
		}
		if (res.SyncAppendMBp > 0) == strings.HasPrefix(s.name, "liftbridge") {
			t.Fatalf("%s: durable append %v (liftbridge has no fsync API; every other system does)", s.name, res.SyncAppendMBp)
		}
		byKind[s.name] = []result{res}
	}
	if v := byKind["tierlog"][0].Values["scanSocketMBps"]; v <= 0 {
		t.Fatalf("tierlog's scan to a socket: %v", v)
	}
	base, err := runBaselines(filepath.Join(t.TempDir(), "b"), n)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range machineRows {
		if base.Values[r.key] <= 0 {
			t.Fatalf("baseline %s: %v", r.key, base.Values[r.key])
		}
	}
	byKind["baseline"] = []result{base}
	shapes(t, byKind, n)
	var md bytes.Buffer
	parts := []result{{Values: map[string]float64{"openMs": 500}, PeakRSSMB: 40}}
	tiered := []benchLine{{label: "offload", unit: "MB/s", values: []float64{100, 90, 110}, goal: "offload >= 0.9x raw PutObject", goalFigure: "1.00x | met"}}
	report(&md, byKind, parts, tiered, n, 1, reads, time.Second)
	out := md.String()
	for _, want := range []string{"| tierlog |", "| hashicorp/raft-wal v0.4.0 |", "sendfile(2)", "| 10,000 partitions open < 1 s | 500 ms | met |",
		"| offload | 100 (90.0–110) MB/s |", "| append >= 0.8x raw page-cache write |",
		"fdatasync every 1,000 records", "| produce-shaped append: 4 batches", "| flush.messages=1:", "| tierlog: Read, then Records.WriteTo the socket |",
		"| compaction.Clean of a rolled log", "| fetch-shaped reads >= 0.8x raw sendfile of the same ranges |", "| key compaction >= 250 MB/s |"} {
		if !strings.Contains(out, want) {
			t.Errorf("the report lacks %q:\n%s", want, out)
		}
	}
	if _, ok := byKind["remote-tiered"]; ok {
		for _, want := range []string{"| tiered.Backend, its default caches", "| raw: ranged GETs of 1 MiB", "| remote reads under load >= 0.8x raw ranged GETs of the same objects |"} {
			if !strings.Contains(out, want) {
				t.Errorf("the report lacks %q:\n%s", want, out)
			}
		}
	}
	for _, line := range strings.Split(out, "\n") {
		// liftbridge has no durable-append figure; every other is measured.
		if strings.Contains(line, "n/a") && !strings.HasPrefix(line, "| liftbridge") {
			t.Errorf("a figure is missing (n/a): %s", line)
		}
	}
}

// shapes runs the broker shapes, the cleaner and (when a versitygw binary
// is at hand) the remote reads under load on a small log, each as its
// child process would, and checks that every figure comes out.
func shapes(t *testing.T, byKind map[string][]result, n int64) {
	check := func(kind string, res result, keys ...string) {
		t.Helper()
		for _, k := range keys {
			if res.Values[k] <= 0 {
				t.Fatalf("%s: %s is %v: %+v", kind, k, res.Values[k], res)
			}
		}
		if res.PeakRSSMB <= 0 {
			t.Fatalf("%s: no peak RSS", kind)
		}
		byKind[kind] = []result{res}
	}
	res, err := runBroker(filepath.Join(t.TempDir(), "broker"), n, fetchConsumers, 4)
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, k := range []string{"produce", "produceFlush", "flushMessages1", "many", "manyFlush", "fetch", "rawSendfile"} {
		keys = append(keys, k+"MBps", k+"P50us", k+"P99us")
	}
	check("broker", res, keys...)

	dir := t.TempDir()
	if err := cleanSetup(dir, n*100); err != nil {
		t.Fatal(err)
	}
	if res, err = runClean(dir); err != nil {
		t.Fatal(err)
	}
	check("clean", res, "cleanMBps", "cleanInputMB", "cleanKeys", "cleanOutIn")

	if os.Getenv("TIERLOG_VERSITYGW") == "" {
		p, err := filepath.Abs("../.cache/bin/versitygw")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(p); err != nil {
			t.Logf("remote reads not run: no $TIERLOG_VERSITYGW and no %s (make s3servers)", p)
			return
		}
		t.Setenv("TIERLOG_VERSITYGW", p)
	}
	t.Setenv(envS3, "") // startS3 sets it
	srv, err := startS3(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	dir = t.TempDir()
	if err := remoteSetup(dir, n); err != nil {
		t.Fatal(err)
	}
	if res, err = runRemoteTiered(dir); err != nil {
		t.Fatal(err)
	}
	check("remote-tiered", res, "remoteMBps", "remoteP50us", "remoteP99us", "remoteOpenRSSMB")
	if res, err = runRemoteRaw(dir); err != nil {
		t.Fatal(err)
	}
	check("remote-raw", res, "rawGetMBps", "rawGetP50us", "rawGetP99us")
}

func TestUpdateFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "B.md")
	os.WriteFile(p, []byte("intro\n<!-- results: begin -->\nold\n<!-- results: end -->\noutro\n"), 0o644)
	if err := updateFile(p, []byte("new\n")); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(p)
	if string(b) != "intro\n<!-- results: begin -->\nnew\n<!-- results: end -->\noutro\n" {
		t.Fatalf("%q", b)
	}
	if err := updateFile(filepath.Join(t.TempDir(), "none.md"), nil); err == nil {
		t.Fatal("a missing file updated")
	}
}
