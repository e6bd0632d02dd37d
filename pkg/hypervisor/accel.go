package hypervisor

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"libvirt.org/go/libvirt"
	"libvirt.org/go/libvirtxml"

	"github.com/gpuvm/gpuvm/pkg/hypervisor/domain"
)

// Accel says how QEMU runs gpuvm's guests on this host.
type Accel struct {
	// Type is the domain type gpuvm uses: kvm, or qemu (software
	// emulation, many times slower).
	Type domain.Type
	// Emulated is true when guests run under software emulation; show it
	// to people, with Reason.
	Emulated bool
	// Reason says why KVM is not used; empty when it is.
	Reason string
	// Probed is true when a guest kernel was booted under KVM to decide.
	Probed bool
}

// probeMarker is what the probe kernel prints once it runs decompressed.
const probeMarker = "Linux version"

// Accel decides, once per connection, whether guests run with KVM: only when
// libvirt's domain capabilities offer KVM and a probe guest boots under it
// (KVM can be present and still unusable, e.g. nested, where the guest
// stops right after the kernel decompresses). Otherwise it falls back to
// software emulation, with a warning, never silently.
func (c *Conn) Accel(ctx context.Context) (Accel, error) {
	c.accelMu.Lock()
	defer c.accelMu.Unlock()
	if c.accel != nil {
		return *c.accel, nil
	}
	a, err := c.detectAccel(ctx)
	if err != nil {
		return Accel{}, err
	}
	if a.Emulated {
		c.log.Warn("KVM is not usable: guests run under software emulation (slow)", "reason", a.Reason)
	} else {
		c.log.Info("guests run with KVM", "probed", a.Probed)
	}
	c.accel = &a
	return a, nil
}

func (c *Conn) detectAccel(ctx context.Context) (Accel, error) {
	if c.forcedType != "" {
		a := Accel{Type: c.forcedType}
		if c.forcedType != domain.TypeKVM {
			a.Emulated, a.Reason = true, "domain type set to "+string(c.forcedType)+" by configuration"
		}
		return a, nil
	}
	fallback := func(format string, args ...any) Accel {
		return Accel{Type: domain.TypeQEMU, Emulated: true, Reason: fmt.Sprintf(format, args...)}
	}
	caps, err := call(ctx, c, "domain capabilities", 0, func() (string, error) {
		return c.lv.GetDomainCapabilities("", "x86_64", "q35", "kvm", 0)
	}, nil)
	if err != nil {
		if ctx.Err() != nil {
			return Accel{}, fmt.Errorf("libvirt %s: domain capabilities: %w", c.uri, err)
		}
		return fallback("libvirt offers no KVM: %v", clean(err)), nil
	}
	var dc libvirtxml.DomainCaps
	if err := dc.Unmarshal(caps); err != nil {
		return fallback("libvirt's KVM domain capabilities are unreadable: %v", err), nil
	}
	if dc.Domain != "kvm" {
		return fallback("libvirt's domain capabilities offer %q, not kvm", dc.Domain), nil
	}
	kernel := c.probeKernel
	if kernel == "" {
		kernel = hostKernel()
	}
	if kernel == "" {
		return fallback("KVM is offered but could not be probed: no kernel to boot (set the probe kernel)"), nil
	}
	if err := c.probeKVM(ctx, kernel); err != nil {
		if ctx.Err() != nil {
			return Accel{}, err
		}
		a := fallback("a guest kernel does not boot under KVM: %v", err)
		a.Probed = true
		return a, nil
	}
	return Accel{Type: domain.TypeKVM, Probed: true}, nil
}

// hostKernel finds the host's own kernel image, a good probe: any Linux
// kernel prints its banner once decompressed, then panics for want of a root
// file system.
func hostKernel() string {
	rel, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	candidates := []string{"/boot/vmlinuz", "/vmlinuz"}
	if r := strings.TrimSpace(string(rel)); r != "" {
		candidates = append([]string{"/boot/vmlinuz-" + r}, candidates...)
	}
	for _, k := range candidates {
		if st, err := os.Stat(k); err == nil && st.Mode().IsRegular() && st.Size() > 0 {
			return k
		}
	}
	return ""
}

func randomUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// probeKVM boots kernel in a transient KVM domain (destroyed with the
// connection if gpuvm dies meanwhile) and waits for its banner on the serial
// console.
func (c *Conn) probeKVM(ctx context.Context, kernel string) error {
	uuid := randomUUID()
	name := "gpuvm-kvm-probe-" + uuid[:8]
	dir := c.probeDir
	if dir == "" {
		dir = os.TempDir()
	}
	logPath := filepath.Join(dir, name+".serial.log")
	defer os.Remove(logPath)

	d, err := domain.Build(domain.Spec{
		Name: name, UUID: uuid, Title: "gpuvm KVM probe (transient)",
		VCPUs: 1, MemoryBytes: 256 << 20, DomainType: domain.TypeKVM,
		Kernel: kernel, Cmdline: "console=ttyS0 panic=-1 loglevel=6",
		SerialLog: logPath,
		Metadata:  domain.Metadata{VMID: "kvm-probe"},
	})
	if err != nil {
		return err
	}
	// Whatever happens in the guest, it ends the domain.
	d.OnReboot, d.OnCrash, d.OnPoweroff = "destroy", "destroy", "destroy"
	doc, err := d.Marshal()
	if err != nil {
		return err
	}
	timeout := c.probeTimeout
	start := time.Now()
	dom, err := call(ctx, c, "start KVM probe", c.startTimeout, func() (*libvirt.Domain, error) {
		return c.lv.DomainCreateXML(doc, libvirt.DOMAIN_START_AUTODESTROY)
	}, func(d *libvirt.Domain) { _ = d.Destroy(); _ = d.Free() })
	if err != nil {
		return fmt.Errorf("starting a KVM guest: %w", clean(err))
	}
	defer func() {
		// A fresh context: the probe domain must go even when ctx is done.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.callTimeout)
		defer cancel()
		_ = c.do(cctx, "destroy KVM probe", dom.Destroy)
		_ = dom.Free()
	}()
	c.log.Debug("KVM probe started", "domain", name, "kernel", kernel, "took", time.Since(start))

	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	printed := func() bool {
		b, _ := os.ReadFile(logPath)
		return bytes.Contains(b, []byte(probeMarker))
	}
	for {
		if printed() {
			c.log.Debug("KVM probe booted", "took", time.Since(start).Round(time.Millisecond))
			return nil
		}
		type st struct {
			s libvirt.DomainState
			r int
		}
		s, err := call(ctx, c, "KVM probe state", 0, func() (st, error) {
			s, r, err := dom.GetState()
			return st{s, r}, err
		}, nil)
		if err != nil && !IsNotFound(err) {
			if ctx.Err() != nil {
				return err
			}
			return fmt.Errorf("probe state: %w", clean(err))
		}
		if err != nil || s.s == libvirt.DOMAIN_SHUTOFF || s.s == libvirt.DOMAIN_CRASHED {
			if printed() {
				return nil
			}
			return fmt.Errorf("the probe guest stopped before its kernel printed anything")
		}
		if s.s == libvirt.DOMAIN_PAUSED {
			state, reason := stateOf(s.s, s.r)
			return fmt.Errorf("the probe guest was %s by QEMU (%s) before its kernel printed anything", state, reason)
		}
		if time.Since(start) > timeout {
			return fmt.Errorf("the probe guest's kernel printed nothing in %v", timeout)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("KVM probe: %w", ctx.Err())
		case <-tick.C:
		}
	}
}
