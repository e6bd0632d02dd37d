package scheduler

import (
	"fmt"
	"math"
	"time"

	"github.com/gpuvm/gpuvm/pkg/gpu"
)

// Fits is how many requests of one need the placers could place now, one
// after the other, and of what kind of GPU each would get (a need of
// several kinds may get MIG instances first, then vGPUs).
type Fits struct {
	N      int
	ByKind map[gpu.Kind]int
}

// CountFits is how many requests of need Place would place, one after the
// other, each allocated before the next (o's strategy and holds), until
// none fits or limit are placed. An invalid need fits nowhere.
//
// It counts without placing (issue #26). Placing a device on a GPU changes
// what that GPU can take next, never what another GPU can (but for a whole
// GPU's IOMMU group), and the start a MIG instance takes on a GPU depends
// on that GPU alone: whatever the order of the placements, each GPU runs
// through the same states, device after device, until it is full. So:
//
//   - A need of one device takes, GPU by GPU, as many as the GPU can take
//     one after the other. A need that several concrete devices meet (an
//     abstract one) takes the first of them until none fits anywhere, then
//     the next: on each GPU, the first until the GPU is full for it, then
//     the next from where it stopped.
//   - A need of c.count devices on one host places, per host, the devices
//     its GPUs can take one after the other (whole GPUs: one per IOMMU
//     group with a GPU that fits), divided by c.count: placeOnHost fails on
//     a host only when fewer are left.
//
// A plain GPU no hold touches runs as every GPU of its bucket does: one
// run of one of them counts for the bucket. Hosts with a GPU that is not
// plain, or with a hold, are run GPU by GPU on a scratch copy. Booked
// capacity of the requester (o.Own) still places one request after the
// other (countByPlacing, also the reference TestCountFitsMatchesPlacing
// compares with).
func (inv *Inventory) CountFits(need Need, o PlaceOptions, limit int) Fits {
	if need.Validate() != nil || limit <= 0 {
		return Fits{}
	}
	if o.Strategy == "" {
		o.Strategy = Pack
	}
	cs := inv.resolve(need)
	pc := inv.newCtx(o)
	for i := range o.Own {
		if o.Own[i].overlaps(o.Now, pc.end) {
			return inv.countByPlacing(need, o, limit)
		}
	}
	counts := make([]int, len(cs))
	switch {
	case len(cs) == 0:
		return Fits{}
	case need.count() == 1:
		inv.countOnes(cs, pc, limit, counts)
	default:
		inv.countSeveral(cs, pc, o.End, limit, counts)
	}
	f := Fits{}
	for ci, n := range counts {
		if n = min(n, limit-f.N); n > 0 {
			if f.ByKind == nil {
				f.ByKind = map[gpu.Kind]int{}
			}
			f.ByKind[cs[ci].kind] += n
			f.N += n
		}
	}
	return f
}

// countByPlacing is CountFits by placing: requests of need placed on a copy
// of the inventory, as Place would, one after the other.
func (inv *Inventory) countByPlacing(need Need, o PlaceOptions, limit int) Fits {
	f := Fits{}
	if need.Validate() != nil {
		return f
	}
	scratch := inv.Clone()
	for f.N < limit {
		p, why := scratch.Place(need, o)
		if !why.OK() || len(p.Devices) == 0 {
			break
		}
		if err := scratch.Allocate(fmt.Sprintf("fits-%d", f.N), p, o.End); err != nil {
			break
		}
		if f.ByKind == nil {
			f.ByKind = map[gpu.Kind]int{}
		}
		f.ByKind[p.Devices[0].Kind]++
		f.N++
	}
	return f
}

// runHosts is which hosts CountFits runs GPU by GPU: every host without an
// index; else those with a GPU that is not plain or a hold on a GPU.
func (inv *Inventory) runHosts(pc *placeCtx) []bool {
	run := make([]bool, len(inv.hosts))
	x := inv.idx
	if x == nil {
		for hi := range run {
			run[hi] = true
		}
		return run
	}
	for _, odd := range x.odd {
		for _, gi := range odd {
			run[x.hostOf[gi]] = true
		}
	}
	for gi := range pc.holds {
		run[x.hostOf[gi]] = true
	}
	return run
}

// takeAll takes devices of c on g (GPU gi; a scratch copy, with its host's
// others in scratch from index first) one after the other until it is full
// for c, or has taken limit; it returns how many it took.
func (inv *Inventory) takeAll(gi int, g *gpuState, scratch []gpuState, first int, c *concrete, pc *placeCtx, limit int) int {
	n := 0
	for ; n < limit; n++ {
		if st, _ := inv.evalScratch(gi, g, scratch, first, c, pc, &pc.cd); st != stOK {
			break
		}
		applyScratch(g, scratch, first, pc.cd, c)
	}
	return n
}

// runHost adds to counts[ci] the devices of cs[ci] host hi's GPUs take, cs
// in order, each until the GPUs are full for it (at most limit each).
func (inv *Inventory) runHost(hi int, cs []concrete, pc *placeCtx, limit int, counts []int) {
	h := &inv.hosts[hi]
	scratch := make([]gpuState, h.n)
	copy(scratch, inv.gpus[h.first:h.first+h.n])
	for ci := range cs {
		for j := range scratch {
			counts[ci] += inv.takeAll(h.first+j, &scratch[j], scratch, h.first, &cs[ci], pc, limit-counts[ci])
		}
	}
}

// countOnes sets counts[ci] to the devices of cs[ci] (a need of one
// device) placed one after the other, cs in order (each at most limit).
func (inv *Inventory) countOnes(cs []concrete, pc *placeCtx, limit int, counts []int) {
	run := inv.runHosts(pc)
	x := inv.idx
	var left []int32 // by bucket: its GPUs on hosts not run one by one
	if x != nil {
		left = append([]int32(nil), x.size...)
	}
	for hi, r := range run {
		if !r {
			continue
		}
		inv.runHost(hi, cs, pc, limit, counts)
		if x != nil {
			h := &inv.hosts[hi]
			for gi := h.first; gi < h.first+h.n; gi++ {
				if b := x.of[gi]; b >= 0 {
					left[b]--
				}
			}
		}
	}
	free := pc.free()
	for b, n := range left {
		if counts[0] >= limit {
			return // the first concrete device alone reaches the limit
		}
		rep := int(x.first(int32(b)))
		if n <= 0 || rep < 0 {
			continue
		}
		g := inv.gpus[rep] // a scratch copy, as the bucket's GPUs run
		for ci := range cs {
			if k := inv.takeAll(rep, &g, nil, 0, &cs[ci], free, limit); k > 0 {
				counts[ci] = addTimes(counts[ci], k, int(n), limit)
			}
		}
	}
}

// countSeveral sets counts[ci] to the requests of c.count devices of
// cs[ci] on one host placed one after the other, cs in order (each at
// most limit), end being when they end. A host takes, of each, the devices
// its GPUs take one after the other, divided by c.count. Which of its GPUs
// get them only matters when a later concrete device follows: then the
// hosts that took some are placed request by request on a scratch copy
// (placeMany), fewer than limit of them.
func (inv *Inventory) countSeveral(cs []concrete, pc *placeCtx, end time.Time, limit int, counts []int) {
	run := inv.runHosts(pc)
	changed := map[int][]gpuState{} // by host: its GPUs after the earlier cs
	total := 0
	for ci := range cs {
		c := &cs[ci]
		n, took := inv.hostsTake(c, pc, run, changed, limit-total)
		counts[ci] = n
		if total += n; total >= limit || ci == len(cs)-1 {
			return
		}
		for _, ht := range took {
			changed[ht.hi] = inv.placeMany(ht.hi, changed[ht.hi], c, pc, end, ht.n)
		}
	}
}

// hostTakes is how many requests host hi takes.
type hostTakes struct{ hi, n int }

// hostsTake is how many requests of c.count devices of c the hosts take
// (at most limit), and which took some: as their GPUs are, or as changed
// holds them.
func (inv *Inventory) hostsTake(c *concrete, pc *placeCtx, run []bool, changed map[int][]gpuState, limit int) (int, []hostTakes) {
	x := inv.idx
	var takes []int32 // by bucket: what one of its GPUs takes; -1 not known
	if x != nil {
		takes = make([]int32, len(x.head))
		for b := range takes {
			takes[b] = -1
		}
	}
	free := pc.free()
	most := addTimes(0, limit, c.count, math.MaxInt) // no host need be counted further
	placed := 0
	var took []hostTakes
	for hi := range inv.hosts {
		if placed >= limit {
			break
		}
		h := &inv.hosts[hi]
		n := 0
		if gs, ok := changed[hi]; ok || run[hi] {
			scratch := make([]gpuState, h.n)
			if ok {
				copy(scratch, gs)
			} else {
				copy(scratch, inv.gpus[h.first:h.first+h.n])
			}
			for j := range scratch {
				n += inv.takeAll(h.first+j, &scratch[j], scratch, h.first, c, pc, most-n)
			}
		} else {
			for gi := h.first; gi < h.first+h.n; gi++ {
				b := x.of[gi]
				if takes[b] < 0 {
					g := inv.gpus[gi]
					takes[b] = int32(inv.takeAll(gi, &g, nil, 0, c, free, most))
				}
				n += int(takes[b])
			}
		}
		if n /= c.count; n > 0 {
			placed += n
			took = append(took, hostTakes{hi, n})
		}
	}
	return min(placed, limit), took
}

// placeMany places n requests of c.count devices of c on host hi, one
// after the other, as Place and Allocate would, on scratch (its GPUs; nil:
// as they are), which it returns.
func (inv *Inventory) placeMany(hi int, scratch []gpuState, c *concrete, pc *placeCtx, end time.Time, n int) []gpuState {
	h := &inv.hosts[hi]
	if scratch == nil {
		scratch = append([]gpuState(nil), inv.gpus[h.first:h.first+h.n]...)
	}
	if end.IsZero() {
		end = never
	}
	for ; n > 0; n-- {
		var picked []cand
		if c.pl.whole() {
			picked = inv.wholeOnScratch(h, scratch, c, pc)
		} else if _, ok := inv.sharedOnScratch(h, scratch, c, pc, nil, &picked); !ok {
			picked = nil
		}
		if picked == nil {
			return scratch // not met: hostsTake counted what fits
		}
		for _, cd := range picked { // Allocate sets the busy horizons
			g := &scratch[cd.gi-h.first]
			if end.After(g.busy) {
				g.busy = end
			}
			if c.pl.whole() {
				for _, o := range g.group {
					scratch[o-h.first].busy = end
				}
			}
		}
	}
	return scratch
}

// wholeOnScratch is the whole GPUs placeOnHost (wholeOnHost) would give a
// request of c on host h as scratch holds it, taken on scratch; nil when
// they do not fit.
func (inv *Inventory) wholeOnScratch(h *hostState, scratch []gpuState, c *concrete, pc *placeCtx) []cand {
	var cands []cand
	for j := range scratch {
		if st, _ := inv.evalScratch(h.first+j, &scratch[j], scratch, h.first, c, pc, &pc.cd); st == stOK {
			cands = append(cands, pc.cd)
		}
	}
	p, _, ok := inv.wholeOnHost(h, c, cands, pc)
	if !ok {
		return nil
	}
	picked := make([]cand, 0, len(p.Devices))
	for _, d := range p.Devices {
		gi, _ := inv.gpuIndex(h.name, d.GPU)
		picked = append(picked, cand{gi: gi})
		applyScratch(&scratch[gi-h.first], scratch, h.first, cand{gi: gi}, c)
	}
	return picked
}

// addTimes is a + k×n (all ≥ 0), or limit if that is more.
func addTimes(a, k, n, limit int) int {
	if a >= limit || (k > 0 && n > (limit-a)/k) {
		return limit
	}
	return a + k*n
}
