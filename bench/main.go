// Command bench runs tierlog side by side with other Go logs and the
// machine's own limits, and prints the results as Markdown tables; see
// BENCHMARKS.md at the repository root for what each workload means.
//
//	go run . [-size 1GiB] [-runs 3] [-reads 1000000] [-update ../BENCHMARKS.md]
//
// Each measurement runs in a child process of its own (so peak RSS is one
// system's), the systems one after another, each run in turn; figures are
// medians of the runs with their range.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
)

func main() {
	childKind := flag.String("child", "", "internal: run one measurement in this process")
	dir := flag.String("dir", "", "working directory (default: a temporary one)")
	size := flag.Int64("size", 1<<30, "bytes of record values per system (100-byte records)")
	runs := flag.Int("runs", 3, "runs of each measurement")
	reads := flag.Int64("reads", 1_000_000, "random single-record reads per run")
	tieredBench := flag.Bool("tiered", true, "run the tiered benchmarks against the S3 server (needs versitygw; see the Makefile)")
	update := flag.String("update", "", "also write the tables into this Markdown file, between its results markers")
	only := flag.String("only", "", "run one group of measurements and print its results: "+onlyGroups())
	groups := flag.String("groups", fullGroups(), "the groups of Go benchmarks the full run runs, comma-separated (-only runs any one)")
	flag.Parse()
	n := *size / 100
	if *childKind != "" {
		if err := child(*childKind, *dir, n, *reads); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		return
	}
	if *only != "" {
		if err := runOnly(*only, *dir, n, *runs, *reads); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		return
	}
	var gs []*goGroup
	for _, name := range strings.Split(*groups, ",") {
		if name = strings.TrimSpace(name); name == "" {
			continue
		}
		g := groupByName(name)
		if g == nil {
			fmt.Fprintf(os.Stderr, "bench: -groups: no group %q: %s\n", name, onlyGroups())
			os.Exit(2)
		}
		gs = append(gs, g)
	}
	if err := parent(*dir, n, *runs, *reads, *tieredBench, gs, *update); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// workDir returns dir, or when it is empty a temporary directory that
// cleanup removes.
func workDir(dir string) (_ string, cleanup func(), err error) {
	if dir != "" {
		return dir, func() {}, nil
	}
	tmp, err := os.MkdirTemp("", "tierlog-bench-")
	if err != nil {
		return "", nil, err
	}
	return tmp, func() { os.RemoveAll(tmp) }, nil
}

// onlyGroups lists the groups -only runs, for the flags' help and errors.
func onlyGroups() string {
	list := []string{"remote (the remote reads under load, as JSON)"}
	for _, g := range goGroups {
		full := ""
		if !g.full {
			full = "; not in the full run"
		}
		list = append(list, fmt.Sprintf("%s (%s%s)", g.name, g.about, full))
	}
	return strings.Join(list, ", ")
}

// fullGroups names the groups of Go benchmarks the full run has.
func fullGroups() string {
	var names []string
	for _, g := range goGroups {
		if g.full {
			names = append(names, g.name)
		}
	}
	return strings.Join(names, ",")
}

// runOnly runs one group of measurements (-only): the remote reads print
// each run's result as a line of JSON, a group of Go benchmarks its
// tables and goals; for looking at one row while working on it.
func runOnly(group, dir string, n int64, runs int, reads int64) error {
	if g := groupByName(group); g != nil {
		var md bytes.Buffer
		reportGroups(&md, []groupResult{{g, runGroup(g)}}, fig{why: "the tiered rows run in the full run only"})
		_, err := os.Stdout.Write(md.Bytes())
		return err
	}
	dir, cleanup, err := workDir(dir)
	if err != nil {
		return err
	}
	defer cleanup()
	byKind := map[string][]result{}
	switch group {
	case "remote":
		if err := runRemote(byKind, filepath.Join(dir, "remote"), n, runs, reads); err != nil {
			return err
		}
	default:
		return fmt.Errorf("-only %q: the groups are: %s", group, onlyGroups())
	}
	enc := json.NewEncoder(os.Stdout)
	for _, kind := range slices.Sorted(maps.Keys(byKind)) {
		for _, r := range byKind[kind] {
			if err := enc.Encode(map[string]any{"kind": kind, "result": r}); err != nil {
				return err
			}
		}
	}
	return nil
}

// runChild runs one measurement in a child process.
func runChild(kind, dir string, n, reads int64) (result, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-child", kind, "-dir", dir, "-size", strconv.FormatInt(n*100, 10), "-reads", strconv.FormatInt(reads, 10))
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		return result{}, fmt.Errorf("%s: %v\n%s", kind, err, errOut.String())
	}
	var res result
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		return res, fmt.Errorf("%s: %w", kind, err)
	}
	return res, nil
}

// runKind runs a measurement in runs child processes on dir, one after
// another, after a setup child (when setup is not empty) that prepares dir
// for them; dir is removed at the end.
func runKind(setup, kind, dir string, n int64, runs int, reads int64) ([]result, error) {
	defer os.RemoveAll(dir)
	if setup != "" {
		fmt.Fprintf(os.Stderr, "%s\n", setup)
		if _, err := runChild(setup, dir, n, reads); err != nil {
			return nil, err
		}
	}
	var rs []result
	for r := range runs {
		fmt.Fprintf(os.Stderr, "run %d/%d: %s\n", r+1, runs, kind)
		res, err := runChild(kind, dir, n, reads)
		if err != nil {
			return nil, err
		}
		rs = append(rs, res)
	}
	return rs, nil
}

func parent(dir string, n int64, runs int, reads int64, tieredBench bool, groups []*goGroup, update string) error {
	dir, cleanup, err := workDir(dir)
	if err != nil {
		return err
	}
	defer cleanup()
	started := time.Now()
	byKind := map[string][]result{}
	kinds := []string{"baseline"}
	for _, s := range systems {
		kinds = append(kinds, s.name)
	}
	kinds = append(kinds, "broker")
	for r := range runs {
		for _, kind := range kinds {
			fmt.Fprintf(os.Stderr, "run %d/%d: %s\n", r+1, runs, kind)
			res, err := runChild(kind, filepath.Join(dir, fmt.Sprintf("r%d-%d", r, len(byKind[kind]))), n, reads)
			if err != nil {
				return err
			}
			byKind[kind] = append(byKind[kind], res)
		}
	}
	partRes, err := runKind("partitions-setup", "partitions", filepath.Join(dir, "partitions"), n, runs, reads)
	if err != nil {
		return err
	}
	if byKind["clean"], err = runKind("clean-setup", "clean", filepath.Join(dir, "clean"), n, runs, reads); err != nil {
		return err
	}
	var tiered []benchLine
	if tieredBench {
		if err := runRemote(byKind, filepath.Join(dir, "remote"), n, runs, reads); err != nil {
			return err
		}
		fmt.Fprintln(os.Stderr, "tiered (go test ./tiered -bench)")
		tiered = runTiered(runs)
	}
	var grs []groupResult
	for _, g := range groups {
		grs = append(grs, groupResult{g, runGroup(g)})
	}

	var md bytes.Buffer
	report(&md, byKind, partRes, tiered, grs, n, runs, reads, time.Since(started))
	os.Stdout.Write(md.Bytes())
	if update != "" {
		return updateFile(update, md.Bytes())
	}
	return nil
}

// stat is a median with its range over runs.
type stat struct{ med, lo, hi float64 }

func statOf(vals []float64) stat {
	if len(vals) == 0 {
		return stat{}
	}
	v := slices.Clone(vals)
	slices.Sort(v)
	return stat{med: v[len(v)/2], lo: v[0], hi: v[len(v)-1]}
}

func (s stat) String() string {
	if s.med == 0 {
		return "n/a"
	}
	f := func(x float64) string {
		switch {
		case x >= 100:
			return strconv.FormatFloat(x, 'f', 0, 64)
		case x >= 10:
			return strconv.FormatFloat(x, 'f', 1, 64)
		default:
			return strconv.FormatFloat(x, 'f', 2, 64)
		}
	}
	return fmt.Sprintf("%s (%s–%s)", f(s.med), f(s.lo), f(s.hi))
}

// noisy says whether a figure's range exceeds 20% of its median.
func (s stat) noisy() bool { return s.med > 0 && (s.hi-s.lo)/s.med > 0.2 }

func collect(rs []result, f func(result) float64) stat {
	var v []float64
	for _, r := range rs {
		v = append(v, f(r))
	}
	return statOf(v)
}

func report(w io.Writer, byKind map[string][]result, parts []result, tiered []benchLine, groups []groupResult, n int64, runs int, reads int64, took time.Duration) {
	cpu := "unknown CPU"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		if m := regexp.MustCompile(`model name\s*:\s*(.*)`).FindSubmatch(b); m != nil {
			cpu = string(m[1])
		}
	}
	fmt.Fprintf(w, "Run of %s: %s, %d cores, %s; %d records of 100 bytes (%.2f GiB of values) per system; %d runs, median (min–max); %d random reads a run. The whole run took %v.\n\n",
		time.Now().UTC().Format("2006-01-02"), cpu, runtime.NumCPU(), runtime.Version(), n, float64(n*100)/(1<<30), runs, reads, took.Round(time.Second))

	base := byKind["baseline"]
	fmt.Fprintf(w, "| machine (same bytes) | MB/s | goal | |\n| --- | ---: | --- | --- |\n")
	var noisy []string
	for _, b := range machineRows {
		s := collect(base, func(r result) float64 { return r.Values[b.key] })
		fmt.Fprintf(w, "| %s | %s | none: the baseline of %s | |\n", b.name, s, b.of)
		if s.noisy() {
			noisy = append(noisy, b.name)
		}
	}
	fmt.Fprintln(w)

	// The goals of issue 8 and issue 28 that tierlog's row answers,
	// computed from the medians.
	med := func(kind string, f func(result) float64) float64 { return collect(byKind[kind], f).med }
	appendT := med("tierlog", func(r result) float64 { return r.AppendMBps })
	raw := med("baseline", func(r result) float64 { return r.Values["write"] })
	var bestPeerAppend, bestPeerScan, bestDiskPeerReads float64
	for _, s := range systems[1:] {
		bestPeerAppend = max(bestPeerAppend, med(s.name, func(r result) float64 { return r.AppendMBps }))
		bestPeerScan = max(bestPeerScan, med(s.name, func(r result) float64 { return r.ScanMBps }))
		if !strings.HasPrefix(s.name, "tidwall") { // tidwall serves from segments it holds in memory
			bestDiskPeerReads = max(bestDiskPeerReads, med(s.name, func(r result) float64 { return r.ReadsPerSec }))
		}
	}
	p50 := med("tierlog", func(r result) float64 { return r.ReadP50us })
	readsT := med("tierlog", func(r result) float64 { return r.ReadsPerSec })
	scanT := med("tierlog", func(r result) float64 { return r.ScanMBps })
	sf := med("baseline", func(r result) float64 { return r.Values["sendfile"] })
	sock := collect(byKind["tierlog"], func(r result) float64 { return r.Values["scanSocketMBps"] })
	syncT := med("tierlog", func(r result) float64 { return r.SyncAppendMBp })
	rawSync := med("baseline", func(r result) float64 { return r.Values["writeFsync1000"] })
	sysGoals := []goalRow{
		{goal: "append >= 0.8x raw page-cache write", figure: fmt.Sprintf("%.2fx (%.0f vs %.0f MB/s)", appendT/raw, appendT, raw), met: appendT >= appendGoal*raw},
		{goal: "append, fsync every 1,000 records >= 0.8x raw write+fsync at that cadence", figure: fmt.Sprintf("%.2fx (%.0f vs %.0f MB/s)", syncT/rawSync, syncT, rawSync), met: syncT >= appendGoal*rawSync},
		{goal: "append >= 3x the fastest peer", figure: fmt.Sprintf("%.2fx (%.0f vs %.0f MB/s)", appendT/bestPeerAppend, appendT, bestPeerAppend), met: appendT >= 3*bestPeerAppend},
		{goal: "random read p50 < 2 µs", figure: fmt.Sprintf("%.2f µs", p50), met: p50 < 2},
		{goal: "reads/s above every peer that keeps its data on disk", figure: fmt.Sprintf("%.0f vs %.0f", readsT, bestDiskPeerReads), met: readsT > bestDiskPeerReads},
		{goal: "sequential read >= 0.8x raw sendfile", figure: fmt.Sprintf("%.2fx (%.0f vs %.0f MB/s, to a socket)", sock.med/sf, sock.med, sf), met: sock.med >= 0.8*sf},
		{goal: "sequential read above every peer", figure: fmt.Sprintf("%.0f vs %.0f MB/s (records decoded)", scanT, bestPeerScan), met: scanT > bestPeerScan},
	}
	openMs := collect(parts, func(r result) float64 { return r.Values["openMs"] }).med
	openGoal := goalRow{goal: "10,000 partitions open < 1 s", figure: fmt.Sprintf("%.0f ms", openMs), met: openMs > 0 && openMs < 1000}

	fmt.Fprintf(w, "| system | append MB/s | append, fsync every 1,000 records, MB/s | random reads/s | read p50 µs | read p99 µs | sequential scan MB/s | reopen after close ms | reopen after crash ms | peak RSS MB | goal | |\n")
	fmt.Fprintf(w, "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |\n")
	for _, s := range systems {
		rs := byKind[s.name]
		cols := []stat{
			collect(rs, func(r result) float64 { return r.AppendMBps }),
			collect(rs, func(r result) float64 { return r.SyncAppendMBp }),
			collect(rs, func(r result) float64 { return r.ReadsPerSec }),
			collect(rs, func(r result) float64 { return r.ReadP50us }),
			collect(rs, func(r result) float64 { return r.ReadP99us }),
			collect(rs, func(r result) float64 { return r.ScanMBps }),
			collect(rs, func(r result) float64 { return r.ReopenCleanMs }),
			collect(rs, func(r result) float64 { return r.ReopenCrashMs }),
			collect(rs, func(r result) float64 { return r.PeakRSSMB }),
		}
		var cells []string
		for i, c := range cols {
			cells = append(cells, c.String())
			if c.noisy() && i < 6 {
				noisy = append(noisy, s.name)
			}
		}
		goal, verdict := "none: a peer", ""
		if s.name == "tierlog" {
			goal, verdict = rowGoals(sysGoals)
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s |\n", s.name, strings.Join(cells, " | "), goal, verdict)
	}
	fmt.Fprintf(w, "\ntierlog sequential read as a broker serves it (Read, then Records.WriteTo a loopback socket: sendfile): %s MB/s of values (its goal is in the row above).\n", sock)
	for _, r := range byKind {
		for _, x := range r {
			if x.Note != "" {
				fmt.Fprintf(w, "\nNote (%s): %s\n", x.System, x.Note)
			}
		}
	}
	fmt.Fprintf(w, "\n| tierlog, 10,000 partitions | median (min–max) | goal | |\n| --- | ---: | --- | --- |\n")
	fmt.Fprintf(w, "| open the log dir and every partition, ms | %s | %s: %s | %s |\n", collect(parts, func(r result) float64 { return r.Values["openMs"] }),
		openGoal.goal, openGoal.figure, metCell(openGoal.met))
	fmt.Fprintf(w, "| peak RSS of the process, MB | %s | none: reported | |\n", collect(parts, func(r result) float64 { return r.PeakRSSMB }))

	goals, shapesNoisy := reportShapes(w, byKind)
	noisy = append(noisy, shapesNoisy...)

	if len(tiered) > 0 {
		fmt.Fprintf(w, "\n| tiered, against the S3 server of the tests | median (min–max) | goal | |\n| --- | ---: | --- | --- |\n")
		for _, l := range tiered {
			goal := "none: reported | "
			switch {
			case l.goal != "":
				goal = l.goal + ": " + l.goalFigure // its figure, then the met cell
			case l.baseline:
				goal = "none: the baseline | "
			}
			if l.failed != "" {
				fmt.Fprintf(w, "| %s | **failed**: %s | %s |\n", l.label, strings.ReplaceAll(l.failed, "|", "\\|"), goal)
				continue
			}
			short := ""
			if l.short != "" {
				short = " (**" + strings.ReplaceAll(l.short, "|", "\\|") + "**)"
			}
			fmt.Fprintf(w, "| %s | %s %s%s | %s |\n", l.label, statOf(l.values), l.unit, short, goal)
		}
	}
	goals = append(goals, reportGroups(w, groups, offloadFigure(tiered))...)

	met := metCell
	fmt.Fprintf(w, "\n| goal | figure | |\n| --- | --- | --- |\n")
	fmt.Fprintf(w, "| %s | %s | %s |\n", sysGoals[0].goal, sysGoals[0].figure, met(sysGoals[0].met))
	checked := med("baseline", func(r result) float64 { return r.Values["writeValidated"] })
	fmt.Fprintf(w, "| append beside the validated raw write (the log's own cost: the writes and checks are the same) | %.2fx (%.0f vs %.0f MB/s of values) | reported |\n", appendT/checked, appendT, checked)
	for _, g := range append(sysGoals[1:], openGoal) {
		fmt.Fprintf(w, "| %s | %s | %s |\n", g.goal, g.figure, met(g.met))
	}
	for _, g := range goals {
		if g.missing != "" {
			fmt.Fprintf(w, "| %s | no figure (%s) | %s |\n", g.goal, strings.ReplaceAll(g.missing, "|", "\\|"), g.metText())
			continue
		}
		fmt.Fprintf(w, "| %s | %s | %s |\n", g.goal, g.figure, met(g.met))
	}
	for _, l := range tiered {
		if l.goal != "" {
			fmt.Fprintf(w, "| %s | %s |\n", l.goal, l.goalFigure)
		}
	}
	if len(noisy) > 0 {
		slices.Sort(noisy)
		noisy = slices.Compact(noisy)
		fmt.Fprintf(w, "\nNoisy (range above 20%% of the median): %s.\n", strings.Join(noisy, "; "))
	}
}

// updateFile replaces what lies between the results markers of path.
func updateFile(path string, md []byte) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	const begin, end = "<!-- results: begin -->\n", "<!-- results: end -->"
	i, j := bytes.Index(b, []byte(begin)), bytes.Index(b, []byte(end))
	if i < 0 || j < i {
		return fmt.Errorf("%s has no %q ... %q markers", path, strings.TrimSpace(begin), end)
	}
	out := append(append(append([]byte(nil), b[:i+len(begin)]...), md...), b[j:]...)
	return os.WriteFile(path, out, 0o644)
}

// rowGoals are the goal and met cells of a row that answers several
// goals: each goal with its figure, and how many are met, naming those
// that are not.
func rowGoals(gs []goalRow) (goal, verdict string) {
	var texts, missed []string
	for _, g := range gs {
		texts = append(texts, g.text())
		if !g.met {
			missed = append(missed, g.goal)
		}
	}
	verdict = fmt.Sprintf("%d of %d met", len(gs)-len(missed), len(gs))
	if len(missed) > 0 {
		verdict += "; **not met**: " + strings.Join(missed, "; ")
	}
	return strings.Join(texts, "; "), verdict
}
