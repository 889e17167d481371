package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/objstore"
	"github.com/tierlog/tierlog/objstore/storeurl"
	"github.com/tierlog/tierlog/record"
	"github.com/tierlog/tierlog/tiered"
	"github.com/tierlog/tierlog/wal"
)

// disklessBucket writes a diskless partition into a file:// bucket through
// a tiered Backend and returns the bucket's directory and URL.
func disklessBucket(t *testing.T) (dir, url string) {
	t.Helper()
	ctx := context.Background()
	dir = filepath.Join(t.TempDir(), "bucket")
	url = "file://" + dir
	store, err := storeurl.Open(ctx, url+"?create=true", objstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	b, err := tiered.OpenBackend(filepath.Join(t.TempDir(), "logs"), tiered.BackendOptions{Store: store,
		Manager: tiered.ManagerConfig{TaskInterval: 20 * time.Millisecond, DisklessCommitInterval: 5 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	cfg, err := backend.ParseConfig(map[string]string{"diskless.enable": "true", "segment.bytes": "16384"})
	if err != nil {
		t.Fatal(err)
	}
	p, err := b.Open(ctx, "events", 0, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.(*tiered.Partition).BecomeLeader(ctx, 1); err != nil {
		t.Fatal(err)
	}
	var rb record.Builder
	for i := range 100 {
		rb.Reset(record.NewBatchHeader())
		for range 10 {
			rb.Append(1_700_000_000_000, nil, bytes.Repeat([]byte{'a' + byte(i%26)}, 100), nil)
		}
		batch, _ := rb.Build()
		if _, err := p.Append(ctx, append([]byte(nil), batch...), backend.AppendOptions{AssignOffsets: true}); err != nil {
			t.Fatal(err)
		}
		if i%20 == 19 {
			if err := p.Flush(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := p.Flush(); err != nil {
		t.Fatal(err)
	}
	return dir, url
}

// TestWALCommands: wal ls lists a diskless bucket's WAL objects, wal
// verify --deep passes it and then finds a flipped byte in an extent
// (exit 1, naming the key), and wal gc is a dry run without --apply.
func TestWALCommands(t *testing.T) {
	dir, store := disklessBucket(t)
	inv := binRun(t, nil, "wal", "ls", "--store", store, "--json")
	if inv.code != 0 {
		t.Fatalf("wal ls: exit %d\n%s%s", inv.code, inv.stdout, inv.stderr)
	}
	lines := inv.jsonLines(t)
	// The first data object (a marks-only object may come first, when
	// the first commit interval ends before the first append's).
	first := slices.IndexFunc(lines, func(l map[string]any) bool { return l["kind"] == "data" })
	if len(lines) < 5 || first < 0 || first > 1 || lines[first]["extents"] != 1.0 {
		t.Fatalf("wal ls --json: %v", lines)
	}
	if inv := binRun(t, nil, "wal", "verify", "--store", store, "--deep"); inv.code != 0 || !strings.Contains(inv.stdout, " 0 problems") {
		t.Fatalf("wal verify --deep: exit %d\n%s%s", inv.code, inv.stdout, inv.stderr)
	}
	inv = binRun(t, nil, "wal", "gc", "--store", store, "--grace", "0s", "--force", "--json")
	if inv.code != 0 {
		t.Fatalf("wal gc: exit %d\n%s%s", inv.code, inv.stdout, inv.stderr)
	}
	for _, l := range inv.jsonLines(t) {
		if l["verdict"] == "removed" {
			t.Fatalf("wal gc without --apply removed %v", l["key"])
		}
	}

	// A flipped byte in the first object's extent.
	key := lines[first]["key"].(string)
	path := filepath.Join(dir, filepath.FromSlash(key))
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[10] ^= 1
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	inv = binRun(t, nil, "wal", "verify", "--store", store, "--deep")
	if inv.code != 1 || !strings.Contains(inv.stdout, key) || !strings.Contains(inv.stdout, "CRC-32C") {
		t.Fatalf("wal verify --deep of a damaged extent: exit %d\n%s%s", inv.code, inv.stdout, inv.stderr)
	}
	if !strings.HasPrefix(key, wal.Dir+"/") {
		t.Fatalf("WAL key %q outside %s/", key, wal.Dir)
	}
}

// TestCostPricesWAL: cost over a diskless bucket prices its WAL objects.
func TestCostPricesWAL(t *testing.T) {
	_, store := disklessBucket(t)
	inv := binRun(t, nil, "cost", "--store", store, "--json")
	if inv.code != 0 {
		t.Fatalf("cost: exit %d\n%s%s", inv.code, inv.stdout, inv.stderr)
	}
	c := inv.jsonLines(t)[0]
	wc, _ := c["wal"].(map[string]any)
	if wc == nil || wc["objects"].(float64) < 5 || wc["busyDayPuts"] != 345600.0 || wc["busyDayUSD"].(float64) <= 0 {
		t.Fatalf("cost --json: wal %v", c["wal"])
	}
	if inv := binRun(t, nil, "cost", "--store", store); !strings.Contains(inv.stdout, "WAL objects of diskless topics") {
		t.Fatalf("cost: %s", inv.stdout)
	}
}

// TestCompactStoreDiskless: compact --store refuses a diskless partition
// (its leader's service cleans it; its latest records may be in WAL
// objects only), saying so and writing nothing; its dry run reports.
func TestCompactStoreDiskless(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	logs := filepath.Join(root, "logs")
	url := "file://" + filepath.Join(root, "bucket")
	store, err := storeurl.Open(ctx, url+"?create=true", objstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	b, err := tiered.OpenBackend(logs, tiered.BackendOptions{Store: store, Prefix: "",
		Manager: tiered.ManagerConfig{TaskInterval: time.Hour, DisklessCommitInterval: 5 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := backend.ParseConfig(map[string]string{"diskless.enable": "true", "cleanup.policy": "compact", "segment.bytes": "4096", "local.retention.ms": "0"})
	if err != nil {
		t.Fatal(err)
	}
	bp, err := b.Open(ctx, "users", 0, cfg)
	if err != nil {
		t.Fatal(err)
	}
	p := bp.(*tiered.Partition)
	if err := p.BecomeLeader(ctx, 1); err != nil {
		t.Fatal(err)
	}
	var rb record.Builder
	for i := range 100 {
		rb.Reset(record.NewBatchHeader())
		for k := range 5 {
			rb.Append(1_700_000_000_000, fmt.Appendf(nil, "k%d", k), bytes.Repeat([]byte{'a' + byte(i%26)}, 100), nil)
		}
		batch, _ := rb.Build()
		if _, err := p.Append(ctx, append([]byte(nil), batch...), backend.AppendOptions{AssignOffsets: true, LeaderEpoch: 1}); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.SetHighWatermark(p.Offsets().LogEnd); err != nil {
		t.Fatal(err)
	}
	if err := p.Flush(); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Offload(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := p.ApplyRetention(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	part := filepath.Join(logs, "users-0")
	manifestFile := filepath.Join(root, "bucket", "users-0", "manifest")
	before, err := os.ReadFile(manifestFile)
	if err != nil {
		t.Fatal(err)
	}
	inv := binRun(t, nil, "compact", part, "--store", url)
	if inv.code != 2 || !strings.Contains(inv.stderr, "diskless") || !strings.Contains(inv.stderr, "--dry-run") {
		t.Fatalf("compact --store of a diskless partition: exit %d\n%s%s", inv.code, inv.stdout, inv.stderr)
	}
	if after, err := os.ReadFile(manifestFile); err != nil || !bytes.Equal(after, before) {
		t.Fatalf("a refused compact changed the manifest: %v", err)
	}
	inv = binRun(t, nil, "compact", part, "--store", url, "--dry-run", "--json")
	var dry map[string]any
	if inv.code != 0 || json.Unmarshal([]byte(inv.stdout), &dry) != nil || dry["dryRun"] != true ||
		dry["bucketSegmentsBefore"].(float64) == 0 || dry["recordsRemoved"].(float64) == 0 {
		t.Fatalf("compact --store --dry-run of a diskless partition: exit %d\n%s%s", inv.code, inv.stdout, inv.stderr)
	}
}
