package main

import (
	"context"
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/google/uuid"

	"github.com/gpuvm/gpuvm/pkg/backend"
	"github.com/gpuvm/gpuvm/pkg/gpu"
	"github.com/gpuvm/gpuvm/pkg/host"
	"github.com/gpuvm/gpuvm/plugins/internal/kit"
)

// Version is set at build time with -ldflags "-X main.Version=...".
var Version = "dev"

// Backend makes time-sliced vGPUs. MIG-backed vGPUs belong to the mig backend.
type Backend struct {
	kit.Base
}

// New returns an unconfigured backend.
func New() *Backend {
	return &Backend{Base: kit.NewBase(backend.NameVGPU, Version, "time-sliced NVIDIA vGPU through mdev (up to Ampere) or the vendor-specific VFIO framework (Ada and later)")}
}

var (
	_ backend.Backend         = (*Backend)(nil)
	_ backend.HostGenerations = (*Backend)(nil)
)

// Health implements backend.Backend.
func (b *Backend) Health(context.Context) (backend.Health, error) {
	env, err := b.State.Get()
	if err != nil {
		return backend.Health{Detail: err.Error()}, nil
	}
	if _, err := host.ListPCIDevices(env.SysFS); err != nil {
		return backend.Health{Detail: "cannot read " + env.SysFS.Describe() + ": " + err.Error()}, nil
	}
	return backend.Health{OK: true, Detail: env.SysFS.Describe()}, nil
}

// gpuView is one GPU with its vGPU state and why it cannot serve, if so.
type gpuView struct {
	g           host.GPU
	v           kit.VGPUView
	migEnabled  bool
	mixed       bool
	unavailable string
}

func (b *Backend) view(env *kit.Env, g host.GPU) (gpuView, error) {
	gv := gpuView{g: g}
	v, err := kit.ReadVGPUs(env.SysFS, g, env.Types)
	if err != nil {
		return gv, err
	}
	gv.v = v
	if env.NVML != nil {
		if dev, ret := env.NVML.DeviceGetHandleByPciBusId(host.NVMLBusID(g.Address)); ret == nvml.SUCCESS {
			if on, err := host.MIGMode(dev); err == nil {
				gv.migEnabled = on
			}
			if hm, ret := dev.GetVgpuHeterogeneousMode(); ret == nvml.SUCCESS {
				gv.mixed = hm.Mode == 1
			}
		}
	}
	for _, x := range v.VGPUs {
		if x.MIGBacked {
			gv.migEnabled = true
		}
	}
	switch {
	case !g.Model.VGPU && g.Known:
		gv.unavailable = g.Model.Name + " has no vGPU support"
	case g.Driver != "nvidia":
		gv.unavailable = fmt.Sprintf("bound to %q, not the nvidia driver", g.Driver)
	case gv.migEnabled:
		gv.unavailable = "MIG mode is enabled: the mig backend serves this GPU"
	case v.Interface == gpu.InterfaceNone && g.Model.SRIOVVFs > 0 && g.NumVFs == 0:
		gv.unavailable = fmt.Sprintf("SR-IOV VFs are not enabled: run /usr/lib/nvidia/sriov-manage -e %s", g.Address)
	case v.Interface == gpu.InterfaceNone:
		gv.unavailable = "the driver offers no vGPU types (is the NVIDIA vGPU host driver loaded?)"
	}
	return gv, nil
}

func gpuRecord(gv gpuView) backend.GPU {
	g := gv.g
	out := backend.GPU{
		Address: g.Address, Model: g.Model.Name, DeviceID: fmt.Sprintf("10de:%04x", g.Device), Memory: g.Model.Memory,
		NUMANode: g.NUMANode, Driver: g.Driver, Interface: string(gv.v.Interface), IOMMUGroup: g.IOMMUGroup,
		MIGCapable: g.Model.MIG != nil, MIGEnabled: gv.migEnabled, MixedSize: gv.mixed, Unavailable: gv.unavailable,
		Mode: gpu.ModeIdle,
	}
	if gv.v.Interface == gpu.InterfaceNone && g.Model.VGPU {
		// Until its VFs are enabled sysfs shows no interface; the board's is
		// the useful answer (Unavailable says what is missing).
		out.Interface = string(g.Model.Interface())
	}
	switch {
	case gv.migEnabled:
		out.Mode = gpu.ModeMIG
	case g.Driver == "vfio-pci":
		out.Mode = gpu.ModePassthrough
	case len(gv.v.VGPUs) > 0 || g.NumVFs > 0:
		out.Mode = gpu.ModeVGPU
	}
	for _, o := range gv.v.Offers {
		if o.MIGBacked {
			continue
		}
		avail := o.FreeCount
		if gv.unavailable != "" {
			avail = 0
		}
		out.VGPUTypes = append(out.VGPUTypes, backend.VGPUType{Name: o.Type, ID: o.HostID, Memory: o.Memory, MaxInstances: o.Max, Available: avail})
	}
	return out
}

// Inventory implements backend.Backend.
func (b *Backend) Inventory(ctx context.Context) (backend.Inventory, error) {
	env, err := b.State.Get()
	if err != nil {
		return backend.Inventory{}, err
	}
	inv := env.Inventory()
	gpus, err := host.ListGPUs(env.SysFS)
	if err != nil {
		inv.Notes = append(inv.Notes, "some PCI devices could not be read: "+err.Error())
	}
	ledger, err := env.Ledger.All()
	if err != nil {
		return inv, backend.Errorf(backend.CodeInternal, "", "%v", err)
	}
	ours := map[string]kit.Entry{}
	for _, e := range ledger {
		ours[e.Device.ID] = e
	}
	seen := map[string]bool{}
	for _, g := range gpus {
		if err := ctx.Err(); err != nil {
			return inv, err
		}
		if !g.Model.VGPU && g.Known {
			continue
		}
		gv, err := b.view(env, g)
		if err != nil {
			inv.Notes = append(inv.Notes, err.Error())
			continue
		}
		inv.GPUs = append(inv.GPUs, gpuRecord(gv))
		for _, x := range gv.v.VGPUs {
			// A GPU in MIG mode holds MIG-backed vGPUs only (time-sliced
			// and MIG-backed ones never share a GPU): the mig backend's,
			// reported by it with their VMs, even when no VF lists the
			// type's name any more and it reads as a number here.
			if x.MIGBacked || gv.migEnabled {
				continue
			}
			d := backend.Device{ID: x.ID, Kind: gpu.KindVGPU, GPU: g.Address, Type: x.Type, Hostdev: kit.HostdevFor(x, gv.v.Interface)}
			if e, ok := ours[x.ID]; ok {
				d.VMUUID, d.Managed, d.Installation = e.Device.VMUUID, true, e.Device.Installation
			}
			seen[x.ID] = true
			inv.Devices = append(inv.Devices, d)
		}
	}
	// The ledger's devices the host lost (a reboot): reported, so that
	// gpuvmd makes them again for a VM that should run, or forgets them.
	for _, e := range ledger {
		if !seen[e.Device.ID] && !kit.VGPUExists(env.SysFS, e.Device.ID) {
			d := e.Device
			d.Absent = kit.LostReason
			inv.Devices = append(inv.Devices, d)
		}
	}
	if len(inv.GPUs) == 0 {
		inv.Notes = append(inv.Notes, "no vGPU-capable NVIDIA GPU found on "+env.SysFS.Describe())
	}
	return inv, nil
}

// Create implements backend.Backend.
func (b *Backend) Create(ctx context.Context, req backend.CreateRequest) (backend.Device, error) {
	env, err := b.State.Get()
	if err != nil {
		return backend.Device{}, err
	}
	if req.Profile != "" {
		return backend.Device{}, backend.Errorf(backend.CodeInvalid, req.GPU, "the vgpu backend takes a vGPU type, not a MIG profile (%s): use the mig backend", req.Profile)
	}
	want, err := gpu.ParseVGPUType(req.Type)
	if err != nil {
		return backend.Device{}, backend.Errorf(backend.CodeInvalid, req.GPU, "%v", err)
	}
	if want.MIGBacked() {
		return backend.Device{}, backend.Errorf(backend.CodeInvalid, req.GPU, "%s is a MIG-backed type: the mig backend creates it", want.Name)
	}
	devUUID := req.DeviceUUID
	if devUUID == "" {
		devUUID = uuid.NewString()
	} else if u, err := uuid.Parse(devUUID); err != nil {
		return backend.Device{}, backend.Errorf(backend.CodeInvalid, req.GPU, "device UUID %q: %v", devUUID, err)
	} else {
		devUUID = u.String()
	}
	unlock, err := env.Lock(ctx)
	if err != nil {
		return backend.Device{}, err
	}
	defer unlock()
	old, recreate, err := env.Recreated(req)
	if err != nil {
		return backend.Device{}, err
	}
	if recreate {
		if kit.VGPUExists(env.SysFS, old.Device.ID) {
			return old.Device, nil // there already: nothing to make again
		}
		if _, err := host.ValidateAddress(old.Device.ID); err != nil {
			devUUID = old.Device.ID // an mdev: its UUID, which the domain names
		}
	}
	g, err := kit.FindGPU(env.SysFS, req.GPU)
	if err != nil {
		return backend.Device{}, err
	}
	if g.Known {
		if _, err := g.Model.VGPUType(want.Name); err != nil {
			return backend.Device{}, backend.Errorf(backend.CodeInvalid, g.Address, "%v", err)
		}
	}
	gv, err := b.view(env, g)
	if err != nil {
		return backend.Device{}, backend.Errorf(backend.CodeHost, g.Address, "%v", err)
	}
	if gv.unavailable != "" {
		return backend.Device{}, backend.Errorf(backend.CodeConflict, g.Address, "cannot create %s: %s", want.Name, gv.unavailable)
	}
	offer := gv.v.Offer(want.Name)
	if offer != nil && !recreate && gv.v.Interface == gpu.InterfaceVendorVFIO {
		ledger, err := env.Ledger.All()
		if err != nil {
			return backend.Device{}, backend.Errorf(backend.CodeInternal, g.Address, "read the ledger: %v", err)
		}
		kit.SkipLedgerParents(offer, ledger) // the VFs of lost devices stay theirs
	}
	if offer == nil || offer.FreeCount == 0 {
		// The driver stops listing a type once none more fits: tell why.
		if len(gv.v.VGPUs) > 0 && gv.v.VGPUs[0].Type != want.Name && !gv.mixed {
			return backend.Device{}, backend.Errorf(backend.CodeConflict, g.Address, "GPU holds %s vGPUs and is in equal-size mode: %s cannot join them", gv.v.VGPUs[0].Type, want.Name)
		}
		if offer == nil && !g.Known {
			return backend.Device{}, backend.Errorf(backend.CodeInvalid, g.Address, "the driver does not offer %s on this GPU", want.Name)
		}
		limit := ""
		if t, err := g.Model.VGPUType(want.Name); err == nil {
			limit = fmt.Sprintf(" of %d", t.MaxInstances)
		}
		return backend.Device{}, backend.Errorf(backend.CodeExhausted, g.Address, "no capacity left for %s (%d%s in use, %d VFs free)", want.Name, countType(gv.v, want.Name), limit, gv.v.FreeVFs)
	}
	if recreate && gv.v.Interface == gpu.InterfaceVendorVFIO && !kit.PreferParent(offer, old.Device.ID) {
		return backend.Device{}, backend.Errorf(backend.CodeExhausted, g.Address, "recreate %s on VF %s: the VF is not free for it now", want.Name, old.Device.ID)
	}
	if gv.v.Interface == gpu.InterfaceMdev {
		if mdevs, err := host.ListMdevs(env.SysFS); err == nil {
			for _, m := range mdevs {
				if m.UUID == devUUID {
					return backend.Device{}, backend.Errorf(backend.CodeConflict, g.Address, "an mdev with UUID %s already exists", devUUID)
				}
			}
		}
	}
	if err := ctx.Err(); err != nil {
		return backend.Device{}, err
	}
	// Intent first: the ledger says what is about to exist before the host
	// changes, so a crash leaves something to finish or undo.
	intentID := devUUID
	if gv.v.Interface == gpu.InterfaceVendorVFIO {
		intentID = offer.Parents[0]
	}
	dev := backend.Device{ID: intentID, Kind: gpu.KindVGPU, GPU: g.Address, Type: want.Name, VMUUID: req.VMUUID, Managed: true, Installation: env.Installation}
	if err := env.Ledger.Put(kit.Entry{Device: dev, State: kit.Creating}); err != nil {
		return backend.Device{}, backend.Errorf(backend.CodeInternal, g.Address, "record intent: %v", err)
	}
	v, err := kit.CreateVGPU(env.SysFS, g, gv.v.Interface, *offer, devUUID)
	if err != nil {
		_ = env.Ledger.Delete(intentID) // for a recreate, the lost device is forgotten: gpuvmd gives its slot back
		return backend.Device{}, err
	}
	dev.Hostdev = kit.HostdevFor(v, gv.v.Interface)
	if err := env.Ledger.Put(kit.Entry{Device: dev, State: kit.Created}); err != nil {
		_ = kit.RemoveVGPU(env.SysFS, g.Address, v.ID)
		_ = env.Ledger.Delete(intentID)
		return backend.Device{}, backend.Errorf(backend.CodeInternal, g.Address, "record device: %v", err)
	}
	b.Log.Info("created vGPU", "gpu", g.Address, "type", want.Name, "device", v.ID, "vm", req.VMUUID, "recreated", recreate)
	return dev, nil
}

func countType(v kit.VGPUView, name string) int {
	n := 0
	for _, x := range v.VGPUs {
		if x.Type == name {
			n++
		}
	}
	return n
}

// Remove implements backend.Backend.
func (b *Backend) Remove(ctx context.Context, req backend.RemoveRequest) error {
	env, err := b.State.Get()
	if err != nil {
		return err
	}
	id := req.ID
	if u, err := uuid.Parse(id); err == nil {
		id = u.String()
	} else if a, err := host.ValidateAddress(id); err == nil {
		id = a
	} else {
		return backend.Errorf(backend.CodeInvalid, req.GPU, "device ID %q is neither an mdev UUID nor a VF address", req.ID)
	}
	unlock, err := env.Lock(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	e, ok, err := env.Ledger.Get(id)
	if err != nil {
		return backend.Errorf(backend.CodeInternal, req.GPU, "%v", err)
	}
	if !ok {
		if kit.VGPUExists(env.SysFS, id) {
			return backend.Errorf(backend.CodeConflict, req.GPU, "device %s was not created by gpuvm: left alone", id)
		}
		return nil
	}
	if err := env.Owns(e, req.OfInstallation); err != nil {
		return err
	}
	if err := kit.RemoveVGPU(env.SysFS, e.Device.GPU, id); err != nil {
		return err
	}
	if err := env.Ledger.Delete(id); err != nil {
		return backend.Errorf(backend.CodeInternal, e.Device.GPU, "forget device %s: %v", id, err)
	}
	b.Log.Info("removed vGPU", "gpu", e.Device.GPU, "device", id, "vm", e.Device.VMUUID)
	return nil
}
