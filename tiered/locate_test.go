package tiered_test

import (
	"bytes"
	"path/filepath"
	"testing"
	"time"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/local"
	"github.com/tierlog/tierlog/objstore"
	"github.com/tierlog/tierlog/objstore/mem"
	"github.com/tierlog/tierlog/tiered"
)

// TestLocateBatchLargerThanTheCachedSpan: the chunk cache holds the
// first 60% of a remote batch larger than a read's window (a read-ahead
// range whose neighbour was evicted). A read of that batch fetches it
// whole instead of taking the cached part again and again (it spun
// forever: the cached part was always at least half the window it asked
// for, and never the whole batch).
func TestLocateBatchLargerThanTheCachedSpan(t *testing.T) {
	store := objstore.New(mem.New(), "mem://big", objstore.Options{})
	dir := filepath.Join(t.TempDir(), "orders-0")
	c := cfg(t, "segment.bytes", "400000", "local.retention.ms", "0", "file.delete.delay.ms", "0")
	l, err := local.Open(dir, local.Options{Config: c, LogStartOffset: -1, HighWatermark: -1})
	if err != nil {
		t.Fatal(err)
	}
	p, err := tiered.Open(ctx, l, tiered.Options{Store: store, Prefix: "tl/orders-0", LeaderEpoch: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for i := range 7 { // batches of about 108 KB: three a segment
		if _, err := appendOne(t, p, 1000, string(rune('a'+i))); err != nil {
			t.Fatal(err)
		}
	}
	want := batchesFrom(t, p, 0)
	if _, err := p.Offload(ctx); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "local segments not deleted", func() bool { return p.Offsets().LocalLogStart >= 3000 })
	seg := manifestOf(t, p).Segments[0]
	size := int64(len(want[999])) // every batch is the same size
	if err := tiered.CacheRemoteRange(ctx, p, seg, size, size*6/10); err != nil {
		t.Fatal(err)
	}
	type result struct {
		data []byte
		err  error
	}
	done := make(chan result, 1)
	go func() {
		r, err := p.Read(ctx, 1000, backend.ReadOptions{MaxBytes: 1, MinOneBatch: true})
		if err != nil {
			done <- result{nil, err}
			return
		}
		defer r.Close()
		var buf bytes.Buffer
		if _, err := r.WriteTo(&buf); err != nil {
			done <- result{nil, err}
			return
		}
		done <- result{buf.Bytes(), nil}
	}()
	select {
	case res := <-done:
		if res.err != nil {
			t.Fatal(res.err)
		}
		checkBatches(t, "the batch the cache held in part", map[int64][]byte{1999: res.data}, map[int64][]byte{1999: want[1999]})
	case <-time.After(30 * time.Second):
		t.Fatal("a read of a batch the chunk cache holds in part did not return in 30 s")
	}
}
