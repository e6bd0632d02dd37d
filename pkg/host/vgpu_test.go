package host

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/gpuvm/gpuvm/pkg/gpu"
)

const (
	mib = uint64(1) << 20
	gib = uint64(1) << 30

	t4Mdev  = "f1f4a4a8-2c36-4a43-9b7b-1b4f5b2a6c11"
	a40Mdev = "7a3c9f0e-5b1d-4e2a-8c6f-0d9e8b7a6c54"
	newUUID = "0b8e5f3c-8d1a-4c57-9a43-5f0a6e2b9d17"
)

func TestParseMdevDescription(t *testing.T) {
	for _, tc := range []struct {
		in     string
		memory uint64
		max    int
		err    string
	}{
		{"num_heads=4, frl_config=60, framebuffer=8192M, max_resolution=7680x4320, max_instance=6", 8 * gib, 6, ""},
		{"num_heads=4, frl_config=45, framebuffer=1024M, max_resolution=5120x2880, max_instance=16", 1 * gib, 16, ""},
		{"num_heads=1, frl_config=60, framebuffer=512M, max_resolution=4096x2160, max_instance=32", 512 * mib, 32, ""},
		{"framebuffer=48G, max_instance=1", 48 * gib, 1, ""},
		{"framebuffer=8g,max_instance=6", 8 * gib, 6, ""},
		{"  framebuffer = 4096M ,\n max_instance = 12\n", 4 * gib, 12, ""},
		{"framebuffer=8192M", 8 * gib, 0, ""},
		{"new_key=x, framebuffer=2048M, odd, , max_instance=24, other=1=2", 2 * gib, 24, ""},
		{"FRAMEBUFFER=1024M", 1 * gib, 0, ""},
		{"", 0, 0, "no framebuffer"},
		{"num_heads=4, max_instance=6", 0, 0, "no framebuffer"},
		{"framebuffer=8192", 0, 0, "want a size in M or G"},
		{"framebuffer=8192K", 0, 0, "want a size in M or G"},
		{"framebuffer=M", 0, 0, "want a size in M or G"},
		{"framebuffer=-1M", 0, 0, "want a size in M or G"},
		{"framebuffer=", 0, 0, "framebuffer is empty"},
		{"framebuffer=99999999999999999999G", 0, 0, "want a size in M or G"},
		{"framebuffer=17179869184G", 0, 0, "want a size in M or G"}, // 2^34 G overflows
		{"framebuffer=8192M, max_instance=six", 0, 0, "max_instance \"six\" is not a count"},
		{"framebuffer=8192M, max_instance=-1", 0, 0, "is not a count"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			mem, max, err := ParseMdevDescription(tc.in)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("ParseMdevDescription = %d, %d, %v; want error %q", mem, max, err, tc.err)
				}
				return
			}
			if err != nil || mem != tc.memory || max != tc.max {
				t.Fatalf("ParseMdevDescription = %d, %d, %v; want %d, %d", mem, max, err, tc.memory, tc.max)
			}
		})
	}
}

func TestParseCreatableVGPUTypes(t *testing.T) {
	l40s := func(id int, name string) VFType {
		return VFType{ID: id, Name: name, RawName: "NVIDIA " + name}
	}
	for _, tc := range []struct {
		name, in string
		want     []VFType
		err      string
	}{
		{"empty file", "", nil, ""},
		{"blank lines", "\n\n", nil, ""},
		{"header alone", "ID    : vGPU Name\n", nil, ""},
		{"header no newline", "ID    : vGPU Name", nil, ""},
		{"types", "ID    : vGPU Name\n1145  : NVIDIA L40S-1B\n1146  : NVIDIA L40S-2B\n1152  : NVIDIA L40S-8Q\n",
			[]VFType{l40s(1145, "L40S-1B"), l40s(1146, "L40S-2B"), l40s(1152, "L40S-8Q")}, ""},
		{"tight and loose spacing", "ID:vGPU Name\n1145:NVIDIA L40S-1B\n  1146   :   NVIDIA L40S-2B  \r\n",
			[]VFType{l40s(1145, "L40S-1B"), l40s(1146, "L40S-2B")}, ""},
		{"no header", "1145  : NVIDIA L40S-1B\n", []VFType{l40s(1145, "L40S-1B")}, ""},
		{"MIG-backed", "ID    : vGPU Name\n1068  : NVIDIA H100-3-40C\n",
			[]VFType{{ID: 1068, Name: "H100-3-40C", RawName: "NVIDIA H100-3-40C"}}, ""},
		{"unparsable name kept", "ID    : vGPU Name\n2001  : NVIDIA Future Type\n",
			[]VFType{{ID: 2001, Name: "NVIDIA Future Type", RawName: "NVIDIA Future Type"}}, ""},
		{"header twice", "ID    : vGPU Name\nID    : vGPU Name\n", nil, "line 2"},
		{"no ID", "ID    : vGPU Name\n1145  : NVIDIA L40S-1B\n : NVIDIA L40S-2B\n", nil, "line 3"},
		{"no name", "ID    : vGPU Name\n1145  :\n", nil, "line 2"},
		{"no colon", "ID    : vGPU Name\n\n1145 NVIDIA L40S-1B\n", nil, "line 3"},
		{"hex ID", "ID    : vGPU Name\n0x479 : NVIDIA L40S-1B\n", nil, "line 2"},
		{"zero ID", "ID    : vGPU Name\n0 : NVIDIA L40S-1B\n", nil, "out of range"},
		{"huge ID", "ID    : vGPU Name\n99999999999999999999 : NVIDIA L40S-1B\n", nil, "out of range"},
		{"garbage", "\x00\xff", nil, "line 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseCreatableVGPUTypes(tc.in)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("ParseCreatableVGPUTypes = %v, %v; want error %q", got, err, tc.err)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("ParseCreatableVGPUTypes = %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

func TestMdevTypes(t *testing.T) {
	mt := func(id, name string, mem uint64, max, avail int, devs ...string) MdevType {
		return MdevType{ID: id, Name: name, RawName: "GRID " + name, Memory: mem, MaxInstances: max,
			Available: avail, DeviceAPI: "vfio-pci", Devices: devs}
	}
	for _, tc := range []struct {
		tree, parent string
		want         []MdevType
		err          string
	}{
		{"t4", "0000:3b:00.0", []MdevType{
			mt("nvidia-222", "T4-1B", 1*gib, 16, 15, t4Mdev),
			mt("nvidia-229", "T4-4Q", 4*gib, 4, 0),
			mt("nvidia-230", "T4-8Q", 8*gib, 2, 0),
		}, ""},
		{"a40-vfs", "0000:41:00.4", []MdevType{
			mt("nvidia-557", "A40-4Q", 4*gib, 12, 0),
			mt("nvidia-558", "A40-8Q", 8*gib, 6, 0, a40Mdev),
			mt("nvidia-569", "A40-8C", 8*gib, 6, 0),
		}, ""},
		{"a40-vfs", "41:00.5", []MdevType{
			mt("nvidia-557", "A40-4Q", 4*gib, 12, 0),
			mt("nvidia-558", "A40-8Q", 8*gib, 6, 1),
			mt("nvidia-569", "A40-8C", 8*gib, 6, 0),
		}, ""},
		{"a40-vfs", "0000:41:00.0", nil, "list mdev types of 0000:41:00.0"}, // the PF of an Ampere board is no parent
		{"l40s-vfio", "0000:c1:00.4", nil, "mdev_supported_types: no such file or directory"},
		{"t4", "3b:00.0/..", nil, "DDDD:BB:SS.F"},
	} {
		t.Run(tc.tree+"/"+tc.parent, func(t *testing.T) {
			forEachLinkStyle(t, tc.tree, func(t *testing.T, fsys SysFS) {
				got, err := MdevTypes(fsys, tc.parent)
				if tc.err != "" {
					if err == nil || !strings.Contains(err.Error(), tc.err) {
						t.Fatalf("MdevTypes = %+v, %v; want error %q", got, err, tc.err)
					}
					return
				}
				if err != nil || !reflect.DeepEqual(got, tc.want) {
					t.Fatalf("MdevTypes =\n%+v, %v\nwant\n%+v", got, err, tc.want)
				}
			})
		})
	}
}

// TestMdevTypesOdd: a type that cannot be read is reported and the others
// are still listed.
func TestMdevTypesOdd(t *testing.T) {
	dir := "devices/pci0000:00/0000:00:01.0/0000:01:00.0/mdev_supported_types/"
	typ := func(id, name, desc, avail string) map[string]string {
		return map[string]string{
			dir + id + "/name":                name,
			dir + id + "/description":         desc,
			dir + id + "/available_instances": avail,
		}
	}
	files := map[string]string{"bus/pci/devices/0000:01:00.0": "-> ../../../devices/pci0000:00/0000:00:01.0/0000:01:00.0"}
	for _, m := range []map[string]string{
		typ("nvidia-1", "GRID V100-2Q\n", "framebuffer=2048M, max_instance=8\n", "8\n"),
		typ("nvidia-2", "GRID V100-4Q\n", "max_instance=4\n", "4\n"),
		typ("nvidia-3", "GRID V100-8Q\n", "framebuffer=8192M, max_instance=2\n", "many\n"),
		typ("nvidia-4", "Some New Type\n", "framebuffer=1G\n", "1\n"),
	} {
		for k, v := range m {
			files[k] = v
		}
	}
	files[dir+"nvidia-5/name"] = "GRID V100-1Q\n" // no description
	for k, v := range typ("nvidia-10", "GRID V100-16Q\n", "framebuffer=16384M, max_instance=1\n", "1\n") {
		files[k] = v
	}
	for k, v := range typ("other", "GRID V100-32Q\n", "framebuffer=32G, max_instance=1\n", "1\n") {
		files[k] = v
	}
	got, err := MdevTypes(NewDir(writeFiles(t, files)), "0000:01:00.0")
	want := []MdevType{
		{ID: "nvidia-1", Name: "V100-2Q", RawName: "GRID V100-2Q", Memory: 2 * gib, MaxInstances: 8, Available: 8},
		{ID: "nvidia-4", Name: "Some New Type", RawName: "Some New Type", Memory: 1 * gib, Available: 1},
		{ID: "nvidia-10", Name: "V100-16Q", RawName: "GRID V100-16Q", Memory: 16 * gib, MaxInstances: 1, Available: 1},
		{ID: "other", Name: "V100-32Q", RawName: "GRID V100-32Q", Memory: 32 * gib, MaxInstances: 1, Available: 1},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("MdevTypes =\n%+v\nwant\n%+v", got, want)
	}
	if err == nil {
		t.Fatal("no error for the broken types")
	}
	for _, s := range []string{"nvidia-2", "no framebuffer", "nvidia-3", "available_instances", "nvidia-5", "description"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not mention %s", err, s)
		}
	}
}

func TestListMdevs(t *testing.T) {
	for _, tc := range []struct {
		tree string
		want []Mdev
	}{
		{"t4", []Mdev{{UUID: t4Mdev, Parent: "0000:3b:00.0", TypeID: "nvidia-222"}}},
		{"a40-vfs", []Mdev{{UUID: a40Mdev, Parent: "0000:41:00.4", TypeID: "nvidia-558"}}},
		{"l40s-vfio", nil}, // no mdev bus at all
		{"rtx4090-group", nil},
	} {
		t.Run(tc.tree, func(t *testing.T) {
			forEachLinkStyle(t, tc.tree, func(t *testing.T, fsys SysFS) {
				got, err := ListMdevs(fsys)
				if err != nil || !reflect.DeepEqual(got, tc.want) {
					t.Errorf("ListMdevs = %+v, %v; want %+v", got, err, tc.want)
				}
			})
		})
	}
	t.Run("odd", func(t *testing.T) {
		good := "11111111-2222-3333-4444-555555555555"
		fsys := NewDir(writeFiles(t, map[string]string{
			"bus/mdev/devices/" + good:    "-> ../../../devices/pci0000:00/0000:00:01.0/0000:01:00.0/" + good,
			"bus/mdev/devices/not-a-link": "x",
			"bus/mdev/devices/no-type":    "-> ../../../devices/pci0000:00/0000:00:01.0/0000:01:00.0/no-type",
			"bus/mdev/devices/flat":       "-> flat-target",
			"devices/pci0000:00/0000:00:01.0/0000:01:00.0/" + good + "/mdev_type": "-> ../mdev_supported_types/nvidia-7",
			"devices/pci0000:00/0000:00:01.0/0000:01:00.0/no-type/remove":         "",
		}))
		got, err := ListMdevs(fsys)
		if want := []Mdev{{UUID: good, Parent: "0000:01:00.0", TypeID: "nvidia-7"}}; !reflect.DeepEqual(got, want) {
			t.Errorf("ListMdevs = %+v, want %+v", got, want)
		}
		for _, s := range []string{"read mdev not-a-link", "read mdev no-type", "mdev_type", "read mdev flat", "parent device"} {
			if err == nil || !strings.Contains(err.Error(), s) {
				t.Errorf("error %v does not mention %q", err, s)
			}
		}
	})
}

func TestDetectInterface(t *testing.T) {
	for _, tc := range []struct {
		tree, addr string
		want       gpu.VGPUInterface
	}{
		{"t4", "0000:3b:00.0", gpu.InterfaceMdev},      // types on the PF
		{"a40-vfs", "0000:41:00.0", gpu.InterfaceMdev}, // types on the VFs
		{"l40s-vfio", "0000:c1:00.0", gpu.InterfaceVendorVFIO},
		{"rtx4090-group", "0000:01:00.0", gpu.InterfaceNone},
		{"shared-group", "0000:05:00.0", gpu.InterfaceNone},
	} {
		t.Run(tc.tree, func(t *testing.T) {
			forEachLinkStyle(t, tc.tree, func(t *testing.T, fsys SysFS) {
				d, err := ReadPCIDevice(fsys, tc.addr)
				if err != nil {
					t.Fatal(err)
				}
				if got := DetectInterface(fsys, d); got != tc.want {
					t.Errorf("DetectInterface(%s) = %s, want %s", tc.addr, got, tc.want)
				}
			})
		})
	}
	t.Run("odd input", func(t *testing.T) {
		fsys := treeFS(t, "l40s-vfio")
		for _, d := range []PCIDevice{
			{},
			{Address: "..", VFs: []string{"", "..", "../../../etc"}},
			{Address: "0000:c1:00.0"}, // VFs not read: nothing to tell from
		} {
			if got := DetectInterface(fsys, d); got != gpu.InterfaceNone {
				t.Errorf("DetectInterface(%+v) = %s", d, got)
			}
		}
	})
}

func TestIsMdevParentIsVendorVFIOVF(t *testing.T) {
	for _, tc := range []struct {
		tree, addr     string
		parent, vfiovf bool
	}{
		{"t4", "0000:3b:00.0", true, false},
		{"t4", "0000:3a:00.0", false, false},
		{"a40-vfs", "0000:41:00.0", false, false},
		{"a40-vfs", "0000:41:00.7", true, false},
		{"l40s-vfio", "0000:c1:00.0", false, false},
		{"l40s-vfio", "0000:c1:00.5", false, true},
		{"l40s-vfio", "c1:00.7", false, true},
		{"l40s-vfio", "0000:c1:00.5/../../..", false, false},
		{"l40s-vfio", "0000:c2:00.0", false, false},
	} {
		t.Run(tc.tree+"/"+tc.addr, func(t *testing.T) {
			fsys := treeFS(t, tc.tree)
			if got := IsMdevParent(fsys, tc.addr); got != tc.parent {
				t.Errorf("IsMdevParent = %v, want %v", got, tc.parent)
			}
			if got := IsVendorVFIOVF(fsys, tc.addr); got != tc.vfiovf {
				t.Errorf("IsVendorVFIOVF = %v, want %v", got, tc.vfiovf)
			}
		})
	}
}

func TestVFState(t *testing.T) {
	only8Q := []VFType{{ID: 1152, Name: "L40S-8Q", RawName: "NVIDIA L40S-8Q"}}
	for _, tc := range []struct {
		vf        string
		current   int
		creatable []VFType
		err       string
	}{
		{"0000:c1:00.4", 1152, nil, ""},
		{"0000:c1:00.5", 0, only8Q, ""},
		{"0000:c1:00.6", 0, only8Q, ""},
		{"0000:c1:00.7", 0, nil, ""},
		{"0000:c1:00.0", 0, nil, "nvidia/current_vgpu_type: no such file"},
		{"0000:c1:00.4/x", 0, nil, "DDDD:BB:SS.F"},
	} {
		t.Run(tc.vf, func(t *testing.T) {
			forEachLinkStyle(t, "l40s-vfio", func(t *testing.T, fsys SysFS) {
				cur, cr, err := VFState(fsys, tc.vf)
				if tc.err != "" {
					if err == nil || !strings.Contains(err.Error(), tc.err) {
						t.Fatalf("VFState = %d, %v, %v; want error %q", cur, cr, err, tc.err)
					}
					return
				}
				if err != nil || cur != tc.current || !reflect.DeepEqual(cr, tc.creatable) {
					t.Fatalf("VFState = %d, %+v, %v; want %d, %+v", cur, cr, err, tc.current, tc.creatable)
				}
			})
		})
	}
	t.Run("odd", func(t *testing.T) {
		root := buildTree(t, "l40s-vfio", false)
		dir := filepath.Join(root, "devices/pci0000:c0/0000:c0:01.1/0000:c1:00.5/nvidia")
		fsys := NewDir(root)
		mustWrite(t, filepath.Join(dir, "creatable_vgpu_types"), "ID    : vGPU Name\n1152 NVIDIA L40S-8Q\n")
		if _, _, err := VFState(fsys, "0000:c1:00.5"); err == nil || !strings.Contains(err.Error(), "line 2") || !strings.Contains(err.Error(), "0000:c1:00.5") {
			t.Errorf("VFState with a bad line: %v", err)
		}
		mustWrite(t, filepath.Join(dir, "current_vgpu_type"), "none\n")
		if _, _, err := VFState(fsys, "0000:c1:00.5"); err == nil || !strings.Contains(err.Error(), "not a type ID") {
			t.Errorf("VFState with a bad current type: %v", err)
		}
	})
}

func mustWrite(t *testing.T, name, content string) {
	t.Helper()
	if err := os.WriteFile(name, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func mustRead(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestCreateMdev(t *testing.T) {
	t4Types := "devices/pci0000:3a/0000:3a:00.0/0000:3b:00.0/mdev_supported_types/"
	for _, tc := range []struct {
		name, tree, parent, typ, uuid string
		file, want                    string // the create file and what it must hold
		err                           string
	}{
		{"t4", "t4", "0000:3b:00.0", "nvidia-222", newUUID, t4Types + "nvidia-222/create", newUUID, ""},
		{"short address, upper-case UUID", "t4", "3b:00.0", "nvidia-229", strings.ToUpper(newUUID), t4Types + "nvidia-229/create", newUUID, ""},
		{"a40 VF", "a40-vfs", "0000:41:00.5", "nvidia-558", newUUID,
			"devices/pci0000:40/0000:40:01.1/0000:41:00.5/mdev_supported_types/nvidia-558/create", newUUID, ""},
		{"bad parent", "t4", "0000:3b:00.0/..", "nvidia-222", newUUID, "", "", "DDDD:BB:SS.F"},
		{"type with a path", "t4", "0000:3b:00.0", "nvidia-222/../nvidia-229", newUUID, "", "", "want nvidia-<number>"},
		{"type dots", "t4", "0000:3b:00.0", "..", newUUID, "", "", "want nvidia-<number>"},
		{"type not nvidia", "t4", "0000:3b:00.0", "i915-GVTg_V5_4", newUUID, "", "", "want nvidia-<number>"},
		{"type empty", "t4", "0000:3b:00.0", "", newUUID, "", "", "want nvidia-<number>"},
		{"unknown type", "t4", "0000:3b:00.0", "nvidia-999", newUUID, "", "", "offers no mdev type nvidia-999"},
		{"not a parent", "a40-vfs", "0000:41:00.0", "nvidia-558", newUUID, "", "", "not an mdev parent"},
		{"no such device", "t4", "0000:3c:00.0", "nvidia-222", newUUID, "", "", "not an mdev parent"},
		{"uuid empty", "t4", "0000:3b:00.0", "nvidia-222", "", "", "", "want the form"},
		{"uuid braces", "t4", "0000:3b:00.0", "nvidia-222", "{" + newUUID + "}", "", "", "want the form"},
		{"uuid urn", "t4", "0000:3b:00.0", "nvidia-222", "urn:uuid:" + newUUID, "", "", "want the form"},
		{"uuid no dashes", "t4", "0000:3b:00.0", "nvidia-222", strings.ReplaceAll(newUUID, "-", ""), "", "", "want the form"},
		{"uuid path", "t4", "0000:3b:00.0", "nvidia-222", "../../../../../etc/passwd", "", "", "want the form"},
		{"uuid newline", "t4", "0000:3b:00.0", "nvidia-222", newUUID[:35] + "\n", "", "", "want the form"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := buildTree(t, tc.tree, false)
			err := CreateMdev(NewDir(root), tc.parent, tc.typ, tc.uuid)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("CreateMdev = %v; want error %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := mustRead(t, filepath.Join(root, tc.file)); got != tc.want {
				t.Errorf("create holds %q, want %q", got, tc.want)
			}
		})
	}
	t.Run("kernel refuses", func(t *testing.T) {
		// A create file that is a directory makes the write fail, as a
		// kernel refusal does: the error names the parent, type and UUID.
		root := buildTree(t, "t4", false)
		create := filepath.Join(root, t4Types, "nvidia-230/create")
		if err := os.Remove(create); err != nil {
			t.Fatal(err)
		}
		if err := os.Mkdir(create, 0o755); err != nil {
			t.Fatal(err)
		}
		err := CreateMdev(NewDir(root), "0000:3b:00.0", "nvidia-230", newUUID)
		for _, s := range []string{"0000:3b:00.0", "nvidia-230", newUUID} {
			if err == nil || !strings.Contains(err.Error(), s) {
				t.Errorf("error %v does not name %s", err, s)
			}
		}
		if err != nil && strings.Contains(err.Error(), root) {
			t.Errorf("error %q names the tree's host path", err)
		}
	})
}

func TestRemoveMdev(t *testing.T) {
	t4Dev := "devices/pci0000:3a/0000:3a:00.0/0000:3b:00.0/" + t4Mdev + "/remove"
	for _, tc := range []struct {
		name, uuid string
		file       string // the remove file that must then hold "1"
		err        string
	}{
		{"existing", t4Mdev, t4Dev, ""},
		{"upper case", strings.ToUpper(t4Mdev), t4Dev, ""},
		{"gone already", newUUID, "", ""},
		{"bad uuid", "../../../devices", "", "want the form"},
		{"empty", "", "", "want the form"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := buildTree(t, "t4", false)
			err := RemoveMdev(NewDir(root), tc.uuid)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("RemoveMdev = %v; want error %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tc.file != "" {
				if got := mustRead(t, filepath.Join(root, tc.file)); got != "1" {
					t.Errorf("remove holds %q", got)
				}
			}
		})
	}
	t.Run("no remove attribute", func(t *testing.T) {
		// The device is there but its remove file vanished (a race with
		// another remover): that is success too.
		root := buildTree(t, "t4", false)
		if err := os.Remove(filepath.Join(root, t4Dev)); err != nil {
			t.Fatal(err)
		}
		if err := RemoveMdev(NewDir(root), t4Mdev); err != nil {
			t.Errorf("RemoveMdev = %v", err)
		}
	})
}

func TestSetVFType(t *testing.T) {
	vfDir := "devices/pci0000:c0/0000:c0:01.1/0000:c1:00.5/nvidia/current_vgpu_type"
	for _, tc := range []struct {
		name, vf string
		id       int
		want     string
		err      string
	}{
		{"create", "0000:c1:00.5", 1152, "1152", ""},
		{"short address", "c1:00.5", 1152, "1152", ""},
		{"delete", "0000:c1:00.5", 0, "0", ""},
		{"negative", "0000:c1:00.5", -1, "", "negative"},
		{"PF", "0000:c1:00.0", 1152, "", "takes no vGPU"},
		{"missing VF", "0000:c1:01.0", 1152, "", "takes no vGPU"},
		{"bad address", "0000:c1:00.5/../../..", 1152, "", "DDDD:BB:SS.F"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := buildTree(t, "l40s-vfio", true) // absolute links: writes must stay in the tree
			err := SetVFType(NewDir(root), tc.vf, tc.id)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("SetVFType = %v; want error %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := mustRead(t, filepath.Join(root, vfDir)); got != tc.want {
				t.Errorf("current_vgpu_type holds %q, want %q", got, tc.want)
			}
		})
	}
}

func TestVFGPUInstanceID(t *testing.T) {
	nv := "devices/pci0000:c0/0000:c0:01.1/0000:c1:00.4/nvidia/"
	for _, tc := range []struct {
		name    string
		content string // "" leaves the file out
		want    int
		err     string
	}{
		{"absent", "", -1, "no such file"},
		{"set", "3\n", 3, ""},
		{"zero", "0\n", 0, ""},
		{"garbage", "gi3\n", -1, "not a number"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := buildTree(t, "l40s-vfio", false)
			if tc.content != "" {
				mustWrite(t, filepath.Join(root, nv, "gpu_instance_id"), tc.content)
			}
			got, err := VFGPUInstanceID(NewDir(root), "0000:c1:00.4")
			if got != tc.want {
				t.Errorf("VFGPUInstanceID = %d, want %d", got, tc.want)
			}
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) || !strings.Contains(err.Error(), "0000:c1:00.4") {
					t.Errorf("err = %v, want %q naming the VF", err, tc.err)
				}
				if tc.content == "" && !errors.Is(err, fs.ErrNotExist) {
					t.Errorf("err = %v, want not-exist", err)
				}
			} else if err != nil {
				t.Error(err)
			}
		})
	}
	if got, err := VFGPUInstanceID(treeFS(t, "l40s-vfio"), ".."); got != -1 || err == nil {
		t.Errorf("VFGPUInstanceID(..) = %d, %v", got, err)
	}
}
