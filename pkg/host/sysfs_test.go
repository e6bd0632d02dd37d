package host

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
)

func TestClean(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", "."},
		{".", "."},
		{"/", "."},
		{"/sys", "."},
		{"/sys/", "."},
		{"sys", "."}, // a leading "sys" is the mount point, with or without "/"
		{"sys/bus", "bus"},
		{"/sysfoo/x", "sysfoo/x"},
		{"/sys/bus/pci/devices", "bus/pci/devices"},
		{"bus/pci/devices/0000:41:00.0/vendor", "bus/pci/devices/0000:41:00.0/vendor"},
		{"/bus/pci//devices/./x/", "bus/pci/devices/x"},
		{"bus/pci/devices/../drivers", "bus/pci/drivers"},
		{"../../etc/passwd", "etc/passwd"},
		{"/sys/../../etc/passwd", "etc/passwd"},
		{"bus/../../..", "."},
	} {
		t.Run(tc.in, func(t *testing.T) {
			if got := Clean(tc.in); got != tc.want {
				t.Errorf("Clean(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

// linkTree is a small tree exercising link following: relative and absolute
// links, a link to a link, a link through a linked directory, a loop, and
// links that try to leave the tree.
func linkTree(t *testing.T) string {
	return writeFiles(t, map[string]string{
		"devices/pci0000:00/0000:00:01.0/0000:01:00.0/vendor":      "0x10de\n",
		"devices/pci0000:00/0000:00:01.0/0000:01:00.0/driver":      "-> ../../../../bus/pci/drivers/nvidia",
		"devices/pci0000:00/0000:00:01.0/0000:01:00.0/iommu_group": "-> /sys/kernel/iommu_groups/12",
		"devices/pci0000:00/0000:00:01.0/0000:01:00.0/up":          "-> ..",
		"bus/pci/drivers/nvidia/bind":                              "",
		"bus/pci/devices/0000:01:00.0":                             "-> ../../../devices/pci0000:00/0000:00:01.0/0000:01:00.0",
		"bus/pci/devices/abs":                                      "-> /sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0",
		"bus/pci/devices/chain":                                    "-> abs",
		"bus/pci/devices/through":                                  "-> /sys/bus/pci/devices/0000:01:00.0/driver",
		"kernel/iommu_groups/12/devices/0000:01:00.0":              "-> ../../../../devices/pci0000:00/0000:00:01.0/0000:01:00.0",
		"loop/a":         "-> b",
		"loop/b":         "-> a",
		"escape/rel":     "-> ../../../../../../../../etc",
		"escape/up":      "-> ../../../../..",
		"escape/hop":     "-> rel",
		"escape/abs":     "-> /etc",
		"escape/passwd":  "-> /etc/passwd",
		"only-in-tree/x": "tree\n",
	})
}

func TestDirReadFile(t *testing.T) {
	d := NewDir(linkTree(t))
	for _, tc := range []struct {
		name, want string
		err        error
	}{
		{"devices/pci0000:00/0000:00:01.0/0000:01:00.0/vendor", "0x10de\n", nil},
		{"/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/vendor", "0x10de\n", nil},
		{"bus/pci/devices/0000:01:00.0/vendor", "0x10de\n", nil},
		{"bus/pci/devices/abs/vendor", "0x10de\n", nil},
		{"bus/pci/devices/chain/vendor", "0x10de\n", nil},
		{"bus/pci/devices/abs/up/0000:01:00.0/vendor", "0x10de\n", nil},
		{"kernel/iommu_groups/12/devices/0000:01:00.0/vendor", "0x10de\n", nil},
		{"bus/pci/devices/0000:01:00.0/iommu_group/devices/0000:01:00.0/vendor", "0x10de\n", nil},
		{"escape/up/only-in-tree/x", "tree\n", nil}, // ".." stops at the root
		{"escape/rel/passwd", "", fs.ErrNotExist},   // the tree's etc
		{"escape/passwd", "", fs.ErrNotExist},       // /etc/passwd of the tree, not the host's
		{"escape/hop/passwd", "", fs.ErrNotExist},   // a link to a link that climbs out
		{"bus/pci/devices/0000:01:00.0/device", "", fs.ErrNotExist},
		{"loop/a", "", syscall.ELOOP},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := d.ReadFile(tc.name)
			if tc.err != nil {
				if !errors.Is(err, tc.err) {
					t.Fatalf("ReadFile(%s) = %q, %v; want %v", tc.name, b, err, tc.err)
				}
				return
			}
			if err != nil || string(b) != tc.want {
				t.Fatalf("ReadFile(%s) = %q, %v; want %q", tc.name, b, err, tc.want)
			}
		})
	}
}

func TestDirReadlink(t *testing.T) {
	d := NewDir(linkTree(t))
	for _, tc := range []struct{ name, want string }{
		{"bus/pci/devices/0000:01:00.0", "../../../devices/pci0000:00/0000:00:01.0/0000:01:00.0"},
		{"bus/pci/devices/0000:01:00.0/driver", "../../../../bus/pci/drivers/nvidia"},
		// The link on the way is absolute: Dir must follow it within the
		// tree, not let the OS follow it to the host's /sys.
		{"bus/pci/devices/abs/driver", "../../../../bus/pci/drivers/nvidia"},
		{"bus/pci/devices/chain/iommu_group", "/sys/kernel/iommu_groups/12"},
		{"bus/pci/devices/through", "/sys/bus/pci/devices/0000:01:00.0/driver"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := d.Readlink(tc.name)
			if err != nil || got != tc.want {
				t.Fatalf("Readlink(%s) = %q, %v; want %q", tc.name, got, err, tc.want)
			}
			if base, err := LinkBase(d, tc.name); err != nil || base != filepath.Base(tc.want) {
				t.Errorf("LinkBase(%s) = %q, %v", tc.name, base, err)
			}
		})
	}
	if _, err := d.Readlink("devices/pci0000:00/0000:00:01.0/0000:01:00.0/vendor"); err == nil {
		t.Error("Readlink of a file: no error")
	}
	if _, err := d.Readlink("bus/pci/devices/none/driver"); !IsNotExist(err) {
		t.Errorf("Readlink of a missing link: %v, want not-exist", err)
	}
}

func TestDirReadDirExists(t *testing.T) {
	d := NewDir(linkTree(t))
	got, err := d.ReadDir("bus/pci/devices/abs")
	want := []string{"driver", "iommu_group", "up", "vendor"}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("ReadDir = %v, %v; want %v", got, err, want)
	}
	got, err = d.ReadDir("/sys/bus/pci/devices/through")
	if err != nil || !reflect.DeepEqual(got, []string{"bind"}) {
		t.Errorf("ReadDir through links = %v, %v", got, err)
	}
	if _, err := d.ReadDir("escape/abs"); !IsNotExist(err) {
		t.Errorf("ReadDir(escape/abs) = %v: /etc of the host must not be reachable", err)
	}
	for _, tc := range []struct {
		name string
		want bool
	}{
		{"/sys", true},
		{"bus/pci/devices/chain/driver/bind", true},
		{"bus/pci/devices/0000:01:00.0/iommu_group/devices", true},
		{"bus/pci/devices/0000:02:00.0", false},
		{"escape/passwd", false},
		{"loop/b", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := d.Exists(tc.name); got != tc.want {
				t.Errorf("Exists(%s) = %v, want %v", tc.name, got, tc.want)
			}
		})
	}
}

func TestDirWriteFile(t *testing.T) {
	root := linkTree(t)
	d := NewDir(root)
	if err := WriteString(d, "bus/pci/devices/abs/driver/bind", "0000:01:00.0"); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, "bus/pci/drivers/nvidia/bind"))
	if err != nil || string(b) != "0000:01:00.0" {
		t.Errorf("bind holds %q, %v", b, err)
	}
	err = WriteString(d, "bus/pci/drivers/nvidia/new_id", "10de 2235")
	if !IsNotExist(err) {
		t.Errorf("write to a missing attribute: %v, want not-exist", err)
	}
	if err != nil && strings.Contains(err.Error(), root) {
		t.Errorf("error %q names the host path of the tree", err)
	}
	if _, err := os.Stat(filepath.Join(root, "bus/pci/drivers/nvidia/new_id")); err == nil {
		t.Error("WriteFile created a file")
	}
}

func TestDirDescribe(t *testing.T) {
	for _, tc := range []struct{ root, want string }{
		{"/sys", "/sys"},
		{"/sys/", "/sys"},
		{"/tmp/x", "sysfs tree at /tmp/x"},
	} {
		t.Run(tc.root, func(t *testing.T) {
			if got := NewDir(tc.root).Describe(); got != tc.want {
				t.Errorf("Describe() = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestReadString(t *testing.T) {
	d := NewDir(writeFiles(t, map[string]string{"a": "  0x10de \n", "b": ""}))
	for _, tc := range []struct{ name, want string }{{"a", "0x10de"}, {"b", ""}} {
		if got, err := ReadString(d, tc.name); err != nil || got != tc.want {
			t.Errorf("ReadString(%s) = %q, %v; want %q", tc.name, got, err, tc.want)
		}
	}
	if _, err := ReadString(d, "c"); !IsNotExist(err) {
		t.Errorf("ReadString(c) = %v, want not-exist", err)
	}
}
