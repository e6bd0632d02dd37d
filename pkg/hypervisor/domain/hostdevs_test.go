package domain

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"libvirt.org/go/libvirtxml"
)

// ReplaceHostdevs swaps the GPU hostdevs only (a USB device stays), sets
// the balloon as Build does, says whether it changed anything, and refuses
// a display mdev on a domain without graphics.
func TestReplaceHostdevsInXML(t *testing.T) {
	mdev := Hostdev{Type: HostdevMdev, UUID: "8a0c2f3e-1f6b-4c1e-9d6a-0b1c2d3e4f50", Display: true}
	vf := Hostdev{Type: HostdevPCI, Addresses: []string{"0000:41:00.4"}}
	usb := libvirtxml.DomainHostdev{SubsysUSB: &libvirtxml.DomainHostdevSubsysUSB{
		Source: &libvirtxml.DomainHostdevSubsysUSBSource{Address: &libvirtxml.DomainAddressUSB{}}}}
	parse := func(s Spec) *libvirtxml.Domain {
		t.Helper()
		x, err := XML(s)
		if err != nil {
			t.Fatal(err)
		}
		var d libvirtxml.Domain
		if err := d.Unmarshal(x); err != nil {
			t.Fatal(err)
		}
		d.Devices.Hostdevs = append(d.Devices.Hostdevs, usb)
		return &d
	}
	base := Spec{Name: "vm1", UUID: "0b9b1c1e-3a8f-4f62-9a49-5c0d3e2a7b10", VCPUs: 1, MemoryBytes: 1 << 30, DomainType: TypeQEMU,
		Graphics: &Graphics{Type: GraphicsVNC}, Metadata: Metadata{VMID: "vm1"}, Hostdevs: []Hostdev{mdev}}

	for _, tc := range []struct {
		name    string
		to      []Hostdev
		changed bool
		balloon string
	}{
		{"same", []Hostdev{mdev}, false, "none"},
		{"vf", []Hostdev{vf}, true, "none"},
		{"none", nil, true, "virtio"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := parse(base)
			changed, err := ReplaceHostdevs(d, tc.to)
			if err != nil || changed != tc.changed {
				t.Fatalf("changed %v, %v; want %v", changed, err, tc.changed)
			}
			got := GPUHostdevs(d)
			if !reflect.DeepEqual(got, tc.to) {
				t.Errorf("GPU hostdevs %+v, want %+v", got, tc.to)
			}
			usbs := 0
			for _, h := range d.Devices.Hostdevs {
				if h.SubsysUSB != nil {
					usbs++
				}
			}
			if usbs != 1 {
				t.Errorf("%d USB devices, want the one there was", usbs)
			}
			if d.Devices.MemBalloon.Model != tc.balloon {
				t.Errorf("balloon %q, want %q", d.Devices.MemBalloon.Model, tc.balloon)
			}
		})
	}

	noDisplay := base
	noDisplay.Graphics, noDisplay.Hostdevs = nil, nil
	d := parse(noDisplay)
	_, err := ReplaceHostdevs(d, []Hostdev{mdev})
	var se *SpecError
	if !errors.As(err, &se) || !strings.Contains(err.Error(), "hostdevs[0].display: an mdev display needs VNC or SPICE graphics") {
		t.Errorf("display without graphics: %v", err)
	}
	if len(GPUHostdevs(d)) != 0 {
		t.Errorf("a refused replacement changed the domain: %+v", GPUHostdevs(d))
	}
}

func TestResize(t *testing.T) {
	d := &libvirtxml.Domain{Name: "vm",
		VCPU:   &libvirtxml.DomainVCPU{Placement: "static", Value: 2},
		Memory: &libvirtxml.DomainMemory{Value: 1 << 20, Unit: "KiB"}, CurrentMemory: &libvirtxml.DomainCurrentMemory{Value: 1 << 20, Unit: "KiB"},
		CPU: &libvirtxml.DomainCPU{Topology: &libvirtxml.DomainCPUTopology{Sockets: 1, Cores: 2, Threads: 1}}}
	if changed, err := Resize(d, 2, 1<<30); err != nil || changed {
		t.Fatalf("the same size: changed %v, %v", changed, err)
	}
	changed, err := Resize(d, 8, 16<<30)
	if err != nil || !changed {
		t.Fatalf("a new size: changed %v, %v", changed, err)
	}
	if d.VCPU.Value != 8 || d.Memory.Value != 16<<20 || d.CurrentMemory.Value != 16<<20 || d.CPU.Topology.Cores != 8 {
		t.Errorf("resized to %+v %+v %+v %+v", d.VCPU, d.Memory, d.CurrentMemory, d.CPU.Topology)
	}
	if _, err := Resize(d, 0, 1<<30); err == nil || !strings.Contains(err.Error(), "vcpus, memory") {
		t.Errorf("no vCPU: %v", err)
	}
}
