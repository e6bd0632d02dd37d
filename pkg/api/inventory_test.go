package api

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/gpuvm/gpuvm/pkg/gpu"
)

// oldRow is a hosts.inventory value as a gpuvmd before gpu.HostInventory
// stored it (api.HostInventory's JSON, with a fleet node's spec beside it),
// every field set.
const oldRow = `{"host":"simulated GPU server (preset mixed)","simulated":true,"backends":["mig","passthrough","vgpu"],
"notes":["vgpu: NVML unavailable"],
"gpus":[{"address":"0000:17:00.0","model":"H100 PCIe 80GB","device_id":"10de:2331","memory_bytes":85899345920,"numa_node":0,
  "driver":"nvidia","mode":"mig","interface":"vendor-vfio","iommu_group":"12","group_devices":["0000:17:00.1"],
  "mig_capable":true,"mig_enabled":true,"mixed_size":false,
  "vgpu_types":[{"name":"H100-3-40C","host_id":"1145","memory_bytes":42949672960,"max_instances":2,"available":1,"mig_profile":"3g.40gb"}],
  "mig_profiles":[{"name":"3g.40gb","id":9,"compute_slices":3,"memory_slices":4,"memory_bytes":42949672960,"max_instances":2,"free_starts":[4]},
    {"name":"7g.80gb","id":0,"compute_slices":7,"memory_slices":8,"memory_bytes":85899345920,"max_instances":1,"free_starts":[]}],
  "backends":{"mig":"","passthrough":"MIG mode is enabled","vgpu":""}},
 {"address":"0000:41:00.0","model":"L40S","device_id":"10de:26b9","memory_bytes":51539607552,"numa_node":1,
  "driver":"vfio-pci","mode":"passthrough","interface":"passthrough-only","mig_capable":false,"mig_enabled":false,"mixed_size":true,
  "backends":{"passthrough":"passed through to VM vm-2"}}],
"devices":[{"id":"gi-1","backend":"mig","kind":"mig","gpu":"0000:17:00.0","mig_profile":"3g.40gb","placement":0,"gpu_instance":1,
  "compute_instance":0,"vm_uuid":"vm-1","managed":true,"hostdev":{"type":"mdev","uuid":"6f1f6a7e-0000-4000-8000-000000000001","managed":false,"display":false}},
 {"id":"0000:41:00.0","backend":"passthrough","kind":"passthrough","gpu":"0000:41:00.0","vm_uuid":"vm-2","managed":true,
  "hostdev":{"type":"pci","addresses":["0000:41:00.0","0000:41:00.1"],"managed":true,"display":true}}],
"spec":{"Name":"n2"}}`

// A row an older gpuvmd stored reads as a gpu.HostInventory whose API form
// is what that gpuvmd would have shown, field for field; and what a
// gpu.HostInventory stores is what the API shows of it.
func TestStoredInventoryReadsAsBefore(t *testing.T) {
	var old HostInventory
	if err := json.Unmarshal([]byte(oldRow), &old); err != nil {
		t.Fatal(err)
	}
	var hi gpu.HostInventory
	if err := json.Unmarshal([]byte(oldRow), &hi); err != nil {
		t.Fatalf("an old row does not read as a gpu.HostInventory: %v", err)
	}
	if got := FromHost(hi); !reflect.DeepEqual(got, old) {
		t.Errorf("FromHost(stored) =\n%+v\nwant\n%+v", got, old)
	}
	stored, err := json.Marshal(hi)
	if err != nil {
		t.Fatal(err)
	}
	shown, err := json.Marshal(FromHost(hi))
	if err != nil {
		t.Fatal(err)
	}
	if string(stored) != string(shown) {
		t.Errorf("stored and shown JSON differ:\nstored %s\nshown  %s", stored, shown)
	}
}

// FromHost keeps empty lists empty (the API writes [] for no GPUs and no
// devices) and nil ones nil.
func TestFromHostEmpty(t *testing.T) {
	tests := []struct {
		name string
		in   gpu.HostInventory
		want string
	}{
		{"merged", gpu.HostInventory{GPUs: []gpu.HostGPU{}, Devices: []gpu.HostDevice{}}, `{"host":"","simulated":false,"backends":null,"gpus":[],"devices":[]}`},
		{"zero", gpu.HostInventory{}, `{"host":"","simulated":false,"backends":null,"gpus":null,"devices":null}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b, err := json.Marshal(FromHost(tc.in))
			if err != nil {
				t.Fatal(err)
			}
			if string(b) != tc.want {
				t.Errorf("got %s, want %s", b, tc.want)
			}
		})
	}
}

// The stored inventory (gpu) and the API's have the same JSON fields, so
// that rows of either read as the other; only the API's GPUs say whether
// they are drained (the server knows, the host does not).
func TestInventoryShapesMatch(t *testing.T) {
	tags := func(typ reflect.Type) map[string]string {
		out := map[string]string{}
		for i := 0; i < typ.NumField(); i++ {
			f := typ.Field(i)
			out[f.Tag.Get("json")] = f.Type.Kind().String()
		}
		return out
	}
	pairs := []struct{ api, stored any }{
		{HostInventory{}, gpu.HostInventory{}}, {GPU{}, gpu.HostGPU{}}, {VGPUType{}, gpu.VGPUOffer{}},
		{MIGProfile{}, gpu.MIGOffer{}}, {Device{}, gpu.HostDevice{}}, {Hostdev{}, gpu.Hostdev{}},
		{HostDriver{}, gpu.HostDriver{}},
	}
	for _, p := range pairs {
		a, s := tags(reflect.TypeOf(p.api)), tags(reflect.TypeOf(p.stored))
		delete(a, "drained,omitempty")
		if !reflect.DeepEqual(a, s) {
			t.Errorf("%T has JSON fields %v, %T %v", p.api, a, p.stored, s)
		}
	}
}
