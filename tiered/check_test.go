package tiered_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/manifest"
	"github.com/tierlog/tierlog/objstore"
	"github.com/tierlog/tierlog/objstore/mem"
	"github.com/tierlog/tierlog/tiered"
)

// fullSegment puts a segment with every kind of object under prefix and
// returns its manifest: the bytes are arbitrary, the bucket check looks
// at sizes and CRC-32Cs only.
func fullSegment(t *testing.T, store *objstore.Store, prefix string) *manifest.Manifest {
	t.Helper()
	ctx := context.Background()
	castagnoli := crc32.MakeTable(crc32.Castagnoli)
	s := manifest.Segment{BaseOffset: 0, LastOffset: 9, Records: 10, ID: [8]byte{1, 2, 3, 4, 5, 6, 7, 8}}
	sizes := map[string]int64{manifest.LogSuffix: 500, manifest.IndexSuffix: 16, manifest.TimeIndexSuffix: 24,
		manifest.TxnIndexSuffix: 34, manifest.SnapshotSuffix: 60, manifest.EpochsSuffix: 12}
	crcs := map[string]uint32{}
	for _, suf := range manifest.AllSuffixes {
		data := bytes.Repeat([]byte(suf[1:2]), int(sizes[suf]))
		crcs[suf] = crc32.Checksum(data, castagnoli)
		if _, err := store.Put(ctx, manifest.NewLayout(prefix).Segment(s, suf), bytes.NewReader(data), int64(len(data)), objstore.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	s.Size, s.IndexSize, s.TimeIndexSize = sizes[manifest.LogSuffix], sizes[manifest.IndexSuffix], sizes[manifest.TimeIndexSuffix]
	s.TxnIndexSize, s.SnapshotSize, s.EpochsSize = sizes[manifest.TxnIndexSuffix], sizes[manifest.SnapshotSuffix], sizes[manifest.EpochsSuffix]
	s.LogCRC, s.IndexCRC, s.TimeIndexCRC = crcs[manifest.LogSuffix], crcs[manifest.IndexSuffix], crcs[manifest.TimeIndexSuffix]
	s.TxnIndexCRC, s.SnapshotCRC, s.EpochsCRC = crcs[manifest.TxnIndexSuffix], crcs[manifest.SnapshotSuffix], crcs[manifest.EpochsSuffix]
	m := &manifest.Manifest{Generation: 1}
	if err := m.Append(s); err != nil {
		t.Fatal(err)
	}
	return m
}

// check runs the bucket check and returns each object's check by key.
func check(t *testing.T, store *objstore.Store, prefix string, m *manifest.Manifest, opts tiered.CheckOptions) map[string]tiered.ObjectCheck {
	t.Helper()
	out := map[string]tiered.ObjectCheck{}
	err := tiered.CheckBucket(context.Background(), store, prefix, m, opts, func(_ manifest.Segment, objects []tiered.ObjectCheck) error {
		for _, o := range objects {
			out[o.Key] = o
			if o.Path != "" {
				if _, err := os.Stat(o.Path); err != nil {
					t.Errorf("%s: its bytes are not kept at %s: %v", o.Key, o.Path, err)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestCheckBucketEveryObject: the bucket check checks every object a
// segment has (not a fixed three), and damage to each kind of object is
// reported on that object alone.
func TestCheckBucketEveryObject(t *testing.T) {
	ctx := context.Background()
	const prefix = "tl/orders-0"
	for _, deep := range []bool{false, true} {
		for _, victim := range append([]string{""}, manifest.AllSuffixes...) {
			for _, damage := range []string{"truncate", "flip", "remove"} {
				if victim == "" && damage != "truncate" {
					continue
				}
				t.Run(fmt.Sprintf("deep=%v/%s/%s", deep, victim, damage), func(t *testing.T) {
					store := objstore.New(mem.New(), "mem://check", objstore.Options{})
					m := fullSegment(t, store, prefix)
					s := m.Segments[0]
					var victimKey string
					if victim != "" {
						victimKey = manifest.NewLayout(prefix).Segment(s, victim)
						data, err := store.ReadAll(ctx, victimKey, 0, -1)
						if err != nil {
							t.Fatal(err)
						}
						switch damage {
						case "truncate":
							data = data[:len(data)-1]
						case "flip":
							data[len(data)/2] ^= 1
						}
						if damage == "remove" {
							err = store.Delete(ctx, victimKey)
						} else {
							_, err = store.Put(ctx, victimKey, bytes.NewReader(data), int64(len(data)), objstore.PutOptions{})
						}
						if err != nil {
							t.Fatal(err)
						}
					}
					opts := tiered.CheckOptions{Deep: deep}
					if deep {
						opts.Dir = t.TempDir()
					}
					got := check(t, store, prefix, m, opts)
					if len(got) != len(manifest.AllSuffixes) {
						t.Fatalf("%d objects checked, the segment has %d", len(got), len(manifest.AllSuffixes))
					}
					for _, suf := range manifest.AllSuffixes {
						key := manifest.NewLayout(prefix).Segment(s, suf)
						o, ok := got[key]
						wantKind, _ := manifest.KindOfSuffix(suf)
						switch {
						case !ok:
							t.Errorf("%s not checked", key)
						case o.Kind != wantKind:
							t.Errorf("%s checked as a %s", key, o.Kind)
						case key != victimKey && o.Err != nil:
							t.Errorf("%s is sound, reported %v", key, o.Err)
						case key == victimKey && damage == "flip" && !deep:
							if o.Err != nil {
								t.Errorf("%s: a same-size damage found without reading it: %v", key, o.Err)
							}
						case key == victimKey && (o.Err == nil || !strings.Contains(o.Err.Error(), key)):
							t.Errorf("%s damaged (%s), reported %v", key, damage, o.Err)
						case key == victimKey && damage == "remove" && !errors.Is(o.Err, objstore.ErrNotFound):
							t.Errorf("%s removed, reported %v", key, o.Err)
						case key == victimKey && damage != "remove" && !errors.Is(o.Err, backend.ErrCorruptRecord):
							t.Errorf("%s damaged (%s), reported %v", key, damage, o.Err)
						}
					}
					if opts.Dir != "" {
						if ents, _ := os.ReadDir(opts.Dir); len(ents) != 0 {
							t.Errorf("the check left %d files in %s", len(ents), filepath.Base(opts.Dir))
						}
					}
				})
			}
		}
	}
}

// TestManifestObjectsCount: a segment with every kind of object counts
// them all.
func TestManifestObjectsCount(t *testing.T) {
	store := objstore.New(mem.New(), "mem://check", objstore.Options{})
	m := fullSegment(t, store, "tl/orders-0")
	n, b := m.Objects()
	if n != len(manifest.AllSuffixes) || b != 500+16+24+34+60+12 {
		t.Fatalf("Objects() = %d, %d", n, b)
	}
}
