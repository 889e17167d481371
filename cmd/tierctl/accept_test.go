package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tierlog/tierlog/local"
)

// TestVerifyAndAcceptRolledBackBucket: a bucket whose manifest went back
// in time (the older manifest's bytes put back) is a problem for verify
// with the log directory and --store (exit 1, naming both generations);
// manifest accept --dry-run says what accepting loses and writes nothing;
// manifest accept records the bucket's generation, after which verify
// finds the partition takes the bucket.
func TestVerifyAndAcceptRolledBackBucket(t *testing.T) {
	root := t.TempDir()
	logs, bucket := filepath.Join(root, "logs"), filepath.Join(root, "bucket")
	part := filepath.Join(logs, "orders-0")
	store := "file://" + bucket
	produce := func() {
		t.Helper()
		if code, _, errOut := tierctl(t, "produce", logs, "--partition", "orders-0", "--count", "4000", "--record-size", "200",
			"--config", "segment.bytes=65536"); code != 0 {
			t.Fatalf("produce: %s", errOut)
		}
		if code, _, errOut := tierctl(t, "offload", part, "--store", store+"?create=true", "--config", "local.retention.ms=0"); code != 0 {
			t.Fatalf("offload: %s", errOut)
		}
	}
	produce()
	manifestPath := filepath.Join(bucket, "orders-0", "manifest")
	old, err := os.ReadFile(manifestPath)
	if err != nil {
		t.Fatal(err)
	}
	produce()
	rec, ok, err := local.ReadTierState(part)
	if err != nil || !ok {
		t.Fatalf("no tier-state-checkpoint after offload: %v %v", ok, err)
	}
	if err := os.WriteFile(manifestPath, old, 0o644); err != nil {
		t.Fatal(err)
	}

	code, out, errOut := tierctl(t, "verify", logs, "--store", store)
	if code != 1 || !strings.Contains(out, "went back in time") || !strings.Contains(out, part) {
		t.Fatalf("verify over the rolled back bucket: exit %d, want 1 naming the partition\n%s%s", code, out, errOut)
	}

	code, out, errOut = tierctl(t, "manifest", "accept", part, "--store", store, "--dry-run")
	if code != 0 || !strings.Contains(out, "lost: offsets 0..") || !strings.Contains(out, "dry run") {
		t.Fatalf("accept --dry-run: exit %d\n%s%s", code, out, errOut)
	}
	if again, _, _ := local.ReadTierState(part); again != rec {
		t.Fatalf("accept --dry-run changed the record: %+v, was %+v", again, rec)
	}

	code, out, errOut = tierctl(t, "manifest", "accept", part, "--store", store)
	if code != 0 || !strings.Contains(out, "accepted") {
		t.Fatalf("accept: exit %d\n%s%s", code, out, errOut)
	}
	if now, _, _ := local.ReadTierState(part); now.Generation >= rec.Generation {
		t.Fatalf("accept recorded %+v; want the bucket's older generation, below %d", now, rec.Generation)
	}
	code, out, errOut = tierctl(t, "verify", logs, "--store", store)
	if code != 0 || strings.Contains(out, "went back in time") {
		t.Fatalf("verify after accept still refuses the bucket: exit %d\n%s%s", code, out, errOut)
	}
	if code, out, _ = tierctl(t, "manifest", "accept", part, "--store", store); code != 0 || !strings.Contains(out, "nothing to accept") {
		t.Fatalf("a second accept: exit %d\n%s", code, out)
	}
}
