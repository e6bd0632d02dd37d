package scheduler

import (
	"slices"
	"sort"

	"github.com/gpuvm/gpuvm/pkg/gpu"
)

// passthroughPlacer places whole GPUs: a GPU and every GPU of its IOMMU
// group, all empty, go to one VM.
type passthroughPlacer struct{}

func (passthroughPlacer) whole() bool { return true }

func (passthroughPlacer) exact(n Need) (string, uint64, bool) { return "", n.Memory, true }

func (passthroughPlacer) abstract(n Need, info *modelInfo, out []option) []option {
	if m := info.m; m.Memory >= n.Memory && m.Memory > 0 {
		out = append(out, option{"", m.Name, 1, m.Memory})
	}
	return out
}

func (passthroughPlacer) match(c *concrete, _ int, info *modelInfo) bool {
	return info.m.Memory >= c.memory
}

func (passthroughPlacer) eval(inv *Inventory, gi int, g *gpuState, c *concrete, pc *placeCtx, draining bool, out *cand) (status, Code) {
	if g.n > 0 {
		return stFull, ""
	}
	for _, o := range g.group {
		og := &inv.gpus[o]
		if og.n > 0 || og.owner != "" || !inv.allows(og, gpu.KindPassthrough) {
			return stFull, ""
		}
	}
	if !draining {
		if hs := pc.holds[gi]; len(hs) > 0 {
			return stHeld, hs[0].code
		}
		for _, o := range g.group {
			if hs := pc.holds[o]; len(hs) > 0 {
				return stHeld, hs[0].code
			}
		}
	}
	info := inv.models[g.model]
	h := &inv.hosts[g.host]
	flex := int64(0)
	if inv.allows(g, gpu.KindMIG) {
		flex++
	}
	if inv.allows(g, gpu.KindVGPU) {
		flex++
	}
	best := out
	*best = cand{gi: gi}
	switch pc.o.Strategy {
	case FirstFit:
		best.score = score{int64(gi)}
	case Spread:
		best.score = score{int64(h.load), switchCost(g, c.kind), flex, int64(info.m.Memory / gpu.GiB), 0, int64(gi)}
	default:
		best.score = score{switchCost(g, c.kind), flex, int64(info.m.Memory / gpu.GiB), int64(len(g.group)), int64(h.empty), int64(gi)}
	}
	return stOK, ""
}

func (passthroughPlacer) onHold(inv *Inventory, gi int, g *gpuState, scratch []gpuState, first int, c *concrete, _ Device, pc *placeCtx) (cand, bool) {
	if g.n > 0 {
		return cand{}, false
	}
	var cd cand
	if st, _ := inv.evalScratch(gi, g, scratch, first, c, &placeCtx{o: pc.o, end: pc.end}, &cd); st != stOK {
		return cand{}, false
	}
	return cand{gi: gi}, true
}

func (passthroughPlacer) take(g *gpuState, scratch []gpuState, first int, _ cand, _ *concrete) {
	g.owner = "?"
	for _, o := range g.group {
		og := &scratch[o-first]
		og.owner, og.n, og.kind = "?", 1, gpu.KindPassthrough
	}
}

func (passthroughPlacer) device(inv *Inventory, d Device, _ cand, _ *concrete, g *gpuState) Device {
	d.Memory, d.Share = inv.models[g.model].m.Memory, 1
	for _, o := range g.group {
		d.Group = append(d.Group, inv.gpus[o].addr)
		d.Share++
	}
	sort.Strings(d.Group)
	return d
}

func (passthroughPlacer) capacity(*gpuState, *modelInfo, *concrete) int { return 1 }

// held: any hold on a whole GPU is broken (its IOMMU group companions'
// holds are checked by Keep).
func (passthroughPlacer) held(_ *Inventory, _ *gpuState, _ Allocation, holds []holdDev) Code {
	return holds[0].code
}

func (passthroughPlacer) noun(c *concrete) string {
	if c.model != "" {
		return "a whole " + c.model
	}
	return "a whole GPU"
}

// wholeOnHost puts c.count whole GPUs on host h: the best GPUs by score,
// none of them in the IOMMU group of another (placing a whole GPU changes
// no other GPU's score).
func (inv *Inventory) wholeOnHost(h *hostState, c *concrete, cands []cand, pc *placeCtx) (Placement, score, bool) {
	slices.SortFunc(cands, func(a, b cand) int {
		if a.score.less(b.score) {
			return -1
		}
		if b.score.less(a.score) {
			return 1
		}
		return 0
	})
	taken := pc.taken[:0]
	defer func() { pc.taken = taken[:0] }()
	n := 0
	for _, cd := range cands {
		if n == c.count {
			break
		}
		if !slices.Contains(taken, cd.gi) {
			taken = append(append(taken, cd.gi), inv.gpus[cd.gi].group...)
			n++
		}
	}
	if n < c.count {
		return Placement{}, score{}, false
	}
	taken = taken[:0]
	p := Placement{Host: h.name, Devices: make([]Device, 0, c.count)}
	var total score
	for _, cd := range cands {
		if len(p.Devices) == c.count {
			break
		}
		if slices.Contains(taken, cd.gi) {
			continue
		}
		g := &inv.gpus[cd.gi]
		taken = append(append(taken, cd.gi), g.group...)
		p.Devices = append(p.Devices, inv.device(cd, c, g))
		total = total.add(cd.score)
	}
	return p, total, len(p.Devices) == c.count
}

func (passthroughPlacer) varies(s Strategy) (scoreMask, int, int) {
	switch s {
	case FirstFit:
		return scoreMask{true}, -1, 0
	case Spread:
		return scoreMask{true, false, false, false, false, true}, 0, 5
	}
	return scoreMask{false, false, false, false, true, true}, 4, 5
}

func (passthroughPlacer) unit() int64 { return 1 }
