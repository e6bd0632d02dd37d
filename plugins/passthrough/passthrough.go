package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path"
	"slices"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpuvm/gpuvm/pkg/backend"
	"github.com/gpuvm/gpuvm/pkg/gpu"
	"github.com/gpuvm/gpuvm/pkg/host"
	"github.com/gpuvm/gpuvm/pkg/revert"
	"github.com/gpuvm/gpuvm/plugins/internal/kit"
)

// Version is set at build time with -ldflags "-X main.Version=...".
var Version = "dev"

// vfioPCI is the driver a passed-through function is bound to.
const vfioPCI = "vfio-pci"

// Backend passes whole GPUs through to VMs (REFERENCE.md §4): the GPU and
// every other function of its card in its IOMMU group (the HDMI audio .1, say)
// go to vfio-pci, and the VM gets them as <hostdev type='pci' managed='yes'>.
//
// libvirt's managed='yes' would also unbind the host driver and bind vfio-pci
// when the VM starts, and give the functions back when it stops. The backend
// still does the binding itself, at Create: that reserves the GPU on the host
// (no other backend, and no admin's vGPU or MIG setup, can take it between
// Create and VM start, and every other backend sees it as taken), and it
// proves at once, with a precise error, that the driver lets go of the GPU,
// rather than failing later inside a VM start. With the functions already on
// vfio-pci, libvirt's managed binding at start finds nothing to do; whether
// libvirt leaves them on vfio-pci at VM stop or hands them back to the host
// drivers, Remove starts from what it finds. The ledger, not the binding,
// keeps the GPU reserved between VM runs.
type Backend struct {
	state kit.State
	log   *slog.Logger
}

// New returns an unconfigured backend.
func New() *Backend { return &Backend{log: backend.PluginLogger()} }

var (
	_ backend.Backend         = (*Backend)(nil)
	_ backend.HostGenerations = (*Backend)(nil)
)

// HostGeneration implements backend.HostGenerations.
func (b *Backend) HostGeneration() string { return b.state.HostGeneration() }

// Info implements backend.Backend.
func (b *Backend) Info(context.Context) (backend.Info, error) {
	return backend.Info{Name: backend.NamePassthrough, Version: Version, APIVersions: backend.APIVersions,
		Description: "whole-GPU passthrough: the GPU and the other functions of its card in its IOMMU group are bound to vfio-pci for one VM"}, nil
}

// Configure implements backend.Backend.
func (b *Backend) Configure(_ context.Context, cfg backend.Config) error {
	if cfg.APIVersion != "" && !slices.Contains(backend.APIVersions, cfg.APIVersion) {
		return backend.Errorf(backend.CodeInvalid, "", "backend %s speaks API %s, not %s", backend.NamePassthrough,
			strings.Join(backend.APIVersions, ", "), cfg.APIVersion)
	}
	env, err := kit.Open(backend.NamePassthrough, cfg)
	if err != nil {
		return asBackendError(backend.CodeInternal, "", err)
	}
	b.state.Set(env)
	b.log.Info("configured", "host", env.SysFS.Describe(), "simulated", env.Simulated)
	return nil
}

// Health implements backend.Backend.
func (b *Backend) Health(ctx context.Context) (backend.Health, error) {
	env, err := b.state.Get()
	if err != nil {
		return backend.Health{Detail: err.Error()}, err
	}
	if err := abandoned(ctx, "health check"); err != nil {
		return backend.Health{}, err
	}
	if _, err := host.ListPCIDevices(env.SysFS); err != nil {
		return backend.Health{Detail: "cannot read " + env.SysFS.Describe() + ": " + err.Error()}, nil
	}
	return backend.Health{OK: true, Detail: "passthrough backend on " + env.SysFS.Describe()}, nil
}

// Inventory implements backend.Backend.
func (b *Backend) Inventory(ctx context.Context) (backend.Inventory, error) {
	env, err := b.state.Get()
	if err != nil {
		return backend.Inventory{}, err
	}
	if err := abandoned(ctx, "inventory"); err != nil {
		return backend.Inventory{}, err
	}
	inv := env.Inventory()
	entries, err := env.Ledger.All()
	if err != nil {
		return backend.Inventory{}, backend.Errorf(backend.CodeInternal, "", "%v", err)
	}
	ours := map[string]kit.Entry{}
	for _, e := range entries {
		ours[e.Device.ID] = e
		d := e.Device
		d.Managed = true
		inv.Devices = append(inv.Devices, d)
	}
	if _, err := host.ListPCIDevices(env.SysFS); err != nil {
		return backend.Inventory{}, backend.Errorf(backend.CodeHost, "", "%v", err)
	}
	gpus, err := host.ListGPUs(env.SysFS)
	if err != nil {
		inv.Notes = append(inv.Notes, "some PCI devices could not be read: "+err.Error())
	}
	mdevs, err := host.ListMdevs(env.SysFS)
	if err != nil {
		inv.Notes = append(inv.Notes, "some mdevs could not be read: "+err.Error())
	}
	for _, g := range gpus {
		if err := abandoned(ctx, "inventory"); err != nil {
			return backend.Inventory{}, err
		}
		c := examine(env, g, ours, mdevs)
		inv.Notes = append(inv.Notes, c.notes...)
		inv.GPUs = append(inv.GPUs, c.record())
	}
	if len(gpus) == 0 {
		inv.Notes = append(inv.Notes, "no NVIDIA GPU found on "+env.SysFS.Describe())
	}
	return inv, nil
}

// card is one GPU as this backend sees it: what passing it through would
// move to vfio-pci, and why that cannot be done now, if so.
type card struct {
	g     host.GPU
	iface gpu.VGPUInterface
	// group holds the other members of its IOMMU group, bridges included.
	group []string
	// functions are what goes to the VM: the GPU first, then the other
	// functions of the card in its group, sorted. Never a bridge.
	functions  []host.PCIDevice
	mdevs      int
	migEnabled bool
	// entry is the ledger's record when gpuvm passed the GPU through.
	entry   *kit.Entry
	notes   []string
	blocked *backend.Error // nil when the GPU can be passed through now
}

// block records why the GPU cannot be passed through; the first reason wins,
// so examine states them from the most to the least telling.
func (c *card) block(code backend.Code, format string, args ...any) {
	if c.blocked == nil {
		c.blocked = backend.Errorf(code, c.g.Address, format, args...)
	}
}

// sameCard reports whether two PCI addresses are functions of one device:
// the same domain, bus and slot ("0000:c1:00.0" and "0000:c1:00.1").
func sameCard(a, b string) bool {
	i, j := strings.LastIndexByte(a, '.'), strings.LastIndexByte(b, '.')
	return i > 0 && j > 0 && a[:i] == b[:j]
}

// examine looks at one GPU: its IOMMU group, its drivers, vGPU and MIG state,
// and the ledger. ours maps device IDs (GPU addresses) to ledger entries;
// mdevs are the mdevs on the host.
func examine(env *kit.Env, g host.GPU, ours map[string]kit.Entry, mdevs []host.Mdev) card {
	c := card{g: g, iface: host.DetectInterface(env.SysFS, g.PCIDevice), functions: []host.PCIDevice{g.PCIDevice}}
	if e, ok := ours[g.Address]; ok {
		c.entry = &e
		if e.Device.VMUUID != "" {
			c.block(backend.CodeConflict, "passed through to VM %s", e.Device.VMUUID)
		} else {
			c.block(backend.CodeConflict, "passed through by gpuvm")
		}
	}

	// The IOMMU group: every member goes to the VM, or is a bridge.
	if g.IOMMUGroup == "" {
		c.block(backend.CodeUnsupported, "no IOMMU group: the IOMMU is off; boot with intel_iommu=on or amd_iommu=on")
	} else if members, err := host.IOMMUGroupDevices(env.SysFS, g.IOMMUGroup); err != nil {
		c.block(backend.CodeHost, "cannot list its IOMMU group: %v", err)
	} else {
		var foreign []string
		for _, m := range members {
			if m == g.Address {
				continue
			}
			c.group = append(c.group, m)
			d, err := host.ReadPCIDevice(env.SysFS, m)
			switch {
			case err != nil:
				c.block(backend.CodeHost, "cannot read %s of its IOMMU group %s: %v", m, g.IOMMUGroup, err)
			case d.IsBridge():
			case sameCard(g.Address, d.Address):
				c.functions = append(c.functions, d)
			default:
				foreign = append(foreign, fmt.Sprintf("%s (class 0x%06x, vendor 0x%04x)", d.Address, d.Class, d.Vendor))
			}
		}
		if len(foreign) > 0 {
			c.block(backend.CodeUnsupported, "its IOMMU group %s also holds %s, which %s neither a PCI bridge nor a function of this card; "+
				"a VM gets a whole IOMMU group, so put the card in a slot with a group of its own (or behind a switch with ACS)",
				g.IOMMUGroup, strings.Join(foreign, ", "), plural(len(foreign), "is", "are"))
		}
	}

	// Drivers: a function on vfio-pci that gpuvm did not put there belongs
	// to someone else; a driver_override gpuvm did not write is someone
	// else's plan for the device.
	for i, f := range c.functions {
		what := "its function " + f.Address
		if i == 0 {
			what = "it"
		}
		switch {
		case f.Driver == vfioPCI:
			c.block(backend.CodeConflict, "%s is bound to vfio-pci outside gpuvm", what)
		case f.DriverOverride != "":
			c.block(backend.CodeConflict, "driver_override of %s is %q, set outside gpuvm; clear it (echo > driver_override) first", f.Address, f.DriverOverride)
		}
	}

	// vGPU: VFs and mdevs hang on the nvidia driver, which then refuses to
	// let go of the GPU.
	nvfs := max(g.NumVFs, len(g.VFs))
	if nvfs > 0 {
		c.block(backend.CodeConflict, "%d SR-IOV VFs are enabled for vGPU; disable them (sriov-manage -d %s) to pass the whole GPU through", nvfs, g.Address)
	}
	parents := map[string]bool{g.Address: true}
	for _, vf := range g.VFs {
		parents[vf] = true
	}
	for _, m := range mdevs {
		if parents[m.Parent] {
			c.mdevs++
		}
	}
	if c.mdevs > 0 {
		c.block(backend.CodeConflict, "%d vGPU mdev%s exist on it; remove them to pass the whole GPU through", c.mdevs, plural(c.mdevs, "", "s"))
	}

	// MIG: only NVML knows, and only while the GPU is on nvidia.
	if env.NVML != nil && g.Model.MIG != nil && g.Driver == "nvidia" {
		on, err := migMode(env.NVML, g.Address)
		if err != nil {
			c.notes = append(c.notes, fmt.Sprintf("GPU %s: MIG mode unknown: %v", g.Address, err))
		}
		c.migEnabled = on
		if on {
			c.block(backend.CodeConflict, "MIG mode is enabled; disable it (nvidia-smi -i %s -mig 0) to pass the whole GPU through", g.Address)
		}
	}
	return c
}

func migMode(lib nvml.Interface, addr string) (bool, error) {
	dev, ret := lib.DeviceGetHandleByPciBusId(host.NVMLBusID(addr))
	if ret != nvml.SUCCESS {
		return false, fmt.Errorf("NVML has no handle for it: %w", ret)
	}
	return host.MIGMode(dev)
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// mode says what the GPU is used for now.
func (c *card) mode() gpu.Mode {
	switch {
	case c.g.Driver == vfioPCI, c.entry != nil: // the ledger reserves it even when libvirt gave it back
		return gpu.ModePassthrough
	case c.migEnabled:
		return gpu.ModeMIG
	case max(c.g.NumVFs, len(c.g.VFs)) > 0 || c.mdevs > 0:
		return gpu.ModeVGPU
	}
	return gpu.ModeIdle
}

func (c *card) record() backend.GPU {
	g := c.g
	out := backend.GPU{
		Address: g.Address, Model: g.Model.Name, DeviceID: fmt.Sprintf("%04x:%04x", g.Vendor, g.Device),
		Memory: g.Model.Memory, NUMANode: g.NUMANode, Driver: g.Driver, Mode: c.mode(), Interface: string(c.iface),
		IOMMUGroup: g.IOMMUGroup, GroupDevices: c.group, MIGCapable: g.Model.MIG != nil, MIGEnabled: c.migEnabled,
	}
	if c.blocked != nil {
		out.Unavailable = c.blocked.Reason
	}
	return out
}

func (c *card) addresses() []string {
	out := make([]string, len(c.functions))
	for i, f := range c.functions {
		out[i] = f.Address
	}
	return out
}

// Create implements backend.Backend: it moves the GPU and the other functions
// of its card to vfio-pci.
func (b *Backend) Create(ctx context.Context, req backend.CreateRequest) (backend.Device, error) {
	env, err := b.state.Get()
	if err != nil {
		return backend.Device{}, err
	}
	addr, err := host.ValidateAddress(req.GPU)
	if err != nil {
		return backend.Device{}, backend.Errorf(backend.CodeInvalid, "", "%v", err)
	}
	switch {
	case req.Type != "":
		return backend.Device{}, backend.Errorf(backend.CodeInvalid, addr, "passthrough takes no vGPU type (%s): the whole GPU goes to the VM; use the vgpu backend for a vGPU", req.Type)
	case req.Profile != "" || req.Placement != 0:
		return backend.Device{}, backend.Errorf(backend.CodeInvalid, addr, "passthrough takes no MIG profile or placement: the whole GPU goes to the VM; use the mig backend for a MIG instance")
	case req.DeviceUUID != "":
		return backend.Device{}, backend.Errorf(backend.CodeInvalid, addr, "passthrough takes no device UUID: the device is the GPU itself")
	}
	unlock, err := env.Lock(ctx)
	if err != nil {
		return backend.Device{}, err
	}
	defer unlock()
	if err := abandoned(ctx, "create"); err != nil {
		return backend.Device{}, err
	}

	g, err := readGPU(env, addr)
	if err != nil {
		return backend.Device{}, err
	}
	ours := map[string]kit.Entry{}
	if e, ok, err := env.Ledger.Get(addr); err != nil {
		return backend.Device{}, backend.Errorf(backend.CodeInternal, addr, "%v", err)
	} else if ok {
		ours[addr] = e
	}
	mdevs, err := host.ListMdevs(env.SysFS)
	if err != nil {
		return backend.Device{}, backend.Errorf(backend.CodeHost, addr, "cannot tell whether it holds vGPUs: %v", err)
	}
	c := examine(env, g, ours, mdevs)
	if c.blocked != nil {
		return backend.Device{}, c.blocked
	}

	addrs := c.addresses()
	dev := backend.Device{
		ID: addr, Kind: gpu.KindPassthrough, GPU: addr, VMUUID: req.VMUUID, Managed: true, Installation: env.Installation,
		Hostdev: backend.Hostdev{Type: backend.HostdevPCI, Addresses: addrs, Managed: true},
	}
	prev := map[string]string{}
	for _, f := range c.functions {
		prev[f.Address] = f.Driver
	}
	// Intent first: should the process die half-way, the ledger names every
	// function and the driver it had, and Remove puts them back.
	if err := env.Ledger.Put(kit.Entry{Device: dev, State: kit.Creating, Functions: prev}); err != nil {
		return backend.Device{}, backend.Errorf(backend.CodeInternal, addr, "record intent: %v", err)
	}

	var r revert.Reverter
	fail := func(err error) (backend.Device, error) {
		if rerr := r.Revert(); rerr != nil {
			// The host is not as it was: keep the record, so that the
			// reconciler's Remove can finish putting it back.
			b.log.Error("passthrough failed and could not be undone", "gpu", addr, "error", err, "undo", rerr)
			return backend.Device{}, fmt.Errorf("%w; undoing it failed too (gpuvm keeps its record to retry): %v", err, rerr)
		}
		if derr := env.Ledger.Delete(addr); derr != nil {
			b.log.Error("forget failed passthrough", "gpu", addr, "error", derr)
		}
		return backend.Device{}, err
	}
	for _, f := range c.functions {
		if err := abandoned(ctx, "create"); err != nil {
			return fail(err)
		}
		// One undo per function puts back whatever part of the move was
		// done: it is Remove's step, which reads the state it starts from.
		r.Add(func() error { return giveBack(env.SysFS, f.Address, f.Driver) })
		if err := toVFIO(env.SysFS, f); err != nil {
			return fail(kit.HostError(addr, "move "+f.Address+" to vfio-pci", err))
		}
	}
	if err := env.Ledger.Put(kit.Entry{Device: dev, State: kit.Created, Functions: prev}); err != nil {
		return fail(backend.Errorf(backend.CodeInternal, addr, "record passthrough: %v", err))
	}
	r.Success()
	b.log.Info("passed GPU through", "gpu", addr, "functions", addrs, "vm", req.VMUUID)
	return dev, nil
}

// readGPU reads the NVIDIA GPU at addr.
func readGPU(env *kit.Env, addr string) (host.GPU, error) {
	d, err := host.ReadPCIDevice(env.SysFS, addr)
	if err != nil {
		if host.IsNotExist(err) {
			return host.GPU{}, backend.Errorf(backend.CodeNotFound, addr, "no such PCI device on %s", env.SysFS.Describe())
		}
		return host.GPU{}, backend.Errorf(backend.CodeHost, addr, "%v", err)
	}
	switch {
	case d.IsVF():
		return host.GPU{}, backend.Errorf(backend.CodeInvalid, addr, "is an SR-IOV virtual function of %s, not a whole GPU", d.PhysFn)
	case !d.IsNVIDIA() || !d.IsDisplay():
		return host.GPU{}, backend.Errorf(backend.CodeInvalid, addr, "is not an NVIDIA GPU (class 0x%06x, vendor 0x%04x)", d.Class, d.Vendor)
	}
	g := host.GPU{PCIDevice: d}
	if g.Model, g.Known = gpu.ModelByID(d.Device); !g.Known {
		g.Model = gpu.UnknownModel(d.Device)
	}
	return g, nil
}

// Sysfs paths of the driver core (Documentation/ABI/testing/sysfs-bus-pci).
func overridePath(addr string) string { return path.Join("bus/pci/devices", addr, "driver_override") }
func unbindPath(drv string) string    { return path.Join("bus/pci/drivers", drv, "unbind") }

const probePath = "bus/pci/drivers_probe"

// driverOf returns the driver bound to addr, "" when none.
func driverOf(fsys host.SysFS, addr string) (string, error) {
	d, err := host.LinkBase(fsys, path.Join("bus/pci/devices", addr, "driver"))
	if err != nil {
		if host.IsNotExist(err) {
			return "", nil
		}
		return "", fmt.Errorf("read the driver of %s: %w", addr, err)
	}
	return d, nil
}

// toVFIO moves one function from its driver to vfio-pci: driver_override
// first, so that nothing else binds it once it is free, then unbind, then a
// probe that binds the override, and a read-back.
func toVFIO(fsys host.SysFS, f host.PCIDevice) error {
	if err := host.WriteString(fsys, overridePath(f.Address), vfioPCI); err != nil {
		return err
	}
	if f.Driver != "" && f.Driver != vfioPCI {
		if err := host.WriteString(fsys, unbindPath(f.Driver), f.Address); err != nil {
			return fmt.Errorf("unbind from %s: %w", f.Driver, err)
		}
	}
	if err := host.WriteString(fsys, probePath, f.Address); err != nil {
		return err
	}
	drv, err := driverOf(fsys, f.Address)
	if err != nil {
		return err
	}
	if drv != vfioPCI {
		return fmt.Errorf("%s is bound to %q after drivers_probe, not vfio-pci (is the vfio-pci module loaded?)", f.Address, drv)
	}
	return nil
}

// giveBack returns one function to the driver it had before (prev, "" for
// none): unbind vfio-pci, clear driver_override, probe. It starts from
// whatever state it finds, so it undoes a half-done move as well as a whole
// one, and does nothing twice.
func giveBack(fsys host.SysFS, addr, prev string) error {
	if prev == vfioPCI || !fsys.Exists(path.Join("bus/pci/devices", addr)) {
		return nil // not ours to move, or gone from the bus
	}
	drv, err := driverOf(fsys, addr)
	if err != nil {
		return err
	}
	if drv == vfioPCI {
		if err := host.WriteString(fsys, unbindPath(vfioPCI), addr); err != nil {
			return fmt.Errorf("unbind from vfio-pci: %w", err)
		}
		drv = ""
	}
	if err := host.WriteString(fsys, overridePath(addr), "\n"); err != nil {
		return err
	}
	if prev != "" && drv == "" {
		if err := host.WriteString(fsys, probePath, addr); err != nil {
			return err
		}
		if drv, err = driverOf(fsys, addr); err != nil {
			return err
		}
	}
	if drv != prev {
		return fmt.Errorf("%s is bound to %q after drivers_probe, not %q as before", addr, drv, prev)
	}
	return nil
}

// Remove implements backend.Backend: it gives the functions of a GPU gpuvm
// passed through back to the drivers they had.
func (b *Backend) Remove(ctx context.Context, req backend.RemoveRequest) error {
	env, err := b.state.Get()
	if err != nil {
		return err
	}
	id := req.ID
	if id == "" {
		id = req.GPU
	}
	if id == "" {
		return backend.Errorf(backend.CodeInvalid, "", "remove: no device ID (the GPU address) given")
	}
	addr, err := host.ValidateAddress(id)
	if err != nil {
		return backend.Errorf(backend.CodeInvalid, "", "remove: a passthrough device ID is its GPU's address: %v", err)
	}
	if req.GPU != "" {
		if g, err := host.ValidateAddress(req.GPU); err != nil || g != addr {
			return backend.Errorf(backend.CodeInvalid, addr, "remove: device %s is GPU %s itself, not on GPU %s", addr, addr, req.GPU)
		}
	}
	unlock, err := env.Lock(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	e, ok, err := env.Ledger.Get(addr)
	if err != nil {
		return backend.Errorf(backend.CodeInternal, addr, "%v", err)
	}
	if !ok {
		drv, err := driverOf(env.SysFS, addr)
		if err != nil {
			return backend.Errorf(backend.CodeHost, addr, "%v", err)
		}
		if drv == vfioPCI {
			return backend.Errorf(backend.CodeConflict, addr, "bound to vfio-pci but not created by gpuvm; left alone")
		}
		return nil // removed already, or never made
	}
	if err := env.Owns(e, req.OfInstallation); err != nil {
		return err
	}
	order := []string{e.Device.GPU}
	var rest []string
	for f := range e.Functions {
		if f != e.Device.GPU {
			rest = append(rest, f)
		}
	}
	slices.Sort(rest)
	order = append(order, rest...)
	for _, f := range order {
		if err := abandoned(ctx, "remove"); err != nil {
			return err
		}
		if err := giveBack(env.SysFS, f, e.Functions[f]); err != nil {
			return kit.HostError(addr, fmt.Sprintf("give %s back to %s", f, driverName(e.Functions[f])), err)
		}
	}
	if err := env.Ledger.Delete(addr); err != nil {
		return backend.Errorf(backend.CodeInternal, addr, "forget passthrough: %v", err)
	}
	b.log.Info("gave GPU back to the host", "gpu", addr, "functions", order, "vm", e.Device.VMUUID)
	return nil
}

func driverName(d string) string {
	if d == "" {
		return "no driver"
	}
	return d
}

// abandoned returns an error when ctx is done: an *backend.Error
// (unavailable) that also matches ctx's error with errors.Is.
func abandoned(ctx context.Context, what string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%w: %w", backend.Errorf(backend.CodeUnavailable, "", "%s abandoned", what), err)
	}
	return nil
}

// asBackendError returns err as an *backend.Error, with code when it carries
// none.
func asBackendError(code backend.Code, gpu string, err error) error {
	var e *backend.Error
	if errors.As(err, &e) {
		return err
	}
	return backend.Errorf(code, gpu, "%v", err)
}
