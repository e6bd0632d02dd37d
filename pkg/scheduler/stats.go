package scheduler

import "github.com/gpuvm/gpuvm/pkg/gpu"

// Stats summarises what an inventory holds.
type Stats struct {
	GPUs int `json:"gpus"`
	// Used is the GPUs' worth held: a whole GPU 1, a slice its share.
	Used float64 `json:"used"`
	// EmptyGPUs hold nothing.
	EmptyGPUs int `json:"empty_gpus"`
	// MIG memory slices of GPUs in MIG use or pinned to MIG: all, free, and
	// free but stranded (no profile can use them now: fragmentation).
	MIGSlices   int `json:"mig_slices"`
	MIGFree     int `json:"mig_free"`
	MIGStranded int `json:"mig_stranded"`
	// VGPUFree is the free framebuffer of GPUs that hold vGPUs, in bytes.
	VGPUFree uint64 `json:"vgpu_free"`
}

// Stats computes the summary.
func (inv *Inventory) Stats() Stats {
	var s Stats
	s.GPUs = len(inv.gpus)
	for gi := range inv.gpus {
		g := &inv.gpus[gi]
		info := inv.models[g.model]
		if g.n == 0 {
			s.EmptyGPUs++
		}
		switch {
		case g.owner != "":
			s.Used++
		case g.kind == gpu.KindMIG || (g.n == 0 && g.allow == gpu.ModeMIG && info.mt != nil):
			n := &info.mt.nodes[g.node]
			s.MIGSlices += info.mt.t.Slices
			s.MIGFree += n.free
			if g.n > 0 {
				s.MIGStranded += n.stranded
			}
			u := 0.0
			for _, in := range g.inst {
				u += migShare(info.mt.t, info.mt.t.Profiles[in.prof])
			}
			s.Used += min(u, 1) // 4g + 3g is a whole GPU, not 1.07
		case g.kind == gpu.KindVGPU:
			if info.m.Memory > 0 {
				s.Used += float64(g.vmem) / float64(info.m.Memory)
				s.VGPUFree += info.m.Memory - g.vmem
			}
		}
	}
	return s
}
