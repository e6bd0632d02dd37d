//go:build cgo

package sim

import (
	"bytes"
	"errors"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

func open(t *testing.T, preset string) *Host {
	t.Helper()
	h, err := Open(t.TempDir(), preset)
	if err != nil {
		t.Fatalf("Open(%s): %v", preset, err)
	}
	return h
}

func read(t *testing.T, h *Host, p string) string {
	t.Helper()
	b, err := h.ReadFile(p)
	if err != nil {
		t.Fatalf("read %s: %v", p, err)
	}
	return strings.TrimSpace(string(b))
}

func snapshot(t *testing.T, h *Host) []byte {
	t.Helper()
	b, err := h.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestPresetsOpen(t *testing.T) {
	for _, p := range Presets() {
		t.Run(p, func(t *testing.T) {
			h := open(t, p)
			names, err := h.ReadDir("bus/pci/devices")
			if err != nil || len(names) == 0 {
				t.Fatalf("bus/pci/devices: %v %v", names, err)
			}
			for _, n := range names {
				if v := read(t, h, "bus/pci/devices/"+n+"/vendor"); v != "0x10de" {
					t.Errorf("%s vendor = %s", n, v)
				}
			}
			if !strings.Contains(h.Describe(), "simulated") {
				t.Errorf("Describe() = %q does not say simulated", h.Describe())
			}
		})
	}
	if _, err := Open(t.TempDir(), "nope"); err == nil || !strings.Contains(err.Error(), "a100x4") {
		t.Errorf("unknown preset error = %v, want the list of presets", err)
	}
}

func TestOpenOtherPresetRefused(t *testing.T) {
	dir := t.TempDir()
	if _, err := Open(dir, "a40x2"); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(dir, "h100x8"); err == nil || !strings.Contains(err.Error(), `holds preset "a40x2"`) {
		t.Fatalf("err = %v", err)
	}
}

func TestLinks(t *testing.T) {
	h := open(t, "a40x2")
	l, err := h.Readlink("bus/pci/devices/0000:41:00.0/driver")
	if err != nil || !strings.HasSuffix(l, "bus/pci/drivers/nvidia") || !strings.HasPrefix(l, "../") {
		t.Errorf("driver link = %q, %v", l, err)
	}
	l, err = h.Readlink("bus/pci/devices/0000:41:00.4/physfn")
	if err != nil || l != "../0000:41:00.0" {
		t.Errorf("physfn = %q, %v", l, err)
	}
	// Reading through links works as on a real sysfs.
	if v := read(t, h, "bus/pci/devices/0000:41:00.0/virtfn0/physfn/device"); v != "0x2235" {
		t.Errorf("through links: %q", v)
	}
	if _, err := h.ReadFile("bus/pci/devices/0000:99:00.0/vendor"); !errors.Is(err, syscall.ENOENT) {
		t.Errorf("missing device: %v", err)
	}
}

const a40Parent = "bus/pci/devices/0000:41:00.4/mdev_supported_types"

func mdevType(t *testing.T, h *Host, parent, name string) string {
	t.Helper()
	types, err := h.ReadDir(parent)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range types {
		if read(t, h, parent+"/"+id+"/name") == "GRID "+name {
			return id
		}
	}
	t.Fatalf("no type %s under %s", name, parent)
	return ""
}

func TestMdevRules(t *testing.T) {
	h := open(t, "a40x2")
	before := snapshot(t, h)
	q8 := mdevType(t, h, a40Parent, "A40-8Q")
	q4 := mdevType(t, h, a40Parent, "A40-4Q")
	if v := read(t, h, a40Parent+"/"+q8+"/available_instances"); v != "1" {
		t.Fatalf("available before = %s", v)
	}
	u1 := "6f6a3ab6-6e0a-4c39-9d2a-111111111111"
	if err := h.WriteFile(a40Parent+"/"+q8+"/create", []byte(u1)); err != nil {
		t.Fatal(err)
	}
	if v := read(t, h, a40Parent+"/"+q8+"/available_instances"); v != "0" {
		t.Errorf("VF holding an mdev still offers %s", v)
	}
	if !h.Exists("bus/mdev/devices/" + u1) {
		t.Error("mdev did not appear under bus/mdev/devices")
	}
	l, _ := h.Readlink("bus/mdev/devices/" + u1 + "/mdev_type")
	if !strings.HasSuffix(l, q8) {
		t.Errorf("mdev_type = %q", l)
	}
	other := "bus/pci/devices/0000:41:00.5/mdev_supported_types"
	tests := []struct {
		name, path, data string
		want             syscall.Errno
	}{
		{"same UUID again", other + "/" + q8 + "/create", u1, syscall.EEXIST},
		{"second type in equal-size mode", other + "/" + q4 + "/create", "6f6a3ab6-6e0a-4c39-9d2a-222222222222", syscall.EUSERS},
		{"not a UUID", other + "/" + q8 + "/create", "hello", syscall.EINVAL},
		{"VF already holds one", a40Parent + "/" + q8 + "/create", "6f6a3ab6-6e0a-4c39-9d2a-333333333333", syscall.EUSERS},
		{"read-only file", other + "/" + q8 + "/available_instances", "9", syscall.EACCES},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			mid := snapshot(t, h)
			err := h.WriteFile(tc.path, []byte(tc.data))
			if !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
			if !bytes.Equal(mid, snapshot(t, h)) {
				t.Error("refused write changed the host")
			}
		})
	}
	if v := read(t, h, other+"/"+q4+"/available_instances"); v != "0" {
		t.Errorf("other type available = %s in equal-size mode", v)
	}
	if err := h.SetInUse(u1, true); err != nil {
		t.Fatal(err)
	}
	if err := h.WriteFile("bus/mdev/devices/"+u1+"/remove", []byte("1")); !errors.Is(err, syscall.EBUSY) {
		t.Errorf("remove in use: %v", err)
	}
	if err := h.WriteFile("bus/pci/drivers/nvidia/unbind", []byte("0000:41:00.0")); !errors.Is(err, syscall.EBUSY) {
		t.Errorf("unbind GPU holding vGPUs: %v", err)
	}
	h.SetInUse(u1, false)
	if err := h.WriteFile("bus/mdev/devices/"+u1+"/remove", []byte("1")); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(before, snapshot(t, h)) {
		t.Error("create then remove did not restore the host")
	}
}

func TestVendorVFIORules(t *testing.T) {
	h := open(t, "l40sx4")
	vf := "bus/pci/devices/0000:01:00.4/nvidia/"
	list := read(t, h, vf+"creatable_vgpu_types")
	lines := strings.Split(list, "\n")
	if !strings.HasPrefix(lines[0], "ID") || !strings.Contains(list, "NVIDIA L40S-12Q") {
		t.Fatalf("creatable = %q", list)
	}
	id12, id4 := "", ""
	for _, l := range lines[1:] {
		f := strings.SplitN(l, ":", 2)
		switch strings.TrimSpace(f[1]) {
		case "NVIDIA L40S-12Q":
			id12 = strings.TrimSpace(f[0])
		case "NVIDIA L40S-4Q":
			id4 = strings.TrimSpace(f[0])
		}
	}
	before := snapshot(t, h)
	if err := h.WriteFile(vf+"current_vgpu_type", []byte(id12)); err != nil {
		t.Fatal(err)
	}
	if read(t, h, vf+"current_vgpu_type") != id12 {
		t.Error("current_vgpu_type not set")
	}
	if c := read(t, h, vf+"creatable_vgpu_types"); c != "ID    : vGPU Name" {
		t.Errorf("occupied VF lists %q", c)
	}
	vf2 := "bus/pci/devices/0000:01:00.5/nvidia/"
	if c := read(t, h, vf2+"creatable_vgpu_types"); strings.Contains(c, "L40S-4Q") || !strings.Contains(c, "L40S-12Q") {
		t.Errorf("equal-size GPU offers %q", c)
	}
	if err := h.WriteFile(vf2+"current_vgpu_type", []byte(id4)); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("second type: %v", err)
	}
	if err := h.WriteFile(vf+"current_vgpu_type", []byte(id4)); !errors.Is(err, syscall.EBUSY) {
		t.Errorf("occupied VF: %v", err)
	}
	// Mixed-size GPU takes different sizes.
	mvf := "bus/pci/devices/0000:81:00.4/nvidia/"
	mvf2 := "bus/pci/devices/0000:81:00.5/nvidia/"
	if err := h.WriteFile(mvf+"current_vgpu_type", []byte(id12)); err != nil {
		t.Fatal(err)
	}
	if err := h.WriteFile(mvf2+"current_vgpu_type", []byte(id4)); err != nil {
		t.Errorf("mixed-size GPU refused a second size: %v", err)
	}
	for _, p := range []string{vf, mvf, mvf2} {
		if err := h.WriteFile(p+"current_vgpu_type", []byte("0")); err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(before, snapshot(t, h)) {
		t.Error("create then remove did not restore the host")
	}
}

func TestMIGRules(t *testing.T) {
	h := open(t, "h100x8")
	lib := h.NVML()
	if ret := lib.Init(); ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	if v, _ := lib.SystemGetDriverVersion(); !strings.Contains(v, "simulated") {
		t.Errorf("driver version %q does not say simulated", v)
	}
	dev, ret := lib.DeviceGetHandleByPciBusId("00000000:18:00.0")
	if ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	if mode, _, _ := dev.GetMigMode(); mode != nvml.DEVICE_MIG_ENABLE {
		t.Fatal("GPU 0 not in MIG mode")
	}
	before := snapshot(t, h)
	p3, ret := dev.GetGpuInstanceProfileInfo(nvml.GPU_INSTANCE_PROFILE_3_SLICE)
	if ret != nvml.SUCCESS || p3.Id != 9 {
		t.Fatalf("3g profile: %+v %v", p3, ret)
	}
	p1, _ := dev.GetGpuInstanceProfileInfo(nvml.GPU_INSTANCE_PROFILE_1_SLICE)
	gi, ret := dev.CreateGpuInstanceWithPlacement(&p3, &nvml.GpuInstancePlacement{Start: 4, Size: 4})
	if ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	cases := []struct {
		name      string
		info      *nvml.GpuInstanceProfileInfo
		placement nvml.GpuInstancePlacement
		want      nvml.Return
	}{
		{"overlap", &p1, nvml.GpuInstancePlacement{Start: 5, Size: 1}, nvml.ERROR_INSUFFICIENT_RESOURCES},
		{"start not allowed", &p3, nvml.GpuInstancePlacement{Start: 2, Size: 4}, nvml.ERROR_INVALID_ARGUMENT},
		{"wrong size", &p3, nvml.GpuInstancePlacement{Start: 0, Size: 2}, nvml.ERROR_INVALID_ARGUMENT},
	}
	for _, tc := range cases {
		mid := snapshot(t, h)
		if _, ret := dev.CreateGpuInstanceWithPlacement(tc.info, &tc.placement); ret != tc.want {
			t.Errorf("%s: ret = %v, want %v", tc.name, ret, tc.want)
		}
		if !bytes.Equal(mid, snapshot(t, h)) {
			t.Errorf("%s: refused create changed the host", tc.name)
		}
	}
	free, _ := dev.GetGpuInstancePossiblePlacements(&p1)
	if len(free) != 4 || free[0].Start != 0 || free[3].Start != 3 {
		t.Errorf("1g free placements beside a 3g@4: %+v", free)
	}
	ciInfo, ret := gi.GetComputeInstanceProfileInfo(nvml.COMPUTE_INSTANCE_PROFILE_3_SLICE, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
	if ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	ci, ret := gi.CreateComputeInstance(&ciInfo)
	if ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	if ret := gi.Destroy(); ret != nvml.ERROR_IN_USE {
		t.Errorf("destroy GI with a CI: %v", ret)
	}
	// A MIG-backed vGPU takes the GI; the GI is then in use.
	vf := "bus/pci/devices/0000:18:00.4/nvidia/"
	list := read(t, h, vf+"creatable_vgpu_types")
	if !strings.Contains(list, "H100-3-40C") || strings.Contains(list, "H100-1-10C") || strings.Contains(list, "H100-4C") {
		t.Fatalf("creatable on a MIG GPU with one 3g GI: %q", list)
	}
	var id string
	for _, l := range strings.Split(list, "\n")[1:] {
		if strings.Contains(l, "H100-3-40C") {
			id = strings.TrimSpace(strings.SplitN(l, ":", 2)[0])
		}
	}
	if err := h.WriteFile(vf+"current_vgpu_type", []byte(id)); err != nil {
		t.Fatal(err)
	}
	info, _ := gi.GetInfo()
	if got := read(t, h, vf+"gpu_instance_id"); got != "1" || info.Id != 1 {
		t.Errorf("gpu_instance_id = %s, GI id = %d", got, info.Id)
	}
	if err := h.WriteFile("bus/pci/devices/0000:18:00.5/nvidia/current_vgpu_type", []byte(id)); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("second vGPU on the only 3g GI: %v", err)
	}
	if err := h.WriteFile(vf+"current_vgpu_type", []byte("0")); err != nil {
		t.Fatal(err)
	}
	if ret := ci.Destroy(); ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	if ret := gi.Destroy(); ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	if !bytes.Equal(before, snapshot(t, h)) {
		t.Error("create then remove did not restore the host")
	}
	// A GPU not in MIG mode refuses.
	dev7, _ := lib.DeviceGetHandleByPciBusId("00000000:db:00.0")
	if _, ret := dev7.CreateGpuInstanceWithPlacement(&p3, &nvml.GpuInstancePlacement{Start: 0, Size: 4}); ret != nvml.ERROR_NOT_SUPPORTED {
		t.Errorf("MIG create on a non-MIG GPU: %v", ret)
	}
}

func TestPassthroughBinding(t *testing.T) {
	h := open(t, "mixed")
	before := snapshot(t, h)
	for _, a := range []string{"0000:c1:00.0", "0000:c1:00.1"} {
		steps := []struct{ p, d string }{
			{"bus/pci/devices/" + a + "/driver_override", "vfio-pci"},
			{"bus/pci/devices/" + a + "/driver/unbind", a},
			{"bus/pci/drivers_probe", a},
		}
		for _, s := range steps {
			if err := h.WriteFile(s.p, []byte(s.d)); err != nil {
				t.Fatalf("%s: %v", s.p, err)
			}
		}
		if l, _ := h.Readlink("bus/pci/devices/" + a + "/driver"); !strings.HasSuffix(l, "/vfio-pci") {
			t.Errorf("%s driver = %q", a, l)
		}
	}
	n, _ := h.NVML().DeviceGetCount()
	if n != 4 {
		t.Errorf("NVML sees %d GPUs, want 4 (the vfio-bound one hidden)", n)
	}
	for _, a := range []string{"0000:c1:00.0", "0000:c1:00.1"} {
		for _, s := range []struct{ p, d string }{
			{"bus/pci/drivers/vfio-pci/unbind", a},
			{"bus/pci/devices/" + a + "/driver_override", "\n"},
			{"bus/pci/drivers_probe", a},
		} {
			if err := h.WriteFile(s.p, []byte(s.d)); err != nil {
				t.Fatalf("%s: %v", s.p, err)
			}
		}
	}
	if !bytes.Equal(before, snapshot(t, h)) {
		t.Errorf("bind then unbind did not restore the host")
	}
}

// Two handles on one directory (as gpuvmd and a plugin process) see each
// other's writes, and concurrent writers never lose one.
func TestSharedStateConcurrent(t *testing.T) {
	dir := t.TempDir()
	a, err := Open(dir, "l40sx4")
	if err != nil {
		t.Fatal(err)
	}
	b, err := Open(dir, "l40sx4")
	if err != nil {
		t.Fatal(err)
	}
	list := read(t, a, "bus/pci/devices/0000:21:00.4/nvidia/creatable_vgpu_types")
	id := strings.TrimSpace(strings.SplitN(strings.Split(list, "\n")[1], ":", 2)[0])
	var wg sync.WaitGroup
	vfs := []string{"0000:21:00.4", "0000:21:00.5", "0000:21:00.6", "0000:21:00.7"}
	for i, vf := range vfs {
		h := a
		if i%2 == 1 {
			h = b
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := h.WriteFile("bus/pci/devices/"+vf+"/nvidia/current_vgpu_type", []byte(id)); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	for _, vf := range vfs {
		if got := read(t, b, "bus/pci/devices/"+vf+"/nvidia/current_vgpu_type"); got != id {
			t.Errorf("%s = %s, want %s", vf, got, id)
		}
	}
}
