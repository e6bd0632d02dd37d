package monitor

import (
	"context"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpuvm/gpuvm/pkg/gpu"
	"github.com/gpuvm/gpuvm/pkg/host"
	"github.com/gpuvm/gpuvm/pkg/host/sim"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// simHost is the "mixed" simulated server with one device of each kind,
// made as the backends make them:
//
//	0000:17:00.0 A100, MIG: a 1g GPU instance at slot 0 that nobody holds
//	0000:41:00.0 A40: an mdev A40-8Q on VF 0000:41:00.4
//	0000:81:00.0 L40S: a vGPU L40S-12Q on VF 0000:81:00.4 (vendor VFIO)
//	0000:9a:00.0 H100, MIG: a 3g GPU instance at slot 4 with the MIG-backed
//	             vGPU H100-3-40C on VF 0000:9a:00.4
//	0000:c1:00.0 RTX 4090: bound to vfio-pci, given whole to a VM
type simHost struct {
	h    *sim.Host
	dir  string
	mdev string
}

const simMdev = "6f6a3ab6-6e0a-4c39-9d2a-111111111111"

func newSimHost(t *testing.T) *simHost {
	t.Helper()
	dir := t.TempDir()
	h, err := sim.Open(dir, "mixed")
	if err != nil {
		t.Fatal(err)
	}
	write := func(p, data string) {
		t.Helper()
		if err := h.WriteFile(p, []byte(data)); err != nil {
			t.Fatalf("write %s: %v", p, err)
		}
	}
	// The mdev on the A40's first VF.
	types, err := host.MdevTypes(h, "0000:41:00.4")
	if err != nil {
		t.Fatal(err)
	}
	for _, ty := range types {
		if ty.Name == "A40-8Q" {
			write("bus/pci/devices/0000:41:00.4/mdev_supported_types/"+ty.ID+"/create", simMdev)
		}
	}
	setVF := func(vf, name string) {
		t.Helper()
		_, creatable, err := host.VFState(h, vf)
		if err != nil {
			t.Fatal(err)
		}
		for _, ty := range creatable {
			if ty.Name == name {
				if err := host.SetVFType(h, vf, ty.ID); err != nil {
					t.Fatal(err)
				}
				return
			}
		}
		t.Fatalf("VF %s does not offer %s: %+v", vf, name, creatable)
	}
	setVF("0000:81:00.4", "L40S-12Q")
	// MIG: GPU instances through the simulator's NVML.
	lib := h.NVML()
	gi := func(addr string, profile, start int) nvml.GpuInstance {
		t.Helper()
		dev, ret := lib.DeviceGetHandleByPciBusId(host.NVMLBusID(addr))
		if ret != nvml.SUCCESS {
			t.Fatal(ret)
		}
		info, ret := dev.GetGpuInstanceProfileInfo(profile)
		if ret != nvml.SUCCESS {
			t.Fatal(ret)
		}
		places, _ := dev.GetGpuInstancePossiblePlacements(&info)
		var place nvml.GpuInstancePlacement
		for _, p := range places {
			if int(p.Start) == start {
				place = p
			}
		}
		g, ret := dev.CreateGpuInstanceWithPlacement(&info, &place)
		if ret != nvml.SUCCESS {
			t.Fatalf("create GI on %s: %v", addr, ret)
		}
		return g
	}
	gi("0000:17:00.0", nvml.GPU_INSTANCE_PROFILE_1_SLICE, 0)
	g3 := gi("0000:9a:00.0", nvml.GPU_INSTANCE_PROFILE_3_SLICE, 4)
	ciInfo, ret := g3.GetComputeInstanceProfileInfo(nvml.COMPUTE_INSTANCE_PROFILE_3_SLICE, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
	if ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	if _, ret := g3.CreateComputeInstance(&ciInfo); ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	setVF("0000:9a:00.4", "H100-3-40C")
	// The RTX 4090 (and its audio function) to vfio-pci.
	for _, a := range []string{"0000:c1:00.0", "0000:c1:00.1"} {
		write("bus/pci/devices/"+a+"/driver_override", "vfio-pci")
		write("bus/pci/devices/"+a+"/driver/unbind", a)
		write("bus/pci/drivers_probe", a)
	}
	return &simHost{h: h, dir: dir, mdev: simMdev}
}

// The sampler reads the simulated server's synthetic utilisation and maps
// each device to the VM and user holding it.
func TestSamplerOnSimulatedHost(t *testing.T) {
	sh := newSimHost(t)
	clock := newFakeClock()
	st := newStore(t, clock)
	ctx := context.Background()
	vmA := runningVM(t, st, "ann", "a40", store.SlotClaim{Kind: gpu.KindVGPU, GPUAddress: "0000:41:00.0", VF: "0000:41:00.4", Profile: "A40-8Q"}, simMdev)
	vmB := runningVM(t, st, "bob", "l40s", store.SlotClaim{Kind: gpu.KindVGPU, GPUAddress: "0000:81:00.0", VF: "0000:81:00.4", Profile: "L40S-12Q"}, "0000:81:00.4")
	vmC := runningVM(t, st, "ann", "h100", store.SlotClaim{Kind: gpu.KindMIG, GPUAddress: "0000:9a:00.0", PlacementStart: 4, PlacementSize: 4, Profile: "3g.40gb"}, "0000:9a:00.4")
	vmD := runningVM(t, st, "carl", "rtx", store.SlotClaim{Kind: gpu.KindPassthrough, GPUAddress: "0000:c1:00.0"}, "0000:c1:00.0")

	if err := sh.h.SetUtilization("0000:41:00.0", 40); err != nil {
		t.Fatal(err)
	}
	for id, f := range map[string]SimFigures{
		simMdev:        {Util: Figure(70), MemUtil: Figure(10), License: LicenseUnlicensed},
		"0000:81:00.4": {Util: Figure(5)},
		"0000:9A:00.4": {Util: Figure(55), MemUsed: ptr(int64(1 << 30))}, // upper case: normalised
		"0000:c1:00.0": {Util: Figure(90), Temperature: Figure(81), PowerWatts: Figure(300)},
		"0000:17:00.0": {Temperature: Figure(66), XIDErrors: 2},
	} {
		if err := SetSimFigures(sh.dir, id, f); err != nil {
			t.Fatal(err)
		}
	}
	log, _ := testLog(t)
	s := NewSampler(testHost, NewSimSource(sh.h, sh.dir), st, clock, log)
	r, err := s.Sample(ctx)
	if err != nil {
		t.Fatal(err)
	}
	gpus := map[string]MappedGPU{}
	for _, g := range r.GPUs {
		gpus[g.Address] = g
	}
	if len(gpus) != 5 {
		t.Fatalf("GPUs %+v", r.GPUs)
	}
	if g := gpus["0000:41:00.0"]; !near(g.Util, 0.4) || g.VMID != "" || g.MemTotal != 48<<30 {
		t.Errorf("A40 %+v", g)
	}
	if g := gpus["0000:c1:00.0"]; !near(g.Util, 0.9) || g.Temperature != 81 || g.PowerWatts != 300 || g.VMID != vmD.ID || g.User != "carl" {
		t.Errorf("RTX 4090 (passthrough) %+v", g)
	}
	if g := gpus["0000:17:00.0"]; !g.MIG || g.Temperature != 66 || g.XIDErrors != 2 || g.Util != 0 {
		t.Errorf("A100 %+v", g)
	}
	ins := map[string]MappedInstance{}
	for _, in := range r.Instances {
		ins[in.Key] = in
	}
	if len(ins) != 4 {
		t.Fatalf("instances %+v", r.Instances)
	}
	if in := ins[simMdev]; in.VMID != vmA.ID || in.User != "ann" || !near(in.Util, 0.7) || !near(in.MemUtil, 0.1) || in.Type != "A40-8Q" || in.MemTotal != 8<<30 ||
		in.License != LicenseUnlicensed {
		t.Errorf("A40 mdev %+v", in)
	}
	if in := ins["0000:81:00.4"]; in.License != "" {
		t.Errorf("a simulated vGPU nobody set a licence state for: %q, want unknown", in.License)
	}
	if in := ins["0000:81:00.4"]; in.VMID != vmB.ID || in.User != "bob" || !near(in.Util, 0.05) || in.Kind != gpu.KindVGPU {
		t.Errorf("L40S vGPU %+v", in)
	}
	if in := ins["0000:9a:00.4"]; in.VMID != vmC.ID || in.User != "ann" || in.Kind != gpu.KindMIG || in.PlacementStart != 4 ||
		!near(in.Util, 0.55) || in.MemUsed != 1<<30 || in.MemTotal != 40<<30 || in.Type != "3g.40gb" {
		t.Errorf("H100 MIG instance %+v", in)
	}
	var free MappedInstance
	for k, in := range ins {
		if strings.HasPrefix(k, "gi:") {
			free = in
		}
	}
	if free.GPUAddress != "0000:17:00.0" || free.VMID != "" || free.Util != 0 || free.PlacementStart != 0 {
		t.Errorf("free A100 instance %+v", free)
	}
	// The samples are in the database, mapped.
	rows, err := st.ListSamples(ctx, store.SampleFilter{Host: testHost})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 9 {
		t.Fatalf("%d rows, want 5 GPUs + 4 devices", len(rows))
	}
	byVM := map[string]store.GPUSample{}
	for _, row := range rows {
		if !row.TakenAt.Equal(clock.Now()) {
			t.Errorf("row taken at %s, want %s", row.TakenAt, clock.Now())
		}
		if row.VMID != "" {
			byVM[row.VMID] = row
		}
	}
	if len(byVM) != 4 || byVM[vmA.ID].Instance != simMdev || byVM[vmA.ID].User != "ann" || !near(byVM[vmA.ID].GPUUtil, 0.7) ||
		byVM[vmD.ID].Instance != "" || byVM[vmC.ID].GPUAddress != "0000:9a:00.0" {
		t.Errorf("rows by VM %+v", byVM)
	}
	// Figures changed by another process are read at the next round;
	// zero figures remove them.
	if err := SetSimFigures(sh.dir, simMdev, SimFigures{}); err != nil {
		t.Fatal(err)
	}
	if err := sh.h.SetUtilization("0000:41:00.0", 0); err != nil {
		t.Fatal(err)
	}
	r, _ = s.Sample(ctx)
	for _, in := range r.Instances {
		if in.Key == simMdev && in.Util != 0 {
			t.Errorf("mdev after its figures were removed: %+v", in)
		}
	}
}

func ptr[T any](v T) *T { return &v }

func TestSetSimFiguresRefusesBadInput(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		id   string
		f    SimFigures
		want string
	}{
		{"", SimFigures{Util: Figure(1)}, "no GPU or device"},
		{"0000:41:00.0", SimFigures{Util: Figure(101)}, "utilization 101% is not within 0-100"},
		{"0000:41:00.0", SimFigures{MemUtil: Figure(-1)}, "memory_utilization"},
		{"x", SimFigures{MemUsed: ptr(int64(-5))}, "memory_used_bytes -5 is negative"},
		{"x", SimFigures{XIDErrors: -1}, "xid_errors_per_round"},
		{"x", SimFigures{Temperature: Figure(500)}, "temperature_celsius"},
		{"x", SimFigures{License: "maybe"}, `license "maybe" is none of licensed, grace, unlicensed`},
	} {
		if err := SetSimFigures(dir, tc.id, tc.f); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("SetSimFigures(%q, %+v) = %v, want %q", tc.id, tc.f, err, tc.want)
		}
	}
	if figs, err := ReadSimFigures(dir); err != nil || len(figs) != 0 {
		t.Errorf("refused figures were written: %v, %v", figs, err)
	}
}
