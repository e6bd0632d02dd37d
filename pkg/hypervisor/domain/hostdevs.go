package domain

import (
	"fmt"
	"slices"
	"strings"

	"libvirt.org/go/libvirtxml"
)

// ReplaceHostdevs gives a domain, as libvirt describes it, the GPU devices
// hs in place of those it has: its mdev and PCI hostdevs become hs, built
// as Build builds them (an mdev's display and ramfb, a PCI function's
// managed attribute), and its memory balloon follows as Build sets it (none
// while devices are attached, whose DMA pins guest memory; virtio without).
// Other hostdevs (USB, SCSI: gpuvm makes none) and everything else in the
// domain stay as they are. It reports whether anything changed: not when
// the domain already has exactly these devices, in this order. Devices
// that are not valid (the problems Validate finds in a Spec's hostdevs)
// are a *SpecError, and d is left alone.
func ReplaceHostdevs(d *libvirtxml.Domain, hs []Hostdev) (bool, error) {
	graphics := d.Devices != nil && len(d.Devices.Graphics) > 0
	if probs := hostdevProblems(hs, graphics); len(probs) > 0 {
		return false, &SpecError{Name: d.Name, Problems: probs}
	}
	want := buildHostdevs(Spec{Hostdevs: hs})
	if d.Devices == nil {
		d.Devices = &libvirtxml.DomainDeviceList{}
	}
	var kept, gpus []libvirtxml.DomainHostdev
	for _, h := range d.Devices.Hostdevs {
		if isGPUHostdev(h) {
			gpus = append(gpus, h)
		} else {
			kept = append(kept, h)
		}
	}
	balloon := "virtio"
	if len(want) > 0 {
		balloon = "none"
	}
	sameBalloon := d.Devices.MemBalloon != nil && d.Devices.MemBalloon.Model == balloon
	if sameBalloon && slices.EqualFunc(gpus, want, func(a, b libvirtxml.DomainHostdev) bool { return hostdevKey(a) == hostdevKey(b) }) {
		return false, nil
	}
	d.Devices.Hostdevs = append(kept, want...)
	if !sameBalloon {
		d.Devices.MemBalloon = &libvirtxml.DomainMemBalloon{Model: balloon}
	}
	return true, nil
}

// GPUHostdevs are the GPU devices a domain, as libvirt describes it, has
// (its mdev and PCI hostdevs), in the words of Hostdev: every PCI function
// is one Hostdev here. Display is an mdev's display attribute.
func GPUHostdevs(d *libvirtxml.Domain) []Hostdev {
	if d.Devices == nil {
		return nil
	}
	var out []Hostdev
	for _, h := range d.Devices.Hostdevs {
		switch {
		case h.SubsysMDev != nil:
			m := h.SubsysMDev
			uuid := ""
			if m.Source != nil && m.Source.Address != nil {
				uuid = strings.ToLower(m.Source.Address.UUID)
			}
			out = append(out, Hostdev{Type: HostdevMdev, UUID: uuid, Display: m.Display == "on"})
		case h.SubsysPCI != nil:
			out = append(out, Hostdev{Type: HostdevPCI, Addresses: []string{pciSource(h.SubsysPCI)}, Managed: h.Managed == "yes"})
		}
	}
	return out
}

// isGPUHostdev reports whether h is a hostdev gpuvm makes for a GPU device.
func isGPUHostdev(h libvirtxml.DomainHostdev) bool {
	return h.SubsysMDev != nil || h.SubsysPCI != nil
}

// hostdevKey names what matters of a GPU hostdev: the device and how it is
// attached (libvirt's own additions, such as guest addresses and aliases,
// are left out; an attribute libvirt writes out at its default counts as
// that default).
func hostdevKey(h libvirtxml.DomainHostdev) string {
	switch {
	case h.SubsysMDev != nil:
		m := h.SubsysMDev
		uuid := ""
		if m.Source != nil && m.Source.Address != nil {
			uuid = strings.ToLower(m.Source.Address.UUID)
		}
		return fmt.Sprintf("mdev %s model=%s display=%s ramfb=%s", uuid, m.Model, orOff(m.Display), orOff(m.RamFB))
	case h.SubsysPCI != nil:
		managed := h.Managed
		if managed == "" {
			managed = "no"
		}
		return fmt.Sprintf("pci %s managed=%s", pciSource(h.SubsysPCI), managed)
	}
	return ""
}

func orOff(s string) string {
	if s == "" {
		return "off"
	}
	return s
}

// pciSource is the host address of a PCI hostdev, "dddd:bb:ss.f".
func pciSource(p *libvirtxml.DomainHostdevSubsysPCI) string {
	if p.Source == nil || p.Source.Address == nil {
		return ""
	}
	a := p.Source.Address
	val := func(u *uint) uint {
		if u == nil {
			return 0
		}
		return *u
	}
	return PCIAddress{Domain: val(a.Domain), Bus: val(a.Bus), Slot: val(a.Slot), Function: val(a.Function)}.String()
}

// Resize gives a domain definition vcpus virtual CPUs and memory bytes of
// memory (its maximum and current memory alike, as Build writes them). It
// reports whether it changed anything; a size of zero is refused.
func Resize(d *libvirtxml.Domain, vcpus int, memory uint64) (bool, error) {
	if vcpus < 1 || memory < 1 {
		return false, &SpecError{Name: d.Name, Problems: []string{fmt.Sprintf("vcpus, memory: a domain needs at least one vCPU and some memory (asked %d vCPUs, %d bytes)", vcpus, memory)}}
	}
	mem := uint(kib(memory))
	vcpu := &libvirtxml.DomainVCPU{Placement: "static", Value: uint(vcpus)}
	if d.VCPU != nil && d.VCPU.Placement != "" {
		vcpu.Placement = d.VCPU.Placement
	}
	changed := d.VCPU == nil || d.VCPU.Value != uint(vcpus) || (d.VCPU.Current != 0 && d.VCPU.Current != uint(vcpus)) ||
		d.Memory == nil || d.Memory.Value != mem || d.Memory.Unit != "KiB" ||
		d.CurrentMemory == nil || d.CurrentMemory.Value != mem || d.CurrentMemory.Unit != "KiB"
	if !changed {
		return false, nil
	}
	d.VCPU = vcpu
	d.Memory = &libvirtxml.DomainMemory{Value: mem, Unit: "KiB"}
	d.CurrentMemory = &libvirtxml.DomainCurrentMemory{Value: mem, Unit: "KiB"}
	if d.CPU != nil && d.CPU.Topology != nil {
		// A topology must multiply up to the vCPUs: one socket of them.
		d.CPU.Topology = &libvirtxml.DomainCPUTopology{Sockets: 1, Dies: 0, Cores: vcpus, Threads: 1}
	}
	return true, nil
}
