package monitor

import (
	"context"
	"fmt"

	"github.com/gpuvm/gpuvm/pkg/gpu"
)

// Unknown is the value of a figure a GPU did not report (a ratio, a
// temperature, a power draw), as gpu_samples stores it.
const Unknown = -1.0

// Reading is what one sampling round read from the host: its GPUs, and the
// devices carved out of them (time-sliced vGPUs, MIG instances).
type Reading struct {
	GPUs      []GPUReading
	Instances []InstanceReading
	// Notes say what could not be read, for the log (each once).
	Notes []string
}

// GPUReading is one physical GPU. Ratios are 0..1; Unknown (−1) where the
// GPU did not report them, and 0 for counts and clocks it did not report.
type GPUReading struct {
	Address string // PCI address, sysfs form ("0000:41:00.0")
	Model   string // "NVIDIA A100-SXM4-40GB"
	UUID    string
	// MIG is true when the GPU is in MIG mode.
	MIG bool
	// Util is the fraction of time a kernel ran (NVML's GPU utilisation);
	// MemUtil the fraction of time device memory was read or written;
	// EncUtil and DecUtil the video engines'.
	Util, MemUtil, EncUtil, DecUtil float64
	MemUsed, MemTotal               int64 // bytes of framebuffer
	Temperature                     float64
	PowerWatts                      float64
	SMClockMHz                      int
	// XIDErrors counts the XID errors the GPU reported since the previous
	// round; ECCErrors is its volatile count of uncorrected ECC errors
	// (since the driver loaded).
	XIDErrors int
	ECCErrors int
}

// InstanceReading is one device on a GPU: a time-sliced vGPU, or a MIG GPU
// instance (with the MIG-backed vGPU on it when there is one).
type InstanceReading struct {
	GPUAddress string
	Kind       gpu.Kind
	// ID is the device as gpuvm's allocations name it: the vGPU's mdev
	// UUID, or the VF that carries it (vendor-specific VFIO); "" for a MIG
	// instance that holds no vGPU.
	ID string
	// GPUInstance is the MIG GPU instance ID, PlacementStart its first
	// memory slice; −1 when not MIG (or not known).
	GPUInstance    int
	PlacementStart int
	// Type is the vGPU type or the MIG profile ("L40S-12Q", "3g.40gb").
	Type string
	// Util is the SM utilisation (vGPU: NVML's per-vGPU samples; MIG:
	// GPM on Hopper and later), MemUtil the memory bandwidth's, EncUtil
	// and DecUtil the video engines'. Unknown when not reported.
	Util, MemUtil, EncUtil, DecUtil float64
	MemUsed, MemTotal               int64
	// License is the vGPU's licence state as the guest driver reported it
	// to the host (NVML's vGPU licence info): LicenseLicensed,
	// LicenseGrace, LicenseUnlicensed, or "" when not known (no vGPU, no
	// guest driver yet, not supported).
	License string
}

// vGPU licence states (InstanceReading.License).
const (
	LicenseLicensed = "licensed"
	// LicenseGrace: unlicensed, still unrestricted (the grace period after
	// the guest's driver started).
	LicenseGrace = "grace"
	// LicenseUnlicensed: unlicensed and restricted (throttled).
	LicenseUnlicensed = "unlicensed"
)

// Key names the instance among the instances of its GPU: its device ID, or
// "gi:<id>" for a MIG instance without a vGPU.
func (in InstanceReading) Key() string {
	if in.ID != "" {
		return in.ID
	}
	if in.GPUInstance >= 0 {
		return fmt.Sprintf("gi:%d", in.GPUInstance)
	}
	return ""
}

// Source reads the host's GPUs. Implementations: NVMLSource (the NVIDIA
// driver, or any nvml.Interface), SimSource (the simulated server).
type Source interface {
	Read(ctx context.Context) (Reading, error)
	// Describe says what is read, for the log ("NVML", "simulated GPU
	// server (preset h100x8)").
	Describe() string
}

// NewInstanceReading is an instance with every figure unknown (for a Source to fill).
func NewInstanceReading(addr string, kind gpu.Kind) InstanceReading {
	return InstanceReading{GPUAddress: addr, Kind: kind, GPUInstance: -1, PlacementStart: -1,
		Util: Unknown, MemUtil: Unknown, EncUtil: Unknown, DecUtil: Unknown}
}

// NewGPUReading is a GPU with every figure unknown (for a Source to fill).
func NewGPUReading(addr string) GPUReading {
	return GPUReading{Address: addr, Util: Unknown, MemUtil: Unknown, EncUtil: Unknown, DecUtil: Unknown,
		Temperature: Unknown, PowerWatts: Unknown}
}

// mergeInstance fills what a did not report from b: a MIG-backed vGPU (its
// ID, its utilisation) and the GPU instance it runs on (its placement and
// memory) are one device.
func mergeInstance(a, b InstanceReading) InstanceReading {
	if a.ID == "" {
		a.ID = b.ID
	}
	if a.GPUInstance < 0 {
		a.GPUInstance = b.GPUInstance
	}
	if a.PlacementStart < 0 {
		a.PlacementStart = b.PlacementStart
	}
	if a.Type == "" {
		a.Type = b.Type
	}
	if a.License == "" {
		a.License = b.License
	}
	if a.Kind != gpu.KindMIG && b.Kind == gpu.KindMIG {
		a.Kind = gpu.KindMIG
	}
	for _, p := range []struct{ dst, src *float64 }{{&a.Util, &b.Util}, {&a.MemUtil, &b.MemUtil}, {&a.EncUtil, &b.EncUtil}, {&a.DecUtil, &b.DecUtil}} {
		if *p.dst < 0 {
			*p.dst = *p.src
		}
	}
	if a.MemTotal == 0 {
		a.MemTotal = b.MemTotal
	}
	if a.MemUsed == 0 {
		a.MemUsed = b.MemUsed
	}
	return a
}

// mergeMIGBacked folds each vGPU that runs on a MIG GPU instance into that
// instance's reading: what the instance reports (its profile, memory, GPM
// utilisation) first, the vGPU's (its ID, its own samples) where the
// instance reports nothing.
func mergeMIGBacked(ins []InstanceReading) []InstanceReading {
	type giKey struct {
		gpu string
		gi  int
	}
	at := map[giKey]int{}
	for i, in := range ins {
		if in.Kind == gpu.KindMIG && in.GPUInstance >= 0 && in.ID == "" {
			at[giKey{in.GPUAddress, in.GPUInstance}] = i
		}
	}
	out := ins[:0:0]
	drop := map[int]bool{}
	for i, in := range ins {
		if in.Kind != gpu.KindVGPU || in.GPUInstance < 0 {
			continue
		}
		if j, ok := at[giKey{in.GPUAddress, in.GPUInstance}]; ok {
			ins[j] = mergeInstance(ins[j], in)
			ins[j].Kind = gpu.KindMIG
			drop[i] = true
			delete(at, giKey{in.GPUAddress, in.GPUInstance})
		}
	}
	for i, in := range ins {
		if !drop[i] {
			out = append(out, in)
		}
	}
	return out
}
