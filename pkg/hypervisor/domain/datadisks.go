package domain

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"libvirt.org/go/libvirtxml"
)

// DataDiskPrefix begins the volume name of every data disk
// (store.DiskVolumeName): a domain's disk whose source is a pool volume so
// named is a data disk, the rest (the system disk, the seed, CD-ROMs) are
// the VM's own.
const DataDiskPrefix = "gpuvm-disk-"

// HotplugPorts is how many empty PCIe root ports a q35 domain keeps
// (EnsureHotplugPorts), so that data disks can be plugged into it while it
// runs. Each is one PCI function of the guest's and nothing more until
// used.
const HotplugPorts = 4

// IsDataDisk reports whether a domain's disk, as libvirt describes it, is a
// data disk.
func IsDataDisk(d libvirtxml.DomainDisk) bool {
	return d.Device == "disk" && d.Source != nil && d.Source.Volume != nil &&
		strings.HasPrefix(d.Source.Volume.Volume, DataDiskPrefix)
}

// DataDiskVolumes are the volumes of a domain's data disks, in the order of
// its definition.
func DataDiskVolumes(d *libvirtxml.Domain) []string {
	if d.Devices == nil {
		return nil
	}
	var out []string
	for _, disk := range d.Devices.Disks {
		if IsDataDisk(disk) {
			out = append(out, disk.Source.Volume.Volume)
		}
	}
	return out
}

// ReplaceDataDisks gives a domain the data disks disks in place of those
// it has, in their order, keeping its other disks and everything else: a
// data disk attached to or detached from a stopped VM is in its domain, or
// gone from it, at its next start. A disk it keeps keeps its target; a new
// one takes the first free vdX. It reports whether anything changed: not
// when the domain has exactly these disks in this order. A disk that is not
// a data disk (a virtio disk of a pool volume named DataDiskPrefix…) is a
// *SpecError, and d is left alone.
func ReplaceDataDisks(d *libvirtxml.Domain, disks []Disk) (bool, error) {
	var probs []string
	for i, disk := range disks {
		if p := dataDiskProblem(disk); p != "" {
			probs = append(probs, fmt.Sprintf("data disk %d: %s", i, p))
		}
	}
	if len(probs) > 0 {
		return false, &SpecError{Name: d.Name, Problems: probs}
	}
	want := make([]string, len(disks))
	for i, disk := range disks {
		want[i] = disk.Volume
	}
	if slices.Equal(DataDiskVolumes(d), want) {
		return false, nil
	}
	if d.Devices == nil {
		d.Devices = &libvirtxml.DomainDeviceList{}
	}
	had := map[string]libvirtxml.DomainDisk{}
	var kept []libvirtxml.DomainDisk
	for _, disk := range d.Devices.Disks {
		if IsDataDisk(disk) {
			had[disk.Source.Volume.Volume] = disk
		} else {
			kept = append(kept, disk)
		}
	}
	d.Devices.Disks = kept
	for _, disk := range disks {
		if old, ok := had[disk.Volume]; ok {
			d.Devices.Disks = append(d.Devices.Disks, old)
			continue
		}
		dd, err := DataDiskDevice(d, disk)
		if err != nil {
			return false, err
		}
		d.Devices.Disks = append(d.Devices.Disks, dd)
	}
	return true, nil
}

// DataDiskDevice is disk as a device of d: a virtio disk on the first
// target d leaves free (vdb after the system disk's vda), built as Build
// builds a disk. Every vdX taken is an error.
func DataDiskDevice(d *libvirtxml.Domain, disk Disk) (libvirtxml.DomainDisk, error) {
	if p := dataDiskProblem(disk); p != "" {
		return libvirtxml.DomainDisk{}, &SpecError{Name: d.Name, Problems: []string{"data disk: " + p}}
	}
	taken := map[string]bool{}
	if d.Devices != nil {
		for _, x := range d.Devices.Disks {
			if x.Target != nil {
				taken[x.Target.Dev] = true
			}
		}
	}
	for c := 'a'; c <= 'z'; c++ {
		target := "vd" + string(c)
		if taken[target] {
			continue
		}
		dd := buildDisks(Spec{Disks: []Disk{disk}})[0]
		dd.Target.Dev = target
		return dd, nil
	}
	return libvirtxml.DomainDisk{}, &SpecError{Name: d.Name, Problems: []string{"data disk: every virtio target vda to vdz is taken"}}
}

// dataDiskProblem says what makes disk no data disk; "" when it is one.
func dataDiskProblem(disk Disk) string {
	switch {
	case disk.CDROM:
		return "a CD-ROM is no data disk"
	case disk.Path != "" || disk.Pool == "" || !strings.HasPrefix(disk.Volume, DataDiskPrefix):
		return fmt.Sprintf("source must be a pool volume named %s…, not %q", DataDiskPrefix, disk.Pool+"/"+disk.Volume+disk.Path)
	case disk.Bus != "" && disk.Bus != BusVirtIO:
		return fmt.Sprintf("bus %s: data disks are virtio", disk.Bus)
	}
	return ""
}

// pciBusRE finds the bus of each PCI address in a domain's XML as
// libvirtxml writes it.
var pciBusRE = regexp.MustCompile(`<address type="pci"[^>]*\sbus="0x([0-9a-fA-F]+)"`)

// EnsureHotplugPorts gives a q35 domain, as libvirt describes it once
// defined (every device with its PCI address), HotplugPorts empty PCIe
// root ports: q35 plugs a device in only into a free root port, and
// libvirt adds ports only for the devices a definition has, filling any
// empty one first — so the ports are added after the definition, to stay
// empty. It reports whether it added any; another machine's PCI bus takes
// hot-plugged devices itself (false).
func EnsureHotplugPorts(d *libvirtxml.Domain) (bool, error) {
	if d.OS == nil || d.OS.Type == nil || !strings.Contains(d.OS.Type.Machine, "q35") {
		return false, nil
	}
	if d.Devices == nil {
		d.Devices = &libvirtxml.DomainDeviceList{}
	}
	x, err := d.Marshal()
	if err != nil {
		return false, err
	}
	used := map[uint64]bool{}
	for _, m := range pciBusRE.FindAllStringSubmatch(x, -1) {
		if n, err := strconv.ParseUint(m[1], 16, 32); err == nil {
			used[n] = true
		}
	}
	free := 0
	for _, c := range d.Devices.Controllers {
		if c.Type == "pci" && c.Model == "pcie-root-port" && (c.Index == nil || !used[uint64(*c.Index)]) {
			free++
		}
	}
	if free >= HotplugPorts {
		return false, nil
	}
	for range HotplugPorts - free {
		d.Devices.Controllers = append(d.Devices.Controllers, libvirtxml.DomainController{Type: "pci", Model: "pcie-root-port"})
	}
	return true, nil
}
