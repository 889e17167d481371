package local_test

import (
	"bufio"
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/local"
	"github.com/tierlog/tierlog/record"
	"github.com/tierlog/tierlog/testing/crashchild"
)

// The crash tests run a workload in a child process (this test binary,
// re-executed by testing/crashchild) that kills itself with SIGKILL at its
// k-th operation:
// appends, rolls, flushes, retention and checkpoint writes. The parent then
// optionally tears the unflushed tail (a power loss keeps only what was
// fsynced), reopens the log dir and checks that every flushed record is
// there at its offset, that nothing torn or corrupt is served, and that the
// log takes appends again.

// crashRoles are the children this test binary runs (crashchild.Dispatch).
var crashRoles = map[string]crashchild.Role{
	"crash":           crashChild,
	"producers-crash": producerCrashChild,
}

func TestMain(m *testing.M) {
	if code, ok := crashchild.Dispatch(crashRoles); ok {
		os.Exit(code)
	}
	code := m.Run()
	for _, d := range benchCleanup {
		os.RemoveAll(d)
	}
	os.Exit(code)
}

var crashConfig = map[string]string{
	"segment.bytes": "6000", "index.interval.bytes": "300", "file.delete.delay.ms": "0",
	"retention.bytes": "30000",
}

// crashValue is the value a record at offset carries.
func crashValue(offset int64) []byte {
	return fmt.Appendf(nil, "rec-%d-%s", offset, strings.Repeat("z", int(offset%40)))
}

// crashArgs are a crash child's arguments: its directory, its seed and
// the operation it dies at.
func crashArgs(dir string, seed uint64, k int) []string {
	return []string{dir, strconv.FormatUint(seed, 10), strconv.Itoa(k)}
}

func parseCrashArgs(args []string) (dir string, seed uint64, k int) {
	seed, _ = strconv.ParseUint(args[1], 10, 64)
	k, _ = strconv.Atoi(args[2])
	return args[0], seed, k
}

// crashChild runs the workload and kills itself at operation k. After each
// flush it appends the flushed log end to dir/acked, fsynced.
func crashChild(args []string) int {
	dir, seed, k := parseCrashArgs(args)
	rng := rand.New(rand.NewPCG(seed, seed))
	acked, err := os.OpenFile(filepath.Join(dir, "acked"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		panic(err)
	}
	step := crashchild.NewKillAt(k).Step
	c, _ := backend.ParseConfig(crashConfig)
	b, err := local.OpenBackend(filepath.Join(dir, "logs"), local.BackendOptions{})
	if err != nil {
		panic(err)
	}
	step()
	l, err := b.OpenLog(ctx, "crash", 0, c)
	if err != nil {
		panic(err)
	}
	var bl record.Builder
	for i := 0; i < 10_000; i++ {
		step()
		switch n := rng.IntN(20); {
		case n < 14: // append
			next := l.Offsets().LogEnd
			bl.Reset(record.NewBatchHeader())
			cnt := 1 + rng.IntN(6)
			for j := 0; j < cnt; j++ {
				bl.Append(int64(1000+next+int64(j)), nil, crashValue(next+int64(j)), nil)
			}
			batch, _ := bl.Build()
			if _, err := l.Append(ctx, batch, backend.AppendOptions{AssignOffsets: true, LeaderEpoch: int32(i / 50)}); err != nil {
				panic(err)
			}
			l.SetHighWatermark(l.Offsets().LogEnd)
		case n < 16:
			if err := l.Flush(); err != nil {
				panic(err)
			}
			fmt.Fprintf(acked, "%d\n", l.Offsets().LogEnd)
			acked.Sync()
		case n < 17:
			if _, err := l.DeleteOldSegments(); err != nil {
				panic(err)
			}
		case n < 18:
			if err := b.Checkpoint(); err != nil {
				panic(err)
			}
		case n < 19:
			if err := l.Roll(); err != nil {
				panic(err)
			}
		default:
			o := l.Offsets()
			if o.HighWatermark > o.LogStart {
				if err := l.DeleteRecordsBefore(ctx, o.LogStart+rng.Int64N(o.HighWatermark-o.LogStart)/4); err != nil {
					panic(err)
				}
			}
		}
	}
	b.Close()
	return 0
}

func lastAcked(t *testing.T, dir string) int64 {
	data, _ := os.ReadFile(filepath.Join(dir, "acked"))
	var last int64
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		if v, err := strconv.ParseInt(strings.TrimSpace(sc.Text()), 10, 64); err == nil {
			last = v
		}
	}
	return last
}

// tearTail cuts the newest segment's .log somewhere after the flushed
// offset, as a power loss may: the bytes past the last fsync are lost or
// partly written.
func tearTail(t *testing.T, part string, flushed int64, rng *rand.Rand) {
	ents, _ := os.ReadDir(part)
	var logs []string
	for _, e := range ents {
		if _, suf, err := local.ParseFileName(e.Name()); err == nil && suf == local.LogSuffix {
			logs = append(logs, e.Name())
		}
	}
	if len(logs) == 0 {
		return
	}
	sort.Strings(logs)
	p := filepath.Join(part, logs[len(logs)-1])
	data, err := os.ReadFile(p)
	if err != nil {
		return
	}
	// Find where the flushed data ends in this file.
	keep := int64(0)
	s := record.NewScanner(bytes.NewReader(data), 0, int64(len(data)), record.ScanOptions{HeadersOnly: true})
	for s.Next() {
		if s.Entry().LastOffset < flushed {
			keep = s.Entry().Position + s.Entry().Size
		}
	}
	if int64(len(data)) <= keep {
		return
	}
	cut := keep + rng.Int64N(int64(len(data))-keep)
	if err := os.Truncate(p, cut); err != nil {
		t.Fatal(err)
	}
	if rng.IntN(2) == 0 && cut > keep+20 {
		// Garbage instead of a clean cut: a half-written page.
		f, _ := os.OpenFile(p, os.O_WRONLY, 0)
		f.WriteAt(bytes.Repeat([]byte{0xAB}, 17), cut-17)
		f.Close()
	}
}

func TestCrashAtKthOperation(t *testing.T) {
	rng := crashchild.Rand(t, 0)
	for run, k := range (crashchild.Plan{Runs: 200, Short: 40, Steps: 400}).Ks(rng) {
		dir := t.TempDir()
		childSeed := rng.Uint64()
		c := crashchild.Start(t, "crash", crashArgs(dir, childSeed, k), crashchild.Options{})
		if exit := c.Wait(); !exit.Killed() {
			t.Fatalf("run %d (k=%d, child seed %d): child did not die by SIGKILL: %v\n%s", run, k, childSeed, exit, c.Output())
		}
		flushed := lastAcked(t, dir)
		part := filepath.Join(dir, "logs", "crash-0")
		tore := rng.IntN(2) == 0
		if tore {
			tearTail(t, part, flushed, rng)
		}
		checkAfterCrash(t, dir, flushed, fmt.Sprintf("run %d (k=%d, child seed %d, torn %v)", run, k, childSeed, tore))
	}
}

func checkAfterCrash(t *testing.T, dir string, flushed int64, what string) {
	t.Helper()
	b, err := local.OpenBackend(filepath.Join(dir, "logs"), local.BackendOptions{})
	if err != nil {
		t.Fatalf("%s: reopen: %v", what, err)
	}
	defer b.Close()
	c, _ := backend.ParseConfig(crashConfig)
	l, err := b.OpenLog(ctx, "crash", 0, c)
	if err != nil {
		t.Fatalf("%s: open log: %v", what, err)
	}
	o := l.Offsets()
	if o.LogEnd < flushed {
		t.Fatalf("%s: log end %d is below the flushed offset %d: flushed records lost", what, o.LogEnd, flushed)
	}
	recs := readAll(t, l, o.LogStart)
	if int64(len(recs)) != o.LogEnd-o.LogStart {
		t.Fatalf("%s: %d records between log start %d and log end %d", what, len(recs), o.LogStart, o.LogEnd)
	}
	for i, r := range recs {
		want := o.LogStart + int64(i)
		if r.Offset != want || !bytes.Equal(r.Value, crashValue(want)) {
			t.Fatalf("%s: record %d is offset %d value %q, want offset %d", what, i, r.Offset, r.Value, want)
		}
	}
	// The log takes appends again, and its files verify.
	var bl record.Builder
	bl.Reset(record.NewBatchHeader())
	bl.Append(1, nil, crashValue(o.LogEnd), nil)
	batch, _ := bl.Build()
	if _, err := l.Append(ctx, batch, backend.AppendOptions{AssignOffsets: true}); err != nil {
		t.Fatalf("%s: append after recovery: %v", what, err)
	}
	if err := l.Close(); err != nil {
		t.Fatalf("%s: close: %v", what, err)
	}
	checkIndexesMatchLog(t, filepath.Join(dir, "logs", "crash-0"))
}
