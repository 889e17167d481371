package local

import (
	"context"
	"math/rand/v2"
	"testing"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/record"
)

// linearOffsetForTimestamp is Kafka's timestamp lookup as this log did it
// before its directory: every segment in turn, the first that holds an
// answer.
func linearOffsetForTimestamp(l *Log, ts int64) (int64, int64, bool, error) {
	for _, seg := range l.segments() {
		if !seg.acquire() {
			continue
		}
		off, rts, found, err := l.searchTimestamp(seg, ts)
		seg.release()
		if err != nil || found {
			return off, rts, found, err
		}
	}
	return 0, 0, false, nil
}

// TestTimestampLookupMatchesLinear: on logs whose timestamps rise and on
// logs whose do not (single late records, and runs of them that make
// whole segments older than the ones before), every
// lookup answers as the linear walk does, while segments roll, retention
// removes the oldest and the log is truncated and reopened.
func TestTimestampLookupMatchesLinear(t *testing.T) {
	for _, tc := range []struct {
		name   string
		jitter int64 // how far back a record's timestamp may be
	}{{"rising", 0}, {"late records", 3000}, {"disorder", 1 << 20}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			rng := rand.New(rand.NewPCG(7, uint64(tc.jitter)))
			dir := t.TempDir()
			cfg, err := backend.ParseConfig(map[string]string{"segment.bytes": "1500", "index.interval.bytes": "300", "file.delete.delay.ms": "0"})
			if err != nil {
				t.Fatal(err)
			}
			l, err := Open(dir, Options{Config: cfg, HighWatermark: -1})
			if err != nil {
				t.Fatal(err)
			}
			defer func() { l.Close() }()
			clock := int64(1_000_000)
			var b record.Builder
			late := 0 // batches left in a run of old records (whole segments of them)
			appendSome := func(n int) {
				for range n {
					if tc.jitter > 0 && late == 0 && rng.IntN(40) == 0 {
						late = 10 + rng.IntN(30)
					}
					b.Reset(record.NewBatchHeader())
					for range 1 + rng.IntN(3) {
						clock += int64(rng.IntN(50))
						ts := clock
						if tc.jitter > 0 && (late > 0 || rng.IntN(4) == 0) {
							ts -= rng.Int64N(tc.jitter)
						}
						b.Append(ts, nil, make([]byte, 40+rng.IntN(100)), nil)
					}
					batch, err := b.Build()
					if err != nil {
						t.Fatal(err)
					}
					if _, err := l.Append(ctx, batch, backend.AppendOptions{AssignOffsets: true}); err != nil {
						t.Fatal(err)
					}
					late = max(late-1, 0)
				}
			}
			check := func(step string) {
				t.Helper()
				for range 200 {
					ts := 1_000_000 - 100 + rng.Int64N(clock-1_000_000+200)
					off, rts, found, err := l.OffsetForTimestamp(ctx, ts)
					woff, wrts, wfound, werr := linearOffsetForTimestamp(l, ts)
					if err != nil || werr != nil || off != woff || rts != wrts || found != wfound {
						t.Fatalf("%s: OffsetForTimestamp(%d) = %d, %d, %v, %v; the linear walk says %d, %d, %v, %v",
							step, ts, off, rts, found, err, woff, wrts, wfound, werr)
					}
				}
			}
			for round := range 6 {
				appendSome(150)
				check("after appends")
				if n := len(l.segments()); n < 10*(round+1) {
					t.Fatalf("round %d: only %d segments", round, n)
				}
				switch round {
				case 2:
					o := l.Offsets()
					l.SetHighWatermark(o.LogEnd)
					if err := l.DeleteRecordsBefore(ctx, o.LogStart+(o.LogEnd-o.LogStart)/4); err != nil {
						t.Fatal(err)
					}
					check("after deleting the oldest records")
				case 3:
					o := l.Offsets()
					if err := l.TruncateTo(o.LogEnd - (o.LogEnd-o.LogStart)/5); err != nil {
						t.Fatal(err)
					}
					clock -= 2000
					check("after a truncation")
				case 4:
					if err := l.Close(); err != nil {
						t.Fatal(err)
					}
					if l, err = Open(dir, Options{Config: cfg, HighWatermark: -1, CleanShutdown: true, RecoveryPoint: -1}); err != nil {
						t.Fatal(err)
					}
					check("after a reopen")
				}
			}
		})
	}
}
