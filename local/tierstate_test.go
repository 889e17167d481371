package local_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tierlog/tierlog/local"
)

// TestTierStateRoundTrip: the tier-state-checkpoint reads back what was
// written; a missing file is no record; a malformed one is
// ErrBadCheckpoint naming the file.
func TestTierStateRoundTrip(t *testing.T) {
	dir := t.TempDir()
	if _, ok, err := local.ReadTierState(dir); ok || err != nil {
		t.Fatalf("no file: ok=%v err=%v; want no record", ok, err)
	}
	want := local.TierState{Generation: 29, Born: 3, RemoteEnd: 7580, LogStart: 120}
	if err := local.WriteTierState(dir, want); err != nil {
		t.Fatal(err)
	}
	got, ok, err := local.ReadTierState(dir)
	if err != nil || !ok || got != want {
		t.Fatalf("read back %+v %v %v, want %+v", got, ok, err, want)
	}
	// With the manifest's lineage: a fifth field, 16 hex digits.
	want.Lineage = [8]byte{0xde, 0xad, 0xbe, 0xef, 0, 1, 2, 3}
	if err := local.WriteTierState(dir, want); err != nil {
		t.Fatal(err)
	}
	if data, _ := os.ReadFile(filepath.Join(dir, local.TierStateCheckpoint)); string(data) != "0\n1\n29 3 7580 120 deadbeef00010203\n" {
		t.Fatalf("written as %q", data)
	}
	if got, ok, err := local.ReadTierState(dir); err != nil || !ok || got != want {
		t.Fatalf("read back %+v %v %v, want %+v", got, ok, err, want)
	}
	for _, bad := range []string{"", "0\n1\n29 3 7580\n", "0\n1\n2 3 10 0\n", "0\n1\n29 3 -1 0\n", "0\n2\n1 0 0 0\n2 0 0 0\n", "0\n1\nx 0 0 0\n",
		"0\n1\n1 0 0 0 0000000000000000\n", "0\n1\n1 0 0 0 abcd\n", "0\n1\n1 0 0 0 zz00000000000000\n", "0\n1\n1 0 0 0 deadbeef00010203 x\n"} {
		if err := os.WriteFile(filepath.Join(dir, local.TierStateCheckpoint), []byte(bad), 0o644); err != nil {
			t.Fatal(err)
		}
		_, _, err := local.ReadTierState(dir)
		if !errors.Is(err, local.ErrBadCheckpoint) || !strings.Contains(err.Error(), local.TierStateCheckpoint) {
			t.Errorf("%q: %v; want ErrBadCheckpoint naming the file", bad, err)
		}
	}
}

// FuzzTierState: any bytes read as a tier-state-checkpoint give a record
// that writes back to bytes reading as the same record, or an error; no
// panic.
func FuzzTierState(f *testing.F) {
	f.Add([]byte("0\n1\n29 3 7580 120\n"))
	f.Add([]byte("0\n1\n1 0 0 0"))
	f.Add([]byte("0\n1\n29 3 7580 120 deadbeef00010203\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, local.TierStateCheckpoint), data, 0o644); err != nil {
			t.Fatal(err)
		}
		st, ok, err := local.ReadTierState(dir)
		if err != nil || !ok {
			return
		}
		if err := local.WriteTierState(dir, st); err != nil {
			t.Fatal(err)
		}
		again, ok, err := local.ReadTierState(dir)
		if err != nil || !ok || again != st {
			t.Fatalf("%+v wrote back as %+v %v %v", st, again, ok, err)
		}
	})
}
