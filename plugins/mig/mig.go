package main

import (
	"context"
	"fmt"
	"sort"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/google/uuid"

	"github.com/gpuvm/gpuvm/pkg/backend"
	"github.com/gpuvm/gpuvm/pkg/gpu"
	"github.com/gpuvm/gpuvm/pkg/host"
	"github.com/gpuvm/gpuvm/pkg/revert"
	"github.com/gpuvm/gpuvm/plugins/internal/kit"
)

// Version is set at build time with -ldflags "-X main.Version=...".
var Version = "dev"

// Backend makes MIG-backed vGPUs on GPU instances it places itself.
type Backend struct {
	kit.Base
}

// New returns an unconfigured backend.
func New() *Backend {
	return &Backend{Base: kit.NewBase(backend.NameMIG, Version, "MIG GPU instances at a chosen placement, delivered as MIG-backed vGPUs")}
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
	if env.NVML == nil {
		return backend.Health{Detail: env.NVMLNote}, nil
	}
	return backend.Health{OK: true, Detail: env.SysFS.Describe()}, nil
}

func nvmlErr(gpuAddr, doing string, ret nvml.Return) error {
	code := backend.CodeHost
	switch ret {
	case nvml.ERROR_INSUFFICIENT_RESOURCES:
		code = backend.CodeExhausted
	case nvml.ERROR_IN_USE:
		code = backend.CodeConflict
	case nvml.ERROR_INVALID_ARGUMENT:
		code = backend.CodeInvalid
	case nvml.ERROR_NOT_SUPPORTED:
		code = backend.CodeUnsupported
	}
	return backend.Errorf(code, gpuAddr, "%s: NVML: %s", doing, ret.Error())
}

// gi is a GPU instance as NVML reports it.
type gi struct {
	id      int
	profile gpu.MIGProfile
	start   int
	handle  nvml.GpuInstance
}

// migGPU is one MIG-capable GPU with its NVML handle and instances.
type migGPU struct {
	g           host.GPU
	dev         nvml.Device
	enabled     bool
	gis         []gi
	v           kit.VGPUView
	unavailable string
}

func (m *migGPU) instances() []gpu.Instance {
	out := make([]gpu.Instance, len(m.gis))
	for i, x := range m.gis {
		out[i] = gpu.Instance{Profile: x.profile, Start: x.start}
	}
	return out
}

func (b *Backend) read(env *kit.Env, g host.GPU) (*migGPU, error) {
	m := &migGPU{g: g}
	dev, ret := env.NVML.DeviceGetHandleByPciBusId(host.NVMLBusID(g.Address))
	if ret != nvml.SUCCESS {
		m.unavailable = "NVML does not see the GPU: " + ret.Error()
		return m, nil
	}
	m.dev = dev
	on, err := host.MIGMode(dev)
	if err != nil {
		return nil, backend.Errorf(backend.CodeHost, g.Address, "read MIG mode: %v", err)
	}
	m.enabled = on
	if !on {
		m.unavailable = "MIG mode is disabled (an admin enables it with nvidia-smi -i <index> -mig 1 while the GPU is idle)"
		return m, nil
	}
	gis, err := listGIs(dev, g.Model.MIG)
	if err != nil {
		return nil, backend.Errorf(backend.CodeHost, g.Address, "%v", err)
	}
	m.gis = gis
	v, err := kit.ReadVGPUs(env.SysFS, g, env.Types)
	if err != nil {
		return nil, backend.Errorf(backend.CodeHost, g.Address, "%v", err)
	}
	m.v = v
	if v.Interface == gpu.InterfaceNone {
		m.unavailable = fmt.Sprintf("no vGPU interface to deliver MIG instances to VMs (SR-IOV VFs enabled? run /usr/lib/nvidia/sriov-manage -e %s)", g.Address)
	}
	return m, nil
}

// gi finds the GPU instance a device was made on: the ID it was given, at
// the profile and placement it was made with (after a reboot the same ID
// may name another device's instance). ok is false when there is none.
func (m *migGPU) gi(d backend.Device) (gi, bool) {
	for _, x := range m.gis {
		if x.id == d.GPUInstance && x.start == d.Placement && x.profile.Name == d.Profile {
			return x, true
		}
	}
	return gi{}, false
}

// holds reports whether the GPU has all of a device: its GPU instance and
// its vGPU.
func (m *migGPU) holds(env *kit.Env, d backend.Device) bool {
	if !m.enabled {
		return false
	}
	if _, ok := m.gi(d); !ok {
		return false
	}
	return kit.VGPUExists(env.SysFS, d.ID)
}

// listGIs reads a GPU's GPU instances through NVML, profile by profile of
// the board's table.
func listGIs(dev nvml.Device, table *gpu.MIGTable) ([]gi, error) {
	var out []gi
	for _, p := range table.Profiles {
		info, ret := dev.GetGpuInstanceProfileInfo(p.NVMLProfile)
		if ret == nvml.ERROR_NOT_SUPPORTED {
			continue
		}
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("read MIG profile %s: NVML: %v", p.Name, ret)
		}
		// info.Id is whatever NVML numbers the profile (nvidia-smi's ID on
		// real drivers, the profile index in go-nvml's mocks); it is only
		// passed back to NVML, never compared with gpuvm's table.
		list, ret := dev.GetGpuInstances(&info)
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("list GPU instances of %s: NVML: %v", p.Name, ret)
		}
		for _, h := range list {
			x, ret := h.GetInfo()
			if ret != nvml.SUCCESS {
				return nil, fmt.Errorf("read GPU instance: NVML: %v", ret)
			}
			out = append(out, gi{id: int(x.Id), profile: p, start: int(x.Placement.Start), handle: h})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].start < out[j].start })
	return out, nil
}

// Inventory implements backend.Backend.
func (b *Backend) Inventory(ctx context.Context) (backend.Inventory, error) {
	env, err := b.State.Get()
	if err != nil {
		return backend.Inventory{}, err
	}
	inv := env.Inventory()
	if env.NVML == nil {
		return inv, nil
	}
	gpus, err := host.ListGPUs(env.SysFS)
	if err != nil {
		inv.Notes = append(inv.Notes, "some PCI devices could not be read: "+err.Error())
	}
	ledger, err := env.Ledger.All()
	if err != nil {
		return inv, backend.Errorf(backend.CodeInternal, "", "%v", err)
	}
	for _, g := range gpus {
		if err := ctx.Err(); err != nil {
			return inv, err
		}
		if g.Model.MIG == nil || g.Driver != "nvidia" {
			continue
		}
		m, err := b.read(env, g)
		if err != nil {
			inv.Notes = append(inv.Notes, err.Error())
			continue
		}
		rec := backend.GPU{
			Address: g.Address, Model: g.Model.Name, DeviceID: fmt.Sprintf("10de:%04x", g.Device), Memory: g.Model.Memory,
			NUMANode: g.NUMANode, Driver: g.Driver, Interface: string(m.v.Interface), IOMMUGroup: g.IOMMUGroup,
			MIGCapable: true, MIGEnabled: m.enabled, Mode: gpu.ModeIdle, Unavailable: m.unavailable,
		}
		if m.enabled {
			rec.Mode = gpu.ModeMIG
		}
		for _, p := range g.Model.MIG.Profiles {
			mp := backend.MIGProfile{Name: p.Name, ID: p.ID, Slices: p.Compute, Size: p.Size, Memory: uint64(p.MemoryGB) * gpu.GiB, Max: p.Max}
			if m.enabled {
				mp.FreeStarts = g.Model.MIG.FreeStarts(m.instances(), p)
			}
			rec.MIGProfiles = append(rec.MIGProfiles, mp)
		}
		for _, t := range g.Model.VGPUTypes() {
			p, ok := g.Model.MIG.Profile(t.MIGProfile)
			if !ok {
				continue
			}
			avail := 0
			if m.unavailable == "" {
				avail = min(len(g.Model.MIG.FreeStarts(m.instances(), p)), m.v.FreeVFs, t.MaxInstances)
			}
			id := ""
			for _, o := range m.v.Offers {
				if o.Type == t.Name {
					id = o.HostID
				}
			}
			rec.VGPUTypes = append(rec.VGPUTypes, backend.VGPUType{Name: t.Name, ID: id, Memory: t.Memory, MaxInstances: t.MaxInstances, Available: avail, MIGProfile: t.MIGProfile})
		}
		inv.GPUs = append(inv.GPUs, rec)
		for _, e := range ledger {
			if e.Device.GPU == g.Address {
				d := e.Device
				if e.State == kit.Created && !m.holds(env, d) {
					d.Absent = kit.LostReason
				}
				inv.Devices = append(inv.Devices, d)
			}
		}
	}
	if len(inv.GPUs) == 0 {
		inv.Notes = append(inv.Notes, "no MIG-capable NVIDIA GPU found on "+env.SysFS.Describe())
	}
	return inv, nil
}

// migType picks the MIG-backed vGPU type for a profile on a board.
func migType(m gpu.Model, profile gpu.MIGProfile, asked string) (string, error) {
	if asked != "" {
		t, err := m.VGPUType(asked)
		if err != nil {
			return "", err
		}
		if t.MIGProfile != profile.Name {
			return "", fmt.Errorf("vGPU type %s runs on MIG profile %q, not %s", t.Name, t.MIGProfile, profile.Name)
		}
		return t.Name, nil
	}
	for _, t := range m.VGPUTypes() {
		if t.MIGProfile == profile.Name {
			return t.Name, nil
		}
	}
	return "", fmt.Errorf("%s has no MIG-backed vGPU type for profile %s", m.Name, profile.Name)
}

// Create implements backend.Backend: GPU instance at the asked placement, a
// compute instance spanning it, then the MIG-backed vGPU. Any failure undoes
// what was done.
func (b *Backend) Create(ctx context.Context, req backend.CreateRequest) (backend.Device, error) {
	env, err := b.State.Get()
	if err != nil {
		return backend.Device{}, err
	}
	if env.NVML == nil {
		return backend.Device{}, backend.Errorf(backend.CodeUnsupported, req.GPU, "MIG needs NVML: %s", env.NVMLNote)
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
	c, err := b.planCreate(ctx, env, req, devUUID)
	if err != nil {
		return backend.Device{}, err
	}
	if c.whole {
		return c.old.Device, nil // there already: nothing to make again
	}
	if err := c.recordIntent(); err != nil {
		return backend.Device{}, err
	}
	for _, step := range []func() error{c.createGPUInstance, c.createComputeInstance, c.createVGPU, c.record} {
		if err := step(); err != nil {
			return c.fail(err)
		}
	}
	c.rev.Success()
	b.Log.Info("created MIG device", "gpu", c.g.Address, "profile", c.profile.Name, "placement", c.req.Placement, "gi", c.dev.GPUInstance, "device", c.dev.ID, "vm", req.VMUUID, "recreated", c.recreate)
	return c.dev, nil
}

// migCreate is one Create under way, under the host lock: what it was asked
// and found (planCreate), the device as far as it is made, and how to undo
// that.
type migCreate struct {
	b        *Backend
	env      *kit.Env
	req      backend.CreateRequest
	old      kit.Entry // the lost device a recreate makes again
	recreate bool
	whole    bool // a recreate found the device whole: nothing to make
	devUUID  string
	g        host.GPU
	m        *migGPU
	profile  gpu.MIGProfile
	typeName string
	dev      backend.Device
	gi       nvml.GpuInstance // made by createGPUInstance
	rev      revert.Reverter
}

// planCreate checks that the request can be made on the GPU as it is now,
// or finds that a recreate has nothing to make (whole).
func (b *Backend) planCreate(ctx context.Context, env *kit.Env, req backend.CreateRequest, devUUID string) (*migCreate, error) {
	old, recreate, err := env.Recreated(req)
	if err != nil {
		return nil, err
	}
	g, err := kit.FindGPU(env.SysFS, req.GPU)
	if err != nil {
		return nil, err
	}
	if g.Model.MIG == nil {
		return nil, backend.Errorf(backend.CodeInvalid, g.Address, "%s does not support MIG", g.Model.Name)
	}
	if recreate {
		// As it was: its profile, placement and UUID (an mdev's, which the
		// domain names; a VF's vGPU goes on the VF it had, in createVGPU).
		req.Profile, req.Placement, req.Type = old.Device.Profile, old.Device.Placement, old.Device.Type
		if old.Device.Hostdev.UUID != "" {
			devUUID = old.Device.Hostdev.UUID
		}
	}
	profile, ok := g.Model.MIG.Profile(req.Profile)
	if !ok {
		return nil, backend.Errorf(backend.CodeInvalid, g.Address, "MIG profile %q does not exist on %s (profiles: %v)", req.Profile, g.Model.Name, g.Model.MIG.ProfileNames())
	}
	typeName, err := migType(g.Model, profile, req.Type)
	if err != nil {
		return nil, backend.Errorf(backend.CodeInvalid, g.Address, "%v", err)
	}
	m, err := b.read(env, g)
	if err != nil {
		return nil, err
	}
	if recreate && m.holds(env, old.Device) {
		return &migCreate{old: old, recreate: true, whole: true}, nil
	}
	if m.unavailable != "" {
		return nil, backend.Errorf(backend.CodeConflict, g.Address, "cannot create %s: %s", profile.Name, m.unavailable)
	}
	if err := g.Model.MIG.CanPlace(m.instances(), profile, req.Placement); err != nil {
		code := backend.CodeExhausted
		if !contains(profile.Starts, req.Placement) {
			code = backend.CodeInvalid
		}
		return nil, backend.Errorf(code, g.Address, "%v", err)
	}
	if m.v.FreeVFs == 0 {
		return nil, backend.Errorf(backend.CodeExhausted, g.Address, "every VF already holds a vGPU")
	}
	if err := refuseForeignInstances(env, g.Address, m, profile.ID); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return &migCreate{b: b, env: env, req: req, old: old, recreate: recreate, devUUID: devUUID, g: g, m: m, profile: profile, typeName: typeName}, nil
}

// recordIntent writes the device about to be made to the ledger, before
// the host changes.
func (c *migCreate) recordIntent() error {
	c.dev = backend.Device{ID: c.devUUID, Kind: gpu.KindMIG, GPU: c.g.Address, Type: c.typeName, VMUUID: c.req.VMUUID,
		Profile: c.profile.Name, Placement: c.req.Placement, GPUInstance: -1, ComputeInstance: -1, Managed: true, Installation: c.env.Installation}
	if err := c.env.Ledger.Put(kit.Entry{Device: c.dev, State: kit.Creating}); err != nil {
		return backend.Errorf(backend.CodeInternal, c.g.Address, "record intent: %v", err)
	}
	return nil
}

// record writes the device, made, to the ledger.
func (c *migCreate) record() error {
	if err := c.env.Ledger.Put(kit.Entry{Device: c.dev, State: kit.Created}); err != nil {
		return backend.Errorf(backend.CodeInternal, c.g.Address, "record device: %v", err)
	}
	return nil
}

// fail undoes what was made and forgets the intent (unless the undoing
// failed: the reconciler needs the record then).
func (c *migCreate) fail(err error) (backend.Device, error) {
	if rerr := c.rev.Revert(); rerr != nil {
		c.b.Log.Error("rollback incomplete", "gpu", c.g.Address, "err", rerr)
		return backend.Device{}, fmt.Errorf("%w (rollback incomplete: %v)", err, rerr)
	}
	_ = c.env.Ledger.Delete(c.dev.ID)
	return backend.Device{}, err
}

// createGPUInstance makes the GPU instance at the asked placement.
func (c *migCreate) createGPUInstance() error {
	addr, profile := c.g.Address, c.profile
	info, ret := c.m.dev.GetGpuInstanceProfileInfo(profile.NVMLProfile)
	if ret != nvml.SUCCESS {
		return nvmlErr(addr, "read MIG profile "+profile.Name, ret)
	}
	giH, ret := c.m.dev.CreateGpuInstanceWithPlacement(&info, &nvml.GpuInstancePlacement{Start: uint32(c.req.Placement), Size: uint32(profile.Size)})
	if ret != nvml.SUCCESS {
		return nvmlErr(addr, fmt.Sprintf("create GPU instance %s at %d", profile.Name, c.req.Placement), ret)
	}
	c.rev.Add(func() error { return retErr(giH.Destroy()) })
	c.gi = giH
	giInfo, ret := giH.GetInfo()
	if ret != nvml.SUCCESS {
		return nvmlErr(addr, "read new GPU instance", ret)
	}
	c.dev.GPUInstance = int(giInfo.Id)
	return nil
}

// createComputeInstance makes a compute instance spanning the new GPU
// instance.
func (c *migCreate) createComputeInstance() error {
	addr := c.g.Address
	ciProfile, ok := ciProfileFor(c.profile.Compute)
	if !ok {
		return backend.Errorf(backend.CodeUnsupported, addr, "no compute-instance profile spans %d slices", c.profile.Compute)
	}
	ciInfo, ret := c.gi.GetComputeInstanceProfileInfo(ciProfile, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
	if ret != nvml.SUCCESS {
		return nvmlErr(addr, "read compute-instance profile", ret)
	}
	ciH, ret := c.gi.CreateComputeInstance(&ciInfo)
	if ret != nvml.SUCCESS {
		return nvmlErr(addr, "create compute instance", ret)
	}
	c.rev.Add(func() error { return retErr(ciH.Destroy()) })
	ci, ret := ciH.GetInfo()
	if ret != nvml.SUCCESS {
		return nvmlErr(addr, "read new compute instance", ret)
	}
	c.dev.ComputeInstance = int(ci.Id)
	return nil
}

// createVGPU makes the MIG-backed vGPU on the new GPU instance: on a VF
// (vendor VFIO; the ledger's record moves to the VF's address, the device's
// ID) or as an mdev.
func (c *migCreate) createVGPU() error {
	env, g, addr := c.env, c.g, c.g.Address
	// The vGPU type appears among the creatable ones only now that its GI exists.
	v, err := kit.ReadVGPUs(env.SysFS, g, env.Types)
	if err != nil {
		return backend.Errorf(backend.CodeHost, addr, "%v", err)
	}
	offer := v.Offer(c.typeName)
	if offer == nil {
		return backend.Errorf(backend.CodeHost, addr, "the driver offers no %s after GPU instance %d was made", c.typeName, c.dev.GPUInstance)
	}
	if !c.recreate && v.Interface == gpu.InterfaceVendorVFIO {
		ledger, err := env.Ledger.All()
		if err != nil {
			return backend.Errorf(backend.CodeInternal, addr, "read the ledger: %v", err)
		}
		kit.SkipLedgerParents(offer, ledger) // the VFs of lost devices stay theirs
		if len(offer.Parents) == 0 {
			return backend.Errorf(backend.CodeExhausted, addr, "every free VF is held for a device the host lost (gpuvmd makes it again or forgets it)")
		}
	}
	if c.recreate && v.Interface == gpu.InterfaceVendorVFIO && !kit.PreferParent(offer, c.old.Device.ID) {
		return backend.Errorf(backend.CodeExhausted, addr, "recreate %s on VF %s: the VF is not free for it now", c.typeName, c.old.Device.ID)
	}
	if v.Interface == gpu.InterfaceVendorVFIO && len(offer.Parents) > 0 {
		// The ledger is keyed by device ID: for vendor VFIO that is the VF.
		if err := env.Ledger.Delete(c.dev.ID); err != nil {
			return backend.Errorf(backend.CodeInternal, addr, "re-record intent: %v", err)
		}
		c.dev.ID = offer.Parents[0]
		if err := env.Ledger.Put(kit.Entry{Device: c.dev, State: kit.Creating}); err != nil {
			return backend.Errorf(backend.CodeInternal, addr, "record intent: %v", err)
		}
	}
	vg, err := kit.CreateVGPU(env.SysFS, g, v.Interface, *offer, c.devUUID)
	if err != nil {
		return err
	}
	c.rev.Add(func() error { return kit.RemoveVGPU(env.SysFS, addr, vg.ID) })
	if vg.GPUInstance >= 0 && vg.GPUInstance != c.dev.GPUInstance {
		return backend.Errorf(backend.CodeHost, addr, "the driver put the vGPU on GPU instance %d, not %d", vg.GPUInstance, c.dev.GPUInstance)
	}
	c.dev.Hostdev = kit.HostdevFor(vg, v.Interface)
	return nil
}

// refuseForeignInstances refuses a create on a GPU that has a GPU instance
// of the profile which gpuvm did not make: the driver puts a MIG-backed vGPU
// on a free GPU instance of its profile that it picks itself, and could pick
// that one.
func refuseForeignInstances(env *kit.Env, addr string, m *migGPU, profileID int) error {
	ledger, err := env.Ledger.All()
	if err != nil {
		return backend.Errorf(backend.CodeInternal, addr, "read the ledger: %v", err)
	}
	held := map[int]bool{}
	for _, e := range ledger {
		if e.Device.GPU == addr {
			held[e.Device.GPUInstance] = true
		}
	}
	for _, x := range m.gis {
		if x.profile.ID == profileID && !held[x.id] {
			return backend.Errorf(backend.CodeConflict, addr,
				"GPU instance %d (%s at %d) was not made by gpuvm and holds no vGPU; the driver could place the new vGPU on it: destroy it first", x.id, x.profile.Name, x.start)
		}
	}
	return nil
}

// sameInstance reports whether a GPU instance is the one a device was made
// on: at its placement.
func sameInstance(h nvml.GpuInstance, d backend.Device) bool {
	info, ret := h.GetInfo()
	if ret != nvml.SUCCESS {
		return true // cannot tell: destroy as asked, as before
	}
	return int(info.Placement.Start) == d.Placement
}

// claimedByAnother reports whether another device of the ledger is on the
// same GPU instance (after a reboot, one made again may have been given the
// ID this lost one had).
func claimedByAnother(env *kit.Env, d backend.Device) bool {
	all, err := env.Ledger.All()
	if err != nil {
		return true // cannot tell: destroy nothing
	}
	for _, e := range all {
		if e.Device.ID != d.ID && e.Device.GPU == d.GPU && e.Device.GPUInstance == d.GPUInstance {
			return true
		}
	}
	return false
}

func contains(xs []int, x int) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

func retErr(ret nvml.Return) error {
	if ret == nvml.SUCCESS || ret == nvml.ERROR_NOT_FOUND {
		return nil
	}
	return ret
}

func ciProfileFor(slices int) (int, bool) {
	switch slices {
	case 1:
		return nvml.COMPUTE_INSTANCE_PROFILE_1_SLICE, true
	case 2:
		return nvml.COMPUTE_INSTANCE_PROFILE_2_SLICE, true
	case 3:
		return nvml.COMPUTE_INSTANCE_PROFILE_3_SLICE, true
	case 4:
		return nvml.COMPUTE_INSTANCE_PROFILE_4_SLICE, true
	case 7:
		return nvml.COMPUTE_INSTANCE_PROFILE_7_SLICE, true
	}
	return 0, false
}

// Remove implements backend.Backend: the vGPU, then the compute instance,
// then the GPU instance; each step tolerates what is already gone.
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
		return nil
	}
	if err := env.Owns(e, req.OfInstallation); err != nil {
		return err
	}
	d := e.Device
	if err := kit.RemoveVGPU(env.SysFS, d.GPU, id); err != nil {
		return err
	}
	if env.NVML == nil {
		return backend.Errorf(backend.CodeUnavailable, d.GPU, "cannot destroy GPU instance %d: %s", d.GPUInstance, env.NVMLNote)
	}
	if d.GPUInstance >= 0 {
		dev, ret := env.NVML.DeviceGetHandleByPciBusId(host.NVMLBusID(d.GPU))
		if ret != nvml.SUCCESS {
			return nvmlErr(d.GPU, "find GPU", ret)
		}
		giH, ret := dev.GetGpuInstanceById(d.GPUInstance)
		if ret == nvml.SUCCESS && (!sameInstance(giH, d) || claimedByAnother(env, d)) {
			// After a reboot the ID names another device's instance: this
			// one's is gone already.
			b.Log.Warn("GPU instance ID now names another instance; the device's own is gone", "gpu", d.GPU, "gi", d.GPUInstance, "device", id)
			ret = nvml.ERROR_NOT_FOUND
		}
		switch ret {
		case nvml.SUCCESS:
			if d.ComputeInstance >= 0 {
				ci, ret := giH.GetComputeInstanceById(d.ComputeInstance)
				if ret == nvml.SUCCESS {
					ret = ci.Destroy()
				}
				if ret != nvml.SUCCESS && ret != nvml.ERROR_NOT_FOUND {
					return nvmlErr(d.GPU, fmt.Sprintf("destroy compute instance %d of GPU instance %d", d.ComputeInstance, d.GPUInstance), ret)
				}
			}
			if ret := giH.Destroy(); ret != nvml.SUCCESS && ret != nvml.ERROR_NOT_FOUND {
				return nvmlErr(d.GPU, fmt.Sprintf("destroy GPU instance %d", d.GPUInstance), ret)
			}
		case nvml.ERROR_NOT_FOUND:
		default:
			return nvmlErr(d.GPU, fmt.Sprintf("find GPU instance %d", d.GPUInstance), ret)
		}
	}
	if err := env.Ledger.Delete(id); err != nil {
		return backend.Errorf(backend.CodeInternal, d.GPU, "forget device %s: %v", id, err)
	}
	b.Log.Info("removed MIG device", "gpu", d.GPU, "device", id, "gi", d.GPUInstance, "vm", d.VMUUID)
	return nil
}
