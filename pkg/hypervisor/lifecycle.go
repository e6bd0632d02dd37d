package hypervisor

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"libvirt.org/go/libvirt"

	"github.com/gpuvm/gpuvm/pkg/hypervisor/domain"
)

// State is a domain's state, in gpuvm's words.
type State string

// Domain states.
const (
	StateNone        State = "nostate"
	StateRunning     State = "running"
	StateBlocked     State = "blocked"
	StatePaused      State = "paused"
	StateShuttingOff State = "shutting-down"
	StateShutoff     State = "shutoff"
	StateCrashed     State = "crashed"
	StateSuspended   State = "pmsuspended"
)

// Info describes one of gpuvm's domains.
type Info struct {
	Name     string
	UUID     string
	State    State
	Reason   string // why it is in that state, when libvirt says
	Metadata domain.Metadata
	// SeedSkipped, from CreateVM only, says why the request's cloud-init
	// seed, made and checked, was not attached: the driver cannot store
	// volume contents (ErrNoUpload). Empty otherwise.
	SeedSkipped string
}

// Active reports whether the domain has a running QEMU (running, paused,
// shutting down...).
func (i Info) Active() bool {
	return i.State != StateShutoff && i.State != StateNone && i.State != StateCrashed
}

func stateOf(s libvirt.DomainState, reason int) (State, string) {
	switch s {
	case libvirt.DOMAIN_RUNNING:
		return StateRunning, ""
	case libvirt.DOMAIN_BLOCKED:
		return StateBlocked, ""
	case libvirt.DOMAIN_PAUSED:
		return StatePaused, pausedReason(libvirt.DomainPausedReason(reason))
	case libvirt.DOMAIN_SHUTDOWN:
		return StateShuttingOff, ""
	case libvirt.DOMAIN_SHUTOFF:
		return StateShutoff, shutoffReason(libvirt.DomainShutoffReason(reason))
	case libvirt.DOMAIN_CRASHED:
		return StateCrashed, ""
	case libvirt.DOMAIN_PMSUSPENDED:
		return StateSuspended, ""
	}
	return StateNone, ""
}

func pausedReason(r libvirt.DomainPausedReason) string {
	switch r {
	case libvirt.DOMAIN_PAUSED_USER:
		return "paused by a user"
	case libvirt.DOMAIN_PAUSED_IOERROR:
		return "disk I/O error"
	case libvirt.DOMAIN_PAUSED_WATCHDOG:
		return "watchdog"
	case libvirt.DOMAIN_PAUSED_SHUTTING_DOWN:
		return "shutting down"
	case libvirt.DOMAIN_PAUSED_CRASHED:
		return "guest crashed"
	case libvirt.DOMAIN_PAUSED_STARTING_UP:
		return "starting up"
	case libvirt.DOMAIN_PAUSED_UNKNOWN:
		// QEMU stops a guest this way on a KVM internal error too.
		return "unknown reason (QEMU stopped the guest; a KVM internal error does this)"
	}
	return fmt.Sprintf("reason %d", r)
}

func shutoffReason(r libvirt.DomainShutoffReason) string {
	switch r {
	case libvirt.DOMAIN_SHUTOFF_SHUTDOWN:
		return "shut down by the guest"
	case libvirt.DOMAIN_SHUTOFF_DESTROYED:
		return "destroyed"
	case libvirt.DOMAIN_SHUTOFF_CRASHED:
		return "crashed"
	case libvirt.DOMAIN_SHUTOFF_FAILED:
		return "failed to start"
	case libvirt.DOMAIN_SHUTOFF_DAEMON:
		return "stopped by libvirtd"
	}
	return ""
}

// handle is a looked-up gpuvm domain; Free it.
type handle struct {
	d    *libvirt.Domain
	name string
	uuid string
	meta domain.Metadata
}

func (h *handle) Free() {
	if h != nil && h.d != nil {
		_ = h.d.Free()
	}
}

// lookup finds the domain with uuid and checks it is gpuvm's. Errors name
// the VM as well as they can.
func (c *Conn) lookup(ctx context.Context, uuid, op string) (*handle, error) {
	if err := domain.ValidUUID(uuid); err != nil {
		return nil, vmError(uuid, op, err)
	}
	d, err := call(ctx, c, "lookup domain", 0, func() (*libvirt.Domain, error) {
		return c.lv.LookupDomainByUUIDString(uuid)
	}, func(d *libvirt.Domain) { _ = d.Free() })
	if err != nil {
		return nil, vmError(uuid, op, err)
	}
	h := &handle{d: d, uuid: strings.ToLower(uuid)}
	name, err := call(ctx, c, "domain name", 0, d.GetName, nil)
	if err != nil {
		h.Free()
		return nil, vmError(uuid, op, err)
	}
	h.name = name
	meta, err := c.metadata(ctx, d)
	if err != nil {
		h.Free()
		return nil, vmError(name, op, err)
	}
	h.meta = meta
	c.remember(h.uuid, meta)
	return h, nil
}

// metadata reads gpuvm's element from a domain; ErrNotGpuvm when absent.
func (c *Conn) metadata(ctx context.Context, d *libvirt.Domain) (domain.Metadata, error) {
	s, err := call(ctx, c, "domain metadata", 0, func() (string, error) {
		return d.GetMetadata(libvirt.DOMAIN_METADATA_ELEMENT, domain.Namespace, libvirt.DOMAIN_AFFECT_CURRENT)
	}, nil)
	if isCode(err, libvirt.ERR_NO_DOMAIN_METADATA) {
		return domain.Metadata{}, ErrNotGpuvm
	}
	if err != nil {
		return domain.Metadata{}, clean(err)
	}
	return domain.ParseMetadata(s)
}

func (c *Conn) info(ctx context.Context, h *handle) (Info, error) {
	type st struct {
		s libvirt.DomainState
		r int
	}
	s, err := call(ctx, c, "domain state", 0, func() (st, error) {
		s, r, err := h.d.GetState()
		return st{s, r}, err
	}, nil)
	if err != nil {
		return Info{}, vmError(h.name, "state", err)
	}
	state, reason := stateOf(s.s, s.r)
	return Info{Name: h.name, UUID: h.uuid, State: state, Reason: reason, Metadata: h.meta}, nil
}

// Define defines (or redefines) the domain of spec, persistently, without
// starting it. It refuses to redefine a domain that is not gpuvm's, and a
// spec without a DomainType (take it from Accel: KVM is never assumed).
func (c *Conn) Define(ctx context.Context, spec domain.Spec) (Info, error) {
	vm := spec.Name
	if vm == "" {
		vm = spec.UUID
	}
	xml, err := domain.XML(spec)
	if err != nil {
		return Info{}, vmError(vm, "build domain XML", err)
	}
	info, err := c.defineXML(ctx, spec, xml)
	if err != nil {
		return info, err
	}
	// Empty ports for data disks plugged in while it runs, added once
	// libvirt has given every device its address (datadisks.go). Without
	// them the VM runs as well; a plug into it is refused then.
	if err := c.redefine(ctx, spec.UUID, "add hot-plug ports", "PCIe ports", domain.EnsureHotplugPorts, func(name string) {
		c.log.Debug("domain given empty PCIe root ports for data disks", "vm", name, "ports", domain.HotplugPorts)
	}); err != nil {
		c.log.Warn("domain defined without empty PCIe root ports: data disks cannot be plugged into it while it runs", "vm", vm, "err", err)
	}
	return info, nil
}

// defineXML defines xml, the domain XML built for spec (Define,
// DefineWindowsInstall).
func (c *Conn) defineXML(ctx context.Context, spec domain.Spec, xml string) (Info, error) {
	vm := spec.Name
	if vm == "" {
		vm = spec.UUID
	}
	// Never overwrite someone else's domain that happens to share the UUID.
	if h, err := c.lookup(ctx, spec.UUID, "define"); err == nil {
		h.Free()
	} else if errors.Is(err, ErrNotGpuvm) {
		return Info{}, vmError(vm, "define", fmt.Errorf("UUID %s belongs to a domain gpuvm does not manage: %w", spec.UUID, ErrNotGpuvm))
	} else if !IsNotFound(err) {
		return Info{}, err
	}
	d, err := call(ctx, c, "define domain", 0, func() (*libvirt.Domain, error) {
		d, err := c.lv.DomainDefineXMLFlags(xml, libvirt.DOMAIN_DEFINE_VALIDATE)
		if unsupportedFlags(err) {
			d, err = c.lv.DomainDefineXML(xml)
		}
		return d, err
	}, func(d *libvirt.Domain) { _ = d.Free() })
	if err != nil {
		return Info{}, vmError(vm, "define", err)
	}
	h := &handle{d: d, name: spec.Name, uuid: strings.ToLower(spec.UUID), meta: spec.Metadata}
	defer h.Free()
	c.remember(h.uuid, spec.Metadata)
	c.log.Info("domain defined", "vm", spec.Name, "uuid", h.uuid, "type", spec.DomainType, "hostdevs", len(spec.Hostdevs))
	return c.info(ctx, h)
}

// unsupportedFlags reports whether libvirt refused a call's flags (older
// libvirt, or the test driver).
func unsupportedFlags(err error) bool {
	return isCode(err, libvirt.ERR_INVALID_ARG, libvirt.ERR_NO_SUPPORT) && strings.Contains(strings.ToLower(errMessage(err)), "flag")
}

func errMessage(err error) string {
	var lv libvirt.Error
	if errors.As(err, &lv) {
		return lv.Message
	}
	return err.Error()
}

// Lookup describes the gpuvm domain with uuid.
func (c *Conn) Lookup(ctx context.Context, uuid string) (Info, error) {
	h, err := c.lookup(ctx, uuid, "lookup")
	if err != nil {
		return Info{}, err
	}
	defer h.Free()
	return c.info(ctx, h)
}

// LookupByName describes the gpuvm domain called name.
func (c *Conn) LookupByName(ctx context.Context, name string) (Info, error) {
	d, err := c.lookupName(ctx, name)
	if err != nil {
		return Info{}, vmError(name, "lookup", err)
	}
	defer d.Free()
	uuid, err := call(ctx, c, "domain uuid", 0, d.GetUUIDString, nil)
	if err != nil {
		return Info{}, vmError(name, "lookup", err)
	}
	return c.Lookup(ctx, uuid)
}

func (c *Conn) lookupName(ctx context.Context, name string) (*libvirt.Domain, error) {
	return call(ctx, c, "lookup domain", 0, func() (*libvirt.Domain, error) {
		return c.lv.LookupDomainByName(name)
	}, func(d *libvirt.Domain) { _ = d.Free() })
}

// State is the state of the gpuvm domain with uuid.
func (c *Conn) State(ctx context.Context, uuid string) (State, error) {
	i, err := c.Lookup(ctx, uuid)
	return i.State, err
}

// List describes every domain that carries gpuvm's metadata; others are
// skipped.
func (c *Conn) List(ctx context.Context) ([]Info, error) {
	doms, err := call(ctx, c, "list domains", 0, func() ([]libvirt.Domain, error) {
		return c.lv.ListAllDomains(0)
	}, func(ds []libvirt.Domain) {
		for i := range ds {
			_ = ds[i].Free()
		}
	})
	if err != nil {
		return nil, fmt.Errorf("libvirt %s: list domains: %w", c.uri, clean(err))
	}
	defer func() {
		for i := range doms {
			_ = doms[i].Free()
		}
	}()
	var out []Info
	for i := range doms {
		d := &doms[i]
		meta, err := c.metadata(ctx, d)
		if errors.Is(err, ErrNotGpuvm) || IsNotFound(err) {
			continue // not ours, or gone since the listing
		}
		name, nerr := call(ctx, c, "domain name", 0, d.GetName, nil)
		if nerr != nil {
			if IsNotFound(nerr) {
				continue
			}
			return nil, fmt.Errorf("libvirt %s: list domains: %w", c.uri, clean(nerr))
		}
		if err != nil {
			return nil, vmError(name, "read metadata", err)
		}
		uuid, err := call(ctx, c, "domain uuid", 0, d.GetUUIDString, nil)
		if err != nil {
			return nil, vmError(name, "list", err)
		}
		c.remember(uuid, meta) // its undefine event is then known for gpuvm's
		info, err := c.info(ctx, &handle{d: d, name: name, uuid: uuid, meta: meta})
		if IsNotFound(err) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, info)
	}
	return out, nil
}

// Start starts the defined gpuvm domain with uuid. Starting a running
// domain is not an error.
func (c *Conn) Start(ctx context.Context, uuid string) error {
	h, err := c.lookup(ctx, uuid, "start")
	if err != nil {
		return err
	}
	defer h.Free()
	info, err := c.info(ctx, h)
	if err != nil {
		return err
	}
	if info.State == StateRunning {
		return nil
	}
	start := time.Now()
	err = c.doTimeout(ctx, "start domain", c.startTimeout, h.d.Create)
	if err != nil {
		return vmError(h.name, "start", err)
	}
	c.log.Info("domain started", "vm", h.name, "uuid", h.uuid, "took", time.Since(start).Round(time.Millisecond))
	return nil
}

// doTimeout is do with its own timeout.
func (c *Conn) doTimeout(ctx context.Context, op string, timeout time.Duration, f func() error) error {
	_, err := call(ctx, c, op, timeout, func() (struct{}, error) { return struct{}{}, f() }, nil)
	return err
}

// Destroy stops the gpuvm domain with uuid at once, like pulling the plug.
// Destroying a stopped or missing domain is not an error.
func (c *Conn) Destroy(ctx context.Context, uuid string) error {
	h, err := c.lookup(ctx, uuid, "destroy")
	if IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	defer h.Free()
	return c.destroy(ctx, h)
}

func (c *Conn) destroy(ctx context.Context, h *handle) error {
	err := c.do(ctx, "destroy domain", h.d.Destroy)
	if isCode(err, libvirt.ERR_OPERATION_INVALID) || IsNotFound(err) {
		return nil // not running
	}
	if err != nil {
		return vmError(h.name, "destroy", err)
	}
	c.log.Info("domain destroyed", "vm", h.name, "uuid", h.uuid)
	return nil
}

// ForceOff stops the gpuvm domain with uuid at once, like pulling the plug:
// the same as Destroy (libvirt's name for it), under the name people use
// for the button. Forcing off a stopped or missing domain is not an error.
func (c *Conn) ForceOff(ctx context.Context, uuid string) error { return c.Destroy(ctx, uuid) }

// Reboot asks the guest to restart, the way libvirt chooses by default
// (DOMAIN_REBOOT_DEFAULT; for QEMU: through the guest agent when one is
// connected, else an ACPI power-button press after which libvirt starts
// the guest again), and returns without waiting: like a power button, the
// request can be ignored by the guest.
// A stopped domain gives an error that wraps ErrNotRunning; a missing one,
// IsNotFound.
func (c *Conn) Reboot(ctx context.Context, uuid string) error {
	h, err := c.lookup(ctx, uuid, "reboot")
	if err != nil {
		return err
	}
	defer h.Free()
	info, err := c.info(ctx, h)
	if err != nil {
		return err
	}
	if !info.Active() {
		return vmError(h.name, "reboot", fmt.Errorf("%w (it is %s)", ErrNotRunning, info.State))
	}
	err = c.do(ctx, "reboot domain", func() error { return h.d.Reboot(libvirt.DOMAIN_REBOOT_DEFAULT) })
	if isCode(err, libvirt.ERR_OPERATION_INVALID) {
		if i, ierr := c.info(ctx, h); ierr == nil && !i.Active() {
			return vmError(h.name, "reboot", fmt.Errorf("%w (it stopped meanwhile)", ErrNotRunning))
		}
	}
	if err != nil {
		return vmError(h.name, "reboot", err)
	}
	c.log.Info("reboot requested", "vm", h.name, "uuid", h.uuid)
	return nil
}

// Shutdown asks the guest to power off (ACPI power button) and waits up to
// timeout for it to do so, then destroys the domain. graceful reports
// whether the guest went by itself. A stopped or missing domain is not an
// error.
func (c *Conn) Shutdown(ctx context.Context, uuid string, timeout time.Duration) (graceful bool, err error) {
	h, err := c.lookup(ctx, uuid, "shutdown")
	if IsNotFound(err) {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	defer h.Free()
	info, err := c.info(ctx, h)
	if err != nil {
		return false, err
	}
	if !info.Active() {
		return true, nil
	}
	err = c.do(ctx, "shutdown domain", func() error {
		err := h.d.ShutdownFlags(libvirt.DOMAIN_SHUTDOWN_ACPI_POWER_BTN)
		if unsupportedFlags(err) {
			err = h.d.Shutdown()
		}
		return err
	})
	switch {
	case isCode(err, libvirt.ERR_OPERATION_INVALID) || IsNotFound(err):
		return true, nil // stopped meanwhile
	case err != nil:
		c.log.Warn("ACPI shutdown refused; destroying", "vm", h.name, "uuid", h.uuid, "err", clean(err))
	default:
		c.log.Info("ACPI shutdown requested", "vm", h.name, "uuid", h.uuid, "timeout", timeout)
		deadline := time.Now().Add(timeout)
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			i, err := c.info(ctx, h)
			if IsNotFound(err) || err == nil && !i.Active() {
				c.log.Info("domain shut down", "vm", h.name, "uuid", h.uuid)
				return true, nil
			}
			if err != nil {
				return false, err
			}
			if time.Now().After(deadline) {
				break
			}
			select {
			case <-ctx.Done():
				return false, vmError(h.name, "shutdown", ctx.Err())
			case <-tick.C:
			}
		}
		c.log.Warn("guest did not power off in time; destroying", "vm", h.name, "uuid", h.uuid, "timeout", timeout)
	}
	return false, c.destroy(ctx, h)
}

// Undefine removes the definition of the stopped gpuvm domain with uuid,
// with its UEFI variables and TPM state. Undefining a missing domain is not
// an error; a running one is refused.
func (c *Conn) Undefine(ctx context.Context, uuid string) error {
	h, err := c.lookup(ctx, uuid, "undefine")
	if IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	defer h.Free()
	info, err := c.info(ctx, h)
	if err != nil {
		return err
	}
	if info.Active() {
		return vmError(h.name, "undefine", fmt.Errorf("the domain is %s: shut it down first", info.State))
	}
	err = c.do(ctx, "undefine domain", func() error {
		// Newest flags first; older libvirt (no TPM flag before 8.9) and
		// the test driver accept fewer.
		for _, flags := range []libvirt.DomainUndefineFlagsValues{
			libvirt.DOMAIN_UNDEFINE_NVRAM | libvirt.DOMAIN_UNDEFINE_TPM | libvirt.DOMAIN_UNDEFINE_MANAGED_SAVE |
				libvirt.DOMAIN_UNDEFINE_SNAPSHOTS_METADATA | libvirt.DOMAIN_UNDEFINE_CHECKPOINTS_METADATA,
			libvirt.DOMAIN_UNDEFINE_NVRAM | libvirt.DOMAIN_UNDEFINE_MANAGED_SAVE | libvirt.DOMAIN_UNDEFINE_SNAPSHOTS_METADATA,
			0,
		} {
			err := h.d.UndefineFlags(flags)
			if !unsupportedFlags(err) {
				return err
			}
		}
		return h.d.Undefine()
	})
	if IsNotFound(err) {
		return nil
	}
	if err != nil {
		return vmError(h.name, "undefine", err)
	}
	c.log.Info("domain undefined", "vm", h.name, "uuid", h.uuid)
	return nil
}

// Console says how to reach the display of the running gpuvm domain with
// uuid, read back from its live XML (ports are chosen at start).
func (c *Conn) Console(ctx context.Context, uuid string) (domain.Console, error) {
	h, err := c.lookup(ctx, uuid, "console")
	if err != nil {
		return domain.Console{}, err
	}
	defer h.Free()
	xml, err := call(ctx, c, "domain XML", 0, func() (string, error) {
		return h.d.GetXMLDesc(libvirt.DOMAIN_XML_SECURE)
	}, nil)
	if err != nil {
		return domain.Console{}, vmError(h.name, "console", err)
	}
	con, err := domain.ConsoleFromXML(xml)
	if err != nil {
		return domain.Console{}, vmError(h.name, "console", err)
	}
	return con, nil
}

// XML is the gpuvm domain's current XML; secure adds passwords.
func (c *Conn) XML(ctx context.Context, uuid string, secure bool) (string, error) {
	h, err := c.lookup(ctx, uuid, "read XML")
	if err != nil {
		return "", err
	}
	defer h.Free()
	var flags libvirt.DomainXMLFlags
	if secure {
		flags = libvirt.DOMAIN_XML_SECURE
	}
	xml, err := call(ctx, c, "domain XML", 0, func() (string, error) { return h.d.GetXMLDesc(flags) }, nil)
	if err != nil {
		return "", vmError(h.name, "read XML", err)
	}
	return xml, nil
}

// DomainID is libvirt's id of the running domain with uuid (the number in
// the names of what libvirt keeps for it while it runs); 0 when it does
// not run.
func (c *Conn) DomainID(ctx context.Context, uuid string) (int, error) {
	h, err := c.lookup(ctx, uuid, "domain id")
	if err != nil {
		return 0, err
	}
	defer h.Free()
	if active, err := call(ctx, c, "domain active", 0, h.d.IsActive, nil); err != nil || !active {
		return 0, err
	}
	id, err := call(ctx, c, "domain id", 0, h.d.GetID, nil)
	if err != nil {
		return 0, vmError(h.name, "domain id", err)
	}
	return int(id), nil
}
