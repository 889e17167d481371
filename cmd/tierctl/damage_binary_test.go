package main

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// Operator cases run from the built binary: damage on disk and a second
// writer's log must never cost the one good copy of a record.

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
