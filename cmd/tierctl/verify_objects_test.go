package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/local"
	"github.com/tierlog/tierlog/manifest"
	"github.com/tierlog/tierlog/record"
)

// TestVerifyEveryObject: manifest verify and verify --store check every
// object a segment has (the producer snapshot and leader-epoch checkpoint
// too, not a fixed three), size the progress bar by them, and report a
// damaged object of each kind on that object.
func TestVerifyEveryObject(t *testing.T) {
	t.Run("produced", func(t *testing.T) {
		logs := filepath.Join(t.TempDir(), "logs")
		if code, _, errOut := tierctl(t, "produce", logs, "--partition", "orders-0", "--count", "20000", "--record-size", "200",
			"--config", "segment.bytes=1048576"); code != 0 {
			t.Fatalf("produce: %s", errOut)
		}
		verifyEveryObject(t, filepath.Join(logs, "orders-0"), manifest.KindSnapshot, manifest.KindEpochs)
	})
	t.Run("transactional", func(t *testing.T) {
		// writeProducerPartition's aborted transaction, its segment rolled
		// so that offload uploads it.
		part := writeProducerPartition(t)
		l, err := local.Open(part, local.Options{})
		if err != nil {
			t.Fatal(err)
		}
		// Producer 9's transaction ends (offload uploads only below the
		// last stable offset).
		var b record.Builder
		marker, err := b.BuildEndTxnMarker(record.EndTxnMarker{ProducerID: 9, CoordinatorEpoch: 4, Commit: true, Timestamp: psTime})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := l.Append(context.Background(), marker, backend.AppendOptions{AssignOffsets: true, Coordinator: true}); err != nil {
			t.Fatal(err)
		}
		if err := l.Roll(); err != nil {
			t.Fatal(err)
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		// Its high watermark at its end (Kafka's checkpoint format).
		hw := fmt.Sprintf("0\n1\norders 0 %d\n", l.Offsets().LogEnd)
		if err := os.WriteFile(filepath.Join(filepath.Dir(part), local.ReplicationCheckpoint), []byte(hw), 0o644); err != nil {
			t.Fatal(err)
		}
		verifyEveryObject(t, part, manifest.KindTxnIndex, manifest.KindSnapshot, manifest.KindEpochs)
	})
}

// verifyEveryObject offloads the partition in part and checks that the
// bucket's segments have objects of the kinds want besides the three
// always there, then the commands against them.
func verifyEveryObject(t *testing.T, part string, want ...manifest.Kind) {
	bucket := filepath.Join(t.TempDir(), "bucket")
	code, out, errOut := tierctl(t, "offload", part, "--store", "file://"+bucket+"?create=true", "--config", "retention.ms=-1")
	if code != 0 || strings.Contains(out, "uploaded 0 ") {
		t.Fatalf("offload: exit %d %s%s", code, out, errOut)
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
	for _, k := range want {
		if len(byKind[k]) == 0 || len(objects) <= 3*segments {
			t.Fatalf("the bucket's %d segments have %d objects, none a %s", segments, len(objects), k)
		}
	}
	t.Logf("%d segments, %d objects", segments, len(objects))
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
		if len(bad) == 0 {
			bad = []byte{0} // an empty index: no byte to flip
		} else {
			bad[len(bad)/2] ^= 0x40
		}
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
