//go:build cgo

package capability

import (
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"

	"github.com/gpuvm/gpuvm/pkg/gpu"
	"github.com/gpuvm/gpuvm/pkg/host/sim"
)

// device is a go-nvml mock GPU at bus ID busID whose vGPU metadata answers
// caps (or ret, when it is not SUCCESS).
func device(busID string, caps uint32, ret nvml.Return) *mock.Device {
	return &mock.Device{
		GetPciInfoFunc: func() (nvml.PciInfo, nvml.Return) {
			var p nvml.PciInfo
			for i := 0; i < len(busID); i++ {
				p.BusId[i] = int8(busID[i])
			}
			return p, nvml.SUCCESS
		},
		GetVgpuMetadataFunc: func() (nvml.VgpuPgpuMetadata, nvml.Return) {
			var md nvml.VgpuPgpuMetadata
			md.PgpuVirtualizationCaps = caps
			return md, ret
		},
	}
}

func library(devs ...nvml.Device) *mock.Interface {
	return &mock.Interface{
		DeviceGetCountFunc: func() (int, nvml.Return) { return len(devs), nvml.SUCCESS },
		DeviceGetHandleByIndexFunc: func(i int) (nvml.Device, nvml.Return) {
			if i < 0 || i >= len(devs) {
				return nil, nvml.ERROR_INVALID_ARGUMENT
			}
			return devs[i], nvml.SUCCESS
		},
	}
}

func TestProbeNVML(t *testing.T) {
	lib := library(
		device("00000000:41:00.0", 0x1, nvml.SUCCESS),             // a vGPU manager that migrates
		device("00000000:42:00.0", 0x0, nvml.SUCCESS),             // one that does not
		device("00000000:43:00.0", 0x1, nvml.ERROR_NOT_SUPPORTED), // not a vGPU manager
		device("00000000:44:00.0", 0x3, nvml.SUCCESS),             // other bits set too
	)
	f := ProbeNVML(lib, false)
	want := map[string]bool{"0000:41:00.0": true, "0000:42:00.0": false, "0000:43:00.0": false, "0000:44:00.0": true}
	if !f.Known || f.Simulated || len(f.Migration) != len(want) {
		t.Fatalf("%+v", f)
	}
	for a, w := range want {
		if f.Migration[a] != w {
			t.Errorf("%s: migration %v, want %v", a, f.Migration[a], w)
		}
	}
}

func TestProbeNVMLFails(t *testing.T) {
	count := &mock.Interface{DeviceGetCountFunc: func() (int, nvml.Return) { return 0, nvml.ERROR_UNINITIALIZED }}
	if f := ProbeNVML(count, false); f.Known || !strings.Contains(f.Note, "count devices") {
		t.Errorf("%+v", f)
	}
	// A mock without GetVgpuMetadata panics; the probe says so instead.
	bare := library(&mock.Device{GetPciInfoFunc: device("00000000:41:00.0", 0, 0).GetPciInfoFunc})
	if f := ProbeNVML(bare, true); f.Known || !f.Simulated || !strings.HasPrefix(f.Note, "NVML failed") {
		t.Errorf("%+v", f)
	}
	if f := ProbeNVML(nil, false); f.Known || f.Note != "NVML unavailable" {
		t.Errorf("%+v", f)
	}
}

// NVML's answer, read through go-nvml's mocks, decides a vGPU VM's
// capabilities on a host new enough, and none on Debian 12's QEMU.
func TestNVMLDecides(t *testing.T) {
	f := ProbeNVML(library(device("00000000:41:00.0", 0x1, nvml.SUCCESS), device("00000000:42:00.0", 0x0, nvml.SUCCESS)), false)
	for _, tc := range []struct {
		addr string
		kind gpu.Kind
		hv   Hypervisor
		can  bool
		says string
	}{
		{"0000:41:00.0", gpu.KindVGPU, modern, true, "the NVIDIA driver supports vGPU migration on this GPU (NVML)"},
		{"0000:42:00.0", gpu.KindVGPU, modern, false, "the NVIDIA driver does not support vGPU migration on this GPU (NVML)"},
		{"0000:41:00.0", gpu.KindMIG, modern, true, "MIG-backed vGPU migration"},
		{"0000:42:00.0", gpu.KindMIG, modern, false, "does not support MIG-backed vGPU migration"},
		{"0000:41:00.0", gpu.KindVGPU, debian12, false, "QEMU 7.2 is older than 8.1"},
		{"0000:41:00.0", gpu.KindPassthrough, modern, false, "passthrough GPU cannot be suspended"},
	} {
		s := Of(Input{Profile: "p", GPU: tc.kind, DiskFormat: "qcow2", Hypervisor: tc.hv, Driver: f.For([]string{tc.addr})})
		if s.Suspend.Can != tc.can || !strings.Contains(s.Suspend.Reason, tc.says) {
			t.Errorf("%s %s on %s: suspend %v %q; want %v %q", tc.kind, tc.addr, tc.hv, s.Suspend.Can, s.Suspend.Reason, tc.can, tc.says)
		}
	}
}

// The simulated host answers through the same probe and every answer says
// it is simulated: its vGPU GPUs migrate, its passthrough-only GPU not.
func TestProbeSimulatedHost(t *testing.T) {
	h, err := sim.Open(t.TempDir(), "mixed")
	if err != nil {
		t.Fatal(err)
	}
	f := ProbeNVML(h.NVML(), true)
	if !f.Known || !f.Simulated || len(f.Migration) != 5 {
		t.Fatalf("%+v", f)
	}
	var yes, no []string
	for a, m := range f.Migration {
		if m {
			yes = append(yes, a)
		} else {
			no = append(no, a)
		}
	}
	if len(yes) != 4 || len(no) != 1 {
		t.Fatalf("migrating %v, not %v", yes, no)
	}
	s := Of(Input{Profile: "p", GPU: gpu.KindVGPU, DiskFormat: "qcow2", Hypervisor: modern, Driver: f.For(yes[:1])})
	if !s.Suspend.Can || !strings.Contains(s.Suspend.Reason, "(the simulated host's NVML) (simulated host)") ||
		!strings.Contains(s.Basis, "the simulated host's NVML reports vGPU migration support") {
		t.Errorf("%+v", s)
	}
	if s := Of(Input{Profile: "p", GPU: gpu.KindVGPU, Hypervisor: modern, Driver: f.For(no)}); s.Suspend.Can || !strings.Contains(s.Suspend.Reason, "simulated host") {
		t.Errorf("%+v", s.Suspend)
	}
}
