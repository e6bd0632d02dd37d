// Package domain turns what gpuvm knows about a VM (profile, GPU hostdev,
// disks, cloud-init seed, console) into libvirt domain XML, with libvirtxml.
//
// It is pure Go: no cgo and no libvirt library, so that the CLI can render a
// VM's domain offline (CGO_ENABLED=0). pkg/hypervisor defines the result.
//
// Every domain gpuvm makes carries an element in gpuvm's own XML namespace
// (Namespace) in its <metadata>; gpuvm lists, changes and removes only the
// domains that carry it.
package domain

// Namespace is gpuvm's XML namespace in a domain's <metadata>, and
// NamespacePrefix the prefix it is written with.
const (
	Namespace       = "https://gpuvm.dev/xmlns/domain/1"
	NamespacePrefix = "gpuvm"
)

// Type is libvirt's domain type: the accelerator QEMU runs the guest with.
type Type string

// Domain types.
const (
	TypeKVM  Type = "kvm"  // hardware virtualisation
	TypeQEMU Type = "qemu" // software emulation (TCG): when KVM is missing or unusable
)

// FirmwareType is how the guest boots.
type FirmwareType string

// Firmware types.
const (
	FirmwareBIOS FirmwareType = "bios" // SeaBIOS
	FirmwareUEFI FirmwareType = "uefi" // OVMF, chosen by libvirt's firmware auto-selection
)

// OSFamily is the guest operating system family; it chooses clock and
// enlightenments.
type OSFamily string

// OS families.
const (
	OSLinux   OSFamily = "linux"
	OSWindows OSFamily = "windows" // Hyper-V enlightenments, clock in local time
)

// DiskBus is the bus a disk sits on.
type DiskBus string

// Disk buses.
const (
	BusVirtIO DiskBus = "virtio" // virtio-blk; the default for disks
	BusSATA   DiskBus = "sata"   // the default for CD-ROMs (q35's AHCI)
	BusSCSI   DiskBus = "scsi"   // on a virtio-scsi controller
)

// DiskFormat is a disk image format.
type DiskFormat string

// Disk formats.
const (
	FormatQCOW2 DiskFormat = "qcow2" // the default for disks
	FormatRaw   DiskFormat = "raw"   // the default for CD-ROMs
)

// GraphicsType is the remote display protocol.
type GraphicsType string

// Graphics types.
const (
	GraphicsVNC   GraphicsType = "vnc"
	GraphicsSpice GraphicsType = "spice"
)

// MaxVNCPassword is the longest VNC password: VNC authentication uses the
// first 8 bytes only (REFERENCE.md §5), so a longer one is refused rather
// than silently cut.
const MaxVNCPassword = 8

// HostdevType says which libvirt hostdev a GPU device becomes.
type HostdevType string

// Hostdev types (the same words as backend.HostdevType).
const (
	HostdevMdev HostdevType = "mdev" // a mediated device, by UUID
	HostdevPCI  HostdevType = "pci"  // PCI functions, by address
)

// Spec is everything a VM's domain needs. Zero values take the defaults
// documented on each field; Build validates the rest.
type Spec struct {
	// Name is the libvirt domain name: 1–64 of [A-Za-z0-9._-], starting
	// with a letter or digit (it becomes part of file names).
	Name string
	// UUID is the VM's UUID, canonical form; QEMU passes it to the guest and
	// the vGPU driver.
	UUID string
	// Title is an optional one-line description shown by libvirt tools.
	Title string

	VCPUs       uint
	MemoryBytes uint64

	// DomainType is "kvm" or "qemu" (software emulation): what the
	// connection's accelerator check (hypervisor.Conn.Accel) chose. There is
	// no default: Build refuses an empty one (Validate accepts it, for a Spec
	// CreateVM completes).
	DomainType Type
	// Machine is QEMU's machine type; default "q35".
	Machine  string
	Firmware Firmware
	// OSFamily is "linux" (default) or "windows".
	OSFamily OSFamily

	// Kernel, Initrd and Cmdline boot a kernel directly, without firmware
	// boot loader (the tiny test guest). Paths are on the host.
	Kernel  string
	Initrd  string
	Cmdline string

	Disks    []Disk
	Network  Network
	Graphics *Graphics
	// Video is the emulated display adapter: "virtio", "vga", "bochs",
	// "qxl" or "none". Default: "none" when a vGPU drives the display or
	// there is no graphics, else "virtio" (Linux) or "vga" (Windows).
	Video string
	// GuestAgent adds the virtio channel of the QEMU guest agent.
	GuestAgent bool
	// TaskChannel adds the virtio-serial channel TaskChannelName of a
	// task's runner (docs/tasks.md): a unix socket libvirt places, read
	// back from the live XML with TaskChannelPath.
	TaskChannel bool
	// SerialLog, when set, is a host file that receives everything the
	// guest writes on its serial console (the console itself stays a pty).
	SerialLog string

	// Hostdevs are the GPU devices, as a backend described them.
	Hostdevs []Hostdev

	// Filesystems are host directories the guest mounts over virtiofs (a
	// person's home). Any makes the guest's memory shared (memfd), which
	// the vhost-user virtiofs daemon needs to reach it.
	Filesystems []Filesystem

	// Metadata marks the domain as gpuvm's.
	Metadata Metadata
}

// Firmware chooses the boot firmware.
type Firmware struct {
	// Type is "bios" (default) or "uefi".
	Type FirmwareType
	// SecureBoot asks for an OVMF build with Secure Boot and enrolled keys
	// (UEFI only; turns on SMM).
	SecureBoot bool
	// TPM adds an emulated TPM 2.0 (swtpm), as Windows 11 requires.
	TPM bool
	// NVRAM is the path of the UEFI variable store; empty lets libvirt
	// choose (/var/lib/libvirt/qemu/nvram/<name>_VARS.fd).
	NVRAM string
}

// Disk is a disk or CD-ROM. Give either Path, or Pool and Volume.
type Disk struct {
	// Path is a host file.
	Path string
	// Pool and Volume name a libvirt storage volume.
	Pool, Volume string
	// Format is "qcow2" or "raw"; default qcow2 for a disk, raw for a CD-ROM.
	Format DiskFormat
	// Bus is "virtio", "sata" or "scsi"; default virtio for a disk, sata for
	// a CD-ROM (a CD-ROM cannot be virtio).
	Bus DiskBus
	// CDROM makes it a read-only CD-ROM (cloud-init seed, virtio-win ISO,
	// installer).
	CDROM bool
	// ReadOnly makes a disk read-only; CD-ROMs always are.
	ReadOnly bool
	// BootOrder, when not 0, boots from this disk in that order (1 first).
	BootOrder uint
	// Serial, when set, is the disk's serial number: the guest finds a
	// virtio disk at /dev/disk/by-id/virtio-<its first 20 characters> (a
	// data disk's is its volume's id).
	Serial string
}

// Network is the VM's network interface.
type Network struct {
	// Name is a libvirt network ("default"); empty means no network
	// unless Bridge is set.
	Name string
	// Bridge is a host bridge ("br0") to attach to instead of a libvirt
	// network.
	Bridge string
	// MAC is the interface's address; empty lets libvirt choose.
	MAC string
	// Model is the NIC model; default "virtio" ("e1000e" for a Windows
	// installer without virtio drivers).
	Model string
}

// Graphics is the VM's remote display.
type Graphics struct {
	// Type is "vnc" or "spice".
	Type GraphicsType
	// Listen is the address QEMU listens on; default 127.0.0.1 (the web
	// console goes through gpuvmd's websocket proxy).
	Listen string
	// Port is the display port; 0 lets libvirt choose (autoport).
	Port int
	// Password protects the display. VNC: 1–8 printable ASCII characters.
	Password string
	// WebSocket makes QEMU serve VNC over websocket too: 0 off, -1 on a
	// port libvirt chooses, else that port. VNC only.
	WebSocket int
}

// Hostdev is a GPU device given to the VM (backend.Hostdev, without the
// dependency on pkg/backend).
type Hostdev struct {
	Type HostdevType
	// UUID of the mediated device (mdev).
	UUID string
	// Addresses of the PCI functions (pci): a vendor-VFIO virtual function,
	// or a whole GPU and every other function of its IOMMU group.
	Addresses []string
	// Managed is libvirt's managed attribute for PCI: false for a
	// vendor-VFIO VF (it stays bound to nvidia), true for passthrough
	// (libvirt binds vfio-pci before start and gives it back after).
	// libvirt ignores it for mdev.
	Managed bool
	// Display lets an mdev vGPU drive the VM's display (display='on'); the
	// first such device is the primary display and gets ramfb='on'.
	Display bool
}

// Filesystem is a host directory shared with the guest over virtiofs.
type Filesystem struct {
	// Source is the host directory (absolute).
	Source string
	// Tag is what the guest mounts (mount -t virtiofs TAG DIR): 1–36
	// characters (virtio-fs's limit) of letters, digits, '.', '_', '-'.
	Tag string
	// Binary is the virtiofs daemon; empty lets libvirt find it through
	// QEMU's vhost-user descriptors.
	Binary string
	// ReadOnly shares the directory read-only.
	ReadOnly bool
}

// Metadata is gpuvm's mark on a domain, stored in the domain's <metadata>
// under Namespace.
type Metadata struct {
	// Installation is the ID of the gpuvm installation (its database's)
	// that made the domain: a reconciler removes only its own
	// installation's domains. Empty in domains made before installations
	// existed.
	Installation string
	// VMID is gpuvm's identifier of the VM (required).
	VMID string
	// Owner is the user the VM belongs to.
	Owner string
	// Profile is the profile the VM was made from.
	Profile string
	// Volumes are the storage volumes the VM owns (its disk overlay, its
	// seed), removed with it. Shared images (an installer or the virtio-win
	// ISO) are not listed.
	Volumes []VolumeRef
}

// VolumeRef names a libvirt storage volume.
type VolumeRef struct {
	Pool, Name string
}
