package local

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/tierlog/tierlog/producerstate"
)

// TestLeftSegmentTxnIndexByName: a reader holding a retired segment reads
// its own aborted transactions, loaded as it left, never the name's
// (renamed .deleted, or a replacement's): a read_committed read and an
// upload of it report its aborted transaction. (Found in review: the
// .txnindex was read by name after the segment left, and found empty.)
func TestLeftSegmentTxnIndexByName(t *testing.T) {
	dir := t.TempDir()
	w := newCleanTestLog(t, dir, nil)
	cfg, end := w.Config(), w.Offsets().LogEnd
	segs := w.SegmentInfos()
	if len(segs) < 3 {
		t.Fatalf("need 3 segments, have %d", len(segs))
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	a := producerstate.AbortedTxn{ProducerID: 7, FirstOffset: segs[0].BaseOffset, LastOffset: segs[1].BaseOffset - 1, LastStableOffset: segs[0].BaseOffset}
	if err := os.WriteFile(filepath.Join(dir, FileName(segs[0].BaseOffset, TxnIndexSuffix)), a.AppendTo(nil), 0o644); err != nil {
		t.Fatal(err)
	}
	l, err := Open(dir, Options{Config: cfg, HighWatermark: end, RecoveryPoint: end, CleanShutdown: true})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	h, err := l.Segments().OpenSegment(segs[0].BaseOffset) // a reader (an upload, a fetch) holds it
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if err := l.DeleteRecordsBefore(context.Background(), segs[1].BaseOffset); err != nil {
		t.Fatal(err)
	}
	t.Logf("left=%v", h.s.left)
	b, err := h.TxnIndexBytes()
	if err != nil {
		t.Logf("TxnIndexBytes: %v (an error would be acceptable)", err)
		return
	}
	if len(b) == 0 {
		t.Fatalf("the retired segment's aborted transaction (%+v) is gone for its reader: its .txnindex was read by name after it left", a)
	}
}
