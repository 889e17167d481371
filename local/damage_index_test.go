package local_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/index"
	"github.com/tierlog/tierlog/local"
	"github.com/tierlog/tierlog/record"
)

// firstBatchAt reads at offset off and returns the first batch's offsets.
func firstBatchAt(l *local.Log, off int64) (base, last int64, err error) {
	rs, err := l.Read(ctx, off, backend.ReadOptions{MaxBytes: 1, MinOneBatch: true})
	if err != nil {
		return 0, 0, err
	}
	var buf bytes.Buffer
	if _, err := local.ReadAll(rs, &buf); err != nil {
		return 0, 0, err
	}
	data := buf.Bytes()
	e, err := record.ReadHeader(bytes.NewReader(data), 0, int64(len(data)), make([]byte, record.BatchHeaderSize))
	if err != nil {
		return 0, 0, err
	}
	return e.BaseOffset, e.LastOffset, nil
}

// TestDamagedOffsetIndexEntry: an offset index entry of a closed segment
// that points inside a batch, past the segment's end, or at a batch of
// other offsets than it claims gives, at every offset of the log, the batch
// holding that offset or an error naming the segment's files; never
// another batch, in read-write and read-only opens.
func TestDamagedOffsetIndexEntry(t *testing.T) {
	for _, damage := range []string{"inside a batch", "past the end", "another batch's offset"} {
		t.Run(damage, func(t *testing.T) {
			dir := t.TempDir()
			c, recs := damageLog(t, dir)
			seg := segmentFiles(t, dir)[1]
			ixPath := strings.TrimSuffix(seg, local.LogSuffix) + local.IndexSuffix
			ix, err := os.ReadFile(ixPath)
			if err != nil {
				t.Fatal(err)
			}
			if len(ix) < 3*index.OffsetEntrySize {
				t.Fatalf("%s has %d entries; the test needs 3", ixPath, len(ix)/index.OffsetEntrySize)
			}
			e := ix[index.OffsetEntrySize : 2*index.OffsetEntrySize] // the second entry
			rel, pos := binary.BigEndian.Uint32(e), binary.BigEndian.Uint32(e[4:])
			st, _ := os.Stat(seg)
			switch damage {
			case "inside a batch":
				binary.BigEndian.PutUint32(e[4:], pos+7)
			case "past the end":
				binary.BigEndian.PutUint32(e[4:], uint32(st.Size())+100)
			case "another batch's offset":
				binary.BigEndian.PutUint32(e, rel+5)
			}
			if err := os.WriteFile(ixPath, ix, 0o644); err != nil {
				t.Fatal(err)
			}
			for _, readOnly := range []bool{false, true} {
				l, err := local.Open(dir, local.Options{Config: c, CleanShutdown: true, ReadOnly: readOnly, LogStartOffset: -1, HighWatermark: -1})
				if err != nil {
					if errors.Is(err, backend.ErrCorruptRecord) && strings.Contains(err.Error(), filepath.Base(ixPath)) {
						continue // refused at open, naming the index: fine
					}
					t.Fatalf("open (read-only %v): %v", readOnly, err)
				}
				errs := 0
				for _, r := range recs {
					base, last, err := firstBatchAt(l, r.Offset)
					switch {
					case err != nil:
						if !errors.Is(err, backend.ErrCorruptRecord) || !strings.Contains(err.Error(), strings.TrimSuffix(filepath.Base(seg), local.LogSuffix)) {
							t.Fatalf("read-only %v: read at %d: %v; want ErrCorruptRecord naming %s", readOnly, r.Offset, err, filepath.Base(seg))
						}
						errs++
					case base > r.Offset || last < r.Offset:
						t.Fatalf("read-only %v: a read at %d served the batch of offsets %d..%d", readOnly, r.Offset, base, last)
					}
				}
				t.Logf("read-only %v: %d of %d reads failed naming the segment, the others served the right batch", readOnly, errs, len(recs))
				l.Close()
			}
		})
	}
}
