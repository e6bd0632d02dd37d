package backend

import (
	"fmt"
	"maps"
	"slices"
	"sort"

	"github.com/gpuvm/gpuvm/pkg/gpu"
)

// MergeByName merges the inventories of the backends they are keyed by, in
// name order.
func MergeByName(invs map[string]Inventory) gpu.HostInventory {
	list := make([]Inventory, 0, len(invs))
	for _, name := range slices.Sorted(maps.Keys(invs)) {
		list = append(list, invs[name])
	}
	return Merge(list)
}

// mergeDriver keeps the first backend's reading of the host driver; one
// backend that reads another (they share the host's one driver, so they
// should not) is noted.
func mergeDriver(out *gpu.HostInventory, inv Inventory) {
	d := inv.Driver
	if d == nil {
		return
	}
	hd := gpu.HostDriver{Version: d.Version, VGPUMin: d.VGPUMin, VGPUMax: d.VGPUMax}
	switch {
	case out.Driver == nil:
		out.Driver = &hd
	case *out.Driver != hd:
		out.Notes = append(out.Notes, fmt.Sprintf("%s: reads driver %s, unlike the backend before it (%s); the first is kept",
			inv.Backend, describeDriver(hd), describeDriver(*out.Driver)))
	}
}

func describeDriver(d gpu.HostDriver) string {
	if d.VGPUMin == "" && d.VGPUMax == "" {
		return d.Version
	}
	return fmt.Sprintf("%s, vGPU %s–%s", d.Version, d.VGPUMin, d.VGPUMax)
}

// Merge combines the inventories of several backends of one host into the
// host's inventory: one record per GPU, with each backend's verdict on it.
func Merge(invs []Inventory) gpu.HostInventory {
	out := gpu.HostInventory{GPUs: []gpu.HostGPU{}, Devices: []gpu.HostDevice{}}
	byAddr := map[string]*gpu.HostGPU{}
	var order []string
	for _, inv := range invs {
		if out.Host == "" {
			out.Host = inv.Host
		}
		out.Simulated = out.Simulated || inv.Simulated
		out.Backends = append(out.Backends, inv.Backend)
		for _, n := range inv.Notes {
			out.Notes = append(out.Notes, inv.Backend+": "+n)
		}
		mergeDriver(&out, inv)
		for _, g := range inv.GPUs {
			rec, ok := byAddr[g.Address]
			if !ok {
				rec = &gpu.HostGPU{
					Address: g.Address, Model: g.Model, DeviceID: g.DeviceID, Memory: g.Memory, NUMANode: g.NUMANode,
					Driver: g.Driver, Mode: g.Mode, Interface: gpu.VGPUInterface(g.Interface), IOMMUGroup: g.IOMMUGroup,
					GroupDevices: g.GroupDevices, Backends: map[string]string{},
				}
				byAddr[g.Address] = rec
				order = append(order, g.Address)
			}
			// The most specific mode wins: a backend that sees MIG or
			// passthrough knows more than one that sees an idle GPU.
			if rec.Mode == gpu.ModeIdle || rec.Mode == "" {
				rec.Mode = g.Mode
			}
			if rec.Interface == "" || rec.Interface == gpu.InterfaceNone {
				rec.Interface = gpu.VGPUInterface(g.Interface)
			}
			if len(rec.GroupDevices) == 0 {
				rec.GroupDevices = g.GroupDevices
			}
			rec.MIGCapable = rec.MIGCapable || g.MIGCapable
			rec.MIGEnabled = rec.MIGEnabled || g.MIGEnabled
			rec.MixedSize = rec.MixedSize || g.MixedSize
			rec.Backends[inv.Backend] = g.Unavailable
			for _, t := range g.VGPUTypes {
				rec.VGPUTypes = append(rec.VGPUTypes, gpu.VGPUOffer{Name: t.Name, ID: t.ID, Memory: t.Memory, MaxInstances: t.MaxInstances, Available: t.Available, MIGProfile: t.MIGProfile})
			}
			for _, p := range g.MIGProfiles {
				starts := p.FreeStarts
				if starts == nil {
					starts = []int{}
				}
				rec.MIGProfiles = append(rec.MIGProfiles, gpu.MIGOffer{Name: p.Name, ID: p.ID, Slices: p.Slices, Size: p.Size, Memory: p.Memory, Max: p.Max, FreeStarts: starts})
			}
		}
		for _, d := range inv.Devices {
			if d.Absent != "" {
				continue // in a ledger, not on the host (lost in a reboot): gpuvmd makes it again or forgets it
			}
			ad := gpu.HostDevice{ID: d.ID, Backend: inv.Backend, Kind: d.Kind, GPU: d.GPU, Type: d.Type, VMUUID: d.VMUUID, Managed: d.Managed,
				Hostdev: gpu.Hostdev{Type: string(d.Hostdev.Type), UUID: d.Hostdev.UUID, Addresses: d.Hostdev.Addresses, Managed: d.Hostdev.Managed, Display: d.Hostdev.Display}}
			if d.Kind == gpu.KindMIG {
				p, gi, ci := d.Placement, d.GPUInstance, d.ComputeInstance
				ad.Profile, ad.Placement, ad.GPUInstance, ad.ComputeInstance = d.Profile, &p, &gi, &ci
			}
			out.Devices = append(out.Devices, ad)
		}
	}
	sort.Strings(order)
	for _, a := range order {
		out.GPUs = append(out.GPUs, *byAddr[a])
	}
	// One record per device: the vgpu backend may see a MIG-backed vGPU
	// that the mig backend made.
	out.Devices = gpu.UniqueDevices(out.Devices)
	sort.Slice(out.Devices, func(i, j int) bool {
		if out.Devices[i].GPU != out.Devices[j].GPU {
			return out.Devices[i].GPU < out.Devices[j].GPU
		}
		return out.Devices[i].ID < out.Devices[j].ID
	})
	sort.Strings(out.Backends)
	return out
}
