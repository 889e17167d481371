package local_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/local"
)

// view reads the batches from off (up to maxBytes) through
// backend.Viewer, copying what View lent.
func view(t *testing.T, l *local.Log, off int64, maxBytes int) []byte {
	t.Helper()
	r, err := l.Read(ctx, off, backend.ReadOptions{MaxBytes: maxBytes, MinOneBatch: true})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var got []byte
	if err := r.(backend.Viewer).View(func(p []byte) error {
		got = append(got, p...)
		return nil
	}); err != nil {
		t.Fatalf("view %d: %v", off, err)
	}
	return got
}

// TestViewLendsWhatWriteToWrites: View lends the bytes WriteTo writes,
// from a sealed segment's mapping (its reads past mapAfterReads), from a
// sealed segment read with pread (its first reads), and from the last
// segment; a read at the end lends nothing; fn's error is View's.
func TestViewLendsWhatWriteToWrites(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "t-0")
	writeIndexedSegments(t, dir, 3, 16)
	l := budgetLog(t, dir, 3, -1, 0)
	maps := mappingsUnder(t, dir)
	for round := range 6 { // the first reads pread, later ones the mapping
		for _, off := range []int64{0, 5, 15, 16, 31, 40, 47} {
			for _, maxBytes := range []int{1, 5000, 1 << 20} {
				want, err := func() ([]byte, error) {
					r, err := l.Read(ctx, off, backend.ReadOptions{MaxBytes: maxBytes, MinOneBatch: true})
					if err != nil {
						return nil, err
					}
					var buf bytes.Buffer
					_, err = local.ReadAll(r, &buf)
					return buf.Bytes(), err
				}()
				if err != nil {
					t.Fatal(err)
				}
				if got := view(t, l, off, maxBytes); !bytes.Equal(got, want) {
					t.Fatalf("round %d: view of %d (%d bytes): %d bytes, WriteTo wrote %d", round, off, maxBytes, len(got), len(want))
				}
			}
		}
	}
	if mappingsUnder(t, dir) == maps {
		t.Fatal("no segment was mapped: the test read only through pread")
	}
	if got := view(t, l, l.Offsets().LogEnd, 1); len(got) != 0 {
		t.Fatalf("a view at the log end lent %d bytes", len(got))
	}
	r, err := l.Read(ctx, 0, backend.ReadOptions{MaxBytes: 1, MinOneBatch: true})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	stop := errors.New("stop")
	if err := r.(backend.Viewer).View(func([]byte) error { return stop }); err != stop {
		t.Fatalf("View returned %v, want fn's error", err)
	}
}

// TestViewOfCutMappingIsAnError: a sealed segment's file cut short under
// its mapping makes a View of the lost bytes an ErrCorruptRecord (the
// fault under the mapping is caught), never a crash.
func TestViewOfCutMappingIsAnError(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "t-0")
	writeIndexedSegments(t, dir, 2, 16)
	l := budgetLog(t, dir, 2, -1, 0)
	for range 5 { // map the first segment
		view(t, l, 15, 1)
	}
	r, err := l.Read(ctx, 15, backend.ReadOptions{MaxBytes: 1, MinOneBatch: true})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if err := os.Truncate(filepath.Join(dir, local.FileName(0, local.LogSuffix)), 0); err != nil {
		t.Fatal(err)
	}
	var sum byte
	err = r.(backend.Viewer).View(func(p []byte) error {
		for _, c := range p {
			sum ^= c
		}
		return nil
	})
	if !errors.Is(err, backend.ErrCorruptRecord) {
		t.Fatalf("View of a cut mapping: %v, want ErrCorruptRecord", err)
	}
}
