package main

import (
	"bufio"
	"fmt"
)

// What verify reports of each file, and the summaries its checks share.

// fileReport is what verify found in one file.
type fileReport struct {
	Path        string   `json:"path"`
	Kind        string   `json:"kind"`
	Batches     int      `json:"batches,omitempty"`
	Records     int64    `json:"records,omitempty"`
	FirstOffset *int64   `json:"firstOffset,omitempty"`
	LastOffset  *int64   `json:"lastOffset,omitempty"`
	Bytes       int64    `json:"bytes"`
	Entries     int      `json:"entries,omitempty"`
	Problems    []string `json:"problems,omitempty"`
	Notes       []string `json:"notes,omitempty"`
}

func (r *fileReport) problemf(format string, args ...any) {
	const max = 100
	if len(r.Problems) == max {
		r.Problems = append(r.Problems, "… more problems not listed")
	}
	if len(r.Problems) < max {
		r.Problems = append(r.Problems, fmt.Sprintf(format, args...))
	}
}

func (r *fileReport) print(w *bufio.Writer) {
	status := "ok  "
	if len(r.Problems) > 0 {
		status = "FAIL"
	}
	fmt.Fprintf(w, "%s %s: ", status, r.Path)
	switch r.Kind {
	case "log":
		fmt.Fprintf(w, "%d batches, %d records", r.Batches, r.Records)
		if r.FirstOffset != nil {
			fmt.Fprintf(w, ", offsets %d..%d", *r.FirstOffset, *r.LastOffset)
		}
		fmt.Fprintf(w, ", %d bytes\n", r.Bytes)
	case "object", "manifest":
		fmt.Fprintf(w, "%s, %d bytes\n", r.Kind, r.Bytes)
	default:
		fmt.Fprintf(w, "%d entries, %d bytes\n", r.Entries, r.Bytes)
	}
	for _, p := range r.Problems {
		fmt.Fprintf(w, "     problem: %s\n", p)
	}
	for _, n := range r.Notes {
		fmt.Fprintf(w, "     note: %s\n", n)
	}
}

// batchInfo is what the index checks need to know about each batch.
type batchInfo struct {
	position     int64
	lastOffset   int64
	maxTimestamp int64
}

// logSummary is the result of checking one .log.
type logSummary struct {
	batches []batchInfo
	size    int64
}
