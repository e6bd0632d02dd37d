package sim

import (
	"fmt"
	"sort"
	"strings"

	"github.com/gpuvm/gpuvm/pkg/gpu"
)

// gpuSpec describes one GPU of a preset.
type gpuSpec struct {
	bus       int // PCI bus of the physical function (domain 0, slot 0, fn 0)
	numa      int
	deviceID  uint16
	vfs       bool // SR-IOV VFs enabled (sriov-manage -e was run)
	mig       bool // MIG mode enabled
	mixedSize bool // vGPU heterogeneous (mixed-size) mode
	audio     bool // an HDMI audio function at .1 in the same IOMMU group
}

type preset struct {
	name, about string
	gpus        []gpuSpec
}

const (
	idA100 = 0x20f1 // A100 PCIe 40GB
	idA40  = 0x2235
	idL40S = 0x26b9
	idH100 = 0x2331 // H100 PCIe 80GB
	id4090 = 0x2684
)

var presets = []preset{
	{name: "a100x4", about: "4x A100 40GB: MIG and legacy mdev on SR-IOV VFs", gpus: []gpuSpec{
		{bus: 0x17, numa: 0, deviceID: idA100, vfs: true, mig: true},
		{bus: 0x31, numa: 0, deviceID: idA100, vfs: true, mig: true},
		{bus: 0xb1, numa: 1, deviceID: idA100, vfs: true},
		{bus: 0xca, numa: 1, deviceID: idA100},
	}},
	{name: "a40x2", about: "2x A40: time-sliced vGPU through legacy mdev on SR-IOV VFs", gpus: []gpuSpec{
		{bus: 0x41, numa: 0, deviceID: idA40, vfs: true},
		{bus: 0xc1, numa: 1, deviceID: idA40},
	}},
	{name: "l40sx4", about: "4x L40S: vendor-specific VFIO (current_vgpu_type); GPU 2 in mixed-size mode", gpus: []gpuSpec{
		{bus: 0x01, numa: 0, deviceID: idL40S, vfs: true},
		{bus: 0x21, numa: 0, deviceID: idL40S, vfs: true},
		{bus: 0x81, numa: 1, deviceID: idL40S, vfs: true, mixedSize: true},
		{bus: 0xa1, numa: 1, deviceID: idL40S},
	}},
	{name: "h100x8", about: "8x H100 80GB: vendor-specific VFIO, GPUs 0-3 in MIG mode", gpus: []gpuSpec{
		{bus: 0x18, numa: 0, deviceID: idH100, vfs: true, mig: true},
		{bus: 0x2a, numa: 0, deviceID: idH100, vfs: true, mig: true},
		{bus: 0x3a, numa: 0, deviceID: idH100, vfs: true, mig: true},
		{bus: 0x5d, numa: 0, deviceID: idH100, vfs: true, mig: true},
		{bus: 0x9a, numa: 1, deviceID: idH100, vfs: true},
		{bus: 0xab, numa: 1, deviceID: idH100, vfs: true},
		{bus: 0xba, numa: 1, deviceID: idH100, vfs: true},
		{bus: 0xdb, numa: 1, deviceID: idH100},
	}},
	{name: "mixed", about: "one of each: A100 (MIG), A40 (mdev), L40S (vendor VFIO), H100 (vendor VFIO + MIG), RTX 4090 (passthrough only)", gpus: []gpuSpec{
		{bus: 0x17, numa: 0, deviceID: idA100, vfs: true, mig: true},
		{bus: 0x41, numa: 0, deviceID: idA40, vfs: true},
		{bus: 0x81, numa: 1, deviceID: idL40S, vfs: true},
		{bus: 0x9a, numa: 1, deviceID: idH100, vfs: true, mig: true},
		{bus: 0xc1, numa: 1, deviceID: id4090, audio: true},
	}},
}

// Presets lists the preset names, sorted.
func Presets() []string {
	names := make([]string, len(presets))
	for i, p := range presets {
		names[i] = p.name
	}
	sort.Strings(names)
	return names
}

// About describes a preset in one line.
func About(name string) (string, error) {
	p, err := lookupPreset(name)
	if err != nil {
		return "", err
	}
	return p.about, nil
}

func lookupPreset(name string) (preset, error) {
	for _, p := range presets {
		if p.name == name {
			return p, nil
		}
	}
	return preset{}, fmt.Errorf("unknown simulator preset %q (known: %s)", name, strings.Join(Presets(), ", "))
}

// newState lays out the PCI functions of a preset.
func newState(p preset) *state {
	st := &state{Version: stateVersion, Preset: p.name}
	group := 10
	for _, g := range p.gpus {
		m, ok := gpu.ModelByID(g.deviceID)
		if !ok {
			m = gpu.UnknownModel(g.deviceID)
		}
		pf := pciFunc{
			Address: fmt.Sprintf("0000:%02x:00.0", g.bus), Vendor: gpu.VendorNVIDIA, Device: g.deviceID,
			Class: 0x030200, NUMA: g.numa, Group: group, Driver: "nvidia",
		}
		if m.Board == "" { // GeForce and workstation cards are VGA controllers
			pf.Class = 0x030000
		}
		group++
		gs := &gpuState{pciFunc: pf, TotalVFs: m.SRIOVVFs, MIGMode: g.mig && m.MIG != nil, MixedSize: g.mixedSize}
		if g.vfs {
			for i := 0; i < m.SRIOVVFs; i++ {
				idx := 4 + i
				gs.VFs = append(gs.VFs, &vfState{pciFunc: pciFunc{
					Address: fmt.Sprintf("0000:%02x:%02x.%d", g.bus, idx/8, idx%8), Vendor: gpu.VendorNVIDIA,
					Device: g.deviceID, Class: pf.Class, NUMA: g.numa, Group: group, Driver: "nvidia",
				}})
				group++
			}
		}
		st.GPUs = append(st.GPUs, gs)
		if g.audio {
			st.Extra = append(st.Extra, &pciFunc{
				Address: fmt.Sprintf("0000:%02x:00.1", g.bus), Vendor: gpu.VendorNVIDIA, Device: 0x22ba,
				Class: 0x040300, NUMA: g.numa, Group: pf.Group, Driver: "snd_hda_intel",
			})
		}
	}
	return st
}
