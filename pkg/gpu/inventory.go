package gpu

// HostInventory is one host's GPUs as its backends see them together
// (backend.Merge): one record per GPU with each backend's verdict on it,
// and the devices that exist. The scheduler reads it (scheduler.FromHost);
// the REST API shows it (api.FromHost).
//
// Its JSON is what a heartbeat stores in hosts.inventory. It has the shape
// of api.HostInventory, which older gpuvmds stored there, so rows of either
// read alike; a test in pkg/api holds the two together.
type HostInventory struct {
	// Host describes what was inspected: "/sys", a captured tree, or a
	// simulated server. Simulated is true on the simulator.
	Host      string `json:"host"`
	Simulated bool   `json:"simulated"`
	// Backends lists the backends that answered.
	Backends []string `json:"backends"`
	// Notes are one-line explanations of what could not be seen,
	// prefixed with the backend's name.
	Notes   []string     `json:"notes,omitempty"`
	GPUs    []HostGPU    `json:"gpus"`
	Devices []HostDevice `json:"devices"`
	// Driver is the NVIDIA host driver as NVML reports it; nil when no
	// backend read it (and in rows stored before gpuvmd kept it).
	Driver *HostDriver `json:"driver,omitempty"`
}

// HostGPU is one physical GPU of a host.
type HostGPU struct {
	Address  string `json:"address"` // "0000:41:00.0"
	Model    string `json:"model"`
	DeviceID string `json:"device_id"` // "10de:2331"
	Memory   uint64 `json:"memory_bytes"`
	NUMANode int    `json:"numa_node"`
	Driver   string `json:"driver"`
	// Mode is the most specific mode a backend reports (idle when none
	// sees more).
	Mode         Mode          `json:"mode"`
	Interface    VGPUInterface `json:"interface"`
	IOMMUGroup   string        `json:"iommu_group,omitempty"`
	GroupDevices []string      `json:"group_devices,omitempty"`
	MIGCapable   bool          `json:"mig_capable"`
	MIGEnabled   bool          `json:"mig_enabled"`
	MixedSize    bool          `json:"mixed_size"`
	VGPUTypes    []VGPUOffer   `json:"vgpu_types,omitempty"`
	MIGProfiles  []MIGOffer    `json:"mig_profiles,omitempty"`
	// Backends maps each backend that knows the GPU to "" when it can
	// create on it now, or the reason it cannot.
	Backends map[string]string `json:"backends"`
}

// VGPUOffer is a vGPU type a GPU offers, and how many more it can make.
type VGPUOffer struct {
	Name         string `json:"name"`    // "L40S-12Q"
	ID           string `json:"host_id"` // "nvidia-558" (mdev) or "1145" (vendor VFIO)
	Memory       uint64 `json:"memory_bytes"`
	MaxInstances int    `json:"max_instances"`
	Available    int    `json:"available"`
	MIGProfile   string `json:"mig_profile,omitempty"` // of a MIG-backed type
}

// MIGOffer is a MIG GPU-instance profile of a GPU and where it still fits.
type MIGOffer struct {
	Name       string `json:"name"` // "3g.40gb"
	ID         int    `json:"id"`
	Slices     int    `json:"compute_slices"`
	Size       int    `json:"memory_slices"`
	Memory     uint64 `json:"memory_bytes"`
	Max        int    `json:"max_instances"`
	FreeStarts []int  `json:"free_starts"`
}

// HostDevice is a GPU device that exists on a host. Profile, Placement,
// GPUInstance and ComputeInstance are set for MIG devices only.
type HostDevice struct {
	ID              string  `json:"id"`
	Backend         string  `json:"backend"`
	Kind            Kind    `json:"kind"`
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

// UniqueDevices keeps one report of each device (a GPU and a device ID),
// in the order first seen. Two backends may report the same one: on the
// vendor-specific VFIO interface a MIG instance is given to a VM as a VF
// with a MIG-backed vGPU type, which the mig backend made (and knows the
// VM of) and the vgpu backend also sees. Counted twice it would make its
// GPU look over-full and show a holder with no VM next to the VM's. The
// report that names a VM wins, then the mig backend's, then the first.
func UniqueDevices(ds []HostDevice) []HostDevice {
	better := func(a, b HostDevice) bool { // a over b
		if (a.VMUUID != "") != (b.VMUUID != "") {
			return a.VMUUID != ""
		}
		return a.Kind == KindMIG && b.Kind != KindMIG
	}
	at := make(map[string]int, len(ds))
	out := make([]HostDevice, 0, len(ds))
	for _, d := range ds {
		key := d.GPU + "/" + d.ID
		if i, ok := at[key]; ok {
			if better(d, out[i]) {
				out[i] = d
			}
			continue
		}
		at[key] = len(out)
		out = append(out, d)
	}
	return out
}
