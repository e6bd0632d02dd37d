package orchestrator

import (
	"fmt"
	"time"

	"github.com/gpuvm/gpuvm/pkg/gpu"
	"github.com/gpuvm/gpuvm/pkg/scheduler"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// The scheduler (pkg/scheduler) chooses where a VM's devices go; this file
// turns its choice into what the database claims (store.SlotClaim: the
// units of a GPU, whose keys no two live allocations share) and what the
// VM is charged for (usage records). The backends are asked for exactly
// the devices claimed (createDevice): a MIG instance at the start slot the
// scheduler chose, not NVML's first fit.

func held(m map[string]map[string]bool, gpu string) map[string]bool {
	if m[gpu] == nil {
		m[gpu] = map[string]bool{}
	}
	return m[gpu]
}

// claimsOf turns a placement into slot claims: a MIG instance at the
// scheduler's start slot, a vGPU at the lowest index its GPU's live
// allocations leave free, a whole GPU.
func claimsOf(p scheduler.Placement, slots map[string]map[string]bool) ([]store.SlotClaim, error) {
	taken := map[string]map[string]bool{}
	var out []store.SlotClaim
	for _, d := range p.Devices {
		c := store.SlotClaim{Host: p.Host, GPUAddress: d.GPU, Backend: string(d.Kind), Kind: d.Kind}
		switch d.Kind {
		case gpu.KindMIG:
			c.Profile, c.PlacementStart, c.PlacementSize = d.Profile, d.Start, d.Size
		case gpu.KindVGPU:
			c.Profile, c.Index = d.Type, -1
			for i := range backendMaxVGPUs {
				k := fmt.Sprintf("vgpu:%d", i)
				if !slots[d.GPU][k] && !taken[d.GPU][k] {
					c.Index = i
					held(taken, d.GPU)[k] = true
					break
				}
			}
			if c.Index < 0 {
				return nil, fmt.Errorf("GPU %s has no free vGPU index", d.GPU)
			}
		case gpu.KindPassthrough:
		default:
			return nil, fmt.Errorf("device kind %q", d.Kind)
		}
		out = append(out, c)
	}
	return out, nil
}

// backendMaxVGPUs bounds the vGPU indexes of one GPU (no board has more
// vGPUs than this).
const backendMaxVGPUs = 64

// usageOf is the usage records a placement opens: one per GPU held, with
// the part of it held (a passthrough GPU's IOMMU-group companions are
// held whole too).
func usageOf(vm *store.VM, p scheduler.Placement, now time.Time) []store.UsageRecord {
	var out []store.UsageRecord
	add := func(addr string, kind gpu.Kind, prof string, share float64) {
		out = append(out, store.UsageRecord{VMID: vm.ID, User: vm.Owner, Group: vm.Group, Host: p.Host, GPUAddress: addr,
			Kind: kind, Profile: prof, Share: min(max(share, 1e-6), 1), StartedAt: now})
	}
	for _, d := range p.Devices {
		switch d.Kind {
		case gpu.KindMIG:
			add(d.GPU, d.Kind, d.Profile, d.Share)
		case gpu.KindVGPU:
			add(d.GPU, d.Kind, d.Type, d.Share)
		default:
			add(d.GPU, d.Kind, "", 1)
			for _, g := range d.Group {
				add(g, d.Kind, "", 1)
			}
		}
	}
	return out
}
