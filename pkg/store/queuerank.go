package store

import (
	"context"
	"fmt"
	"sort"
	"strings"
)

// The queue is stored as ranks, not positions: vms.queue_position of a
// queued VM is a sparse number that only orders the queue (0 = not
// ranked). A round's order is written by changing as few ranks as keep it
// (assignRanks), so when the head of a long queue starts no other row is
// written, and a VM put at the end writes one. The position people see, 1
// for the next VM, is counted on read (fillQueuePositions).

const (
	// rankStep is the gap left between ranks given afresh: after the
	// last of the queue, or when all are numbered again.
	rankStep = 1 << 16
	// maxRank is the largest rank: queue_position is an INTEGER, 32 bits
	// on PostgreSQL.
	maxRank = 1<<31 - 1
)

// assignRanks returns the ranks of a queue in its new order, given the
// ranks its VMs have now (cur, in the new order; 0 for a VM without one).
// It keeps the longest increasing run of the current ranks (found in
// O(n log n)) and gives each other VM a rank in the gap between its kept
// neighbours: spread evenly inside the queue, rankStep apart after its
// last kept VM. Only when a gap is too narrow are all numbered again,
// rankStep apart (less if the queue is too long for that).
func assignRanks(cur []int) ([]int, error) {
	n := len(cur)
	out := make([]int, n)
	keep := longestIncreasing(cur)
	ok := true
	for i := 0; i < n && ok; {
		if keep[i] {
			out[i] = cur[i]
			i++
			continue
		}
		j := i
		for j < n && !keep[j] {
			j++
		}
		lo := int64(0)
		if i > 0 {
			lo = int64(out[i-1])
		}
		ok = fillGap(out[i:j], lo, j == n, func() int64 {
			if j < n {
				return int64(cur[j])
			}
			return maxRank + 1
		}())
		i = j
	}
	if ok {
		return out, nil
	}
	step := int64(maxRank) / int64(n+1)
	if step < 1 {
		return nil, fmt.Errorf("%w: a queue of %d vms is longer than ranks go", ErrInvalid, n)
	}
	step = min(step, rankStep)
	for i := range out {
		out[i] = int(step * int64(i+1))
	}
	return out, nil
}

// fillGap gives the ranks in dst, in order, strictly between lo and hi:
// rankStep apart after lo when tail (the end of the queue) and there is
// room, else spread evenly. It reports false when the gap is too narrow.
func fillGap(dst []int, lo int64, tail bool, hi int64) bool {
	k := int64(len(dst))
	if tail && lo+rankStep*k < hi {
		for j := range dst {
			dst[j] = int(lo + rankStep*int64(j+1))
		}
		return true
	}
	d := hi - lo
	if d < k+1 {
		return false
	}
	for j := range dst {
		dst[j] = int(lo + d*int64(j+1)/(k+1))
	}
	return true
}

// longestIncreasing marks a longest strictly increasing subsequence of
// the valid ranks in r (1..maxRank; the others are never kept).
func longestIncreasing(r []int) []bool {
	keep := make([]bool, len(r))
	var tails []int // tails[l]: index of the smallest last rank of a run of l+1
	prev := make([]int, len(r))
	for i, v := range r {
		if v <= 0 || v > maxRank {
			continue
		}
		l := sort.Search(len(tails), func(k int) bool { return r[tails[k]] >= v })
		prev[i] = -1
		if l > 0 {
			prev[i] = tails[l-1]
		}
		if l == len(tails) {
			tails = append(tails, i)
		} else {
			tails[l] = i
		}
	}
	if len(tails) > 0 {
		for i := tails[len(tails)-1]; i >= 0; i = prev[i] {
			keep[i] = true
		}
	}
	return keep
}

// fillQueuePositions sets the QueuePosition of the queued, ranked VMs of
// vms: 1 + how many queued VMs have a smaller rank. One statement, one
// snapshot: the count below the smallest rank of the page, plus each rank's
// place among the ranks from the smallest to the largest of the page
// (vms_queue_rank), counted in the database, which returns the page's ranks
// alone — a user's page of 1,000 VMs spread over a queue of 10,000 read
// every rank between them, a value each, which on SQLite costs a cgo call
// each (issue #26). A VM whose rank is not found (ranked again meanwhile)
// gets no position until it is read again.
func (s *Store) fillQueuePositions(ctx context.Context, vms ...*VM) error {
	var ranks []any
	seen := map[int]bool{}
	lo, hi := 0, 0
	for i := range vms {
		vms[i].QueuePosition = 0
		r := vms[i].QueueRank
		if vms[i].State != VMQueued || r <= 0 || seen[r] {
			continue
		}
		seen[r] = true
		ranks = append(ranks, r)
		if lo == 0 || r < lo {
			lo = r
		}
		hi = max(hi, r)
	}
	if len(ranks) == 0 {
		return nil
	}
	var rows []struct {
		Rank     int   `gorm:"column:queue_position"`
		Position int64 `gorm:"column:position"`
	}
	in := strings.Repeat("?,", len(ranks))
	args := append([]any{lo, lo, hi}, ranks...)
	err := s.db.WithContext(ctx).Raw("SELECT queue_position, position FROM ("+
		"SELECT queue_position, (SELECT COUNT(*) FROM vms WHERE "+queuedVM+" AND queue_position > 0 AND queue_position < ?)"+
		" + RANK() OVER (ORDER BY queue_position) AS position"+
		" FROM vms WHERE "+queuedVM+" AND queue_position >= ? AND queue_position <= ?) ranked"+
		" WHERE queue_position IN ("+in[:len(in)-1]+")", args...).Scan(&rows).Error
	if err != nil {
		return wrap(err, nil, "count the queue ahead of %d vms", len(ranks))
	}
	pos := make(map[int]int, len(rows))
	for _, r := range rows {
		pos[r.Rank] = int(r.Position)
	}
	for i := range vms {
		if vms[i].State == VMQueued && vms[i].QueueRank > 0 {
			vms[i].QueuePosition = pos[vms[i].QueueRank]
		}
	}
	return nil
}
