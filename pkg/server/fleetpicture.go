package server

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"sort"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/gpu"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// The fleet picture (GET /v1/hosts for admins, drawn by the portal's
// /admin/fleet): every GPU of every host as its last heartbeat saw it,
// with the devices on it and the VM, owner and profile that hold each.

// fillGPUDetail sets ThisNode and GPUDetail of hosts, whose stored
// inventories are invs (in the same order).
func (s *Server) fillGPUDetail(ctx context.Context, hosts []api.Host, invs []storedInventory, drains []store.GPUDrain) error {
	byGPU := map[string]*store.GPUDrain{}
	for i := range drains {
		byGPU[drains[i].Host+"/"+drains[i].GPUAddress] = &drains[i]
	}
	var ids []string
	seen := map[string]bool{}
	for _, inv := range invs {
		for _, d := range inv.Devices {
			if d.VMUUID != "" && !seen[d.VMUUID] {
				seen[d.VMUUID] = true
				ids = append(ids, d.VMUUID)
			}
		}
	}
	vms := map[string]*store.VM{}
	if len(ids) > 0 {
		var err error
		if vms, err = s.Store.GetVMs(ctx, ids); err != nil {
			return fmt.Errorf("reading the VMs that hold devices: %w", err)
		}
	}
	for i := range hosts {
		hosts[i].ThisNode = hosts[i].Name == s.Host
		hosts[i].GPUDetail = gpuDetail(hosts[i].Name, invs[i].HostInventory, byGPU, vms)
	}
	return nil
}

// gpuDetail is the picture of one host's GPUs.
func gpuDetail(host string, inv gpu.HostInventory, drains map[string]*store.GPUDrain, vms map[string]*store.VM) []api.HostGPU {
	out := make([]api.HostGPU, 0, len(inv.GPUs))
	for _, g := range inv.GPUs {
		hg := api.HostGPU{Address: g.Address, Model: g.Model, Mode: string(g.Mode), Held: []api.HeldDevice{}}
		if hg.Mode == "" {
			hg.Mode = string(gpu.ModeIdle)
		}
		if d := drains[host+"/"+g.Address]; d != nil {
			hg.Drained = toAPIDrain(d)
		}
		table := migTableOf(g)
		if table != nil {
			hg.MIGComputeSlices, hg.MIGMemorySlices = table.Compute, table.Slices
		}
		used := map[string]int{}
		for _, d := range gpu.UniqueDevices(inv.Devices) { // an older node's heartbeat may list one twice
			if d.GPU != g.Address {
				continue
			}
			hd := api.HeldDevice{ID: d.ID, Kind: string(d.Kind), Type: d.Type, VMID: d.VMUUID}
			if d.Kind == gpu.KindMIG || (d.Profile != "" && d.Placement != nil) {
				if hd.Type == "" {
					hd.Type = d.Profile
				}
				hd.MIG = migPlacement(table, g, d)
			}
			if d.Kind == gpu.KindVGPU && d.Type != "" {
				used[d.Type]++
			}
			if vm := vms[d.VMUUID]; vm != nil {
				hd.VM = &api.DeviceUser{ID: vm.ID, Name: vm.Name, Owner: vm.Owner, Profile: vm.Profile, State: vm.State}
			}
			hg.Held = append(hg.Held, hd)
		}
		for _, o := range g.VGPUTypes {
			hg.VGPUTypes = append(hg.VGPUTypes, api.VGPUUse{Type: o.Name, Used: used[o.Name], Free: o.Available})
			delete(used, o.Name)
		}
		for t, n := range used { // made, but no longer offered
			hg.VGPUTypes = append(hg.VGPUTypes, api.VGPUUse{Type: t, Used: n})
		}
		sort.SliceStable(hg.VGPUTypes, func(a, b int) bool {
			x, y := hg.VGPUTypes[a], hg.VGPUTypes[b]
			if (x.Used > 0) != (y.Used > 0) {
				return x.Used > 0 // the types in use first
			}
			return false
		})
		// MIG instances by their first slice, then the other devices as
		// the inventory lists them.
		start := func(d api.HeldDevice) int {
			if d.MIG == nil {
				return math.MaxInt
			}
			return d.MIG.MemoryStart
		}
		sort.SliceStable(hg.Held, func(a, b int) bool { return start(hg.Held[a]) < start(hg.Held[b]) })
		out = append(out, hg)
	}
	return out
}

// migTableOf is the MIG table of a GPU's board, nil when it has none or
// pkg/gpu does not know the board.
func migTableOf(g gpu.HostGPU) *gpu.MIGTable {
	if id, err := gpu.ParseDeviceID(g.DeviceID); err == nil {
		if m, ok := gpu.ModelByID(id); ok {
			return m.MIG
		}
	}
	if m, ok := gpu.ModelByName(g.Model); ok {
		return m.MIG
	}
	return nil
}

// migPlacement is where a MIG device lies: its memory slices from its
// placement and its profile's size (the board's table, else the GPU's
// offer of the profile), its compute slices as many as the profile has,
// from the same start (REFERENCE.md §3: a GI at memory slice s begins at
// compute slice s, the last compute slice being 6). Nil when the device
// does not say its placement or the profile is unknown.
func migPlacement(table *gpu.MIGTable, g gpu.HostGPU, d gpu.HostDevice) *api.MIGPlacement {
	if d.Placement == nil || d.Profile == "" {
		return nil
	}
	size, compute, slices, computeSlices := 0, 0, gpu.MemorySlices, 7
	if table != nil {
		slices, computeSlices = table.Slices, table.Compute
		if p, ok := table.Profile(d.Profile); ok {
			size, compute = p.Size, p.Compute
		}
	}
	if size == 0 {
		for _, o := range g.MIGProfiles {
			if o.Name == d.Profile {
				size, compute = o.Size, o.Slices
			}
		}
	}
	start := *d.Placement
	if size <= 0 || compute <= 0 || start < 0 || start+size > slices {
		return nil
	}
	cstart := min(start, computeSlices-compute)
	return &api.MIGPlacement{MemoryStart: start, MemorySize: size, ComputeStart: cstart, ComputeSize: compute}
}

// drainEvent records a drain or an undrain as an event (host.drain or
// gpu.drain, gpu "" for a host's) for the admins' fleet pages, which
// redraw on it. It has no owner: users' streams never carry it. A failure
// is logged: the drain itself is done.
func (s *Server) drainEvent(ctx context.Context, host, gpuAddr string, drained bool, by string) {
	typ := api.EventHostDrain
	if gpuAddr != "" {
		typ = api.EventGPUDrain
	}
	b, _ := json.Marshal(api.DrainEventPayload{Host: host, GPU: gpuAddr, Drained: drained, By: by})
	if err := s.Store.AppendEvent(ctx, &store.Event{Type: typ, Payload: store.JSON(b)}); err != nil {
		s.log.Warn("recording a drain's event", "type", typ, "host", host, "gpu", gpuAddr, "err", err)
	}
}
