package gpu

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

func TestCheckGuestDriver(t *testing.T) {
	v17 := &HostDriver{Version: "550.54.16", VGPUMin: "17.0", VGPUMax: "17.3"}
	cross := &HostDriver{Version: "550.54.16", VGPUMin: "16.0", VGPUMax: "17.3"}
	tests := []struct {
		name      string
		guest     string
		host      *HostDriver
		checked   bool
		supported bool
		release   int
		reason    string // a part of the reason
	}{
		{"same branch", "550.90.07", v17, true, true, 17, ""},
		{"older branch", "535.183.01", v17, true, false, 16, "535.183.01 (vGPU 16) is not supported by this host's vGPU manager 550.x (vGPU 17.0–17.3)"},
		{"newer branch", "570.86.10", v17, true, false, 18, "(vGPU 18) is not supported"},
		{"older branch in a cross-branch range", "535.183.01", cross, true, true, 16, ""},
		{"unknown branch", "560.28.03", v17, true, false, 0, "branch R560, not one of NVIDIA vGPU software gpuvm knows"},
		{"no branch", "latest", v17, true, false, 0, `"latest" names no branch`},
		{"two-part version", "550.90", v17, true, true, 17, ""},
		{"no host driver", "535.183.01", nil, false, false, 0, ""},
		{"not the vGPU manager", "535.183.01", &HostDriver{Version: "550.54.14"}, false, false, 0, ""},
		{"simulator", "535.183.01", &HostDriver{Version: "simulated", VGPUMin: "simulated", VGPUMax: "simulated"}, false, false, 0, ""},
		{"simulator with a range", "535.183.01", &HostDriver{Version: "simulated", VGPUMin: "17.0", VGPUMax: "17.3"}, false, false, 0, ""},
		{"inverted range", "535.183.01", &HostDriver{Version: "550.54.16", VGPUMin: "17.3", VGPUMax: "16.0"}, false, false, 0, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := CheckGuestDriver(tc.guest, tc.host)
			if m.Checked != tc.checked || m.Supported != tc.supported || m.Release != tc.release {
				t.Fatalf("CheckGuestDriver(%q) = %+v, want checked %v supported %v release %d", tc.guest, m, tc.checked, tc.supported, tc.release)
			}
			if tc.reason == "" && m.Reason != "" {
				t.Errorf("reason %q, want none", m.Reason)
			}
			if !strings.Contains(m.Reason, tc.reason) {
				t.Errorf("reason %q, want it to contain %q", m.Reason, tc.reason)
			}
		})
	}
}

func TestVGPURelease(t *testing.T) {
	for b, want := range map[int]int{470: 13, 510: 14, 525: 15, 535: 16, 550: 17, 570: 18, 580: 19} {
		if got, ok := VGPURelease(b); !ok || got != want {
			t.Errorf("VGPURelease(%d) = %d, %v; want %d", b, got, ok, want)
		}
	}
	for _, b := range []int{0, 418, 560} {
		if got, ok := VGPURelease(b); ok {
			t.Errorf("VGPURelease(%d) = %d, want unknown", b, got)
		}
	}
}

func TestDriverVersions(t *testing.T) {
	tests := []struct {
		in     string
		valid  bool
		branch int
	}{
		{"550.90.07", true, 550},
		{"535.183.01", true, 535},
		{"570.86", true, 570},
		{"simulated", false, 0},
		{"", false, 0},
		{"550", false, 550},
		{"550.90.07.1", false, 550},
		{" 550.90.07", false, 550},
		{"v550.90", false, 0},
		{"055.1", false, 55},
	}
	for _, tc := range tests {
		if got := ValidDriverVersion(tc.in); got != tc.valid {
			t.Errorf("ValidDriverVersion(%q) = %v, want %v", tc.in, got, tc.valid)
		}
		b, ok := DriverBranch(tc.in)
		if ok != (tc.branch != 0) || b != tc.branch && tc.branch != 0 {
			t.Errorf("DriverBranch(%q) = %d, %v; want %d", tc.in, b, ok, tc.branch)
		}
	}
}

// A hosts.inventory row stored before the inventory kept the driver reads
// with no driver (so nothing is checked against it); one with it reads it.
func TestStoredInventoryDriver(t *testing.T) {
	tests := []struct {
		name string
		row  string
		want *HostDriver
	}{
		{"older row", `{"host":"/sys","simulated":false,"backends":["vgpu"],"gpus":[],"devices":[]}`, nil},
		{"newer row", `{"host":"/sys","simulated":false,"backends":["vgpu"],"gpus":[],"devices":[],"driver":{"version":"550.54.16","vgpu_min":"17.0","vgpu_max":"17.3"}}`,
			&HostDriver{Version: "550.54.16", VGPUMin: "17.0", VGPUMax: "17.3"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var hi HostInventory
			if err := json.Unmarshal([]byte(tc.row), &hi); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(hi.Driver, tc.want) {
				t.Errorf("driver %+v, want %+v", hi.Driver, tc.want)
			}
			if hi.Driver == nil {
				if m := CheckGuestDriver("535.183.01", hi.Driver); m.Checked {
					t.Errorf("checked against no driver: %+v", m)
				}
			}
		})
	}
}
