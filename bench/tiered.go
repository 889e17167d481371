package main

import (
	"fmt"
	"os"
	"strings"
	"time"
)

// benchLine is one tiered figure over the runs.
type benchLine struct {
	// name is the Go benchmark's, without its Benchmark prefix.
	name, label, unit string
	values            []float64
	goal, goalFigure  string
	// failed is why the benchmark gave no figure (its failure message).
	failed string
	// baseline: the row is another row's raw baseline.
	baseline bool
	// short says how many rounds gave no figure, and why, when some did
	// and others did not: the median is of fewer rounds.
	short string
}

// The tiered benchmarks live with the tiered package (go test ./tiered
// -bench): offload and copier turns beside raw PutObject of the same
// files, cold and cached remote reads beside one raw ranged GET and a
// local read, and sequential remote consumption with and without
// read-ahead. The harness runs them in the repository root and reads
// their output.
var tieredBenchmarks = []struct {
	name, label, unit string
	baseline          bool
}{
	{"Offload", "offload (31 MiB in 1 MiB segments, manifest commits)", "MB/s", false},
	{"RawPut", "raw PutObject of the same files", "MB/s", true},
	{"CopyTurns", "copier turns, the tiering service's path (CopyTurn until none waits: one upload at a time, up to 4 small segments a commit), the same files", "MB/s", false},
	{"ColdRemoteRead", "cold remote read of a batch (one ranged GET)", "µs", false},
	{"RawRangedGet80KiB", "raw ranged GET of the same size", "µs", true},
	{"CachedRemoteRead", "cached remote read", "µs", false},
	{"LocalRead", "local read of the same kind of batch", "µs", true},
	{"SequentialRemote/no-prefetch", "sequential remote consumption, no read-ahead", "MB/s", true},
	{"SequentialRemote/prefetch", "sequential remote consumption, 1 MiB read-ahead", "MB/s", false},
	{"Sealed/offload/off", "offload, the same run as the sealed one below", "MB/s", true},
	{"Sealed/offload/on", "offload into a sealed bucket (client-side AES-256-GCM, 64 KiB chunks)", "MB/s", false},
	{"Sealed/cold/off", "cold remote read, the same run as the sealed one below", "µs", true},
	{"Sealed/cold/on", "cold remote read from a sealed bucket", "µs", false},
	{"Sealed/cached/off", "cached remote read, the same run as the sealed one below", "µs", true},
	{"Sealed/cached/on", "cached remote read from a sealed bucket", "µs", false},
}

// lineNamed returns the line of the benchmark called name.
func lineNamed(lines []benchLine, name string) (benchLine, bool) {
	for _, l := range lines {
		if l.name == name {
			return l, true
		}
	}
	return benchLine{}, false
}

// offloadFigure is the offload's median, the figure the diskless rows
// set beside classic tiered's (the unsealed offload's, not the sealed
// runs').
func offloadFigure(tiered []benchLine) fig {
	l, ok := lineNamed(tiered, "Offload")
	switch {
	case !ok:
		return fig{why: "the tiered rows did not run"}
	case l.failed != "":
		return fig{why: "BenchmarkOffload: " + l.failed}
	}
	return fig{v: statOf(l.values).med}
}

// sealedGoal is the least a sealed bucket's throughput may be of an
// unsealed one's (reads: the inverse of their time).
const sealedGoal = 0.8

// runTiered runs the tiered benchmarks in runs rounds, each a child `go
// test` running every one once (in the source's order), and returns
// their lines. Rounds, not `-count runs` (which runs each benchmark that
// many times before the next): a figure and its baseline would come from
// runs minutes apart, and this machine's disk and loopback drift over
// minutes (the same offload gave 56 and 91 MB/s in one child). A
// benchmark that fails leaves the others running: its line says why it
// has no figure, or in how many rounds it had none, and the rest of
// bench-compare goes on.
func runTiered(runs int) []benchLine {
	var names []string
	for _, b := range tieredBenchmarks {
		names = append(names, strings.Split(b.name, "/")[0])
	}
	g := newGoFigures()
	runs = max(runs, 1)
	for range runs {
		g.run(goRun{dir: "..", pkg: "./tiered", bench: "^Benchmark(" + strings.Join(names, "|") + ")$", benchtime: "1s", timeout: 20 * time.Minute})
	}
	return tieredLines(g, runs)
}

// tieredLines are the tiered benchmarks' lines from their figures over
// rounds rounds.
func tieredLines(g *goFigures, rounds int) []benchLine {
	var lines []benchLine
	for _, b := range tieredBenchmarks {
		l := benchLine{name: b.name, label: b.label, unit: b.unit, baseline: b.baseline}
		unit := "ns/op" // shown in µs
		if b.unit == "MB/s" {
			unit = "MB/s"
		}
		for _, v := range g.values[b.name][unit] {
			if unit == "ns/op" {
				v /= 1000
			}
			l.values = append(l.values, v)
		}
		if len(l.values) == 0 {
			l.failed = g.failure(b.name, unit)
			fmt.Fprintf(os.Stderr, "Benchmark%s failed: %s\n", b.name, l.failed)
		} else if len(l.values) < rounds {
			l.short = fmt.Sprintf("%d of %d rounds gave no figure: %s", rounds-len(l.values), rounds, g.failure(b.name, unit))
			fmt.Fprintf(os.Stderr, "Benchmark%s: %s\n", b.name, l.short)
		}
		lines = append(lines, l)
	}
	med := func(name string) float64 {
		if l, ok := lineNamed(lines, name); ok {
			return statOf(l.values).med
		}
		return 0
	}
	off, put := med("Offload"), med("RawPut")
	lines[0].goal = "offload >= 0.9x raw PutObject"
	if off == 0 || put == 0 {
		lines[0].goalFigure = "no figure: a benchmark failed (above) | **not measured**"
	} else {
		lines[0].goalFigure = fmt.Sprintf("%.2fx (%.0f vs %.0f MB/s) | %s", off/put, off, put, metCell(off >= 0.9*put))
	}
	// The remote reads' goals: at most 1.5x their baselines.
	for _, r := range []struct{ name, base, goal string }{
		{"ColdRemoteRead", "RawRangedGet80KiB", "cold remote read <= 1.5x one raw ranged GET of the same size"},
		{"CachedRemoteRead", "LocalRead", "cached remote read <= 1.5x a local read of the same batch"},
	} {
		got, base := med(r.name), med(r.base)
		for i, b := range tieredBenchmarks {
			if b.name != r.name {
				continue
			}
			lines[i].goal = r.goal
			if got == 0 || base == 0 {
				lines[i].goalFigure = "no figure: a benchmark failed (above) | **not measured**"
			} else {
				lines[i].goalFigure = fmt.Sprintf("%.2fx (%s vs %s µs) | %s", got/base, num(got), num(base), metCell(got <= 1.5*base))
			}
		}
	}
	// Sealing's cost: each sealed figure at least sealedGoal of its
	// unsealed one's, the same run.
	for i, b := range tieredBenchmarks {
		what, ok := strings.CutSuffix(b.name, "/on")
		if !ok {
			continue
		}
		on, off := med(b.name), med(what+"/off")
		lines[i].goal = fmt.Sprintf("%s, bucket sealed >= %.1fx unsealed (throughput)", map[string]string{
			"Sealed/offload": "offload", "Sealed/cold": "cold remote read", "Sealed/cached": "cached remote read"}[what], sealedGoal)
		switch {
		case on == 0 || off == 0:
			lines[i].goalFigure = "no figure: a benchmark failed (above) | **not measured**"
		case b.unit == "MB/s":
			lines[i].goalFigure = fmt.Sprintf("%.2fx (%s vs %s MB/s) | %s", on/off, num(on), num(off), metCell(on >= sealedGoal*off))
		default: // a time: the throughput ratio is its inverse
			lines[i].goalFigure = fmt.Sprintf("%.2fx (%s vs %s µs) | %s", off/on, num(on), num(off), metCell(off >= sealedGoal*on))
		}
	}
	return lines
}
