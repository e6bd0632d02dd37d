//go:build cgo

package capability

import (
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpuvm/gpuvm/pkg/host"
)

// pgpuMigration is bit 0 of nvmlVgpuPgpuMetadata_t.pgpuVirtualizationCaps:
// NVML_VGPU_PGPU_VIRTUALIZATION_CAP_MIGRATION (0:0), _YES = 0x1 (nvml.h,
// "Macros for pGPU's virtualization capabilities bitfield").
const pgpuMigration = 0x1

// ProbeNVML asks lib, an initialised NVML, whether the vGPU manager
// supports migration on each GPU (nvmlDeviceGetVgpuMetadata's
// pgpuVirtualizationCaps). simulated marks lib as the simulated host's
// (pkg/host/sim): every answer then says so. A GPU whose driver is not a
// vGPU manager (ERROR_NOT_SUPPORTED) supports none.
func ProbeNVML(lib nvml.Interface, simulated bool) (f NVMLFacts) {
	f = NVMLFacts{Simulated: simulated}
	defer func() {
		// go-nvml's mocks panic on a call they do not implement.
		if r := recover(); r != nil {
			f = NVMLFacts{Simulated: simulated, Note: fmt.Sprintf("NVML failed: %v", r)}
		}
	}()
	if lib == nil {
		f.Note = "NVML unavailable"
		return f
	}
	n, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		f.Note = "NVML: count devices: " + ret.Error()
		return f
	}
	f.Known, f.Migration = true, map[string]bool{}
	for i := 0; i < n; i++ {
		dev, ret := lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			continue
		}
		pci, ret := dev.GetPciInfo()
		if ret != nvml.SUCCESS {
			continue
		}
		addr := host.AddressFromNVML(busID(pci.BusId[:]))
		md, ret := dev.GetVgpuMetadata()
		f.Migration[addr] = ret == nvml.SUCCESS && md.PgpuVirtualizationCaps&pgpuMigration != 0
	}
	return f
}

// busID is NVML's NUL-terminated bus ID as a string.
func busID(b []int8) string {
	out := make([]byte, 0, len(b))
	for _, c := range b {
		if c == 0 {
			break
		}
		out = append(out, byte(c))
	}
	return string(out)
}
