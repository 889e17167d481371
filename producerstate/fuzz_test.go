package producerstate_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/tierlog/tierlog/producerstate"
	"github.com/tierlog/tierlog/record"
)

// exact returns b with its capacity cut to its length, so a decoder that
// reslices past the input panics instead of reading spare capacity.
func exact(b []byte) []byte { return b[:len(b):len(b)] }

// FuzzDecodeSnapshot: no panic on any bytes; a snapshot that decodes
// re-encodes to the same bytes, and loads.
func FuzzDecodeSnapshot(f *testing.F) {
	f.Add(unhex(f, goldenSnapshot))
	f.Add(unhex(f, "0001 48674bc7 00000000"))
	f.Add(unhex(f, "0001 00000000 7fffffff"))
	f.Add([]byte{0, 1})
	f.Fuzz(func(t *testing.T, data []byte) {
		entries, err := producerstate.DecodeSnapshot(exact(data))
		s := newState(t, producerstate.DefaultConfig())
		lerr := s.Load(exact(data), 42, 0)
		if (err == nil) != (lerr == nil) {
			t.Fatalf("DecodeSnapshot %v, Load %v", err, lerr)
		}
		if err != nil {
			if !errors.Is(err, producerstate.ErrCorruptSnapshot) {
				t.Fatalf("error %v is not ErrCorruptSnapshot", err)
			}
			return
		}
		if again := producerstate.EncodeSnapshot(nil, entries); !bytes.Equal(again, data) {
			t.Fatalf("re-encoded %x, input %x", again, data)
		}
		snap, off := s.Snapshot(nil)
		if _, err := producerstate.DecodeSnapshot(snap); err != nil || off != 42 {
			t.Fatalf("snapshot of the loaded state: %v at %d", err, off)
		}
	})
}

// FuzzTxnIndex: no panic on any bytes; a valid index re-encodes to the
// same bytes; collecting agrees with a plain filter over the decoded
// entries; truncation keeps whole entries.
func FuzzTxnIndex(f *testing.F) {
	f.Add(unhex(f, goldenTxnEntry), int64(0), int64(100), int64(41))
	f.Add(txnIndexBytes(
		producerstate.AbortedTxn{ProducerID: 1, FirstOffset: 0, LastOffset: 10, LastStableOffset: 5},
		producerstate.AbortedTxn{ProducerID: 2, FirstOffset: 5, LastOffset: 20, LastStableOffset: 11},
	), int64(10), int64(11), int64(5))
	f.Add([]byte{0, 1, 2}, int64(0), int64(0), int64(0))
	f.Fuzz(func(t *testing.T, data []byte, fetch, upper, base int64) {
		data = exact(data)
		entries, err := producerstate.DecodeTxnIndex(data)
		serr := producerstate.SanityCheckTxnIndex(data, base)
		got, complete, cerr := producerstate.CollectAbortedTxns(nil, data, fetch, upper)
		n, terr := producerstate.TruncateTxnIndex(data, fetch)
		if terr == nil && (n < 0 || n > len(data) || (n != len(data) && n%producerstate.TxnIndexEntrySize != 0)) {
			t.Fatalf("truncate to %d keeps %d of %d bytes", fetch, n, len(data))
		}
		if err != nil {
			if !errors.Is(err, producerstate.ErrCorruptTxnIndex) || serr == nil {
				t.Fatalf("decode %v, sanity %v", err, serr)
			}
			return
		}
		var again []byte
		for _, e := range entries {
			again = e.AppendTo(again)
		}
		if !bytes.Equal(again, data) {
			t.Fatalf("re-encoded %x, input %x", again, data)
		}
		if cerr != nil || terr != nil {
			t.Fatalf("collect %v, truncate %v on a valid index", cerr, terr)
		}
		var want []producerstate.AbortedTxn
		wantComplete := false
		for _, e := range entries {
			if e.LastOffset >= fetch && e.FirstOffset < upper {
				want = append(want, e)
			}
			if e.LastStableOffset >= upper {
				wantComplete = true
				break
			}
		}
		if !sameTxns(got, want) || complete != wantComplete {
			t.Fatalf("collect [%d, %d): %+v %v, want %+v %v", fetch, upper, got, complete, want, wantComplete)
		}
		for i, e := range entries {
			if e.LastOffset >= fetch {
				if n != i*producerstate.TxnIndexEntrySize {
					t.Fatalf("truncate to %d keeps %d bytes, want %d", fetch, n, i*producerstate.TxnIndexEntrySize)
				}
				break
			}
		}
	})
}

// FuzzReadMarker: no panic on any bytes; a marker built from fields reads
// back as those fields.
func FuzzReadMarker(f *testing.F) {
	var b record.Builder
	f.Add(buildMarker(f, &b, 10, mspec{pid: 1000, coord: 5, commit: true, ts: 1700000000000}), int32(5), true, int64(7))
	f.Add(buildMarker(f, &b, 0, mspec{pid: 1, coord: -1, ts: -1}), int32(-1), false, int64(0))
	f.Add(buildBatch(f, &b, 0, spec{pid: 1}), int32(0), false, int64(0))
	f.Fuzz(func(t *testing.T, data []byte, coord int32, commit bool, ts int64) {
		if bt, err := record.Parse(exact(data)); err == nil && len(bt) >= record.BatchHeaderSize {
			_, _, _ = producerstate.ReadMarker(bt)
		}
		var b record.Builder
		m := buildMarker(t, &b, 3, mspec{pid: 9, epoch: 2, coord: coord, commit: commit, ts: ts})
		got, ok, err := producerstate.ReadMarker(exact(m))
		want := producerstate.Marker{Type: record.ControlAbort, CoordinatorEpoch: coord, Timestamp: ts}
		if commit {
			want.Type = record.ControlCommit
		}
		if err != nil || !ok || got != want {
			t.Fatalf("%+v %v %v, want %+v", got, ok, err, want)
		}
	})
}

// FuzzPrepare: Prepare and Replay never panic on any bytes, from any
// origin, and a failed Prepare changes nothing.
func FuzzPrepare(f *testing.F) {
	var b record.Builder
	f.Add(buildBatch(f, &b, 0, spec{pid: 1, n: 3}), uint8(0))
	f.Add(append(buildBatch(f, &b, 0, spec{pid: 1, txn: true}), buildMarker(f, &b, 1, mspec{pid: 1})...), uint8(2))
	f.Add(buildMarker(f, &b, 0, mspec{pid: 1}), uint8(1))
	f.Add(make([]byte, 61), uint8(0))
	f.Fuzz(func(t *testing.T, data []byte, origin uint8) {
		s := newState(t, noVerify())
		l := &tlog{t: t, s: s}
		l.produce(client(), spec{pid: 1, txn: true})
		before, _ := s.Snapshot(nil)
		var p producerstate.Plan
		opts := producerstate.Options{Origin: producerstate.Origin(origin % 3)}
		if err := s.Prepare(&p, exact(data), opts); err != nil {
			if after, _ := s.Snapshot(nil); !bytes.Equal(before, after) {
				t.Fatal("a failed Prepare changed the state")
			}
		} else if !p.Duplicate {
			if err := s.Apply(&p); err != nil {
				t.Fatal(err)
			}
		}
		_, _, _ = s.Replay(exact(data))
	})
}

// FuzzSnapshotFileName: a name that parses is the name of its offset, up
// to leading zeros.
func FuzzSnapshotFileName(f *testing.F) {
	f.Add("00000000000000000013.snapshot")
	f.Add("13.snapshot")
	f.Add("x.snapshot")
	f.Fuzz(func(t *testing.T, name string) {
		off, ok := producerstate.ParseSnapshotFileName(name)
		if !ok {
			return
		}
		if off < 0 {
			t.Fatalf("%q: negative offset %d", name, off)
		}
		if back, ok := producerstate.ParseSnapshotFileName(producerstate.SnapshotFileName(off)); !ok || back != off {
			t.Fatalf("%q: %d does not round-trip", name, off)
		}
	})
}
