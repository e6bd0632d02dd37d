// Package backend is the contract between gpuvmd and its GPU backends: the Go
// interface every backend implements, the gRPC protocol that carries it across
// the go-plugin process boundary, and the shims on both sides.
//
// A backend knows one way of giving a VM a GPU (time-sliced vGPU, MIG, whole-GPU
// passthrough) and touches only the host: never the database, never libvirt.
package backend

import (
	"context"

	"github.com/gpuvm/gpuvm/pkg/gpu"
)

// Backend is what gpuvmd asks of a GPU backend. Every method honours ctx.
type Backend interface {
	// Info names the backend and the API versions it speaks. It is the only
	// call allowed before Configure.
	Info(ctx context.Context) (Info, error)
	// Configure tells the backend where the host is and which API version
	// to speak; it is called once after start, before any other call.
	Configure(ctx context.Context, cfg Config) error
	// Inventory reports the GPUs this backend can serve, their free capacity
	// and the devices it has created.
	Inventory(ctx context.Context) (Inventory, error)
	// Create makes a device for a VM and returns how to attach it.
	Create(ctx context.Context, req CreateRequest) (Device, error)
	// Remove deletes a device. Removing a device that does not exist is not
	// an error.
	Remove(ctx context.Context, req RemoveRequest) error
	// Health says whether the backend can work, and if not why.
	Health(ctx context.Context) (Health, error)
}

// Names of the three backends; each is also its plugin name and the suffix of
// its binary (gpuvm-backend-<name>).
const (
	NameVGPU        = "vgpu"
	NameMIG         = "mig"
	NamePassthrough = "passthrough"
)

// Names lists every backend gpuvm ships, in a stable order.
var Names = []string{NameVGPU, NameMIG, NamePassthrough}

// BinaryPrefix starts the file name of every backend binary.
const BinaryPrefix = "gpuvm-backend-"

// Info describes a backend binary.
type Info struct {
	Name        string   // "vgpu"
	Version     string   // the binary's version
	APIVersions []string // API versions it speaks, e.g. ["v1"]
	Description string
}

// NVMLMode says whether a backend may load NVML.
type NVMLMode string

// NVML modes.
const (
	NVMLAuto NVMLMode = "auto" // use it when the driver's library is present
	NVMLNone NVMLMode = "none" // never load it
)

// Config is what a backend is told at start.
type Config struct {
	APIVersion string
	// SysFSRoot is the sysfs to work on: "/sys", or a captured tree.
	SysFSRoot string
	// Simulate names a simulated server preset ("h100x8"); when set, SysFSRoot
	// and NVML are the simulator's.
	Simulate string
	// StateDir is where the backend keeps its ledger of created devices, and
	// where the simulated server keeps its state.
	StateDir string
	NVML     NVMLMode
	// Installation is the ID of the gpuvm installation the backend serves
	// (its database's): every device it makes is recorded with it, and it
	// removes no device of another installation.
	Installation string
}

// Inventory is one backend's view of the host.
type Inventory struct {
	Backend string
	// Host describes the host ("/sys", or "simulated GPU server (preset
	// h100x8)"); Simulated is true on the simulator, and every report says so.
	Host      string
	Simulated bool
	// Notes explain what the backend cannot see or do ("NVML unavailable:
	// ..."), one line each.
	Notes   []string
	GPUs    []GPU
	Devices []Device
	// Driver is the NVIDIA host driver as NVML reports it; nil without NVML.
	Driver *Driver
}

// Driver is the NVIDIA host driver: its version and, for the vGPU manager,
// the range of vGPU versions (guest drivers) it supports.
type Driver struct {
	Version string // "550.54.16"
	// VGPUMin and VGPUMax bound the vGPU versions the vGPU manager
	// supports ("17.0", "17.3"); empty when NVML does not say (a driver
	// that is not the vGPU manager).
	VGPUMin, VGPUMax string
}

// GPU is a physical GPU as one backend sees it.
type GPU struct {
	Address  string // PCI address, "0000:41:00.0"
	Model    string // "H100 PCIe 80GB", or "NVIDIA 1234" for an unknown ID
	DeviceID string // "10de:2331"
	Memory   uint64 // bytes
	NUMANode int    // -1 when unknown
	Driver   string // bound driver: "nvidia", "vfio-pci", ""
	Mode     gpu.Mode
	// Interface is how vGPUs are made on it: "mdev", "vendor-vfio" or
	// "passthrough-only".
	Interface  string
	IOMMUGroup string
	// GroupDevices are the other functions of its IOMMU group.
	GroupDevices []string
	MIGCapable   bool
	MIGEnabled   bool
	// MixedSize is true when vGPUs of different sizes may share the GPU.
	MixedSize   bool
	VGPUTypes   []VGPUType
	MIGProfiles []MIGProfile
	// Unavailable says why this backend cannot create on the GPU now; empty
	// when it can.
	Unavailable string
}

// VGPUType is a vGPU type a GPU offers.
type VGPUType struct {
	Name         string // "L40S-12Q"
	ID           string // host ID: "nvidia-558" (mdev) or "1145" (vendor VFIO)
	Memory       uint64 // framebuffer bytes
	MaxInstances int
	Available    int    // how many more can be created now
	MIGProfile   string // GPU-instance profile of a MIG-backed type
}

// MIGProfile is a MIG GPU-instance profile with where it still fits.
type MIGProfile struct {
	Name   string // "3g.40gb"
	ID     int    // nvidia-smi profile ID
	Slices int    // compute slices
	Size   int    // memory slices
	Memory uint64 // bytes
	Max    int
	// FreeStarts are the memory-slice start positions where an instance fits now.
	FreeStarts []int
}

// CreateRequest asks for one device.
type CreateRequest struct {
	GPU    string // PCI address of the physical GPU
	VMUUID string // the VM the device is for
	// Type is the vGPU type name ("L40S-12Q"); for the mig backend, the
	// MIG-backed vGPU type may be left empty and is derived from Profile.
	Type string
	// Profile and Placement choose the MIG GPU instance (mig backend only).
	Profile   string
	Placement int
	// DeviceUUID is the mdev UUID to use; empty lets the backend choose.
	DeviceUUID string
	// Recreate is the ID of a ledger device the host lost (Device.Absent,
	// after a host reboot): the backend makes it again as it was, with the
	// same UUID, VF and placement, or refuses (CodeExhausted when another
	// device holds them now). vgpu and mig backends only.
	Recreate string
}

// RemoveRequest names a device to delete.
type RemoveRequest struct {
	ID  string // Device.ID
	GPU string // optional: the GPU it is on, to speed the search
	// OfInstallation, when set, is the gpuvm installation an admin
	// confirmed the device belongs to (an orphan they chose to delete):
	// the device is removed only if its ledger entry names that one.
	OfInstallation string
}

// HostdevType says which libvirt hostdev a device becomes.
type HostdevType string

// Hostdev types.
const (
	HostdevMdev HostdevType = "mdev" // <hostdev type='mdev'> with a UUID
	HostdevPCI  HostdevType = "pci"  // <hostdev type='pci'> with an address
)

// Hostdev is how libvirt attaches a device (REFERENCE.md §1, §4).
type Hostdev struct {
	Type HostdevType
	// UUID of the mdev (HostdevMdev).
	UUID string
	// Addresses of the PCI functions (HostdevPCI): the VF, or the GPU and
	// every other function of its IOMMU group.
	Addresses []string
	// Managed is libvirt's managed attribute: "no" for a vendor-VFIO VF (it
	// stays on nvidia), "yes" for passthrough.
	Managed bool
	// Display is true when the vGPU can drive a display (mdev display='on').
	Display bool
}

// Device is a GPU device a backend created (or found on the host).
type Device struct {
	ID     string // mdev UUID, VF address, or GPU address (passthrough)
	Kind   gpu.Kind
	GPU    string // physical GPU address
	Type   string // vGPU type name, if any
	VMUUID string // the VM it was made for; empty when not ours
	// Profile, Placement, GPUInstance and ComputeInstance describe the MIG
	// instance under a MIG device.
	Profile         string
	Placement       int
	GPUInstance     int
	ComputeInstance int
	Hostdev         Hostdev
	// Managed is true when gpuvm created the device (it is in the backend's
	// ledger); false for devices an admin made by hand, which gpuvm never
	// removes on its own.
	Managed bool
	// Installation is the gpuvm installation that made the device, as its
	// ledger entry says; empty for a device not in the ledger or recorded
	// before installations existed.
	Installation string
	// Absent says why a device of the backend's ledger is not on the host
	// now (lost in a host reboot or a driver reload: mdevs, VF vGPUs and
	// MIG instances do not survive one); empty when it is there.
	Absent string
}

// Health is a backend's self-assessment.
type Health struct {
	OK     bool
	Detail string
}
