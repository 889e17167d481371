package local_test

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/local"
	"github.com/tierlog/tierlog/record"
)

// The high watermark inside batch 9 (whose
// lookup probes entry 9's batch); a read-committed-to-HW read from every
// offset below stops before batch 9 and returns the records written.
func TestProbeHighWatermark(t *testing.T) {
	for _, damaged := range []bool{false, true} {
		t.Run(fmt.Sprintf("damaged=%v", damaged), func(t *testing.T) {
			dir := t.TempDir()
			c, firsts, positions, recs := nextEntryLog(t, dir, false)
			if damaged {
				moveBase(t, dir+"/"+local.FileName(0, local.LogSuffix), positions[9], firsts[8])
			}
			hw := firsts[9] + 1
			l, err := local.Open(dir, local.Options{Config: c, CleanShutdown: true, LogStartOffset: -1, HighWatermark: hw})
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			if got := l.Offsets().HighWatermark; got != hw {
				t.Fatalf("high watermark %d, want %d", got, hw)
			}
			for i, r := range recs {
				if r.Offset >= firsts[9] {
					break
				}
				rs, err := l.Read(ctx, r.Offset, backend.ReadOptions{MaxBytes: 1 << 20, MinOneBatch: true, Isolation: backend.ReadHighWatermark})
				if err != nil {
					if !damaged {
						t.Errorf("read at %d: %v", r.Offset, err)
					}
					continue
				}
				var buf bytes.Buffer
				rs.WriteTo(&buf)
				rs.Close()
				sc := record.NewScanner(bytes.NewReader(buf.Bytes()), 0, int64(buf.Len()), record.ScanOptions{})
				var it record.Iterator
				j := i
				for sc.Next() {
					it.Reset(sc.Entry().Data)
					for it.Next() {
						g := it.Record()
						if g.Offset < r.Offset {
							continue
						}
						if g.Offset >= firsts[9] || j >= len(recs) || g.Offset != recs[j].Offset || !bytes.Equal(g.Value, recs[j].Value) {
							t.Fatalf("damaged %v, read at %d: record at %d is not the one written, or at/past batch 9 (hw %d)", damaged, r.Offset, g.Offset, hw)
						}
						j++
					}
				}
				if !damaged && recs[j].Offset != firsts[9] {
					t.Errorf("read at %d stopped at %d, want %d", r.Offset, recs[j].Offset, firsts[9])
				}
			}
		})
	}
}
