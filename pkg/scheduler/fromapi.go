package scheduler

import (
	"sort"
	"strings"

	"github.com/gpuvm/gpuvm/pkg/api"
)

// FromAPI turns what one host's backends report (backend.Merge, `gpuvm host
// inventory --json`) into a HostSpec and the allocations of the devices that
// exist. allow gives each GPU's configured mode (profile.Host.Settings);
// nil leaves every GPU on auto. A device the orchestrator does not know (no
// VM) still holds its capacity, as VM "device:<id>". A GPU no backend can
// create on is Unavailable, with their reasons.
func FromAPI(name string, hi api.HostInventory, allow func(address, model string) Mode) (HostSpec, []Allocation) {
	h := HostSpec{Name: name}
	for _, g := range hi.GPUs {
		s := GPUSpec{Address: g.Address, Model: g.Model, Memory: g.Memory, IOMMUGroup: g.IOMMUGroup, MixedSize: g.MixedSize, Allow: ModeAuto}
		if id, ok := strings.CutPrefix(strings.ToLower(g.DeviceID), "10de:"); ok {
			s.Model = "10de:" + id
		}
		switch Mode(g.Mode) {
		case ModeVGPU, ModeMIG, ModePassthrough:
			s.Mode = Mode(g.Mode)
		default:
			s.Mode = ModeIdle
		}
		if allow != nil {
			s.Allow = allow(g.Address, g.Model)
		}
		var why []string
		names := make([]string, 0, len(g.Backends))
		for b := range g.Backends {
			names = append(names, b)
		}
		sort.Strings(names)
		for _, b := range names {
			if r := g.Backends[b]; r != "" {
				why = append(why, b+": "+r)
			}
		}
		if len(names) > 0 && len(why) == len(names) {
			s.Unavailable = strings.Join(why, "; ")
		}
		h.GPUs = append(h.GPUs, s)
	}
	var allocs []Allocation
	for _, d := range hi.Devices {
		a := Allocation{ID: d.VMUUID, Host: name, GPU: d.GPU, Kind: Kind(d.Kind)}
		if a.ID == "" {
			a.ID = "device:" + d.ID
		}
		switch a.Kind {
		case KindMIG:
			a.Profile = d.Profile
			if d.Placement != nil {
				a.Start = *d.Placement
			}
		case KindVGPU:
			a.Type = d.Type
		}
		allocs = append(allocs, a)
	}
	return h, allocs
}
