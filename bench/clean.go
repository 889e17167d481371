package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"time"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/compaction"
	"github.com/tierlog/tierlog/local"
	"github.com/tierlog/tierlog/record"
)

// The cleaner's workload is compaction's BenchmarkClean at the bench's
// size: 100-byte values with keys "key-%08d" (about 107 bytes a record on
// disk), in 16 KiB batches, keys drawn uniformly from one tenth as many
// distinct keys as records; the log rolled, so every segment is closed
// and dirty. cleanSetup writes it once into dir/template; each run
// (runClean) cleans a copy of it in a fresh process with an offset map
// of compaction.DefaultMemoryBytes, as the Cleaner's default.

// cleanConfig is a compacted topic whose replaced files go at once.
func cleanConfig() (backend.Config, error) {
	return backend.ParseConfig(map[string]string{"cleanup.policy": "compact", "file.delete.delay.ms": "0"})
}

func openClean(dir string) (*local.Log, error) {
	cfg, err := cleanConfig()
	if err != nil {
		return nil, err
	}
	return local.Open(dir, local.Options{Config: cfg, CleanShutdown: true, HighWatermark: 1 << 62, LogStartOffset: -1})
}

// cleanSetup writes the cleaner's input log: bytes of records on disk.
func cleanSetup(dir string, bytes int64) error {
	l, err := openClean(filepath.Join(dir, "template"))
	if err != nil {
		return err
	}
	defer l.Close()
	records := int(bytes / 107)
	keys := max(records/10, 1)
	var bl record.Builder
	rng := rand.New(rand.NewPCG(1, 2))
	value := make([]byte, 100)
	key := make([]byte, 0, 16)
	now := time.Now().UnixMilli()
	for written := 0; written < records; {
		bl.Reset(record.NewBatchHeader())
		for bl.Size() < 16<<10-200 && written < records {
			key = fmt.Appendf(key[:0], "key-%08d", rng.IntN(keys))
			bl.Append(now, key, value, nil)
			written++
		}
		batch, err := bl.Build()
		if err != nil {
			return err
		}
		info, err := l.Append(context.Background(), batch, backend.AppendOptions{AssignOffsets: true})
		if err != nil {
			return err
		}
		if err := l.SetHighWatermark(info.LastOffset + 1); err != nil {
			return err
		}
	}
	if err := l.Roll(); err != nil {
		return err
	}
	return l.Close()
}

// runClean cleans a copy of the template log once and reports MB/s of
// input (the bytes the round read).
func runClean(dir string) (result, error) {
	res := result{System: "compaction", Values: map[string]float64{}}
	run := filepath.Join(dir, "run")
	defer os.RemoveAll(run)
	if err := os.CopyFS(run, os.DirFS(filepath.Join(dir, "template"))); err != nil {
		return res, err
	}
	l, err := openClean(run)
	if err != nil {
		return res, err
	}
	defer l.Close()
	m, err := compaction.NewOffsetMap(compaction.DefaultMemoryBytes)
	if err != nil {
		return res, err
	}
	start := time.Now()
	st, err := compaction.Clean(context.Background(), l, -1, compaction.Options{Map: m})
	took := time.Since(start)
	if err != nil {
		return res, err
	}
	if st.BytesRead == 0 || st.RecordsRemoved == 0 {
		return res, fmt.Errorf("the cleaner read %d bytes and removed %d records: nothing was cleaned", st.BytesRead, st.RecordsRemoved)
	}
	res.Values["cleanMBps"] = float64(st.BytesRead) / 1e6 / took.Seconds()
	res.Values["cleanInputMB"] = float64(st.BytesRead) / 1e6
	res.Values["cleanKeys"] = float64(st.Keys)
	res.Values["cleanOutIn"] = st.Ratio()
	res.PeakRSSMB = peakRSSMB()
	return res, nil
}
