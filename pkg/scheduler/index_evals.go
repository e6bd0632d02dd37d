package scheduler

import (
	"sync"
	"sync/atomic"
)

// What a bucket's GPUs give a concrete need, kept between placements
// (issue #26).
//
// A placement through the index evaluates one GPU of every bucket of the
// need's boards (fitting, sharedChains, bestOnHosts): on 10,000 hosts, a
// few thousand buckets, most of a placement's time. What a plain GPU with
// no hold on it gives a concrete need depends on its signature and the
// strategy, but for its own part (Inventory.own: its host's hostKey, its
// index, the lease's extension of its busy horizon), and a bucket's
// signature never changes (sigTable only grows). So each concrete need
// keeps, per strategy, what each bucket's GPUs give it with their own part
// taken off, made the first time a placement meets the bucket; the GPUs of
// a bucket are then scored by adding their own part, without evaluating
// them. An inventory's clones share their sigTable and their resolved
// needs, so a scheduling cycle's trials and an estimate's replay share the
// entries too. TestPlaceMatchesReference and
// TestPlaceSeveralMatchesReference compare the outcome with a look at
// every GPU.

// bucketEval is what a plain GPU of one bucket, with no hold on it, gives
// a concrete need under one strategy.
type bucketEval struct {
	st   status
	code Code
	// first is its candidate for one device (start, next: its MIG state
	// after) with the GPU's own part taken off its score; gi is the GPU
	// that was evaluated.
	first cand
	// chain is the score of each of up to c.count devices taken one
	// after the other (chainOf), own part off; chain[0] is first's.
	chain []score
	floor score // chainFloor(chain)
}

// evalCache is a concrete need's bucketEvals by strategy, then by bucket
// (nil: not made yet). A published slice never changes: a placement that
// makes entries copies it and publishes the copy when it ends.
type evalCache struct {
	mu sync.Mutex
	by [3]atomic.Pointer[[]*bucketEval]
}

// strategyIndex numbers the strategies eval tells apart ("" is Pack).
func strategyIndex(s Strategy) int {
	switch s {
	case FirstFit:
		return 0
	case Spread:
		return 1
	}
	return 2
}

// evalView is one placement's view of a concrete need's evalCache.
type evalView struct {
	cache *evalCache
	si    int
	evs   []*bucketEval
	mine  bool // evs is this view's copy, not published
	added bool
}

// evalsOf is c's cached bucketEvals under strategy s.
func evalsOf(c *concrete, s Strategy) evalView {
	v := evalView{cache: c.evals, si: strategyIndex(s)}
	if p := c.evals.by[v.si].Load(); p != nil {
		v.evs = *p
	}
	return v
}

// get is what bucket b's GPUs give c; rep is one of them, evaluated with
// free (a context without holds) when the cache has no entry yet.
func (v *evalView) get(inv *Inventory, b int32, rep int, c *concrete, op *ownParts, free *placeCtx) *bucketEval {
	if int(b) < len(v.evs) {
		if e := v.evs[b]; e != nil {
			return e
		}
	}
	e := inv.evalBucket(rep, c, op, free)
	if !v.mine {
		v.evs = append(make([]*bucketEval, 0, max(len(v.evs), int(b)+1)), v.evs...)
		v.mine = true
	}
	for len(v.evs) <= int(b) {
		v.evs = append(v.evs, nil)
	}
	v.evs[b] = e
	v.added = true
	return e
}

// publish gives the entries this view made to the cache, keeping those
// another placement published meanwhile.
func (v *evalView) publish() {
	if !v.added {
		return
	}
	v.cache.mu.Lock()
	defer v.cache.mu.Unlock()
	merged := v.evs
	if p := v.cache.by[v.si].Load(); p != nil {
		for i, e := range *p {
			switch {
			case i >= len(merged):
				merged = append(merged, e)
			case merged[i] == nil:
				merged[i] = e
			}
		}
	}
	v.cache.by[v.si].Store(&merged)
	v.mine, v.added = false, false
}

// evalBucket evaluates rep, a plain GPU, with free for c: what every GPU
// of its bucket gives c, own part taken off.
func (inv *Inventory) evalBucket(rep int, c *concrete, op *ownParts, free *placeCtx) *bucketEval {
	e := &bucketEval{}
	e.st, e.code = inv.evalGPU(rep, &inv.gpus[rep], c, free, &free.cd)
	if e.st != stOK {
		return e
	}
	e.first = free.cd
	e.chain = inv.chainOf(rep, free.cd, c, op, free, nil)
	e.first.score = e.chain[0]
	e.floor = chainFloor(e.chain)
	return e
}

// ownCand is e's candidate on GPU gi of its bucket: its own part added.
func (inv *Inventory) ownCand(e *bucketEval, op *ownParts, pc *placeCtx, gi int) cand {
	cd := e.first
	cd.gi = gi
	cd.score = cd.score.add(inv.own(op, pc, gi))
	return cd
}
