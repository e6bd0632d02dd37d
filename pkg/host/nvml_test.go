//go:build cgo

package host

import (
	"errors"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
)

func TestOpenNVML(t *testing.T) {
	initReturns := func(r nvml.Return) nvml.Interface {
		return &mock.Interface{InitFunc: func() nvml.Return { return r }}
	}
	for _, tc := range []struct {
		name   string
		lib    nvml.Interface
		ok     bool
		reason string
	}{
		{"dgxa100", dgxa100.New(), true, ""},
		{"no driver", initReturns(nvml.ERROR_LIBRARY_NOT_FOUND), false,
			"NVML unavailable: libnvidia-ml.so.1 not found (no NVIDIA driver on this host)"},
		{"driver not loaded", initReturns(nvml.ERROR_DRIVER_NOT_LOADED), false, "NVML unavailable: ERROR_DRIVER_NOT_LOADED"},
		{"no permission", initReturns(nvml.ERROR_NO_PERMISSION), false, "NVML unavailable: ERROR_NO_PERMISSION"},
		{"nil", nil, false, "NVML unavailable: no library given"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lib, reason := OpenNVML(tc.lib)
			if tc.ok {
				if lib != tc.lib || reason != "" {
					t.Fatalf("OpenNVML = %v, %q; want the library", lib, reason)
				}
				return
			}
			if lib != nil || reason != tc.reason {
				t.Fatalf("OpenNVML = %v, %q; want nil, %q", lib, reason, tc.reason)
			}
			if strings.Contains(reason, "\n") {
				t.Errorf("reason %q is not one line", reason)
			}
		})
	}
}

// TestNewNVML runs the real library loader: on a machine without the
// driver it must say so and not fail in any other way.
func TestNewNVML(t *testing.T) {
	lib, reason := OpenNVML(NewNVML())
	if lib != nil {
		t.Logf("NVML is available here")
		if ret := lib.Shutdown(); ret != nvml.SUCCESS {
			t.Errorf("Shutdown: %v", ret)
		}
		return
	}
	if !strings.HasPrefix(reason, "NVML unavailable: ") {
		t.Errorf("reason %q", reason)
	}
	t.Log(reason)
}

func TestNVMLBusID(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"0000:41:00.0", "00000000:41:00.0"},
		{"41:00.0", "00000000:41:00.0"},
		{"0000:C1:00.4", "00000000:c1:00.4"},
		{"0001:3b:00.0", "00000001:3b:00.0"},
		{"../x", "../x"}, // left for NVML to refuse
		{"", ""},
	} {
		t.Run(tc.in, func(t *testing.T) {
			if got := NVMLBusID(tc.in); got != tc.want {
				t.Errorf("NVMLBusID(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

func TestAddressFromNVML(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"00000000:41:00.0", "0000:41:00.0"},
		{"00000000:C1:00.4", "0000:c1:00.4"},
		{"00000000:3B:00.0\x00\x00\x00", "0000:3b:00.0"},
		{"0000:41:00.0", "0000:41:00.0"}, // busIdLegacy, and the mocks' form
		{"00000001:41:00.0", "0001:41:00.0"},
		{"00010000:e0:17.0", "10000:e0:17.0"}, // a VMD domain keeps its digits
		{"1:41:00.0", "0001:41:00.0"},
		{"41:00.0", "0000:41:00.0"},
		{"", ""},
		{"garbage", "garbage"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			if got := AddressFromNVML(tc.in); got != tc.want {
				t.Errorf("AddressFromNVML(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
	t.Run("round trip", func(t *testing.T) {
		for _, a := range []string{"0000:41:00.0", "0000:c1:00.7", "0002:00:1f.3"} {
			if got := AddressFromNVML(NVMLBusID(a)); got != a {
				t.Errorf("AddressFromNVML(NVMLBusID(%s)) = %s", a, got)
			}
		}
	})
}

func TestMIGMode(t *testing.T) {
	server := dgxa100.New()
	lib, reason := OpenNVML(server)
	if lib == nil {
		t.Fatal(reason)
	}
	dev, ret := lib.DeviceGetHandleByIndex(0)
	if ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	if on, err := MIGMode(dev); err != nil || on {
		t.Errorf("MIGMode of a fresh A100 = %v, %v; want false", on, err)
	}
	if ret, _ := dev.SetMigMode(nvml.DEVICE_MIG_ENABLE); ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	if on, err := MIGMode(dev); err != nil || !on {
		t.Errorf("MIGMode after enabling = %v, %v; want true", on, err)
	}
	other, _ := lib.DeviceGetHandleByIndex(1)
	if on, err := MIGMode(other); err != nil || on {
		t.Errorf("MIGMode of another A100 = %v, %v; want false", on, err)
	}

	migMode := func(current, pending int, r nvml.Return) nvml.Device {
		return &mock.Device{GetMigModeFunc: func() (int, int, nvml.Return) { return current, pending, r }}
	}
	for _, tc := range []struct {
		name string
		dev  nvml.Device
		on   bool
		err  error
	}{
		{"enabled", migMode(nvml.DEVICE_MIG_ENABLE, nvml.DEVICE_MIG_ENABLE, nvml.SUCCESS), true, nil},
		{"pending enable", migMode(nvml.DEVICE_MIG_DISABLE, nvml.DEVICE_MIG_ENABLE, nvml.SUCCESS), false, nil},
		{"pending disable", migMode(nvml.DEVICE_MIG_ENABLE, nvml.DEVICE_MIG_DISABLE, nvml.SUCCESS), true, nil},
		{"no MIG", migMode(0, 0, nvml.ERROR_NOT_SUPPORTED), false, nil},
		{"GPU lost", migMode(0, 0, nvml.ERROR_GPU_IS_LOST), false, nvml.ERROR_GPU_IS_LOST},
		{"nil", nil, false, errors.New("no device")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			on, err := MIGMode(tc.dev)
			if on != tc.on {
				t.Errorf("MIGMode = %v, want %v", on, tc.on)
			}
			switch {
			case tc.err == nil && err != nil:
				t.Errorf("err = %v", err)
			case tc.err != nil && err == nil:
				t.Errorf("no error, want %v", tc.err)
			case tc.err != nil && !errors.Is(err, tc.err) && !strings.Contains(err.Error(), tc.err.Error()):
				t.Errorf("err = %v, want %v", err, tc.err)
			}
		})
	}
}
