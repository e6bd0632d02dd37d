package backend

import (
	"reflect"
	"testing"

	"github.com/gpuvm/gpuvm/pkg/gpu"
)

func TestMerge(t *testing.T) {
	l40s := func(mode gpu.Mode, iface, unavailable string) GPU {
		return GPU{Address: "0000:41:00.0", Model: "L40S", DeviceID: "10de:26b9", Mode: mode, Interface: iface, Unavailable: unavailable}
	}
	h100 := GPU{Address: "0000:17:00.0", Model: "H100 PCIe 80GB", Mode: gpu.ModeMIG, MIGCapable: true, MIGEnabled: true,
		MIGProfiles: []MIGProfile{{Name: "7g.80gb", Size: 8}}}
	tests := []struct {
		name string
		invs map[string]Inventory
		want gpu.HostInventory
	}{
		{name: "nothing", invs: nil, want: gpu.HostInventory{GPUs: []gpu.HostGPU{}, Devices: []gpu.HostDevice{}}},
		{name: "one GPU, each backend's verdict; the most specific mode and interface win; the host as the first backend by name saw it",
			invs: map[string]Inventory{
				"passthrough": {Backend: "passthrough", Host: "/sys", GPUs: []GPU{l40s(gpu.ModeIdle, "passthrough-only", "in use")}},
				"vgpu":        {Backend: "vgpu", Host: "a simulated server", Notes: []string{"NVML unavailable"}, GPUs: []GPU{l40s(gpu.ModeVGPU, "vendor-vfio", "")}},
			},
			want: gpu.HostInventory{Host: "/sys", Backends: []string{"passthrough", "vgpu"}, Notes: []string{"vgpu: NVML unavailable"},
				GPUs: []gpu.HostGPU{{Address: "0000:41:00.0", Model: "L40S", DeviceID: "10de:26b9", Mode: gpu.ModeVGPU, Interface: gpu.InterfaceVendorVFIO,
					Backends: map[string]string{"passthrough": "in use", "vgpu": ""}}},
				Devices: []gpu.HostDevice{}}},
		{name: "GPUs by address, devices by GPU and ID; a MIG device's placement; no free starts is an empty list",
			invs: map[string]Inventory{
				"mig": {Backend: "mig", Simulated: true, GPUs: []GPU{h100}, Devices: []Device{
					{ID: "gi-2", Kind: gpu.KindMIG, GPU: "0000:17:00.0", Profile: "3g.40gb", Placement: 4, GPUInstance: 2, ComputeInstance: 0, VMUUID: "vm-2"},
					{ID: "gi-1", Kind: gpu.KindMIG, GPU: "0000:17:00.0", Profile: "3g.40gb", Placement: 0, GPUInstance: 1, ComputeInstance: 0, VMUUID: "vm-1"},
				}},
				"vgpu": {Backend: "vgpu", GPUs: []GPU{l40s(gpu.ModeVGPU, "vendor-vfio", "")}, Devices: []Device{
					{ID: "0000:41:00.4", Kind: gpu.KindVGPU, GPU: "0000:41:00.0", Type: "L40S-12Q", Hostdev: Hostdev{Type: HostdevPCI, Addresses: []string{"0000:41:00.4"}}},
				}},
			},
			want: gpu.HostInventory{Simulated: true, Backends: []string{"mig", "vgpu"},
				GPUs: []gpu.HostGPU{
					{Address: "0000:17:00.0", Model: "H100 PCIe 80GB", Mode: gpu.ModeMIG, MIGCapable: true, MIGEnabled: true,
						MIGProfiles: []gpu.MIGOffer{{Name: "7g.80gb", Size: 8, FreeStarts: []int{}}}, Backends: map[string]string{"mig": ""}},
					{Address: "0000:41:00.0", Model: "L40S", DeviceID: "10de:26b9", Mode: gpu.ModeVGPU, Interface: gpu.InterfaceVendorVFIO, Backends: map[string]string{"vgpu": ""}},
				},
				Devices: []gpu.HostDevice{
					{ID: "gi-1", Backend: "mig", Kind: gpu.KindMIG, GPU: "0000:17:00.0", Profile: "3g.40gb", Placement: ptr(0), GPUInstance: ptr(1), ComputeInstance: ptr(0), VMUUID: "vm-1"},
					{ID: "gi-2", Backend: "mig", Kind: gpu.KindMIG, GPU: "0000:17:00.0", Profile: "3g.40gb", Placement: ptr(4), GPUInstance: ptr(2), ComputeInstance: ptr(0), VMUUID: "vm-2"},
					{ID: "0000:41:00.4", Backend: "vgpu", Kind: gpu.KindVGPU, GPU: "0000:41:00.0", Type: "L40S-12Q", Hostdev: gpu.Hostdev{Type: "pci", Addresses: []string{"0000:41:00.4"}}},
				}}},
		{name: "the host driver: backends that read it agree, one without NVML says nothing",
			invs: map[string]Inventory{
				"mig":         {Backend: "mig", Driver: &Driver{Version: "550.54.16", VGPUMin: "17.0", VGPUMax: "17.3"}},
				"passthrough": {Backend: "passthrough"},
				"vgpu":        {Backend: "vgpu", Driver: &Driver{Version: "550.54.16", VGPUMin: "17.0", VGPUMax: "17.3"}},
			},
			want: gpu.HostInventory{Backends: []string{"mig", "passthrough", "vgpu"}, GPUs: []gpu.HostGPU{}, Devices: []gpu.HostDevice{},
				Driver: &gpu.HostDriver{Version: "550.54.16", VGPUMin: "17.0", VGPUMax: "17.3"}}},
		{name: "the host driver: backends that disagree, the first by name is kept and the other noted",
			invs: map[string]Inventory{
				"mig":  {Backend: "mig", Driver: &Driver{Version: "550.54.16", VGPUMin: "17.0", VGPUMax: "17.3"}},
				"vgpu": {Backend: "vgpu", Driver: &Driver{Version: "535.161.05"}},
			},
			want: gpu.HostInventory{Backends: []string{"mig", "vgpu"}, GPUs: []gpu.HostGPU{}, Devices: []gpu.HostDevice{},
				Notes:  []string{"vgpu: reads driver 535.161.05, unlike the backend before it (550.54.16, vGPU 17.0–17.3); the first is kept"},
				Driver: &gpu.HostDriver{Version: "550.54.16", VGPUMin: "17.0", VGPUMax: "17.3"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := MergeByName(tc.invs); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got\n%+v\nwant\n%+v", got, tc.want)
			}
		})
	}
}

func ptr(i int) *int { return &i }

// A device a backend's ledger holds but the host lost (Device.Absent) is
// not on the host: the host inventory leaves it out.
func TestMergeLeavesOutLostDevices(t *testing.T) {
	inv := Inventory{Backend: "vgpu", Devices: []Device{
		{ID: "0000:41:00.4", Kind: gpu.KindVGPU, GPU: "0000:41:00.0", Type: "L40S-12Q", Managed: true},
		{ID: "0000:41:00.5", Kind: gpu.KindVGPU, GPU: "0000:41:00.0", Type: "L40S-12Q", Managed: true, Absent: "not on the host"},
	}}
	got := Merge([]Inventory{inv}).Devices
	if len(got) != 1 || got[0].ID != "0000:41:00.4" {
		t.Errorf("devices %+v, want only 0000:41:00.4", got)
	}
}

// A device two backends report (a MIG-backed vGPU on a VF: the mig backend
// made it for a VM, a vgpu backend of an older gpuvm also listed it) is
// one device of the host, the VM's, not a second holder of no VM.
func TestMergeKeepsOneRecordOfADevice(t *testing.T) {
	vgpu := Inventory{Backend: "vgpu", Devices: []Device{
		{ID: "0000:18:00.4", Kind: gpu.KindVGPU, GPU: "0000:18:00.0", Type: "unnamed vGPU type (ID 2316)"},
		{ID: "0000:2a:00.4", Kind: gpu.KindVGPU, GPU: "0000:2a:00.0", Type: "H100-4C", VMUUID: "vm-2", Managed: true},
	}}
	mig := Inventory{Backend: "mig", Devices: []Device{
		{ID: "0000:18:00.4", Kind: gpu.KindMIG, GPU: "0000:18:00.0", Type: "H100-3-40C", Profile: "3g.40gb", Placement: 4, VMUUID: "vm-1", Managed: true},
	}}
	for _, order := range [][]Inventory{{vgpu, mig}, {mig, vgpu}} {
		got := Merge(order).Devices
		if len(got) != 2 {
			t.Fatalf("devices %+v, want 2", got)
		}
		if d := got[0]; d.Backend != "mig" || d.VMUUID != "vm-1" || d.Type != "H100-3-40C" || d.Profile != "3g.40gb" {
			t.Errorf("the shared device is %+v, want the mig backend's, of vm-1", d)
		}
		if d := got[1]; d.ID != "0000:2a:00.4" || d.VMUUID != "vm-2" {
			t.Errorf("the other device is %+v", d)
		}
	}
}
