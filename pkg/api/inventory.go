package api

import (
	"time"

	"github.com/gpuvm/gpuvm/pkg/gpu"
)

// HostInventory is what `gpuvm host inventory --json` prints (and, later,
// GET /v1/gpus serves): every GPU of one host as the backends see it.
//
// Stability: fields are only ever added; none is renamed or removed within
// API version v1. Sizes are bytes; addresses are PCI addresses in the
// "0000:41:00.0" form.
type HostInventory struct {
	// Host describes what was inspected: "/sys", a captured tree, or a
	// simulated server. Simulated is true on the simulator.
	Host      string `json:"host"`
	Simulated bool   `json:"simulated"`
	// Backends lists the backends that answered.
	Backends []string `json:"backends"`
	// Notes are one-line explanations of what could not be seen
	// ("NVML unavailable: ..."), prefixed with the backend's name.
	Notes   []string `json:"notes,omitempty"`
	GPUs    []GPU    `json:"gpus"`
	Devices []Device `json:"devices"`
	// Driver is the host's NVIDIA driver as NVML reports it; absent when
	// no backend read it.
	Driver *HostDriver `json:"driver,omitempty"`
}

// HostDriver is a host's NVIDIA driver: its version and, for the vGPU
// manager, the vGPU versions (guest drivers) it supports.
type HostDriver struct {
	Version string `json:"version"` // "550.54.16"
	VGPUMin string `json:"vgpu_min,omitempty"`
	VGPUMax string `json:"vgpu_max,omitempty"`
}

// GPU is one physical GPU.
type GPU struct {
	Address  string `json:"address"`
	Model    string `json:"model"`
	DeviceID string `json:"device_id"` // "10de:2331"
	Memory   uint64 `json:"memory_bytes"`
	NUMANode int    `json:"numa_node"`
	Driver   string `json:"driver"`
	// Mode is idle, vgpu, mig or passthrough.
	Mode string `json:"mode"`
	// Interface is how vGPUs are made: mdev, vendor-vfio or passthrough-only.
	Interface    string       `json:"interface"`
	IOMMUGroup   string       `json:"iommu_group,omitempty"`
	GroupDevices []string     `json:"group_devices,omitempty"`
	MIGCapable   bool         `json:"mig_capable"`
	MIGEnabled   bool         `json:"mig_enabled"`
	MixedSize    bool         `json:"mixed_size"`
	VGPUTypes    []VGPUType   `json:"vgpu_types,omitempty"`
	MIGProfiles  []MIGProfile `json:"mig_profiles,omitempty"`
	// Backends maps each backend that knows the GPU to "" when it can
	// create on it now, or the reason it cannot.
	Backends map[string]string `json:"backends"`
	// Drained is set when an admin drained the GPU: it takes no new VMs
	// (GET /v1/gpus only; the host itself does not know).
	Drained *Drain `json:"drained,omitempty"`
}

// Drain says who drained a GPU, when and why.
type Drain struct {
	Reason string    `json:"reason,omitempty"`
	By     string    `json:"by"`
	Since  time.Time `json:"since"`
}

// VGPUType is a vGPU type offered on a GPU.
type VGPUType struct {
	Name         string `json:"name"` // "L40S-12Q"
	ID           string `json:"host_id"`
	Memory       uint64 `json:"memory_bytes"`
	MaxInstances int    `json:"max_instances"`
	Available    int    `json:"available"`
	MIGProfile   string `json:"mig_profile,omitempty"`
}

// MIGProfile is a MIG GPU-instance profile and where it still fits.
type MIGProfile struct {
	Name       string `json:"name"` // "3g.40gb"
	ID         int    `json:"id"`
	Slices     int    `json:"compute_slices"`
	Size       int    `json:"memory_slices"`
	Memory     uint64 `json:"memory_bytes"`
	Max        int    `json:"max_instances"`
	FreeStarts []int  `json:"free_starts"`
}

// Device is a GPU device that exists on the host.
type Device struct {
	ID              string  `json:"id"`
	Backend         string  `json:"backend"`
	Kind            string  `json:"kind"`
	GPU             string  `json:"gpu"`
	Type            string  `json:"type,omitempty"`
	Profile         string  `json:"mig_profile,omitempty"`
	Placement       *int    `json:"placement,omitempty"`
	GPUInstance     *int    `json:"gpu_instance,omitempty"`
	ComputeInstance *int    `json:"compute_instance,omitempty"`
	VMUUID          string  `json:"vm_uuid,omitempty"`
	Managed         bool    `json:"managed"`
	Hostdev         Hostdev `json:"hostdev"`
}

// Hostdev is how libvirt attaches a device.
type Hostdev struct {
	Type      string   `json:"type"` // mdev or pci
	UUID      string   `json:"uuid,omitempty"`
	Addresses []string `json:"addresses,omitempty"`
	Managed   bool     `json:"managed"`
	Display   bool     `json:"display"`
}

// FromHost is a host's merged inventory (backend.Merge) as the API shows
// it; no GPU is drained (the server marks those that are).
func FromHost(hi gpu.HostInventory) HostInventory {
	out := HostInventory{Host: hi.Host, Simulated: hi.Simulated, Backends: hi.Backends, Notes: hi.Notes,
		GPUs: make([]GPU, 0, len(hi.GPUs)), Devices: make([]Device, 0, len(hi.Devices))}
	if hi.GPUs == nil {
		out.GPUs = nil
	}
	if hi.Devices == nil {
		out.Devices = nil
	}
	for _, g := range hi.GPUs {
		ag := GPU{Address: g.Address, Model: g.Model, DeviceID: g.DeviceID, Memory: g.Memory, NUMANode: g.NUMANode,
			Driver: g.Driver, Mode: string(g.Mode), Interface: string(g.Interface), IOMMUGroup: g.IOMMUGroup,
			GroupDevices: g.GroupDevices, MIGCapable: g.MIGCapable, MIGEnabled: g.MIGEnabled, MixedSize: g.MixedSize,
			Backends: g.Backends}
		for _, t := range g.VGPUTypes {
			ag.VGPUTypes = append(ag.VGPUTypes, VGPUType(t))
		}
		for _, p := range g.MIGProfiles {
			ag.MIGProfiles = append(ag.MIGProfiles, MIGProfile(p))
		}
		out.GPUs = append(out.GPUs, ag)
	}
	if hi.Driver != nil {
		d := HostDriver(*hi.Driver)
		out.Driver = &d
	}
	for _, d := range hi.Devices {
		out.Devices = append(out.Devices, Device{ID: d.ID, Backend: d.Backend, Kind: string(d.Kind), GPU: d.GPU, Type: d.Type,
			Profile: d.Profile, Placement: d.Placement, GPUInstance: d.GPUInstance, ComputeInstance: d.ComputeInstance,
			VMUUID: d.VMUUID, Managed: d.Managed, Hostdev: Hostdev(d.Hostdev)})
	}
	return out
}
