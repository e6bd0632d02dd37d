package monitor

import (
	"context"
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/gpuvm/gpuvm/pkg/gpu"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/gpus"
)

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

func TestNVMLSourceGPUs(t *testing.T) {
	h := newMockHost(2, gpus.A100_SXM4_40GB)
	h.gpus[0].util, h.gpus[0].mem, h.gpus[0].enc, h.gpus[0].dec = 97, 40, 12, 30
	h.gpus[0].temp, h.gpus[0].powerMW, h.gpus[0].clockMHz, h.gpus[0].ecc = 86, 312500, 1980, 3
	h.gpus[0].dev.MemoryInfo = nvml.Memory{Total: 40 << 30, Used: 10 << 30}
	src := NewNVMLSource(h)
	defer src.Close()
	ctx := context.Background()
	r, err := src.Read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.GPUs) != 2 || len(r.Instances) != 0 {
		t.Fatalf("reading %+v", r)
	}
	g := r.GPUs[0]
	if g.Address != "0000:10:00.0" || !strings.Contains(g.Model, "A100") || !strings.HasPrefix(g.UUID, "GPU-") || g.MIG {
		t.Errorf("GPU identity %+v", g)
	}
	if !near(g.Util, 0.97) || !near(g.MemUtil, 0.40) || !near(g.EncUtil, 0.12) || !near(g.DecUtil, 0.30) ||
		g.Temperature != 86 || g.PowerWatts != 312.5 || g.SMClockMHz != 1980 || g.ECCErrors != 3 ||
		g.MemUsed != 10<<30 || g.MemTotal != 40<<30 || g.XIDErrors != 0 {
		t.Errorf("GPU figures %+v", g)
	}
	if r.GPUs[1].Address != "0000:11:00.0" || !near(r.GPUs[1].Util, 0.5) {
		t.Errorf("second GPU %+v", r.GPUs[1])
	}
	if !h.gpus[0].registered || !h.gpus[1].registered {
		t.Error("XID events not registered")
	}
	// XID errors are counted between rounds.
	h.xid(1)
	h.xid(1)
	h.xid(0)
	r, _ = src.Read(ctx)
	if r.GPUs[0].XIDErrors != 1 || r.GPUs[1].XIDErrors != 2 {
		t.Errorf("XID errors %d, %d; want 1, 2", r.GPUs[0].XIDErrors, r.GPUs[1].XIDErrors)
	}
	r, _ = src.Read(ctx)
	if r.GPUs[0].XIDErrors != 0 || r.GPUs[1].XIDErrors != 0 {
		t.Errorf("XID errors counted twice: %d, %d", r.GPUs[0].XIDErrors, r.GPUs[1].XIDErrors)
	}
}

func TestNVMLSourceVGPUs(t *testing.T) {
	h := newMockHost(1, gpus.A100_SXM4_40GB)
	mdev := "6f6a3ab6-6e0a-4c39-9d2a-111111111111"
	h.addVGPU(0, strings.ToUpper(mdev), "A100-4C", 1<<30, -1, 80)
	h.addVGPU(0, "0000:10:00.5", "A100-4C", 2<<30, -1, 10)
	quiet := h.addVGPU(0, "0000:10:00.6", "A100-4C", 0, -1, 0)
	quiet.noSamples = true
	src := NewNVMLSource(h)
	r, err := src.Read(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Instances) != 3 {
		t.Fatalf("instances %+v", r.Instances)
	}
	want := []struct {
		id        string
		util, mem float64
		enc       float64
		used      int64
	}{
		{mdev, 0.80, 0.40, 0.03, 1 << 30},
		{"0000:10:00.5", 0.10, 0.05, 0.03, 2 << 30},
		{"0000:10:00.6", 0, 0, Unknown, 0}, // no sample while the others had one: idle
	}
	for i, w := range want {
		in := r.Instances[i]
		if in.ID != w.id || in.Kind != gpu.KindVGPU || in.Type != "A100-4C" || in.GPUInstance != -1 || in.MemTotal != 4<<30 ||
			!near(in.Util, w.util) || !near(in.MemUtil, w.mem) || !near(in.EncUtil, w.enc) || in.MemUsed != w.used {
			t.Errorf("instance %d = %+v, want %+v", i, in, w)
		}
	}
	// The licence state: none of the mock's vGPUs answers GetLicenseInfo
	// (not supported): unknown.
	for _, in := range r.Instances {
		if in.License != "" {
			t.Errorf("%s: licence %q without licence info", in.ID, in.License)
		}
	}
	// The next read asks only for samples newer than the last seen.
	if seen := src.vgpuSeen["0000:10:00.0"]; seen != h.gpus[0].vgpuTS {
		t.Errorf("last seen %d, want %d", seen, h.gpus[0].vgpuTS)
	}
	h.gpus[0].vgpus[0].sm = 5
	r, _ = src.Read(context.Background())
	if !near(r.Instances[0].Util, 0.05) {
		t.Errorf("second read: %+v", r.Instances[0])
	}
}

func TestNVMLSourceMIG(t *testing.T) {
	h := newMockHost(1, gpus.H100_SXM5_80GB)
	g := h.gpus[0]
	g.gpm = true
	gi3 := h.addGI(0, nvml.GPU_INSTANCE_PROFILE_3_SLICE, 4)
	gi1 := h.addGI(0, nvml.GPU_INSTANCE_PROFILE_1_SLICE, 0)
	g.migMem[gi3] = 3 << 30
	h.addVGPU(0, "0000:10:00.4", "H100-3-40C", 0, gi3, 0).noSamples = true
	h.gpmValue = func(gpu string, gi int) (float64, float64) {
		if gi == gi3 {
			return 62.5, 20
		}
		return 0, 1
	}
	src := NewNVMLSource(h)
	defer src.Close()
	ctx := context.Background()
	r, err := src.Read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !r.GPUs[0].MIG {
		t.Error("GPU not in MIG mode")
	}
	if len(r.Instances) != 2 {
		t.Fatalf("instances %+v (the MIG-backed vGPU must be folded into its GPU instance)", r.Instances)
	}
	byGI := map[int]InstanceReading{}
	for _, in := range r.Instances {
		byGI[in.GPUInstance] = in
	}
	a, b := byGI[gi3], byGI[gi1]
	if a.Kind != gpu.KindMIG || a.ID != "0000:10:00.4" || a.PlacementStart != 4 || a.Type != "3g.40gb" || a.MemUsed != 3<<30 || a.MemTotal == 0 {
		t.Errorf("3g instance %+v", a)
	}
	if b.Kind != gpu.KindMIG || b.ID != "" || b.PlacementStart != 0 || b.Key() != "gi:"+strconv.Itoa(gi1) || b.MemUsed != 0 {
		t.Errorf("1g instance %+v", b)
	}
	if a.Util != Unknown || b.Util != Unknown {
		t.Errorf("GPM needs two samples; first read gave %g, %g", a.Util, b.Util)
	}
	r, _ = src.Read(ctx)
	for _, in := range r.Instances {
		byGI[in.GPUInstance] = in
	}
	if a := byGI[gi3]; !near(a.Util, 0.625) || !near(a.MemUtil, 0.2) {
		t.Errorf("3g GPM figures %+v", a)
	}
	if b := byGI[gi1]; !near(b.Util, 0) || !near(b.MemUtil, 0.01) {
		t.Errorf("1g GPM figures %+v", b)
	}
	if len(src.gpm) != 2 {
		t.Errorf("%d GPM samples kept, want one per instance", len(src.gpm))
	}
	// Without GPM (A100) MIG instances report no utilisation.
	h2 := newMockHost(1, gpus.A100_SXM4_40GB)
	h2.addGI(0, nvml.GPU_INSTANCE_PROFILE_1_SLICE, 6)
	r, _ = NewNVMLSource(h2).Read(ctx)
	if len(r.Instances) != 1 || r.Instances[0].Util != Unknown || r.Instances[0].Type != "1g.5gb" || r.Instances[0].PlacementStart != 6 {
		t.Errorf("A100 MIG instance %+v", r.Instances)
	}
}

// A library that implements little (a go-nvml mock, the simulator's):
// what is missing is unknown, nothing panics.
func TestNVMLSourceMissingCalls(t *testing.T) {
	dev := &mock.Device{GetPciInfoFunc: func() (nvml.PciInfo, nvml.Return) {
		var p nvml.PciInfo
		for i, c := range "00000000:41:00.0" {
			p.BusId[i] = int8(c)
		}
		return p, nvml.SUCCESS
	}}
	noAddr := &mock.Device{GetPciInfoFunc: func() (nvml.PciInfo, nvml.Return) { return nvml.PciInfo{}, nvml.SUCCESS }}
	lib := &mock.Interface{
		DeviceGetCountFunc: func() (int, nvml.Return) { return 3, nvml.SUCCESS },
		DeviceGetHandleByIndexFunc: func(i int) (nvml.Device, nvml.Return) {
			switch i {
			case 0:
				return dev, nvml.SUCCESS
			case 1:
				return noAddr, nvml.SUCCESS
			}
			return nil, nvml.ERROR_GPU_IS_LOST
		},
	}
	r, err := NewNVMLSource(lib).Read(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(r.GPUs) != 1 {
		t.Fatalf("GPUs %+v", r.GPUs)
	}
	g := r.GPUs[0]
	if g.Address != "0000:41:00.0" || g.Util != Unknown || g.Temperature != Unknown || g.PowerWatts != Unknown || g.MemTotal != 0 {
		t.Errorf("GPU %+v", g)
	}
	notes := strings.Join(r.Notes, "\n")
	if !strings.Contains(notes, "no PCI address") || !strings.Contains(notes, "GPU 2: get its handle: ERROR_GPU_IS_LOST") {
		t.Errorf("notes:\n%s", notes)
	}
	bad := &mock.Interface{DeviceGetCountFunc: func() (int, nvml.Return) { return 0, nvml.ERROR_UNINITIALIZED }}
	if _, err := NewNVMLSource(bad).Read(context.Background()); err == nil || !strings.Contains(err.Error(), "ERROR_UNINITIALIZED") {
		t.Errorf("count failure: %v", err)
	}
}

func TestDecodeValue(t *testing.T) {
	var b [8]byte
	b[0] = 42
	for _, tc := range []struct {
		vt   nvml.ValueType
		want float64
	}{
		{nvml.VALUE_TYPE_UNSIGNED_INT, 0.42},
		{nvml.VALUE_TYPE_UNSIGNED_LONG_LONG, 0.42},
		{nvml.VALUE_TYPE_UNSIGNED_SHORT, 0.42},
		{nvml.VALUE_TYPE_SIGNED_INT, 0.42},
		{nvml.VALUE_TYPE_COUNT, Unknown},
	} {
		if got := decodeValue(tc.vt, b); !near(got, tc.want) {
			t.Errorf("decodeValue(%d) = %g, want %g", tc.vt, got, tc.want)
		}
	}
	var d [8]byte
	for i, x := range []byte{0, 0, 0, 0, 0, 0, 0x59, 0x40} { // 100.0
		d[i] = x
	}
	if got := decodeValue(nvml.VALUE_TYPE_DOUBLE, d); got != 1 {
		t.Errorf("double 100 = %g", got)
	}
}

// A vGPU's licence state from NVML's licence info: its CurrentState,
// IsLicensed when the state is unknown, nothing when NVML fails.
func TestNVMLVGPULicense(t *testing.T) {
	for _, tc := range []struct {
		info nvml.VgpuLicenseInfo
		ret  nvml.Return
		want string
	}{
		{nvml.VgpuLicenseInfo{IsLicensed: 1, CurrentState: nvml.GRID_LICENSE_STATE_LICENSED}, nvml.SUCCESS, LicenseLicensed},
		{nvml.VgpuLicenseInfo{CurrentState: nvml.GRID_LICENSE_STATE_UNLICENSED_UNRESTRICTED}, nvml.SUCCESS, LicenseGrace},
		{nvml.VgpuLicenseInfo{CurrentState: nvml.GRID_LICENSE_STATE_UNLICENSED_RESTRICTED}, nvml.SUCCESS, LicenseUnlicensed},
		{nvml.VgpuLicenseInfo{CurrentState: nvml.GRID_LICENSE_STATE_UNLICENSED}, nvml.SUCCESS, LicenseUnlicensed},
		{nvml.VgpuLicenseInfo{IsLicensed: 1, CurrentState: nvml.GRID_LICENSE_STATE_UNKNOWN}, nvml.SUCCESS, LicenseLicensed},
		{nvml.VgpuLicenseInfo{CurrentState: nvml.GRID_LICENSE_STATE_UNINITIALIZED}, nvml.SUCCESS, ""},
		{nvml.VgpuLicenseInfo{}, nvml.ERROR_NOT_SUPPORTED, ""},
	} {
		h := newMockHost(1, gpus.A100_SXM4_40GB)
		v := h.addVGPU(0, "0000:10:00.4", "A100-4C", 1<<30, -1, 10)
		info, ret := tc.info, tc.ret
		v.GetLicenseInfoFunc = func() (nvml.VgpuLicenseInfo, nvml.Return) { return info, ret }
		r, err := NewNVMLSource(h).Read(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Instances) != 1 || r.Instances[0].License != tc.want {
			t.Errorf("state %d, %v: instances %+v, want licence %q", tc.info.CurrentState, tc.ret, r.Instances, tc.want)
		}
	}
}
