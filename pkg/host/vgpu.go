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

	"github.com/google/uuid"

	"github.com/gpuvm/gpuvm/pkg/gpu"
)

// Legacy mediated devices (REFERENCE.md §1): up to Ampere, vGPUs are mdevs
// created under the parent's mdev_supported_types/nvidia-<N>/.

const mdevDevices = "bus/mdev/devices"

// MdevType is one mdev type a parent offers.
type MdevType struct {
	ID string // directory name: "nvidia-558"
	// Name is the canonical vGPU type name ("A40-8Q") parsed from the name
	// attribute ("GRID A40-8Q"), or RawName when it does not parse.
	Name    string
	RawName string
	// Memory is the framebuffer in bytes and MaxInstances the per-GPU limit,
	// both from the description attribute (MaxInstances 0 when it says none).
	Memory       uint64
	MaxInstances int
	// Available is available_instances: how many more can be created on
	// this parent now.
	Available int
	DeviceAPI string // "vfio-pci"
	// Devices are the UUIDs of this type's mdevs on this parent.
	Devices []string
}

// Mdev is a mediated device that exists.
type Mdev struct {
	UUID   string
	Parent string // PCI address of the parent: the GPU, or its VF
	TypeID string // "nvidia-558"
}

var mdevTypeIDRE = regexp.MustCompile(`^nvidia-[0-9]+$`)

// ParseMdevDescription reads the framebuffer size (bytes) and per-GPU
// instance limit from an NVIDIA mdev type's description attribute:
// "num_heads=4, frl_config=60, framebuffer=8192M, max_resolution=7680x4320, max_instance=6".
// Other keys are ignored; framebuffer (in M or G) is required, max_instance
// is 0 when missing.
func ParseMdevDescription(s string) (memory uint64, maxInstances int, err error) {
	haveFB := false
	for _, item := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(item, "=")
		if !ok {
			continue
		}
		k, v = strings.ToLower(strings.TrimSpace(k)), strings.TrimSpace(v)
		switch k {
		case "framebuffer":
			memory, err = parseFramebuffer(v)
			if err != nil {
				return 0, 0, fmt.Errorf("mdev description %q: %w", s, err)
			}
			haveFB = true
		case "max_instance":
			maxInstances, err = strconv.Atoi(v)
			if err != nil || maxInstances < 0 {
				return 0, 0, fmt.Errorf("mdev description %q: max_instance %q is not a count", s, v)
			}
		}
	}
	if !haveFB {
		return 0, 0, fmt.Errorf("mdev description %q: no framebuffer=<size>", s)
	}
	return memory, maxInstances, nil
}

// parseFramebuffer parses "8192M" or "8G".
func parseFramebuffer(v string) (uint64, error) {
	if v == "" {
		return 0, fmt.Errorf("framebuffer is empty")
	}
	var shift uint
	switch v[len(v)-1] {
	case 'M', 'm':
		shift = 20
	case 'G', 'g':
		shift = 30
	default:
		return 0, fmt.Errorf("framebuffer %q: want a size in M or G (8192M)", v)
	}
	n, err := strconv.ParseUint(strings.TrimSpace(v[:len(v)-1]), 10, 64)
	if err != nil || n == 0 || n > 1<<(64-shift)-1 {
		return 0, fmt.Errorf("framebuffer %q: want a size in M or G (8192M)", v)
	}
	return n << shift, nil
}

// canonicalTypeName returns the canonical vGPU type name of a name as the
// driver prints it ("GRID A40-8Q", "NVIDIA L40S-1B"), or the trimmed name
// itself when it does not parse.
func canonicalTypeName(raw string) string {
	if t, err := gpu.ParseVGPUType(raw); err == nil {
		return t.Name
	}
	return strings.TrimSpace(raw)
}

// IsMdevParent reports whether the PCI device at addr can hold mdevs.
func IsMdevParent(fsys SysFS, addr string) bool {
	a, err := ValidateAddress(addr)
	return err == nil && fsys.Exists(devPath(a, "mdev_supported_types"))
}

// MdevTypes lists the mdev types of a parent, sorted by the number in their
// ID (nvidia-99 before nvidia-100). A type that
// cannot be read is left out and its error returned, joined with the others,
// next to the types that could be read.
func MdevTypes(fsys SysFS, parent string) ([]MdevType, error) {
	p, err := ValidateAddress(parent)
	if err != nil {
		return nil, fmt.Errorf("list mdev types: %w", err)
	}
	dir := devPath(p, "mdev_supported_types")
	ids, err := fsys.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("list mdev types of %s: %s: %w", p, dir, unwrapPath(err))
	}
	var types []MdevType
	var errs []error
	for _, id := range ids {
		if !safeName(id) {
			continue
		}
		t, err := readMdevType(fsys, path.Join(dir, id))
		if err != nil {
			errs = append(errs, fmt.Errorf("read mdev type %s of %s: %w", id, p, err))
			continue
		}
		t.ID = id
		types = append(types, t)
	}
	sort.SliceStable(types, func(i, j int) bool { return mdevTypeLess(types[i].ID, types[j].ID) })
	return types, errors.Join(errs...)
}

// mdevTypeLess orders "nvidia-<N>" IDs by N, and anything else after them
// by name.
func mdevTypeLess(a, b string) bool {
	na, erra := strconv.Atoi(strings.TrimPrefix(a, "nvidia-"))
	nb, errb := strconv.Atoi(strings.TrimPrefix(b, "nvidia-"))
	switch {
	case erra == nil && errb == nil && na != nb:
		return na < nb
	case (erra == nil) != (errb == nil):
		return erra == nil
	}
	return a < b
}

func readMdevType(fsys SysFS, dir string) (MdevType, error) {
	var t MdevType
	name, err := ReadString(fsys, path.Join(dir, "name"))
	if err != nil {
		return t, fmt.Errorf("%s: %w", path.Join(dir, "name"), unwrapPath(err))
	}
	t.RawName, t.Name = name, canonicalTypeName(name)
	desc, err := ReadString(fsys, path.Join(dir, "description"))
	if err != nil {
		return t, fmt.Errorf("%s: %w", path.Join(dir, "description"), unwrapPath(err))
	}
	if t.Memory, t.MaxInstances, err = ParseMdevDescription(desc); err != nil {
		return t, err
	}
	avail, err := ReadString(fsys, path.Join(dir, "available_instances"))
	if err != nil {
		return t, fmt.Errorf("%s: %w", path.Join(dir, "available_instances"), unwrapPath(err))
	}
	if t.Available, err = strconv.Atoi(avail); err != nil || t.Available < 0 {
		return t, fmt.Errorf("%s: %q is not a count", path.Join(dir, "available_instances"), avail)
	}
	if s, ok, err := readOptional(fsys, path.Join(dir, "device_api")); err != nil {
		return t, err
	} else if ok {
		t.DeviceAPI = s
	}
	devs, err := fsys.ReadDir(path.Join(dir, "devices"))
	if err != nil && !IsNotExist(err) {
		return t, fmt.Errorf("%s: %w", path.Join(dir, "devices"), unwrapPath(err))
	}
	for _, d := range devs {
		if safeName(d) {
			t.Devices = append(t.Devices, d)
		}
	}
	return t, nil
}

// canonicalUUID checks that s is a UUID in the 8-4-4-4-12 form the kernel
// names mdevs with, and returns it in lower case.
func canonicalUUID(s string) (string, error) {
	u, err := uuid.Parse(s)
	if err != nil || len(s) != 36 {
		return "", fmt.Errorf("mdev UUID %q: want the form xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", s)
	}
	return u.String(), nil
}

// CreateMdev creates an mdev of type typeID ("nvidia-558") with the given
// UUID on parent.
func CreateMdev(fsys SysFS, parent, typeID, id string) error {
	p, err := ValidateAddress(parent)
	if err != nil {
		return fmt.Errorf("create mdev: %w", err)
	}
	if !mdevTypeIDRE.MatchString(typeID) {
		return fmt.Errorf("create mdev on %s: type %q: want nvidia-<number>", p, typeID)
	}
	u, err := canonicalUUID(id)
	if err != nil {
		return fmt.Errorf("create mdev of type %s on %s: %w", typeID, p, err)
	}
	dir := devPath(p, "mdev_supported_types", typeID)
	if !fsys.Exists(dir) {
		if !fsys.Exists(devPath(p, "mdev_supported_types")) {
			return fmt.Errorf("create mdev %s on %s: %s is not an mdev parent (no %s)", u, p, p, devPath(p, "mdev_supported_types"))
		}
		return fmt.Errorf("create mdev %s on %s: %s offers no mdev type %s", u, p, p, typeID)
	}
	if err := WriteString(fsys, path.Join(dir, "create"), u); err != nil {
		return fmt.Errorf("create mdev %s of type %s on %s: %w", u, typeID, p, err)
	}
	return nil
}

// RemoveMdev removes the mdev with the given UUID. Removing one that does
// not exist succeeds.
func RemoveMdev(fsys SysFS, id string) error {
	u, err := canonicalUUID(id)
	if err != nil {
		return fmt.Errorf("remove mdev: %w", err)
	}
	dev := path.Join(mdevDevices, u)
	if !fsys.Exists(dev) {
		return nil
	}
	if err := WriteString(fsys, path.Join(dev, "remove"), "1"); err != nil {
		if errors.Is(err, fs.ErrNotExist) { // removed meanwhile
			return nil
		}
		return fmt.Errorf("remove mdev %s: %w", u, err)
	}
	return nil
}

// ListMdevs lists the mdevs that exist, sorted by UUID. An mdev that cannot
// be read is left out and its error returned, joined with the others, next
// to the mdevs that could be read. No mdev bus (the mdev module is not
// loaded) is an empty list.
func ListMdevs(fsys SysFS) ([]Mdev, error) {
	ids, err := fsys.ReadDir(mdevDevices)
	if err != nil {
		if IsNotExist(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("list mdevs in %s: %w", mdevDevices, unwrapPath(err))
	}
	var out []Mdev
	var errs []error
	for _, id := range ids {
		if !safeName(id) {
			continue
		}
		m, err := readMdev(fsys, id)
		if err != nil {
			errs = append(errs, fmt.Errorf("read mdev %s: %w", id, err))
			continue
		}
		out = append(out, m)
	}
	return out, errors.Join(errs...)
}

func readMdev(fsys SysFS, id string) (Mdev, error) {
	m := Mdev{UUID: id}
	link := path.Join(mdevDevices, id)
	target, err := fsys.Readlink(link)
	if err != nil {
		return m, fmt.Errorf("read link %s: %w", link, unwrapPath(err))
	}
	// ../../../devices/pci0000:40/0000:40:01.1/0000:41:00.4/<uuid>
	m.Parent = path.Base(path.Dir(path.Clean(strings.TrimSuffix(target, "/"))))
	if !safeName(m.Parent) || m.Parent == "devices" {
		return m, fmt.Errorf("link %s -> %s does not lead into a parent device", link, target)
	}
	if m.TypeID, err = linkBase(fsys, path.Join(link, "mdev_type")); err != nil {
		return m, err
	}
	return m, nil
}

// Vendor-specific VFIO framework (REFERENCE.md §1): from Ada on, a vGPU is
// created by writing a type ID to a VF's nvidia/current_vgpu_type.

// VFType is a vGPU type a VF can take.
type VFType struct {
	ID      int    // numeric type ID, written to current_vgpu_type
	Name    string // canonical: "L40S-1B" (RawName when it does not parse)
	RawName string // as the driver prints it: "NVIDIA L40S-1B"
}

var (
	creatableHeaderRE = regexp.MustCompile(`^ID\s*:\s*vGPU Name$`)
	creatableLineRE   = regexp.MustCompile(`^([0-9]+)\s*:\s*(\S.*)$`)
)

// ParseCreatableVGPUTypes parses a VF's nvidia/creatable_vgpu_types: a
// header line "ID    : vGPU Name", then one "1145  : NVIDIA L40S-1B" line
// per type. The header alone, or nothing, is an empty list.
func ParseCreatableVGPUTypes(s string) ([]VFType, error) {
	var out []VFType
	first := true
	for i, line := range strings.Split(s, "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		if first {
			first = false
			if creatableHeaderRE.MatchString(line) {
				continue
			}
		}
		m := creatableLineRE.FindStringSubmatch(line)
		if m == nil {
			return nil, fmt.Errorf("creatable_vgpu_types line %d: %q is not \"<ID> : <vGPU name>\"", i+1, line)
		}
		id, err := strconv.Atoi(m[1])
		if err != nil || id <= 0 {
			return nil, fmt.Errorf("creatable_vgpu_types line %d: %q: type ID %s is out of range", i+1, line, m[1])
		}
		raw := strings.TrimSpace(m[2])
		out = append(out, VFType{ID: id, Name: canonicalTypeName(raw), RawName: raw})
	}
	return out, nil
}

// VFState reads a VF's current vGPU type ID (0: none) and the types it can
// still take.
func VFState(fsys SysFS, vf string) (current int, creatable []VFType, err error) {
	a, err := ValidateAddress(vf)
	if err != nil {
		return 0, nil, fmt.Errorf("read vGPU state of VF: %w", err)
	}
	cur := devPath(a, "nvidia", "current_vgpu_type")
	s, err := ReadString(fsys, cur)
	if err != nil {
		return 0, nil, fmt.Errorf("read vGPU state of VF %s: %s: %w", a, cur, unwrapPath(err))
	}
	if current, err = strconv.Atoi(s); err != nil || current < 0 {
		return 0, nil, fmt.Errorf("read vGPU state of VF %s: %s: %q is not a type ID", a, cur, s)
	}
	ct := devPath(a, "nvidia", "creatable_vgpu_types")
	b, err := fsys.ReadFile(ct)
	if err != nil {
		return 0, nil, fmt.Errorf("read vGPU state of VF %s: %s: %w", a, ct, unwrapPath(err))
	}
	if creatable, err = ParseCreatableVGPUTypes(string(b)); err != nil {
		return 0, nil, fmt.Errorf("read vGPU state of VF %s: %s: %w", a, ct, err)
	}
	return current, creatable, nil
}

// IsVendorVFIOVF reports whether vf is a VF that takes vGPUs through the
// vendor-specific VFIO framework.
func IsVendorVFIOVF(fsys SysFS, vf string) bool {
	a, err := ValidateAddress(vf)
	return err == nil && fsys.Exists(devPath(a, "nvidia", "creatable_vgpu_types"))
}

// SetVFType creates a vGPU of type id on the VF, or deletes its vGPU when id
// is 0.
func SetVFType(fsys SysFS, vf string, id int) error {
	a, err := ValidateAddress(vf)
	if err != nil {
		return fmt.Errorf("set vGPU type of VF: %w", err)
	}
	if id < 0 {
		return fmt.Errorf("set vGPU type of VF %s: type ID %d is negative", a, id)
	}
	cur := devPath(a, "nvidia", "current_vgpu_type")
	if !fsys.Exists(cur) {
		return fmt.Errorf("set vGPU type of VF %s to %d: %s takes no vGPU (no %s)", a, id, a, cur)
	}
	if err := WriteString(fsys, cur, strconv.Itoa(id)); err != nil {
		return fmt.Errorf("set vGPU type of VF %s to %d: %w", a, id, err)
	}
	return nil
}

// VFGPUInstanceID reads the MIG GPU instance a VF's vGPU runs on. It returns
// -1 and an error when the VF has no gpu_instance_id (no vGPU, or not a
// vendor-VFIO VF).
func VFGPUInstanceID(fsys SysFS, vf string) (int, error) {
	a, err := ValidateAddress(vf)
	if err != nil {
		return -1, fmt.Errorf("read GPU instance of VF: %w", err)
	}
	name := devPath(a, "nvidia", "gpu_instance_id")
	s, err := ReadString(fsys, name)
	if err != nil {
		return -1, fmt.Errorf("read GPU instance of VF %s: %s: %w", a, name, unwrapPath(err))
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		return -1, fmt.Errorf("read GPU instance of VF %s: %s: %q is not a number", a, name, s)
	}
	return n, nil
}

// DetectInterface tells from sysfs which vGPU kernel interface a GPU offers
// now: mdev when the GPU or one of its VFs has mdev_supported_types, the
// vendor-specific VFIO framework when a VF has nvidia/creatable_vgpu_types,
// else none (no vGPU driver, or its VFs are not enabled yet).
func DetectInterface(fsys SysFS, g PCIDevice) gpu.VGPUInterface {
	if safeName(g.Address) && fsys.Exists(devPath(g.Address, "mdev_supported_types")) {
		return gpu.InterfaceMdev
	}
	vendor := false
	for _, vf := range g.VFs {
		if !safeName(vf) {
			continue
		}
		if fsys.Exists(devPath(vf, "mdev_supported_types")) {
			return gpu.InterfaceMdev
		}
		if fsys.Exists(devPath(vf, "nvidia", "creatable_vgpu_types")) {
			vendor = true
		}
	}
	if vendor {
		return gpu.InterfaceVendorVFIO
	}
	return gpu.InterfaceNone
}
