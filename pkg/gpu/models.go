package gpu

import (
	"fmt"
	"strconv"
	"strings"
)

// VendorNVIDIA is NVIDIA's PCI vendor ID.
const VendorNVIDIA = 0x10de

// GiB is 2^30 bytes.
const GiB = uint64(1) << 30

// Arch is a GPU architecture generation.
type Arch string

// Architectures gpuvm distinguishes; they decide which vGPU kernel interface a
// board uses (REFERENCE.md §1).
const (
	ArchVolta     Arch = "volta"
	ArchTuring    Arch = "turing"
	ArchAmpere    Arch = "ampere"
	ArchAda       Arch = "ada"
	ArchHopper    Arch = "hopper"
	ArchBlackwell Arch = "blackwell"
)

// VGPUInterface names how vGPUs are created on a GPU.
type VGPUInterface string

// The two NVIDIA vGPU kernel interfaces, and the absence of both.
const (
	InterfaceMdev       VGPUInterface = "mdev"        // mdev_supported_types/<type>/create
	InterfaceVendorVFIO VGPUInterface = "vendor-vfio" // <VF>/nvidia/current_vgpu_type
	InterfaceNone       VGPUInterface = "passthrough-only"
)

// Model describes one NVIDIA board.
type Model struct {
	DeviceID uint16 // PCI device ID (vendor 0x10de)
	Name     string // as people say it: "A100 PCIe 40GB"
	Board    string // prefix of its vGPU type names: "A100", "L40S"; empty if it has no vGPU
	Arch     Arch
	Memory   uint64 // framebuffer in bytes
	// MIG is the MIG profile table when the board supports MIG, else nil.
	MIG *MIGTable
	// VGPU is true when NVIDIA's vGPU software supports the board.
	VGPU bool
	// MaxVGPUs caps the number of vGPUs per GPU (the number of SR-IOV VFs, or
	// the driver's limit for mdev boards).
	MaxVGPUs int
	// SRIOVVFs is the number of virtual functions the board exposes (0: none).
	SRIOVVFs int
}

// Interface returns the vGPU kernel interface the board uses with a current
// vGPU driver: mdev up to Ampere, the vendor-specific VFIO framework from Ada on.
func (m Model) Interface() VGPUInterface {
	if !m.VGPU {
		return InterfaceNone
	}
	switch m.Arch {
	case ArchAda, ArchHopper, ArchBlackwell:
		return InterfaceVendorVFIO
	default:
		return InterfaceMdev
	}
}

// MdevOnVFs reports whether mdev parents are the SR-IOV virtual functions
// (Ampere) rather than the physical function (Volta, Turing).
func (m Model) MdevOnVFs() bool { return m.Interface() == InterfaceMdev && m.Arch == ArchAmpere }

// GB returns the framebuffer in whole gigabytes as vGPU type names count them.
func (m Model) GB() int { return int(m.Memory / GiB) }

// models lists the boards gpuvm names. PCI IDs from the pci.ids database and
// NVIDIA's driver README; memory as NVIDIA sells the board. A board missing here
// is still listed by hosts, by its ID.
var models = []Model{
	// Data-centre boards with vGPU support.
	{DeviceID: 0x1db1, Name: "V100 SXM2 16GB", Board: "V100X", Arch: ArchVolta, Memory: 16 * GiB, VGPU: true, MaxVGPUs: 16},
	{DeviceID: 0x1db4, Name: "V100 PCIe 16GB", Board: "V100", Arch: ArchVolta, Memory: 16 * GiB, VGPU: true, MaxVGPUs: 16},
	{DeviceID: 0x1db5, Name: "V100 SXM2 32GB", Board: "V100DX", Arch: ArchVolta, Memory: 32 * GiB, VGPU: true, MaxVGPUs: 32},
	{DeviceID: 0x1db6, Name: "V100 PCIe 32GB", Board: "V100D", Arch: ArchVolta, Memory: 32 * GiB, VGPU: true, MaxVGPUs: 32},
	{DeviceID: 0x1eb8, Name: "T4", Board: "T4", Arch: ArchTuring, Memory: 16 * GiB, VGPU: true, MaxVGPUs: 16},
	{DeviceID: 0x20b0, Name: "A100 SXM4 40GB", Board: "A100X", Arch: ArchAmpere, Memory: 40 * GiB, VGPU: true, MaxVGPUs: 10, SRIOVVFs: 16, MIG: &MIGA100_40GB},
	{DeviceID: 0x20f1, Name: "A100 PCIe 40GB", Board: "A100", Arch: ArchAmpere, Memory: 40 * GiB, VGPU: true, MaxVGPUs: 10, SRIOVVFs: 16, MIG: &MIGA100_40GB},
	{DeviceID: 0x20b2, Name: "A100 SXM4 80GB", Board: "A100DX", Arch: ArchAmpere, Memory: 80 * GiB, VGPU: true, MaxVGPUs: 20, SRIOVVFs: 20, MIG: &MIG80GB},
	{DeviceID: 0x20b5, Name: "A100 PCIe 80GB", Board: "A100D", Arch: ArchAmpere, Memory: 80 * GiB, VGPU: true, MaxVGPUs: 20, SRIOVVFs: 20, MIG: &MIG80GB},
	{DeviceID: 0x20b7, Name: "A30", Board: "A30", Arch: ArchAmpere, Memory: 24 * GiB, VGPU: true, MaxVGPUs: 6, SRIOVVFs: 16, MIG: &MIGA30},
	{DeviceID: 0x2235, Name: "A40", Board: "A40", Arch: ArchAmpere, Memory: 48 * GiB, VGPU: true, MaxVGPUs: 32, SRIOVVFs: 32},
	{DeviceID: 0x2236, Name: "A10", Board: "A10", Arch: ArchAmpere, Memory: 24 * GiB, VGPU: true, MaxVGPUs: 24, SRIOVVFs: 24},
	{DeviceID: 0x25b6, Name: "A16 / A2", Board: "A16", Arch: ArchAmpere, Memory: 16 * GiB, VGPU: true, MaxVGPUs: 16, SRIOVVFs: 16},
	{DeviceID: 0x2230, Name: "RTX A6000", Board: "RTXA6000", Arch: ArchAmpere, Memory: 48 * GiB, VGPU: true, MaxVGPUs: 32, SRIOVVFs: 32},
	{DeviceID: 0x2231, Name: "RTX A5000", Board: "RTXA5000", Arch: ArchAmpere, Memory: 24 * GiB, VGPU: true, MaxVGPUs: 24, SRIOVVFs: 24},
	{DeviceID: 0x27b8, Name: "L4", Board: "L4", Arch: ArchAda, Memory: 24 * GiB, VGPU: true, MaxVGPUs: 24, SRIOVVFs: 32},
	{DeviceID: 0x26b5, Name: "L40", Board: "L40", Arch: ArchAda, Memory: 48 * GiB, VGPU: true, MaxVGPUs: 32, SRIOVVFs: 32},
	{DeviceID: 0x26b9, Name: "L40S", Board: "L40S", Arch: ArchAda, Memory: 48 * GiB, VGPU: true, MaxVGPUs: 32, SRIOVVFs: 32},
	{DeviceID: 0x26b1, Name: "RTX 6000 Ada", Board: "RTX6000-Ada", Arch: ArchAda, Memory: 48 * GiB, VGPU: true, MaxVGPUs: 32, SRIOVVFs: 32},
	{DeviceID: 0x2330, Name: "H100 SXM5 80GB", Board: "H100XM", Arch: ArchHopper, Memory: 80 * GiB, VGPU: true, MaxVGPUs: 20, SRIOVVFs: 32, MIG: &MIG80GB},
	{DeviceID: 0x2331, Name: "H100 PCIe 80GB", Board: "H100", Arch: ArchHopper, Memory: 80 * GiB, VGPU: true, MaxVGPUs: 20, SRIOVVFs: 32, MIG: &MIG80GB},
	{DeviceID: 0x2321, Name: "H100 NVL 94GB", Board: "H100L", Arch: ArchHopper, Memory: 94 * GiB, VGPU: true, MaxVGPUs: 23, SRIOVVFs: 32, MIG: &MIGH100NVL},
	{DeviceID: 0x2335, Name: "H200 SXM 141GB", Board: "H200X", Arch: ArchHopper, Memory: 141 * GiB, VGPU: true, MaxVGPUs: 32, SRIOVVFs: 32, MIG: &MIGH200},
	{DeviceID: 0x233b, Name: "H200 NVL 141GB", Board: "H200", Arch: ArchHopper, Memory: 141 * GiB, VGPU: true, MaxVGPUs: 32, SRIOVVFs: 32, MIG: &MIGH200},
	{DeviceID: 0x2901, Name: "B200 180GB", Board: "B200X", Arch: ArchBlackwell, Memory: 180 * GiB, VGPU: true, MaxVGPUs: 32, SRIOVVFs: 32, MIG: &MIGB200},
	{DeviceID: 0x2bb5, Name: "RTX PRO 6000 Blackwell Server", Board: "DC-RTXPRO6000", Arch: ArchBlackwell, Memory: 96 * GiB, VGPU: true, MaxVGPUs: 32, SRIOVVFs: 32},
	// Cards people pass through whole.
	{DeviceID: 0x2bb1, Name: "RTX PRO 6000 Blackwell", Arch: ArchBlackwell, Memory: 96 * GiB},
	{DeviceID: 0x2204, Name: "GeForce RTX 3090", Arch: ArchAmpere, Memory: 24 * GiB},
	{DeviceID: 0x2684, Name: "GeForce RTX 4090", Arch: ArchAda, Memory: 24 * GiB},
	{DeviceID: 0x2704, Name: "GeForce RTX 4080", Arch: ArchAda, Memory: 16 * GiB},
	{DeviceID: 0x2b85, Name: "GeForce RTX 5090", Arch: ArchBlackwell, Memory: 32 * GiB},
}

var byID = func() map[uint16]Model {
	m := make(map[uint16]Model, len(models))
	for _, x := range models {
		m[x.DeviceID] = x
	}
	return m
}()

// ModelByID returns the model with the given PCI device ID.
func ModelByID(id uint16) (Model, bool) {
	m, ok := byID[id]
	return m, ok
}

// Models returns every known model, in table order.
func Models() []Model { return append([]Model(nil), models...) }

// UnknownModel describes a board gpuvm has no entry for: it can still be passed
// through whole.
func UnknownModel(id uint16) Model {
	return Model{DeviceID: id, Name: fmt.Sprintf("NVIDIA %04x", id)}
}

// ModelByName finds a model by a name as people write it ("H100", "l40s",
// "A100 PCIe 40GB"): an exact name, a board prefix, or a unique word match.
func ModelByName(name string) (Model, bool) {
	n := normalizeName(name)
	var hits []Model
	for _, m := range models {
		if normalizeName(m.Name) == n || (m.Board != "" && normalizeName(m.Board) == n) {
			return m, true
		}
		if strings.HasPrefix(normalizeName(m.Name), n) {
			hits = append(hits, m)
		}
	}
	if len(hits) >= 1 {
		return hits[0], true
	}
	return Model{}, false
}

// MatchesName reports whether the model answers to name, which may be a family
// ("H100" matches every H100 board).
func (m Model) MatchesName(name string) bool {
	n := normalizeName(name)
	return n != "" && (strings.HasPrefix(normalizeName(m.Name), n) || normalizeName(m.Board) == n)
}

func normalizeName(s string) string {
	s = strings.ToLower(s)
	s = strings.TrimPrefix(s, "nvidia")
	return strings.Map(func(r rune) rune {
		if r == ' ' || r == '-' || r == '_' {
			return -1
		}
		return r
	}, s)
}

// ParseDeviceID parses a PCI ID as sysfs writes it ("0x20f1").
func ParseDeviceID(s string) (uint16, error) {
	s = strings.TrimSpace(s)
	v, err := strconv.ParseUint(strings.TrimPrefix(strings.ToLower(s), "0x"), 16, 16)
	if err != nil {
		return 0, fmt.Errorf("parse PCI ID %q: %w", s, err)
	}
	return uint16(v), nil
}
