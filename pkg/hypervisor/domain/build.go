package domain

import (
	"errors"
	"fmt"
	"strings"

	"libvirt.org/go/libvirtxml"
)

// Guest agent channel name.
const guestAgentChannel = "org.qemu.guest_agent.0"

// noDomainType is the problem Build reports for a Spec without a
// DomainType: gpuvm never assumes KVM.
const noDomainType = "not set: take it from the connection's accelerator check (hypervisor.Conn.Accel)"

// Build validates s and returns its libvirt domain. Names and text from users
// end up in XML attributes and character data that libvirtxml escapes.
// s.DomainType must be set: Build never assumes KVM, which a host may lack
// or be unable to use (nested virtualisation).
func Build(s Spec) (*libvirtxml.Domain, error) {
	if err := buildable(s); err != nil {
		return nil, err
	}
	s = withDefaults(s)
	meta, err := s.Metadata.marshal()
	if err != nil {
		return nil, fmt.Errorf("domain of VM %q: metadata: %w", s.Name, err)
	}

	d := &libvirtxml.Domain{
		Type:     string(s.DomainType),
		Name:     s.Name,
		UUID:     strings.ToLower(s.UUID),
		Title:    s.Title,
		Metadata: &libvirtxml.DomainMetadata{XML: meta},
		Memory:   &libvirtxml.DomainMemory{Value: uint(kib(s.MemoryBytes)), Unit: "KiB"},
		CurrentMemory: &libvirtxml.DomainCurrentMemory{
			Value: uint(kib(s.MemoryBytes)), Unit: "KiB",
		},
		VCPU:       &libvirtxml.DomainVCPU{Placement: "static", Value: s.VCPUs},
		OS:         buildOS(s),
		Features:   buildFeatures(s),
		CPU:        buildCPU(s),
		Clock:      buildClock(s),
		OnPoweroff: "destroy",
		OnReboot:   "restart",
		OnCrash:    "destroy",
		PM: &libvirtxml.DomainPM{
			SuspendToMem:  &libvirtxml.DomainPMPolicy{Enabled: "no"},
			SuspendToDisk: &libvirtxml.DomainPMPolicy{Enabled: "no"},
		},
		Devices: buildDevices(s),
	}
	if len(s.Filesystems) > 0 {
		// vhost-user devices (virtiofs) need the guest's memory shared
		// with their daemon: memfd needs no hugepages and no file system,
		// and goes with VFIO devices (libvirt's, Proxmox's and Incus's
		// choice).
		d.MemoryBacking = &libvirtxml.DomainMemoryBacking{
			MemorySource: &libvirtxml.DomainMemorySource{Type: "memfd"},
			MemoryAccess: &libvirtxml.DomainMemoryAccess{Mode: "shared"},
		}
	}
	return d, nil
}

// XML returns the domain XML of s.
func XML(s Spec) (string, error) {
	d, err := Build(s)
	if err != nil {
		return "", err
	}
	out, err := d.Marshal()
	if err != nil {
		return "", fmt.Errorf("domain of VM %q: marshal: %w", s.Name, err)
	}
	return out, nil
}

// buildable is Validate plus what only a domain to build needs: its type.
// (Validate accepts an empty type, which CreateVM fills from Accel.)
func buildable(s Spec) error {
	err := Validate(s)
	if s.DomainType != "" {
		return err
	}
	problem := "domain type: " + noDomainType
	var se *SpecError
	if errors.As(err, &se) {
		c := *se
		c.Problems = append([]string{problem}, se.Problems...)
		return &c
	}
	if err != nil {
		return err
	}
	return &SpecError{Name: s.Name, Problems: []string{problem}}
}

func withDefaults(s Spec) Spec {
	if s.Machine == "" {
		s.Machine = "q35"
	}
	if s.Firmware.Type == "" {
		s.Firmware.Type = FirmwareBIOS
	}
	if s.OSFamily == "" {
		s.OSFamily = OSLinux
	}
	if (s.Network.Name != "" || s.Network.Bridge != "") && s.Network.Model == "" {
		s.Network.Model = "virtio"
	}
	if s.Video == "" {
		switch {
		case s.Graphics == nil || primaryMdevDisplay(s) >= 0:
			s.Video = "none"
		case s.OSFamily == OSWindows:
			s.Video = "vga"
		default:
			s.Video = "virtio"
		}
	}
	if g := s.Graphics; g != nil && g.Listen == "" {
		c := *g
		c.Listen = "127.0.0.1"
		s.Graphics = &c
	}
	return s
}

// kib rounds bytes up to KiB.
func kib(b uint64) uint64 { return (b + 1023) / 1024 }

// primaryMdevDisplay is the index of the first mdev hostdev with a display,
// or -1.
func primaryMdevDisplay(s Spec) int {
	for i, h := range s.Hostdevs {
		if h.Type == HostdevMdev && h.Display {
			return i
		}
	}
	return -1
}

func buildOS(s Spec) *libvirtxml.DomainOS {
	os := &libvirtxml.DomainOS{
		Type:    &libvirtxml.DomainOSType{Arch: "x86_64", Machine: s.Machine, Type: "hvm"},
		Kernel:  s.Kernel,
		Initrd:  s.Initrd,
		Cmdline: s.Cmdline,
	}
	if s.Firmware.Type == FirmwareUEFI {
		// libvirt's firmware auto-selection picks the OVMF build from the
		// features asked for.
		os.Firmware = "efi"
		sb := "no"
		if s.Firmware.SecureBoot {
			sb = "yes"
		}
		os.FirmwareInfo = &libvirtxml.DomainOSFirmwareInfo{Features: []libvirtxml.DomainOSFirmwareFeature{
			{Enabled: sb, Name: "enrolled-keys"},
			{Enabled: sb, Name: "secure-boot"},
		}}
		if s.Firmware.SecureBoot {
			os.Loader = &libvirtxml.DomainLoader{Secure: "yes"}
		}
		if s.Firmware.NVRAM != "" {
			os.NVRam = &libvirtxml.DomainNVRam{NVRam: s.Firmware.NVRAM}
		}
	}
	ordered := false
	for _, d := range s.Disks {
		if d.BootOrder > 0 {
			ordered = true
		}
	}
	if s.Kernel == "" && !ordered {
		os.BootDevices = []libvirtxml.DomainBootDevice{{Dev: "hd"}}
	}
	return os
}

func buildFeatures(s Spec) *libvirtxml.DomainFeatureList {
	f := &libvirtxml.DomainFeatureList{
		ACPI: &libvirtxml.DomainFeature{},
		APIC: &libvirtxml.DomainFeatureAPIC{},
	}
	if s.Firmware.SecureBoot {
		f.SMM = &libvirtxml.DomainFeatureSMM{State: "on"}
	}
	// Hyper-V enlightenments are KVM's: QEMU's software emulation refuses
	// them ("kernel doesn't allow setting HyperV VP_INDEX").
	if s.OSFamily == OSWindows && s.DomainType == TypeKVM {
		on := &libvirtxml.DomainFeatureState{State: "on"}
		f.HyperV = &libvirtxml.DomainFeatureHyperV{
			Mode:        "custom",
			Relaxed:     on,
			VAPIC:       on,
			Spinlocks:   &libvirtxml.DomainFeatureHyperVSpinlocks{DomainFeatureState: libvirtxml.DomainFeatureState{State: "on"}, Retries: 8191},
			VPIndex:     on,
			Runtime:     on,
			Synic:       on,
			STimer:      &libvirtxml.DomainFeatureHyperVSTimer{DomainFeatureState: libvirtxml.DomainFeatureState{State: "on"}},
			Reset:       on,
			Frequencies: on,
			TLBFlush:    &libvirtxml.DomainFeatureHyperVTLBFlush{DomainFeatureState: libvirtxml.DomainFeatureState{State: "on"}},
			IPI:         on,
		}
		f.VMPort = &libvirtxml.DomainFeatureState{State: "off"}
	}
	return f
}

func buildCPU(s Spec) *libvirtxml.DomainCPU {
	if s.DomainType != TypeKVM {
		// Software emulation cannot pass the host CPU through; QEMU's
		// default model is what TCG runs best.
		return nil
	}
	return &libvirtxml.DomainCPU{Mode: "host-passthrough", Check: "none", Migratable: "on"}
}

func buildClock(s Spec) *libvirtxml.DomainClock {
	c := &libvirtxml.DomainClock{
		Offset: "utc",
		Timer: []libvirtxml.DomainTimer{
			{Name: "rtc", TickPolicy: "catchup"},
			{Name: "pit", TickPolicy: "delay"},
			{Name: "hpet", Present: "no"},
		},
	}
	if s.OSFamily == OSWindows {
		// Windows keeps the hardware clock in local time.
		c.Offset = "localtime"
		if s.DomainType == TypeKVM {
			c.Timer = append(c.Timer, libvirtxml.DomainTimer{Name: "hypervclock", Present: "yes"})
		}
	}
	return c
}

func buildDevices(s Spec) *libvirtxml.DomainDeviceList {
	dev := &libvirtxml.DomainDeviceList{}
	dev.Disks = buildDisks(s)
	for _, d := range s.Disks {
		if diskBus(d) == BusSCSI {
			dev.Controllers = append(dev.Controllers, libvirtxml.DomainController{Type: "scsi", Model: "virtio-scsi"})
			break
		}
	}
	if s.Graphics != nil {
		dev.Controllers = append(dev.Controllers, libvirtxml.DomainController{Type: "usb", Model: "qemu-xhci"})
	}
	if n := s.Network; n.Name != "" || n.Bridge != "" {
		src := &libvirtxml.DomainInterfaceSource{Network: &libvirtxml.DomainInterfaceSourceNetwork{Network: n.Name}}
		if n.Bridge != "" {
			src = &libvirtxml.DomainInterfaceSource{Bridge: &libvirtxml.DomainInterfaceSourceBridge{Bridge: n.Bridge}}
		}
		iface := libvirtxml.DomainInterface{Source: src, Model: &libvirtxml.DomainInterfaceModel{Type: n.Model}}
		if n.MAC != "" {
			iface.MAC = &libvirtxml.DomainInterfaceMAC{Address: strings.ToLower(n.MAC)}
		}
		dev.Interfaces = []libvirtxml.DomainInterface{iface}
	}

	// The serial console: a pty, optionally copied to a log file; and the
	// <console> that points at it.
	port := uint(0)
	serial := libvirtxml.DomainSerial{
		Source: &libvirtxml.DomainChardevSource{Pty: &libvirtxml.DomainChardevSourcePty{}},
		Target: &libvirtxml.DomainSerialTarget{Type: "isa-serial", Port: &port, Model: &libvirtxml.DomainSerialTargetModel{Name: "isa-serial"}},
	}
	if s.SerialLog != "" {
		serial.Log = &libvirtxml.DomainChardevLog{File: s.SerialLog, Append: "off"}
	}
	dev.Serials = []libvirtxml.DomainSerial{serial}
	dev.Consoles = []libvirtxml.DomainConsole{{
		Source: &libvirtxml.DomainChardevSource{Pty: &libvirtxml.DomainChardevSourcePty{}},
		Target: &libvirtxml.DomainConsoleTarget{Type: "serial", Port: &port},
	}}

	if s.GuestAgent {
		dev.Channels = append(dev.Channels, libvirtxml.DomainChannel{
			Source: &libvirtxml.DomainChardevSource{UNIX: &libvirtxml.DomainChardevSourceUNIX{}},
			Target: &libvirtxml.DomainChannelTarget{VirtIO: &libvirtxml.DomainChannelTargetVirtIO{Name: guestAgentChannel}},
		})
	}
	if s.TaskChannel {
		dev.Channels = append(dev.Channels, taskChannel())
	}
	if g := s.Graphics; g != nil {
		if g.Type == GraphicsSpice {
			dev.Channels = append(dev.Channels, libvirtxml.DomainChannel{
				Source: &libvirtxml.DomainChardevSource{SpiceVMC: &libvirtxml.DomainChardevSourceSpiceVMC{}},
				Target: &libvirtxml.DomainChannelTarget{VirtIO: &libvirtxml.DomainChannelTargetVirtIO{Name: "com.redhat.spice.0"}},
			})
		}
		dev.Inputs = []libvirtxml.DomainInput{{Type: "tablet", Bus: "usb"}}
		dev.Graphics = []libvirtxml.DomainGraphic{buildGraphics(*g)}
	}
	if s.Firmware.TPM {
		dev.TPMs = []libvirtxml.DomainTPM{{
			Model:   "tpm-crb",
			Backend: &libvirtxml.DomainTPMBackend{Emulator: &libvirtxml.DomainTPMBackendEmulator{Version: "2.0"}},
		}}
	}
	dev.Videos = []libvirtxml.DomainVideo{{Model: libvirtxml.DomainVideoModel{Type: s.Video}}}
	if s.Video == "virtio" || s.Video == "vga" || s.Video == "bochs" || s.Video == "qxl" {
		dev.Videos[0].Model.Heads = 1
		dev.Videos[0].Model.Primary = "yes"
	}
	dev.Hostdevs = buildHostdevs(s)
	dev.Filesystems = buildFilesystems(s) // filesystems.go
	if len(s.Hostdevs) > 0 {
		// Guest memory is pinned for device DMA: a balloon cannot give any back.
		dev.MemBalloon = &libvirtxml.DomainMemBalloon{Model: "none"}
	} else {
		dev.MemBalloon = &libvirtxml.DomainMemBalloon{Model: "virtio"}
	}
	dev.RNGs = []libvirtxml.DomainRNG{{
		Model:   "virtio",
		Backend: &libvirtxml.DomainRNGBackend{Random: &libvirtxml.DomainRNGBackendRandom{Device: "/dev/urandom"}},
	}}
	return dev
}

func buildDisks(s Spec) []libvirtxml.DomainDisk {
	next := map[string]int{}
	var out []libvirtxml.DomainDisk
	for _, d := range s.Disks {
		bus := diskBus(d)
		prefix := targetPrefix(bus)
		target := prefix + string(rune('a'+next[prefix]))
		next[prefix]++
		format := d.Format
		if format == "" {
			format = FormatQCOW2
			if d.CDROM {
				format = FormatRaw
			}
		}
		dd := libvirtxml.DomainDisk{
			Device: "disk",
			Driver: &libvirtxml.DomainDiskDriver{Name: "qemu", Type: string(format)},
			Target: &libvirtxml.DomainDiskTarget{Dev: target, Bus: string(bus)},
		}
		if d.CDROM {
			dd.Device = "cdrom"
			dd.ReadOnly = &libvirtxml.DomainDiskReadOnly{}
		} else {
			dd.Driver.Discard = "unmap"
			if d.ReadOnly {
				dd.ReadOnly = &libvirtxml.DomainDiskReadOnly{}
			}
		}
		if d.Path != "" {
			dd.Source = &libvirtxml.DomainDiskSource{File: &libvirtxml.DomainDiskSourceFile{File: d.Path}}
		} else {
			dd.Source = &libvirtxml.DomainDiskSource{Volume: &libvirtxml.DomainDiskSourceVolume{Pool: d.Pool, Volume: d.Volume}}
		}
		dd.Serial = d.Serial
		if d.BootOrder > 0 {
			dd.Boot = &libvirtxml.DomainDeviceBoot{Order: d.BootOrder}
		}
		out = append(out, dd)
	}
	return out
}

func buildGraphics(g Graphics) libvirtxml.DomainGraphic {
	listen := []libvirtxml.DomainGraphicListener{{Address: &libvirtxml.DomainGraphicListenerAddress{Address: g.Listen}}}
	port, auto := g.Port, "no"
	if port == 0 {
		port, auto = -1, "yes"
	}
	if g.Type == GraphicsSpice {
		return libvirtxml.DomainGraphic{Spice: &libvirtxml.DomainGraphicSpice{
			Port: port, AutoPort: auto, Listen: g.Listen, Passwd: g.Password, Listeners: listen,
		}}
	}
	return libvirtxml.DomainGraphic{VNC: &libvirtxml.DomainGraphicVNC{
		Port: port, AutoPort: auto, WebSocket: g.WebSocket, Listen: g.Listen, Passwd: g.Password, Listeners: listen,
	}}
}

// buildHostdevs follows REFERENCE.md §1 and §4: an mdev is a
// type='mdev' model='vfio-pci' hostdev by UUID, with display and, on the
// primary display only, ramfb; a vendor-VFIO VF is a PCI hostdev with
// managed='no'; passthrough is a PCI hostdev with managed='yes' for every
// function.
func buildHostdevs(s Spec) []libvirtxml.DomainHostdev {
	primary := primaryMdevDisplay(s)
	var out []libvirtxml.DomainHostdev
	for i, h := range s.Hostdevs {
		switch h.Type {
		case HostdevMdev:
			m := &libvirtxml.DomainHostdevSubsysMDev{
				Model:   "vfio-pci",
				Display: "off",
				Source:  &libvirtxml.DomainHostdevSubsysMDevSource{Address: &libvirtxml.DomainAddressMDev{UUID: strings.ToLower(h.UUID)}},
			}
			if h.Display {
				m.Display = "on"
				if i == primary {
					m.RamFB = "on"
				}
			}
			out = append(out, libvirtxml.DomainHostdev{SubsysMDev: m})
		case HostdevPCI:
			managed := "no"
			if h.Managed {
				managed = "yes"
			}
			for _, a := range h.Addresses {
				pa, _ := ParsePCIAddress(a) // validated
				dom, bus, slot, fn := pa.Domain, pa.Bus, pa.Slot, pa.Function
				out = append(out, libvirtxml.DomainHostdev{
					Managed: managed,
					SubsysPCI: &libvirtxml.DomainHostdevSubsysPCI{
						Source: &libvirtxml.DomainHostdevSubsysPCISource{
							Address: &libvirtxml.DomainAddressPCI{Domain: &dom, Bus: &bus, Slot: &slot, Function: &fn},
						},
					},
				})
			}
		}
	}
	return out
}
