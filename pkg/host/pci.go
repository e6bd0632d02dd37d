package host

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/gpuvm/gpuvm/pkg/gpu"
)

// pciDevices is where the kernel lists every PCI function.
const pciDevices = "bus/pci/devices"

// PCI class codes (base class and subclass, the top 16 bits of the 24-bit
// class) gpuvm cares about.
const (
	classVGA       = 0x0300
	class3D        = 0x0302
	classPCIBridge = 0x0604
)

// PCIDevice is one PCI function as sysfs describes it.
type PCIDevice struct {
	Address                          string // "0000:41:00.0"
	Vendor, Device                   uint16
	Class                            uint32 // 24-bit class code, 0x030200
	SubsystemVendor, SubsystemDevice uint16
	// Driver is the bound driver ("nvidia", "vfio-pci"), "" when unbound.
	Driver string
	// DriverOverride is the driver_override attribute, "" when unset.
	DriverOverride string
	// NUMANode is the device's NUMA node, -1 when the platform gives none.
	NUMANode int
	// IOMMUGroup is the group number, "" when the IOMMU is off.
	IOMMUGroup string
	// PhysFn is the physical function of an SR-IOV virtual function, "" for
	// anything else.
	PhysFn string
	// VFs are the enabled virtual functions of a physical function, in VF
	// order (virtfn0, virtfn1, ...).
	VFs []string
	// TotalVFs and NumVFs are sriov_totalvfs and sriov_numvfs, 0 when the
	// device has no SR-IOV capability.
	TotalVFs, NumVFs int
}

// IsVF reports whether the device is an SR-IOV virtual function.
func (d PCIDevice) IsVF() bool { return d.PhysFn != "" }

// IsBridge reports whether the device is a PCI-to-PCI bridge (a root or
// switch port), which may share an IOMMU group with a passed-through device.
func (d PCIDevice) IsBridge() bool { return d.Class>>8 == classPCIBridge }

// IsDisplay reports whether the device is a display controller: VGA (0x0300)
// or 3D (0x0302), the two classes NVIDIA GPUs use.
func (d PCIDevice) IsDisplay() bool { return d.Class>>8 == classVGA || d.Class>>8 == class3D }

// IsNVIDIA reports whether NVIDIA made the device.
func (d PCIDevice) IsNVIDIA() bool { return d.Vendor == gpu.VendorNVIDIA }

// GPU is an NVIDIA GPU (a physical function) with its catalogue entry.
type GPU struct {
	PCIDevice
	Model gpu.Model
	// Known is false when the device ID is not in the catalogue; Model is
	// then gpu.UnknownModel's.
	Known bool
}

var addressRE = regexp.MustCompile(`^(?:([0-9a-f]{4}):)?([0-9a-f]{2}):([0-9a-f]{2})\.([0-9a-f])$`)

// ValidateAddress checks a PCI address as a user or a config file wrote it
// and returns it in sysfs form: "41:00.0" and "0000:41:00.0" both give
// "0000:41:00.0", upper-case hex is lowered. Anything else is refused, so
// that no path element built from it can leave bus/pci/devices.
func ValidateAddress(s string) (string, error) {
	a := strings.ToLower(strings.TrimSpace(s))
	m := addressRE.FindStringSubmatch(a)
	if m == nil {
		return "", fmt.Errorf("PCI address %q: want DDDD:BB:SS.F or BB:SS.F in hex (domain:bus:slot.function, e.g. 0000:41:00.0)", s)
	}
	domain := m[1]
	if domain == "" {
		domain = "0000"
	}
	slot, _ := strconv.ParseUint(m[3], 16, 8)
	if slot > 0x1f {
		return "", fmt.Errorf("PCI address %q: slot %s is above 1f", s, m[3])
	}
	fn, _ := strconv.ParseUint(m[4], 16, 8)
	if fn > 7 {
		return "", fmt.Errorf("PCI address %q: function %s is above 7", s, m[4])
	}
	return fmt.Sprintf("%s:%s:%s.%s", domain, m[2], m[3], m[4]), nil
}

// safeName reports whether s can be one element of a sysfs path: names read
// from directories and link targets are checked with it before they are
// joined into a path, since a captured or simulated tree may hold anything.
func safeName(s string) bool {
	return s != "" && s != "." && s != ".." && !strings.ContainsAny(s, "/\\\x00")
}

// devPath is the sysfs path of an attribute of PCI device addr.
func devPath(addr string, elems ...string) string {
	return path.Join(append([]string{pciDevices, addr}, elems...)...)
}

// ListPCIDevices returns the addresses of every PCI function, sorted.
func ListPCIDevices(fsys SysFS) ([]string, error) {
	names, err := fsys.ReadDir(pciDevices)
	if err != nil {
		return nil, fmt.Errorf("list PCI devices in %s of %s: %w", pciDevices, fsys.Describe(), unwrapPath(err))
	}
	out := make([]string, 0, len(names))
	for _, n := range names {
		if safeName(n) {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out, nil
}

// ReadPCIDevice reads what sysfs says about the device at addr. vendor and
// device must be there; every other attribute may be missing (it then has
// its zero value, -1 for NUMANode), but one that is there must parse.
func ReadPCIDevice(fsys SysFS, addr string) (PCIDevice, error) {
	a, err := ValidateAddress(addr)
	if err != nil {
		return PCIDevice{}, fmt.Errorf("read PCI device: %w", err)
	}
	return readPCIDevice(fsys, a)
}

// readPCIDevice is ReadPCIDevice for a name read from bus/pci/devices, which
// need not be of the DDDD:BB:SS.F form (VMD domains have five digits).
func readPCIDevice(fsys SysFS, addr string) (PCIDevice, error) {
	d := PCIDevice{Address: addr, NUMANode: -1}
	if !safeName(addr) {
		return d, fmt.Errorf("read PCI device %q: not a device name", addr)
	}
	if !fsys.Exists(devPath(addr)) {
		return d, fmt.Errorf("read PCI device %s: no such device in %s: %w", addr, fsys.Describe(), fs.ErrNotExist)
	}
	var err error
	if d.Vendor, err = readHex16(fsys, devPath(addr, "vendor"), true); err != nil {
		return d, fmt.Errorf("read PCI device %s: %w", addr, err)
	}
	if d.Device, err = readHex16(fsys, devPath(addr, "device"), true); err != nil {
		return d, fmt.Errorf("read PCI device %s: %w", addr, err)
	}
	if d.SubsystemVendor, err = readHex16(fsys, devPath(addr, "subsystem_vendor"), false); err != nil {
		return d, fmt.Errorf("read PCI device %s: %w", addr, err)
	}
	if d.SubsystemDevice, err = readHex16(fsys, devPath(addr, "subsystem_device"), false); err != nil {
		return d, fmt.Errorf("read PCI device %s: %w", addr, err)
	}
	if s, ok, err := readOptional(fsys, devPath(addr, "class")); err != nil {
		return d, fmt.Errorf("read PCI device %s: %w", addr, err)
	} else if ok {
		v, perr := strconv.ParseUint(strings.TrimPrefix(strings.ToLower(s), "0x"), 16, 24)
		if perr != nil {
			return d, fmt.Errorf("read PCI device %s: %s: %q is not a 24-bit hex class code", addr, devPath(addr, "class"), s)
		}
		d.Class = uint32(v)
	}
	if s, ok, err := readOptional(fsys, devPath(addr, "numa_node")); err != nil {
		return d, fmt.Errorf("read PCI device %s: %w", addr, err)
	} else if ok {
		n, perr := strconv.Atoi(s)
		if perr != nil || n < -1 {
			return d, fmt.Errorf("read PCI device %s: %s: %q is not a NUMA node", addr, devPath(addr, "numa_node"), s)
		}
		d.NUMANode = n
	}
	if s, ok, err := readOptional(fsys, devPath(addr, "driver_override")); err != nil {
		return d, fmt.Errorf("read PCI device %s: %w", addr, err)
	} else if ok && s != "(null)" {
		d.DriverOverride = s
	}
	if d.TotalVFs, err = readCount(fsys, devPath(addr, "sriov_totalvfs")); err != nil {
		return d, fmt.Errorf("read PCI device %s: %w", addr, err)
	}
	if d.NumVFs, err = readCount(fsys, devPath(addr, "sriov_numvfs")); err != nil {
		return d, fmt.Errorf("read PCI device %s: %w", addr, err)
	}
	for _, l := range []struct {
		name string
		dst  *string
	}{{"driver", &d.Driver}, {"iommu_group", &d.IOMMUGroup}, {"physfn", &d.PhysFn}} {
		if *l.dst, err = optionalLinkBase(fsys, devPath(addr, l.name)); err != nil {
			return d, fmt.Errorf("read PCI device %s: %w", addr, err)
		}
	}
	if d.VFs, err = readVFs(fsys, addr); err != nil {
		return d, fmt.Errorf("read PCI device %s: %w", addr, err)
	}
	return d, nil
}

// readVFs follows the virtfnN links of a physical function, in N order.
func readVFs(fsys SysFS, addr string) ([]string, error) {
	names, err := fsys.ReadDir(devPath(addr))
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", devPath(addr), unwrapPath(err))
	}
	type vf struct {
		n    int
		addr string
	}
	var vfs []vf
	for _, name := range names {
		num, ok := strings.CutPrefix(name, "virtfn")
		if !ok {
			continue
		}
		n, err := strconv.Atoi(num)
		if err != nil || n < 0 {
			continue // not a virtfn link ("virtfn_foo")
		}
		a, err := linkBase(fsys, devPath(addr, name))
		if err != nil {
			return nil, err
		}
		vfs = append(vfs, vf{n, a})
	}
	sort.Slice(vfs, func(i, j int) bool { return vfs[i].n < vfs[j].n })
	var out []string
	for _, v := range vfs {
		out = append(out, v.addr)
	}
	return out, nil
}

// ListGPUs returns every NVIDIA GPU of the host: each NVIDIA display-class
// physical function (SR-IOV VFs are not GPUs of their own), sorted by
// address. Boards missing from the catalogue are listed with
// gpu.UnknownModel. A device that cannot be read is left out and its error
// returned, joined with the others, next to the GPUs that could be read.
func ListGPUs(fsys SysFS) ([]GPU, error) {
	addrs, err := ListPCIDevices(fsys)
	if err != nil {
		return nil, err
	}
	var gpus []GPU
	var errs []error
	for _, a := range addrs {
		// Look at vendor and class first: only NVIDIA display functions are
		// read in full, so an odd device of another vendor costs nothing.
		vendor, err := readHex16(fsys, devPath(a, "vendor"), true)
		if err != nil {
			errs = append(errs, fmt.Errorf("read PCI device %s: %w", a, err))
			continue
		}
		if vendor != gpu.VendorNVIDIA {
			continue
		}
		d, err := readPCIDevice(fsys, a)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if !d.IsDisplay() || d.IsVF() {
			continue
		}
		g := GPU{PCIDevice: d}
		g.Model, g.Known = gpu.ModelByID(d.Device)
		if !g.Known {
			g.Model = gpu.UnknownModel(d.Device)
		}
		gpus = append(gpus, g)
	}
	return gpus, errors.Join(errs...)
}

var iommuGroupRE = regexp.MustCompile(`^[0-9]+$`)

// IOMMUGroupDevices returns the addresses of the devices in an IOMMU group,
// sorted.
func IOMMUGroupDevices(fsys SysFS, group string) ([]string, error) {
	if !iommuGroupRE.MatchString(group) {
		return nil, fmt.Errorf("list IOMMU group %q: not a group number", group)
	}
	dir := path.Join("kernel/iommu_groups", group, "devices")
	names, err := fsys.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("list IOMMU group %s: %s: %w", group, dir, unwrapPath(err))
	}
	out := make([]string, 0, len(names))
	for _, n := range names {
		if safeName(n) {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out, nil
}

// readOptional reads an attribute; ok is false when it does not exist.
func readOptional(fsys SysFS, name string) (s string, ok bool, err error) {
	s, err = ReadString(fsys, name)
	if err != nil {
		if IsNotExist(err) {
			return "", false, nil
		}
		return "", false, fmt.Errorf("read %s: %w", name, unwrapPath(err))
	}
	return s, true, nil
}

// readHex16 reads a PCI ID attribute ("0x10de"); a missing optional one is 0.
func readHex16(fsys SysFS, name string, required bool) (uint16, error) {
	s, ok, err := readOptional(fsys, name)
	if err != nil {
		return 0, err
	}
	if !ok {
		if required {
			return 0, fmt.Errorf("%s: %w", name, fs.ErrNotExist)
		}
		return 0, nil
	}
	v, err := gpu.ParseDeviceID(s)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", name, err)
	}
	return v, nil
}

// readCount reads a non-negative decimal attribute; missing is 0.
func readCount(fsys SysFS, name string) (int, error) {
	s, ok, err := readOptional(fsys, name)
	if err != nil || !ok {
		return 0, err
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%s: %q is not a count", name, s)
	}
	return n, nil
}

// linkBase is LinkBase that checks the result can name a path element.
func linkBase(fsys SysFS, name string) (string, error) {
	b, err := LinkBase(fsys, name)
	if err != nil {
		return "", fmt.Errorf("read link %s: %w", name, unwrapPath(err))
	}
	if !safeName(b) {
		return "", fmt.Errorf("read link %s: target does not end in a name", name)
	}
	return b, nil
}

// optionalLinkBase is linkBase that gives "" when the link does not exist.
func optionalLinkBase(fsys SysFS, name string) (string, error) {
	b, err := linkBase(fsys, name)
	if err != nil && IsNotExist(err) {
		return "", nil
	}
	return b, err
}
