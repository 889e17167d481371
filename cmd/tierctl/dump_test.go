package main

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/local"
	"github.com/tierlog/tierlog/producerstate"
	"github.com/tierlog/tierlog/record"
	"github.com/tierlog/tierlog/testing/fixtures"
)

const psTime = int64(1_700_000_000_000)

// writeProducerPartition writes a partition through the log, as a leader
// and a transaction coordinator would, whose producers leave a snapshot
// with entries and a .txnindex:
//
//	offsets 0..2   producer 7, transactional, sequences 0..2
//	offset  3      ABORT marker of producer 7 (coordinator epoch 4)
//	offsets 4..5   producer 8, idempotent, sequences 0..1
//	offsets 6..7   producer 7, transactional, sequences 3..4
//	offset  8      COMMIT marker of producer 7
//	offsets 9..10  producer 9, transactional, left open
//
// Closing the log writes 00000000000000000011.snapshot.
func writeProducerPartition(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "orders-0")
	l, err := local.Open(dir, local.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var b record.Builder
	data := func(pid int64, seq int32, txn bool, n int) {
		t.Helper()
		h := record.NewBatchHeader()
		h.ProducerID, h.ProducerEpoch, h.BaseSequence, h.Transactional = pid, 0, seq, txn
		b.Reset(h)
		for i := 0; i < n; i++ {
			b.Append(psTime, []byte("k"), []byte("v"), nil)
		}
		out, err := b.Build()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := l.Append(ctx, out, backend.AppendOptions{AssignOffsets: true}); err != nil {
			t.Fatal(err)
		}
	}
	marker := func(pid int64, commit bool) {
		t.Helper()
		out, err := b.BuildEndTxnMarker(record.EndTxnMarker{ProducerID: pid, CoordinatorEpoch: 4, Commit: commit, Timestamp: psTime})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := l.Append(ctx, out, backend.AppendOptions{AssignOffsets: true, Coordinator: true}); err != nil {
			t.Fatal(err)
		}
	}
	data(7, 0, true, 3)
	marker(7, false)
	data(8, 0, false, 2)
	data(7, 3, true, 2)
	marker(7, true)
	data(9, 0, true, 2)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"00000000000000000011.snapshot", "00000000000000000000.txnindex"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			t.Fatalf("the log did not write %s: %v", name, err)
		}
	}
	return dir
}

func TestDumpProducerSnapshotFixture(t *testing.T) {
	p := fixtures.Path(t, "ldi-poc/__consumer_offsets-6/00000000000000000013.snapshot")
	code, out, errOut := tierctl(t, "dump", p)
	if code != 0 || out != "Dumping "+p+"\n" {
		t.Fatalf("exit %d, want 0 and only the header for an empty snapshot:\n%s%s", code, out, errOut)
	}
	if code, out, _ := tierctl(t, "dump", "--json", p); code != 0 || out != "" {
		t.Fatalf("--json: exit %d, %q", code, out)
	}
	code, out, errOut = tierctl(t, "verify", p)
	if code != 0 || !strings.Contains(out, "ok   "+p+": 0 entries, 10 bytes") || !strings.Contains(out, "0 with problems") {
		t.Fatalf("verify: exit %d\n%s%s", code, out, errOut)
	}
}

func TestDumpProducerStateFiles(t *testing.T) {
	dir := writeProducerPartition(t)
	snap := filepath.Join(dir, "00000000000000000011.snapshot")
	code, out, errOut := tierctl(t, "dump", snap)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	want := []string{
		"Dumping " + snap,
		"producerId: 7 producerEpoch: 0 coordinatorEpoch: 4 currentTxnFirstOffset: OptionalLong.empty lastTimestamp: 1700000000000 " +
			"firstSequence: 3 lastSequence: 4 lastOffset: 7 offsetDelta: 1 timestamp: 1700000000000",
		"producerId: 8 producerEpoch: 0 coordinatorEpoch: -1 currentTxnFirstOffset: OptionalLong.empty lastTimestamp: 1700000000000 " +
			"firstSequence: 0 lastSequence: 1 lastOffset: 5 offsetDelta: 1 timestamp: 1700000000000",
		"producerId: 9 producerEpoch: 0 coordinatorEpoch: -1 currentTxnFirstOffset: OptionalLong[9] lastTimestamp: 1700000000000 " +
			"firstSequence: 0 lastSequence: 1 lastOffset: 10 offsetDelta: 1 timestamp: 1700000000000",
	}
	if got := strings.Split(strings.TrimSuffix(out, "\n"), "\n"); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("snapshot dump\n got:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	code, out, _ = tierctl(t, "dump", "--json", snap)
	var rows []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("not JSON: %q", l)
		}
		rows = append(rows, m)
	}
	if code != 0 || len(rows) != 3 || rows[2]["currentTxnFirstOffset"] != 9.0 || rows[0]["currentTxnFirstOffset"] != nil ||
		rows[1]["lastOffset"] != 5.0 || rows[0]["coordinatorEpoch"] != 4.0 {
		t.Fatalf("--json: exit %d %v", code, rows)
	}

	txn := filepath.Join(dir, "00000000000000000000.txnindex")
	code, out, _ = tierctl(t, "dump", txn)
	if code != 0 || out != "Dumping "+txn+"\nversion: 0 producerId: 7 firstOffset: 0 lastOffset: 3 lastStableOffset: 4\n" {
		t.Fatalf("txnindex dump: exit %d\n%s", code, out)
	}
	code, out, _ = tierctl(t, "dump", "--json", txn)
	if code != 0 || strings.TrimSpace(out) != `{"firstOffset":0,"lastOffset":3,"lastStableOffset":4,"producerId":7,"version":0}` {
		t.Fatalf("txnindex --json: exit %d %s", code, out)
	}

	// What the log wrote verifies, in the directory and file by file.
	code, out, _ = tierctl(t, "verify", dir)
	if code != 0 || !strings.Contains(out, "00000000000000000011.snapshot: 3 entries, 148 bytes") ||
		!strings.Contains(out, "00000000000000000000.txnindex: 1 entries, 34 bytes") {
		t.Fatalf("verify: exit %d\n%s", code, out)
	}
	for _, p := range []string{snap, txn} {
		if code, out, _ := tierctl(t, "verify", p); code != 0 {
			t.Fatalf("verify %s: exit %d\n%s", p, code, out)
		}
	}
}

// TestDumpHandMadeTxnIndex dumps a .txnindex written byte by byte from
// Kafka's layout (AbortedTxn: int16 version, int64 producerId, firstOffset,
// lastOffset, lastStableOffset), with no log beside it.
func TestDumpHandMadeTxnIndex(t *testing.T) {
	var b []byte
	for _, e := range [][4]int64{{1, 0, 5, 3}, {2, 4, 9, 6}} {
		b = binary.BigEndian.AppendUint16(b, 0)
		for _, v := range e {
			b = binary.BigEndian.AppendUint64(b, uint64(v))
		}
	}
	p := filepath.Join(t.TempDir(), "00000000000000000000.txnindex")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, _ := tierctl(t, "dump", p)
	want := "Dumping " + p + "\n" +
		"version: 0 producerId: 1 firstOffset: 0 lastOffset: 5 lastStableOffset: 3\n" +
		"version: 0 producerId: 2 firstOffset: 4 lastOffset: 9 lastStableOffset: 6\n"
	if code != 0 || out != want {
		t.Fatalf("exit %d\n got: %s\nwant: %s", code, out, want)
	}
	code, out, _ = tierctl(t, "verify", p)
	if code != 0 || !strings.Contains(out, "2 entries, 68 bytes") || !strings.Contains(out, "note: no .log beside it") {
		t.Fatalf("verify: exit %d\n%s", code, out)
	}
	// Without a base offset in its name, dump needs --base-offset.
	q := filepath.Join(t.TempDir(), "aborted.txnindex")
	os.WriteFile(q, b, 0o644)
	if code, _, errOut := tierctl(t, "dump", q); code != 2 || !strings.Contains(errOut, "--base-offset") {
		t.Fatalf("dump without a base offset: exit %d %s", code, errOut)
	}
	if code, out, _ := tierctl(t, "dump", "--base-offset", "0", q); code != 0 || !strings.Contains(out, "producerId: 2") {
		t.Fatalf("dump --base-offset: exit %d %s", code, out)
	}
	// A base offset above an entry's marker fails Kafka's sanity check.
	if code, out, _ := tierctl(t, "dump", "--base-offset", "6", q); code != 1 || !strings.Contains(out, "Problem: ") ||
		!strings.Contains(out, "below the segment's base offset 6") || !strings.Contains(out, "producerId: 2") {
		t.Fatalf("dump --base-offset 6: exit %d %s", code, out)
	}
}

func TestDumpDamagedProducerStateFiles(t *testing.T) {
	src := writeProducerPartition(t)
	snapName, txnName := "00000000000000000011.snapshot", "00000000000000000000.txnindex"
	cases := []struct {
		name, file string
		mut        func(b []byte) []byte
		want       string
		printed    string // a line still printed before the problem
	}{
		{"snapshot crc", snapName, func(b []byte) []byte { b[20] ^= 1; return b }, "crc mismatch", ""},
		{"snapshot cut short", snapName, func(b []byte) []byte { return b[:len(b)-1] }, "corrupt producer snapshot", ""},
		{"snapshot version", snapName, func(b []byte) []byte { b[1] = 2; return b }, "unknown version 2", ""},
		{"txnindex partial entry", txnName, func(b []byte) []byte { return append(b, 0, 0, 0) }, "partial trailing entry of 3 bytes", "producerId: 7"},
		{"txnindex version", txnName, func(b []byte) []byte { b[1] = 1; return b }, "unexpected aborted transaction version 1", ""},
		{"txnindex second entry version", txnName, func(b []byte) []byte {
			two := append(append([]byte(nil), b...), b...)
			two[producerstate.TxnIndexEntrySize+1] = 1
			return two
		}, "unexpected aborted transaction version 1", "producerId: 7"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := copyDir(t, src)
			p := filepath.Join(dir, c.file)
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			os.WriteFile(p, c.mut(b), 0o644)
			code, out, _ := tierctl(t, "dump", p)
			if code != 1 || !strings.Contains(out, "Problem: ") || !strings.Contains(out, c.want) || !strings.Contains(out, c.printed) {
				t.Fatalf("dump: exit %d, want 1 and %q:\n%s", code, c.want, out)
			}
			code, out, _ = tierctl(t, "dump", "--json", p)
			var last map[string]any
			lines := strings.Split(strings.TrimSpace(out), "\n")
			if err := json.Unmarshal([]byte(lines[len(lines)-1]), &last); code != 1 || err != nil || last["problem"] == nil {
				t.Fatalf("dump --json: exit %d %v\n%s", code, err, out)
			}
			code, out, _ = tierctl(t, "verify", dir)
			if code != 1 || !strings.Contains(out, "FAIL "+p) || !strings.Contains(out, c.want) {
				t.Fatalf("verify: exit %d, want 1 and %q:\n%s", code, c.want, out)
			}
		})
	}
}

// TestVerifyFindsProducerStateDamage: files that decode but disagree with
// themselves or with the log.
func TestVerifyFindsProducerStateDamage(t *testing.T) {
	src := writeProducerPartition(t)
	entry := func(pid, lastOffset int64, delta int32, txnFirst int64) producerstate.SnapshotEntry {
		return producerstate.SnapshotEntry{ProducerID: pid, LastSequence: delta, LastOffset: lastOffset, OffsetDelta: delta,
			Timestamp: psTime, CoordinatorEpoch: -1, CurrentTxnFirstOffset: txnFirst}
	}
	aborted := func(as ...producerstate.AbortedTxn) []byte {
		var b []byte
		for _, a := range as {
			b = a.AppendTo(b)
		}
		return b
	}
	write := func(name string, b []byte) func(dir string) {
		return func(dir string) { os.WriteFile(filepath.Join(dir, name), b, 0o644) }
	}
	cases := []struct {
		name string
		mut  func(dir string)
		want string
	}{
		{"snapshot above the log end", func(dir string) {
			os.Rename(filepath.Join(dir, "00000000000000000011.snapshot"), filepath.Join(dir, "00000000000000000012.snapshot"))
		}, "offset 12 (from its name) is outside the log's offsets 0..11"},
		{"snapshot with a batch at its offset", write("00000000000000000011.snapshot",
			producerstate.EncodeSnapshot(nil, []producerstate.SnapshotEntry{entry(7, 11, 0, -1)})), "last batch ends at offset 11, not below the snapshot's offset 11"},
		{"snapshot with a producer twice", write("00000000000000000011.snapshot",
			producerstate.EncodeSnapshot(nil, []producerstate.SnapshotEntry{entry(7, 2, 0, -1), entry(7, 5, 0, -1)})), "entry 1: producer 7 is also entry 0"},
		{"snapshot with a batch before offset 0", write("00000000000000000011.snapshot",
			producerstate.EncodeSnapshot(nil, []producerstate.SnapshotEntry{entry(7, 2, 5, -1)})), "offset delta 5 with last offset 2"},
		{"snapshot with an open transaction after its last batch", write("00000000000000000011.snapshot",
			producerstate.EncodeSnapshot(nil, []producerstate.SnapshotEntry{entry(9, 2, 0, 5)})), "open transaction starts at offset 5, after its last batch"},
		{"marker past the segment", write("00000000000000000000.txnindex",
			aborted(producerstate.AbortedTxn{ProducerID: 7, FirstOffset: 0, LastOffset: 30, LastStableOffset: 31})), "marker offset 30 is past the segment's last offset 10"},
		{"markers out of order", write("00000000000000000000.txnindex",
			aborted(producerstate.AbortedTxn{ProducerID: 7, LastOffset: 8, LastStableOffset: 9}, producerstate.AbortedTxn{ProducerID: 7, LastOffset: 3, LastStableOffset: 4})),
			"entry 1: marker offset 3 does not follow entry 0's 8"},
		{"transaction starting after its marker", write("00000000000000000000.txnindex",
			aborted(producerstate.AbortedTxn{ProducerID: 7, FirstOffset: 5, LastOffset: 3, LastStableOffset: 4})), "starts at offset 5, after its marker at 3"},
		{"last stable offset past the marker", write("00000000000000000000.txnindex",
			aborted(producerstate.AbortedTxn{ProducerID: 7, LastOffset: 3, LastStableOffset: 9})), "last stable offset 9 is past the marker at 3"},
		{"txnindex without its log", write("00000000000000000050.txnindex",
			aborted(producerstate.AbortedTxn{ProducerID: 7, LastOffset: 60, LastStableOffset: 61})), "index file without its 00000000000000000050.log"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := copyDir(t, src)
			c.mut(dir)
			code, out, _ := tierctl(t, "verify", dir)
			if code != 1 || !strings.Contains(out, c.want) {
				t.Fatalf("exit %d, want 1 and %q in:\n%s", code, c.want, out)
			}
			code, out, _ = tierctl(t, "verify", "--json", dir)
			found := false
			for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
				var r fileReport
				if err := json.Unmarshal([]byte(l), &r); err != nil {
					t.Fatalf("not JSON: %q", l)
				}
				for _, p := range r.Problems {
					found = found || strings.Contains(p, c.want)
				}
			}
			if code != 1 || !found {
				t.Fatalf("--json: exit %d, want 1 and %q in:\n%s", code, c.want, out)
			}
		})
	}
	// A snapshot checked on its own reads the log's range from the
	// segments beside it.
	dir := copyDir(t, src)
	moved := filepath.Join(dir, "00000000000000000099.snapshot")
	os.Rename(filepath.Join(dir, "00000000000000000011.snapshot"), moved)
	if code, out, _ := tierctl(t, "verify", moved); code != 1 || !strings.Contains(out, "outside the log's offsets 0..11") {
		t.Fatalf("verify of a lone snapshot: exit %d\n%s", code, out)
	}
}

// TestProducerStateFilesAsBinary runs dump and verify of producer state
// files from the built binary, with the exit codes a user sees.
func TestProducerStateFilesAsBinary(t *testing.T) {
	dir := writeProducerPartition(t)
	snap := filepath.Join(dir, "00000000000000000011.snapshot")
	txn := filepath.Join(dir, "00000000000000000000.txnindex")
	inv := binRun(t, nil, "dump", "--json", snap, txn)
	if inv.code != 0 {
		t.Fatalf("dump: exit %d\n%s%s", inv.code, inv.stdout, inv.stderr)
	}
	if rows := inv.jsonLines(t); len(rows) != 4 || rows[3]["lastStableOffset"] != 4.0 || rows[1]["producerId"] != 8.0 {
		t.Fatalf("dump --json: %v", rows)
	}
	if inv := binRun(t, nil, "verify", "--json", dir); inv.code != 0 {
		t.Fatalf("verify: exit %d\n%s", inv.code, inv.stdout)
	}
	t.Run("fixture", func(t *testing.T) {
		fx := fixtures.Path(t, "ldi-poc/__consumer_offsets-6")
		if inv := binRun(t, nil, "verify", fx); inv.code != 0 || !strings.Contains(inv.stdout, "00000000000000000013.snapshot: 0 entries") {
			t.Fatalf("verify of the fixture: exit %d\n%s", inv.code, inv.stdout)
		}
		if inv := binRun(t, nil, "dump", filepath.Join(fx, "00000000000000000013.snapshot")); inv.code != 0 {
			t.Fatalf("dump of the fixture's snapshot: exit %d\n%s", inv.code, inv.stderr)
		}
	})
	b, _ := os.ReadFile(snap)
	b[len(b)-1] ^= 1
	os.WriteFile(snap, b, 0o644)
	if inv := binRun(t, nil, "dump", snap); inv.code != 1 || !strings.Contains(inv.stdout, "crc mismatch") {
		t.Fatalf("dump of a damaged snapshot: exit %d\n%s%s", inv.code, inv.stdout, inv.stderr)
	}
	if inv := binRun(t, nil, "verify", dir); inv.code != 1 || !strings.Contains(inv.stdout, "FAIL "+snap) {
		t.Fatalf("verify of a damaged snapshot: exit %d\n%s", inv.code, inv.stdout)
	}
	if inv := binRun(t, nil, "dump", filepath.Join(dir, "00000000000000000011.producers")); inv.code != 2 || !strings.Contains(inv.stderr, ".snapshot or .txnindex") {
		t.Fatalf("dump of an unknown kind: exit %d\n%s", inv.code, inv.stderr)
	}
}
