package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/objstore"
	"github.com/tierlog/tierlog/objstore/storeurl"
	"github.com/tierlog/tierlog/tiered"
)

// ledOffloaded makes a log directory whose orders-0 a tiered.Backend
// offloaded at leader epoch 1 (as a broker would), with local retention
// leaving only the active segment. It returns the log directory, the partition and the store URL.
func ledOffloaded(t *testing.T) (logs, part, store string) {
	t.Helper()
	b := bin{t}
	root := t.TempDir()
	logs = filepath.Join(root, "logs")
	part = filepath.Join(logs, "orders-0")
	store = "file://" + filepath.Join(root, "bucket")
	b.ok("produce", logs, "--partition", "orders-0", "--count", "4000", "--config", "segment.bytes=65536")
	ctx := context.Background()
	s, err := storeurl.Open(ctx, store+"?create=true", objstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	bk, err := tiered.OpenBackend(logs, tiered.BackendOptions{Store: s})
	if err != nil {
		t.Fatal(err)
	}
	defer bk.Close()
	cfg, err := backend.ParseConfig(map[string]string{"segment.bytes": "65536", "remote.storage.enable": "true", "local.retention.ms": "0", "retention.ms": "-1"})
	if err != nil {
		t.Fatal(err)
	}
	p, err := bk.Open(ctx, "orders", 0, cfg)
	if err != nil {
		t.Fatal(err)
	}
	tp := p.(*tiered.Partition)
	if err := tp.BecomeLeader(ctx, 1); err != nil {
		t.Fatal(err)
	}
	tp.SetHighWatermark(tp.Offsets().LogEnd)
	if _, err := tp.Offload(ctx); err != nil {
		t.Fatal(err)
	}
	if o := tp.Offsets(); o.LocalLogStart == 0 {
		t.Fatalf("local retention kept every local segment: %+v", o)
	}
	if err := bk.Close(); err != nil {
		t.Fatal(err)
	}
	return logs, part, store
}

// TestCommandsSayWhatIsInTheBucket: without --store, a command asked for
// an offset that lives only in the bucket says so and how to read it,
// never answers from elsewhere; one that starts at the log start by
// default says where it starts instead; ls says what it cannot list.
func TestCommandsSayWhatIsInTheBucket(t *testing.T) {
	b := bin{t}
	_, part, _ := ledOffloaded(t)
	for _, args := range [][]string{
		{"lookup", part, "--offset", "1234"},
		{"lookup", part, "--offset", "0"},
		{"consume", part, "--from", "0", "--count", "1"},
		{"consume", part, "--from", "1234"},
	} {
		b.fails(2, []string{"offloaded to a bucket", "--store", "log-start-offset-checkpoint"}, args...)
	}
	inv := b.ok("consume", part, "--count", "1", "--json")
	if !strings.Contains(inv.stderr, "in a bucket") || !strings.Contains(inv.stderr, "--store") {
		t.Errorf("consume from the default start said nothing of the bucket: %q", inv.stderr)
	}
	var first struct{ Offset int64 }
	if err := json.Unmarshal([]byte(inv.stdout), &first); err != nil || first.Offset == 0 {
		t.Errorf("consume printed %q (%v), want the first local record, past 0", inv.stdout, err)
	}
	if !strings.Contains(inv.stderr, "start at") && !strings.Contains(inv.stderr, "starts at the first local offset") {
		t.Errorf("consume did not say where it starts: %q", inv.stderr)
	}
	if ls := b.ok("ls", part); !strings.Contains(ls.stderr, "in a bucket") || !strings.Contains(ls.stderr, "--store") {
		t.Errorf("ls of an offloaded partition gave no hint of the bucket: %q", ls.stderr)
	}
}

// TestReadOnlyCommandsWithStoreAreNotWriters: ls, lookup and consume with
// --store read a partition a broker's leader (epoch 1) committed; they
// write nothing, so they are never fenced by it and never say so.
func TestReadOnlyCommandsWithStoreAreNotWriters(t *testing.T) {
	b := bin{t}
	_, part, store := ledOffloaded(t)
	for _, args := range [][]string{
		{"ls", part, "--store", store},
		{"lookup", part, "--store", store, "--offset", "1234"},
		{"consume", part, "--store", store, "--from", "0", "--count", "3"},
	} {
		inv := b.ok(append(args, "--log-level", "debug")...)
		if strings.Contains(strings.ToLower(inv.stderr), "fenced") {
			t.Errorf("tierctl %v, which writes nothing, says it was fenced:\n%s", args, inv.stderr)
		}
	}
}

// TestVerifyLogDirSkipsNonPartitions: a broker's log directory holds
// remote-log-index-cache/ beside the partitions; verify of the log
// directory checks the partitions and not that.
func TestVerifyLogDirSkipsNonPartitions(t *testing.T) {
	b := bin{t}
	logs, _, _ := ledOffloaded(t)
	cache := filepath.Join(logs, tiered.RemoteIndexCacheDir, "x")
	if err := os.MkdirAll(cache, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cache, "00000000000000000000.index"), []byte("cached"), 0o644); err != nil {
		t.Fatal(err)
	}
	inv := b.ok("verify", logs)
	if strings.Contains(inv.stdout, tiered.RemoteIndexCacheDir) {
		t.Errorf("verify of the log directory checked %s as a partition:\n%s", tiered.RemoteIndexCacheDir, inv.stdout)
	}
	if !strings.Contains(inv.stdout, "orders-0") {
		t.Errorf("verify of the log directory skipped orders-0:\n%s", inv.stdout)
	}
}

// TestLsJSONTierIsData: ls --json's tier is one of local, remote and both;
// the active segment is a field of its own, not a display string.
func TestLsJSONTierIsData(t *testing.T) {
	b := bin{t}
	_, part, store := ledOffloaded(t)
	actives := 0
	for _, args := range [][]string{{"ls", part, "--json"}, {"ls", part, "--json", "--store", store}} {
		for _, row := range b.ok(args...).jsonLines(t) {
			switch row["tier"] {
			case "local", "remote", "both":
			default:
				t.Errorf("tierctl %v: tier %q, want local, remote or both", args, row["tier"])
			}
			if a, ok := row["active"].(bool); !ok {
				t.Errorf("tierctl %v: row %v has no active field", args, row)
			} else if a {
				actives++
			}
		}
	}
	if actives != 2 {
		t.Errorf("%d active segments in the two listings, want one in each", actives)
	}
}

// TestLocalRetentionLogsItsReason: local retention's deletes are logged
// as local retention's, not as a moved log start.
func TestLocalRetentionLogsItsReason(t *testing.T) {
	b := bin{t}
	root := t.TempDir()
	logs := filepath.Join(root, "logs")
	b.ok("produce", logs, "--partition", "orders-0", "--count", "4000", "--config", "segment.bytes=65536")
	inv := b.ok("offload", filepath.Join(logs, "orders-0"), "--store", "file://"+filepath.Join(root, "bucket")+"?create=true",
		"--config", "local.retention.ms=0", "--log-level", "info")
	if !strings.Contains(inv.stderr, `reason="local retention"`) || strings.Contains(inv.stderr, "log start offset") {
		t.Errorf("local retention's deletes, logged:\n%s", inv.stderr)
	}
}
