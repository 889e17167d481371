package main

import (
	"fmt"
	"io"
)

// machineRows are the machine's rows, each the raw baseline of the
// workloads named in of.
var machineRows = []struct{ key, name, of string }{
	{"write", "os.File.Write, 16 KiB writes, page cache", "append"},
	{"writeFsync", "os.File.Write, then one fsync", "append, then durable"},
	{"writeFsync1000", "os.File.Write, 16 KiB writes, fsync every 1,000 records (100,000 bytes)", "append, fsync every 1,000 records"},
	{"writeFdatasync1000", "os.File.Write, 16 KiB writes, fdatasync every 1,000 records (100,000 bytes)", "append, fsync every 1,000 records"},
	{"write64k", "os.File.Write, 64 KiB writes (a produce request's four batches), page cache", "produce-shaped append"},
	{"writeValidated", "16 KiB record batches, each validated as a leader validates a client's (CRC, every record decoded), then os.File.Write; MB/s of values", "append: the limit a log that checks what it writes can reach"},
	{"write64kValidated", "the same, four batches validated, then one 64 KiB os.File.Write; MB/s of values", "produce-shaped append: the same limit"},
	{"writeFsyncEach", "os.File.Write, fsync after every 16 KiB write (1/16 of the bytes)", "flush.messages=1"},
	{"write64kFsyncEach", "os.File.Write, fsync after every 64 KiB write (1/8 of the bytes)", "a Flush per produce request"},
	{"sendfile", "sendfile(2) of the file to a loopback socket", "sequential read to a socket"},
	{"crc32c", "CRC-32C", "append (every batch's CRC is checked)"},
	{"copy", "copy (memory bandwidth)", "reads into a buffer"},
}

// Goals of the broker-shaped, remote and cleaner rows (issue 17).
const (
	appendGoal = 0.8 // appends over the raw writes of the same shape (issue 28)
	fetchGoal  = 0.8 // fetch-shaped reads over raw sendfile of the same ranges
	remoteGoal = 0.8 // remote reads under load over raw ranged GETs of the same objects
	cleanGoal  = 250 // key compaction, MB/s of input
)

// goalRow is one goal with its figure, as the goals table prints it.
type goalRow struct {
	goal, figure string
	met          bool
	// missing is why the goal has no figure (its benchmark failed).
	missing string
}

// count prints a stat of counts, zero included.
func (s stat) count() string { return fmt.Sprintf("%.0f (%.0f–%.0f)", s.med, s.lo, s.hi) }

func metCell(ok bool) string {
	if ok {
		return "met"
	}
	return "**not met**"
}

// reportShapes writes the tables of the broker shapes, the remote reads
// under load and the cleaner, from the medians of their runs, and returns
// their goals for the goals table and the names of the rows whose MB/s is
// noisy. A workload without runs is left out.
func reportShapes(w io.Writer, byKind map[string][]result) (goals []goalRow, noisy []string) {
	v := func(kind, key string) stat {
		return collect(byKind[kind], func(r result) float64 { return r.Values[key] })
	}
	// rate is a row's MB/s, noted when noisy.
	rate := func(name, kind, key string) stat {
		s := v(kind, key)
		if s.noisy() {
			noisy = append(noisy, name)
		}
		return s
	}
	base := func(key string) stat { return v("baseline", key) }
	if len(byKind["broker"]) > 0 {
		b := func(key string) stat { return v("broker", key) }
		fmt.Fprintf(w, "\n| tierlog, broker shapes | MB/s of values | call p50 µs | call p99 µs | raw baseline, MB/s | goal | |\n| --- | ---: | ---: | ---: | ---: | --- | --- |\n")
		for _, r := range []struct{ key, name, base string }{
			{"produce", fmt.Sprintf("produce-shaped append: %d batches of 16 KiB an Append, one partition", requestBatches), "write64k"},
			{"produceFlush", "produce-shaped append, one partition, a Flush after every Append (1/8 of the bytes)", "write64kFsyncEach"},
			{"flushMessages1", "flush.messages=1: one 16 KiB batch an Append, each fsynced by the log (1/16 of the bytes)", "writeFsyncEach"},
			{"many", fmt.Sprintf("produce-shaped append to %d partitions of one Backend from %d goroutines", manyPartitions, appendGoroutines), "write64k"},
			{"manyFlush", fmt.Sprintf("produce-shaped append, %d partitions, a Flush after every Append (1/8 of the bytes)", manyPartitions), "write64kFsyncEach"},
		} {
			got := rate(r.name, "broker", r.key+"MBps")
			goal := "none: reported | "
			if r.key == "produce" {
				raw, checked := base(r.base), base("write64kValidated")
				g := goalRow{goal: fmt.Sprintf("produce-shaped append >= %.1fx raw 64 KiB writes", appendGoal),
					figure: fmt.Sprintf("%.2fx (%.0f vs %.0f MB/s); %.2fx the validated raw writes (%.0f)", got.med/raw.med, got.med, raw.med, got.med/checked.med, checked.med),
					met:    got.med >= appendGoal*raw.med && raw.med > 0}
				goals = append(goals, g)
				goal = g.goal + ": " + g.figure + " | " + metCell(g.met)
			}
			fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s |\n", r.name, got, b(r.key+"P50us"), b(r.key+"P99us"), base(r.base), goal)
		}
		f, raw := rate("fetch-shaped reads", "broker", "fetchMBps"), rate("fetch-shaped reads' raw sendfile", "broker", "rawSendfileMBps")
		g := goalRow{goal: fmt.Sprintf("fetch-shaped reads >= %.1fx raw sendfile of the same ranges", fetchGoal),
			figure: fmt.Sprintf("%.2fx (%.0f vs %.0f MB/s)", f.med/raw.med, f.med, raw.med), met: f.med >= fetchGoal*raw.med && raw.med > 0}
		goals = append(goals, g)
		fmt.Fprintf(w, "\n| fetch-shaped reads: %d consumers, 1 MiB fetches at random offsets, each to its own loopback socket | MB/s sent | fetch p50 µs | fetch p99 µs | goal | |\n| --- | ---: | ---: | ---: | --- | --- |\n", fetchConsumers)
		fmt.Fprintf(w, "| tierlog: Read, then Records.WriteTo the socket | %s | %s | %s | %s: %s | %s |\n", f, b("fetchP50us"), b("fetchP99us"), g.goal, g.figure, metCell(g.met))
		fmt.Fprintf(w, "| raw: sendfile(2) of the same byte ranges of a plain copy of the log | %s | %s | %s | none: the baseline | |\n", raw, b("rawSendfileP50us"), b("rawSendfileP99us"))
	}
	if len(byKind["remote-tiered"]) > 0 && len(byKind["remote-raw"]) > 0 {
		t, raw := rate("remote reads under load", "remote-tiered", "remoteMBps"), rate("remote reads' raw ranged GETs", "remote-raw", "rawGetMBps")
		rss := func(kind string) stat { return collect(byKind[kind], func(r result) float64 { return r.PeakRSSMB }) }
		g := goalRow{goal: fmt.Sprintf("remote reads under load >= %.1fx raw ranged GETs of the same objects", remoteGoal),
			figure: fmt.Sprintf("%.2fx (%.0f vs %.0f MB/s)", t.med/raw.med, t.med, raw.med), met: t.med >= remoteGoal*raw.med && raw.med > 0}
		goals = append(goals, g)
		fmt.Fprintf(w, "\n| remote reads under load: %d cold consumers, one a partition, each reading its offloaded segment from the start (versitygw) | MB/s | read p50 µs | read p99 µs | peak RSS of the process, MB | goal | |\n| --- | ---: | ---: | ---: | ---: | --- | --- |\n", fetchConsumers)
		fmt.Fprintf(w, "| tiered.Backend, its default caches (64 MiB chunks, 64 MiB indexes), 1 MiB fetches | %s | %s | %s | %s | %s: %s | %s |\n",
			t, v("remote-tiered", "remoteP50us"), v("remote-tiered", "remoteP99us"), rss("remote-tiered"), g.goal, g.figure, metCell(g.met))
		fmt.Fprintf(w, "| raw: ranged GETs of 1 MiB of the same .log objects, through the same S3 driver | %s | %s | %s | %s | none: the baseline | |\n",
			raw, v("remote-raw", "rawGetP50us"), v("remote-raw", "rawGetP99us"), rss("remote-raw"))
		fmt.Fprintf(w, "\nRemote reads: RSS after opening the %d partitions %s MB; fetches refused busy by the remote reader pool and retried, a run: %s.\n",
			fetchConsumers, v("remote-tiered", "remoteOpenRSSMB"), v("remote-tiered", "remoteBusy").count())
	}
	if len(byKind["clean"]) > 0 {
		c := rate("key compaction", "clean", "cleanMBps")
		g := goalRow{goal: fmt.Sprintf("key compaction >= %d MB/s", cleanGoal), figure: fmt.Sprintf("%.0f MB/s", c.med), met: c.med >= cleanGoal}
		goals = append(goals, g)
		fmt.Fprintf(w, "\n| cleaner | MB/s of input | input MB | distinct keys | output/input | peak RSS MB | goal | |\n| --- | ---: | ---: | ---: | ---: | ---: | --- | --- |\n")
		fmt.Fprintf(w, "| compaction.Clean of a rolled log, one round, offset map of compaction.DefaultMemoryBytes | %s | %s | %s | %s | %s | %s | %s |\n",
			c, v("clean", "cleanInputMB"), v("clean", "cleanKeys"), v("clean", "cleanOutIn"),
			collect(byKind["clean"], func(r result) float64 { return r.PeakRSSMB }), g.goal, metCell(g.met))
	}
	return goals, noisy
}
