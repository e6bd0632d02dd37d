package scheduler

import (
	"fmt"
	"sort"
	"strings"

	"github.com/gpuvm/gpuvm/pkg/gpu"
)

// FromHost turns what one host's backends report together (backend.Merge)
// into a HostSpec and the allocations of the devices that
// exist. allow gives each GPU's configured mode (profile.Host.Settings);
// nil leaves every GPU on auto. A device the orchestrator does not know (no
// VM) still holds its capacity, as VM "device:<id>". A GPU no backend can
// create on is Unavailable, with their reasons.
//
// The backends do not switch a GPU's mode (MIG on or off, SR-IOV VFs): a
// GPU serves the kinds whose backend can create on it now. So a GPU on
// auto that exactly one backend can use gets that backend's mode, and a GPU
// pinned to a mode whose backend cannot use it now is Unavailable with that
// backend's reason, so that the scheduler never chooses a device the
// backend would refuse.
func FromHost(name string, hi gpu.HostInventory, allow func(address, model string) gpu.Mode) (HostSpec, []Allocation) {
	h := HostSpec{Name: name}
	for _, g := range hi.GPUs {
		s := GPUSpec{Address: g.Address, Model: g.Model, Memory: g.Memory, IOMMUGroup: g.IOMMUGroup, MixedSize: g.MixedSize, Allow: gpu.ModeAuto}
		if id, ok := strings.CutPrefix(strings.ToLower(g.DeviceID), "10de:"); ok {
			s.Model = "10de:" + id
		}
		switch g.Mode {
		case gpu.ModeVGPU, gpu.ModeMIG, gpu.ModePassthrough:
			s.Mode = g.Mode
		default:
			s.Mode = gpu.ModeIdle
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
		} else if len(names) > 0 {
			narrow(&s, g.Backends)
		}
		h.GPUs = append(h.GPUs, s)
	}
	var allocs []Allocation
	for _, d := range gpu.UniqueDevices(hi.Devices) {
		a := Allocation{ID: d.VMUUID, Host: name, GPU: d.GPU, Kind: d.Kind}
		if a.ID == "" {
			a.ID = "device:" + d.ID
		}
		switch a.Kind {
		case gpu.KindMIG:
			a.Profile = d.Profile
			if d.Placement != nil {
				a.Start = *d.Placement
			}
		case gpu.KindVGPU:
			a.Type = d.Type
		}
		allocs = append(allocs, a)
	}
	return h, allocs
}

// backendModes are the GPU modes the backends serve, by backend name.
var backendModes = map[string]gpu.Mode{"vgpu": gpu.ModeVGPU, "mig": gpu.ModeMIG, "passthrough": gpu.ModePassthrough}

// narrow restricts a GPU that some backend can use to the modes the
// backends that can use it serve (see FromHost).
func narrow(s *GPUSpec, backends map[string]string) {
	var avail []gpu.Mode
	for b, why := range backends {
		if m, ok := backendModes[b]; ok && why == "" {
			avail = append(avail, m)
		}
	}
	sort.Slice(avail, func(i, j int) bool { return avail[i] < avail[j] })
	if s.Allow != gpu.ModeAuto && s.Allow != "" {
		for _, m := range avail {
			if m == s.Allow {
				return
			}
		}
		for b, m := range backendModes {
			if m == s.Allow {
				if why, ok := backends[b]; ok {
					s.Unavailable = fmt.Sprintf("configured for %s: %s: %s", s.Allow, b, why)
				} else {
					s.Unavailable = fmt.Sprintf("configured for %s, and no %s backend reports it", s.Allow, b)
				}
			}
		}
		return
	}
	if len(avail) != 1 {
		return
	}
	m, err := lookupModel(s.Model)
	if err != nil {
		return
	}
	switch {
	case avail[0] == gpu.ModeMIG && m.MIG == nil, avail[0] == gpu.ModeVGPU && !m.VGPU:
		return // the board says otherwise: leave the choice to the configuration
	}
	s.Allow = avail[0]
}
