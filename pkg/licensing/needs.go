package licensing

import (
	"strings"

	"github.com/gpuvm/gpuvm/pkg/gpu"
)

// Which NVIDIA licence a kind of GPU device needs in the guest, in one
// place (gpuvm resize's guidance reads it; so may any page that wants to
// say it). The facts, from NVIDIA's documentation (read there; not copied):
//
//   - Licensed products and the vGPU series each covers: Virtual GPU Client
//     Licensing User Guide, "Licensed Products" and the vGPU types tables,
//     https://docs.nvidia.com/vgpu/latest/grid-licensing-user-guide/index.html
//     (the 15.0 guide states the same: C-series for Virtual Compute Server,
//     Q-series for RTX Virtual Workstation, B-series for Virtual PC,
//     A-series for Virtual Applications; a higher product covers the lower
//     series, and NVIDIA AI Enterprise includes Virtual Compute Server).
//   - From vGPU 18, GPUs that support MIG are supported with NVIDIA vGPU
//     only under NVIDIA AI Enterprise: vGPU 18 release notes and user guide,
//     https://docs.nvidia.com/vgpu/18.0/grid-vgpu-release-notes-generic-linux-kvm/index.html
//     and https://docs.nvidia.com/vgpu/18.0/grid-vgpu-user-guide/index.html
//     (MIG-backed vGPU: https://docs.nvidia.com/ai-enterprise/release-8/latest/infra-software/vgpu/features/mig-backed-vgpu.html).
//   - A whole GPU passed through runs NVIDIA's data-center driver as on bare
//     metal: no vGPU licence is asked for (the vGPU user guide's "Using GPU
//     Pass-Through"); the same holds for a MIG instance given without vGPU.
//
// These are what NVIDIA documents for its current releases; an admin with
// another agreement knows better, which is why gpuvm only advises.

// Licence products, as NVIDIA names them.
const (
	ProductAIEnterprise = "NVIDIA AI Enterprise"
	ProductVCS          = "NVIDIA Virtual Compute Server (vCS)"
	ProductVWS          = "NVIDIA RTX Virtual Workstation (vWS)"
	ProductVPC          = "NVIDIA Virtual PC (vPC)"
	ProductVApps        = "NVIDIA Virtual Applications (vApps)"
)

// Guest drivers a device takes.
const (
	DriverVGPUGuest  = "NVIDIA vGPU guest driver (its branch must match the host's vGPU manager)"
	DriverDataCenter = "NVIDIA data-center driver (as on bare metal)"
)

// NVIDIA documents the facts above; Source names the page of each need.
const (
	docLicensing = "https://docs.nvidia.com/vgpu/latest/grid-licensing-user-guide/index.html"
	docVGPU18    = "https://docs.nvidia.com/vgpu/18.0/grid-vgpu-release-notes-generic-linux-kvm/index.html"
	docUserGuide = "https://docs.nvidia.com/vgpu/18.0/grid-vgpu-user-guide/index.html"
)

// Need is what a kind of device needs licensed in the guest.
type Need struct {
	// Kind is the device's kind; Type its vGPU type, when one is named.
	Kind gpu.Kind `json:"kind"`
	Type string   `json:"type,omitempty"`
	// Products: any one of them licenses the device; empty: no licence.
	Products []string `json:"products"`
	// Driver is the guest driver the device runs.
	Driver string `json:"driver"`
	// Why says the rule in words; Source is NVIDIA's page that states it.
	Why    string `json:"why"`
	Source string `json:"source"`
}

// Licensed reports whether the device needs a licence at all.
func (n Need) Licensed() bool { return len(n.Products) > 0 }

// String is the need in one line: "NVIDIA AI Enterprise (MIG-backed vGPU ...)".
func (n Need) String() string {
	if !n.Licensed() {
		return "no vGPU licence: " + n.Why
	}
	return strings.Join(n.Products, " or ") + ": " + n.Why
}

// NeedOf is the licence a device of kind needs; vgpuType is the vGPU type
// of a vGPU ("L40S-12Q", "A100-3-20C"; empty when the profile names none).
// A kind of "any" (an abstract need the scheduler meets) and no kind at all
// (no GPU) need nothing this function can name: NeedsOf lists the kinds.
func NeedOf(kind gpu.Kind, vgpuType string) Need {
	n := Need{Kind: kind, Type: vgpuType}
	switch kind {
	case gpu.KindMIG:
		n.Products, n.Driver, n.Source = []string{ProductAIEnterprise}, DriverVGPUGuest, docVGPU18
		n.Why = "a MIG slice reaches the VM as a MIG-backed vGPU, which NVIDIA supports only under NVIDIA AI Enterprise since vGPU 18"
		return n
	case gpu.KindPassthrough:
		n.Driver, n.Source = DriverDataCenter, docUserGuide
		n.Why = "a whole GPU passed through runs the data-center driver as on bare metal"
		return n
	case gpu.KindVGPU:
	default:
		n.Driver, n.Source, n.Why = "", docLicensing, "no NVIDIA GPU device"
		return n
	}
	n.Driver, n.Source = DriverVGPUGuest, docLicensing
	t, err := gpu.ParseVGPUType(vgpuType)
	switch {
	case err != nil:
		n.Products = []string{ProductAIEnterprise, ProductVCS, ProductVWS, ProductVPC}
		n.Why = "a vGPU: the licence follows its series (C: vCS or AI Enterprise, Q: vWS, B: vPC)"
	case t.MIGBacked():
		n.Products, n.Source = []string{ProductAIEnterprise}, docVGPU18
		n.Why = "a MIG-backed vGPU (" + t.Name + "), which NVIDIA supports only under NVIDIA AI Enterprise since vGPU 18"
	case t.Series == gpu.SeriesC:
		n.Products = []string{ProductVCS, ProductAIEnterprise}
		n.Why = "a C-series (compute) vGPU (" + t.Name + ")"
	case t.Series == gpu.SeriesQ:
		n.Products = []string{ProductVWS}
		n.Why = "a Q-series (workstation) vGPU (" + t.Name + ")"
	case t.Series == gpu.SeriesB:
		n.Products = []string{ProductVPC, ProductVWS}
		n.Why = "a B-series (virtual desktop) vGPU (" + t.Name + ")"
	default:
		n.Products = []string{ProductVApps}
		n.Why = "an A-series (virtual applications) vGPU (" + t.Name + ")"
	}
	return n
}

// NeedsOf lists the needs of a profile's GPU: one for a concrete kind,
// one per kind the scheduler may choose for an abstract need (kinds),
// none for a profile without a GPU.
func NeedsOf(kind gpu.Kind, vgpuType string, kinds []gpu.Kind) []Need {
	switch kind {
	case "":
		return nil
	case gpu.KindAny:
		out := make([]Need, 0, len(kinds))
		for _, k := range kinds {
			if k != gpu.KindAny {
				out = append(out, NeedOf(k, ""))
			}
		}
		return out
	}
	return []Need{NeedOf(kind, vgpuType)}
}
