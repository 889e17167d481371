package local_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/local"
	"github.com/tierlog/tierlog/producerstate"
	"github.com/tierlog/tierlog/record"
)

// txnBatch is a transactional batch of n records by producer pid (epoch
// 0) with sequences from seq.
func txnBatch(pid int64, seq int32, n int) []byte {
	var b record.Builder
	h := record.NewBatchHeader()
	h.ProducerID, h.ProducerEpoch, h.BaseSequence, h.Transactional = pid, 0, seq, true
	b.Reset(h)
	for j := range n {
		b.Append(time.Now().UnixMilli(), []byte("k"), fmt.Appendf(nil, "txn-%d-%d", pid, int(seq)+j), nil)
	}
	out, _ := b.Build()
	return append([]byte(nil), out...)
}

// TestAbortBelowLocalStartAfterCrash: a tiered log whose local retention
// deleted the segment holding a transaction's first batch (the bucket
// holds it) keeps the .txnindex entry of the transaction's ABORT marker,
// with the transaction's true first offset, across a restart, clean or
// not. An unclean one recovers the segment holding the marker by
// replaying its batches over the producer state as of its base, the
// snapshot at the local log start: the transaction began below the local
// log, so only that snapshot knows it was open.
func TestAbortBelowLocalStartAfterCrash(t *testing.T) {
	const pid = 42
	cases := []struct {
		name string
		// markerAfterTrim appends the ABORT marker once local retention
		// has trimmed the transaction's first segment (else before).
		markerAfterTrim bool
		// recoveryPoint is the checkpointed recovery point, from the log
		// as the crash left it.
		recoveryPoint func(l *local.Log) int64
	}{
		{"marker then trim, recovery point at the last roll", false, func(l *local.Log) int64 { return activeBase(l) }},
		{"marker then trim, no recovery point", false, func(*local.Log) int64 { return 0 }},
		{"trim then marker, recovery point at the last roll", true, func(l *local.Log) int64 { return activeBase(l) }},
		{"trim then marker, recovery point at the log end", true, func(l *local.Log) int64 { return l.Offsets().LogEnd }},
		// Only the last segment is recovered: the marker's segment keeps
		// its .txnindex as written.
		{"marker then trim, recovery point at the log end", false, func(l *local.Log) int64 { return l.Offsets().LogEnd }},
	}
	for _, tc := range cases {
		for _, clean := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/clean=%v", tc.name, clean), func(t *testing.T) {
				c := cfg(t, "remote.storage.enable", "true", "file.delete.delay.ms", "0")
				dir := filepath.Join(t.TempDir(), "t-0")
				l := openLog(t, dir, c, false)
				closed := false
				defer func() {
					if !closed {
						l.Close()
					}
				}()
				app := func(data []byte, opts backend.AppendOptions) backend.AppendInfo {
					t.Helper()
					opts.AssignOffsets = true
					info, err := l.Append(ctx, data, opts)
					if err != nil {
						t.Fatal(err)
					}
					if err := l.SetHighWatermark(l.Offsets().LogEnd); err != nil {
						t.Fatal(err)
					}
					return info
				}
				roll := func() {
					t.Helper()
					if err := l.Roll(); err != nil {
						t.Fatal(err)
					}
				}
				now := time.Now().UnixMilli() // one time for every batch: no roll by segment.ms
				var marker int64
				abort := func() {
					t.Helper()
					var b record.Builder
					m, err := b.BuildEndTxnMarker(record.EndTxnMarker{ProducerID: pid, CoordinatorEpoch: 1, Timestamp: now})
					if err != nil {
						t.Fatal(err)
					}
					marker = app(append([]byte(nil), m...), backend.AppendOptions{Coordinator: true}).LastOffset
				}
				// Segment 0: the transaction's first batch (offsets 0-2),
				// then other data.
				first := app(txnBatch(pid, 0, 3), backend.AppendOptions{}).FirstOffset
				app(batchOf(2, now, "a"), backend.AppendOptions{})
				roll()
				localStart := l.Offsets().LogEnd
				if !tc.markerAfterTrim {
					abort()
					app(batchOf(2, now, "b"), backend.AppendOptions{})
					roll()
					app(batchOf(2, now, "c"), backend.AppendOptions{})
				} else {
					app(batchOf(2, now, "b"), backend.AppendOptions{})
				}
				// Local retention: the bucket holds segment 0.
				if err := l.Segments().TrimLocalBefore(ctx, localStart); err != nil {
					t.Fatal(err)
				}
				if got := l.Offsets().LogStart; got != localStart {
					t.Fatalf("local log start %d after the trim, want %d", got, localStart)
				}
				if tc.markerAfterTrim {
					abort()
					app(batchOf(2, now, "c"), backend.AppendOptions{})
				}
				want := []producerstate.AbortedTxn{{ProducerID: pid, FirstOffset: first, LastOffset: marker, LastStableOffset: marker + 1}}
				checkAbortedBelowStart(t, l, want, "before the restart")

				opts := local.Options{Config: c, LogStartOffset: first, HighWatermark: l.Offsets().HighWatermark, CleanShutdown: clean}
				if clean {
					if err := l.Close(); err != nil {
						t.Fatal(err)
					}
					closed = true
				} else {
					// What a SIGKILL leaves: the open log's files.
					opts.RecoveryPoint = tc.recoveryPoint(l)
					crashed := filepath.Join(filepath.Dir(dir), "t-1")
					if err := os.CopyFS(crashed, os.DirFS(dir)); err != nil {
						t.Fatal(err)
					}
					dir = crashed
				}
				r, err := local.Open(dir, opts)
				if err != nil {
					t.Fatal(err)
				}
				defer r.Close()
				checkAbortedBelowStart(t, r, want, fmt.Sprintf("after a restart (clean %v, recovery point %d)", clean, opts.RecoveryPoint))
			})
		}
	}
}

// activeBase is the base offset of the log's last segment: the recovery
// point the flush of the last roll leaves.
func activeBase(l *local.Log) int64 {
	si := l.SegmentInfos()
	return si[len(si)-1].BaseOffset
}

// checkAbortedBelowStart checks that the log's .txnindex holds want, and
// that a read_committed read from the local log start reports it.
func checkAbortedBelowStart(t *testing.T, l *local.Log, want []producerstate.AbortedTxn, what string) {
	t.Helper()
	o := l.Offsets()
	got, err := l.Segments().AbortedTxns(0, o.LogEnd)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("%s: aborted transactions %+v, want %+v", what, got, want)
	}
	rs, err := l.Read(ctx, o.LogStart, backend.ReadOptions{Isolation: backend.ReadCommitted, MaxBytes: 1 << 20, MinOneBatch: true})
	if err != nil {
		t.Fatalf("%s: read_committed from %d: %v", what, o.LogStart, err)
	}
	defer rs.Close()
	var wantRead []backend.AbortedTxn
	for _, a := range want {
		wantRead = append(wantRead, backend.AbortedTxn{ProducerID: a.ProducerID, FirstOffset: a.FirstOffset})
	}
	if got := rs.(backend.Aborted).AbortedTransactions(); !slices.Equal(got, wantRead) {
		t.Fatalf("%s: a read_committed read from the local log start %d reports aborted transactions %+v, want %+v", what, o.LogStart, got, wantRead)
	}
	if o.LastStableOffset != o.HighWatermark {
		t.Fatalf("%s: last stable offset %d, high watermark %d: no transaction is open", what, o.LastStableOffset, o.HighWatermark)
	}
}
