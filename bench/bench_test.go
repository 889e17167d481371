package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestSmoke runs every system and the baselines through the whole
// workload on a small log: each figure comes out, every record reads back
// (runSystem checks values as it reads and scans), and a crash image
// reopens with its last record.
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
	for _, k := range []string{"write", "writeFsync", "sendfile", "crc32c", "copy"} {
		if base.Values[k] <= 0 {
			t.Fatalf("baseline %s: %v", k, base.Values[k])
		}
	}
	byKind["baseline"] = []result{base}
	var md bytes.Buffer
	parts := []result{{Values: map[string]float64{"openMs": 500}, PeakRSSMB: 40}}
	tiered := []benchLine{{label: "offload", unit: "MB/s", values: []float64{100, 90, 110}, goal: "offload >= 0.9x raw PutObject", goalFigure: "1.00x | met"}}
	report(&md, byKind, parts, tiered, n, 1, reads, time.Second)
	out := md.String()
	for _, want := range []string{"| tierlog |", "| hashicorp/raft-wal v0.4.0 |", "sendfile(2)", "| 10,000 partitions open < 1 s | 500 ms | met |",
		"| offload | 100 (90.0–110) MB/s |", "| append >= 0.8x raw page-cache write |"} {
		if !strings.Contains(out, want) {
			t.Errorf("the report lacks %q:\n%s", want, out)
		}
	}
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
