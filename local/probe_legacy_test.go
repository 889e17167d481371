package local_test

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"hash/crc32"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/tierlog/tierlog/local"
	"github.com/tierlog/tierlog/record"
)

// legacyMessage returns a magic 1 message: offset, size, crc, magic,
// attributes, timestamp, null key, value.
func legacyMessage(offset int64, attrs int8, ts int64, value []byte) []byte {
	body := []byte{1, byte(attrs)}
	body = binary.BigEndian.AppendUint64(body, uint64(ts))
	body = binary.BigEndian.AppendUint32(body, 0xffffffff) // null key
	body = binary.BigEndian.AppendUint32(body, uint32(len(value)))
	body = append(body, value...)
	out := binary.BigEndian.AppendUint64(nil, uint64(offset))
	out = binary.BigEndian.AppendUint32(out, uint32(4+len(body)))
	out = binary.BigEndian.AppendUint32(out, crc32.ChecksumIEEE(body))
	return append(out, body...)
}

// legacyGzipWrapper returns a magic 1 gzip wrapper of n messages whose
// last offset is last, values of size bytes each (incompressible).
func legacyGzipWrapper(t *testing.T, last int64, n, size int, ts int64, rng *rand.Rand) []byte {
	var inner []byte
	for i := range n {
		v := make([]byte, size)
		for j := range v {
			v[j] = byte(rng.Uint32())
		}
		inner = append(inner, legacyMessage(int64(i), 0, ts, v)...)
	}
	var z bytes.Buffer
	w := gzip.NewWriter(&z)
	w.Write(inner)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return legacyMessage(last, 1, ts, z.Bytes()) // codec gzip
}

// legacyWrapperLog is nextEntryLog (second segment after it) with batch 9
// replaced by a magic 1 gzip wrapper of the same offsets and about the same
// size, and the offset index rebuilt per batch by Kafka's rule.
func legacyWrapperLog(t *testing.T, dir string) (c local.Options, firsts, positions []int64, recs []record.Record) {
	t.Helper()
	cfgc, firsts, _, _ := nextEntryLog(t, dir, true)
	seg := filepath.Join(dir, local.FileName(0, local.LogSuffix))
	data, err := os.ReadFile(seg)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	var out []byte
	var lasts []int64
	for i, pos := range batchPositions(t, data) {
		b := record.Batch(data[pos:])
		b = b[:12+int(b.Length())]
		positions = append(positions, int64(len(out)))
		lasts = append(lasts, b.LastOffset())
		if i == 9 {
			out = append(out, legacyGzipWrapper(t, b.LastOffset(), 3, 4300, b.MaxTimestamp(), rng)...)
			continue
		}
		out = append(out, b...)
	}
	if err := os.WriteFile(seg, out, 0o644); err != nil {
		t.Fatal(err)
	}
	writeIndexByRule(t, filepath.Join(dir, local.FileName(0, local.IndexSuffix)), 0, 12000, batchAppends(positions, int64(len(out)), lasts))
	recs = dirRecords(t, dir)
	return local.Options{Config: cfgc, CleanShutdown: true, LogStartOffset: -1, HighWatermark: -1}, firsts, positions, recs
}

// The next entry's batch is a magic 1
// compressed wrapper (base offset unknown), alone up to the entry after
// and ending at its entry's offset; every offset before it, in batches
// without an entry, reads its own records (undamaged log).
func TestProbeLegacyWrapper(t *testing.T) {
	for _, readOnly := range []bool{false, true} {
		dir := t.TempDir()
		o, _, _, recs := legacyWrapperLog(t, dir)
		o.ReadOnly = readOnly
		l, err := local.Open(dir, o)
		if err != nil {
			t.Fatal(err)
		}
		for i, r := range recs {
			got, next, err := readOnce(l, r.Offset, 1)
			if err != nil {
				t.Errorf("read-only %v, one batch at %d: %v", readOnly, r.Offset, err)
				continue
			}
			if len(got) == 0 || short(got[:1]) != short(recs[i:i+1]) {
				t.Errorf("read-only %v, one batch at %d: got %s (next %d); want %s", readOnly, r.Offset, short(got), next, short(recs[i:i+1]))
			}
		}
		l.Close()
	}
}
