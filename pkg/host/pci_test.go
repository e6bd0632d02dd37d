package host

import (
	"errors"
	"io/fs"
	"reflect"
	"strings"
	"testing"

	"github.com/gpuvm/gpuvm/pkg/gpu"
)

func TestValidateAddress(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		err      string // part of the error; "" for none
	}{
		{"0000:41:00.0", "0000:41:00.0", ""},
		{"41:00.0", "0000:41:00.0", ""},
		{"0000:C1:00.4", "0000:c1:00.4", ""},
		{"0001:c1:1f.7", "0001:c1:1f.7", ""},
		{" 0000:41:00.0\n", "0000:41:00.0", ""},
		{"", "", "want DDDD:BB:SS.F"},
		{"0000:41:00", "", "want DDDD:BB:SS.F"},
		{"0000:41:00.0/..", "", "want DDDD:BB:SS.F"},
		{"../../../etc", "", "want DDDD:BB:SS.F"},
		{"0000:41:00.0/driver", "", "want DDDD:BB:SS.F"},
		{"0000:41:00.0\x00", "", "want DDDD:BB:SS.F"},
		{"00000000:41:00.0", "", "want DDDD:BB:SS.F"}, // NVML's form: use AddressFromNVML
		{"10000:e0:17.0", "", "want DDDD:BB:SS.F"},
		{"0000:41:0.0", "", "want DDDD:BB:SS.F"},
		{"0000:4g:00.0", "", "want DDDD:BB:SS.F"},
		{"0000:41:20.0", "", "slot 20 is above 1f"},
		{"0000:41:00.8", "", "function 8 is above 7"},
		{"0000:41:00.0.0", "", "want DDDD:BB:SS.F"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ValidateAddress(tc.in)
			if tc.err == "" {
				if err != nil || got != tc.want {
					t.Fatalf("ValidateAddress(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("ValidateAddress(%q) = %q, %v; want an error with %q", tc.in, got, err, tc.err)
			}
		})
	}
}

func TestReadPCIDevice(t *testing.T) {
	for _, tc := range []struct {
		tree, addr string
		want       PCIDevice
		vf, bridge bool
		display    bool
		nvidia     bool
	}{
		{"t4", "0000:3b:00.0", PCIDevice{
			Address: "0000:3b:00.0", Vendor: 0x10de, Device: 0x1eb8, Class: 0x030200,
			SubsystemVendor: 0x10de, SubsystemDevice: 0x12a2, Driver: "nvidia", NUMANode: 0, IOMMUGroup: "30",
		}, false, false, true, true},
		{"t4", "3a:00.0", PCIDevice{
			Address: "0000:3a:00.0", Vendor: 0x8086, Device: 0x2030, Class: 0x060400,
			SubsystemVendor: 0x8086, Driver: "pcieport", NUMANode: 0, IOMMUGroup: "29",
		}, false, true, false, false},
		{"a40-vfs", "0000:41:00.0", PCIDevice{
			Address: "0000:41:00.0", Vendor: 0x10de, Device: 0x2235, Class: 0x030200,
			SubsystemVendor: 0x10de, SubsystemDevice: 0x145a, Driver: "nvidia", NUMANode: 0, IOMMUGroup: "41",
			VFs:      []string{"0000:41:00.4", "0000:41:00.5", "0000:41:00.6", "0000:41:00.7"},
			TotalVFs: 32, NumVFs: 4,
		}, false, false, true, true},
		{"a40-vfs", "0000:41:00.6", PCIDevice{
			Address: "0000:41:00.6", Vendor: 0x10de, Device: 0x2235, Class: 0x030200,
			SubsystemVendor: 0x10de, SubsystemDevice: 0x145a, Driver: "nvidia", NUMANode: 0, IOMMUGroup: "44",
			PhysFn: "0000:41:00.0",
		}, true, false, true, true},
		{"l40s-vfio", "0000:C1:00.0", PCIDevice{
			Address: "0000:c1:00.0", Vendor: 0x10de, Device: 0x26b9, Class: 0x030200,
			SubsystemVendor: 0x10de, SubsystemDevice: 0x1851, Driver: "nvidia", NUMANode: 1, IOMMUGroup: "61",
			VFs:      []string{"0000:c1:00.4", "0000:c1:00.5", "0000:c1:00.6", "0000:c1:00.7"},
			TotalVFs: 32, NumVFs: 4,
		}, false, false, true, true},
		{"l40s-vfio", "0000:c1:00.4", PCIDevice{
			Address: "0000:c1:00.4", Vendor: 0x10de, Device: 0x26b9, Class: 0x030200,
			SubsystemVendor: 0x10de, SubsystemDevice: 0x1851, Driver: "nvidia", NUMANode: 1, IOMMUGroup: "62",
			PhysFn: "0000:c1:00.0",
		}, true, false, true, true},
		{"rtx4090-group", "0000:01:00.0", PCIDevice{
			Address: "0000:01:00.0", Vendor: 0x10de, Device: 0x2684, Class: 0x030000,
			SubsystemVendor: 0x1043, SubsystemDevice: 0x889d, Driver: "vfio-pci", DriverOverride: "vfio-pci",
			NUMANode: -1, IOMMUGroup: "12",
		}, false, false, true, true},
		{"rtx4090-group", "0000:01:00.1", PCIDevice{
			Address: "0000:01:00.1", Vendor: 0x10de, Device: 0x22ba, Class: 0x040300,
			SubsystemVendor: 0x1043, SubsystemDevice: 0x889d, Driver: "snd_hda_intel", NUMANode: -1, IOMMUGroup: "12",
		}, false, false, false, true},
		{"rtx4090-group", "0000:00:02.0", PCIDevice{
			Address: "0000:00:02.0", Vendor: 0x8086, Device: 0xa780, Class: 0x030000,
			SubsystemVendor: 0x1043, SubsystemDevice: 0x8882, Driver: "i915", NUMANode: -1, IOMMUGroup: "0",
		}, false, false, true, false},
		{"shared-group", "0000:06:00.0", PCIDevice{
			Address: "0000:06:00.0", Vendor: 0x144d, Device: 0xa80a, Class: 0x010802,
			SubsystemVendor: 0x144d, SubsystemDevice: 0xa801, Driver: "nvme", NUMANode: -1, IOMMUGroup: "7",
		}, false, false, false, false},
	} {
		t.Run(tc.tree+"/"+tc.addr, func(t *testing.T) {
			forEachLinkStyle(t, tc.tree, func(t *testing.T, fsys SysFS) {
				got, err := ReadPCIDevice(fsys, tc.addr)
				if err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(got, tc.want) {
					t.Errorf("ReadPCIDevice(%s) =\n%+v\nwant\n%+v", tc.addr, got, tc.want)
				}
				if got.IsVF() != tc.vf || got.IsBridge() != tc.bridge || got.IsDisplay() != tc.display || got.IsNVIDIA() != tc.nvidia {
					t.Errorf("IsVF, IsBridge, IsDisplay, IsNVIDIA = %v %v %v %v; want %v %v %v %v",
						got.IsVF(), got.IsBridge(), got.IsDisplay(), got.IsNVIDIA(), tc.vf, tc.bridge, tc.display, tc.nvidia)
				}
			})
		})
	}
}

// oddDevice is a small tree with the attributes of one device at 0000:01:00.0.
func oddDevice(t *testing.T, files map[string]string) SysFS {
	t.Helper()
	all := map[string]string{
		"bus/pci/devices/0000:01:00.0": "-> ../../../devices/pci0000:00/0000:00:01.0/0000:01:00.0",
	}
	for k, v := range files {
		all["devices/pci0000:00/0000:00:01.0/0000:01:00.0/"+k] = v
	}
	return NewDir(writeFiles(t, all))
}

func TestReadPCIDeviceOdd(t *testing.T) {
	base := map[string]string{"vendor": "0x10de\n", "device": "0x2235\n"}
	with := func(kv ...string) map[string]string {
		m := map[string]string{}
		for k, v := range base {
			m[k] = v
		}
		for i := 0; i+1 < len(kv); i += 2 {
			if kv[i+1] == "<none>" {
				delete(m, kv[i])
			} else {
				m[kv[i]] = kv[i+1]
			}
		}
		return m
	}
	for _, tc := range []struct {
		name  string
		files map[string]string
		check func(PCIDevice) bool
		err   string
	}{
		{"minimal", base, func(d PCIDevice) bool {
			return d.Vendor == 0x10de && d.Device == 0x2235 && d.NUMANode == -1 && d.Class == 0 &&
				d.Driver == "" && d.DriverOverride == "" && d.IOMMUGroup == "" && d.VFs == nil && d.TotalVFs == 0
		}, ""},
		{"numa -1", with("numa_node", "-1\n"), func(d PCIDevice) bool { return d.NUMANode == -1 }, ""},
		{"numa 3", with("numa_node", "3\n"), func(d PCIDevice) bool { return d.NUMANode == 3 }, ""},
		{"override null", with("driver_override", "(null)\n"), func(d PCIDevice) bool { return d.DriverOverride == "" }, ""},
		{"override set", with("driver_override", "vfio-pci\n"), func(d PCIDevice) bool { return d.DriverOverride == "vfio-pci" }, ""},
		{"virtfn order", with(
			"virtfn0", "-> ../0000:01:00.4",
			"virtfn1", "-> ../0000:01:00.5",
			"virtfn2", "-> ../0000:01:00.6",
			"virtfn10", "-> ../0000:01:01.6",
			"virtfn9", "-> ../0000:01:01.5",
			"virtfn_x", "-> ../nothing",
		), func(d PCIDevice) bool {
			return reflect.DeepEqual(d.VFs, []string{"0000:01:00.4", "0000:01:00.5", "0000:01:00.6", "0000:01:01.5", "0000:01:01.6"})
		}, ""},
		{"no vendor", with("vendor", "<none>"), nil, "0000:01:00.0/vendor: file does not exist"},
		{"no device", with("device", "<none>"), nil, "0000:01:00.0/device: file does not exist"},
		{"bad vendor", with("vendor", "nvidia\n"), nil, `parse PCI ID "nvidia"`},
		{"bad class", with("class", "0x1030000\n"), nil, "not a 24-bit hex class code"},
		{"bad numa", with("numa_node", "-2\n"), nil, "not a NUMA node"},
		{"bad numvfs", with("sriov_numvfs", "four\n"), nil, "not a count"},
		{"odd driver link", with("driver", "-> .."), nil, "does not end in a name"},
		{"driver is a file", with("driver", "nvidia\n"), nil, "read link"},
		{"vendor is a dir", with("vendor", "<none>", "vendor/x", "1"), nil, "vendor: is a directory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := ReadPCIDevice(oddDevice(t, tc.files), "0000:01:00.0")
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) || !strings.Contains(err.Error(), "0000:01:00.0") {
					t.Fatalf("ReadPCIDevice = %+v, %v; want an error naming the device and %q", d, err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !tc.check(d) {
				t.Errorf("ReadPCIDevice = %+v", d)
			}
		})
	}

	t.Run("bad address", func(t *testing.T) {
		_, err := ReadPCIDevice(oddDevice(t, base), "../../../etc")
		if err == nil || !strings.Contains(err.Error(), "DDDD:BB:SS.F") {
			t.Errorf("err = %v", err)
		}
	})
	t.Run("no such device", func(t *testing.T) {
		_, err := ReadPCIDevice(oddDevice(t, base), "0000:02:00.0")
		if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), "0000:02:00.0") {
			t.Errorf("err = %v", err)
		}
	})
}

func TestListPCIDevices(t *testing.T) {
	for _, tc := range []struct {
		tree string
		want []string
	}{
		{"t4", []string{"0000:3a:00.0", "0000:3b:00.0"}},
		{"a40-vfs", []string{"0000:40:01.1", "0000:41:00.0", "0000:41:00.4", "0000:41:00.5", "0000:41:00.6", "0000:41:00.7"}},
		{"rtx4090-group", []string{"0000:00:01.0", "0000:00:02.0", "0000:01:00.0", "0000:01:00.1"}},
		{"shared-group", []string{"0000:00:1b.0", "0000:03:00.0", "0000:04:00.0", "0000:04:01.0", "0000:05:00.0", "0000:05:00.1", "0000:06:00.0"}},
	} {
		t.Run(tc.tree, func(t *testing.T) {
			got, err := ListPCIDevices(treeFS(t, tc.tree))
			if err != nil || !reflect.DeepEqual(got, tc.want) {
				t.Errorf("ListPCIDevices = %v, %v; want %v", got, err, tc.want)
			}
		})
	}
	if _, err := ListPCIDevices(NewDir(t.TempDir())); !IsNotExist(err) || !strings.Contains(err.Error(), "bus/pci/devices") {
		t.Errorf("ListPCIDevices of an empty tree: %v", err)
	}
}

func TestListGPUs(t *testing.T) {
	model := func(id uint16) gpu.Model {
		m, ok := gpu.ModelByID(id)
		if !ok {
			t.Fatalf("model %04x not in the catalogue", id)
		}
		return m
	}
	type want struct {
		addr  string
		model gpu.Model
		known bool
	}
	for _, tc := range []struct {
		tree string
		want []want
	}{
		{"t4", []want{{"0000:3b:00.0", model(0x1eb8), true}}},
		{"a40-vfs", []want{{"0000:41:00.0", model(0x2235), true}}}, // VFs are not GPUs
		{"l40s-vfio", []want{{"0000:c1:00.0", model(0x26b9), true}}},
		{"rtx4090-group", []want{{"0000:01:00.0", model(0x2684), true}}}, // not the audio, not the iGPU
		{"shared-group", []want{{"0000:05:00.0", gpu.UnknownModel(0x2882), false}}},
	} {
		t.Run(tc.tree, func(t *testing.T) {
			forEachLinkStyle(t, tc.tree, func(t *testing.T, fsys SysFS) {
				gpus, err := ListGPUs(fsys)
				if err != nil {
					t.Fatal(err)
				}
				if len(gpus) != len(tc.want) {
					t.Fatalf("ListGPUs = %+v, want %d GPUs", gpus, len(tc.want))
				}
				for i, g := range gpus {
					w := tc.want[i]
					if g.Address != w.addr || !reflect.DeepEqual(g.Model, w.model) || g.Known != w.known {
						t.Errorf("GPU %d = %s %+v known=%v; want %s %+v known=%v", i, g.Address, g.Model, g.Known, w.addr, w.model, w.known)
					}
					want, err := ReadPCIDevice(fsys, g.Address)
					if err != nil || !reflect.DeepEqual(g.PCIDevice, want) {
						t.Errorf("GPU %d's PCIDevice = %+v, ReadPCIDevice says %+v, %v", i, g.PCIDevice, want, err)
					}
				}
			})
		})
	}
}

// TestListGPUsOddDevices: devices that cannot be read are reported, and do
// not hide the GPUs that can.
func TestListGPUsOddDevices(t *testing.T) {
	dev := func(addr string) string { return "devices/pci0000:00/0000:00:01.0/" + addr }
	files := map[string]string{}
	add := func(addr string, kv ...string) {
		files["bus/pci/devices/"+addr] = "-> ../../../" + dev(addr)
		for i := 0; i+1 < len(kv); i += 2 {
			files[dev(addr)+"/"+kv[i]] = kv[i+1]
		}
	}
	add("0000:01:00.0", "vendor", "0x10de\n", "device", "0x2331\n", "class", "0x030200\n")
	add("0000:02:00.0", "vendor", "0x10de\n", "device", "0x2331\n", "class", "0x030200\n", "numa_node", "x\n")
	add("0000:03:00.0", "device", "0x2331\n", "class", "0x030200\n")                        // no vendor
	add("0000:04:00.0", "vendor", "0x8086\n", "class", "0x030000\n")                        // not NVIDIA: not read further
	add("0000:05:00.0", "vendor", "0x10de\n", "device", "0xffff\n", "class", "0x030000\n")  // unknown board
	add("10000:e0:17.0", "vendor", "0x8086\n", "device", "0x467f\n", "class", "0x010802\n") // VMD domain
	gpus, err := ListGPUs(NewDir(writeFiles(t, files)))
	var addrs []string
	for _, g := range gpus {
		addrs = append(addrs, g.Address)
	}
	if want := []string{"0000:01:00.0", "0000:05:00.0"}; !reflect.DeepEqual(addrs, want) {
		t.Errorf("ListGPUs listed %v, want %v", addrs, want)
	}
	if len(gpus) == 2 && (gpus[1].Known || gpus[1].Model.Name != "NVIDIA ffff") {
		t.Errorf("unknown board: %+v", gpus[1])
	}
	if err == nil {
		t.Fatal("ListGPUs: no error for the odd devices")
	}
	for _, s := range []string{"0000:02:00.0", "numa_node", "0000:03:00.0", "vendor"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not mention %s", err, s)
		}
	}
	if strings.Contains(err.Error(), "0000:04:00.0") || strings.Contains(err.Error(), "10000:e0:17.0") {
		t.Errorf("error %q mentions a device that is fine", err)
	}
}

func TestIOMMUGroupDevices(t *testing.T) {
	for _, tc := range []struct {
		tree, group string
		want        []string
		err         string
	}{
		{"t4", "30", []string{"0000:3b:00.0"}, ""},
		{"t4", "151", []string{"f1f4a4a8-2c36-4a43-9b7b-1b4f5b2a6c11"}, ""}, // the mdev's own group
		{"rtx4090-group", "12", []string{"0000:00:01.0", "0000:01:00.0", "0000:01:00.1"}, ""},
		{"shared-group", "7", []string{"0000:03:00.0", "0000:04:00.0", "0000:04:01.0", "0000:05:00.0", "0000:05:00.1", "0000:06:00.0"}, ""},
		{"a40-vfs", "42", []string{"0000:41:00.4"}, ""},
		{"t4", "99", nil, "list IOMMU group 99"},
		{"t4", "../../bus", nil, "not a group number"},
		{"t4", "", nil, "not a group number"},
	} {
		t.Run(tc.tree+"/"+tc.group, func(t *testing.T) {
			forEachLinkStyle(t, tc.tree, func(t *testing.T, fsys SysFS) {
				got, err := IOMMUGroupDevices(fsys, tc.group)
				if tc.err != "" {
					if err == nil || !strings.Contains(err.Error(), tc.err) {
						t.Fatalf("IOMMUGroupDevices = %v, %v; want error %q", got, err, tc.err)
					}
					return
				}
				if err != nil || !reflect.DeepEqual(got, tc.want) {
					t.Errorf("IOMMUGroupDevices = %v, %v; want %v", got, err, tc.want)
				}
			})
		})
	}
}

// TestIOMMUGroupMembers reads the members of each GPU's group, as the
// passthrough check does (REFERENCE.md §4).
func TestIOMMUGroupMembers(t *testing.T) {
	for _, tc := range []struct {
		tree                        string
		bridges, nvidia, foreigners int
	}{
		{"rtx4090-group", 1, 2, 0},
		{"shared-group", 3, 2, 1},
		{"t4", 0, 1, 0},
	} {
		t.Run(tc.tree, func(t *testing.T) {
			fsys := treeFS(t, tc.tree)
			gpus, err := ListGPUs(fsys)
			if err != nil || len(gpus) != 1 {
				t.Fatalf("ListGPUs = %v, %v", gpus, err)
			}
			members, err := IOMMUGroupDevices(fsys, gpus[0].IOMMUGroup)
			if err != nil {
				t.Fatal(err)
			}
			var bridges, nvidia, foreigners int
			for _, m := range members {
				d, err := ReadPCIDevice(fsys, m)
				if err != nil {
					t.Fatal(err)
				}
				switch {
				case d.IsBridge():
					bridges++
				case d.IsNVIDIA():
					nvidia++
				default:
					foreigners++
				}
			}
			if bridges != tc.bridges || nvidia != tc.nvidia || foreigners != tc.foreigners {
				t.Errorf("group %s: %d bridges, %d NVIDIA, %d others; want %d, %d, %d",
					gpus[0].IOMMUGroup, bridges, nvidia, foreigners, tc.bridges, tc.nvidia, tc.foreigners)
			}
		})
	}
}
