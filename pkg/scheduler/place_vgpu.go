package scheduler

import (
	"strings"

	"github.com/gpuvm/gpuvm/pkg/gpu"
)

// vgpuPlacer places time-sliced vGPUs: one type per GPU (or mixed sizes on
// boards that allow it), up to the type's instance count or the memory.
type vgpuPlacer struct{}

func (vgpuPlacer) whole() bool { return false }

func (vgpuPlacer) exact(n Need) (string, uint64, bool) {
	t, err := gpu.ParseVGPUType(n.Type)
	if err != nil {
		return "", 0, false
	}
	return t.Name, 0, true
}

func (vgpuPlacer) abstract(n Need, info *modelInfo, out []option) []option {
	for _, t := range info.list {
		if t.Memory >= n.Memory && (n.Series == "" || string(t.Series) == n.Series) {
			out = append(out, option{t.Name, n.Model, float64(t.Memory) / float64(info.m.Memory), t.Memory})
		}
	}
	return out
}

func (vgpuPlacer) match(c *concrete, mi int, info *modelInfo) bool {
	t, ok := info.types[c.name]
	if ok {
		c.vt[mi] = t
	}
	return ok
}

func (vgpuPlacer) eval(inv *Inventory, gi int, g *gpuState, c *concrete, pc *placeCtx, draining bool, out *cand) (status, Code) {
	info := inv.models[g.model]
	h := &inv.hosts[g.host]
	holds := pc.holds[gi]
	t := &c.vt[g.model]
	if !vgpuRoom(g, info, t) {
		return stFull, ""
	}
	if !draining && len(holds) > 0 {
		if code := vgpuHeld(g, info, *t, holds); code != "" {
			return stHeld, code
		}
	}
	class := int64(0)
	if g.n == 0 {
		class = 1 + switchCost(g, c.kind)
	}
	flex := int64(0)
	if g.n == 0 && inv.allows(g, gpu.KindMIG) {
		flex = 1
	}
	left := int64(t.MaxInstances - g.nv - 1)
	if g.mixed {
		left = int64((info.m.Memory - g.vmem - t.Memory) / gpu.GiB)
	}
	best := out
	*best = cand{gi: gi}
	switch pc.o.Strategy {
	case FirstFit:
		best.score = score{int64(gi)}
	case Spread:
		best.score = score{int64(h.load), int64(g.nv), class, flex, 0, int64(gi)}
	default:
		best.score = score{class, flex, pc.ext(g), left, int64(h.empty), int64(gi)}
	}
	return stOK, ""
}

func (vgpuPlacer) onHold(inv *Inventory, gi int, g *gpuState, _ []gpuState, _ int, c *concrete, d Device, _ *placeCtx) (cand, bool) {
	t := &c.vt[g.model]
	if t.Name != strings.ToUpper(d.Type) || !vgpuRoom(g, inv.models[g.model], t) {
		return cand{}, false
	}
	return cand{gi: gi}, true
}

func (vgpuPlacer) take(g *gpuState, _ []gpuState, _ int, _ cand, c *concrete) {
	t := c.vt[g.model]
	g.nv++
	g.vmem += t.Memory
	if !g.mixed {
		g.vtype, g.vmax = t.Name, t.MaxInstances
	}
}

func (vgpuPlacer) device(inv *Inventory, d Device, _ cand, c *concrete, g *gpuState) Device {
	info := inv.models[g.model]
	t := c.vt[g.model]
	d.Type, d.Memory = t.Name, t.Memory
	if info.m.Memory > 0 {
		d.Share = float64(t.Memory) / float64(info.m.Memory)
	}
	return d
}

func (vgpuPlacer) capacity(g *gpuState, info *modelInfo, c *concrete) int {
	t := c.vt[g.model]
	if !g.mixed {
		return t.MaxInstances
	}
	if t.Series == gpu.SeriesC || t.Memory == 0 {
		return 0
	}
	return min(int(info.m.Memory/t.Memory), info.m.MaxVGPUs)
}

func (vgpuPlacer) held(inv *Inventory, g *gpuState, a Allocation, holds []holdDev) Code {
	info := inv.models[g.model]
	return vgpuHeld(g, info, info.types[a.Type], holds)
}

func (vgpuPlacer) noun(c *concrete) string { return "vGPU " + c.name }

// seriesRank orders vGPU types of one size: Q (graphics and CUDA) first,
// then C (compute), B (desktop), A (applications).
func seriesRank(c concrete) int {
	if c.kind != gpu.KindVGPU || c.name == "" {
		return 0
	}
	return strings.IndexByte("QCBA", c.name[len(c.name)-1])
}

func vgpuHeld(g *gpuState, info *modelInfo, t gpu.VGPUTypeInfo, holds []holdDev) Code {
	n, mem := g.nv+1, g.vmem+t.Memory
	for _, h := range holds {
		if h.d.Kind != gpu.KindVGPU {
			return h.code
		}
		ht, ok := info.types[strings.ToUpper(h.d.Type)]
		if !ok {
			return h.code
		}
		if !g.mixed && ht.Name != t.Name {
			return h.code
		}
		n++
		mem += ht.Memory
	}
	if g.mixed {
		if mem > info.m.Memory || n > info.m.MaxVGPUs {
			return holds[0].code
		}
		return ""
	}
	if n > t.MaxInstances {
		return holds[0].code
	}
	return ""
}

func (vgpuPlacer) varies(s Strategy) (scoreMask, int, int) { return sharedVaries(s) }

func (vgpuPlacer) unit() int64 { return 1 }
