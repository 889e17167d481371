package local_test

import (
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/local"
)

// TestIndexPastEndAfterDrop: an index read from disk again after the kept
// clock dropped it is checked again: damage since (its last entry past the
// end of the .log) is ErrCorruptRecord, never the next segment's batch
// served in place of the missing offsets. (Found in review.)
func TestIndexPastEndAfterDrop(t *testing.T) {
	const segs, maxOpen, victim = 40, 2, 5
	dir := filepath.Join(t.TempDir(), "t-0")
	writeIndexedSegments(t, dir, segs, 16)
	ixPath := filepath.Join(dir, local.FileName(victim*16, local.IndexSuffix))
	orig, err := os.ReadFile(ixPath)
	if err != nil {
		t.Fatal(err)
	}
	l := budgetLog(t, dir, segs, maxOpen, 1) // kept indexes dropped at once
	for off := int64(victim * 16); off < victim*16+16; off++ {
		if _, err := batchBytes(l, off); err != nil {
			t.Fatal(err)
		}
	}
	for off := int64(0); off < segs*16; off += 16 { // evicts the victim, drops its index
		if off/16 != victim {
			if _, err := batchBytes(l, off); err != nil {
				t.Fatal(err)
			}
		}
	}
	dmg := append([]byte(nil), orig...)
	last := len(dmg) - 8
	binary.BigEndian.PutUint32(dmg[last+4:], 1<<30) // the last entry's position: past the log's end
	if err := os.WriteFile(ixPath, dmg, 0o644); err != nil {
		t.Fatal(err)
	}
	lastRel := int64(binary.BigEndian.Uint32(dmg[last:]))
	for off := int64(victim*16) + lastRel; off < victim*16+16; off++ {
		r, err := l.Read(ctx, off, backend.ReadOptions{MaxBytes: 1, MinOneBatch: true})
		if err != nil {
			if !errors.Is(err, backend.ErrCorruptRecord) {
				t.Fatalf("read %d: %v; want ErrCorruptRecord", off, err)
			}
			continue
		}
		next := r.(backend.OffsetRange).NextOffset()
		r.Close()
		if next != off+1 {
			t.Fatalf("read %d: no error, and the records end before %d: another segment's batch, offsets %d..%d skipped", off, next, off, victim*16+15)
		}
	}
}
