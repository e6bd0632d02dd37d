package sim

import (
	"fmt"
	"sync"

	"github.com/gpuvm/gpuvm/pkg/gpu"
)

// simType is a vGPU type as the simulated driver offers it on a board.
type simType struct {
	gpu.VGPUTypeInfo
	MdevID  string // "nvidia-N" (mdev boards)
	VFIOID  int    // numeric ID (vendor-VFIO boards)
	profile *gpu.MIGProfile
}

// boardTypes returns the types of a board with simulator-assigned host IDs.
// Real drivers number types globally; the simulator derives the numbers from
// the board's position in the catalogue, so they are stable and unique per host.
func boardTypes(m gpu.Model) []simType {
	if v, ok := typeCache.Load(m.DeviceID); ok {
		return v.([]simType)
	}
	out := computeBoardTypes(m)
	typeCache.Store(m.DeviceID, out)
	return out
}

// typeCache holds boardTypes by PCI device ID; the catalogue never changes.
var typeCache sync.Map

func computeBoardTypes(m gpu.Model) []simType {
	base := 0
	for i, x := range gpu.Models() {
		if x.DeviceID == m.DeviceID {
			base = i * 64
		}
	}
	var out []simType
	for i, t := range m.VGPUTypes() {
		st := simType{VGPUTypeInfo: t, MdevID: fmt.Sprintf("nvidia-%d", 256+base+i), VFIOID: 1024 + base + i}
		if t.MIGProfile != "" && m.MIG != nil {
			p, _ := m.MIG.Profile(t.MIGProfile)
			st.profile = &p
		}
		out = append(out, st)
	}
	return out
}

func typeByMdevID(m gpu.Model, id string) (simType, bool) {
	for _, t := range boardTypes(m) {
		if t.MdevID == id {
			return t, true
		}
	}
	return simType{}, false
}

func typeByVFIOID(m gpu.Model, id int) (simType, bool) {
	for _, t := range boardTypes(m) {
		if t.VFIOID == id {
			return t, true
		}
	}
	return simType{}, false
}

// vgpu is one vGPU present on a GPU, whichever interface made it.
type vgpu struct {
	t  simType
	gi int
}

func (g *gpuState) vgpus() []vgpu {
	m := g.model()
	var out []vgpu
	for _, md := range g.Mdevs {
		if t, ok := typeByMdevID(m, md.TypeID); ok {
			out = append(out, vgpu{t: t, gi: md.GI})
		}
	}
	for _, vf := range g.VFs {
		if vf.VGPUType != 0 {
			if t, ok := typeByVFIOID(m, vf.VGPUType); ok {
				out = append(out, vgpu{t: t, gi: vf.GI})
			}
		}
	}
	return out
}

// freeGI returns the lowest-numbered GPU instance of the profile that holds no
// vGPU, or nil. It is where the driver puts a MIG-backed vGPU.
func (g *gpuState) freeGI(p *gpu.MIGProfile) *giState {
	used := map[int]bool{}
	for _, v := range g.vgpus() {
		used[v.gi] = true
	}
	var best *giState
	for _, gi := range g.GIs {
		if gi.ProfileID == p.ID && !used[gi.ID] && (best == nil || gi.ID < best.ID) {
			best = gi
		}
	}
	return best
}

// creatable reports whether one more vGPU of type t fits on the GPU now, and
// if not why: the driver's rules for MIG mode, equal-size and mixed-size mode.
func (g *gpuState) creatable(t simType) error {
	if g.Driver != "nvidia" {
		return fmt.Errorf("GPU is bound to %q, not nvidia", g.Driver)
	}
	existing := g.vgpus()
	if t.MIGBacked() {
		if !g.MIGMode {
			return fmt.Errorf("MIG-backed type %s needs MIG mode", t.Name)
		}
		if g.freeGI(t.profile) == nil {
			return fmt.Errorf("no free GPU instance of profile %s for %s", t.MIGProfile, t.Name)
		}
		return nil
	}
	if g.MIGMode {
		return fmt.Errorf("time-sliced type %s cannot run on a GPU in MIG mode", t.Name)
	}
	count, used := 0, uint64(0)
	for _, v := range existing {
		if v.t.Name == t.Name {
			count++
		}
		used += v.t.Memory
	}
	if g.MixedSize {
		if t.Series == gpu.SeriesC {
			return fmt.Errorf("mixed-size mode offers only Q, B and A types, not %s", t.Name)
		}
		if used+t.Memory > g.model().Memory {
			return fmt.Errorf("%s needs %d MiB of framebuffer, %d MiB are free", t.Name, t.Memory>>20, (g.model().Memory-used)>>20)
		}
		if len(existing) >= g.model().MaxVGPUs {
			return fmt.Errorf("GPU holds its maximum of %d vGPUs", g.model().MaxVGPUs)
		}
		return nil
	}
	if len(existing) > 0 && existing[0].t.Name != t.Name {
		return fmt.Errorf("GPU holds %s vGPUs and is in equal-size mode", existing[0].t.Name)
	}
	if count >= t.MaxInstances {
		return fmt.Errorf("GPU holds the maximum of %d %s vGPUs", t.MaxInstances, t.Name)
	}
	return nil
}

// migInstances returns the GPU's instances in the pkg/gpu form.
func (g *gpuState) migInstances() []gpu.Instance {
	m := g.model()
	var out []gpu.Instance
	for _, gi := range g.GIs {
		if p, ok := m.MIG.ProfileByID(gi.ProfileID); ok {
			out = append(out, gpu.Instance{Profile: p, Start: gi.Start})
		}
	}
	return out
}

// hasWork reports whether anything lives on the GPU that unbinding the
// nvidia driver would destroy.
func (g *gpuState) hasWork() string {
	switch {
	case len(g.Mdevs) > 0:
		return fmt.Sprintf("%d mdev devices", len(g.Mdevs))
	case len(g.GIs) > 0:
		return fmt.Sprintf("%d MIG GPU instances", len(g.GIs))
	case len(g.VFs) > 0:
		return fmt.Sprintf("%d SR-IOV VFs enabled", len(g.VFs))
	}
	return ""
}
