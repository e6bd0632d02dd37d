package scheduler

import (
	"sync"

	"github.com/gpuvm/gpuvm/pkg/gpu"
)

// The GPU index lets a placement look at a few GPUs of 80,000 instead of
// every one (issue #26).
//
// Most GPUs are plain: not draining (nor their host), usable, with no MIG
// layout and no IOMMU-group companion. What evalGPU says of a plain GPU with
// no hold on it depends on a small part of its state, its signature (board,
// configured mode, current mode, what it holds: MIG state, vGPU type, count
// and memory, owner), and on three things that vary from GPU to GPU of one
// signature: its busy horizon, its host's load and emptiness, its index.
// Plain GPUs are kept in buckets by signature: a placement evaluates one GPU
// per bucket, which tells whether every GPU of the bucket fits; with the
// varying parts of that score set to zero it bounds the score of every GPU
// of the bucket from below. Buckets are then searched best bound first, and
// the search stops at a bucket whose bound is worse than the best GPU found.
// A placement also evaluates, one by one, the GPUs that are not plain and
// the GPUs a hold of the placement touches: together they give exactly what
// the scan of every GPU gave (ref_place_test.go keeps that scan and
// TestPlaceMatchesReference compares both).

// gpuSig is what a plain GPU's placement depends on, besides its busy
// horizon, its host and its index.
type gpuSig struct {
	model int32
	node  int32 // MIG state
	n     int32
	nv    int32
	vmax  int32
	vmem  uint64
	owned bool
	mixed bool
	allow gpu.Mode
	cur   gpu.Mode
	kind  gpu.Kind
	vtype string
}

func sigOf(g *gpuState) gpuSig {
	return gpuSig{model: int32(g.model), node: g.node, n: int32(g.n), nv: int32(g.nv), vmax: int32(g.vmax), vmem: g.vmem,
		owned: g.owner != "", mixed: g.mixed, allow: g.allow, cur: g.cur, kind: g.kind, vtype: g.vtype}
}

// sigTable numbers the signatures met so far: bucket b holds the plain GPUs
// of signature sigs[b]. An inventory and its clones share it (it only
// grows, and the clones may be used from other goroutines: mu guards it).
type sigTable struct {
	mu      sync.RWMutex
	ids     map[gpuSig]int32
	sigs    []gpuSig
	byModel [][]int32 // per board: its buckets
}

// id is the bucket of signature s, made on first use.
func (t *sigTable) id(s gpuSig) int32 {
	t.mu.RLock()
	b, ok := t.ids[s]
	t.mu.RUnlock()
	if ok {
		return b
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if b, ok := t.ids[s]; ok {
		return b
	}
	b = int32(len(t.sigs))
	t.ids[s] = b
	t.sigs = append(t.sigs, s)
	t.byModel[s.model] = append(t.byModel[s.model], b)
	return b
}

// view is the table as it is now: what is in it never changes.
func (t *sigTable) view() (sigs []gpuSig, byModel [][]int32) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.sigs, append([][]int32(nil), t.byModel...)
}

// gpuIndex is the Inventory's index of its GPUs. A bucket is a list linked
// through next and prev, so that a clone copies four arrays.
type gpuIndex struct {
	// Fixed when the inventory is made, shared by clones.
	hostOf []int32 // GPU → host
	odd    [][]int // per board: the GPUs that are not plain, ascending
	tab    *sigTable
	// Kept up to date by Allocate and Release (through apply, removeFrom).
	of   []int32 // GPU → its bucket; -1 when not plain
	next []int32 // GPU → the next GPU of its bucket; -1 at the end
	prev []int32 // GPU → the one before; -1 at the head
	head []int32 // bucket → its first GPU; -1 (or past the end) when empty
	size []int32 // bucket → how many GPUs it holds
}

// plain reports whether g is a plain GPU: one whose placement the index
// can answer by its signature.
func (inv *Inventory) plain(g *gpuState) bool {
	return !g.draining && !inv.hosts[g.host].draining && g.unavail == "" && g.layout == nil && len(g.group) == 0
}

// indexFrom is the number of GPUs from which an inventory keeps an index;
// below it, looking at every GPU is quicker.
var indexFrom = 128

// buildIndex indexes every GPU, if there are enough of them; NewInventory
// calls it before recording any allocation.
func (inv *Inventory) buildIndex() {
	n := len(inv.gpus)
	if n < indexFrom {
		return
	}
	x := &gpuIndex{
		hostOf: make([]int32, n),
		odd:    make([][]int, len(inv.models)),
		tab:    &sigTable{ids: map[gpuSig]int32{}, byModel: make([][]int32, len(inv.models))},
		of:     make([]int32, n),
		next:   make([]int32, n),
		prev:   make([]int32, n),
	}
	inv.idx = x
	for gi := range inv.gpus {
		g := &inv.gpus[gi]
		x.hostOf[gi] = int32(g.host)
		x.of[gi] = -1
		if !inv.plain(g) {
			x.odd[g.model] = append(x.odd[g.model], gi)
			continue
		}
		x.add(int32(gi), x.tab.id(sigOf(g)))
	}
}

// first is the first GPU of bucket b (-1: none).
func (x *gpuIndex) first(b int32) int32 {
	if int(b) >= len(x.head) {
		return -1
	}
	return x.head[b]
}

func (x *gpuIndex) add(gi, b int32) {
	for int(b) >= len(x.head) {
		x.head = append(x.head, -1)
		x.size = append(x.size, 0)
	}
	x.size[b]++
	x.of[gi] = b
	x.prev[gi] = -1
	x.next[gi] = x.head[b]
	if h := x.head[b]; h >= 0 {
		x.prev[h] = gi
	}
	x.head[b] = gi
}

func (x *gpuIndex) remove(gi int32) {
	p, n := x.prev[gi], x.next[gi]
	x.size[x.of[gi]]--
	if p >= 0 {
		x.next[p] = n
	} else {
		x.head[x.of[gi]] = n
	}
	if n >= 0 {
		x.prev[n] = p
	}
}

// reindex moves GPU gi to the bucket of its signature after a change.
func (inv *Inventory) reindex(gi int) {
	x := inv.idx
	if x == nil || x.of[gi] < 0 {
		return
	}
	b := x.tab.id(sigOf(&inv.gpus[gi]))
	if b == x.of[gi] {
		return
	}
	x.remove(int32(gi))
	x.add(int32(gi), b)
}

// cloneInto copies what Allocate and Release change into c, reusing its
// memory (nil: a new index).
func (x *gpuIndex) cloneInto(c *gpuIndex) *gpuIndex {
	if x == nil {
		return nil
	}
	if c == nil {
		c = &gpuIndex{}
	}
	of, next, prev, head, size := c.of[:0], c.next[:0], c.prev[:0], c.head[:0], c.size[:0]
	*c = *x
	c.of = append(of, x.of...)
	c.next = append(next, x.next...)
	c.prev = append(prev, x.prev...)
	c.head = append(head, x.head...)
	c.size = append(size, x.size...)
	return c
}

// scoreMask marks places of a score.
type scoreMask [6]bool

// floor is a with the places of m set to zero.
func (a score) floor(m scoreMask) score {
	for i, v := range m {
		if v {
			a[i] = 0
		}
	}
	return a
}

// bound is a bucket whose GPUs fit, and the least score they can have.
type bound struct {
	b  int32
	lb score
}

// free is pc without its holds: how a GPU no hold touches is evaluated.
func (pc *placeCtx) free() *placeCtx {
	return &placeCtx{o: pc.o, end: pc.end, only: pc.only}
}

// isHeld reports whether a hold of pc is on GPU gi.
func (pc *placeCtx) isHeld(gi int) bool {
	if pc.holds == nil {
		return false
	}
	_, ok := pc.holds[gi]
	return ok
}

// eachSingle evaluates, with pc, every GPU of a board of c that is not
// plain or that a hold of pc touches: the GPUs the buckets do not answer
// for. (A plain GPU has no IOMMU-group companion: only its own holds count.)
func (inv *Inventory) eachSingle(c *concrete, pc *placeCtx, n *notes, f func(gi int)) {
	x := inv.idx
	for mi, odd := range x.odd {
		if c.match[mi] {
			for _, gi := range odd {
				st, code := inv.evalGPU(gi, &inv.gpus[gi], c, pc, &pc.cd)
				n.add(st, code)
				if st == stOK {
					f(gi)
				}
			}
		}
	}
	for gi := range pc.holds {
		if x.of[gi] >= 0 && c.match[inv.gpus[gi].model] {
			st, code := inv.evalGPU(gi, &inv.gpus[gi], c, pc, &pc.cd)
			n.add(st, code)
			if st == stOK {
				f(gi)
			}
		}
	}
}

// hostKey is what of host h a score holds under strategy s (at the
// placer's varies host place): Pack its empty GPUs, Spread its devices.
func (inv *Inventory) hostKey(s Strategy, hi int32) int64 {
	switch s {
	case Pack:
		return int64(inv.hosts[hi].empty)
	case Spread:
		return int64(inv.hosts[hi].load)
	}
	return 0
}

// fitting looks at what one GPU of each bucket of c's boards gives c with
// free (pc without holds; ev: kept between placements) and returns the
// buckets whose GPUs fit, to be taken least bound first.
func (inv *Inventory) fitting(c *concrete, free *placeCtx, op *ownParts, ev *evalView, n *notes, byModel [][]int32) *minHeap[bound] {
	x := inv.idx
	out := (*boundPool.Get().(*[]bound))[:0]
	for mi, bs := range byModel {
		if !c.match[mi] {
			continue
		}
		for _, b := range bs {
			gi := int(x.first(b))
			if gi < 0 {
				continue
			}
			e := ev.get(inv, b, gi, c, op, free)
			n.add(e.st, e.code)
			if e.st == stOK {
				out = append(out, bound{b, e.first.score.floor(op.mask)})
			}
		}
	}
	h := &minHeap[bound]{xs: out, less: func(a, b bound) bool {
		return a.lb.less(b.lb) || (a.lb == b.lb && a.b < b.b)
	}}
	h.init()
	return h
}

// bestOne is the best GPU for one device of c (gi < 0 when none fits): the
// GPUs evalGPU must see one by one, then the buckets, least bound first,
// until a bucket's bound is worse than the best GPU found; a bucket's GPUs
// are scored from what the bucket gives c and their own part. n gets what
// a look at every GPU would have noted.
func (inv *Inventory) bestOne(c *concrete, pc *placeCtx, n *notes) cand {
	best := cand{gi: -1}
	keep := func(cd *cand) {
		if best.gi < 0 || cd.score.less(best.score) {
			best = *cd
		}
	}
	inv.eachSingle(c, pc, n, func(int) { keep(&pc.cd) })
	free := pc.free()
	op := ownPartsOf(c, pc)
	ev := evalsOf(c, pc.o.Strategy)
	defer ev.publish()
	x := inv.idx
	sigs, byModel := x.tab.view()
	h := inv.fitting(c, free, &op, &ev, n, byModel)
	defer func() { xs := h.xs[:0]; boundPool.Put(&xs) }()
	for len(h.xs) > 0 {
		b := h.pop()
		if best.gi >= 0 && best.score.less(b.lb) {
			break
		}
		e := ev.evs[b.b] // fitting made it
		if sig := &sigs[b.b]; sig.n == 0 && !sig.owned {
			// Empty GPUs: their scores differ only by hostKey and index.
			if gi := inv.firstEmpty(b.b, pc); gi >= 0 {
				cd := inv.ownCand(e, &op, free, gi)
				keep(&cd)
			}
			continue
		}
		for gi := x.first(b.b); gi >= 0; gi = x.next[gi] {
			if pc.isHeld(int(gi)) {
				continue // seen by eachSingle
			}
			cd := inv.ownCand(e, &op, free, int(gi))
			keep(&cd)
		}
	}
	return best
}

// firstEmpty is the GPU of bucket b (of empty GPUs) no hold of pc touches
// with the least hostKey, then index; -1 if none.
func (inv *Inventory) firstEmpty(b int32, pc *placeCtx) int {
	x := inv.idx
	best, bestKey := int32(-1), int64(0)
	for gi := x.first(b); gi >= 0; gi = x.next[gi] {
		if pc.isHeld(int(gi)) {
			continue
		}
		k := inv.hostKey(pc.o.Strategy, x.hostOf[gi])
		if best < 0 || k < bestKey || (k == bestKey && gi < best) {
			best, bestKey = gi, k
		}
	}
	return int(best)
}

// bestOnHosts is the best host for c.count devices, as placeOnHost on
// every host would find it. Several MIG instances or vGPUs: sharedOnHosts
// (index_hosts.go). Whole GPUs: placeOnHost on each host with c.count GPUs
// that could take one now. Whole GPUs score alone: a host's total is at
// least c.count times the least score of any GPU that fits, place by
// place, with its own hostKey and first GPU at their places, so hosts are
// tried by that bound and the search stops at one whose bound is worse
// than the best host found.
func (inv *Inventory) bestOnHosts(c *concrete, pc *placeCtx, n *notes) (Placement, bool) {
	if !c.pl.whole() {
		return inv.sharedOnHosts(c, pc, n)
	}
	x := inv.idx
	ok := make([]int32, len(inv.hosts))
	op := ownPartsOf(c, pc)
	var low score
	seen := false
	lower := func(s score) {
		if !seen {
			low, seen = s, true
		}
		for i := range low {
			low[i] = min(low[i], s[i])
		}
	}
	inv.eachSingle(c, pc, n, func(gi int) {
		ok[x.hostOf[gi]]++
		lower(pc.cd.score)
	})
	free := pc.free()
	ev := evalsOf(c, pc.o.Strategy)
	defer ev.publish()
	_, byModel := x.tab.view()
	for mi, bs := range byModel {
		if !c.match[mi] {
			continue
		}
		for _, b := range bs {
			rep := x.first(b)
			if rep < 0 {
				continue
			}
			e := ev.get(inv, b, int(rep), c, &op, free)
			n.add(e.st, e.code)
			if e.st != stOK {
				continue
			}
			lower(e.first.score.floor(op.mask))
			for gi := rep; gi >= 0; gi = x.next[gi] {
				if !pc.isHeld(int(gi)) {
					ok[x.hostOf[gi]]++
				}
			}
		}
	}
	// A host's bound: c.count times the least score place by place, its
	// hostKey and its first GPU's index at their places.
	bound := func(hi int32) score {
		var lb score
		for i := range lb {
			lb[i] = low[i] * int64(c.count)
		}
		if op.host >= 0 {
			lb[op.host] = inv.hostKey(pc.o.Strategy, hi) * int64(c.count)
		}
		lb[op.gpu] = max(lb[op.gpu], int64(inv.hosts[hi].first)*op.unit*int64(c.count))
		return lb
	}
	cands := &minHeap[hostBound]{less: func(a, b hostBound) bool {
		return a.lb.less(b.lb) || (a.lb == b.lb && a.hi < b.hi)
	}}
	for hi, k := range ok {
		if k >= int32(c.count) {
			cands.xs = append(cands.xs, hostBound{hi: int32(hi), lb: bound(int32(hi))})
		}
	}
	cands.init()
	var bestP Placement
	var bestS score
	bestH := int32(-1)
	for len(cands.xs) > 0 {
		hb := cands.pop()
		hi := hb.hi
		if bestH >= 0 && bestS.less(hb.lb) {
			break
		}
		p, s, fits := inv.placeOnHost(int(hi), c, pc, func(status, Code) {})
		if fits && (bestH < 0 || s.less(bestS) || (s == bestS && hi < bestH)) {
			bestP, bestS, bestH = p, s, hi
		}
	}
	return bestP, bestH >= 0
}

// boundPool keeps fitting's slices between placements (a cycle makes many).
var boundPool = sync.Pool{New: func() any { return new([]bound) }}

// hostBound is a host and a bound of its total; sharp when
// sharedOnHosts has sharpened it.
type hostBound struct {
	lb    score
	hi    int32
	sharp bool
}

// minHeap is a binary heap of xs, least (by less) on top.
type minHeap[T any] struct {
	xs   []T
	less func(a, b T) bool
}

func (h *minHeap[T]) init() {
	for i := len(h.xs)/2 - 1; i >= 0; i-- {
		h.down(i)
	}
}

// pop takes the least element off; the heap must not be empty.
func (h *minHeap[T]) pop() T {
	n := len(h.xs) - 1
	h.xs[0], h.xs[n] = h.xs[n], h.xs[0]
	x := h.xs[n]
	h.xs = h.xs[:n]
	h.down(0)
	return x
}

// push adds x.
func (h *minHeap[T]) push(x T) {
	h.xs = append(h.xs, x)
	h.up(len(h.xs) - 1)
}

// up restores the heap after xs[i] was added at the end.
func (h *minHeap[T]) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !h.less(h.xs[i], h.xs[p]) {
			return
		}
		h.xs[i], h.xs[p] = h.xs[p], h.xs[i]
		i = p
	}
}

func (h *minHeap[T]) down(i int) {
	for {
		m := 2*i + 1
		if m >= len(h.xs) {
			return
		}
		if r := m + 1; r < len(h.xs) && h.less(h.xs[r], h.xs[m]) {
			m = r
		}
		if !h.less(h.xs[m], h.xs[i]) {
			return
		}
		h.xs[i], h.xs[m] = h.xs[m], h.xs[i]
		i = m
	}
}
