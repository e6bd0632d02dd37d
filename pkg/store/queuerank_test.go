package store

import (
	"fmt"
	"testing"
)

// assignRanks keeps a queue's order in its ranks, changing as few as it
// can.
func TestAssignRanks(t *testing.T) {
	const s = rankStep
	seq := func(n, step int) []int { // step, 2·step, …, n·step
		out := make([]int, n)
		for i := range out {
			out[i] = (i + 1) * step
		}
		return out
	}
	tests := []struct {
		name   string
		cur    []int
		writes int
		want   []int // nil: any increasing ranks
	}{
		{name: "empty", cur: nil, writes: 0, want: []int{}},
		{name: "first ranking", cur: []int{0, 0, 0}, writes: 3, want: []int{s, 2 * s, 3 * s}},
		{name: "the dense positions of before are kept", cur: []int{1, 2, 3, 4}, writes: 0, want: []int{1, 2, 3, 4}},
		{name: "head leaves", cur: []int{2 * s, 3 * s, 4 * s}, writes: 0, want: []int{2 * s, 3 * s, 4 * s}},
		{name: "appended", cur: []int{2 * s, 3 * s, 0}, writes: 1, want: []int{2 * s, 3 * s, 4 * s}},
		{name: "moved to the front", cur: []int{4 * s, s, 2 * s, 3 * s}, writes: 1, want: []int{s / 2, s, 2 * s, 3 * s}},
		{name: "moved to the back", cur: []int{s, 2 * s, 3 * s, 4 * s, 1}, writes: 1, want: []int{s, 2 * s, 3 * s, 4 * s, 5 * s}},
		{name: "new in the middle", cur: []int{s, 0, 0, 2 * s}, writes: 2, want: []int{s, s + s/3, s + 2*s/3, 2 * s}},
		{name: "reversed", cur: []int{5 * s, 4 * s, 3 * s, 2 * s, s}, writes: 4},
		{name: "gap exhausted: all numbered again", cur: []int{1, 0, 2}, writes: 3, want: []int{s, 2 * s, 3 * s}},
		{name: "out of range ranks are not kept", cur: []int{-3, maxRank + 1, s}, writes: 2, want: []int{s / 3, 2 * s / 3, s}},
		{name: "the tail near the largest rank is spread", cur: []int{maxRank - 10, 0, 0}, writes: 2, want: []int{maxRank - 10, maxRank - 7, maxRank - 3}},
		{name: "no room after the largest rank", cur: []int{maxRank, 0}, writes: 2, want: []int{s, 2 * s}},
		{name: "long queue with a new head", cur: append([]int{0}, seq(1000, s)...), writes: 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := assignRanks(tc.cur)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tc.cur) {
				t.Fatalf("%d ranks for %d", len(got), len(tc.cur))
			}
			writes := 0
			for i, r := range got {
				if r < 1 || r > maxRank || (i > 0 && r <= got[i-1]) {
					t.Fatalf("rank %d at %d: not increasing in 1..maxRank: %v", r, i, got)
				}
				if r != tc.cur[i] {
					writes++
				}
			}
			if writes != tc.writes {
				t.Errorf("%d writes, want %d: %v → %v", writes, tc.writes, tc.cur, got)
			}
			if tc.want != nil && fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("ranks %v, want %v", got, tc.want)
			}
		})
	}
}

// A queue too long for rankStep between ranks is numbered as tightly as
// it needs. The head leaving over and over, and a VM joining at the end
// each time, writes one rank each time until the ranks run out.
func TestAssignRanksLongRun(t *testing.T) {
	cur := make([]int, 40000)
	got, err := assignRanks(cur)
	if err != nil {
		t.Fatal(err)
	}
	if step := got[1] - got[0]; step >= rankStep || got[len(got)-1] > maxRank {
		t.Fatalf("step %d, last %d", step, got[len(got)-1])
	}
	q := make([]int, 200)
	renumbered := 0
	for round := range 70000 {
		q = append(q[1:], 0)
		next, err := assignRanks(q)
		if err != nil {
			t.Fatal(err)
		}
		writes := 0
		for i := range q {
			if next[i] != q[i] {
				writes++
			}
		}
		switch {
		case writes == len(q):
			renumbered++
		case writes != 1 && round > 0:
			t.Fatalf("round %d: %d writes", round, writes)
		}
		q = next
	}
	// About 1<<31 / 1<<16 appends fit between two renumberings.
	if renumbered < 2 || renumbered > 3 {
		t.Errorf("renumbered %d times in 70,000 rounds", renumbered)
	}
}
