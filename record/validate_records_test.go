package record

import (
	"encoding/binary"
	"math/rand/v2"
	"testing"
)

// cleanRecord is what recordProblem says of a record it finds nothing
// wrong with.
const cleanRecord = "0 bytes left in the record after its last header"

// checkRecordWalks holds the three walks of one record to each other:
// nextRecord (the validator's), recordProblem (its explanation of a
// refusal) and Iterator.decode (the reader's, which reads the wider
// varints binary.Varint reads). recordProblem finds a problem exactly
// when nextRecord refuses the record, and a record nextRecord accepts
// the Iterator decodes to the same fields and length.
func checkRecordWalks(t *testing.T, p []byte) {
	t.Helper()
	checkSkipFast(t, p)
	tsDelta, offDelta, hasKey, next := nextRecord(p, 0)
	problem := recordProblem(p)
	if (next >= 0) != (problem == cleanRecord) {
		t.Fatalf("nextRecord(% x) = %d, recordProblem says %q", p, next, problem)
	}
	it := Iterator{data: p, left: 1, appendTime: -1, baseSeq: NoSequence}
	err := it.decode()
	if next < 0 {
		return
	}
	if next > len(p) {
		t.Fatalf("nextRecord(% x) ends at %d, past %d", p, next, len(p))
	}
	if err != nil {
		t.Fatalf("nextRecord accepts % x, the Iterator refuses it: %v", p, err)
	}
	r := &it.rec
	if r.Timestamp != tsDelta || r.Offset != int64(offDelta) || (r.Key != nil) != hasKey || len(p)-len(it.data) != next {
		t.Fatalf("% x: nextRecord ts %d offset %d key %v end %d; Iterator ts %d offset %d key %v end %d",
			p, tsDelta, offDelta, hasKey, next, r.Timestamp, r.Offset, r.Key != nil, len(p)-len(it.data))
	}
}

// checkSkipFast: a record SkipTo's fast path accepts, head accepts too,
// with the same end and offset delta (any other record goes to head).
func checkSkipFast(t *testing.T, p []byte) {
	t.Helper()
	end, delta, ok := skipFast(p)
	if !ok {
		return
	}
	var it Iterator
	_, _, hd, _, rest, err := it.head(p)
	if err != nil || hd != delta || len(p)-len(rest) != end {
		t.Fatalf("skipFast(% x) = end %d, offset delta %d; head: end %d, offset delta %d, %v", p, end, delta, len(p)-len(rest), hd, err)
	}
}

// walkSeeds are records the walks must agree on: well-formed ones of
// each shape and the malformed ones validate_test.go refuses.
func walkSeeds() [][]byte {
	var b Builder
	b.Reset(NewBatchHeader())
	b.Append(0, nil, nil, nil)
	b.Append(1<<40, []byte("key"), []byte("value"), []Header{{Key: []byte("h"), Value: nil}, {Key: []byte("h2"), Value: []byte("v")}})
	b.Append(-5, []byte{}, make([]byte, 300), nil)
	batch, _ := b.Build()
	var out [][]byte
	for p := []byte(batch[BatchHeaderSize:]); len(p) > 0; {
		l, n := binary.Varint(p)
		out = append(out, p[:n+int(l)])
		p = p[n+int(l):]
	}
	longVarint := []byte{0, 0, 0, 0x82, 0x80, 0x80, 0x80, 0x80, 0x00, 'k', 1, 0}
	fifthByte := []byte{0, 0, 0, 0x82, 0x80, 0x80, 0x80, 0x10, 'k', 1, 0}
	out = append(out,
		append([]byte{byte(len(longVarint) << 1)}, longVarint...),
		append([]byte{byte(len(fifthByte) << 1)}, fifthByte...),
		[]byte{0x80, 0x80, 0x80, 0x80, 0x80, 0x80},
		[]byte{0x0c, 0, 0, 0, 1, 1, 0x02},                   // a header count larger than the record
		[]byte{0x10, 0, 0, 0, 1, 1, 0x02, 1, 1},             // a null header key
		[]byte{0x10, 0, 0, 0, 1, 1, 0, 0, 0},                // bytes after the headers
		[]byte{0x0c, 0, 0, 0, 3, 1, 0},                      // a key length below -1
		[]byte{0x0e, 0, 0, 0, 1, 0x80, 0x80, 0x80, 0x80, 1}, // a value length that does not end
	)
	return out
}

// TestRecordWalksAgree runs the seeds and random damage to them: every
// byte changed to each value where a varint changes meaning, truncations,
// and random bytes.
func TestRecordWalksAgree(t *testing.T) {
	rng := rand.New(rand.NewPCG(51, 52))
	edge := []byte{0x00, 0x01, 0x02, 0x03, 0x0f, 0x10, 0x7e, 0x7f, 0x80, 0x81, 0xff}
	for _, seed := range walkSeeds() {
		checkRecordWalks(t, seed)
		for i := range seed {
			checkRecordWalks(t, seed[:i])
			for _, c := range edge {
				p := append([]byte(nil), seed...)
				p[i] = c
				checkRecordWalks(t, p)
			}
		}
		for range 2000 {
			p := append([]byte(nil), seed...)
			for range 1 + rng.IntN(3) {
				p[rng.IntN(len(p))] = byte(rng.Uint32())
			}
			checkRecordWalks(t, p)
		}
	}
}

// FuzzRecordWalks: the three walks of a record agree on any bytes.
func FuzzRecordWalks(f *testing.F) {
	for _, seed := range walkSeeds() {
		f.Add(seed)
	}
	f.Fuzz(checkRecordWalks)
}
