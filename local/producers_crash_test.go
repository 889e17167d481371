package local_test

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/local"
	"github.com/tierlog/tierlog/record"
	"github.com/tierlog/tierlog/testing/crashchild"
)

// The producer crash test: a child process appends idempotent producers'
// batches (with rolls, flushes, retention and checkpoints between) and
// SIGKILLs itself at its k-th step. After every flush it records each
// producer's last batch, fsynced. The parent (after tearing the unflushed
// tail, half the time) reopens the log dir and retries each producer's last
// acknowledged-and-flushed batch, and the last batch of each producer the
// recovered log holds: each retry MUST be refused or found a duplicate
// (with the original offsets), never appended again.

var producerCrashConfig = map[string]string{
	"segment.bytes": "4000", "index.interval.bytes": "300", "file.delete.delay.ms": "0", "retention.bytes": "40000",
}

// idemBatch is the batch producer pid writes with sequences seq..seq+n-1.
func idemBatch(pid int64, seq int32, n int) []byte {
	var b record.Builder
	h := record.NewBatchHeader()
	h.ProducerID, h.ProducerEpoch, h.BaseSequence = pid, 0, seq
	b.Reset(h)
	for j := range n {
		b.Append(time.Now().UnixMilli(), nil, fmt.Appendf(nil, "p%d-s%d", pid, int(seq)+j), nil)
	}
	out, _ := b.Build()
	return append([]byte(nil), out...)
}

// producerCrashChild runs the producers' workload (crashArgs) and kills
// itself at step k.
func producerCrashChild(args []string) int {
	dir, seed, k := parseCrashArgs(args)
	rng := rand.New(rand.NewPCG(seed, seed))
	acked, err := os.OpenFile(filepath.Join(dir, "acked"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		panic(err)
	}
	kill := crashchild.NewKillAt(k).Step
	c, _ := backend.ParseConfig(producerCrashConfig)
	b, err := local.OpenBackend(filepath.Join(dir, "logs"), local.BackendOptions{})
	if err != nil {
		panic(err)
	}
	l, err := b.OpenLog(ctx, "idem", 0, c)
	if err != nil {
		panic(err)
	}
	type last struct {
		seq         int32
		n           int
		first, last int64
	}
	seqs := map[int64]int32{}
	lasts := map[int64]last{}
	for range 3000 {
		kill()
		switch n := rng.IntN(20); {
		case n < 15:
			pid := int64(1 + rng.IntN(3))
			cnt := 1 + rng.IntN(4)
			info, err := l.Append(ctx, idemBatch(pid, seqs[pid], cnt), backend.AppendOptions{AssignOffsets: true})
			if err != nil || info.Duplicate {
				panic(fmt.Sprintf("append: %+v %v", info, err))
			}
			lasts[pid] = last{seqs[pid], cnt, info.FirstOffset, info.LastOffset}
			seqs[pid] += int32(cnt)
			l.SetHighWatermark(l.Offsets().LogEnd)
		case n < 17:
			if err := l.Flush(); err != nil {
				panic(err)
			}
			for pid, x := range lasts {
				fmt.Fprintf(acked, "%d %d %d %d %d\n", pid, x.seq, x.n, x.first, x.last)
			}
			acked.Sync()
		case n < 18:
			if _, err := l.DeleteOldSegments(); err != nil {
				panic(err)
			}
		case n < 19:
			if err := b.Checkpoint(); err != nil {
				panic(err)
			}
		default:
			if err := l.Roll(); err != nil {
				panic(err)
			}
		}
	}
	b.Close()
	return 0
}

func TestProducersAfterCrash(t *testing.T) {
	rng := crashchild.Rand(t, 1)
	ks := (crashchild.Plan{Runs: 80, Short: 20, Steps: 600}).Ks(rng)
	checked := 0
	for run, k := range ks {
		dir := t.TempDir()
		childSeed := rng.Uint64()
		c := crashchild.Start(t, "producers-crash", crashArgs(dir, childSeed, k), crashchild.Options{})
		if exit := c.Wait(); !exit.Killed() {
			t.Fatalf("run %d (k=%d, child seed %d): child did not die by SIGKILL: %v\n%s", run, k, childSeed, exit, c.Output())
		}
		what := fmt.Sprintf("run %d (k=%d, child seed %d)", run, k, childSeed)
		// Each producer's last batch at the last flush.
		data, _ := os.ReadFile(filepath.Join(dir, "acked"))
		acked := map[int64][4]int64{}
		sc := bufio.NewScanner(bytes.NewReader(data))
		for sc.Scan() {
			var pid, seq, n, first, last int64
			if _, err := fmt.Sscan(sc.Text(), &pid, &seq, &n, &first, &last); err == nil {
				acked[pid] = [4]int64{seq, n, first, last}
			}
		}
		var flushed int64
		for _, a := range acked {
			flushed = max(flushed, a[3]+1)
		}
		part := filepath.Join(dir, "logs", "idem-0")
		if rng.IntN(2) == 0 {
			tearTail(t, part, flushed, rng)
		}
		checked += checkProducersAfterCrash(t, dir, acked, what)
	}
	t.Logf("%d retries checked after %d crashes", checked, len(ks))
}

// checkProducersAfterCrash reopens the crashed log dir and retries each
// producer's last flushed batch and its last batch in the log.
func checkProducersAfterCrash(t *testing.T, dir string, acked map[int64][4]int64, what string) int {
	t.Helper()
	b, err := local.OpenBackend(filepath.Join(dir, "logs"), local.BackendOptions{})
	if err != nil {
		t.Fatalf("%s: reopen: %v", what, err)
	}
	defer b.Close()
	c, _ := backend.ParseConfig(producerCrashConfig)
	l, err := b.OpenLog(ctx, "idem", 0, c)
	if err != nil {
		t.Fatalf("%s: open: %v", what, err)
	}
	checked := 0
	retry := func(pid int64, seq int32, n int, first int64, whose string) {
		end := l.Offsets().LogEnd
		info, err := l.Append(ctx, idemBatch(pid, seq, n), backend.AppendOptions{AssignOffsets: true})
		switch {
		case err == nil && info.Duplicate && info.FirstOffset == first:
		case err == nil && info.Duplicate:
			t.Fatalf("%s: retry of producer %d's %s at %d answered as a duplicate at %d", what, pid, whose, first, info.FirstOffset)
		case errors.Is(err, backend.ErrOutOfOrderSequence) && whose == "last flushed batch":
			// A later batch of the producer survived the crash, and only the
			// last one is known after a snapshot load (Kafka's answer too).
		default:
			t.Fatalf("%s: retry of producer %d's %s (seq %d, offset %d): %+v, %v; want a duplicate", what, pid, whose, seq, first, info, err)
		}
		if l.Offsets().LogEnd != end {
			t.Fatalf("%s: a retry of producer %d's %s was appended again", what, pid, whose)
		}
		checked++
	}
	for pid, a := range acked {
		if a[2] >= l.Offsets().LogStart {
			retry(pid, int32(a[0]), int(a[1]), a[2], "last flushed batch")
		}
	}
	// The last batch of each producer the recovered log holds.
	lastIn := map[int64]record.Batch{}
	o := l.Offsets()
	for off := o.LogStart; off < o.LogEnd; {
		rs, err := l.Read(ctx, off, backend.ReadOptions{MaxBytes: 1 << 20, MinOneBatch: true})
		if err != nil {
			t.Fatalf("%s: read %d: %v", what, off, err)
		}
		var buf bytes.Buffer
		rs.WriteTo(&buf)
		rs.Close()
		for data := buf.Bytes(); len(data) > 0; {
			bt, err := record.Parse(data)
			if err != nil {
				t.Fatal(err)
			}
			lastIn[bt.ProducerID()] = append(record.Batch(nil), bt...)
			off, data = bt.NextOffset(), data[bt.Size():]
		}
	}
	for pid, bt := range lastIn {
		retry(pid, bt.BaseSequence(), int(bt.NumRecords()), bt.BaseOffset(), "last batch in the log")
	}
	return checked
}
