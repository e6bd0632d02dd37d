// Package capability says, for one VM, which of four things can be done to
// its state — a disk snapshot, a memory (RAM) snapshot, suspend (its memory
// saved to disk and the VM stopped, to be resumed later) and live migration
// — each yes or no with the reason in words. Of is a pure function of what
// the VM is made of (its GPU kind, its disk, its virtiofs filesystems) and
// what its host offers (the versions of libvirt and QEMU, and what the
// NVIDIA driver says through NVML); the server reads the host's facts once
// at start and asks Of per request.
//
// The facts the rules rest on, with their sources:
//
//   - Saving a VFIO device's state — which a memory snapshot, a suspend and a
//     live migration all do — needs VFIO migration: libvirt 8.6.0 and QEMU
//     8.1.0 at least (OpenStack Nova, doc/source/admin/virtual-gpu.rst,
//     2024.1 "Caracal": vGPU live migration needs libvirt >= 8.6.0, QEMU >=
//     8.1.0, kernel >= 5.18), and an NVIDIA vGPU manager that supports
//     migration, which NVML reports per physical GPU
//     (nvmlDeviceGetVgpuMetadata: pgpuVirtualizationCaps bit 0,
//     NVML_VGPU_PGPU_VIRTUALIZATION_CAP_MIGRATION_YES; NVML API reference,
//     "vGPU Migration"). Red Hat adds that the vGPU driver version must be
//     the same on both hosts (RHEL 9 "Live migrating a virtual machine with
//     an attached NVIDIA vGPU").
//   - A whole GPU in passthrough cannot be saved: "Suspend, hibernate and
//     managed-save operations are not supported with GPU passthrough"
//     (NVIDIA AI Enterprise, known limitations), and QEMU refuses to
//     migrate a VFIO device that has no migration support ("VFIO device
//     doesn't support migration").
//   - virtiofs (vhost-user-fs) devices block migration, and with it RAM
//     snapshots and suspend: Proxmox refuses snapshots with RAM for them
//     (qemu-server src/PVE/QemuConfig.pm, check_non_migratable_resources).
//   - A disk-only snapshot of a qcow2 disk needs nothing of the GPU; the
//     guest agent's fsfreeze makes it quiesced, else it is crash-consistent
//     (Proxmox qemu-server src/PVE/QemuServer/Agent.pm freeze-fs; KubeVirt
//     user-guide docs/storage/snapshot_restore_api.md: GuestAgent vs
//     NoGuestAgent).
package capability

import (
	"fmt"
	"strings"

	"github.com/gpuvm/gpuvm/pkg/gpu"
)

// Version is a version as libvirt encodes it: major.minor.release.
type Version struct{ Major, Minor, Release uint32 }

// FromLibvirt decodes libvirt's encoding, major*1,000,000 + minor*1,000 +
// release (virConnectGetLibVersion, virConnectGetVersion).
func FromLibvirt(v uint32) Version {
	return Version{Major: v / 1000000, Minor: v / 1000 % 1000, Release: v % 1000}
}

func (v Version) String() string { return fmt.Sprintf("%d.%d.%d", v.Major, v.Minor, v.Release) }

// short is "8.1" (release 0) or "8.1.2".
func (v Version) short() string {
	if v.Release == 0 {
		return fmt.Sprintf("%d.%d", v.Major, v.Minor)
	}
	return v.String()
}

// Less reports whether v is older than o.
func (v Version) Less(o Version) bool {
	if v.Major != o.Major {
		return v.Major < o.Major
	}
	if v.Minor != o.Minor {
		return v.Minor < o.Minor
	}
	return v.Release < o.Release
}

// The floors of VFIO device migration (Nova virtual-gpu.rst, see the
// package comment).
var (
	MinLibvirtVFIO = Version{8, 6, 0}
	MinQEMUVFIO    = Version{8, 1, 0}
)

// Hypervisor is what the host's libvirt said of itself, read once at start.
type Hypervisor struct {
	// Known: the versions were read. Otherwise Note says why not.
	Known bool
	Note  string
	// Driver is libvirt's hypervisor driver: "QEMU", or "Test" for
	// test:///default, whose hypervisor version is its own (0.0.2), not
	// QEMU's.
	Driver  string
	Libvirt Version
	// QEMU is the hypervisor's version; QEMU's only when Driver is QEMU.
	QEMU Version
}

// isQEMU reports whether the hypervisor version is QEMU's.
func (h Hypervisor) isQEMU() bool { return h.Known && (h.Driver == "QEMU" || h.Driver == "") }

// driverName names a driver that is not QEMU's.
func (h Hypervisor) driverName() string {
	if strings.EqualFold(h.Driver, "test") {
		return "the test driver (test:///default)"
	}
	return "the " + h.Driver + " driver"
}

// String says what the host runs: "libvirt 9.0.0, QEMU 7.2.0".
func (h Hypervisor) String() string {
	switch {
	case !h.Known && h.Note == "":
		return "libvirt and QEMU versions not known"
	case !h.Known:
		return "libvirt and QEMU versions not known (" + h.Note + ")"
	case !h.isQEMU():
		return fmt.Sprintf("libvirt %s, %s %s (not QEMU)", h.Libvirt, h.driverName(), h.QEMU)
	}
	return fmt.Sprintf("libvirt %s, QEMU %s", h.Libvirt, h.QEMU)
}

// Driver is what the NVIDIA driver says of migrating the VM's GPUs.
type Driver struct {
	// Answered: NVML answered for every GPU of the VM; else Note says why
	// not.
	Answered bool
	// Migration: the vGPU manager supports migration on every GPU of the
	// VM (NVML's pGPU virtualization capability).
	Migration bool
	// Simulated: the answer is the simulated host's (pkg/host/sim), not a
	// real driver's.
	Simulated bool
	Note      string
}

// source names where the driver's answer comes from.
func (d Driver) source() string {
	if d.Simulated {
		return "the simulated host's NVML"
	}
	return "NVML"
}

// Input is what one VM is made of and what its host offers.
type Input struct {
	// Profile names the VM's profile; ProfileMissing: it is no longer
	// configured, and nothing else here is known.
	Profile        string
	ProfileMissing bool
	// GPU is the kind of the VM's GPU devices: "" for none, gpu.KindVGPU
	// (time-sliced), gpu.KindMIG (MIG-backed vGPU), gpu.KindPassthrough,
	// or gpu.KindAny while the scheduler has not chosen.
	GPU gpu.Kind
	// DiskFormat is the system disk's format ("qcow2", "raw"); "" when the
	// VM has no disk (direct kernel boot).
	DiskFormat string
	// GuestAgent: the domain has the QEMU guest agent's channel.
	GuestAgent bool
	// Virtiofs: the domain has a <filesystem> of driver virtiofs: the
	// owner's home, or a share (its profile's or one asked for).
	Virtiofs bool
	// DataDisks: data disks (docs/volumes.md) are attached to the VM.
	DataDisks  bool
	Hypervisor Hypervisor
	Driver     Driver
}

// Answer is one capability: Can, and the reason in words.
type Answer struct {
	Can    bool
	Reason string
}

// Set is the four capabilities of a VM, and what they rest on.
type Set struct {
	DiskSnapshot, MemorySnapshot, Suspend, LiveMigration Answer
	// Basis says what the answers rest on: the host's versions and the
	// driver's answer ("libvirt 9.0.0, QEMU 7.2.0; NVML: ...").
	Basis string
}

// The three capabilities that save the VM's device state, in words: what
// virtiofs rules out, why a passthrough GPU cannot, and why a VM with no
// GPU can.
var (
	memorySnapshot = op{ruledOut: "RAM snapshots",
		passthrough: "a passthrough GPU's state cannot be saved, so RAM snapshots are impossible",
		free:        "its memory is saved with its disk (no device blocks it)"}
	suspend = op{ruledOut: "suspend",
		passthrough: "a passthrough GPU cannot be suspended: its state cannot be saved",
		free:        "its memory can be saved to disk and the VM resumed later (no device blocks it)"}
	liveMigration = op{ruledOut: "live migration",
		passthrough: "a passthrough GPU cannot be live-migrated: its state cannot be saved",
		free:        "no device blocks it; its local disk is copied with it"}
)

type op struct{ ruledOut, passthrough, free string }

// Of says what can be done to the state of a VM made of in.
func Of(in Input) Set {
	if in.ProfileMissing {
		no := Answer{Reason: fmt.Sprintf("profile %s is no longer configured", in.Profile)}
		return Set{DiskSnapshot: no, MemorySnapshot: no, Suspend: no, LiveMigration: no, Basis: in.Hypervisor.String()}
	}
	s := Set{DiskSnapshot: diskSnapshot(in), Basis: basis(in),
		MemorySnapshot: saved(in, memorySnapshot), Suspend: saved(in, suspend), LiveMigration: saved(in, liveMigration)}
	if s.LiveMigration.Can && in.DataDisks {
		s.LiveMigration.Reason += "; its data disks are copied with it"
	}
	if s.LiveMigration.Can && in.GPU != "" {
		// Red Hat: the migration fails if the vGPU driver version differs
		// on the two hosts.
		s.LiveMigration.Reason += "; the other host needs the same vGPU type and driver version"
	}
	return s
}

func basis(in Input) string {
	b := in.Hypervisor.String()
	if in.GPU == "" || in.GPU == gpu.KindPassthrough {
		return b
	}
	d := in.Driver
	switch {
	case !d.Answered:
		return b + "; NVIDIA driver: " + d.Note
	case d.Migration:
		return b + "; NVIDIA driver: " + d.source() + " reports vGPU migration support"
	}
	return b + "; NVIDIA driver: " + d.source() + " reports no vGPU migration support"
}

// diskSnapshot: a disk-only snapshot of a qcow2 system disk, whatever the
// GPU.
func diskSnapshot(in Input) Answer {
	switch in.DiskFormat {
	case "":
		return Answer{Reason: "the VM has no disk (it boots a kernel directly)"}
	case "qcow2":
	default:
		return Answer{Reason: fmt.Sprintf("the system disk is %s; disk snapshots need qcow2", in.DiskFormat)}
	}
	a := Answer{Can: true, Reason: "crash-consistent: the VM has no guest agent to freeze its file systems"}
	if in.GuestAgent {
		a.Reason = "quiesced (file systems frozen through the guest agent) when the agent answers, else crash-consistent"
	}
	if in.Virtiofs {
		a.Reason += "; files on virtiofs filesystems are not in it"
	}
	if in.DataDisks {
		a.Reason += "; the VM's data disks are not in it"
	}
	return a
}

// saved is a capability that saves the VM's device state: a RAM snapshot,
// suspend, live migration.
func saved(in Input, o op) Answer {
	switch {
	case in.GPU == gpu.KindPassthrough:
		// NVIDIA: suspend, hibernate and managed-save are not supported
		// with GPU passthrough; QEMU: "VFIO device doesn't support
		// migration".
		return Answer{Reason: o.passthrough}
	case in.Virtiofs:
		// Proxmox check_non_migratable_resources: vhost-user-fs cannot be
		// migrated.
		return Answer{Reason: "virtiofs filesystems rule out " + o.ruledOut}
	case in.GPU == gpu.KindAny:
		return Answer{Reason: "the kind of GPU is chosen only when the VM is placed"}
	case in.GPU == "":
		return Answer{Can: true, Reason: o.free}
	}
	return vfioMigration(in)
}

// vfioMigration: a vGPU's state is saved through VFIO migration, which needs
// libvirt >= 8.6, QEMU >= 8.1 (Nova virtual-gpu.rst) and a vGPU manager that
// supports migration (NVML).
func vfioMigration(in Input) Answer {
	h, d := in.Hypervisor, in.Driver
	switch {
	case !h.Known:
		return Answer{Reason: "the versions of libvirt and QEMU are not known (" + h.Note + "); VFIO migration needs libvirt 8.6 and QEMU 8.1"}
	case !h.isQEMU():
		return Answer{Reason: fmt.Sprintf("the hypervisor is libvirt's %s, which reports its own version %s, not QEMU's: VFIO migration, which needs QEMU 8.1, cannot be checked", strings.TrimPrefix(h.driverName(), "the "), h.QEMU)}
	case h.Libvirt.Less(MinLibvirtVFIO):
		return Answer{Reason: fmt.Sprintf("libvirt %s is older than %s, which VFIO migration needs", h.Libvirt.short(), MinLibvirtVFIO.short())}
	case h.QEMU.Less(MinQEMUVFIO):
		return Answer{Reason: fmt.Sprintf("QEMU %s is older than %s, which VFIO migration needs", h.QEMU.short(), MinQEMUVFIO.short())}
	case !d.Answered:
		return Answer{Reason: "whether the NVIDIA driver supports vGPU migration is not known (" + d.Note + ")"}
	}
	kind := "vGPU"
	if in.GPU == gpu.KindMIG {
		// MIG-backed vGPUs: NVIDIA lists the boards and releases that
		// migrate them one by one, and documents no KVM case publicly;
		// the driver's own answer for the GPU (in MIG mode) is what
		// gpuvm can read, and the reason says so.
		kind = "MIG-backed vGPU"
	}
	sim := ""
	if d.Simulated {
		sim = " (simulated host)"
	}
	if !d.Migration {
		return Answer{Reason: fmt.Sprintf("the NVIDIA driver does not support %s migration on this GPU (%s)%s", kind, d.source(), sim)}
	}
	why := fmt.Sprintf("libvirt %s and QEMU %s support VFIO migration, and the NVIDIA driver supports %s migration on this GPU (%s)%s",
		h.Libvirt.short(), h.QEMU.short(), kind, d.source(), sim)
	if in.GPU == gpu.KindMIG {
		why += "; NVIDIA's support matrix must also list the board for MIG-backed vGPUs"
	}
	return Answer{Can: true, Reason: why}
}
