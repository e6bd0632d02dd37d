package doctor

import (
	"bytes"
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"net/url"
	"os/exec"
	"path"
	"sort"
	"strconv"
	"strings"

	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/gpu"
	"github.com/gpuvm/gpuvm/pkg/host"
)

// Paths outside sysfs that the checks read.
const (
	SRIOVManage = "/usr/lib/nvidia/sriov-manage"
	devKVM      = "/dev/kvm"
	nvidiactl   = "/dev/nvidiactl"
)

var nvmlLibs = []string{"/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1", "/usr/lib64/libnvidia-ml.so.1", "/usr/lib/libnvidia-ml.so.1"}

const fixIOMMU = `enable VT-d (Intel) or AMD-Vi/IOMMU (AMD) in the BIOS, add intel_iommu=on iommu=pt (Intel) or amd_iommu=on iommu=pt (AMD) to GRUB_CMDLINE_LINUX_DEFAULT in /etc/default/grub, then: update-grub && reboot`

// modeOf is the configured mode of each GPU, by address.
type modeSet map[string]gpu.Mode

func configuredModes(cfg *config.Config, gpus []host.GPU) modeSet {
	m := modeSet{}
	for _, g := range gpus {
		m[g.Address] = cfg.Server.Host.Settings(g.Address, g.Model).Mode
	}
	return m
}

// any reports whether some GPU is in one of modes.
func (m modeSet) any(modes ...gpu.Mode) bool {
	for _, v := range m {
		for _, w := range modes {
			if v == w {
				return true
			}
		}
	}
	return false
}

func checkIOMMU(e Env) Finding {
	f := Finding{Check: "iommu"}
	cmdline := ""
	if b, err := e.ReadFile("/proc/cmdline"); err == nil {
		cmdline = strings.TrimSpace(string(b))
	}
	var flags []string
	for _, w := range strings.Fields(cmdline) {
		if strings.HasPrefix(w, "intel_iommu=") || strings.HasPrefix(w, "amd_iommu=") || strings.HasPrefix(w, "iommu=") {
			flags = append(flags, w)
		}
	}
	groups, _ := e.Sys.ReadDir("kernel/iommu_groups")
	flagText := "no IOMMU flags on the kernel command line"
	if len(flags) > 0 {
		flagText = "kernel command line: " + strings.Join(flags, " ")
	}
	for _, fl := range flags {
		if fl == "intel_iommu=off" || fl == "amd_iommu=off" || fl == "iommu=off" {
			f.Severity, f.Seen, f.Fix = Error, "the IOMMU is switched off ("+fl+")", "remove "+fl+" from /etc/default/grub; "+fixIOMMU
			return f
		}
	}
	if len(groups) == 0 {
		f.Severity, f.Seen, f.Fix = Error, "no IOMMU groups in /sys/kernel/iommu_groups ("+flagText+")", fixIOMMU
		return f
	}
	f.Severity, f.Seen = OK, fmt.Sprintf("%d IOMMU groups (%s)", len(groups), flagText)
	return f
}

func checkVFIO(e Env, modes modeSet) Finding {
	f := Finding{Check: "vfio"}
	if e.Simulated != "" {
		f.Severity, f.Seen = Skipped, "the simulator has no /sys/module"
		return f
	}
	var missing []string
	for _, m := range []string{"vfio", "vfio_pci"} {
		if !e.Sys.Exists(path.Join("module", m)) {
			missing = append(missing, m)
		}
	}
	if len(missing) == 0 {
		f.Severity, f.Seen = OK, "vfio and vfio_pci loaded"
		return f
	}
	f.Severity = Warning
	if modes.any(gpu.ModePassthrough, gpu.ModeAuto) {
		f.Severity = Error
	}
	f.Seen = "not loaded: " + strings.Join(missing, ", ")
	f.Fix = "modprobe vfio-pci && echo vfio-pci > /etc/modules-load.d/vfio-pci.conf"
	return f
}

func checkDriver(e Env, gpus []host.GPU, gerr error, modes modeSet) []Finding {
	var out []Finding
	if len(gpus) == 0 {
		seen := "no NVIDIA GPU in /sys/bus/pci/devices"
		if gerr != nil {
			seen += " (" + gerr.Error() + ")"
		}
		return []Finding{{Check: "gpus", Severity: Warning, Seen: seen, Fix: "check that the card is seated and seen: lspci -nn -d 10de:"}}
	}
	names := make([]string, 0, len(gpus))
	for _, g := range gpus {
		names = append(names, g.Address+" "+g.Model.Name)
	}
	out = append(out, Finding{Check: "gpus", Severity: OK, Seen: fmt.Sprintf("%d NVIDIA GPU(s): %s", len(gpus), strings.Join(names, ", "))})

	needDriver := modes.any(gpu.ModeVGPU, gpu.ModeMIG, gpu.ModeAuto, gpu.ModeIdle)
	needVGPU := modes.any(gpu.ModeVGPU, gpu.ModeMIG)
	drv := Finding{Check: "nvidia-driver"}
	version, _ := host.ReadString(e.Sys, "module/nvidia/version")
	switch {
	case e.Simulated != "":
		drv.Severity, drv.Seen = OK, "the simulator's NVIDIA vGPU host driver"
	case !e.Sys.Exists("module/nvidia") && needDriver:
		drv.Severity, drv.Seen = Error, "the nvidia kernel module is not loaded"
		drv.Fix = "install NVIDIA's vGPU host driver (the \"Linux KVM\" package of NVIDIA vGPU software; see docs/install.md), then reboot"
	case !e.Sys.Exists("module/nvidia"):
		drv.Severity, drv.Seen = OK, "not loaded; not needed: every GPU is for passthrough"
	case !e.Sys.Exists("module/nvidia_vgpu_vfio") && needVGPU:
		drv.Severity = Error
		drv.Seen = "nvidia " + orUnknown(version) + " is loaded but is not the vGPU manager (no nvidia_vgpu_vfio module): vGPU and MIG-backed vGPU need the vGPU host driver"
		drv.Fix = "replace the driver with NVIDIA's vGPU host driver (\"Linux KVM\" package, same branch as the guests' drivers), then reboot"
	case e.Sys.Exists("module/nvidia_vgpu_vfio"):
		drv.Severity, drv.Seen = OK, "nvidia "+orUnknown(version)+", the vGPU manager (nvidia_vgpu_vfio loaded)"
	default:
		drv.Severity, drv.Seen = OK, "nvidia "+orUnknown(version)+" (not the vGPU manager; no GPU is configured for vGPU or MIG)"
	}
	out = append(out, drv)

	if needDriver || needVGPU {
		out = append(out, checkNVML(e))
	}
	needSRIOV := false
	for _, g := range gpus {
		if modes[g.Address] == gpu.ModeVGPU && (g.Model.Interface() == gpu.InterfaceVendorVFIO || g.Model.MdevOnVFs()) {
			needSRIOV = true
		}
	}
	if needSRIOV && e.Simulated == "" {
		f := Finding{Check: "sriov-manage", Severity: OK, Seen: SRIOVManage + " present"}
		if _, err := e.Stat(SRIOVManage); err != nil {
			f.Severity, f.Seen = Error, SRIOVManage+" is missing: the vGPU host driver installs it, and VFs are enabled with it"
			f.Fix = "install NVIDIA's vGPU host driver (it ships sriov-manage)"
		}
		out = append(out, f)
	}
	return out
}

func checkNVML(e Env) Finding {
	f := Finding{Check: "nvml"}
	if e.Simulated != "" {
		f.Severity, f.Seen = OK, "the simulator's NVML"
		return f
	}
	lib := ""
	for _, l := range nvmlLibs {
		if _, err := e.Stat(l); err == nil {
			lib = l
			break
		}
	}
	_, ctlErr := e.Stat(nvidiactl)
	switch {
	case lib == "":
		f.Severity, f.Seen = Error, "libnvidia-ml.so.1 not found: gpuvmd's backends cannot read the GPUs"
		f.Fix = "install the NVIDIA host driver with its libraries (NVML ships with it)"
	case ctlErr != nil:
		f.Severity, f.Seen = Error, lib+" present but "+nvidiactl+" is missing: the driver is not running"
		f.Fix = "modprobe nvidia (and check dmesg for NVRM errors)"
	default:
		f.Severity, f.Seen = OK, lib+" and "+nvidiactl+" present (gpuvm host inventory reads NVML through the backends)"
	}
	return f
}

func checkGPUs(ctx context.Context, e Env, gpus []host.GPU) []Finding {
	var out []Finding
	for _, g := range gpus {
		s := e.Config.Server.Host.Settings(g.Address, g.Model)
		out = append(out, checkGPU(ctx, e, g, s))
	}
	return out
}

func checkGPU(ctx context.Context, e Env, g host.GPU, s config.GPUSettings) Finding {
	f := Finding{Check: "gpu-mode", Subject: g.Address}
	a := g.Address
	switch s.Mode {
	case gpu.ModeVGPU:
		if !g.Model.VGPU {
			f.Severity, f.Seen = Error, fmt.Sprintf("configured for vgpu, but NVIDIA's vGPU software does not support the %s", g.Model.Name)
			f.Fix = fmt.Sprintf("set mode = \"passthrough\" in the host { gpu %q } block of /etc/gpuvm", a)
			return f
		}
		if g.Driver != "nvidia" {
			f.Severity, f.Seen = Error, fmt.Sprintf("configured for vgpu, but bound to %s, not nvidia", orNone(g.Driver))
			f.Fix = fmt.Sprintf("echo %s > /sys/bus/pci/devices/%s/driver/unbind; echo > /sys/bus/pci/devices/%s/driver_override; echo %s > /sys/bus/pci/drivers_probe", a, a, a, a)
			return f
		}
		viaVFs := g.Model.Interface() == gpu.InterfaceVendorVFIO || g.Model.MdevOnVFs()
		if viaVFs && g.NumVFs == 0 {
			f.Severity, f.Seen = Error, fmt.Sprintf("configured for vgpu, but its SR-IOV VFs are not enabled (sriov_numvfs 0 of %d)", g.TotalVFs)
			f.Fix = fmt.Sprintf("%s -e %s   (gpuvm admin host-prep does it at every boot)", SRIOVManage, a)
			return f
		}
		iface := host.DetectInterface(e.Sys, g.PCIDevice)
		if iface == gpu.InterfaceNone {
			f.Severity, f.Seen = Error, "configured for vgpu, but the driver offers no vGPU types on it (no mdev_supported_types, no nvidia/creatable_vgpu_types): the vGPU manager is not running"
			f.Fix = "systemctl restart nvidia-vgpu-mgr.service; journalctl -u nvidia-vgpu-mgr"
			return f
		}
		f.Severity = OK
		f.Seen = fmt.Sprintf("vgpu: %s interface", iface)
		if viaVFs {
			f.Seen += fmt.Sprintf(", %d of %d VFs enabled", g.NumVFs, g.TotalVFs)
		}
	case gpu.ModeMIG:
		if g.Model.MIG == nil {
			f.Severity, f.Seen = Error, fmt.Sprintf("configured for mig, but the %s has no MIG", g.Model.Name)
			f.Fix = fmt.Sprintf("set mode = \"vgpu\" or \"passthrough\" in the host { gpu %q } block of /etc/gpuvm", a)
			return f
		}
		if e.MIGMode == nil {
			f.Severity, f.Seen = Skipped, "configured for mig; MIG mode cannot be read here"
			return f
		}
		on, ok, why := e.MIGMode(ctx, a)
		switch {
		case !ok:
			f.Severity, f.Seen = Skipped, "configured for mig; MIG mode not read: "+why
		case !on:
			f.Severity, f.Seen = Error, "configured for mig, but MIG mode is off"
			f.Fix = fmt.Sprintf("gpuvm admin host-prep   (or: nvidia-smi -i %s -mig 1, while the GPU holds nothing; it may ask for a GPU reset)", a)
		default:
			f.Severity, f.Seen = OK, "mig: MIG mode on"
		}
	case gpu.ModePassthrough:
		members, notVFIO := passthroughGroup(e.Sys, g)
		switch {
		case len(notVFIO) > 0:
			f.Severity = Warning
			f.Seen = fmt.Sprintf("configured for passthrough; not on vfio-pci: %s (libvirt rebinds at VM start, which fails while the host driver holds the GPU)", strings.Join(notVFIO, ", "))
			f.Fix = "gpuvm admin host-prep   (binds the GPU and its functions to vfio-pci)"
		default:
			f.Severity, f.Seen = OK, "passthrough: on vfio-pci"
		}
		if others := foreignMembers(g, members); len(others) > 0 {
			f.Severity = Warning
			f.Seen += fmt.Sprintf("; its IOMMU group %s also holds %s, which go to the same VM", g.IOMMUGroup, strings.Join(others, ", "))
			if f.Fix == "" {
				f.Fix = "move the card to a slot with its own IOMMU group (or a board with ACS); see /sys/kernel/iommu_groups"
			}
		}
	default:
		f.Severity, f.Seen = OK, fmt.Sprintf("%s: gpuvmd picks the mode of an empty GPU", orAuto(s.Mode))
	}
	return f
}

// passthroughGroup returns the non-bridge devices of g's IOMMU group and
// those of them not bound to vfio-pci.
func passthroughGroup(fsys host.SysFS, g host.GPU) (members, notVFIO []string) {
	members = []string{g.Address}
	if g.IOMMUGroup != "" {
		if devs, err := host.IOMMUGroupDevices(fsys, g.IOMMUGroup); err == nil {
			members = devs
		}
	}
	var keep []string
	for _, m := range members {
		d, err := host.ReadPCIDevice(fsys, m)
		if err != nil || d.IsBridge() {
			continue
		}
		keep = append(keep, m)
		if d.Driver != "vfio-pci" {
			notVFIO = append(notVFIO, fmt.Sprintf("%s (%s)", m, orNone(d.Driver)))
		}
	}
	sort.Strings(keep)
	return keep, notVFIO
}

// foreignMembers are the group's devices that are not functions of g's own
// slot (its audio or USB function).
func foreignMembers(g host.GPU, members []string) []string {
	slot := strings.TrimSuffix(g.Address, g.Address[strings.LastIndex(g.Address, "."):])
	var out []string
	for _, m := range members {
		if !strings.HasPrefix(m, slot+".") {
			out = append(out, m)
		}
	}
	return out
}

func checkLibvirt(ctx context.Context, e Env) []Finding {
	uri := e.Config.Server.Libvirt.URI
	if uri == "" {
		uri = "qemu:///system"
	}
	f := Finding{Check: "libvirt", Subject: uri}
	outb, err := e.Run(ctx, "virsh", "-c", uri, "version")
	if err != nil {
		f.Severity = Error
		if errors.Is(err, exec.ErrNotFound) {
			f.Seen, f.Fix = "virsh is not installed", "apt-get install libvirt-daemon-system libvirt-clients qemu-system-x86"
		} else {
			f.Seen, f.Fix = "libvirt did not answer: "+firstLine(err.Error()), "systemctl enable --now libvirtd.service"
		}
		return []Finding{f}
	}
	lib, qemu := "", ""
	for _, l := range strings.Split(string(outb), "\n") {
		k, v, ok := strings.Cut(l, ":")
		if !ok {
			continue
		}
		v = strings.TrimSpace(v)
		switch strings.TrimSpace(k) {
		case "Using library":
			lib = v
		case "Running hypervisor":
			qemu = v
		}
	}
	f.Severity, f.Seen = OK, fmt.Sprintf("%s, hypervisor %s", orUnknown(lib), orUnknown(qemu))
	if major, minor := libvirtVersion(lib); major > 0 && (major < 7 || major == 7 && minor < 3) {
		f.Severity = Warning
		f.Seen += " (older than libvirt 7.3: mdevs cannot be defined persistently)"
		f.Fix = "use Debian 12 / Ubuntu 24.04's libvirt or newer"
	}
	return []Finding{f, checkKVMCapability(ctx, e, uri), checkPool(ctx, e, uri)}
}

// checkKVMCapability asks libvirt whether QEMU can use KVM here; without it
// gpuvmd falls back to software emulation (slow), and says so.
func checkKVMCapability(ctx context.Context, e Env, uri string) Finding {
	f := Finding{Check: "qemu-kvm", Subject: uri}
	if strings.HasPrefix(uri, "test:") {
		f.Severity, f.Seen = Skipped, "libvirt's test driver runs no QEMU"
		return f
	}
	if _, err := e.Run(ctx, "virsh", "-c", uri, "domcapabilities", "--virttype", "kvm"); err != nil {
		f.Severity, f.Seen = Warning, "libvirt reports no KVM domain type ("+firstLine(err.Error())+"): VMs would run under software emulation"
		f.Fix = "enable VT-x/SVM in the BIOS and check: virt-host-validate qemu"
		return f
	}
	f.Severity, f.Seen = OK, "libvirt offers KVM guests (domcapabilities --virttype kvm)"
	return f
}

func libvirtVersion(s string) (major, minor int) {
	fs := strings.Fields(s) // "libvirt 9.0.0"
	if len(fs) < 2 {
		return 0, 0
	}
	parts := strings.Split(fs[len(fs)-1], ".")
	if len(parts) < 2 {
		return 0, 0
	}
	major, _ = strconv.Atoi(parts[0])
	minor, _ = strconv.Atoi(parts[1])
	return major, minor
}

// minPoolFree is the free space below which the pool is a warning.
const minPoolFree = 50 << 30

func checkPool(ctx context.Context, e Env, uri string) Finding {
	l := e.Config.Server.Libvirt
	pool, dir := l.StoragePool, l.StoragePoolDir
	if pool == "" {
		pool = config.DefaultStoragePool
	}
	if dir == "" {
		dir = path.Join(config.DefaultStoragePoolRoot, pool)
	}
	f := Finding{Check: "storage-pool", Subject: pool}
	outb, err := e.Run(ctx, "virsh", "-c", uri, "pool-info", "--bytes", pool)
	if err != nil {
		if !poolMissing(err) {
			f.Severity, f.Seen = Error, "libvirt did not say whether pool "+pool+" exists: "+firstLine(err.Error())
			f.Fix = "virsh -c " + uri + " pool-info " + pool
			return f
		}
		// gpuvmd makes it: say where, and whether QEMU will reach it.
		f.Severity, f.Seen = Warning, fmt.Sprintf("no storage pool %s: gpuvmd creates it when it starts, at %s", pool, dir)
		f.Fix = "systemctl restart gpuvmd (if the pool stays missing, its log says why: journalctl -u gpuvmd | grep 'storage pool')"
		if why := qemuCannotReach(e, uri, dir); why != "" {
			f.Severity, f.Seen = Error, f.Seen+", which "+why
			f.Fix = "set server.libvirt.storage_pool_dir to a directory QEMU can reach (the default is " + path.Join(config.DefaultStoragePoolRoot, pool) + ")"
		}
		return f
	}
	state, avail := "", int64(-1)
	for _, l := range strings.Split(string(outb), "\n") {
		k, v, ok := strings.Cut(l, ":")
		if !ok {
			continue
		}
		v = strings.TrimSpace(v)
		switch strings.TrimSpace(k) {
		case "State":
			state = v
		case "Available":
			if n, err := strconv.ParseInt(strings.Fields(v + " x")[0], 10, 64); err == nil {
				avail = n
			}
		}
	}
	target, terr := poolTarget(ctx, e, uri, pool)
	why := ""
	if terr == nil {
		why = qemuCannotReach(e, uri, target)
	}
	switch {
	case state != "running":
		f.Severity, f.Seen = Error, "pool "+pool+" is "+orUnknown(state)
		f.Fix = fmt.Sprintf("virsh pool-start %s && virsh pool-autostart %s", pool, pool)
	case terr != nil:
		f.Severity, f.Seen = Warning, "running, but its directory is unknown: "+firstLine(terr.Error())
		f.Fix = "virsh -c " + uri + " pool-dumpxml " + pool
	case why != "":
		f.Severity, f.Seen = Error, fmt.Sprintf("running at %s, which %s", target, why)
		f.Fix = "chmod o+x the directories on the way, or define the pool elsewhere (virsh pool-undefine " + pool + "; gpuvmd then makes it at server.libvirt.storage_pool_dir)"
	case avail >= 0 && avail < minPoolFree:
		f.Severity, f.Seen = Warning, fmt.Sprintf("running at %s, %s free (under %s)", target, gib(avail), gib(minPoolFree))
		f.Fix = "free space in the pool's directory, or point server.libvirt.storage_pool at a larger one"
	default:
		f.Severity, f.Seen = OK, "running at "+target+", "+gib(avail)+" free"
	}
	return f
}

// poolMissing reports whether virsh's error says the pool does not exist.
func poolMissing(err error) bool {
	s := err.Error()
	return strings.Contains(s, "Storage pool not found") || strings.Contains(s, "no storage pool with matching")
}

// poolTarget is the directory of a pool, from its definition.
func poolTarget(ctx context.Context, e Env, uri, pool string) (string, error) {
	outb, err := e.Run(ctx, "virsh", "-c", uri, "pool-dumpxml", pool)
	if err != nil {
		return "", err
	}
	var x struct {
		Target struct {
			Path string `xml:"path"`
		} `xml:"target"`
	}
	if err := xml.Unmarshal(outb, &x); err != nil {
		return "", fmt.Errorf("pool-dumpxml: %w", err)
	}
	if x.Target.Path == "" {
		return "", errors.New("its definition has no target path")
	}
	return x.Target.Path, nil
}

// qemuCannotReach says why QEMU, which runs as its own user (libvirt-qemu),
// cannot reach dir: a directory on the way that others may not search.
// Directories that do not exist yet (libvirt makes them) and pools of a
// remote libvirt are not checked.
func qemuCannotReach(e Env, uri, dir string) string {
	if u, err := url.Parse(uri); err != nil || u.Host != "" || !path.IsAbs(dir) {
		return ""
	}
	p := "/"
	for _, part := range strings.Split(strings.Trim(path.Clean(dir), "/"), "/") {
		p = path.Join(p, part)
		fi, err := e.Stat(p)
		if err != nil {
			return ""
		}
		if fi.IsDir() && fi.Mode().Perm()&0o001 == 0 {
			return fmt.Sprintf("QEMU (user libvirt-qemu) cannot reach: %s is %04o", p, fi.Mode().Perm())
		}
	}
	return ""
}

// checkKVM looks at /dev/kvm. Without it, or unusable, gpuvmd still works:
// its accelerator check (hypervisor.Conn.Accel) runs guests under QEMU's
// software emulation, many times slower, and says so; so these are
// warnings, not errors.
func checkKVM(e Env) []Finding {
	const emulated = "guests run under software emulation (much slower), which gpuvmd falls back to by itself"
	f := Finding{Check: "kvm"}
	fi, err := e.Stat(devKVM)
	if err != nil {
		f.Severity, f.Seen = Warning, devKVM+" is missing: no hardware virtualisation here; "+emulated
		f.Fix = "for KVM: enable VT-x (Intel) or SVM (AMD) in the BIOS (in a VM: nested virtualisation on its host), then: modprobe kvm_intel (or kvm_amd)"
		return []Finding{f}
	}
	if err := e.OpenRW(devKVM); err != nil {
		f.Severity, f.Seen, f.Fix = Warning, devKVM+" cannot be opened ("+err.Error()+"); "+emulated, "dmesg | grep -i kvm"
		return []Finding{f}
	}
	if fi.Mode().Perm()&0o060 != 0o060 {
		f.Severity, f.Seen = Warning, fmt.Sprintf("%s is mode %04o: QEMU (user libvirt-qemu, group kvm) cannot use it; %s", devKVM, fi.Mode().Perm(), emulated)
		f.Fix = "chgrp kvm /dev/kvm && chmod 0660 /dev/kvm   (udev does it at boot once the kvm group exists)"
		return []Finding{f}
	}
	f.Severity, f.Seen = OK, fmt.Sprintf("%s usable (mode %04o)", devKVM, fi.Mode().Perm())
	return []Finding{f}
}

func checkDatabase(ctx context.Context, e Env) Finding {
	f := Finding{Check: "database"}
	if e.Database == nil {
		f.Severity, f.Seen = Skipped, "not checked"
		return f
	}
	f.Seen, f.Severity, f.Fix = e.Database(ctx)
	return f
}

// runCommand runs a command and returns its output; its standard error is in
// the error.
func runCommand(ctx context.Context, name string, args ...string) ([]byte, error) {
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil && stderr.Len() > 0 {
		return out, fmt.Errorf("%w: %s", err, strings.TrimSpace(stderr.String()))
	}
	return out, err
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	return l
}

func orUnknown(s string) string {
	if s == "" {
		return "(version unknown)"
	}
	return s
}

func orNone(s string) string {
	if s == "" {
		return "no driver"
	}
	return s
}

func orAuto(m gpu.Mode) string {
	if m == "" {
		return string(gpu.ModeAuto)
	}
	return string(m)
}

func gib(n int64) string {
	if n < 0 {
		return "(unknown)"
	}
	return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
}
