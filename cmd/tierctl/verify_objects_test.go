package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tierlog/tierlog/manifest"
)

// TestVerifyEveryObject: manifest verify and verify --store check every
// object a segment has (the producer snapshot and leader-epoch checkpoint
// too, not a fixed three), size the progress bar by them, and report a
// damaged object of each kind on that object.
func TestVerifyEveryObject(t *testing.T) {
	root := t.TempDir()
	logs, bucket := filepath.Join(root, "logs"), filepath.Join(root, "bucket")
	if code, _, errOut := tierctl(t, "produce", logs, "--partition", "orders-0", "--count", "20000", "--record-size", "200",
		"--config", "segment.bytes=1048576"); code != 0 {
		t.Fatalf("produce: %s", errOut)
	}
	if code, _, errOut := tierctl(t, "offload", filepath.Join(logs, "orders-0"), "--store", "file://"+bucket+"?create=true"); code != 0 {
		t.Fatalf("offload: %s", errOut)
	}
	store := "file://" + bucket
	// The bucket's segment objects, by kind.
	ents, err := os.ReadDir(filepath.Join(bucket, "orders-0"))
	if err != nil {
		t.Fatal(err)
	}
	layout := manifest.NewLayout("orders-0")
	byKind := map[manifest.Kind][]string{}
	objects := map[string]bool{}
	var bytes int64
	for _, e := range ents {
		o, err := manifest.ParseName(e.Name())
		if err != nil {
			t.Fatalf("the bucket holds %s: %v", e.Name(), err)
		}
		if o.Kind.Segment() {
			byKind[o.Kind] = append(byKind[o.Kind], layout.Join(e.Name()))
			objects[layout.Join(e.Name())] = true
			info, _ := e.Info()
			bytes += info.Size()
		}
	}
	segments := len(byKind[manifest.KindLog])
	if len(byKind[manifest.KindSnapshot]) == 0 || len(byKind[manifest.KindEpochs]) == 0 || len(objects) <= 3*segments {
		t.Fatalf("the bucket's %d segments have %d objects: want snapshots and leader-epoch checkpoints too", segments, len(objects))
	}
	// The progress bar's totals.
	st, err := openStore(context.Background(), store)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, n := loadManifests(context.Background(), st, []string{"orders-0"}, false); n != int64(len(objects)) {
		t.Errorf("shallow progress total %d, the bucket holds %d segment objects", n, len(objects))
	}
	if _, n := loadManifests(context.Background(), st, []string{"orders-0"}, true); n != bytes {
		t.Errorf("deep progress total %d bytes, the objects hold %d", n, bytes)
	}
	for _, deep := range [][]string{nil, {"--deep"}} {
		args := append([]string{"manifest", "verify", "--store", store, "--partition", "orders-0"}, deep...)
		if code, out, _ := tierctl(t, args...); code != 0 ||
			!strings.Contains(out, fmt.Sprintf("%d segments, %d objects checked, 0 problems", segments, len(objects))) {
			t.Errorf("%v: exit %d\n%s", args, code, out)
		}
		args = append([]string{"verify", "--store", store, "--json"}, deep...)
		code, out, errOut := tierctl(t, args...)
		reported := map[string]bool{}
		for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
			var r fileReport
			if err := json.Unmarshal([]byte(l), &r); err != nil || len(r.Problems) > 0 {
				t.Fatalf("%v: %v %s", args, err, l)
			}
			reported[r.Path] = true
		}
		if code != 0 || len(reported) != len(objects) {
			t.Errorf("%v: exit %d, %d objects reported of %d\n%s", args, code, len(reported), len(objects), errOut)
		}
		for k := range objects {
			if !reported[k] {
				t.Errorf("%v did not report %s", args, k)
			}
		}
	}
	// Damage one object of each kind: it, and it alone, is blamed.
	for kind, keys := range byKind {
		victim := keys[len(keys)/2]
		path := filepath.Join(bucket, filepath.FromSlash(victim))
		good, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		bad := append([]byte(nil), good...)
		bad[len(bad)/2] ^= 0x40
		if err := os.WriteFile(path, bad, 0o644); err != nil {
			t.Fatal(err)
		}
		code, out, _ := tierctl(t, "verify", "--store", store, "--deep")
		if code != 1 || !strings.Contains(out, "FAIL "+victim+":") || strings.Count(out, "FAIL ") != 1 {
			t.Errorf("verify --deep with a damaged %s: exit %d, want one FAIL naming %s\n%s", kind, code, victim, out)
		}
		code, out, _ = tierctl(t, "manifest", "verify", "--store", store, "--partition", "orders-0", "--deep")
		if code != 1 || !strings.Contains(out, "problem: "+victim+" ("+kind.String()+")") || !strings.Contains(out, ", 1 problems") {
			t.Errorf("manifest verify --deep with a damaged %s: exit %d, want %s named\n%s", kind, code, victim, out)
		}
		if err := os.WriteFile(path, good, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
