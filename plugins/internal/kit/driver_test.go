package kit

import (
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"

	"github.com/gpuvm/gpuvm/pkg/backend"
)

// The driver as NVML reports it, on go-nvml's mocks: the vGPU manager with
// its range of guest vGPU versions, a driver that has no vGPU range, one
// whose library lacks the call, and no driver.
func TestReadDriver(t *testing.T) {
	version := func(v string, ret nvml.Return) func() (string, nvml.Return) {
		return func() (string, nvml.Return) { return v, ret }
	}
	vgpuRange := func(min, max uint32, ret nvml.Return) func() (nvml.VgpuVersion, nvml.VgpuVersion, nvml.Return) {
		return func() (nvml.VgpuVersion, nvml.VgpuVersion, nvml.Return) {
			return nvml.VgpuVersion{MinVersion: min, MaxVersion: max}, nvml.VgpuVersion{}, ret
		}
	}
	tests := []struct {
		name string
		lib  nvml.Interface
		want *backend.Driver
	}{
		{"vGPU manager", &mock.Interface{SystemGetDriverVersionFunc: version("550.90.05\x00\x00", nvml.SUCCESS), GetVgpuVersionFunc: vgpuRange(0x100000, 0x110003, nvml.SUCCESS)},
			&backend.Driver{Version: "550.90.05", VGPUMin: "16.0", VGPUMax: "17.3"}},
		{"not the vGPU manager", &mock.Interface{SystemGetDriverVersionFunc: version("560.35.03", nvml.SUCCESS), GetVgpuVersionFunc: vgpuRange(0, 0, nvml.ERROR_NOT_SUPPORTED)},
			&backend.Driver{Version: "560.35.03"}},
		{"a library without nvmlGetVgpuVersion", &mock.Interface{SystemGetDriverVersionFunc: version("535.216.01", nvml.SUCCESS)},
			&backend.Driver{Version: "535.216.01"}},
		{"driver version unreadable", &mock.Interface{SystemGetDriverVersionFunc: version("", nvml.ERROR_UNINITIALIZED)}, nil},
		{"no NVML", nil, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := ReadDriver(tc.lib)
			switch {
			case got == nil && tc.want == nil:
			case got == nil || tc.want == nil || *got != *tc.want:
				t.Errorf("ReadDriver = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestVGPUVersion(t *testing.T) {
	for v, want := range map[uint32]string{0x110003: "17.3", 0x100000: "16.0", 0x130001: "19.1", 0: "0.0"} {
		if got := VGPUVersion(v); got != want {
			t.Errorf("VGPUVersion(%#x) = %q, want %q", v, got, want)
		}
	}
}
