package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
)

// benchLine is one tiered figure over the runs.
type benchLine struct {
	label, unit      string
	values           []float64
	goal, goalFigure string
	// failed is why the benchmark gave no figure (its failure message).
	failed string
}

// The tiered benchmarks live with the tiered package (go test ./tiered
// -bench): offload beside raw PutObject of the same files, cold and cached
// remote reads beside one raw ranged GET and a local read, and sequential
// remote consumption with and without read-ahead. The harness runs them in
// the repository root and reads their output.
var tieredBenchmarks = []struct {
	name, label, unit string
}{
	{"Offload", "offload (31 MiB in 1 MiB segments, manifest commits)", "MB/s"},
	{"RawPut", "raw PutObject of the same files", "MB/s"},
	{"ColdRemoteRead", "cold remote read of a batch (one ranged GET)", "µs"},
	{"RawRangedGet80KiB", "raw ranged GET of the same size", "µs"},
	{"CachedRemoteRead", "cached remote read", "µs"},
	{"LocalRead", "local read of the same kind of batch", "µs"},
	{"SequentialRemote/no-prefetch", "sequential remote consumption, no read-ahead", "MB/s"},
	{"SequentialRemote/prefetch", "sequential remote consumption, 1 MiB read-ahead", "MB/s"},
}

var (
	benchRE = regexp.MustCompile(`^Benchmark(\S+?)(-\d+)?\s+\d+\s+([\d.]+) ns/op(?:\s+([\d.]+) MB/s)?`)
	failRE  = regexp.MustCompile(`^--- FAIL: Benchmark(\S+?)(-\d+)?$`)
)

func runTiered(runs int) ([]benchLine, error) {
	var names []string
	for _, b := range tieredBenchmarks {
		names = append(names, strings.Split(b.name, "/")[0])
	}
	cmd := exec.Command("go", "test", "./tiered", "-run", "^$", "-bench", "^Benchmark("+strings.Join(names, "|")+")$",
		"-count", strconv.Itoa(runs), "-timeout", "20m")
	cmd.Dir = ".."
	cmd.Env = os.Environ()
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	// A benchmark that fails leaves the others running: its row says why
	// it has no figure, and the rest of bench-compare goes on.
	runErr := cmd.Run()
	vals := map[string][]float64{}
	failed := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(out.Bytes()))
	failing := ""
	for sc.Scan() {
		line := sc.Text()
		if m := failRE.FindStringSubmatch(line); m != nil {
			failing = m[1]
			continue
		}
		if failing != "" {
			if !strings.HasPrefix(line, " ") {
				failing = ""
			} else if failed[failing] == "" {
				failed[failing] = strings.TrimSpace(line)
			}
		}
		m := benchRE.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		name := m[1]
		if m[4] != "" {
			v, _ := strconv.ParseFloat(m[4], 64)
			vals[name] = append(vals[name], v)
		} else {
			ns, _ := strconv.ParseFloat(m[3], 64)
			vals[name] = append(vals[name], ns/1000)
		}
	}
	var lines []benchLine
	for _, b := range tieredBenchmarks {
		l := benchLine{label: b.label, unit: b.unit, values: vals[b.name]}
		if len(l.values) == 0 {
			if l.failed = failed[b.name]; l.failed == "" {
				return nil, fmt.Errorf("go test ./tiered -bench: no result for Benchmark%s (%v) in:\n%s%s", b.name, runErr, out.String(), errOut.String())
			}
			fmt.Fprintf(os.Stderr, "Benchmark%s failed: %s\n", b.name, l.failed)
		}
		lines = append(lines, l)
	}
	med := func(name string) float64 {
		for _, l := range lines {
			for _, b := range tieredBenchmarks {
				if b.name == name && b.label == l.label {
					return statOf(l.values).med
				}
			}
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
	return lines, nil
}
