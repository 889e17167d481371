package wal

import (
	"slices"
	"testing"
)

// TestChain: a later extent wins over the earlier ones it overlaps, one
// past the log's end is left out, one below is left out, one straddling
// the start is taken from it.
func TestChain(t *testing.T) {
	loc := func(seq uint64, first, last int64) Located {
		return Located{Sequence: seq, Extent: Extent{FirstOffset: first, LastOffset: last}}
	}
	type span struct {
		seq      uint64
		from, to int64
	}
	for _, c := range []struct {
		name string
		next int64
		in   []Located
		want []span
	}{
		{"contiguous", 10, []Located{loc(1, 10, 14), loc(2, 15, 19)}, []span{{1, 10, 14}, {2, 15, 19}}},
		{"below and straddling", 10, []Located{loc(1, 0, 9), loc(2, 5, 14)}, []span{{2, 10, 14}}},
		{"past the end: a voided number before it", 10, []Located{loc(1, 10, 14), loc(3, 20, 24), loc(4, 15, 19)}, []span{{1, 10, 14}, {4, 15, 19}}},
		{"appended again: the later wins", 10, []Located{loc(1, 10, 14), loc(2, 15, 19), loc(5, 15, 17), loc(6, 18, 30)}, []span{{1, 10, 14}, {5, 15, 17}, {6, 18, 30}}},
		{"cut inside an earlier one", 10, []Located{loc(1, 10, 19), loc(2, 15, 22)}, []span{{1, 10, 14}, {2, 15, 22}}},
		{"over everything", 10, []Located{loc(1, 10, 14), loc(2, 15, 19), loc(3, 10, 11)}, []span{{3, 10, 11}}},
	} {
		var got []span
		for _, s := range Chain(c.next, c.in) {
			got = append(got, span{s.Sequence, s.From, s.To})
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}
