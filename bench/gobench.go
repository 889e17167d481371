package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// goRun is one `go test -bench` child process: the benchmarks matching
// bench in pkg of the module in dir (relative to bench/), each run count
// times (default once) for benchtime (default 1x: each iteration is a
// timed workload), with env added to the harness's environment (the
// benchmarks' sizes).
type goRun struct {
	dir, pkg, bench, benchtime string
	count                      int
	env                        []string
	timeout                    time.Duration
}

// goFigures is what the `go test -bench` children of a group printed: by
// benchmark (its name without "Benchmark" and the GOMAXPROCS suffix,
// sub-benchmarks as "Name/sub") and unit, one value a run.
type goFigures struct {
	values map[string]map[string][]float64
	// failed is why a benchmark gave no figure: its failure or skip
	// message, by benchmark.
	failed map[string]string
	// runErr is why a child itself failed (its exit, a timeout, a build
	// error), by benchmark pattern; empty when every child passed.
	runErr []string
	took   time.Duration
}

func newGoFigures() *goFigures {
	return &goFigures{values: map[string]map[string][]float64{}, failed: map[string]string{}}
}

// value returns benchmark name's figure in unit (the median of its runs)
// and, when it has none, why: the benchmark's failure, an enclosing
// benchmark's, the child's, or the figure's absence from the output.
func (g *goFigures) value(name, unit string) (float64, string) {
	if vs := g.values[name][unit]; len(vs) > 0 {
		return statOf(vs).med, ""
	}
	return 0, g.failure(name, unit)
}

// failure says why benchmark name gave no figure in unit (in a run, or
// in some of several runs): its failure or skip message, else its
// parent's, else the child's own failure.
func (g *goFigures) failure(name, unit string) string {
	for n := name; ; {
		if why := g.failed[n]; why != "" {
			return why
		}
		i := strings.LastIndex(n, "/")
		if i < 0 {
			break
		}
		n = n[:i]
	}
	if len(g.runErr) > 0 {
		return strings.Join(g.runErr, "; ")
	}
	return fmt.Sprintf("Benchmark%s reported no %s", name, unit)
}

var (
	// A result line: the name, the iterations, then value-unit pairs
	// (ns/op, MB/s, B/op and every b.ReportMetric unit).
	goBenchRE = regexp.MustCompile(`^Benchmark(\S+)\s+(\d+)\s+(.*)$`)
	// With -v, a benchmark's name alone on a line starts its output.
	goStartRE = regexp.MustCompile(`^Benchmark(\S+)$`)
	// The end of a benchmark that failed or skipped, or of one that
	// logged (BENCH).
	goEndRE = regexp.MustCompile(`^\s*--- (FAIL|SKIP|BENCH): Benchmark(\S+)`)
	procsRE = regexp.MustCompile(`-\d+$`)
)

// parse reads one child's output into g. A failure's reason is the last
// line the benchmark logged: with -v its log comes before its "--- FAIL"
// (or "--- SKIP", which only -v prints), without -v after it.
func (g *goFigures) parse(out []byte) {
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	current, ended := "", ""
	logged := map[string]string{} // the last line each benchmark logged
	for sc.Scan() {
		line := sc.Text()
		if m := goEndRE.FindStringSubmatch(line); m != nil {
			name := procsRE.ReplaceAllString(m[2], "")
			current, ended = "", ""
			if m[1] == "BENCH" {
				continue
			}
			prefix := ""
			if m[1] == "SKIP" {
				prefix = "skipped: "
			}
			if msg := logged[name]; msg != "" {
				g.failed[name] = prefix + msg
			} else {
				ended = name
				g.failed[name] = prefix + "failed"
			}
			continue
		}
		if m := goStartRE.FindStringSubmatch(line); m != nil {
			current, ended = procsRE.ReplaceAllString(m[1], ""), ""
			continue
		}
		if trimmed := strings.TrimSpace(line); trimmed != "" && trimmed != line {
			// A line a benchmark logged (indented).
			if current != "" {
				logged[current] = trimmed
			}
			if ended != "" {
				g.failed[ended] = strings.TrimSuffix(g.failed[ended], "failed") + trimmed
			}
			continue
		}
		m := goBenchRE.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		current, ended = "", ""
		name := procsRE.ReplaceAllString(m[1], "")
		f := strings.Fields(m[3])
		for i := 0; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				break
			}
			if g.values[name] == nil {
				g.values[name] = map[string][]float64{}
			}
			g.values[name][f[i+1]] = append(g.values[name][f[i+1]], v)
		}
	}
}

// run runs r as a child `go test` and adds what it printed to g. A child
// that fails (a benchmark's failure, a timeout, a build error) leaves its
// reason in g, for the rows without figures to say; the caller goes on.
func (g *goFigures) run(r goRun) {
	start := time.Now()
	defer func() { g.took += time.Since(start) }()
	benchtime := r.benchtime
	if benchtime == "" {
		benchtime = "1x"
	}
	count := max(r.count, 1)
	timeout := r.timeout
	if timeout == 0 {
		timeout = 20 * time.Minute
	}
	// The child's own -timeout panics first and names the benchmark
	// running; this one catches a child that hangs in its cleanup.
	ctx, cancel := context.WithTimeout(context.Background(), timeout+2*time.Minute)
	defer cancel()
	// -v prints a skipped benchmark's reason (the S3 server missing).
	cmd := exec.CommandContext(ctx, "go", "test", r.pkg, "-run", "^$", "-bench", r.bench, "-benchtime", benchtime,
		"-count", strconv.Itoa(count), "-timeout", timeout.String(), "-v")
	cmd.Dir = r.dir
	cmd.Env = append(os.Environ(), r.env...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	fmt.Fprintf(os.Stderr, "go test %s -bench '%s' -benchtime %s %s\n", r.pkg, r.bench, benchtime, strings.Join(r.env, " "))
	err := cmd.Run()
	g.parse(out.Bytes())
	if err == nil {
		return
	}
	why := childFailure(out.Bytes(), errOut.Bytes(), err)
	if ctx.Err() != nil {
		why = fmt.Sprintf("killed after %v: %s", timeout+2*time.Minute, why)
	}
	g.runErr = append(g.runErr, "go test -bench '"+r.bench+"': "+why)
	fmt.Fprintf(os.Stderr, "go test %s -bench '%s' failed: %s\n%s%s", r.pkg, r.bench, why, tail(out.Bytes(), 20), tail(errOut.Bytes(), 20))
}

// childFailure says why a `go test` child failed: its panic (a timeout
// names itself so), else its first line of errors (a build error), else
// its exit.
func childFailure(out, errOut []byte, err error) string {
	for _, line := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(line, "panic: ") {
			return fmt.Sprintf("%s (%v)", line, err)
		}
	}
	for _, line := range strings.Split(string(errOut), "\n") {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			return fmt.Sprintf("%s (%v)", line, err)
		}
	}
	return err.Error()
}

// tail is the last n lines of b.
func tail(b []byte, n int) string {
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	if len(lines) == 1 && lines[0] == "" {
		return ""
	}
	return strings.Join(lines, "\n") + "\n"
}
