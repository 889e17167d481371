package soak

import (
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/local"
	"github.com/tierlog/tierlog/objstore"
	"github.com/tierlog/tierlog/objstore/mem"
	"github.com/tierlog/tierlog/record"
	"github.com/tierlog/tierlog/tiered"
)

// fixture is a tiered topic A and a compacted topic B with a ledger of
// what was appended to them, all acknowledged, A partly in a bucket.
type fixture struct {
	led *ledger
	p   *tiered.Partition
	lb  *local.Log
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	led, err := openLedger(filepath.Join(dir, "ledger"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { led.close() })
	cfgA, err := backend.ParseConfig(map[string]string{"segment.bytes": "16384", "local.retention.bytes": "16384", "remote.storage.enable": "true"})
	if err != nil {
		t.Fatal(err)
	}
	cfgB, err := backend.ParseConfig(map[string]string{"cleanup.policy": "compact", "segment.bytes": "16384"})
	if err != nil {
		t.Fatal(err)
	}
	la, err := local.Open(filepath.Join(dir, "a"), local.Options{Config: cfgA, LogStartOffset: -1, HighWatermark: -1})
	if err != nil {
		t.Fatal(err)
	}
	p, err := tiered.Open(ctx, la, tiered.Options{Store: objstore.New(mem.New(), "mem://check", objstore.Options{}), Prefix: "a-0", LeaderEpoch: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	lb, err := local.Open(filepath.Join(dir, "b"), local.Options{Config: cfgB, LogStartOffset: -1, HighWatermark: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lb.Close() })
	f := &fixture{led: led, p: p, lb: lb}
	var bl record.Builder
	for i := range 60 {
		bl.Reset(record.NewBatchHeader())
		bl.Append(time.Now().UnixMilli(), nil, make([]byte, 1000+i), nil)
		b, _ := bl.Build()
		if _, err := p.Append(ctx, b, backend.AppendOptions{AssignOffsets: true, LeaderEpoch: 1}); err != nil {
			t.Fatal(err)
		}
		if err := led.batchA(b); err != nil {
			t.Fatal(err)
		}
		bl.Reset(record.NewBatchHeader())
		bl.Append(time.Now().UnixMilli(), []byte{'k', '0' + byte(i%5)}, []byte{byte(i)}, nil)
		b, _ = bl.Build()
		if _, err := lb.Append(ctx, b, backend.AppendOptions{AssignOffsets: true, LeaderEpoch: 1}); err != nil {
			t.Fatal(err)
		}
		if err := led.batchB(b, func(r *record.Record) int32 { return int32(r.Key[1] - '0') }); err != nil {
			t.Fatal(err)
		}
	}
	p.SetHighWatermark(p.Offsets().LogEnd)
	lb.SetHighWatermark(lb.Offsets().LogEnd)
	if err := led.flushed(topicA, p.Offsets().LogEnd); err != nil {
		t.Fatal(err)
	}
	if err := led.flushed(topicB, lb.Offsets().LogEnd); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Offload(ctx); err != nil {
		t.Fatal(err)
	}
	if o := p.Offsets(); o.LocalLogStart == o.LogStart {
		t.Fatalf("nothing only in the bucket: %+v", o)
	}
	return f
}

func (f *fixture) check(t *testing.T) (checked, error) {
	t.Helper()
	rng := rand.New(rand.NewPCG(1, 2))
	c, err := checkA(context.Background(), f.p, f.led.a, rng)
	if err != nil {
		return c, err
	}
	cb, err := checkB(context.Background(), f.lb, f.led.b)
	c.add(cb)
	return c, err
}

func wantViolation(t *testing.T, err error, topic, says string) {
	t.Helper()
	var v *Violation
	if !errors.As(err, &v) || v.Topic != topic || !strings.Contains(v.What, says) {
		t.Fatalf("got %v, want a violation of %s saying %q", err, topic, says)
	}
}

// TestChecksPass: a partition as the ledger says passes, read through
// both tiers.
func TestChecksPass(t *testing.T) {
	f := newFixture(t)
	c, err := f.check(t)
	if err != nil {
		t.Fatal(err)
	}
	if c.recordsA < 60 || c.remoteRecordsA == 0 || c.recordsB != 60 {
		t.Fatalf("checked %+v", c)
	}
}

// TestChecksCatchAlteredBatches: one byte of difference in a batch, in
// the bucket or on disk, is a violation.
func TestChecksCatchAlteredBatches(t *testing.T) {
	for _, where := range []string{"bucket", "disk"} {
		t.Run(where, func(t *testing.T) {
			f := newFixture(t)
			o := f.p.Offsets()
			off := o.LogStart
			if where == "disk" {
				off = o.LogEnd - 1
			}
			f.led.a.batches[f.led.a.find(off)].sum[0] ^= 1
			_, err := f.check(t)
			wantViolation(t, err, "A", "altered")
		})
	}
}

// TestChecksCatchLostRecords: a log that ends below the acknowledged end,
// a batch the ledger does not know, and a read below the log start served.
func TestChecksCatchLostRecords(t *testing.T) {
	f := newFixture(t)
	if err := f.p.TruncateTo(f.p.Offsets().LogEnd - 1); err != nil {
		t.Fatal(err)
	}
	_, err := f.check(t)
	wantViolation(t, err, "A", "records lost")

	f = newFixture(t)
	f.led.a.truncate(f.led.a.end() - 1)
	_, err = f.check(t)
	wantViolation(t, err, "A", "the log ends at")

	f = newFixture(t)
	f.led.b.flushed++
	_, err = f.check(t)
	wantViolation(t, err, "B", "acknowledged")
}

// TestChecksCatchCompactionLoss: a key whose latest acknowledged value is
// no longer served while an older one is; a tombstone gone with every
// older value of its key is fine.
func TestChecksCatchCompactionLoss(t *testing.T) {
	for _, tc := range []struct {
		name string
		tomb bool // offset 2, the one missing, is a tombstone
		gone bool // offsets 0 and 1 are missing too
		want string
	}{
		{"value-lost", false, false, "key 1: its latest acknowledged write (offset 2) is gone but an older one (offset 1) is served"},
		{"value-lost-alone", false, true, "key 1: its latest acknowledged value (offset 2) is gone"},
		{"tombstone-resurrects", true, false, "key 1: its latest acknowledged write (offset 2) is gone but an older one (offset 1) is served"},
		{"tombstone-done", true, true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := backend.ParseConfig(map[string]string{"cleanup.policy": "compact"})
			if err != nil {
				t.Fatal(err)
			}
			l, err := local.Open(t.TempDir(), local.Options{Config: cfg, LogStartOffset: -1, HighWatermark: -1})
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			m := newModelB()
			var bl record.Builder
			for off := int64(0); off < 4; off++ {
				key, val := []byte("k1"), []byte{byte(off)}
				if off == 3 {
					key = []byte("k2")
				}
				if off == 2 && tc.tomb {
					val = nil
				}
				h := record.NewBatchHeader()
				h.BaseOffset = off
				bl.Reset(h)
				bl.Append(7, key, val, nil)
				b, _ := bl.Build()
				var it record.Iterator
				it.Reset(b)
				it.Next()
				m.add(off, bRecord{key: int32(key[1] - '0'), tomb: val == nil, sum: recordDigest(it.Record())})
				if off == 2 || (tc.gone && off < 2) {
					continue // never in the log: as if compaction removed it
				}
				if _, err := l.Append(context.Background(), b, backend.AppendOptions{}); err != nil { // a follower's: offsets kept
					t.Fatal(err)
				}
			}
			m.end, m.flushed = 4, 4
			_, err = checkB(context.Background(), l, m)
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			wantViolation(t, err, "B", tc.want)
		})
	}
}

// TestLedgerTornTail: a torn last entry is dropped, the entries before it
// kept, and appends go on after them.
func TestLedgerTornTail(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger")
	l, err := openLedger(path)
	if err != nil {
		t.Fatal(err)
	}
	var bl record.Builder
	bl.Reset(record.NewBatchHeader())
	bl.Append(1, nil, []byte("v"), nil)
	b, _ := bl.Build()
	if err := l.batchA(b); err != nil {
		t.Fatal(err)
	}
	if err := l.flushed(topicA, 1); err != nil {
		t.Fatal(err)
	}
	l.close()
	data, _ := os.ReadFile(path)
	if err := os.WriteFile(path, append(data, 0, 0, 0, 40, 1, 2), 0o644); err != nil { // a torn entry
		t.Fatal(err)
	}
	l, err = openLedger(path)
	if err != nil {
		t.Fatal(err)
	}
	if l.a.end() != 1 || l.a.flushed != 1 {
		t.Fatalf("after a torn tail: end %d, flushed %d", l.a.end(), l.a.flushed)
	}
	b.SetBaseOffset(1)
	if err := l.batchA(b); err != nil {
		t.Fatal(err)
	}
	l.close()
	if l, err = openLedger(path); err != nil || l.a.end() != 2 {
		t.Fatalf("after an append past the torn tail: %v, end %d", err, l.a.end())
	}
	l.close()
}
