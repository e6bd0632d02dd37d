package scheduler

import (
	"testing"

	"github.com/gpuvm/gpuvm/pkg/gpu"
)

// A MIG instance handed to a VM as a VF (vendor-specific VFIO) is listed by
// the mig backend, which made it, and by the vgpu backend: it counts once,
// as the VM's.
func TestFromHostCountsADeviceOnce(t *testing.T) {
	start := 4
	hi := gpu.HostInventory{
		GPUs: []gpu.HostGPU{{Address: "0000:18:00.0", Model: "H100 SXM5 80GB", Memory: 80 << 30, MIGCapable: true, MIGEnabled: true, Mode: "mig",
			Backends: map[string]string{"mig": "", "vgpu": ""}}},
		Devices: []gpu.HostDevice{
			{ID: "0000:18:00.4", Backend: "vgpu", Kind: "vgpu", GPU: "0000:18:00.0", Type: "type 2316"},
			{ID: "0000:18:00.4", Backend: "mig", Kind: "mig", GPU: "0000:18:00.0", Profile: "3g.40gb", Placement: &start, VMUUID: "vm-1"},
			{ID: "0000:18:00.5", Backend: "mig", Kind: "mig", GPU: "0000:18:00.0", Profile: "1g.10gb", VMUUID: ""},
		},
	}
	_, allocs := FromHost("n", hi, func(string, string) gpu.Mode { return gpu.ModeAuto })
	if len(allocs) != 2 {
		t.Fatalf("%d allocations, want 2: %+v", len(allocs), allocs)
	}
	if a := allocs[0]; a.ID != "vm-1" || a.Kind != gpu.KindMIG || a.Profile != "3g.40gb" || a.Start != 4 {
		t.Errorf("the shared device counts as %+v", a)
	}
	if a := allocs[1]; a.ID != "device:0000:18:00.5" {
		t.Errorf("a device of no VM counts as %+v", a)
	}
}
