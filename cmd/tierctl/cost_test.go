package main

import (
	"encoding/json"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tierlog/tierlog/manifest"
)

func TestEstimate(t *testing.T) {
	m := &manifest.Manifest{Generation: 4, Segments: []manifest.Segment{
		{Size: 3 << 20, IndexSize: 100, TimeIndexSize: 20, Records: 10},
		{Size: 1<<20 + 1, IndexSize: 50, TimeIndexSize: 10, Records: 5},
	}}
	p := prices{StorageGBMonth: 0.023, PutPer1000: 0.005, GetPer1000: 0.0004, TransferGB: 0.09}
	c := estimate("t-0", m, p, 1<<20)
	bytes := int64(3<<20 + 100 + 20 + 1<<20 + 1 + 50 + 10)
	if c.Segments != 2 || c.Objects != 9 || c.Bytes != bytes || c.Records != 15 || c.UploadPuts != 14 ||
		c.ReadAllGets != (1+3)+(1+2) || c.RestoreGets != 7 || c.GCLists != 1 {
		t.Fatalf("%+v", c)
	}
	near := func(got, want float64) bool { return math.Abs(got-want) < 1e-12 }
	if !near(c.StorageMonth, float64(bytes)/(1<<30)*0.023) || !near(c.UploadUSD, 14*0.005/1000) ||
		!near(c.ReadAllUSD, 7*0.0004/1000+float64(4<<20+1)/(1<<30)*0.09) || !near(c.GCUSD, 0.005/1000) {
		t.Fatalf("%+v", c)
	}
	// A segment with every kind of object counts them all: six objects,
	// six PUTs, and their bytes; generation 1 has one backup.
	full := &manifest.Manifest{Generation: 1, Segments: []manifest.Segment{{Size: 1000, IndexSize: 8, TimeIndexSize: 12, Records: 1,
		TxnIndexSize: 34, SnapshotSize: 50, EpochsSize: 20}}}
	if c := estimate("t-0", full, p, 1<<20); c.Objects != 6+1+1 || c.UploadPuts != 6+2 || c.RestoreGets != 7 || c.Bytes != 1000+8+12+34+50+20 {
		t.Fatalf("a segment with every object: %+v", c)
	}
	for v, want := range map[float64]string{0: "$0", 12.345: "$12.35", 0.01: "$0.01", 0.0000446: "$0.000045", 0.0012: "$0.0012"} {
		if got := usd(v); got != want {
			t.Errorf("usd(%g) = %s, want %s", v, got, want)
		}
	}
}

func TestCostCommand(t *testing.T) {
	root := t.TempDir()
	logs, bucket := filepath.Join(root, "logs"), filepath.Join(root, "bucket")
	tierctl(t, "produce", logs, "--partition", "orders-0", "--count", "20000", "--record-size", "200", "--config", "segment.bytes=1048576")
	if code, _, errOut := tierctl(t, "offload", filepath.Join(logs, "orders-0"), "--store", "file://"+bucket+"?create=true"); code != 0 {
		t.Fatal(errOut)
	}
	code, out, errOut := tierctl(t, "cost", "--store", "file://"+bucket, "--json")
	var res struct {
		Partitions []partitionCost
		Total      partitionCost
	}
	if code != 0 || json.Unmarshal([]byte(out), &res) != nil || len(res.Partitions) != 1 || res.Total.Segments < 3 ||
		res.Total.UploadPuts < 3*int64(res.Total.Segments) || res.Total.StorageMonth <= 0 {
		t.Fatalf("cost --json: exit %d %s %s", code, out, errOut)
	}
	if code, out, _ := tierctl(t, "cost", "--store", "file://"+bucket, "--partition", "orders-0"); code != 0 || !strings.Contains(out, "per month") {
		t.Fatalf("cost: exit %d\n%s", code, out)
	}
	for _, args := range [][]string{{"cost"}, {"cost", "--store", "file://" + bucket, "--partition", "nodash"},
		{"cost", "--store", "file://" + bucket, "--fetch-bytes", "0"}, {"cost", "--store", "file://" + bucket, "extra-arg"}} {
		if code, _, errOut := tierctl(t, args...); code != 2 {
			t.Errorf("%v: exit %d (%s), want 2", args, code, errOut)
		}
	}
}
