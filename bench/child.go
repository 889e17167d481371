package main

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	tidwal "github.com/tidwall/wal"
)

// result is what one child process measured for one system (or
// baseline) in one run. Zero fields were not measured.
type result struct {
	System        string  `json:"system"`
	AppendMBps    float64 `json:"appendMBps"`
	SyncAppendMBp float64 `json:"syncAppendMBps"`
	ReadsPerSec   float64 `json:"readsPerSec"`
	ReadP50us     float64 `json:"readP50us"`
	ReadP99us     float64 `json:"readP99us"`
	ScanMBps      float64 `json:"scanMBps"`
	ReopenCleanMs float64 `json:"reopenCleanMs"`
	ReopenCrashMs float64 `json:"reopenCrashMs"`
	PeakRSSMB     float64 `json:"peakRSSMB"`
	Note          string  `json:"note,omitempty"`
	// Baselines and the workloads other than the systems' use these.
	Values map[string]float64 `json:"values,omitempty"`
}

// payloadMB is the megabytes of record values n records carry.
func payloadMB(n int64) float64 { return float64(n) * 100 / 1e6 }

func peakRSSMB() float64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return float64(ru.Maxrss) / 1024 // KiB on Linux
}

// runSystem measures one system: append, unclean image, clean reopen,
// random reads, scan, unclean reopen, then the durable append.
func runSystem(name string, open opener, dir string, n, reads int64) (result, error) {
	res := result{System: name}
	raftSync = false // the durable workload turns it on below
	tidwallSegments = int(n*110/int64(tidwal.DefaultOptions.SegmentSize)) + 2
	data, crash, durable := filepath.Join(dir, "data"), filepath.Join(dir, "crash"), filepath.Join(dir, "durable")
	defer os.RemoveAll(dir)

	s, err := open(data)
	if err != nil {
		return res, err
	}
	var sw stopwatch
	if err := s.Append(n, 0, &sw); err != nil {
		return res, fmt.Errorf("append: %w", err)
	}
	res.AppendMBps = payloadMB(n) / sw.total.Seconds()
	// The files as a SIGKILL would leave them: copied while the log is
	// open, without a close (page cache contents, no clean-shutdown work).
	if err := os.CopyFS(crash, os.DirFS(data)); err != nil {
		return res, err
	}
	if err := s.Close(); err != nil {
		return res, fmt.Errorf("close: %w", err)
	}

	start := time.Now()
	if s, err = open(data); err != nil {
		return res, fmt.Errorf("reopen: %w", err)
	}
	res.ReopenCleanMs = float64(time.Since(start).Microseconds()) / 1000

	// Random single-record reads, warm (the data was just written).
	rng := rand.New(rand.NewPCG(uint64(n), 42))
	lat := make([]time.Duration, reads)
	start = time.Now()
	for k := range lat {
		i := rng.Int64N(n)
		t := time.Now()
		v, err := s.Read(i)
		lat[k] = time.Since(t)
		if err != nil {
			return res, fmt.Errorf("read %d: %w", i, err)
		}
		if k%1000 == 0 {
			if err := checkValue(v, i); err != nil {
				return res, err
			}
		}
	}
	res.ReadsPerSec = float64(reads) / time.Since(start).Seconds()
	slices.Sort(lat)
	res.ReadP50us = float64(lat[len(lat)/2].Nanoseconds()) / 1000
	res.ReadP99us = float64(lat[len(lat)*99/100].Nanoseconds()) / 1000

	var seen, sum int64
	start = time.Now()
	err = s.Scan(func(v []byte) {
		sum += int64(v[0]) + int64(len(v))
		seen++
	})
	if err != nil {
		return res, fmt.Errorf("scan: %w", err)
	}
	res.ScanMBps = payloadMB(n) / time.Since(start).Seconds()
	if seen != n || sum == 0 {
		return res, fmt.Errorf("scan saw %d records of %d", seen, n)
	}
	if t, ok := s.(*tierlogSys); ok {
		start = time.Now()
		if _, err := t.scanToSocket(); err != nil {
			return res, fmt.Errorf("scan to a socket: %w", err)
		}
		res.Values = map[string]float64{"scanSocketMBps": payloadMB(n) / time.Since(start).Seconds()}
	}
	if err := s.Close(); err != nil {
		return res, err
	}
	os.RemoveAll(data)

	start = time.Now()
	c, err := open(crash)
	if err != nil {
		return res, fmt.Errorf("reopen after a crash: %w", err)
	}
	res.ReopenCrashMs = float64(time.Since(start).Microseconds()) / 1000
	if v, err := c.Read(n - 1); err != nil || checkValue(v, n-1) != nil {
		res.Note = fmt.Sprintf("after the crash reopen, the last record reads %v", err)
	}
	c.Close()
	os.RemoveAll(crash)

	// The durable append's fsyncs must not wait behind the writeback of
	// what the phases above left dirty (a peer that never syncs leaves
	// its whole log): everything is made durable first, untimed, as the
	// raw baselines' durable writes start.
	syscall.Sync()
	raftSync = true
	d, err := open(durable)
	if err != nil {
		return res, err
	}
	var dsw stopwatch
	switch err := d.Append(n, 1000, &dsw); {
	case err == errNoFsync:
	case err != nil:
		return res, fmt.Errorf("durable append: %w", err)
	default:
		res.SyncAppendMBp = payloadMB(n) / dsw.total.Seconds()
	}
	d.Close()
	res.PeakRSSMB = peakRSSMB()
	return res, nil
}

// fetchesPerConsumer is how many fetches each fetch-shaped consumer makes:
// together about four times the log's bytes (4 GiB for the 1 GiB run).
func fetchesPerConsumer(n int64) int { return int(max(4, n*100/(16<<20))) }

// child runs one measurement in this process and prints its result (a
// setup prints an empty one).
func child(kind, dir string, n, reads int64) error {
	var res result
	var err error
	switch kind {
	case "baseline":
		res, err = runBaselines(dir, n)
	case "broker":
		res, err = runBroker(dir, n, fetchConsumers, fetchesPerConsumer(n))
	case "partitions-setup":
		err = partitionsSetup(dir)
	case "partitions":
		res, err = runPartitions(dir)
	case "clean-setup":
		err = cleanSetup(dir, n*100)
	case "clean":
		res, err = runClean(dir)
	case "remote-setup":
		err = remoteSetup(dir, n)
	case "remote-tiered":
		res, err = runRemoteTiered(dir)
	case "remote-raw":
		res, err = runRemoteRaw(dir)
	default:
		for _, s := range systems {
			if s.name == kind {
				res, err = runSystem(s.name, s.open, dir, n, reads)
			}
		}
		if res.System == "" && err == nil {
			return fmt.Errorf("unknown system %q", kind)
		}
	}
	if err != nil {
		return fmt.Errorf("%s: %w", kind, err)
	}
	return json.NewEncoder(os.Stdout).Encode(res)
}
