package local_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"sort"
	"testing"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/local"
	"github.com/tierlog/tierlog/record"
)

// fuzzTemplate builds a small closed partition directory once: three
// segments, indexes, a leader epoch checkpoint.
func fuzzTemplate(f *testing.F) map[string][]byte {
	dir := f.TempDir()
	c, _ := backend.ParseConfig(map[string]string{"segment.bytes": "1200", "index.interval.bytes": "100"})
	l, err := local.Open(dir, local.Options{Config: c, LogStartOffset: -1, HighWatermark: -1})
	if err != nil {
		f.Fatal(err)
	}
	for i := 0; i < 20; i++ {
		if _, err := l.Append(ctx, batchOf(2, int64(i), "z"), backend.AppendOptions{AssignOffsets: true, LeaderEpoch: int32(i / 7)}); err != nil {
			f.Fatal(err)
		}
	}
	l.Close()
	files := map[string][]byte{}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		b, _ := os.ReadFile(filepath.Join(dir, e.Name()))
		files[e.Name()] = b
	}
	return files
}

// FuzzOpenCorruptDir damages one file of a partition directory (a log, an
// index or the checkpoint) and opens it, clean and unclean: Open recovers or
// returns an error, never panics, and whatever it serves is whole batches
// that pass their CRC.
func FuzzOpenCorruptDir(f *testing.F) {
	files := fuzzTemplate(f)
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	f.Add(uint8(0), uint32(100), []byte{0xff}, false, uint32(0))
	f.Add(uint8(1), uint32(3), []byte{0, 0, 0, 0}, true, uint32(0))
	f.Add(uint8(4), uint32(0), []byte("9\nx\n"), false, uint32(5))
	f.Fuzz(func(t *testing.T, which uint8, at uint32, patch []byte, clean bool, cut uint32) {
		dir := t.TempDir()
		target := names[int(which)%len(names)]
		for n, b := range files {
			b = append([]byte(nil), b...)
			if n == target {
				if len(b) > 0 {
					pos := int(at) % len(b)
					copy(b[pos:], patch)
				} else {
					b = append(b, patch...)
				}
				if cut > 0 && int(cut) < len(b) {
					b = b[:len(b)-int(cut)%len(b)]
				}
			}
			if err := os.WriteFile(filepath.Join(dir, n), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		c, _ := backend.ParseConfig(map[string]string{"segment.bytes": "1200", "index.interval.bytes": "100"})
		l, err := local.Open(dir, local.Options{Config: c, CleanShutdown: clean, LogStartOffset: -1, HighWatermark: -1})
		if err != nil {
			return // a clear error is an acceptable answer
		}
		defer l.Close()
		o := l.Offsets()
		for off := o.LogStart; off < o.LogEnd; {
			r, err := l.Read(ctx, off, backend.ReadOptions{MaxBytes: 4096, MinOneBatch: true})
			if err != nil {
				if errors.Is(err, backend.ErrCorruptRecord) || errors.Is(err, backend.ErrOffsetOutOfRange) {
					return // a clean shutdown marker over damaged bytes: reported, not served
				}
				t.Fatalf("read %d: %v", off, err)
			}
			var buf bytes.Buffer
			r.WriteTo(&buf)
			r.Close()
			if buf.Len() == 0 {
				break
			}
			sc := record.NewScanner(bytes.NewReader(buf.Bytes()), 0, int64(buf.Len()), record.ScanOptions{Validate: true})
			next := off
			for sc.Next() {
				next = sc.Entry().LastOffset + 1
			}
			if sc.Err() != nil {
				if clean {
					return // clean open trusts the files, as Kafka does
				}
				t.Fatalf("recovered log served damaged bytes at %d: %v", off, sc.Err())
			}
			if next <= off {
				break
			}
			off = next
		}
		_, _, _, _ = l.OffsetForTimestamp(ctx, 5)
	})
}
