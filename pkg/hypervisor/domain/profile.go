package domain

import (
	"fmt"

	"github.com/gpuvm/gpuvm/pkg/config"
)

// OverlayName is the volume name of a VM's disk overlay.
func OverlayName(vm string) string { return vm + ".qcow2" }

// SeedName is the volume name of a VM's cloud-init seed.
func SeedName(vm string) string { return vm + "-seed.iso" }

// Instance is what one VM adds to its profile: who it is, where its disks
// and display are, and the GPU devices its backends made.
type Instance struct {
	Name, UUID string
	// Installation, VMID, Owner go to gpuvm's metadata.
	Installation, VMID, Owner string
	DomainType                Type
	// Disks are the VM's prepared disks: its overlay on the profile's image
	// and its cloud-init seed, as the storage layer made them.
	Disks    []Disk
	Volumes  []VolumeRef
	Hostdevs []Hostdev
	// Filesystems are the host directories the VM mounts (its owner's
	// home), with the virtiofs daemon found.
	Filesystems []Filesystem
	// GraphicsListen and Password configure the display; Password is cut to
	// what the protocol allows by the caller.
	GraphicsListen, Password string
	SerialLog                string
}

// FromProfile builds the Spec of a VM of profile p. The profile's GPU need
// must already be met by in.Hostdevs (one device per counted GPU).
func FromProfile(p *config.Profile, in Instance) (Spec, error) {
	if p == nil {
		return Spec{}, fmt.Errorf("VM %s: no profile", in.Name)
	}
	if p.GPU != nil && len(in.Hostdevs) < p.GPU.Count {
		return Spec{}, fmt.Errorf("VM %s: profile %s needs %d GPU devices, %d were given", in.Name, p.Name, p.GPU.Count, len(in.Hostdevs))
	}
	s := Spec{
		Name: in.Name, UUID: in.UUID, Title: p.Description,
		VCPUs: uint(p.VCPUs), MemoryBytes: p.Memory, DomainType: in.DomainType,
		Firmware: Firmware{Type: FirmwareType(p.Firmware), TPM: p.TPM},
		OSFamily: OSFamily(p.OS), Disks: in.Disks, GuestAgent: true, SerialLog: in.SerialLog,
		Hostdevs: in.Hostdevs, Filesystems: in.Filesystems,
		Metadata: Metadata{Installation: in.Installation, VMID: in.VMID, Owner: in.Owner, Profile: p.Name, Volumes: in.Volumes},
	}
	// Windows 11 wants secure boot whenever it has UEFI and a TPM.
	s.Firmware.SecureBoot = s.OSFamily == OSWindows && s.Firmware.Type == FirmwareUEFI && p.TPM
	if b := p.Boot; b != nil {
		s.Kernel, s.Initrd, s.Cmdline = b.Kernel, b.Initrd, b.Cmdline
	}
	switch p.Network.Type {
	case "network":
		s.Network = Network{Name: p.Network.Source, Model: p.Network.Model}
	case "bridge":
		s.Network = Network{Bridge: p.Network.Source, Model: p.Network.Model}
	}
	switch p.Display.Type {
	case "vnc", "spice":
		s.Graphics = &Graphics{Type: GraphicsType(p.Display.Type), Listen: in.GraphicsListen, Password: in.Password}
	}
	// A vGPU drives the display only when the profile asks for it.
	for i := range s.Hostdevs {
		if s.Hostdevs[i].Type == HostdevMdev {
			s.Hostdevs[i].Display = s.Hostdevs[i].Display && p.Display.VGPUDisplay && s.Graphics != nil
		}
	}
	if err := Validate(s); err != nil {
		return Spec{}, err
	}
	return s, nil
}
