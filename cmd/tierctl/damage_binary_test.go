package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// Operator cases run from the built binary: damage on disk and a second
// writer's log must never cost the one good copy of a record, and a damaged
// index must never give a wrong answer.

// produceSegments produces count records of 200 bytes into
// <logDir>/orders-0 in 1 MiB segments and returns the partition dir.
func produceSegments(t *testing.T, logDir string, count int) string {
	t.Helper()
	bin{t}.ok("produce", logDir, "--partition", "orders-0", "--count", strconv.Itoa(count), "--record-size", "200",
		"--config", "segment.bytes=1048576")
	return filepath.Join(logDir, "orders-0")
}

// segmentFiles lists the partition's files with suffix (".log"), sorted by
// name, which is by base offset.
func segmentFiles(t *testing.T, part, suffix string) []string {
	t.Helper()
	ents, err := os.ReadDir(part)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), suffix) {
			out = append(out, e.Name())
		}
	}
	sort.Strings(out)
	return out
}

// flipBytes inverts the bytes of path at the positions given.
func flipBytes(t *testing.T, path string, at ...int) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range at {
		if i >= len(b) {
			t.Fatalf("%s: %d bytes, cannot flip byte %d", path, len(b), i)
		}
		b[i] ^= 0xff
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// readFiles returns the contents of the named files of dir.
func readFiles(t *testing.T, dir string, names []string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	for _, n := range names {
		b, err := os.ReadFile(filepath.Join(dir, n))
		if err != nil {
			t.Fatal(err)
		}
		out[n] = b
	}
	return out
}

// bucketBases returns the base offsets (the 20-digit name prefix) of the
// objects the file:// bucket holds for orders-0.
func bucketBases(t *testing.T, bucket string) map[string]bool {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(bucket, "orders-0"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, e := range ents {
		if base, _, ok := strings.Cut(e.Name(), "-"); ok && len(base) == 20 {
			out[base] = true
		}
	}
	return out
}

// TestOffloadNeverUploadsDamage: a closed segment with 4 flipped bytes in
// a record is not uploaded, and so its local file, the only good copy of
// the records around the damage, is not deleted by local retention, even
// with local.retention.ms=0. The run fails, naming the file. Segments
// before it may be uploaded (and deleted locally); none from it on are.
func TestOffloadNeverUploadsDamage(t *testing.T) {
	root := t.TempDir()
	part := produceSegments(t, filepath.Join(root, "logs"), 20000)
	logs := segmentFiles(t, part, ".log")
	if len(logs) < 4 {
		t.Fatalf("want at least 4 segments, got %v", logs)
	}
	damaged := logs[2] // closed: the active segment is the last
	flipBytes(t, filepath.Join(part, damaged), 500000, 500001, 500002, 500003)
	kept := readFiles(t, part, logs[2:])

	bucket := filepath.Join(root, "bucket")
	inv := binRun(t, nil, "offload", part, "--store", "file://"+bucket+"?create=true", "--config", "local.retention.ms=0")
	if inv.code == 0 {
		t.Errorf("offload of a partition with a damaged segment: exit 0\nstdout: %s\nstderr: %s", inv.stdout, inv.stderr)
	}
	if !strings.Contains(inv.stderr, damaged) {
		t.Errorf("offload: exit %d; stderr does not name %s:\n%s", inv.code, damaged, inv.stderr)
	}
	for name, want := range kept {
		got, err := os.ReadFile(filepath.Join(part, name))
		if err != nil {
			t.Errorf("%s (at or after the damage) is gone after the offload: %v", name, err)
			continue
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s changed under the offload", name)
		}
	}
	damagedBase := strings.TrimSuffix(damaged, ".log")
	for base := range bucketBases(t, bucket) {
		if base >= damagedBase {
			t.Errorf("bucket holds segment %s, at or after the damaged %s", base, damagedBase)
		}
	}
}

// TestOffloadRefusesAnotherWritersBucket: two writers produce the same
// partition (same offsets, epoch 0, other bytes). The first offloads with
// local.retention.ms=0. The second's offload to the same bucket must fail
// saying the local log and the bucket disagree, and delete none of its
// local segments: the bucket does not hold its records, so they exist
// only there. The first writer's records in the bucket stay readable.
func TestOffloadRefusesAnotherWritersBucket(t *testing.T) {
	root := t.TempDir()
	partA := produceSegments(t, filepath.Join(root, "a"), 20000)
	partB := produceSegments(t, filepath.Join(root, "b"), 20000)
	bucket := filepath.Join(root, "bucket")
	store := "file://" + bucket + "?create=true"
	bin{t}.ok("offload", partA, "--store", store, "--config", "local.retention.ms=0")
	if len(bucketBases(t, bucket)) == 0 {
		t.Fatal("the first writer's offload uploaded nothing")
	}
	consumeA := bin{t}.ok("consume", partA, "--store", store, "--json").stdout

	names := segmentFiles(t, partB, ".log")
	before := readFiles(t, partB, names)
	recordsB := bin{t}.ok("consume", partB, "--json").stdout
	if recordsB == consumeA {
		t.Fatal("the two writers produced the same records; the case needs other bytes")
	}

	inv := binRun(t, nil, "offload", partB, "--store", store, "--config", "local.retention.ms=0")
	if inv.code == 0 {
		t.Errorf("offload of a log the bucket disagrees with: exit 0\nstdout: %s\nstderr: %s", inv.stdout, inv.stderr)
	}
	if !strings.Contains(inv.stderr, "local log and bucket disagree") {
		t.Errorf("offload: exit %d; stderr does not say the local log and the bucket disagree:\n%s", inv.code, inv.stderr)
	}
	for name, want := range before {
		got, err := os.ReadFile(filepath.Join(partB, name))
		if err != nil {
			t.Errorf("the second writer's %s is gone: %v", name, err)
			continue
		}
		if !bytes.Equal(got, want) {
			t.Errorf("the second writer's %s changed", name)
		}
	}
	if got := (bin{t}).ok("consume", partB, "--json").stdout; got != recordsB {
		t.Errorf("the second writer's records read back differently after the refused offload")
	}
	if got := (bin{t}).ok("consume", partA, "--store", store, "--json").stdout; got != consumeA {
		t.Errorf("the first writer's records read back differently after the second writer's offload")
	}
}

// TestLookupTimestampOverDamagedTimeIndex: with 8 bytes of a closed
// segment's .timeindex flipped, lookup --timestamp answers every timestamp
// of the log (and one before and one after) with the offset the records
// say, the first whose timestamp is >= it, or fails naming the file;
// exit 0 goes with an answer on stdout, non-zero with none.
func TestLookupTimestampOverDamagedTimeIndex(t *testing.T) {
	// Twenty runs of produce: timestamps differ from run to run, so each
	// segment's time index has several entries however fast a run is.
	root := t.TempDir()
	var part string
	for range 20 {
		part = produceSegments(t, filepath.Join(root, "logs"), 1000)
	}
	tis := segmentFiles(t, part, ".timeindex")
	if len(tis) < 4 {
		t.Fatalf("want at least 4 segments, got %v", tis)
	}
	// The answers, from the records themselves.
	type rec struct{ Offset, Timestamp int64 }
	var recs []rec
	for _, l := range strings.Split(strings.TrimSpace(bin{t}.ok("consume", part, "--json").stdout), "\n") {
		var r rec
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatal(err)
		}
		recs = append(recs, r)
	}
	var stamps []int64
	for _, r := range recs {
		stamps = append(stamps, r.Timestamp)
	}
	slices.Sort(stamps)
	stamps = slices.Compact(stamps)
	targets := append([]int64{stamps[0] - 1}, stamps...)
	targets = append(targets, stamps[len(stamps)-1]+1)
	want := func(ts int64) (int64, bool) {
		for _, r := range recs {
			if r.Timestamp >= ts {
				return r.Offset, true
			}
		}
		return 0, false
	}
	type answer struct {
		Offset int64
		Found  *bool
	}
	check := func(t *testing.T, part, damaged string) {
		for _, ts := range targets {
			inv := binRun(t, nil, "lookup", part, "--timestamp", strconv.FormatInt(ts, 10), "--json")
			wantOff, wantFound := want(ts)
			if inv.code != 0 {
				if damaged == "" || !strings.Contains(inv.stderr, damaged) {
					t.Errorf("lookup --timestamp %d: exit %d without naming the damaged file %q:\n%s", ts, inv.code, damaged, inv.stderr)
				}
				if strings.TrimSpace(inv.stdout) != "" {
					t.Errorf("lookup --timestamp %d: exit %d with an answer on stdout: %s", ts, inv.code, inv.stdout)
				}
				continue
			}
			var a answer
			if err := json.Unmarshal([]byte(inv.stdout), &a); err != nil || a.Found == nil {
				t.Errorf("lookup --timestamp %d: exit 0 without an answer (%v): %q", ts, err, inv.stdout)
				continue
			}
			if *a.Found != wantFound || (wantFound && a.Offset != wantOff) {
				t.Errorf("lookup --timestamp %d: found %v offset %d, want found %v offset %d (the first record at or after it)",
					ts, *a.Found, a.Offset, wantFound, wantOff)
			}
		}
	}
	t.Run("undamaged", func(t *testing.T) { check(t, part, "") })

	ti := tis[1] // a closed segment's, neither the first nor the active one
	size := func() int {
		st, err := os.Stat(filepath.Join(part, ti))
		if err != nil {
			t.Fatal(err)
		}
		return int(st.Size())
	}()
	const entry = 12 // int64 timestamp | int32 relative offset
	if size < 4*entry {
		t.Fatalf("%s: %d bytes, want at least 4 entries", ti, size)
	}
	span := func(from, n int) []int { // n bytes from from on
		var at []int
		for i := from; i < from+n; i++ {
			at = append(at, i)
		}
		return at
	}
	// The first entry's timestamp made negative (still increasing) and its
	// offset made larger: a search that trusted it would start past the
	// records it should find.
	below := append(span(0, 6), 10, 11)
	last := tis[len(tis)-1] // the active segment's
	for _, at := range []struct {
		name, file string
		at         []int
	}{
		{"first timestamp", ti, span(0, 8)},
		{"first timestamp low half and offset", ti, span(4, 8)},
		{"first timestamp negative, its offset larger", ti, below},
		{"middle timestamp", ti, span(2*entry, 8)},
		{"timestamp low half and offset", ti, span(3*entry+4, 8)},
		{"last timestamp", ti, span(size-entry, 8)},
		{"last 8 bytes", ti, span(size-8, 8)},
		{"active segment, first timestamp negative, its offset larger", last, below},
	} {
		t.Run(fmt.Sprintf("%s at %v", at.name, at.at), func(t *testing.T) {
			logs := copyDir(t, filepath.Dir(part)) // with its checkpoints
			p := filepath.Join(logs, "orders-0")
			flipBytes(t, filepath.Join(p, at.file), at.at...)
			check(t, p, at.file)
		})
	}
}
