package api

import "time"

// States of a host (Host.State, HostDrainState.State, VM.HostState).
const (
	HostUp       = "up"
	HostDown     = "down"
	HostDraining = "draining"
)

// Host is one gpuvmd of the fleet as GET /v1/hosts shows it.
type Host struct {
	Name string `json:"name"`
	// State is up, down or draining; a host whose heartbeat is older than
	// three heartbeat intervals is down whatever its row says.
	State   string `json:"state"`
	Version string `json:"version,omitempty"`
	// APIURL is where the host's gpuvmd answers (admins only).
	APIURL       string    `json:"api_url,omitempty"`
	StartedAt    time.Time `json:"started_at"`
	HeartbeatAt  time.Time `json:"heartbeat_at"`
	HeartbeatAge float64   `json:"heartbeat_age_seconds"`
	Simulated    bool      `json:"simulated,omitempty"`
	// GPUs is how many GPUs the host has; DrainedGPUs how many of them
	// take no new VMs.
	GPUs        int `json:"gpus"`
	DrainedGPUs int `json:"drained_gpus"`
	// Free is what could still be placed on the host, as its last
	// heartbeat saw it (drained GPUs left out).
	Free Capacity `json:"free"`
	// Total is what the host could place if it held nothing, its drained
	// GPUs left out: "3 free of 28" is Free over Total.
	Total Capacity `json:"total"`
	// Leader marks the node that places the fleet's queue and runs its
	// once-only work (one at a time, elected through the database).
	Leader bool `json:"leader,omitempty"`
	// ThisNode marks the node that answered (admins only): a GPU is
	// drained through the gpuvmd of its own node.
	ThisNode bool `json:"this_node,omitempty"`
	// Driver is the host's NVIDIA driver as its last heartbeat saw it
	// (admins only; absent before gpuvmd stored it, or without NVML).
	Driver *HostDriver `json:"driver,omitempty"`
	// GPUDetail is every GPU of the host as its last heartbeat saw it,
	// with what holds each and the VM, owner and profile of each holder
	// (admins only): what the portal's fleet picture draws.
	GPUDetail []HostGPU `json:"gpu_detail,omitempty"`
}

// HostGPU is one GPU of a host in the fleet picture (GET /v1/hosts, admins).
type HostGPU struct {
	Address string `json:"address"`
	Model   string `json:"model"`
	// Mode is idle, vgpu, mig or passthrough.
	Mode    string `json:"mode"`
	Drained *Drain `json:"drained,omitempty"`
	// MIGComputeSlices and MIGMemorySlices are the lengths of the board's
	// MIG axes (7 and 8 on an A100, H100, H200 or B200) when it can do
	// MIG.
	MIGComputeSlices int `json:"mig_compute_slices,omitempty"`
	MIGMemorySlices  int `json:"mig_memory_slices,omitempty"`
	// VGPUTypes are the vGPU types the GPU offers or holds: how many are
	// made and how many more could be.
	VGPUTypes []VGPUUse `json:"vgpu_types,omitempty"`
	// Held are the devices made on the GPU (a MIG instance, a vGPU, the
	// whole GPU passed through), each with its holder.
	Held []HeldDevice `json:"held"`
}

// VGPUUse is one vGPU type of a GPU: made (Used) and still possible (Free).
type VGPUUse struct {
	Type string `json:"type"`
	Used int    `json:"used"`
	Free int    `json:"free"`
}

// HeldDevice is a device on a GPU and what holds it.
type HeldDevice struct {
	ID   string `json:"id"`
	Kind string `json:"kind"` // mig, vgpu or passthrough
	// Type is the vGPU type or the MIG profile.
	Type string `json:"type,omitempty"`
	// MIG is where a MIG instance lies on the GPU's slices.
	MIG *MIGPlacement `json:"mig,omitempty"`
	// VMID is the VM the device was made for ("" when none is named);
	// VM is that VM when gpuvm knows it (nil: a device gpuvm did not
	// make, or of a VM it no longer has).
	VMID string      `json:"vm_id,omitempty"`
	VM   *DeviceUser `json:"vm,omitempty"`
}

// MIGPlacement is the slices a MIG GPU instance takes: memory slices
// [MemoryStart, MemoryStart+MemorySize) and compute slices
// [ComputeStart, ComputeStart+ComputeSize).
type MIGPlacement struct {
	MemoryStart  int `json:"memory_start"`
	MemorySize   int `json:"memory_size"`
	ComputeStart int `json:"compute_start"`
	ComputeSize  int `json:"compute_size"`
}

// DeviceUser is the VM that holds a device.
type DeviceUser struct {
	ID      string `json:"id"`
	Name    string `json:"name"`
	Owner   string `json:"owner"`
	Profile string `json:"profile"`
	State   string `json:"state"`
}

// Capacity summarises free GPU capacity.
type Capacity struct {
	// IdleGPUs are GPUs with no device on them, for any mode (a whole
	// GPU, MIG or vGPU).
	IdleGPUs int `json:"idle_gpus"`
	// VGPU is how many more vGPUs of each type can be made.
	VGPU map[string]int `json:"vgpu,omitempty"`
	// MIG is how many more instances of each MIG profile fit, each
	// profile counted on its own.
	MIG map[string]int `json:"mig,omitempty"`
	// SplitGPUs counts, by mode (mig, vgpu), the GPUs already in MIG or
	// vGPU mode that could still take a device: not idle, yet not full
	// ("1 idle GPU" of 8 does not mean 7 are busy).
	SplitGPUs map[string]int `json:"split_gpus,omitempty"`
}

// HostList is the answer to GET /v1/hosts, by name.
type HostList struct {
	Items []Host `json:"items"`
}

// DrainRequest is the body of POST /v1/admin/gpus/{address}/drain; it may
// be empty.
type DrainRequest struct {
	// Reason is shown to users whose VMs wait for the GPU: one line, at
	// most 200 characters.
	Reason string `json:"reason,omitempty"`
}

// HostDrainState is the answer to POST and DELETE
// /v1/admin/hosts/{name}/drain: the node, its state, and what stays on it.
type HostDrainState struct {
	Host string `json:"host"`
	// State is draining after a drain, else up (or down when its
	// heartbeat stopped).
	State string `json:"state"`
	// VMs are the VMs placed on the node that are not deleted: they stay
	// on it. Their disks are local to the node, so gpuvm cannot move them
	// to another; they end when deleted or when their lease ends.
	VMs []string `json:"vms"`
	// Message says it in a sentence.
	Message string `json:"message"`
}

// GPUDrainState is the answer to drain and undrain: the GPU and its drain
// (nil once undrained).
type GPUDrainState struct {
	Host    string `json:"host"`
	Address string `json:"address"`
	Drained *Drain `json:"drained"`
}
