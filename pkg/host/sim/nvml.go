//go:build cgo

package sim

import (
	"fmt"
	"sort"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/google/uuid"

	"github.com/gpuvm/gpuvm/pkg/gpu"
	"github.com/gpuvm/gpuvm/pkg/host"
)

// DriverVersion is what the simulated NVML reports as the driver version; it
// says that it is simulated.
const DriverVersion = "simulated"

// ciSlices maps NVML compute-instance profile indices to compute slices.
var ciSlices = map[int]int{
	nvml.COMPUTE_INSTANCE_PROFILE_1_SLICE: 1,
	nvml.COMPUTE_INSTANCE_PROFILE_2_SLICE: 2,
	nvml.COMPUTE_INSTANCE_PROFILE_3_SLICE: 3,
	nvml.COMPUTE_INSTANCE_PROFILE_4_SLICE: 4,
	nvml.COMPUTE_INSTANCE_PROFILE_7_SLICE: 7,
}

// NVML returns the simulated server's NVML. Only GPUs bound to the nvidia
// driver are visible, as with the real library. Calls the simulator does not
// implement return ERROR_NOT_SUPPORTED rather than panic.
func (h *Host) NVML() nvml.Interface {
	lib := &mock.Interface{
		InitFunc:                   func() nvml.Return { return nvml.SUCCESS },
		ShutdownFunc:               func() nvml.Return { return nvml.SUCCESS },
		ErrorStringFunc:            func(r nvml.Return) string { return r.Error() },
		SystemGetDriverVersionFunc: func() (string, nvml.Return) { return DriverVersion, nvml.SUCCESS },
	}
	lib.DeviceGetCountFunc = func() (int, nvml.Return) {
		addrs, ret := h.visible()
		return len(addrs), ret
	}
	lib.DeviceGetHandleByIndexFunc = func(i int) (nvml.Device, nvml.Return) {
		addrs, ret := h.visible()
		if ret != nvml.SUCCESS {
			return nil, ret
		}
		if i < 0 || i >= len(addrs) {
			return nil, nvml.ERROR_INVALID_ARGUMENT
		}
		return h.device(addrs[i], i), nvml.SUCCESS
	}
	lib.DeviceGetHandleByPciBusIdFunc = func(busID string) (nvml.Device, nvml.Return) {
		addr := host.AddressFromNVML(busID)
		addrs, ret := h.visible()
		if ret != nvml.SUCCESS {
			return nil, ret
		}
		for i, a := range addrs {
			if a == addr {
				return h.device(a, i), nvml.SUCCESS
			}
		}
		return nil, nvml.ERROR_NOT_FOUND
	}
	lib.DeviceGetHandleByUUIDFunc = func(u string) (nvml.Device, nvml.Return) {
		addrs, ret := h.visible()
		if ret != nvml.SUCCESS {
			return nil, ret
		}
		for i, a := range addrs {
			if h.gpuUUID(a) == u {
				return h.device(a, i), nvml.SUCCESS
			}
		}
		return nil, nvml.ERROR_NOT_FOUND
	}
	return lib
}

// visible lists the addresses of GPUs bound to nvidia, in PCI order.
func (h *Host) visible() ([]string, nvml.Return) {
	s, _, err := h.st.read()
	if err != nil {
		return nil, nvml.ERROR_UNKNOWN
	}
	var out []string
	for _, g := range s.GPUs {
		if g.Driver == "nvidia" {
			out = append(out, g.Address)
		}
	}
	sort.Strings(out)
	return out, nvml.SUCCESS
}

func (h *Host) gpuUUID(addr string) string {
	return "GPU-" + uuid.NewSHA1(uuid.NameSpaceOID, []byte("gpuvm-sim/"+h.preset+"/"+addr)).String()
}

// withGPU runs fn on the current state of the GPU at addr.
func (h *Host) withGPU(addr string, fn func(g *gpuState) nvml.Return) nvml.Return {
	s, _, err := h.st.read()
	if err != nil {
		return nvml.ERROR_UNKNOWN
	}
	g := s.gpu(addr)
	if g == nil || g.Driver != "nvidia" {
		return nvml.ERROR_GPU_IS_LOST
	}
	return fn(g)
}

// updateGPU applies fn to the GPU at addr under the state lock; the change is
// saved only when fn returns SUCCESS.
func (h *Host) updateGPU(addr string, fn func(s *state, g *gpuState) nvml.Return) nvml.Return {
	ret := nvml.SUCCESS
	err := h.st.update(func(s *state, _ *tree) error {
		g := s.gpu(addr)
		if g == nil || g.Driver != "nvidia" {
			ret = nvml.ERROR_GPU_IS_LOST
		} else {
			ret = fn(s, g)
		}
		if ret != nvml.SUCCESS {
			return ret
		}
		return nil
	})
	if err != nil && ret == nvml.SUCCESS {
		return nvml.ERROR_UNKNOWN
	}
	return ret
}

func migProfileByIndex(m gpu.Model, idx int) (gpu.MIGProfile, bool) {
	if m.MIG == nil {
		return gpu.MIGProfile{}, false
	}
	for _, p := range m.MIG.Profiles {
		if p.NVMLProfile == idx {
			return p, true
		}
	}
	return gpu.MIGProfile{}, false
}

func giProfileInfo(p gpu.MIGProfile) nvml.GpuInstanceProfileInfo {
	return nvml.GpuInstanceProfileInfo{
		Id: uint32(p.ID), SliceCount: uint32(p.Compute), InstanceCount: uint32(p.Max),
		MultiprocessorCount: uint32(p.Compute * 14), MemorySizeMB: uint64(p.MemoryGB) * 1024,
	}
}

func (h *Host) device(addr string, index int) nvml.Device {
	d := &mock.Device{}
	h.identify(d, addr, index)
	h.reportState(d, addr)
	h.migProfiles(d, addr)
	h.migInstances(d, addr, index)
	return d
}

// identify answers what the GPU is: its index, UUID, name and PCI address.
func (h *Host) identify(d *mock.Device, addr string, index int) {
	d.GetIndexFunc = func() (int, nvml.Return) { return index, nvml.SUCCESS }
	d.GetUUIDFunc = func() (string, nvml.Return) { return h.gpuUUID(addr), nvml.SUCCESS }
	d.GetNameFunc = func() (string, nvml.Return) {
		var name string
		ret := h.withGPU(addr, func(g *gpuState) nvml.Return { name = "NVIDIA " + g.model().Name; return nvml.SUCCESS })
		return name, ret
	}
	d.GetPciInfoFunc = func() (nvml.PciInfo, nvml.Return) {
		var info nvml.PciInfo
		ret := h.withGPU(addr, func(g *gpuState) nvml.Return {
			info.PciDeviceId = uint32(g.Device)<<16 | gpu.VendorNVIDIA
			putCString(info.BusId[:], host.NVMLBusID(addr))
			putCString(info.BusIdLegacy[:], strings.ToUpper(addr))
			var bus, dev uint32
			fmt.Sscanf(addr, "0000:%x:%x.", &bus, &dev)
			info.Bus, info.Device = bus, dev
			return nvml.SUCCESS
		})
		return info, ret
	}
}

// reportState answers what the GPU holds now: memory, MIG and vGPU modes,
// utilisation.
func (h *Host) reportState(d *mock.Device, addr string) {
	d.GetMemoryInfoFunc = func() (nvml.Memory, nvml.Return) {
		var mem nvml.Memory
		ret := h.withGPU(addr, func(g *gpuState) nvml.Return {
			mem.Total = g.model().Memory
			for _, v := range g.vgpus() {
				mem.Used += v.t.Memory
			}
			mem.Free = mem.Total - mem.Used
			return nvml.SUCCESS
		})
		return mem, ret
	}
	d.GetMigModeFunc = func() (int, int, nvml.Return) {
		mode := nvml.DEVICE_MIG_DISABLE
		ret := h.withGPU(addr, func(g *gpuState) nvml.Return {
			if g.model().MIG == nil {
				return nvml.ERROR_NOT_SUPPORTED
			}
			if g.MIGMode {
				mode = nvml.DEVICE_MIG_ENABLE
			}
			return nvml.SUCCESS
		})
		return mode, mode, ret
	}
	d.GetVgpuHeterogeneousModeFunc = func() (nvml.VgpuHeterogeneousMode, nvml.Return) {
		var hm nvml.VgpuHeterogeneousMode
		ret := h.withGPU(addr, func(g *gpuState) nvml.Return {
			if !g.model().VGPU {
				return nvml.ERROR_NOT_SUPPORTED
			}
			if g.MixedSize {
				hm.Mode = 1
			}
			return nvml.SUCCESS
		})
		return hm, ret
	}
	// The simulated vGPU manager supports migration on every vGPU-capable
	// GPU (pgpuVirtualizationCaps bit 0, as vGPU 17+ on KVM reports);
	// others are not driven by a vGPU manager.
	d.GetVgpuMetadataFunc = func() (nvml.VgpuPgpuMetadata, nvml.Return) {
		var md nvml.VgpuPgpuMetadata
		ret := h.withGPU(addr, func(g *gpuState) nvml.Return {
			if !g.model().VGPU {
				return nvml.ERROR_NOT_SUPPORTED
			}
			putCString(md.HostDriverVersion[:], DriverVersion)
			md.PgpuVirtualizationCaps = 1
			return nvml.SUCCESS
		})
		return md, ret
	}
	d.GetUtilizationRatesFunc = func() (nvml.Utilization, nvml.Return) {
		s, _, err := h.st.read()
		if err != nil {
			return nvml.Utilization{}, nvml.ERROR_UNKNOWN
		}
		u := uint32(s.Utilization[addr])
		return nvml.Utilization{Gpu: u, Memory: u}, nvml.SUCCESS
	}
}

// migProfiles answers the GPU instance profiles and their placements.
func (h *Host) migProfiles(d *mock.Device, addr string) {
	d.GetGpuInstanceProfileInfoFunc = func(idx int) (nvml.GpuInstanceProfileInfo, nvml.Return) {
		var info nvml.GpuInstanceProfileInfo
		ret := h.withGPU(addr, func(g *gpuState) nvml.Return {
			if g.model().MIG == nil {
				return nvml.ERROR_NOT_SUPPORTED
			}
			p, ok := migProfileByIndex(g.model(), idx)
			if !ok {
				return nvml.ERROR_NOT_SUPPORTED
			}
			info = giProfileInfo(p)
			return nvml.SUCCESS
		})
		return info, ret
	}
	d.GetGpuInstancePossiblePlacementsFunc = func(info *nvml.GpuInstanceProfileInfo) ([]nvml.GpuInstancePlacement, nvml.Return) {
		var out []nvml.GpuInstancePlacement
		ret := h.withGPU(addr, func(g *gpuState) nvml.Return {
			p, ret := g.profileFor(info)
			if ret != nvml.SUCCESS {
				return ret
			}
			for _, start := range g.model().MIG.FreeStarts(g.migInstances(), p) {
				out = append(out, nvml.GpuInstancePlacement{Start: uint32(start), Size: uint32(p.Size)})
			}
			return nvml.SUCCESS
		})
		return out, ret
	}
}

// migInstances creates and lists the GPU instances.
func (h *Host) migInstances(d *mock.Device, addr string, index int) {
	create := func(info *nvml.GpuInstanceProfileInfo, placement *nvml.GpuInstancePlacement) (nvml.GpuInstance, nvml.Return) {
		var id int
		ret := h.updateGPU(addr, func(s *state, g *gpuState) nvml.Return {
			p, ret := g.profileFor(info)
			if ret != nvml.SUCCESS {
				return ret
			}
			start := -1
			if placement == nil { // NVML's own choice: first fit from slot 0
				if free := g.model().MIG.FreeStarts(g.migInstances(), p); len(free) > 0 {
					start = free[0]
				} else {
					return nvml.ERROR_INSUFFICIENT_RESOURCES
				}
			} else {
				if int(placement.Size) != p.Size {
					return nvml.ERROR_INVALID_ARGUMENT
				}
				start = int(placement.Start)
				valid := false
				for _, s := range p.Starts {
					valid = valid || s == start
				}
				if !valid {
					return nvml.ERROR_INVALID_ARGUMENT
				}
				if g.model().MIG.CanPlace(g.migInstances(), p, start) != nil {
					return nvml.ERROR_INSUFFICIENT_RESOURCES
				}
			}
			id = lowestFree(func(i int) bool { return g.gi(i) != nil }, 1)
			g.GIs = append(g.GIs, &giState{ID: id, ProfileID: p.ID, Start: start})
			return nvml.SUCCESS
		})
		if ret != nvml.SUCCESS {
			return nil, ret
		}
		return h.gpuInstance(addr, index, id), nvml.SUCCESS
	}
	d.CreateGpuInstanceFunc = func(info *nvml.GpuInstanceProfileInfo) (nvml.GpuInstance, nvml.Return) {
		return create(info, nil)
	}
	d.CreateGpuInstanceWithPlacementFunc = create
	d.GetGpuInstancesFunc = func(info *nvml.GpuInstanceProfileInfo) ([]nvml.GpuInstance, nvml.Return) {
		var out []nvml.GpuInstance
		ret := h.withGPU(addr, func(g *gpuState) nvml.Return {
			if !g.MIGMode {
				return nvml.ERROR_NOT_SUPPORTED
			}
			for _, gi := range g.GIs {
				if uint32(gi.ProfileID) == info.Id {
					out = append(out, h.gpuInstance(addr, index, gi.ID))
				}
			}
			return nvml.SUCCESS
		})
		return out, ret
	}
	d.GetGpuInstanceByIdFunc = func(id int) (nvml.GpuInstance, nvml.Return) {
		ret := h.withGPU(addr, func(g *gpuState) nvml.Return {
			if !g.MIGMode {
				return nvml.ERROR_NOT_SUPPORTED
			}
			if g.gi(id) == nil {
				return nvml.ERROR_NOT_FOUND
			}
			return nvml.SUCCESS
		})
		if ret != nvml.SUCCESS {
			return nil, ret
		}
		return h.gpuInstance(addr, index, id), nvml.SUCCESS
	}
}

// profileFor checks that the GPU is in MIG mode and finds the profile info's
// profile in the GPU's table.
func (g *gpuState) profileFor(info *nvml.GpuInstanceProfileInfo) (gpu.MIGProfile, nvml.Return) {
	m := g.model()
	if m.MIG == nil {
		return gpu.MIGProfile{}, nvml.ERROR_NOT_SUPPORTED
	}
	if !g.MIGMode {
		return gpu.MIGProfile{}, nvml.ERROR_NOT_SUPPORTED
	}
	if info == nil {
		return gpu.MIGProfile{}, nvml.ERROR_INVALID_ARGUMENT
	}
	p, ok := m.MIG.ProfileByID(int(info.Id))
	if !ok {
		return gpu.MIGProfile{}, nvml.ERROR_INVALID_ARGUMENT
	}
	return p, nvml.SUCCESS
}

func lowestFree(taken func(int) bool, from int) int {
	i := from
	for taken(i) {
		i++
	}
	return i
}

func (h *Host) gpuInstance(addr string, index, id int) nvml.GpuInstance {
	gi := &mock.GpuInstance{}
	withGI := func(fn func(g *gpuState, gi *giState) nvml.Return) nvml.Return {
		return h.withGPU(addr, func(g *gpuState) nvml.Return {
			x := g.gi(id)
			if x == nil {
				return nvml.ERROR_NOT_FOUND
			}
			return fn(g, x)
		})
	}
	updateGI := func(fn func(s *state, g *gpuState, gi *giState) nvml.Return) nvml.Return {
		return h.updateGPU(addr, func(s *state, g *gpuState) nvml.Return {
			x := g.gi(id)
			if x == nil {
				return nvml.ERROR_NOT_FOUND
			}
			return fn(s, g, x)
		})
	}
	gi.GetInfoFunc = func() (nvml.GpuInstanceInfo, nvml.Return) {
		var info nvml.GpuInstanceInfo
		ret := withGI(func(g *gpuState, x *giState) nvml.Return {
			p, _ := g.model().MIG.ProfileByID(x.ProfileID)
			info = nvml.GpuInstanceInfo{Device: h.device(addr, index), Id: uint32(x.ID), ProfileId: uint32(x.ProfileID),
				Placement: nvml.GpuInstancePlacement{Start: uint32(x.Start), Size: uint32(p.Size)}}
			return nvml.SUCCESS
		})
		return info, ret
	}
	gi.DestroyFunc = func() nvml.Return {
		return updateGI(func(s *state, g *gpuState, x *giState) nvml.Return {
			if len(x.CIs) > 0 {
				return nvml.ERROR_IN_USE
			}
			for _, v := range g.vgpus() {
				if v.gi == x.ID {
					return nvml.ERROR_IN_USE
				}
			}
			for i, y := range g.GIs {
				if y.ID == x.ID {
					g.GIs = append(g.GIs[:i], g.GIs[i+1:]...)
					break
				}
			}
			return nvml.SUCCESS
		})
	}
	gi.GetComputeInstanceProfileInfoFunc = func(ciProfile, engProfile int) (nvml.ComputeInstanceProfileInfo, nvml.Return) {
		var info nvml.ComputeInstanceProfileInfo
		ret := withGI(func(g *gpuState, x *giState) nvml.Return {
			slices, ok := ciSlices[ciProfile]
			p, _ := g.model().MIG.ProfileByID(x.ProfileID)
			if !ok || engProfile != nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED || slices > p.Compute {
				return nvml.ERROR_NOT_SUPPORTED
			}
			info = nvml.ComputeInstanceProfileInfo{Id: uint32(ciProfile), SliceCount: uint32(slices),
				InstanceCount: uint32(p.Compute / slices), MultiprocessorCount: uint32(slices * 14)}
			return nvml.SUCCESS
		})
		return info, ret
	}
	gi.CreateComputeInstanceFunc = func(info *nvml.ComputeInstanceProfileInfo) (nvml.ComputeInstance, nvml.Return) {
		var ciID int
		ret := updateGI(func(s *state, g *gpuState, x *giState) nvml.Return {
			if info == nil {
				return nvml.ERROR_INVALID_ARGUMENT
			}
			slices, ok := ciSlices[int(info.Id)]
			if !ok {
				return nvml.ERROR_INVALID_ARGUMENT
			}
			p, _ := g.model().MIG.ProfileByID(x.ProfileID)
			used := 0
			for _, c := range x.CIs {
				used += ciSlices[c.Profile]
			}
			if used+slices > p.Compute {
				return nvml.ERROR_INSUFFICIENT_RESOURCES
			}
			ciID = lowestFree(func(i int) bool {
				for _, c := range x.CIs {
					if c.ID == i {
						return true
					}
				}
				return false
			}, 0)
			x.CIs = append(x.CIs, &ciState{ID: ciID, Profile: int(info.Id)})
			return nvml.SUCCESS
		})
		if ret != nvml.SUCCESS {
			return nil, ret
		}
		return h.computeInstance(addr, index, id, ciID, gi), nvml.SUCCESS
	}
	gi.GetComputeInstancesFunc = func(info *nvml.ComputeInstanceProfileInfo) ([]nvml.ComputeInstance, nvml.Return) {
		var out []nvml.ComputeInstance
		ret := withGI(func(g *gpuState, x *giState) nvml.Return {
			for _, c := range x.CIs {
				if info == nil || uint32(c.Profile) == info.Id {
					out = append(out, h.computeInstance(addr, index, id, c.ID, gi))
				}
			}
			return nvml.SUCCESS
		})
		return out, ret
	}
	gi.GetComputeInstanceByIdFunc = func(ciID int) (nvml.ComputeInstance, nvml.Return) {
		ret := withGI(func(g *gpuState, x *giState) nvml.Return {
			for _, c := range x.CIs {
				if c.ID == ciID {
					return nvml.SUCCESS
				}
			}
			return nvml.ERROR_NOT_FOUND
		})
		if ret != nvml.SUCCESS {
			return nil, ret
		}
		return h.computeInstance(addr, index, id, ciID, gi), nvml.SUCCESS
	}
	return gi
}

func (h *Host) computeInstance(addr string, index, giID, ciID int, parent nvml.GpuInstance) nvml.ComputeInstance {
	ci := &mock.ComputeInstance{}
	ci.GetInfoFunc = func() (nvml.ComputeInstanceInfo, nvml.Return) {
		var info nvml.ComputeInstanceInfo
		ret := h.withGPU(addr, func(g *gpuState) nvml.Return {
			x := g.gi(giID)
			if x == nil {
				return nvml.ERROR_NOT_FOUND
			}
			for _, c := range x.CIs {
				if c.ID == ciID {
					info = nvml.ComputeInstanceInfo{Device: h.device(addr, index), GpuInstance: parent, Id: uint32(c.ID), ProfileId: uint32(c.Profile)}
					return nvml.SUCCESS
				}
			}
			return nvml.ERROR_NOT_FOUND
		})
		return info, ret
	}
	ci.DestroyFunc = func() nvml.Return {
		return h.updateGPU(addr, func(s *state, g *gpuState) nvml.Return {
			x := g.gi(giID)
			if x == nil {
				return nvml.ERROR_NOT_FOUND
			}
			for i, c := range x.CIs {
				if c.ID == ciID {
					x.CIs = append(x.CIs[:i], x.CIs[i+1:]...)
					return nvml.SUCCESS
				}
			}
			return nvml.ERROR_NOT_FOUND
		})
	}
	return ci
}

func putCString(dst []int8, s string) {
	for i := 0; i < len(s) && i < len(dst)-1; i++ {
		dst[i] = int8(s[i])
	}
}
