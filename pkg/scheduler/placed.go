package scheduler

import (
	"slices"
	"sort"
	"strings"

	"github.com/gpuvm/gpuvm/pkg/gpu"
)

// PlacementOf returns the devices VM id holds, as Place would have
// described them (memory and share included): what quotas and usage count
// for a VM that was placed in an earlier cycle and is known only by its
// allocation rows.
func (inv *Inventory) PlacementOf(id string) (Placement, bool) {
	gis, ok := inv.allocs[id]
	if !ok {
		return Placement{}, false
	}
	var p Placement
	for _, gi := range gis {
		g := &inv.gpus[gi]
		info := inv.models[g.model]
		p.Host = inv.hosts[g.host].name
		for _, in := range g.inst {
			if in.id == id {
				mp := info.mt.t.Profiles[in.prof]
				p.Devices = append(p.Devices, Device{GPU: g.addr, Kind: gpu.KindMIG, Profile: mp.Name, Start: in.start, Size: mp.Size,
					Memory: uint64(mp.MemoryGB) * gpu.GiB, Share: migShare(info.mt.t, mp)})
			}
		}
		for _, v := range g.vgpus {
			if v.id == id {
				d := Device{GPU: g.addr, Kind: gpu.KindVGPU, Type: v.typ, Memory: v.mem}
				if info.m.Memory > 0 {
					d.Share = float64(v.mem) / float64(info.m.Memory)
				}
				p.Devices = append(p.Devices, d)
			}
		}
		if g.owner == id && !g.companion {
			d := Device{GPU: g.addr, Kind: gpu.KindPassthrough, Memory: info.m.Memory, Share: 1}
			for _, o := range g.group {
				d.Group = append(d.Group, inv.gpus[o].addr)
				d.Share++
			}
			sort.Strings(d.Group)
			p.Devices = append(p.Devices, d)
		}
	}
	sort.SliceStable(p.Devices, func(i, j int) bool {
		a, b := p.Devices[i], p.Devices[j]
		if a.GPU != b.GPU {
			return a.GPU < b.GPU
		}
		return a.Start < b.Start
	})
	return p, len(p.Devices) > 0
}

// MergeByHost merges placements (one VM's devices each) into one placement
// per host, in host order, each host's devices in the order given: how a
// booking records the devices it pins.
func MergeByHost(ps []Placement) []Placement {
	var out []Placement
	for _, p := range ps {
		i := slices.IndexFunc(out, func(q Placement) bool { return q.Host == p.Host })
		if i < 0 {
			out = append(out, Placement{Host: p.Host})
			i = len(out) - 1
		}
		out[i].Devices = append(out[i].Devices, p.Devices...)
	}
	slices.SortStableFunc(out, func(a, b Placement) int { return strings.Compare(a.Host, b.Host) })
	return out
}
