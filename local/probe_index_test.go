package local_test

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"

	"github.com/tierlog/tierlog/local"
)

// One offset index entry of nextEntryLog's sealed segment damaged (its
// position or offset), with entries far enough apart for reads to probe:
// every offset read one batch at a time gives its record or an error,
// never another record.
func TestProbeDamagedIndexEntry(t *testing.T) {
	type dmg struct {
		slot  int
		what  string
		value func(rel, pos uint32, positions []int64) (uint32, uint32)
	}
	for _, d := range []dmg{
		{3, "entry 9's position inside batch 9", func(rel, pos uint32, ps []int64) (uint32, uint32) { return rel, pos + 7 }},
		{3, "entry 9's position at batch 8", func(rel, pos uint32, ps []int64) (uint32, uint32) { return rel, uint32(ps[8]) }},
		{3, "entry 9's position at batch 10", func(rel, pos uint32, ps []int64) (uint32, uint32) { return rel, uint32(ps[10]) }},
		{4, "entry 10's position inside batch 10", func(rel, pos uint32, ps []int64) (uint32, uint32) { return rel, pos + 7 }},
		{4, "entry 10's position at batch 9", func(rel, pos uint32, ps []int64) (uint32, uint32) { return rel, uint32(ps[9]) }},
		{3, "entry 9's offset -1", func(rel, pos uint32, ps []int64) (uint32, uint32) { return rel - 1, pos }},
		{3, "entry 9's offset -3 (batch 8's last)", func(rel, pos uint32, ps []int64) (uint32, uint32) { return rel - 3, pos }},
		{2, "entry 4's offset +1", func(rel, pos uint32, ps []int64) (uint32, uint32) { return rel + 1, pos }},
		{2, "entry 4's position at batch 5", func(rel, pos uint32, ps []int64) (uint32, uint32) { return rel, uint32(ps[5]) }},
		{2, "entry 4's position at batch 8", func(rel, pos uint32, ps []int64) (uint32, uint32) { return rel, uint32(ps[8]) }},
	} {
		t.Run(d.what, func(t *testing.T) {
			dir := t.TempDir()
			c, _, positions, recs := nextEntryLog(t, dir, true)
			ip := filepath.Join(dir, local.FileName(0, local.IndexSuffix))
			ix, err := os.ReadFile(ip)
			if err != nil {
				t.Fatal(err)
			}
			e := ix[d.slot*8:]
			rel, pos := d.value(binary.BigEndian.Uint32(e), binary.BigEndian.Uint32(e[4:]), positions)
			binary.BigEndian.PutUint32(e, rel)
			binary.BigEndian.PutUint32(e[4:], pos)
			if err := os.WriteFile(ip, ix, 0o644); err != nil {
				t.Fatal(err)
			}
			for _, readOnly := range []bool{false, true} {
				l, err := local.Open(dir, local.Options{Config: c, CleanShutdown: true, ReadOnly: readOnly, LogStartOffset: -1, HighWatermark: -1})
				if err != nil {
					continue // the damage found at open: an answer too
				}
				for _, r := range recs {
					got, next, err := readOnce(l, r.Offset, 1)
					if err == nil && (len(got) == 0 || got[0].Offset != r.Offset || string(got[0].Value) != string(r.Value)) {
						t.Errorf("read-only %v, one batch at %d: no error and a wrong answer (%d records, next %d)", readOnly, r.Offset, len(got), next)
					}
				}
				l.Close()
			}
		})
	}
}
