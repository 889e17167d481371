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

var benchRE = regexp.MustCompile(`^Benchmark(\S+?)(-\d+)?\s+\d+\s+([\d.]+) ns/op(?:\s+([\d.]+) MB/s)?`)

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
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("go test ./tiered -bench: %v\n%s%s", err, out.String(), errOut.String())
	}
	vals := map[string][]float64{}
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		m := benchRE.FindStringSubmatch(sc.Text())
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
		if len(vals[b.name]) == 0 {
			return nil, fmt.Errorf("no result for Benchmark%s in:\n%s", b.name, out.String())
		}
		lines = append(lines, benchLine{label: b.label, unit: b.unit, values: vals[b.name]})
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
	met := "met"
	if off < 0.9*put {
		met = "**not met**"
	}
	lines[0].goal = "offload >= 0.9x raw PutObject"
	lines[0].goalFigure = fmt.Sprintf("%.2fx (%.0f vs %.0f MB/s) | %s", off/put, off, put, met)
	return lines, nil
}
