package main

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tierlog/tierlog/record"
)

// A batch's base offset is outside its CRC. Moved by any distance in a
// closed segment, consume, dump and verify, run as the operator runs them,
// either print exactly what they printed before or exit non-zero naming
// the file and the position; never the same offset twice with exit 0.

// logBatches returns the position, base offset and record count of every
// batch of a .log file.
func logBatches(t *testing.T, data []byte) (pos []int64, base, count []int64) {
	t.Helper()
	for p := int64(0); p < int64(len(data)); {
		b, err := record.Parse(data[p:])
		if err != nil {
			t.Fatalf("position %d: %v", p, err)
		}
		pos, base, count = append(pos, p), append(base, b.BaseOffset()), append(count, int64(b.LastOffsetDelta())+1)
		p += int64(len(b))
	}
	return pos, base, count
}

// setBaseOffset rewrites the base offset of the batch at pos of path.
func setBaseOffset(t *testing.T, path string, pos, base int64) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	binary.BigEndian.PutUint64(data[pos:], uint64(base))
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// overlapPartition produces 4,000 records of 100 bytes in 64 KiB segments
// and 4 KiB batches into a fresh directory and returns the partition dir.
func overlapPartition(t *testing.T) string {
	t.Helper()
	logDir := filepath.Join(t.TempDir(), "logs")
	bin{t}.ok("produce", logDir, "--partition", "orders-0", "--count", "4000", "--record-size", "100",
		"--batch-size", "4096", "--config", "segment.bytes=65536")
	return filepath.Join(logDir, "orders-0")
}

// checkMoved runs consume, dump and verify over part, in which the batch
// at pos of file had its base offset moved, and fails t unless each exits
// non-zero naming file and a position (consume may instead print exactly
// want).
func checkMoved(t *testing.T, what, part, file string, pos int64, want string) {
	t.Helper()
	named := func(inv invocation) bool {
		out := inv.stderr + inv.stdout
		return strings.Contains(out, file) && strings.Contains(out, "position")
	}
	if inv := binRun(t, nil, "consume", part, "--from", "0", "--json"); inv.code == 0 {
		if inv.stdout != want {
			t.Errorf("%s: consume --from 0: exit 0 with other records than were written", what)
		}
	} else if !named(inv) {
		t.Errorf("%s: consume --from 0: exit %d without naming %s and a position:\n%s", what, inv.code, file, inv.stderr)
	}
	inv := binRun(t, nil, "dump", filepath.Join(part, file))
	if inv.code == 0 || !named(inv) || !strings.Contains(inv.stdout+inv.stderr, "position "+strconv.FormatInt(pos, 10)) && !strings.Contains(inv.stdout+inv.stderr, "offsets out of order") {
		t.Errorf("%s: dump: exit %d; want non-zero, naming %s and the batch's position:\n%s%s", what, inv.code, file, lastLines(inv.stdout, 5), inv.stderr)
	}
	inv = binRun(t, nil, "verify", part)
	if inv.code == 0 || !named(inv) {
		t.Errorf("%s: verify: exit %d; want non-zero, naming %s and a position:\n%s%s", what, inv.code, file, inv.stdout, inv.stderr)
	}
}

// lastLines returns the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n") + "\n"
}

// TestConsumeRefusesBatchMovedOverTheNext: the case as it was seen. A
// batch of a closed segment has its base offset moved forward by its own
// record count, over the next batch whole: the second batch, and the last
// (over the next segment's first).
func TestConsumeRefusesBatchMovedOverTheNext(t *testing.T) {
	part := overlapPartition(t)
	want := bin{t}.ok("consume", part, "--from", "0", "--json").stdout
	file := segmentFiles(t, part, ".log")[1]
	path := filepath.Join(part, file)
	orig, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	pos, base, count := logBatches(t, orig)
	for _, i := range []int{1, len(pos) - 1} {
		setBaseOffset(t, path, pos[i], base[i]+count[i])
		checkMoved(t, fmt.Sprintf("%s position %d: base %d moved by its %d records", file, pos[i], base[i], count[i]), part, file, pos[i], want)
		if err := os.WriteFile(path, orig, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestPropertyToolsOverMovedBaseOffset: a random closed segment, a random
// batch, a random new base offset (forward by its record count, into or
// past the next batch, back, far past the end, negative, anything).
func TestPropertyToolsOverMovedBaseOffset(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("TIERLOG_OVERLAP_SEED"); s != "" {
		seed, _ = strconv.ParseUint(s, 10, 64)
	}
	t.Logf("seed %d (set TIERLOG_OVERLAP_SEED to replay)", seed)
	rng := rand.New(rand.NewPCG(seed, 21))
	part := overlapPartition(t)
	want := bin{t}.ok("consume", part, "--from", "0", "--json").stdout
	logs := segmentFiles(t, part, ".log")
	trials := 6
	if testing.Short() {
		trials = 2
	}
	for trial := range trials {
		file := logs[rng.IntN(len(logs)-1)] // closed: the last is the active one
		path := filepath.Join(part, file)
		orig, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		pos, base, count := logBatches(t, orig)
		i := rng.IntN(len(pos))
		var nb int64
		switch rng.IntN(6) {
		case 0:
			nb = base[i] + count[i]
		case 1:
			nb = base[i] + 1 + rng.Int64N(count[i]*3)
		case 2:
			nb = base[i] - 1 - rng.Int64N(count[i]*3)
		case 3:
			nb = base[i] + 1_000_000 + rng.Int64N(1<<40)
		case 4:
			nb = -1 - rng.Int64N(1<<20)
		default:
			nb = int64(rng.Uint64())
		}
		if nb == base[i] {
			nb++
		}
		setBaseOffset(t, path, pos[i], nb)
		checkMoved(t, fmt.Sprintf("trial %d: %s position %d: base %d (%d records) moved to %d", trial, file, pos[i], base[i], count[i], nb), part, file, pos[i], want)
		if err := os.WriteFile(path, orig, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestConsumeStoreRefusesMovedBaseOffset: the same damage in the bucket.
// After an offload that leaves only the active segment on disk, the second
// batch of an offloaded .log object has its base offset moved forward by
// its record count: consume --store exits non-zero naming the object and
// the position, and manifest verify --deep reports the object.
func TestConsumeStoreRefusesMovedBaseOffset(t *testing.T) {
	part := overlapPartition(t)
	bucket := filepath.Join(t.TempDir(), "bucket")
	store := "file://" + bucket + "?create=true"
	bin{t}.ok("offload", part, "--store", store, "--config", "local.retention.ms=0")
	want := bin{t}.ok("consume", part, "--store", store, "--from", "0", "--json").stdout
	var object string
	ents, err := os.ReadDir(filepath.Join(bucket, "orders-0"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".log") && strings.HasPrefix(e.Name(), "00000000000000000000-") {
			object = e.Name()
		}
	}
	if object == "" {
		t.Fatalf("no offloaded segment at offset 0 in %v", ents)
	}
	path := filepath.Join(bucket, "orders-0", object)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	pos, base, count := logBatches(t, data)
	setBaseOffset(t, path, pos[1], base[1]+count[1])
	inv := binRun(t, nil, "consume", part, "--store", store, "--from", "0", "--json")
	if inv.code == 0 {
		if inv.stdout != want {
			t.Errorf("consume --store: exit 0 with other records than were written")
		} else {
			t.Errorf("consume --store: exit 0 over a moved base offset")
		}
	}
	if !strings.Contains(inv.stderr, object) || !strings.Contains(inv.stderr, "position") {
		t.Errorf("consume --store: exit %d without naming %s and a position:\n%s", inv.code, object, inv.stderr)
	}
	inv = binRun(t, nil, "manifest", "verify", "--store", store, "--partition", "orders-0", "--deep")
	if inv.code == 0 || !strings.Contains(inv.stdout+inv.stderr, object) {
		t.Errorf("manifest verify --deep: exit %d without naming %s:\n%s%s", inv.code, object, inv.stdout, inv.stderr)
	}
}
