package compaction

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/local"
	"github.com/tierlog/tierlog/record"
)

// TestCleanRefusesMovedBaseOffset: a closed segment of a compacted log in
// which one batch's base offset (outside the CRC) was moved forward by its
// record count, over the next batch whole, or back into the batch before
// it. The cleaner must refuse its input with a corruption error naming the
// file and the position, and swap nothing: every file of the directory is
// as it was, and nothing of a half-done clean is left.
func TestCleanRefusesMovedBaseOffset(t *testing.T) {
	for _, move := range []string{"forward over the next batch", "back into the batch before"} {
		t.Run(move, func(t *testing.T) {
			dir := t.TempDir()
			c := &clock{t: time.UnixMilli(1_700_000_000_000)}
			l := openCompacted(t, dir, c)
			rng := rand.New(rand.NewPCG(21, 2))
			appendRandom(t, l, rng, 200, 20, c, record.None)
			end := l.Offsets().LogEnd
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			segs, err := filepath.Glob(filepath.Join(dir, "*.log"))
			if err != nil || len(segs) < 4 {
				t.Fatalf("segments: %v %v", segs, err)
			}
			victim := segs[1]
			data, err := os.ReadFile(victim)
			if err != nil {
				t.Fatal(err)
			}
			var pos []int64
			for p := int64(0); p < int64(len(data)); {
				b, err := record.Parse(data[p:])
				if err != nil {
					t.Fatal(err)
				}
				pos = append(pos, p)
				p += int64(len(b))
			}
			at := pos[len(pos)/2]
			b := record.Batch(data[at:])
			moved := b.BaseOffset() + int64(b.LastOffsetDelta()) + 1
			if move != "forward over the next batch" {
				moved = b.BaseOffset() - 1
			}
			binary.BigEndian.PutUint64(data[at:], uint64(moved))
			if err := os.WriteFile(victim, data, 0o644); err != nil {
				t.Fatal(err)
			}
			before := dirFiles(t, dir)

			l = reopenCompacted(t, dir, c, l.Config(), end)
			_, err = Clean(context.Background(), l, -1, Options{MemoryBytes: 1 << 20, Now: c.now})
			l.Close()
			if !(errors.Is(err, record.ErrCorrupt) || errors.Is(err, backend.ErrCorruptRecord)) ||
				!strings.Contains(err.Error(), filepath.Base(victim)) || !strings.Contains(err.Error(), "position") {
				t.Errorf("clean over %s position %d (base offset moved %s to %d): %v; want a corruption error naming the file and a position",
					filepath.Base(victim), at, move, moved, err)
			}
			after := dirFiles(t, dir)
			for name, want := range before {
				if got, ok := after[name]; !ok || !bytes.Equal(got, want) {
					t.Errorf("%s changed or went under a refused clean", name)
				}
			}
			for name := range after {
				if _, ok := before[name]; !ok && (strings.HasSuffix(name, ".cleaned") || strings.HasSuffix(name, ".swap") || strings.HasSuffix(name, ".deleted")) {
					t.Errorf("a refused clean left %s", name)
				}
			}
		})
	}
}

// reopenCompacted opens the log of dir, shut down cleanly (a recovery
// scan would cut the damage off before the cleaner saw it), with its high
// watermark at end.
func reopenCompacted(t *testing.T, dir string, c *clock, cfg backend.Config, end int64) *local.Log {
	t.Helper()
	l, err := local.Open(dir, local.Options{Config: cfg, Now: c.now, CleanShutdown: true, HighWatermark: end, LogStartOffset: -1})
	if err != nil {
		t.Fatal(err)
	}
	if o := l.Offsets(); o.LogEnd != end || o.HighWatermark != end {
		t.Fatalf("reopened: %+v; want the log end and high watermark at %d", o, end)
	}
	return l
}

// dirFiles returns the segment files (.log, .index, .timeindex) of dir
// and their bytes.
func dirFiles(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]byte{}
	for _, e := range ents {
		if e.IsDir() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out[e.Name()] = b
	}
	return out
}
