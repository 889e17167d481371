package storagetest

import (
	"context"
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/record"
)

// testTieredEnd: Offsets().TieredEnd says how far the bucket holds the
// partition. A partition without a bucket reports -1 whatever happens, and
// WaitTieredEnd refuses it at once. A tiered one starts at its log start,
// does not move while nothing is below the high watermark, rises when an
// upload commits (a waiter started before is woken), always equals the
// offset after the last one ListOffsets' LatestTieredTimestamp finds (the
// log start when none), stays within the log end, never moves backwards
// (DeleteRecordsBefore, more uploads), and is the same after a reopen;
// WaitTieredEnd on a closed partition returns ErrClosed.
func testTieredEnd(t *testing.T, h Harness) {
	c := Config(t, "segment.bytes", "2048")
	p := h.Open(t, c)
	defer func() { p.Close() }()
	var m model
	rng := rand.New(rand.NewPCG(47, 47))
	if p.Offsets().TieredEnd == -1 {
		appendBatches(t, p, &m, rng, 30, 5, record.None)
		commitAll(t, p)
		if o := p.Offsets(); o.TieredEnd != -1 {
			t.Fatalf("a partition that reported no bucket (tiered end -1) now reports %+v", o)
		}
		wctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		if _, err := backend.WaitTieredEnd(wctx, p, 0); !errors.Is(err, backend.ErrInvalidConfig) {
			t.Fatalf("WaitTieredEnd on a partition without a bucket: %v; want at once an error matching ErrInvalidConfig", err)
		}
		return
	}
	prev := int64(-1)
	check := func(what string) int64 {
		t.Helper()
		o := p.Offsets()
		off, _, found, err := p.OffsetForTimestamp(ctx, backend.LatestTieredTimestamp)
		if err != nil {
			t.Fatalf("%s: LatestTieredTimestamp: %v", what, err)
		}
		want := o.LogStart
		if found {
			want = off + 1
		}
		if o.TieredEnd != want || o.TieredEnd > o.LogEnd || o.TieredEnd < prev {
			t.Fatalf("%s: tiered end %d (offsets %+v); want %d (LatestTieredTimestamp %d, found %v), within the log end, not below the %d seen before",
				what, o.TieredEnd, o, want, off, found, prev)
		}
		prev = o.TieredEnd
		return o.TieredEnd
	}
	if check("an empty partition") != p.Offsets().LogStart {
		t.Fatalf("an empty partition's tiered end is not its log start: %+v", p.Offsets())
	}
	appendBatches(t, p, &m, rng, 30, 5, record.None)
	if end := check("appended, nothing below the high watermark"); end != 0 {
		t.Fatalf("tiered end %d with the high watermark at 0", end)
	}
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	_, err := backend.WaitTieredEnd(short, p, 0)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitTieredEnd with nothing uploadable: %v; want the context's deadline", err)
	}
	type waited struct {
		o   backend.Offsets
		err error
	}
	done := make(chan waited, 1)
	wctx, cancelWait := context.WithTimeout(ctx, time.Minute)
	defer cancelWait()
	go func() {
		o, err := backend.WaitTieredEnd(wctx, p, 0)
		done <- waited{o, err}
	}()
	commitAll(t, p) // a tiered harness's partition offloads the closed segments
	end := check("after the high watermark moved")
	if end <= 0 {
		t.Fatalf("tiered end %d after the closed segments were committed (offsets %+v)", end, p.Offsets())
	}
	if w := <-done; w.err != nil || w.o.TieredEnd <= 0 {
		t.Fatalf("WaitTieredEnd(0) started before the upload: %+v, %v", w.o, w.err)
	}
	sameRecords(t, "the offsets below the tiered end", readFrom(t, p, 0, int(end)), m.recs[:end])
	if err := p.DeleteRecordsBefore(ctx, 3); err != nil {
		t.Fatal(err)
	}
	check("after DeleteRecordsBefore(3)")
	appendBatches(t, p, &m, rng, 20, 5, record.None)
	commitAll(t, p)
	check("after more uploads")
	before := p.Offsets()
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	p = h.Open(t, c)
	if o := p.Offsets(); o.TieredEnd != before.TieredEnd {
		t.Fatalf("tiered end %d after a reopen, %d before", o.TieredEnd, before.TieredEnd)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := backend.WaitTieredEnd(wctx, p, before.LogEnd); !errors.Is(err, backend.ErrClosed) {
		t.Fatalf("WaitTieredEnd on a closed partition: %v; want ErrClosed", err)
	}
}
