package domain

import (
	"fmt"
	"strings"

	"libvirt.org/go/libvirtxml"
)

// WindowsInstall is the domain of an unattended Windows install (pkg/windows
// renders its answer file): UEFI with Secure Boot, an emulated TPM 2.0
// (Windows 11 refuses to install without both), the Hyper-V enlightenments
// of every Windows guest, a virtio system disk and NIC, and three CD-ROMs:
// the Windows installer, the virtio-win drivers and gpuvm's install medium,
// whose autounattend.xml Windows Setup finds by itself (it searches the
// root of every removable drive when no answer file is named).
type WindowsInstall struct {
	Name, UUID, Title string
	VCPUs             uint
	MemoryBytes       uint64
	// DomainType is "kvm" or "qemu" (software emulation), from the
	// connection's accelerator check (hypervisor.Conn.Accel); required.
	DomainType Type
	// Disk is the disk Windows is installed to: virtio-blk (the viostor
	// driver loads from the virtio-win CD-ROM in windowsPE), booted first so
	// that the installed system starts after Setup's reboots.
	Disk Disk
	// Installer is the Windows ISO (booted when the disk is still empty),
	// VirtIO the virtio-win ISO, Media the install medium; all CD-ROMs.
	Installer, VirtIO, Media Disk
	Network                  Network
	Graphics                 *Graphics
	// InsecureBoot turns Secure Boot off (Windows 10 and Server 2022 install
	// without it; Windows 11 does not).
	InsecureBoot bool
	// NVRAM is the UEFI variable store; empty lets libvirt choose.
	NVRAM string
	// Hostdevs give the install VM a GPU, so that the NVIDIA installer
	// finds the device it installs for.
	Hostdevs []Hostdev
	// HideHypervisor hides KVM's CPUID signature (<kvm><hidden state='on'/>)
	// and reports VendorID as the Hyper-V vendor: NVIDIA's GeForce drivers
	// before R465 stopped with error 43 when they saw a hypervisor. vGPU and
	// data-centre drivers, and GeForce drivers since R465, do not need it.
	HideHypervisor bool
	// VendorID is the Hyper-V vendor ID when HideHypervisor is set: 1–12
	// letters or digits (QEMU's limit). Default DefaultVendorID.
	VendorID string
	Metadata Metadata
}

// DefaultVendorID is the Hyper-V vendor ID a hidden hypervisor reports.
const DefaultVendorID = "gpuvmhv0000"

// Spec is the domain Spec of w (without what HideHypervisor adds, which
// WindowsInstallXML applies).
func (w WindowsInstall) Spec() Spec {
	disk := w.Disk
	disk.CDROM = false
	if disk.BootOrder == 0 {
		disk.BootOrder = 1
	}
	cd := func(d Disk, boot uint) Disk {
		d.CDROM = true
		if d.BootOrder == 0 {
			d.BootOrder = boot
		}
		return d
	}
	net := w.Network
	return Spec{
		Name: w.Name, UUID: w.UUID, Title: w.Title,
		VCPUs: w.VCPUs, MemoryBytes: w.MemoryBytes, DomainType: w.DomainType,
		Firmware: Firmware{Type: FirmwareUEFI, SecureBoot: !w.InsecureBoot, TPM: true, NVRAM: w.NVRAM},
		OSFamily: OSWindows,
		// The installer boots second: once Setup has written the disk, its
		// reboots start Windows and not the installer again.
		Disks:      []Disk{disk, cd(w.Installer, 2), cd(w.VirtIO, 0), cd(w.Media, 0)},
		Network:    net,
		Graphics:   w.Graphics,
		GuestAgent: true,
		Hostdevs:   w.Hostdevs,
		Metadata:   w.Metadata,
	}
}

// Validate checks w: the three CD-ROMs are given, the vendor ID fits, and
// the domain Spec is valid.
func (w WindowsInstall) Validate() error {
	var errs []string
	for _, d := range []struct {
		what string
		disk Disk
	}{{"disk", w.Disk}, {"installer ISO", w.Installer}, {"virtio-win ISO", w.VirtIO}, {"install medium", w.Media}} {
		if d.disk.Path == "" && d.disk.Volume == "" {
			errs = append(errs, fmt.Sprintf("windows install %q: %s: missing (a path, or a pool and volume)", w.Name, d.what))
		}
	}
	if w.HideHypervisor {
		if err := vendorID(w.vendorID()); err != nil {
			errs = append(errs, fmt.Sprintf("windows install %q: vendor id: %v", w.Name, err))
		}
	} else if w.VendorID != "" {
		errs = append(errs, fmt.Sprintf("windows install %q: vendor id: needs HideHypervisor", w.Name))
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return Validate(w.Spec())
}

func (w WindowsInstall) vendorID() string {
	if w.VendorID == "" {
		return DefaultVendorID
	}
	return w.VendorID
}

func vendorID(v string) error {
	if len(v) == 0 || len(v) > 12 {
		return fmt.Errorf("%q: want 1 to 12 characters", v)
	}
	for _, r := range v {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
			return fmt.Errorf("%q: letters and digits only", v)
		}
	}
	return nil
}

// WindowsInstallXML validates w and returns its domain XML.
func WindowsInstallXML(w WindowsInstall) (string, error) {
	if err := w.Validate(); err != nil {
		return "", err
	}
	d, err := Build(w.Spec())
	if err != nil {
		return "", err
	}
	if w.HideHypervisor {
		d.Features.KVM = &libvirtxml.DomainFeatureKVM{Hidden: &libvirtxml.DomainFeatureState{State: "on"}}
		if d.Features.HyperV != nil { // not under software emulation
			d.Features.HyperV.VendorId = &libvirtxml.DomainFeatureHyperVVendorId{
				DomainFeatureState: libvirtxml.DomainFeatureState{State: "on"}, Value: w.vendorID(),
			}
		}
	}
	out, err := d.Marshal()
	if err != nil {
		return "", fmt.Errorf("domain of windows install %q: marshal: %w", w.Name, err)
	}
	return out, nil
}
