package domain

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"libvirt.org/go/libvirtxml"
)

func dataDisk(id string) Disk {
	return Disk{Pool: "gpuvm", Volume: DataDiskPrefix + "inst-" + id + ".qcow2", Bus: BusVirtIO, Serial: id}
}

// ReplaceDataDisks swaps a domain's data disks only: the system disk and
// the seed stay, a kept data disk keeps its target, a new one takes the
// first free vdX, and the same disks in the same order change nothing.
func TestReplaceDataDisks(t *testing.T) {
	base := func(data ...Disk) *libvirtxml.Domain {
		t.Helper()
		d, err := Build(Spec{Name: "box", UUID: testUUID, Metadata: Metadata{VMID: "vm-box", Owner: "ann", Profile: "p"}, DomainType: "qemu", VCPUs: 1, MemoryBytes: 256 << 20, Disks: append([]Disk{
			{Pool: "gpuvm", Volume: "box.qcow2"}, {Pool: "gpuvm", Volume: "box-seed.iso", CDROM: true},
		}, data...)})
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	targets := func(d *libvirtxml.Domain) []string {
		var out []string
		for _, x := range d.Devices.Disks {
			out = append(out, x.Target.Dev+"="+strings.TrimSuffix(x.Source.Volume.Volume, ".qcow2"))
		}
		return out
	}
	a, b, c := dataDisk("a"), dataDisk("b"), dataDisk("c")
	for _, tc := range []struct {
		name    string
		has     []Disk
		want    []Disk
		changed bool
		targets []string
	}{
		{"none to none", nil, nil, false, []string{"vda=box", "sda=box-seed.iso"}},
		{"attached while stopped", nil, []Disk{a}, true, []string{"vda=box", "sda=box-seed.iso", "vdb=gpuvm-disk-inst-a"}},
		{"the same", []Disk{a, b}, []Disk{a, b}, false, []string{"vda=box", "sda=box-seed.iso", "vdb=gpuvm-disk-inst-a", "vdc=gpuvm-disk-inst-b"}},
		{"detached while stopped", []Disk{a, b}, []Disk{b}, true, []string{"vda=box", "sda=box-seed.iso", "vdc=gpuvm-disk-inst-b"}},
		{"one gone, one new: the free target", []Disk{a, b}, []Disk{b, c}, true, []string{"vda=box", "sda=box-seed.iso", "vdc=gpuvm-disk-inst-b", "vdb=gpuvm-disk-inst-c"}},
		{"all detached", []Disk{a}, nil, true, []string{"vda=box", "sda=box-seed.iso"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := base(tc.has...)
			changed, err := ReplaceDataDisks(d, tc.want)
			if err != nil || changed != tc.changed {
				t.Fatalf("changed %v, %v; want %v", changed, err, tc.changed)
			}
			if got := targets(d); !slices.Equal(got, tc.targets) {
				t.Errorf("disks %v, want %v", got, tc.targets)
			}
			for _, x := range d.Devices.Disks {
				if IsDataDisk(x) && (x.Serial == "" || x.Target.Bus != "virtio") {
					t.Errorf("data disk %+v: want virtio with its serial", x)
				}
			}
		})
	}
}

// Only data disks go in: anything else is a SpecError naming it, and the
// domain is left as it was.
func TestReplaceDataDisksRefuses(t *testing.T) {
	for _, tc := range []struct {
		name string
		disk Disk
		want string
	}{
		{"the system disk", Disk{Pool: "gpuvm", Volume: "box.qcow2"}, "pool volume named gpuvm-disk-"},
		{"a host file", Disk{Path: "/etc/passwd"}, "/etc/passwd"},
		{"a CD-ROM", Disk{Pool: "gpuvm", Volume: DataDiskPrefix + "x", CDROM: true}, "CD-ROM"},
		{"on SATA", Disk{Pool: "gpuvm", Volume: DataDiskPrefix + "x", Bus: BusSATA}, "bus sata"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := &libvirtxml.Domain{Name: "box", Devices: &libvirtxml.DomainDeviceList{}}
			_, err := ReplaceDataDisks(d, []Disk{tc.disk})
			var se *SpecError
			if !errors.As(err, &se) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "data disk 0") {
				t.Fatalf("err = %v, want a SpecError naming data disk 0 and %q", err, tc.want)
			}
			if len(d.Devices.Disks) != 0 {
				t.Errorf("disks changed: %+v", d.Devices.Disks)
			}
		})
	}
	// vda to vdz taken: no target is left.
	d := &libvirtxml.Domain{Name: "box", Devices: &libvirtxml.DomainDeviceList{}}
	for c := 'a'; c <= 'z'; c++ {
		d.Devices.Disks = append(d.Devices.Disks, libvirtxml.DomainDisk{Device: "disk", Target: &libvirtxml.DomainDiskTarget{Dev: "vd" + string(c)}})
	}
	if _, err := DataDiskDevice(d, dataDisk("a")); err == nil || !strings.Contains(err.Error(), "vdz") {
		t.Errorf("27th virtio disk: %v", err)
	}
}

// A q35 domain as libvirt defines it gets empty root ports up to
// HotplugPorts: a port with a device behind it (its index is a device's
// bus) is not empty; i440fx gets none.
func TestEnsureHotplugPorts(t *testing.T) {
	port := func(i uint) libvirtxml.DomainController {
		return libvirtxml.DomainController{Type: "pci", Model: "pcie-root-port", Index: &i}
	}
	bus := func(b uint) *libvirtxml.DomainAddress {
		zero, s := uint(0), uint(0)
		return &libvirtxml.DomainAddress{PCI: &libvirtxml.DomainAddressPCI{Domain: &zero, Bus: &b, Slot: &s, Function: &zero}}
	}
	dom := func(machine string, ports ...uint) *libvirtxml.Domain {
		d := &libvirtxml.Domain{Name: "box", OS: &libvirtxml.DomainOS{Type: &libvirtxml.DomainOSType{Machine: machine}}, Devices: &libvirtxml.DomainDeviceList{
			Disks:      []libvirtxml.DomainDisk{{Device: "disk", Target: &libvirtxml.DomainDiskTarget{Dev: "vda"}, Address: bus(1)}},
			Interfaces: []libvirtxml.DomainInterface{{Address: bus(2)}},
		}}
		for _, p := range ports {
			d.Devices.Controllers = append(d.Devices.Controllers, port(p))
		}
		return d
	}
	for _, tc := range []struct {
		name    string
		d       *libvirtxml.Domain
		added   int
		changed bool
	}{
		{"the devices' ports only", dom("pc-q35-7.2", 1, 2), HotplugPorts, true},
		{"one empty already", dom("pc-q35-7.2", 1, 2, 3), HotplugPorts - 1, true},
		{"enough empty", dom("q35", 1, 2, 3, 4, 5, 6), 0, false},
		{"i440fx", dom("pc-i440fx-7.2", 1, 2), 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := len(tc.d.Devices.Controllers)
			changed, err := EnsureHotplugPorts(tc.d)
			if err != nil || changed != tc.changed || len(tc.d.Devices.Controllers)-before != tc.added {
				t.Fatalf("changed %v, %v, %d ports added; want %v, %d", changed, err, len(tc.d.Devices.Controllers)-before, tc.changed, tc.added)
			}
			for _, c := range tc.d.Devices.Controllers[before:] {
				if c.Model != "pcie-root-port" || c.Index != nil {
					t.Errorf("added %+v, want a root port libvirt numbers", c)
				}
			}
		})
	}
}
