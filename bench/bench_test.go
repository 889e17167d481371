package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
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
	tiered := []benchLine{{name: "Offload", label: "offload", unit: "MB/s", values: []float64{100, 90, 110}, goal: "offload >= 0.9x raw PutObject", goalFigure: "1.00x | met"}}
	report(&md, byKind, parts, tiered, cannedGroups(t), n, 1, reads, time.Second)
	out := md.String()
	for _, want := range []string{"| tierlog |", "| hashicorp/raft-wal v0.4.0 |", "sendfile(2)", "| 10,000 partitions open < 1 s | 500 ms | met |",
		"| offload | 100 (90.0–110) MB/s |", "| append >= 0.8x raw page-cache write |",
		"fdatasync every 1,000 records", "| produce-shaped append: 4 batches", "| flush.messages=1:", "| tierlog: Read, then Records.WriteTo the socket |",
		"| compaction.Clean of a rolled log", "| fetch-shaped reads >= 0.8x raw sendfile of the same ranges |", "| key compaction >= 250 MB/s |",
		// The groups of Go benchmarks, from recorded output.
		"| WAL PUTs of 1,000 diskless partitions", "| 4.00 PUTs/s (345,545 PUTs a day) | the bound: 4.08 PUTs/s |",
		"classic tiered: offload 100 MB/s", "| 100,000 segments | 120 MB | 1,452 / 1,197 / 2,958,626 B |",
		"| manifest bytes over the life <= 2 MB at 2,000 segments | 1.60 MB | met |", "| a cold 64 MiB tail consumed >= 0.5x raw ranged GETs | 0.497x (442 vs 888 MB/s) | **not met** |",
		"| heap once every partition read its manifest", "85.2 MB (8.52 B a segment)", "remote bytes the bucket's cleaner rewrote | 58.5 MB (0.476x the bytes appended)",
		"| kgo: a diskless topic on versitygw", "| diskless produce through the broker >= 0.8x classic tiered | 0.225x (86.7 vs 385 MB/s) | **not met** |",
		"| sarama: kfake | 205 | 82.1 | 396 |  | none: the baseline |  |", "The groups of Go benchmarks took",
		// The systems and the 10,000 partitions carry their goals too.
		"| none: a peer |  |", "append >= 3x the fastest peer: ", " of 7 met", "| 10,000 partitions open < 1 s: 500 ms | met |"} {
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
	// Every table has a goal column, and every row as many cells as its
	// header.
	lines := strings.Split(out, "\n")
	for i := 0; i+1 < len(lines); i++ {
		if !strings.HasPrefix(lines[i], "| ") || !strings.HasPrefix(lines[i+1], "| --- |") {
			continue
		}
		header := lines[i]
		if !strings.Contains(header, "| goal |") {
			t.Errorf("a table without a goal column: %s", header)
		}
		cols := strings.Count(strings.ReplaceAll(header, "\\|", ""), "|")
		for j := i + 2; j < len(lines) && strings.HasPrefix(lines[j], "| "); j++ {
			if n := strings.Count(strings.ReplaceAll(lines[j], "\\|", ""), "|"); n != cols {
				t.Errorf("a row of %d cells under a header of %d:\n%s\n%s", n-1, cols-1, header, lines[j])
			}
		}
	}
	for _, line := range lines {
		// liftbridge has no durable-append figure; every other is measured.
		if strings.Contains(line, "n/a") && !strings.HasPrefix(line, "| liftbridge") ||
			strings.Contains(line, "no figure") || strings.Contains(line, "not measured") {
			t.Errorf("a figure is missing: %s", line)
		}
	}
}

// cannedGroups are the full run's groups of Go benchmarks with figures
// read from their output as recorded on the 2-core machine
// (testdata/gobench-*.txt).
func cannedGroups(t *testing.T) []groupResult {
	t.Helper()
	g := newGoFigures()
	for _, f := range []string{"testdata/gobench-tiered.txt", "testdata/gobench-broker.txt"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		g.parse(b)
	}
	var grs []groupResult
	for i := range goGroups {
		if goGroups[i].full {
			grs = append(grs, groupResult{&goGroups[i], g})
		}
	}
	return grs
}

// TestGoBenchFailed: the rows of benchmarks that failed, were skipped or
// gave no figure say why, and their goals are not measured; a child that
// failed names its panic or its first error.
func TestGoBenchFailed(t *testing.T) {
	b, err := os.ReadFile("testdata/gobench-failed.txt") // a stand-in's output, go test -v
	if err != nil {
		t.Fatal(err)
	}
	g := newGoFigures()
	g.parse(b)
	if v, why := g.value("DisklessProduce/raw-put-8MiB", "MB/s-1-stream"); v != 1 || why != "" {
		t.Fatalf("a passing sub-benchmark of a failed one: %v %q", v, why)
	}
	g.runErr = []string{"go test -bench 'Diskless': exit status 1"}
	var md bytes.Buffer
	goals := reportGroups(&md, []groupResult{{groupByName("diskless"), g}}, fig{why: "BenchmarkOffload: failed"})
	out := md.String()
	for _, want := range []string{
		"| WAL PUTs of 1,000 diskless partitions of one Backend, 1 KiB appends at 1 MB/s in all, for 5 s | **no figure**: skipped: diskless_bench_test.go:7: s3server: no MinIO binary |",
		"**no figure**: diskless_bench_test.go:4: put: 503 SlowDown |",
		"| acknowledgement latency (acks=all): one partition, 16 KiB batches, each waited for | **no figure**: go test -bench 'Diskless': exit status 1 |",
		"classic tiered: **no figure**: BenchmarkOffload: failed", "**not measured** |"} {
		if !strings.Contains(out, want) {
			t.Errorf("the report lacks %q:\n%s", want, out)
		}
	}
	for _, gl := range goals {
		if gl.missing == "" {
			t.Errorf("goal %q measured: %+v", gl.goal, gl)
		}
	}
	// The tiered rows, when their benchmarks fail (as recorded at f9f9ed7).
	if b, err = os.ReadFile("testdata/gobench-tiered-rows-failed.txt"); err != nil {
		t.Fatal(err)
	}
	g = newGoFigures()
	g.parse(b)
	lines := tieredLines(g, 1)
	if !strings.HasPrefix(lines[0].failed, "bench_test.go:74: objstore: retryable error: tiered: no manifest under") ||
		lines[1].failed != "" || len(lines[1].values) != 1 || lines[0].goalFigure != "no figure: a benchmark failed (above) | **not measured**" {
		t.Errorf("the tiered lines: %+v", lines[:2])
	}
	if l, _ := lineNamed(lines, "LocalRead"); l.label != "local read of the same kind of batch" || len(l.values) != 1 || l.values[0] != 2.592 {
		t.Errorf("local read: %+v", l)
	}
	timeout := "BenchmarkX\npanic: test timed out after 15m0s\n\trunning tests:\n"
	if why := childFailure([]byte(timeout), nil, errors.New("exit status 2")); why != "panic: test timed out after 15m0s (exit status 2)" {
		t.Errorf("a timeout: %q", why)
	}
	if why := childFailure(nil, []byte("# github.com/tierlog/tierlog/tiered\n./x.go:1:1: undefined: y\n"), errors.New("exit status 1")); why != "./x.go:1:1: undefined: y (exit status 1)" {
		t.Errorf("a build error: %q", why)
	}
}

// TestGoGroupsRun runs the groups' benchmarks as the full run does, at
// small sizes: the manifest and attached partitions, and (with the S3
// servers at hand) a compacted topic and the broker's clients; each row
// gets its figure. The diskless benchmarks have fixed sizes (a minute):
// TestGoBenchFailed and TestSmoke cover their rows from recorded output.
func TestGoGroupsRun(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go test -bench")
	}
	groups := []goGroup{manifestGroup("manifest", false, []int{20, 40}), attachedGroup("attached", false, 20, 50)}
	minio, versity := s3Binary(t, "TIERLOG_MINIO", "minio"), s3Binary(t, "TIERLOG_VERSITYGW", "versitygw")
	if minio {
		groups = append(groups, compactGroup("compact", false, 1000, 100_000))
	}
	if versity {
		groups = append(groups, clientsGroup("clients", false, 2000))
	}
	for _, gr := range groups {
		start := time.Now()
		g := runGroup(&gr)
		var md bytes.Buffer
		goals := reportGroups(&md, []groupResult{{&gr, g}}, fig{why: "not run"})
		t.Logf("%s: %v\n%s", gr.name, time.Since(start).Round(time.Millisecond), md.String())
		if strings.Contains(md.String(), "no figure") {
			t.Errorf("%s: a row has no figure:\n%s", gr.name, md.String())
		}
		if len(goals) == 0 {
			t.Errorf("%s: no goals", gr.name)
		}
	}
}

// s3Binary says whether the S3 server binary env names, or .cache/bin's,
// is at hand, setting env to it for the children.
func s3Binary(t *testing.T, env, name string) bool {
	if os.Getenv(env) != "" {
		return true
	}
	p, err := filepath.Abs("../.cache/bin/" + name)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p); err != nil {
		t.Logf("%s not run: no $%s and no %s (make s3servers)", name, env, p)
		return false
	}
	t.Setenv(env, p)
	return true
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

// TestSealedRows: the sealed bucket's rows, from BenchmarkSealed's output
// as recorded (go test ./tiered -bench Sealed -benchtime 2s -count 3),
// each with its goal against the unsealed run beside it.
func TestSealedRows(t *testing.T) {
	b, err := os.ReadFile("testdata/gobench-sealed.txt")
	if err != nil {
		t.Fatal(err)
	}
	g := newGoFigures()
	g.parse(b)
	want := map[string]string{
		"offload into a sealed bucket (client-side AES-256-GCM, 64 KiB chunks)": "1.11x (63.8 vs 57.5 MB/s) | met",
		"cold remote read from a sealed bucket":                                 "0.99x (1414 vs 1400 µs) | met",
		"cached remote read from a sealed bucket":                               "1.07x (1.15 vs 1.23 µs) | met",
	}
	for _, l := range tieredLines(g, 1) {
		if w, ok := want[l.label]; ok {
			if l.goalFigure != w || !strings.Contains(l.goal, "sealed >= 0.8x unsealed") {
				t.Errorf("%s: %q %q, want %q", l.label, l.goal, l.goalFigure, w)
			}
			delete(want, l.label)
		}
	}
	if len(want) > 0 {
		t.Errorf("rows missing: %v", want)
	}
}

// TestOffloadFigure: the diskless rows set classic tiered's offload
// beside theirs: the unsealed offload's figure, not that of the sealed
// runs whose labels also begin with "offload".
func TestOffloadFigure(t *testing.T) {
	g := newGoFigures()
	g.parse([]byte("BenchmarkOffload-2 \t 2 \t 500000000 ns/op \t 56.40 MB/s\n" +
		"BenchmarkRawPut-2 \t 2 \t 500000000 ns/op \t 63.80 MB/s\n" +
		"BenchmarkSealed/offload/off-2 \t 2 \t 500000000 ns/op \t 90.80 MB/s\n" +
		"BenchmarkSealed/offload/on-2 \t 2 \t 500000000 ns/op \t 89.40 MB/s\n"))
	if f := offloadFigure(tieredLines(g, 1)); f.why != "" || f.v != 56.4 {
		t.Fatalf("classic tiered's offload: %+v; want the Offload benchmark's 56.4 MB/s", f)
	}
	if f := offloadFigure(nil); f.why != "the tiered rows did not run" {
		t.Fatalf("no tiered rows: %+v", f)
	}
}

// TestTieredRoundShort: a benchmark that gave no figure in one round of
// three says so in its row, with why; its median is of the rounds that
// gave one.
func TestTieredRoundShort(t *testing.T) {
	ok := "BenchmarkOffload\nBenchmarkOffload-2 \t 2 \t 500000000 ns/op \t %s MB/s\nBenchmarkRawPut\nBenchmarkRawPut-2 \t 2 \t 500000000 ns/op \t 63.00 MB/s\n"
	failed := "BenchmarkOffload\n    bench_test.go:74: put: 503 SlowDown\n--- FAIL: BenchmarkOffload\nBenchmarkRawPut\nBenchmarkRawPut-2 \t 2 \t 500000000 ns/op \t 63.00 MB/s\n"
	g := newGoFigures()
	g.parse(fmt.Appendf(nil, ok, "60.00"))
	g.parse([]byte(failed))
	g.parse(fmt.Appendf(nil, ok, "70.00"))
	lines := tieredLines(g, 3)
	off, _ := lineNamed(lines, "Offload")
	if len(off.values) != 2 || off.failed != "" || off.short != "1 of 3 rounds gave no figure: bench_test.go:74: put: 503 SlowDown" {
		t.Fatalf("the offload's line: %+v", off)
	}
	if put, _ := lineNamed(lines, "RawPut"); put.short != "" || len(put.values) != 3 {
		t.Fatalf("the raw PUTs' line: %+v", put)
	}
	var md bytes.Buffer
	report(&md, map[string][]result{}, nil, lines, nil, 3, 1, 0, time.Second)
	if want := "MB/s (**1 of 3 rounds gave no figure: bench_test.go:74: put: 503 SlowDown**) |"; !strings.Contains(md.String(), want) {
		t.Fatalf("the report lacks %q:\n%s", want, md.String())
	}
}
