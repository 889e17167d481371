package tiered_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/local"
	"github.com/tierlog/tierlog/manifest"
	"github.com/tierlog/tierlog/objstore"
	"github.com/tierlog/tierlog/objstore/fs"
	"github.com/tierlog/tierlog/testing/crashchild"
	"github.com/tierlog/tierlog/testing/faultstore"
	"github.com/tierlog/tierlog/tiered"
)

// The crash test runs offload and retention in a child process (this test
// binary, re-executed by testing/crashchild) that SIGKILLs itself at its k-th object store operation (before or after the
// operation), then checks from the parent: no manifest entry names a
// missing object, no record is lost, offload catches up, and gc removes
// exactly the leftovers.

// crashRoles are the children this test binary runs (crashchild.Dispatch).
var crashRoles = map[string]crashchild.Role{"offload-crash": crashChild}

// killAround is a rule that kills the process around its k-th put or
// delete, before or after the operation (uploads run in parallel: KillAt
// counts them once each).
func killAround(kill *crashchild.KillAt, after bool) faultstore.Rule {
	r := faultstore.Rule{Every: 1, Fault: faultstore.Hook,
		Match: func(op objstore.Op, _ string) bool { return op == objstore.OpPut || op == objstore.OpDelete }}
	if after {
		r.After = func(faultstore.Call) { kill.Step() }
	} else {
		r.Hook = func(objstore.Op, string) { kill.Step() }
	}
	return r
}

var crashCfg = map[string]string{"segment.bytes": "200000", "local.retention.ms": "0", "file.delete.delay.ms": "0",
	"retention.bytes": "1500000", "retention.ms": "-1"}

// crashChild offloads and applies retention to a log in args[0] and kills
// itself at object store operation args[1], args[2] ("before" or
// "after") the operation.
func crashChild(args []string) int {
	root := args[0]
	k, _ := strconv.Atoi(args[1])
	after := args[2] == "after"
	c, _ := backend.ParseConfig(crashCfg)
	d, err := fs.Open(filepath.Join(root, "bucket"))
	if err != nil {
		panic(err)
	}
	store := objstore.New(faultstore.Wrap(d, 0, killAround(crashchild.NewKillAt(k), after)), "crash", objstore.Options{})
	b, err := local.OpenBackend(filepath.Join(root, "logs"), local.BackendOptions{})
	if err != nil {
		panic(err)
	}
	l, err := b.OpenLog(ctx, "orders", 0, c)
	if err != nil {
		panic(err)
	}
	p, err := tiered.Open(ctx, l, tiered.Options{Store: store, Prefix: "orders-0", LeaderEpoch: 1})
	if err != nil {
		panic(err)
	}
	for round := 0; round < 3; round++ {
		produce(nopTB{}, p, 3000)
		l.Flush()
		b.Checkpoint()
		if _, err := p.Offload(ctx); err != nil {
			panic(err)
		}
		if _, err := p.ApplyRetention(ctx); err != nil {
			panic(err)
		}
		b.Checkpoint()
	}
	b.Close()
	return 0
}

// nopTB lets produce run outside a test.
type nopTB struct{ testing.TB }

func (nopTB) Helper()                   {}
func (nopTB) Fatal(args ...any)         { panic(fmt.Sprint(args...)) }
func (nopTB) Fatalf(f string, a ...any) { panic(fmt.Sprintf(f, a...)) }

func TestCrashDuringOffloadAndRetention(t *testing.T) {
	rng := crashchild.Rand(t, 1)
	ks := (crashchild.Plan{Runs: 60, Short: 15, Steps: 45}).Ks(rng)
	crashed := 0
	defer func() { t.Logf("%d of %d runs were killed mid-offload or mid-retention", crashed, len(ks)) }()
	for run, k := range ks {
		root := t.TempDir()
		os.MkdirAll(filepath.Join(root, "bucket"), 0o755)
		when := []string{"before", "after"}[rng.IntN(2)]
		c := crashchild.Start(t, "offload-crash", []string{root, strconv.Itoa(k), when}, crashchild.Options{})
		if exit := c.Wait(); !exit.Killed() {
			if exit.Exited(0) {
				continue // the child finished before its k-th operation
			}
			t.Fatalf("run %d (k=%d %s): child: %v\n%s", run, k, when, exit, c.Output())
		}
		crashed++
		checkAfterTieredCrash(t, root, fmt.Sprintf("run %d (k=%d, %s)", run, k, when))
	}
}

func checkAfterTieredCrash(t *testing.T, root, what string) {
	t.Helper()
	c, _ := backend.ParseConfig(crashCfg)
	d, err := fs.Open(filepath.Join(root, "bucket"))
	if err != nil {
		t.Fatal(err)
	}
	store := objstore.New(d, "after", objstore.Options{})
	// 1. Every object the manifest names exists with its size.
	m, err := tiered.ReadManifest(ctx, store, "orders-0")
	if err != nil {
		t.Fatalf("%s: manifest: %v", what, err)
	}
	for _, s := range m.Segments {
		for _, o := range []struct {
			suf  string
			size int64
		}{{".log", s.Size}, {".index", s.IndexSize}, {".timeindex", s.TimeIndexSize}} {
			info, err := store.Head(ctx, "orders-0/"+s.Name(o.suf))
			if err != nil || info.Size != o.size {
				t.Fatalf("%s: the manifest names %s, which is missing or short: %v", what, s.Name(o.suf), err)
			}
		}
	}
	// 2. No record is lost: every offset from the log start reads back.
	b, err := local.OpenBackend(filepath.Join(root, "logs"), local.BackendOptions{})
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	defer b.Close()
	l, err := b.OpenLog(ctx, "orders", 0, c)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	p, err := tiered.Open(ctx, l, tiered.Options{Store: store, Prefix: "orders-0", LeaderEpoch: 1})
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	o := p.Offsets()
	if len(m.Segments) > 0 && o.LocalLogStart > m.Segments[len(m.Segments)-1].LastOffset+1 {
		t.Fatalf("%s: a gap between the bucket (to %d) and the local log (from %d)", what, m.Segments[len(m.Segments)-1].LastOffset, o.LocalLogStart)
	}
	batches := batchesFrom(t, p, o.LogStart)
	var n int64
	for _, bt := range batches {
		n += int64(recordsIn(bt))
	}
	if n != o.LogEnd-o.LogStart {
		t.Fatalf("%s: %d records between %d and %d", what, n, o.LogStart, o.LogEnd)
	}
	// 3. Offload catches up; 4. gc removes exactly the leftovers.
	if _, err := p.Offload(ctx); err != nil {
		t.Fatalf("%s: re-offload: %v", what, err)
	}
	if _, err := tiered.GC(ctx, store, "orders-0", tiered.GCOptions{Grace: time.Nanosecond, Force: true}); err != nil {
		t.Fatalf("%s: gc: %v", what, err)
	}
	m, _ = tiered.ReadManifest(ctx, store, "orders-0")
	named := map[string]bool{"orders-0/manifest": true}
	for _, s := range m.Segments {
		for _, suf := range s.Objects() {
			named["orders-0/"+s.Name(suf)] = true
		}
	}
	store.List(ctx, "orders-0/", func(o objstore.ObjectInfo) bool {
		if b, err := manifest.NewLayout("orders-0").Parse(o.Key); err == nil && b.Kind == manifest.KindManifestBackup &&
			b.Generation <= m.Generation && b.Generation+2 > m.Generation {
			return true // one of the two backups a partition keeps
		}
		if !named[o.Key] {
			t.Errorf("%s: gc left %s", what, o.Key)
		}
		return true
	})
	for k := range named {
		if _, err := store.Head(ctx, k); err != nil {
			t.Errorf("%s: gc removed %s, which the manifest names", what, k)
		}
	}
}

func recordsIn(batch []byte) int {
	return int(uint32(batch[57])<<24 | uint32(batch[58])<<16 | uint32(batch[59])<<8 | uint32(batch[60]))
}
