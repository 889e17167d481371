package compaction

import (
	"context"
	"math/rand/v2"
	"os"
	"testing"
	"time"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/local"
	"github.com/tierlog/tierlog/record"
)

// TestCleanerSkipsAFailingLog: one compacted log has a damaged batch in a
// closed segment, so every round of it fails the same way. The cleaner
// fails it once, then cleans the other compacted log, then has nothing
// to do: it does not take the damaged log again at once (a thread looped
// on it at full speed, and a log that kept failing could keep the others
// from ever being cleaned). It tries the damaged log again after Backoff,
// then after twice that, and reports it uncleanable meanwhile.
func TestCleanerSkipsAFailingLog(t *testing.T) {
	c := &clock{t: time.UnixMilli(1_700_000_000_000)}
	b, err := local.OpenBackend(t.TempDir(), local.BackendOptions{Now: c.now})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	cfg, err := backend.ParseConfig(map[string]string{"cleanup.policy": "compact", "segment.bytes": "4096", "file.delete.delay.ms": "0"})
	if err != nil {
		t.Fatal(err)
	}
	logs := map[string]*local.Log{}
	for i, topic := range []string{"bad", "good"} {
		l, err := b.OpenLog(context.Background(), topic, 0, cfg)
		if err != nil {
			t.Fatal(err)
		}
		appendRandom(t, l, rand.New(rand.NewPCG(uint64(i), 5)), 300, 10, c, record.None)
		if err := l.Roll(); err != nil {
			t.Fatal(err)
		}
		logs[topic] = l
	}
	f, err := os.OpenFile(logs["bad"].SegmentInfos()[0].Path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte{0xff, 0xfe}, 70); err != nil { // inside the first batch's records
		t.Fatal(err)
	}
	f.Close()

	const backoff = time.Minute
	cl, err := NewCleaner(b, CleanerOptions{MemoryBytes: 1 << 20, Backoff: backoff, Now: c.now})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var failed, cleaned int
	for range 5 {
		ran, err := cl.RunOnce(ctx)
		switch {
		case err != nil:
			failed++
		case ran:
			cleaned++
		}
	}
	st := cl.Stats()
	if failed != 1 || cleaned != 1 || st.Rounds != 2 {
		t.Fatalf("5 passes: %d failed, %d cleaned, %d rounds; want the damaged log failed once and the other cleaned once (last error %v)",
			failed, cleaned, st.Rounds, st.LastError)
	}
	if st.Uncleanable != 1 || st.LastLog != "good-0" {
		t.Fatalf("uncleanable %d, last cleaned %q; want 1 and good-0", st.Uncleanable, st.LastLog)
	}
	// Tried again after Backoff, then only after twice that.
	c.add(backoff + time.Second)
	if ran, err := cl.RunOnce(ctx); !ran || err == nil {
		t.Fatalf("after Backoff: ran %v, %v; want the damaged log tried and failed again", ran, err)
	}
	c.add(backoff + time.Second)
	if ran, err := cl.RunOnce(ctx); ran || err != nil {
		t.Fatalf("Backoff after the second failure: ran %v, %v; want it still skipped", ran, err)
	}
	c.add(backoff)
	if ran, err := cl.RunOnce(ctx); !ran || err == nil {
		t.Fatalf("twice Backoff after the second failure: ran %v, %v; want it tried again", ran, err)
	}
}
