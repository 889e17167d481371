package main

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"
)

// The groups of Go benchmarks bench-compare runs as `go test -bench`
// children (issue 28): diskless produce, the layered manifest, attached
// partitions' heap, compacted tiered topics and the reference broker end
// to end. Each benchmark runs once (-count 1, most with -benchtime 1x:
// each iteration is a timed workload), and its figures fill rows with
// their goals. Heavier sizes are groups of their own, run by -only.

// Goals of the groups' rows.
const (
	coldTailGoal      = 0.5      // a cold diskless tail's consume over raw ranged GETs of its extents
	disklessBroker    = 0.8      // diskless produce through the broker over classic tiered's
	bucketConsumeGoal = 0.8      // consume from the bucket (tiered) or the cache (diskless) over local
	manifestHeadGoal  = 64 << 10 // the layered manifest's head, bytes (a commit's cost flat in the log's length)
	manifestLifeGoal  = 2e6      // manifest bytes over a life of manifestLifeAt segments (issue 27)
	manifestLifeAt    = 2000
	attachedHeapGoal  = 20.0 // heap bytes a remote segment attached: 200 MB at 10,000 x 1,000
	claimGoalMs       = 5000 // a claim of every partition at a new epoch, at 10,000 partitions
	claimGoalAt       = 10_000
	compactBucketGoal = 2.0 // the bucket's bytes over one value per key, at 1,000,000 keys and 50,000,000 updates
)

// goGroup is one group: its -only name, whether the full run has it, its
// children, and its tables.
type goGroup struct {
	name, about string
	full        bool
	runs        []goRun
	// report writes the group's tables and returns their goals for the
	// goals table; offload is classic tiered's offload MB/s from the
	// tiered rows, or why there is none.
	report func(w io.Writer, g *goFigures, offload fig) []goalRow
}

// goGroups are the groups, the full run's in the order it runs them.
var goGroups = []goGroup{
	disklessGroup(),
	manifestGroup("manifest", true, []int{1000, 2000, 10_000, 100_000}),
	attachedGroup("attached", true, 10_000, 1000),
	compactGroup("compact", true, 20_000, 1_000_000),
	compactGroup("compact-full", false, 1_000_000, 50_000_000),
	clientsGroup("clients", true, 1<<20),
}

// groupByName is the group called name, or nil.
func groupByName(name string) *goGroup {
	for i := range goGroups {
		if goGroups[i].name == name {
			return &goGroups[i]
		}
	}
	return nil
}

// groupResult is a group with what its children printed.
type groupResult struct {
	group   *goGroup
	figures *goFigures
}

// reportGroups writes the groups' tables, and a line of the time each
// took, and returns their goals.
func reportGroups(w io.Writer, groups []groupResult, offload fig) []goalRow {
	var goals []goalRow
	var took []string
	for _, gr := range groups {
		goals = append(goals, gr.group.report(w, gr.figures, offload)...)
		took = append(took, fmt.Sprintf("%s %v", gr.group.name, gr.figures.took.Round(time.Second)))
	}
	if len(took) > 0 {
		fmt.Fprintf(w, "\nThe groups of Go benchmarks took (go test builds included): %s.\n", strings.Join(took, ", "))
	}
	return goals
}

// runGroup runs every child of gr, one after another.
func runGroup(gr *goGroup) *goFigures {
	fmt.Fprintf(os.Stderr, "%s (go test -bench)\n", gr.name)
	g := newGoFigures()
	for _, r := range gr.runs {
		g.run(r)
	}
	fmt.Fprintf(os.Stderr, "%s took %v\n", gr.name, g.took.Round(time.Second))
	return g
}

// fig is one figure of a benchmark, or why it has none.
type fig struct {
	v   float64
	why string
}

func (g *goFigures) fig(name, unit string) fig {
	v, why := g.value(name, unit)
	return fig{v, why}
}

// num prints a figure to three significant digits or so, as stat does.
func num(x float64) string {
	switch {
	case x >= 100 || x == 0:
		return strconv.FormatFloat(x, 'f', 0, 64)
	case x >= 10:
		return strconv.FormatFloat(x, 'f', 1, 64)
	default:
		return strconv.FormatFloat(x, 'f', 2, 64)
	}
}

// thousands prints x rounded, with thousands separated by commas.
func thousands(x float64) string {
	s := strconv.FormatInt(int64(x+0.5), 10)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// ratio prints a ratio of figures to three significant digits.
func ratio(x float64) string { return strconv.FormatFloat(x, 'g', 3, 64) + "x" }

// missing is why the first of figs without a figure has none ("" when
// every one has its figure).
func missing(figs ...fig) string {
	for _, f := range figs {
		if f.why != "" {
			return f.why
		}
	}
	return ""
}

// cell is format filled with the figures' values by f, or, when one is
// missing, why.
func cell(f func(v ...float64) string, figs ...fig) string {
	if why := missing(figs...); why != "" {
		return "**no figure**: " + strings.ReplaceAll(why, "|", "\\|")
	}
	var v []float64
	for _, x := range figs {
		v = append(v, x.v)
	}
	return f(v...)
}

// goalOf is the goal row of goal, met when ok holds of the figures' values;
// not measured when one is missing.
func goalOf(goal string, figure func(v ...float64) string, ok func(v ...float64) bool, figs ...fig) goalRow {
	if why := missing(figs...); why != "" {
		return goalRow{goal: goal, missing: why}
	}
	var v []float64
	for _, x := range figs {
		v = append(v, x.v)
	}
	return goalRow{goal: goal, figure: figure(v...), met: ok(v...)}
}

// text is a goal's cell: the goal and its figure, or why it has none.
func (g goalRow) text() string {
	if g.missing != "" {
		return fmt.Sprintf("%s: no figure (%s)", g.goal, strings.ReplaceAll(g.missing, "|", "\\|"))
	}
	return g.goal + ": " + g.figure
}

// metText is a goal's met cell.
func (g goalRow) metText() string {
	if g.missing != "" {
		return "**not measured**"
	}
	return metCell(g.met)
}

// cells are the goal and met cells of a row with the goals gs: met when
// every one is.
func cells(gs ...goalRow) string {
	var texts []string
	met := "met"
	for _, g := range gs {
		texts = append(texts, g.text())
		switch {
		case g.missing != "":
			met = "**not measured**"
		case !g.met && met == "met":
			met = metCell(false)
		}
	}
	return strings.Join(texts, "; ") + " | " + met
}

func disklessGroup() goGroup {
	return goGroup{
		name: "diskless", full: true,
		about: "diskless produce: WAL PUTs/s, acknowledgement latency, throughput, a cold tail (MinIO, 20 ms added to every PUT)",
		runs:  []goRun{{dir: "..", pkg: "./tiered", bench: "^BenchmarkDiskless(PutRate|AckLatency|Produce|ColdTail)$", timeout: 15 * time.Minute}},
		report: func(w io.Writer, g *goFigures, offload fig) []goalRow {
			var goals []goalRow
			fmt.Fprintf(w, "\n| diskless topics: tiered.Backend on MinIO on loopback, 20 ms added to every PUT (`go test ./tiered -bench Diskless`, one run) | figure | beside it | goal | |\n| --- | --- | --- | --- | --- |\n")
			const pr = "DisklessPutRate"
			puts, bound, day := g.fig(pr, "puts/s"), g.fig(pr, "bound-puts/s"), g.fig(pr, "puts/day")
			gl := goalOf("WAL PUTs/s <= 1 / commit interval + bytes a second / 8 MiB",
				func(v ...float64) string { return fmt.Sprintf("%s vs %s", num(v[0]), num(v[1])) },
				func(v ...float64) bool { return v[0] <= v[1] }, puts, bound)
			goals = append(goals, gl)
			fmt.Fprintf(w, "| WAL PUTs of 1,000 diskless partitions of one Backend, 1 KiB appends at 1 MB/s in all, for 5 s | %s | %s | %s |\n",
				cell(func(v ...float64) string { return fmt.Sprintf("%s PUTs/s (%s PUTs a day)", num(v[0]), thousands(v[1])) }, puts, day),
				cell(func(v ...float64) string { return fmt.Sprintf("the bound: %s PUTs/s", num(v[0])) }, bound), cells(gl))

			const al = "DisklessAckLatency"
			ap50, ap99, goal := g.fig(al, "ack-p50-ms"), g.fig(al, "ack-p99-ms"), g.fig(al, "goal-p99-ms")
			pp50, pp99, idle := g.fig(al, "put-p50-ms"), g.fig(al, "put-p99-ms"), g.fig(al, "idle-ack-p50-ms")
			gl = goalOf("ack p99 <= commit interval + raw PUT p99 + 10 ms",
				func(v ...float64) string { return fmt.Sprintf("%s vs %s ms", num(v[0]), num(v[1])) },
				func(v ...float64) bool { return v[0] <= v[1] }, ap99, goal)
			goals = append(goals, gl)
			rawPut := cell(func(v ...float64) string {
				return fmt.Sprintf("raw PUT of 16 KiB, the same run: p50 %s ms, p99 %s ms", num(v[0]), num(v[1]))
			}, pp50, pp99)
			fmt.Fprintf(w, "| acknowledgement latency (acks=all): one partition, 16 KiB batches, each waited for | %s | %s | %s |\n",
				cell(func(v ...float64) string { return fmt.Sprintf("p50 %s ms, p99 %s ms", num(v[0]), num(v[1])) }, ap50, ap99), rawPut, cells(gl))
			fmt.Fprintf(w, "| the same, each append after a quiet spell longer than a commit interval | %s | %s | none: reported | |\n",
				cell(func(v ...float64) string { return fmt.Sprintf("p50 %s ms", num(v[0])) }, idle), rawPut)

			const dp = "DisklessProduce/"
			in1, in2, in4 := g.fig(dp+"in-flight=1", "MB/s"), g.fig(dp+"in-flight=2", "MB/s"), g.fig(dp+"in-flight=4", "MB/s")
			raw1, raw2 := g.fig(dp+"raw-put-8MiB", "MB/s-1-stream"), g.fig(dp+"raw-put-8MiB", "MB/s-2-stream")
			classic := "classic tiered: " + cell(func(v ...float64) string {
				return fmt.Sprintf("offload %s MB/s (the tiered rows: versitygw, no added latency)", num(v[0]))
			}, offload)
			fmt.Fprintf(w, "| produce into 4 diskless partitions of one Backend, 256 MiB in 256 KiB batches, until all is in the bucket: 1 / 2 / 4 WAL objects in flight | %s | %s; %s | none: reported | |\n",
				cell(func(v ...float64) string { return fmt.Sprintf("%s / %s / %s MB/s", num(v[0]), num(v[1]), num(v[2])) }, in1, in2, in4),
				cell(func(v ...float64) string {
					return fmt.Sprintf("raw PUTs of 8 MiB, the same run: %s MB/s one at a time, %s two at a time", num(v[0]), num(v[1]))
				}, raw1, raw2), classic)

			for _, tail := range []string{"64MiB", "256MiB"} {
				name := "DisklessColdTail/tail=" + tail
				cold, raw := g.fig(name, "cold-MB/s"), g.fig(name, "raw-get-MB/s")
				gl := goalOf(fmt.Sprintf("a cold %s tail consumed >= %.1fx raw ranged GETs", strings.TrimSuffix(tail, "MiB")+" MiB", coldTailGoal),
					func(v ...float64) string {
						return fmt.Sprintf("%s (%s vs %s MB/s)", ratio(v[0]/v[1]), num(v[0]), num(v[1]))
					},
					func(v ...float64) bool { return v[0] >= coldTailGoal*v[1] }, cold, raw)
				goals = append(goals, gl)
				fmt.Fprintf(w, "| a cold tail of %s in WAL objects only: a new leader on an empty directory claims it and consumes it from offset 0 | %s | %s | %s |\n",
					strings.TrimSuffix(tail, "MiB")+" MiB", cell(func(v ...float64) string { return num(v[0]) + " MB/s" }, cold),
					cell(func(v ...float64) string {
						return fmt.Sprintf("raw ranged GETs of the same extents, one after another: %s MB/s", num(v[0]))
					}, raw), cells(gl))
			}
			return goals
		},
	}
}

func manifestGroup(name string, full bool, sizes []int) goGroup {
	var list []string
	for _, n := range sizes {
		list = append(list, strconv.Itoa(n))
	}
	env := []string{"TIERLOG_BENCH_MANIFEST_SEGMENTS=" + strings.Join(list, ",")}
	// The figures are bytes put, which the local disk does not change;
	// its fsyncs (a roll, a commit's checkpoint) would double the time of
	// 100,000 segments. The partition's directory goes on tmpfs if any.
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		env = append(env, "TMPDIR=/dev/shm")
	}
	return goGroup{
		name: name, full: full,
		about: fmt.Sprintf("the layered manifest's bytes per commit and per life at %s segments", strings.Join(list, ", ")),
		runs:  []goRun{{dir: "..", pkg: "./tiered", bench: "^BenchmarkManifestBytesPut$", timeout: 20 * time.Minute, env: env}},
		report: func(w io.Writer, g *goFigures, _ fig) []goalRow {
			var goals []goalRow
			fmt.Fprintf(w, "\n| the layered manifest: one segment a commit, in-memory bucket (`go test ./tiered -bench ManifestBytesPut`, one run) | put over the life (heads and parts) | a commit puts: the last / the mean / the largest | backups over the life | the largest head | a new reader GETs | goal | |\n| --- | ---: | ---: | ---: | ---: | ---: | --- | --- |\n")
			for _, n := range sizes {
				b := fmt.Sprintf("ManifestBytesPut/segments=%d", n)
				life, last, largest := g.fig(b, "manifest-MB"), g.fig(b, "last-commit-bytes"), g.fig(b, "largest-commit-bytes")
				head, backup, gets, getKB := g.fig(b, "largest-head-bytes"), g.fig(b, "backup-MB"), g.fig(b, "read-GETs"), g.fig(b, "read-KB")
				gl := goalOf(fmt.Sprintf("the largest head <= %d KiB at %s segments", manifestHeadGoal>>10, thousands(float64(n))),
					func(v ...float64) string { return thousands(v[0]) + " B" },
					func(v ...float64) bool { return v[0] <= manifestHeadGoal }, head)
				goals = append(goals, gl)
				goalCells := cells(gl)
				if n == manifestLifeAt {
					lg := goalOf(fmt.Sprintf("manifest bytes over the life <= %.0f MB at %s segments", manifestLifeGoal/1e6, thousands(manifestLifeAt)),
						func(v ...float64) string { return num(v[0]) + " MB" },
						func(v ...float64) bool { return v[0]*1e6 <= manifestLifeGoal }, life)
					goals = append(goals, lg)
					goalCells = cells(lg, gl)
				}
				fmt.Fprintf(w, "| %s segments | %s | %s | %s | %s | %s | %s |\n", thousands(float64(n)),
					cell(func(v ...float64) string { return num(v[0]) + " MB" }, life),
					cell(func(v ...float64) string {
						return fmt.Sprintf("%s / %s / %s B", thousands(v[0]), thousands(v[1]*1e6/float64(n)), thousands(v[2]))
					}, last, life, largest),
					cell(func(v ...float64) string { return num(v[0]) + " MB" }, backup),
					cell(func(v ...float64) string { return thousands(v[0]) + " B" }, head),
					cell(func(v ...float64) string { return fmt.Sprintf("%.0f GETs, %s KB", v[0], num(v[1])) }, gets, getKB), goalCells)
			}
			return goals
		},
	}
}

func attachedGroup(name string, full bool, parts, segs int) goGroup {
	return goGroup{
		name: name, full: full,
		about: fmt.Sprintf("the heap of %d partitions of %d remote segments attached to one Backend, a follower step, a claim", parts, segs),
		runs: []goRun{{dir: "..", pkg: "./tiered", bench: "^BenchmarkAttachedPartitions$", timeout: 30 * time.Minute,
			env: []string{fmt.Sprintf("TIERLOG_BENCH_PARTITIONS=%d", parts), fmt.Sprintf("TIERLOG_BENCH_SEGMENTS=%d", segs)}}},
		report: func(w io.Writer, g *goFigures, _ fig) []goalRow {
			const b = "AttachedPartitions"
			var goals []goalRow
			fmt.Fprintf(w, "\n| %s partitions of %s remote segments on one Backend, in-memory bucket (`go test ./tiered -bench AttachedPartitions`, one run) | figure | goal | |\n| --- | --- | --- | --- |\n",
				thousands(float64(parts)), thousands(float64(segs)))
			heap, perSeg := g.fig(b, "heap-MB"), g.fig(b, "heap-B/seg")
			heapGoal := fmt.Sprintf("heap <= %.0f B a segment (200 MB at 10,000 x 1,000)", attachedHeapGoal)
			if parts*segs != 10_000*1000 {
				heapGoal = fmt.Sprintf("heap <= %.0f B a segment (the goal, 200 MB at 10,000 x 1,000, scaled to %s x %s: %s MB)",
					attachedHeapGoal, thousands(float64(parts)), thousands(float64(segs)), num(attachedHeapGoal*float64(parts*segs)/1e6))
			}
			gl := goalOf(heapGoal, func(v ...float64) string { return num(v[0]) + " B" },
				func(v ...float64) bool { return v[0] <= attachedHeapGoal }, perSeg)
			goals = append(goals, gl)
			fmt.Fprintf(w, "| heap once every partition read its manifest (after a GC; the in-memory bucket's bytes not counted) | %s | %s |\n",
				cell(func(v ...float64) string { return fmt.Sprintf("%s MB (%s B a segment)", num(v[0]), num(v[1])) }, heap, perSeg), cells(gl))

			gets, fms := g.fig(b, "follower-GETs"), g.fig(b, "follower-ms")
			gl = goalOf("a follower step downloads no manifest body", func(v ...float64) string { return fmt.Sprintf("%.0f GETs", v[0]) },
				func(v ...float64) bool { return v[0] == 0 }, gets)
			goals = append(goals, gl)
			fmt.Fprintf(w, "| a follower step of every partition over unchanged manifests (8 goroutines) | %s | %s |\n",
				cell(func(v ...float64) string { return fmt.Sprintf("%.0f manifest GETs, %s ms", v[0], thousands(v[1])) }, gets, fms), cells(gl))

			puts, kb, cms, lms := g.fig(b, "claim-PUTs"), g.fig(b, "claim-KB"), g.fig(b, "claim-ms"), g.fig(b, "lead-ms")
			limit := claimGoalMs * float64(parts) / claimGoalAt
			claimGoal := fmt.Sprintf("at most 2 PUTs a partition (its head and the head's backup), and under %s ms", thousands(limit))
			if parts != claimGoalAt {
				claimGoal += fmt.Sprintf(" (the goal, 5 s at %s partitions, scaled)", thousands(claimGoalAt))
			}
			gl = goalOf(claimGoal, func(v ...float64) string { return fmt.Sprintf("%s PUTs, %s ms", thousands(v[0]), thousands(v[1])) },
				func(v ...float64) bool { return v[0] <= 2*float64(parts) && v[1] < limit }, puts, cms)
			goals = append(goals, gl)
			fmt.Fprintf(w, "| a restart at a new epoch: every partition made leader and its bucket claimed, then its first retention pass (8 goroutines) | %s | %s |\n",
				cell(func(v ...float64) string {
					return fmt.Sprintf("%s PUTs, %s MB, %s ms (%s of it making them leaders)", thousands(v[0]), num(v[1]/1e3), thousands(v[2]), thousands(v[3]))
				}, puts, kb, cms, lms), cells(gl))
			fmt.Fprintf(w, "| the heap after it (the heads and the manifest cache) | %s | none: reported | |\n",
				cell(func(v ...float64) string { return num(v[0]) + " MB" }, g.fig(b, "led-heap-MB")))
			fmt.Fprintf(w, "| a second retention pass over every partition (nothing to remove; 8 goroutines) | %s | none: reported | |\n",
				cell(func(v ...float64) string { return thousands(v[0]) + " ms" }, g.fig(b, "retention-ms")))
			return goals
		},
	}
}

func compactGroup(name string, full bool, keys, updates int) goGroup {
	return goGroup{
		name: name, full: full,
		about: fmt.Sprintf("a compacted tiered topic of %d keys given %d updates (MinIO): remote bytes rewritten, the bucket's cleaner MB/s", keys, updates),
		runs: []goRun{{dir: "..", pkg: "./tiered", bench: "^BenchmarkCompactRemote$", timeout: 60 * time.Minute,
			env: []string{fmt.Sprintf("TIERLOG_COMPACT_KEYS=%d", keys), fmt.Sprintf("TIERLOG_COMPACT_UPDATES=%d", updates)}}},
		report: func(w io.Writer, g *goFigures, _ fig) []goalRow {
			const b = "CompactRemote"
			fmt.Fprintf(w, "\n| a compacted tiered topic: %s keys given %s updates of 100-byte values, 4 MiB segments, each uploaded and deleted locally, the bucket's cleaner by min.cleanable.dirty.ratio (MinIO on loopback; `go test ./tiered -bench CompactRemote`, one run) | figure | beside it | goal | |\n| --- | --- | --- | --- | --- |\n",
				thousands(float64(keys)), thousands(float64(updates)))
			live, all := g.fig(b, "bucket/live"), g.fig(b, "before-gc/live")
			goal := fmt.Sprintf("the bucket's bytes <= %.0fx one value per key", compactBucketGoal)
			if keys != 1_000_000 || updates != 50_000_000 {
				goal += fmt.Sprintf(" (the goal is set at 1,000,000 keys and 50,000,000 updates, `-only compact-full`; here at %s and %s)", thousands(float64(keys)), thousands(float64(updates)))
			}
			gl := goalOf(goal, func(v ...float64) string { return ratio(v[0]) }, func(v ...float64) bool { return v[0] <= compactBucketGoal }, live)
			fmt.Fprintf(w, "| the bucket's bytes (the .log objects the manifest names) over one value per key (key and value) | %s | %s | %s |\n",
				cell(func(v ...float64) string { return ratio(v[0]) }, live),
				cell(func(v ...float64) string {
					return fmt.Sprintf("every object under the prefix before gc: %s", ratio(v[0]))
				}, all), cells(gl))
			fmt.Fprintf(w, "| remote bytes the bucket's cleaner rewrote | %s | %s | none: reported | |\n",
				cell(func(v ...float64) string { return fmt.Sprintf("%s MB (%s the bytes appended)", num(v[0]), ratio(v[1])) }, g.fig(b, "rewritten-MB"), g.fig(b, "rewritten/appended")),
				cell(func(v ...float64) string { return fmt.Sprintf("%s requests a GiB rewritten", thousands(v[0])) }, g.fig(b, "requests/GiB-rewritten")))
			fmt.Fprintf(w, "| the bucket's cleaner: MB of remote segments cleaned a second of its rounds (map pass, GETs and uploads included) | %s | %s | none: reported | |\n",
				cell(func(v ...float64) string { return fmt.Sprintf("%s MB/s (%s MB cleaned)", num(v[0]), num(v[1])) }, g.fig(b, "remote-MB/s"), g.fig(b, "cleaned-MB")),
				cell(func(v ...float64) string {
					return fmt.Sprintf("the local cleaner on a local log given the same updates: %s MB/s", num(v[0]))
				}, g.fig(b, "local-MB/s")))
			return []goalRow{gl}
		},
	}
}

func clientsGroup(name string, full bool, records int) goGroup {
	bt := fmt.Sprintf("%dx", records)
	return goGroup{
		name: name, full: full,
		about: fmt.Sprintf("the reference broker end to end: kgo and sarama producing and consuming %d records of 1 KiB, beside kfake", records),
		runs: []goRun{
			{dir: "..", pkg: "./examples/broker/broker", bench: "^BenchmarkKgo$", benchtime: bt, timeout: 30 * time.Minute},
			{dir: "../examples/broker/clients", pkg: ".", bench: "^BenchmarkSarama$", benchtime: bt, timeout: 30 * time.Minute},
		},
		report: func(w io.Writer, g *goFigures, _ fig) []goalRow {
			var goals []goalRow
			fmt.Fprintf(w, "\n| the reference broker end to end: %s records of 1 KiB (%s MiB) to a topic of 4 partitions, produced (acks=all, uncompressed) and consumed from the start, one client at a time (`go test -bench 'Kgo\\|Sarama'`, one run) | produce MB/s | produce p99 ms | consume MB/s | beside kfake, the same client: produce / consume | goal | |\n| --- | ---: | ---: | ---: | ---: | --- | --- |\n",
				thousands(float64(records)), thousands(float64(records)/1024))
			prodMB := func(b string) fig { return g.fig(b, "produce-MB/s") }
			consMB := func(b string) fig { return g.fig(b, "consume-MB/s") }
			line := func(label, b, fake, goalCells string) {
				vs := ""
				if fake != "" {
					vs = cell(func(v ...float64) string { return fmt.Sprintf("%s / %s", ratio(v[0]/v[1]), ratio(v[2]/v[3])) },
						prodMB(b), prodMB(fake), consMB(b), consMB(fake))
				}
				fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s |\n", label,
					cell(func(v ...float64) string { return num(v[0]) }, prodMB(b)),
					cell(func(v ...float64) string { return num(v[0]) }, g.fig(b, "p99-produce-ms")),
					cell(func(v ...float64) string { return num(v[0]) }, consMB(b)), vs, goalCells)
			}
			line("kgo (idempotent): a local topic, consumed from the page cache", "Kgo/tierlog", "Kgo/kfake", "none: reported | ")

			gl := goalOf(fmt.Sprintf("consume from the bucket >= %.1fx local", bucketConsumeGoal),
				func(v ...float64) string {
					return fmt.Sprintf("%s (%s vs %s MB/s; %.0f%% of the bytes from the bucket)", ratio(v[0]/v[1]), num(v[0]), num(v[1]), 100*v[2])
				},
				func(v ...float64) bool { return v[0] >= bucketConsumeGoal*v[1] }, consMB("Kgo/tiered"), consMB("Kgo/tierlog"), g.fig("Kgo/tiered", "bucket-share"))
			goals = append(goals, gl)
			line("kgo: a tiered topic on versitygw, consumed from the bucket after local retention", "Kgo/tiered", "Kgo/kfake", cells(gl))

			pg := goalOf(fmt.Sprintf("diskless produce through the broker >= %.1fx classic tiered", disklessBroker),
				func(v ...float64) string {
					return fmt.Sprintf("%s (%s vs %s MB/s)", ratio(v[0]/v[1]), num(v[0]), num(v[1]))
				},
				func(v ...float64) bool { return v[0] >= disklessBroker*v[1] }, prodMB("Kgo/diskless"), prodMB("Kgo/tiered"))
			cg := goalOf(fmt.Sprintf("diskless consume from the local cache >= %.1fx local", bucketConsumeGoal),
				func(v ...float64) string {
					return fmt.Sprintf("%s (%s vs %s MB/s)", ratio(v[0]/v[1]), num(v[0]), num(v[1]))
				},
				func(v ...float64) bool { return v[0] >= bucketConsumeGoal*v[1] }, consMB("Kgo/diskless"), consMB("Kgo/tierlog"))
			goals = append(goals, pg, cg)
			line("kgo: a diskless topic on versitygw (no added latency), consumed from the local cache", "Kgo/diskless", "Kgo/kfake",
				fmt.Sprintf("%s; %s | produce: %s; consume: %s", pg.text(), cg.text(), pg.metText(), cg.metText()))
			line("kgo: kfake (franz-go's in-memory fake cluster)", "Kgo/kfake", "", "none: the baseline | ")
			line("sarama (async producer, not idempotent): a local topic, consumed from the page cache", "Sarama/tierlog", "Sarama/kfake", "none: reported | ")
			line("sarama: kfake", "Sarama/kfake", "", "none: the baseline | ")
			return goals
		},
	}
}
