package scheduler

import "sync"

// Several MIG instances or vGPUs on one host, through the GPU index
// (issue #26).
//
// placeOnHost puts c.count devices on a host one at a time, each on the GPU
// whose next device scores least (a scratch copy of the host's GPUs). Each
// GPU goes through a sequence of states of its own: what it offers its
// j-th device depends on its own state after j-1, never on the other GPUs
// (only a whole GPU looks at others: its IOMMU group). For a plain GPU no
// hold touches, that sequence is the same for every GPU of its bucket up
// to the places of the score that vary (placer.varies): they are the GPU's
// own part (Inventory.own), which devices taken on the GPU leave as it
// was. So one run of a bucket's representative (its chain: the score of
// each of up to c.count devices, own part taken off) tells what every GPU
// of the bucket offers, and a host of plain GPUs is placed by merging its
// GPUs' chains, own parts added back (chainTotal), without copying or
// evaluating a GPU. Hosts with a GPU that is not plain and could take a
// device, or with a hold, still go through placeOnHost.
//
// Nor is every host merged. Lexicographic order is kept by addition and by
// multiplication by a positive number, and no own part is below zero
// (hostKey, an index, a busy horizon's extension). If a GPU's chain averages at least A over any of its
// prefixes (its floor, chainFloor), t devices on it score at least t×A;
// a host's c.count devices score at least c.count times the least floor
// of its GPUs, plus c.count times its least own part (hostFloor). Buckets
// are met least floor first: a host first met in bucket b has b's floor as
// its least, and no host not met yet can be below c.count times the next
// bucket's floor. Hosts met wait in a heap by that bound. The first time
// one comes out on top, its bound is sharpened from which bucket each of
// its GPUs is in (not their state): the least total of c.count devices
// spread over its GPUs, each GPU at its floor and no more than its chain
// allows (sharpen). The second time, it is merged. The search stops when
// neither the heap nor the buckets left can beat the best total found.
// The best host (the least total, then the lowest index, as placeOnHost's
// loop over every host took it) is then placed by placeOnHost itself.
// TestPlaceMatchesReference and TestPlaceSeveralMatchesReference compare
// the outcome with placeOnHost on every host.

// ownParts is what Inventory.own needs of a placement, looked up once.
type ownParts struct {
	strategy Strategy
	mask     scoreMask
	host     int
	gpu      int
	unit     int64
}

func ownPartsOf(c *concrete, pc *placeCtx) ownParts {
	mask, hp, gp := c.pl.varies(pc.o.Strategy)
	return ownParts{strategy: pc.o.Strategy, mask: mask, host: hp, gpu: gp, unit: c.pl.unit()}
}

// own is the part of GPU gi's score for a device that differs between
// plain GPUs of one signature: at the places placer.varies marks, the
// host's hostKey at the host place, the GPU's index times placer.unit at the
// GPU place, and at any other the lease's extension of the GPU's busy
// horizon. The rest of the score depends on the signature alone.
func (inv *Inventory) own(op *ownParts, pc *placeCtx, gi int) score {
	var s score
	for i, m := range op.mask {
		switch {
		case !m:
		case i == op.host:
			s[i] = inv.hostKey(op.strategy, int32(inv.gpus[gi].host))
		case i == op.gpu:
			s[i] = int64(gi) * op.unit
		default:
			s[i] = pc.ext(&inv.gpus[gi])
		}
	}
	return s
}

// hostFloor is the least own part any GPU of host hi can have: its hostKey
// and its first GPU's index at their places.
func (inv *Inventory) hostFloor(op *ownParts, hi int) score {
	var s score
	if op.host >= 0 {
		s[op.host] = inv.hostKey(op.strategy, int32(hi))
	}
	s[op.gpu] = int64(inv.hosts[hi].first) * op.unit
	return s
}

func (a score) sub(b score) score {
	for i := range a {
		a[i] -= b[i]
	}
	return a
}

func (a score) times(k int) score {
	for i := range a {
		a[i] *= int64(k)
	}
	return a
}

// div is a divided by k > 0, place by place, rounded down: never above a/k.
func (a score) div(k int) score {
	for i := range a {
		q := a[i] / int64(k)
		if q*int64(k) > a[i] {
			q--
		}
		a[i] = q
	}
	return a
}

// chainOf appends to out what a plain GPU of bucket b would give c.count
// devices taken one after the other, as placeOnHost takes them: the score
// of each but its own part; shorter when the GPU is full sooner. rep is a
// GPU of b and first what it gives the first device (free: a context
// without holds).
func (inv *Inventory) chainOf(rep int, first cand, c *concrete, op *ownParts, free *placeCtx, out []score) []score {
	g := inv.gpus[rep] // a scratch copy: take changes only its counters
	mine := inv.own(op, free, rep)
	cd := &free.cd
	*cd = first
	for k := 0; k < c.count; k++ {
		if k > 0 {
			if st, _ := inv.evalGPU(rep, &g, c, free, cd); st != stOK {
				break
			}
		}
		out = append(out, cd.score.sub(mine))
		applyScratch(&g, nil, 0, *cd, c)
	}
	return out
}

// chainFloor is the least average of a prefix of chain (never above the
// true average): t devices on a GPU with this chain score at least t times it.
func chainFloor(chain []score) score {
	var sum, least score
	for t, s := range chain {
		sum = sum.add(s)
		if avg := sum.div(t + 1); t == 0 || avg.less(least) {
			least = avg
		}
	}
	return least
}

// chained is a bucket whose GPUs can take c, and the floor of its chain.
type chained struct {
	b     int32
	floor score
}

// sharedSearch is sharedOnHosts' scratch space, kept between placements.
type sharedSearch struct {
	chains [][]score // by bucket: its chain; nil when its GPUs cannot take c
	floors []score   // by bucket: its chain's floor
	order  minHeap[chained]
	met    []bool // by host
	hosts  minHeap[hostBound]
	heads  []chainHead
	spread []chainHead // sharpen's: a chain and its floor (in own)
}

var sharedPool = sync.Pool{New: func() any {
	s := &sharedSearch{}
	s.order.less = func(a, b chained) bool { return a.floor.less(b.floor) || (a.floor == b.floor && a.b < b.b) }
	s.hosts.less = func(a, b hostBound) bool { return a.lb.less(b.lb) || (a.lb == b.lb && a.hi < b.hi) }
	return s
}}

// reset makes ss ready for a placement on inv with buckets buckets.
func (ss *sharedSearch) reset(inv *Inventory, buckets int) {
	ss.chains = grow(ss.chains, buckets)
	ss.floors = grow(ss.floors, buckets)
	ss.met = grow(ss.met, len(inv.hosts))
	ss.order.xs, ss.hosts.xs = ss.order.xs[:0], ss.hosts.xs[:0]
}

// grow is xs with n zero values.
func grow[T any](xs []T, n int) []T {
	if cap(xs) < n {
		return make([]T, n)
	}
	xs = xs[:n]
	clear(xs)
	return xs
}

// sharedChains looks at what one GPU of each bucket of c's boards gives c
// (ev: kept between placements; noting it in n) and makes ss's chains,
// floors and order (the buckets with a chain, least floor first).
func (inv *Inventory) sharedChains(c *concrete, op *ownParts, free *placeCtx, ev *evalView, n *notes, ss *sharedSearch) {
	x := inv.idx
	sigs, byModel := x.tab.view()
	ss.reset(inv, len(sigs))
	for mi, bs := range byModel {
		if !c.match[mi] {
			continue
		}
		for _, b := range bs {
			rep := int(x.first(b))
			if rep < 0 {
				continue
			}
			e := ev.get(inv, b, rep, c, op, free)
			n.add(e.st, e.code)
			if e.st != stOK {
				continue
			}
			ss.chains[b] = e.chain
			ss.floors[b] = e.floor
			ss.order.xs = append(ss.order.xs, chained{b, e.floor})
		}
	}
	ss.order.init()
}

// chainHead is one GPU of a host in chainTotal's merge.
type chainHead struct {
	chain []score
	own   score
	next  int
}

// chainTotal is the total score placeOnHost would give host hi, all of
// whose GPUs that could take c are plain and without holds (ss.chains).
// ok is false when the host cannot take c.count devices.
func (inv *Inventory) chainTotal(hi int, c *concrete, op *ownParts, pc *placeCtx, ss *sharedSearch) (score, bool) {
	x := inv.idx
	h := &inv.hosts[hi]
	heads := ss.heads[:0]
	defer func() { ss.heads = heads[:0] }()
	room := 0
	for gi := h.first; gi < h.first+h.n; gi++ {
		b := x.of[gi]
		if b < 0 || len(ss.chains[b]) == 0 {
			continue
		}
		heads = append(heads, chainHead{chain: ss.chains[b], own: inv.own(op, pc, gi)})
		room += len(ss.chains[b])
	}
	if room < c.count {
		return score{}, false
	}
	var total score
	for k := 0; k < c.count; k++ {
		pick := -1
		var best score
		for j := range heads {
			hd := &heads[j]
			if hd.next == len(hd.chain) {
				continue
			}
			if s := hd.chain[hd.next].add(hd.own); pick < 0 || s.less(best) {
				pick, best = j, s
			}
		}
		heads[pick].next++
		total = total.add(best)
	}
	return total, true
}

// sharpen is a bound of host hi's total no worse than c.count times its
// least floor: c.count devices spread over its GPUs, least floor first,
// each GPU taking no more than its chain allows, at its floor; plus
// c.count times the host's least own part. ok is false when its GPUs have
// no room for c.count devices together.
func (inv *Inventory) sharpen(hi int, c *concrete, op *ownParts, ss *sharedSearch) (score, bool) {
	x := inv.idx
	h := &inv.hosts[hi]
	gs := ss.spread[:0] // by floor (own), ascending
	defer func() { ss.spread = gs[:0] }()
	room := 0
	for gi := h.first; gi < h.first+h.n; gi++ {
		b := x.of[gi]
		if b < 0 || len(ss.chains[b]) == 0 {
			continue
		}
		room += len(ss.chains[b])
		gs = append(gs, chainHead{chain: ss.chains[b], own: ss.floors[b]})
		for j := len(gs) - 1; j > 0 && gs[j].own.less(gs[j-1].own); j-- {
			gs[j], gs[j-1] = gs[j-1], gs[j]
		}
	}
	if room < c.count {
		return score{}, false
	}
	lb := inv.hostFloor(op, hi).times(c.count)
	left := c.count
	for _, g := range gs {
		t := min(left, len(g.chain))
		lb = lb.add(g.own.times(t))
		if left -= t; left == 0 {
			break
		}
	}
	return lb, true
}

// sharedOnHosts is bestOnHosts for several MIG instances or vGPUs (a
// placer that is not whole): the best host for c.count devices, as
// placeOnHost on every host would find it. n gets what placeOnHost's first
// look at every GPU would have noted.
func (inv *Inventory) sharedOnHosts(c *concrete, pc *placeCtx, n *notes) (Placement, bool) {
	x := inv.idx
	op := ownPartsOf(c, pc)
	ss := sharedPool.Get().(*sharedSearch)
	defer sharedPool.Put(ss)
	free := pc.free()
	ev := evalsOf(c, pc.o.Strategy)
	defer ev.publish()
	inv.sharedChains(c, &op, free, &ev, n, ss)
	var bestS score
	bestH := -1
	keep := func(hi int, s score, ok bool) {
		if ok && (bestH < 0 || s.less(bestS) || (s == bestS && hi < bestH)) {
			bestS, bestH = s, hi
		}
	}
	worse := func(lb score) bool { return bestH >= 0 && bestS.less(lb) }
	// Hosts the chains do not answer for (a GPU that is not plain and
	// could take a device, or a hold) go through placeOnHost; the others
	// are met through the buckets.
	var single []int
	mark := func(hi int32) {
		if !ss.met[hi] {
			ss.met[hi] = true
			single = append(single, int(hi))
		}
	}
	inv.eachSingle(c, pc, n, func(gi int) { mark(x.hostOf[gi]) })
	for gi := range pc.holds {
		mark(x.hostOf[gi])
	}
	for _, hi := range single {
		_, s, ok := inv.placeOnHost(hi, c, pc, func(status, Code) {})
		keep(hi, s, ok)
	}
	hosts, order := &ss.hosts, &ss.order
	for {
		// Hosts not met yet total at least c.count times the next
		// bucket's floor.
		var unmet score
		if len(order.xs) > 0 {
			unmet = order.xs[0].floor.times(c.count)
		}
		if len(hosts.xs) > 0 && (len(order.xs) == 0 || !unmet.less(hosts.xs[0].lb)) {
			hb := hosts.pop()
			if worse(hb.lb) {
				break
			}
			if !hb.sharp {
				if lb, ok := inv.sharpen(int(hb.hi), c, &op, ss); ok && !worse(lb) {
					hosts.push(hostBound{hi: hb.hi, lb: lb, sharp: true})
				}
				continue
			}
			s, ok := inv.chainTotal(int(hb.hi), c, &op, free, ss)
			keep(int(hb.hi), s, ok)
			continue
		}
		if len(order.xs) == 0 || worse(unmet) {
			break
		}
		ch := order.pop()
		for gi := x.first(ch.b); gi >= 0; gi = x.next[gi] {
			if hi := x.hostOf[gi]; !ss.met[hi] {
				ss.met[hi] = true // its bound can only be worse in a later bucket
				if lb := ch.floor.add(inv.hostFloor(&op, int(hi))).times(c.count); !worse(lb) {
					hosts.push(hostBound{hi: hi, lb: lb})
				}
			}
		}
	}
	if bestH < 0 {
		return Placement{}, false
	}
	p, _, ok := inv.placeOnHost(bestH, c, pc, func(status, Code) {})
	return p, ok
}
