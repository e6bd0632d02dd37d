package scheduler

import (
	"strings"

	"github.com/gpuvm/gpuvm/pkg/gpu"
)

// migPlacer places MIG GPU instances: a profile at a start slot of the
// GPU's placement tree, chosen to keep large profiles placeable.
type migPlacer struct{}

func (migPlacer) whole() bool { return false }

func (migPlacer) exact(n Need) (string, uint64, bool) {
	return strings.ToLower(strings.TrimSpace(n.Profile)), 0, true
}

func (migPlacer) abstract(n Need, info *modelInfo, out []option) []option {
	if info.mt == nil {
		return out
	}
	for _, p := range info.mt.t.Profiles {
		if p.Media == "" && uint64(p.MemoryGB)*gpu.GiB >= n.Memory {
			out = append(out, option{p.Name, n.Model, migShare(info.mt.t, p), uint64(p.MemoryGB) * gpu.GiB})
		}
	}
	return out
}

func (migPlacer) match(c *concrete, mi int, info *modelInfo) bool {
	if info.mt == nil {
		return false
	}
	pi := info.mt.profileIndex(c.name)
	if pi < 0 {
		return false
	}
	c.prof[mi] = pi
	return true
}

func (migPlacer) eval(inv *Inventory, gi int, g *gpuState, c *concrete, pc *placeCtx, draining bool, out *cand) (status, Code) {
	mt := inv.models[g.model].mt
	pi := c.prof[g.model]
	node := &mt.nodes[g.node]
	opts := node.opts[pi]
	if len(opts) == 0 {
		return stFull, ""
	}
	h := &inv.hosts[g.host]
	holds := pc.holds[gi]
	found, room := false, false
	heldCode := Code("")
	one := g.layout == nil && len(holds) == 0 && !draining
	pick := int(node.best[pi])
	if pc.o.Strategy == FirstFit {
		pick = 0
	}
	for j, op := range opts {
		if one && j != pick {
			continue // only damage and start differ between a GPU's options
		}
		if g.layout != nil && !inLayout(g.layout, mt.t.Profiles[pi], op.start) {
			continue
		}
		room = true
		if draining {
			break
		}
		if len(holds) > 0 {
			if code := migHeld(mt, node, holds, pi, op.start); code != "" {
				heldCode = code
				continue
			}
		}
		var s score
		switch pc.o.Strategy {
		case FirstFit:
			s = score{int64(gi)*16 + int64(op.start)}
		case Spread:
			s = score{int64(h.load), int64(mt.t.Slices - node.free), op.damage, switchCost(g, c.kind), 0, int64(gi)*16 + int64(op.start)}
		default:
			// Least damage to larger profiles, then no mode switch, then
			// the GPU whose busy horizon the lease extends least, then
			// the fullest GPU and host.
			s = score{op.damage, switchCost(g, c.kind), pc.ext(g), int64(node.free - mt.t.Profiles[pi].Size), int64(h.empty), int64(gi)*16 + int64(op.start)}
		}
		if !found || s.less(out.score) {
			*out = cand{gi: gi, start: op.start, next: op.next, score: s}
			found = true
		}
	}
	if !room {
		return stFull, ""
	}
	if !found {
		return stHeld, heldCode
	}
	return stOK, ""
}

func (migPlacer) onHold(inv *Inventory, gi int, g *gpuState, _ []gpuState, _ int, c *concrete, d Device, _ *placeCtx) (cand, bool) {
	info := inv.models[g.model]
	pi := c.prof[g.model]
	if info.mt.t.Profiles[pi].Name != strings.ToLower(d.Profile) {
		return cand{}, false
	}
	cd := cand{gi: gi, next: -1}
	for _, o := range info.mt.nodes[g.node].opts[pi] {
		if o.start == d.Start {
			cd.start, cd.next = o.start, o.next
		}
	}
	return cd, cd.next >= 0
}

func (migPlacer) take(g *gpuState, _ []gpuState, _ int, cd cand, _ *concrete) {
	g.node = cd.next
}

func (migPlacer) device(inv *Inventory, d Device, cd cand, c *concrete, g *gpuState) Device {
	info := inv.models[g.model]
	p := info.mt.t.Profiles[c.prof[g.model]]
	d.Profile, d.Start, d.Size = p.Name, cd.start, p.Size
	d.Memory = uint64(p.MemoryGB) * gpu.GiB
	d.Share = migShare(info.mt.t, p)
	return d
}

func (migPlacer) capacity(g *gpuState, info *modelInfo, c *concrete) int {
	pi := c.prof[g.model]
	if g.layout == nil {
		return info.mt.fullCap[pi]
	}
	n := 0
	for _, in := range g.layout {
		if in.Profile.ID == info.mt.t.Profiles[pi].ID {
			n++
		}
	}
	return n
}

func (migPlacer) held(inv *Inventory, g *gpuState, a Allocation, holds []holdDev) Code {
	info := inv.models[g.model]
	return migHeld(info.mt, &info.mt.nodes[g.node], holds, info.mt.profileIndex(a.Profile), a.Start)
}

func (migPlacer) noun(c *concrete) string { return "MIG " + c.name }

// migShare is the part of a GPU a MIG profile holds: the larger of its
// compute and memory fractions (a 1g.10gb is 1/7, a 1g.20gb 1/4).
func migShare(t *gpu.MIGTable, p gpu.MIGProfile) float64 {
	c := float64(p.Compute) / float64(t.Compute)
	m := float64(p.Size) / float64(t.Slices)
	if m > c {
		return m
	}
	return c
}

// migHeld checks a MIG start against held instances on the GPU: it may not
// overlap them, and together with what the GPU holds and the held instances
// it may not overrun the compute budget, the profile's maximum or the media
// engines. Held instances that overlap what the GPU holds now are in the
// future (what holds them now ends first) and do not count twice.
func migHeld(mt *migTable, node *migNode, holds []holdDev, pi, start int) Code {
	p := mt.t.Profiles[pi]
	compute := int(node.compute) + p.Compute
	count := int(node.counts[pi]) + 1
	media := node.media && p.Media != ""
	for _, h := range holds {
		if h.d.Kind != gpu.KindMIG || h.prof < 0 {
			return h.code
		}
		hp := mt.t.Profiles[h.prof]
		if h.d.Start < start+p.Size && start < h.d.Start+hp.Size {
			return h.code
		}
		var hmask uint16
		for s := h.d.Start; s < h.d.Start+hp.Size; s++ {
			hmask |= 1 << s
		}
		if node.mask&hmask != 0 {
			continue
		}
		compute += hp.Compute
		if h.prof == pi {
			count++
		}
		if hp.Media != "" && p.Media != "" {
			media = true
		}
	}
	if compute > mt.t.Compute || count > p.Max || media {
		return holds[0].code
	}
	return ""
}

func (migPlacer) varies(s Strategy) (scoreMask, int, int) { return sharedVaries(s) }

// unit: a MIG score holds the GPU's index times 16 plus the start slot.
func (migPlacer) unit() int64 { return 16 }

// sharedVaries is varies of the placers whose GPUs are shared between VMs
// (MIG instances, vGPUs): their scores vary in the same places.
func sharedVaries(s Strategy) (scoreMask, int, int) {
	switch s {
	case FirstFit:
		return scoreMask{true}, -1, 0
	case Spread:
		return scoreMask{true, false, false, false, false, true}, 0, 5
	}
	return scoreMask{false, false, true, false, true, true}, 4, 5
}
