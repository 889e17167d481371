package soak

import (
	"context"
	"errors"
	"fmt"
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
		if err := led.batchKeyed(topicB, b, func(r *record.Record) int32 { return int32(r.Key[1] - '0') }); err != nil {
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
	cb, err := checkKeyed(context.Background(), "B", f.lb, f.led.b)
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
			_, err = checkKeyed(context.Background(), "B", l, m)
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

// TestChecksCompactedTiered: topic C's check reads a compacted tiered
// partition through both tiers, cleaned in the bucket, and passes; a
// record altered in the bucket, or a key's latest value lost there, is a
// violation. Its ledger entries survive a reopen.
func TestChecksCompactedTiered(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	led, err := openLedger(filepath.Join(dir, "ledger"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { led.close() }()
	cfg, err := backend.ParseConfig(map[string]string{"cleanup.policy": "compact", "remote.storage.enable": "true",
		"segment.bytes": "1024", "local.retention.ms": "0", "min.cleanable.dirty.ratio": "0.01"})
	if err != nil {
		t.Fatal(err)
	}
	l, err := local.Open(filepath.Join(dir, "c"), local.Options{Config: cfg, LogStartOffset: -1, HighWatermark: -1})
	if err != nil {
		t.Fatal(err)
	}
	p, err := tiered.Open(ctx, l, tiered.Options{Store: objstore.New(mem.New(), "mem://check", objstore.Options{}), Prefix: "c-0", LeaderEpoch: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var bl record.Builder
	for i := range 80 {
		bl.Reset(record.NewBatchHeader())
		key := i % 5
		if i == 3 {
			key = 9 // written once, early: its one value ends in the bucket
		}
		bl.Append(time.Now().UnixMilli(), fmt.Appendf(nil, "k%05d", key), make([]byte, 40+i), nil)
		b, _ := bl.Build()
		if _, err := p.Append(ctx, b, backend.AppendOptions{AssignOffsets: true, LeaderEpoch: 1}); err != nil {
			t.Fatal(err)
		}
		if err := led.batchKeyed(topicC, b, keyOf); err != nil {
			t.Fatal(err)
		}
	}
	end := p.Offsets().LogEnd
	if err := p.SetHighWatermark(end); err != nil {
		t.Fatal(err)
	}
	if err := p.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := led.flushed(topicC, end); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Offload(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := p.ApplyRetention(ctx); err != nil {
		t.Fatal(err)
	}
	st, err := p.CompactRemote(ctx, tiered.CompactOptions{Force: true, ScratchDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if st.SegmentsReplaced == 0 || st.RecordsRemoved == 0 {
		t.Fatalf("the bucket's cleaner did nothing: %+v", st)
	}
	c, err := checkKeyed(ctx, "C", p, led.c)
	if err != nil {
		t.Fatal(err)
	}
	if c.recordsC == 0 || c.recordsC >= 80 || c.remoteRecordsC == 0 {
		t.Fatalf("checked %+v: want some records, fewer than the 80 appended, some from the bucket", c)
	}

	// The ledger's entries of C come back on a reopen.
	led.close()
	if led, err = openLedger(filepath.Join(dir, "ledger")); err != nil {
		t.Fatal(err)
	}
	if led.c.end != end || led.c.flushed != end || len(led.c.recs) != 80 {
		t.Fatalf("C after a reopen of the ledger: end %d, flushed %d, %d records; want %d, %d, 80", led.c.end, led.c.flushed, len(led.c.recs), end, end)
	}
	if _, err := checkKeyed(ctx, "C", p, led.c); err != nil {
		t.Fatal(err)
	}

	// A record served from the bucket, altered.
	first := p.Offsets().LocalLogStart - 1
	for ; first >= 0; first-- {
		if _, ok := led.c.recs[first]; ok {
			break
		}
	}
	w := led.c.writes[led.c.recs[first].key]
	latest := w[len(w)-1]
	r := led.c.recs[latest]
	r.sum[0] ^= 1
	led.c.recs[latest] = r
	_, err = checkKeyed(ctx, "C", p, led.c)
	wantViolation(t, err, "C", "altered")
	r.sum[0] ^= 1
	led.c.recs[latest] = r

	// Key 9's one value is at offset 3, in the bucket; offset 5 (key 0,
	// superseded, so cleaned away in the bucket) made key 9's latest write
	// in the ledger: the check must see it lost, an older value served.
	if p.Offsets().LocalLogStart <= 5 || p.Head().CleanedTo() <= 5 {
		t.Fatalf("offset 5 is not cleaned in the bucket: %+v, cleaned to %d", p.Offsets(), p.Head().CleanedTo())
	}
	led.c.recs[5] = bRecord{key: 9, sum: digest{1}}
	led.c.writes[9] = append(led.c.writes[9], 5)
	_, err = checkKeyed(ctx, "C", p, led.c)
	wantViolation(t, err, "C", "key 9: its latest acknowledged write (offset 5) is gone but an older one (offset 3) is served")
}
