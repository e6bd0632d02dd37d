package sim

import (
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/google/uuid"

	"github.com/gpuvm/gpuvm/pkg/host"
)

// node is one entry of the simulated sysfs.
type node struct {
	dir   bool
	link  string // symlink target, relative as the kernel writes them
	data  string // file content
	write writeFunc
	names map[string]bool // children of a directory
}

// writeFunc applies a write to a fresh copy of the state.
type writeFunc func(s *state, data string) error

// tree is the sysfs view of one state: canonical path -> node. It is not
// changed once built (a write builds the next state's tree), so what resolve
// found is kept: the monitor lists the GPUs every few seconds, through the
// same links each time.
type tree struct {
	nodes    map[string]*node
	resolved sync.Map // resolveKey → resolution
}

// resolveKey is one resolve call's arguments.
type resolveKey struct {
	path   string
	follow bool
}

// resolution is one resolve call's answer.
type resolution struct {
	canon string
	n     *node
	err   error
}

const pciRoot = "devices/pci0000:00"

func (t *tree) add(p string, n *node) {
	t.nodes[p] = n
	for p != "." {
		parent, name := path.Dir(p), path.Base(p)
		pn, ok := t.nodes[parent]
		if !ok {
			pn = &node{dir: true, names: map[string]bool{}}
			t.nodes[parent] = pn
		}
		if pn.names[name] {
			return
		}
		pn.names[name] = true
		p = parent
	}
}

func (t *tree) file(p, data string) { t.add(p, &node{data: data + "\n"}) }

func (t *tree) rw(p, data string, w writeFunc) { t.add(p, &node{data: data + "\n", write: w}) }

func (t *tree) wo(p string, w writeFunc) { t.add(p, &node{write: w}) }

func (t *tree) dir(p string) {
	if _, ok := t.nodes[p]; !ok {
		t.add(p, &node{dir: true, names: map[string]bool{}})
	}
}

// symlink adds a link at p whose target is given relative to the tree root;
// it is stored relative to p's directory, as sysfs does.
func (t *tree) symlink(p, target string) {
	rel := relPath(path.Dir(p), target)
	t.add(p, &node{link: rel})
}

func relPath(from, to string) string {
	f := strings.Split(from, "/")
	tt := strings.Split(to, "/")
	if from == "." {
		f = nil
	}
	i := 0
	for i < len(f) && i < len(tt) && f[i] == tt[i] {
		i++
	}
	parts := make([]string, 0, len(f)-i+len(tt)-i)
	for j := i; j < len(f); j++ {
		parts = append(parts, "..")
	}
	parts = append(parts, tt[i:]...)
	return strings.Join(parts, "/")
}

func devPath(addr string) string { return pciRoot + "/" + addr }

// buildTree renders the sysfs of a state.
func buildTree(s *state) *tree {
	t := &tree{nodes: map[string]*node{".": {dir: true, names: map[string]bool{}}}}
	for _, d := range []string{"bus/pci/devices", "bus/pci/drivers", "bus/mdev/devices", "class/mdev_bus", "kernel/iommu_groups", pciRoot} {
		t.dir(d)
	}
	t.wo("bus/pci/drivers_probe", writeProbe)
	for _, drv := range []string{"nvidia", "vfio-pci", "snd_hda_intel"} {
		t.wo("bus/pci/drivers/"+drv+"/bind", writeBind(drv))
		t.wo("bus/pci/drivers/"+drv+"/unbind", writeUnbind(drv))
	}
	for _, g := range s.GPUs {
		renderFunc(t, &g.pciFunc)
		d := devPath(g.Address)
		if g.TotalVFs > 0 {
			t.file(d+"/sriov_totalvfs", strconv.Itoa(g.TotalVFs))
			t.file(d+"/sriov_numvfs", strconv.Itoa(len(g.VFs)))
		}
		m := g.model()
		for i, vf := range g.VFs {
			renderFunc(t, &vf.pciFunc)
			t.symlink(d+"/virtfn"+strconv.Itoa(i), devPath(vf.Address))
			t.symlink(devPath(vf.Address)+"/physfn", d)
		}
		switch {
		case m.MdevOnVFs():
			types := offers(g)
			for _, vf := range g.VFs {
				renderMdevParent(t, g, vf.Address, types)
			}
		case m.VGPU && m.Interface() == "mdev":
			renderMdevParent(t, g, g.Address, offers(g))
		case m.VGPU:
			var offer []simType // the same on every free VF of the GPU
			for _, st := range boardTypes(m) {
				if g.creatable(st) == nil {
					offer = append(offer, st)
				}
			}
			for _, vf := range g.VFs {
				renderVendorVF(t, vf, offer)
			}
		}
		for _, md := range g.Mdevs {
			md := md
			p := devPath(md.Parent) + "/" + md.UUID
			t.symlink(p+"/mdev_type", devPath(md.Parent)+"/mdev_supported_types/"+md.TypeID)
			t.wo(p+"/remove", func(s *state, data string) error { return writeMdevRemove(s, md.UUID, data) })
			t.symlink("bus/mdev/devices/"+md.UUID, p)
			t.symlink(devPath(md.Parent)+"/mdev_supported_types/"+md.TypeID+"/devices/"+md.UUID, p)
		}
	}
	for _, e := range s.Extra {
		renderFunc(t, e)
	}
	return t
}

func renderFunc(t *tree, f *pciFunc) {
	d := devPath(f.Address)
	t.symlink("bus/pci/devices/"+f.Address, d)
	t.file(d+"/vendor", fmt.Sprintf("0x%04x", f.Vendor))
	t.file(d+"/device", fmt.Sprintf("0x%04x", f.Device))
	t.file(d+"/class", fmt.Sprintf("0x%06x", f.Class))
	t.file(d+"/subsystem_vendor", fmt.Sprintf("0x%04x", f.Vendor))
	t.file(d+"/subsystem_device", "0x0000")
	t.file(d+"/numa_node", strconv.Itoa(f.NUMA))
	ov := f.DriverOverride
	if ov == "" {
		ov = "(null)"
	}
	addr := f.Address
	t.rw(d+"/driver_override", ov, func(s *state, data string) error { return writeOverride(s, addr, data) })
	grp := "kernel/iommu_groups/" + strconv.Itoa(f.Group)
	t.symlink(d+"/iommu_group", grp)
	t.symlink(grp+"/devices/"+f.Address, d)
	if f.Driver != "" {
		t.symlink(d+"/driver", "bus/pci/drivers/"+f.Driver)
		t.symlink("bus/pci/drivers/"+f.Driver+"/"+f.Address, d)
	}
}

// offered pairs each type of a board with whether one more fits now.
type offered struct {
	simType
	ok bool
}

func offers(g *gpuState) []offered {
	var out []offered
	for _, st := range boardTypes(g.model()) {
		out = append(out, offered{simType: st, ok: g.creatable(st) == nil})
	}
	return out
}

func renderMdevParent(t *tree, g *gpuState, parent string, types []offered) {
	d := devPath(parent)
	t.symlink("class/mdev_bus/"+parent, d)
	onVF := parent != g.Address
	taken := false
	for _, md := range g.Mdevs {
		if md.Parent == parent {
			taken = true
		}
	}
	for _, o := range types {
		st := o.simType
		p := d + "/mdev_supported_types/" + st.MdevID
		avail := 0
		if o.ok && !(onVF && taken) {
			avail = 1
			if !onVF {
				avail = st.MaxInstances - countType(g, st.Name)
			}
		}
		t.file(p+"/name", "GRID "+st.Name)
		t.file(p+"/description", fmt.Sprintf("num_heads=4, frl_config=60, framebuffer=%dM, max_resolution=7680x4320, max_instance=%d", st.Memory>>20, st.MaxInstances))
		t.file(p+"/device_api", "vfio-pci")
		t.file(p+"/available_instances", strconv.Itoa(avail))
		t.dir(p + "/devices")
		t.wo(p+"/create", func(s *state, data string) error { return writeMdevCreate(s, parent, st.MdevID, data) })
	}
}

func countType(g *gpuState, name string) int {
	n := 0
	for _, v := range g.vgpus() {
		if v.t.Name == name {
			n++
		}
	}
	return n
}

func renderVendorVF(t *tree, vf *vfState, offer []simType) {
	d := devPath(vf.Address) + "/nvidia"
	var b strings.Builder
	b.WriteString("ID    : vGPU Name\n")
	if vf.VGPUType == 0 {
		for _, st := range offer {
			fmt.Fprintf(&b, "%-5d : NVIDIA %s\n", st.VFIOID, st.Name)
		}
	}
	t.add(d+"/creatable_vgpu_types", &node{data: b.String()})
	addr := vf.Address
	t.rw(d+"/current_vgpu_type", strconv.Itoa(vf.VGPUType), func(s *state, data string) error { return writeVFType(s, addr, data) })
	if vf.VGPUType != 0 {
		gi := 0
		if vf.GI != 0 {
			gi = vf.GI
		}
		t.file(d+"/gpu_instance_id", strconv.Itoa(gi))
		t.file(d+"/placement_id", "0")
		t.file(d+"/vgpu_params", "")
	}
}

// Errors as the kernel returns them from a write(2) on sysfs.
func errno(op, p string, e syscall.Errno, why string) error {
	return &fs.PathError{Op: op, Path: "/sys/" + p, Err: &reasonErr{errno: e, why: why}}
}

// reasonErr is an errno with the reason the simulated driver would log to
// dmesg; errors.Is matches the errno.
type reasonErr struct {
	errno syscall.Errno
	why   string
}

func (e *reasonErr) Error() string        { return e.errno.Error() + " (simulated driver: " + e.why + ")" }
func (e *reasonErr) Is(target error) bool { return target == e.errno || e.errno.Is(target) }
func (e *reasonErr) Unwrap() error        { return e.errno }

type sysErr struct {
	e   syscall.Errno
	why string
}

func (e sysErr) Error() string { return e.why }

func fail(e syscall.Errno, format string, args ...any) error {
	return sysErr{e: e, why: fmt.Sprintf(format, args...)}
}

func writeMdevCreate(s *state, parent, typeID, data string) error {
	id, err := uuid.Parse(strings.TrimSpace(data))
	if err != nil {
		return fail(syscall.EINVAL, "%q is not a UUID", strings.TrimSpace(data))
	}
	u := id.String()
	if m, _ := s.mdev(u); m != nil {
		return fail(syscall.EEXIST, "mdev %s already exists", u)
	}
	_, g := s.function(parent)
	if g == nil {
		return fail(syscall.ENODEV, "no device %s", parent)
	}
	st, ok := typeByMdevID(g.model(), typeID)
	if !ok {
		return fail(syscall.EINVAL, "unknown type %s", typeID)
	}
	for _, md := range g.Mdevs {
		if md.Parent == parent && parent != g.Address {
			return fail(syscall.EUSERS, "VF %s already holds mdev %s", parent, md.UUID)
		}
	}
	if err := g.creatable(st); err != nil {
		return fail(syscall.EUSERS, "%v", err)
	}
	md := &mdev{UUID: u, Parent: parent, TypeID: typeID}
	if st.MIGBacked() {
		md.GI = g.freeGI(st.profile).ID
	}
	g.Mdevs = append(g.Mdevs, md)
	return nil
}

func writeMdevRemove(s *state, u, data string) error {
	if strings.TrimSpace(data) != "1" {
		return fail(syscall.EINVAL, "write 1 to remove")
	}
	if s.InUse[u] {
		return fail(syscall.EBUSY, "mdev %s is in use by a VM", u)
	}
	_, g := s.mdev(u)
	if g == nil {
		return fail(syscall.ENODEV, "no mdev %s", u)
	}
	for i, md := range g.Mdevs {
		if md.UUID == u {
			g.Mdevs = append(g.Mdevs[:i], g.Mdevs[i+1:]...)
			break
		}
	}
	return nil
}

func writeVFType(s *state, addr, data string) error {
	id, err := strconv.Atoi(strings.TrimSpace(data))
	if err != nil || id < 0 {
		return fail(syscall.EINVAL, "%q is not a vGPU type ID", strings.TrimSpace(data))
	}
	_, g := s.function(addr)
	if g == nil {
		return fail(syscall.ENODEV, "no device %s", addr)
	}
	vf := g.vf(addr)
	if id == 0 {
		if vf.VGPUType != 0 && s.InUse[addr] {
			return fail(syscall.EBUSY, "vGPU on %s is in use by a VM", addr)
		}
		vf.VGPUType, vf.GI = 0, 0
		return nil
	}
	if vf.VGPUType != 0 {
		return fail(syscall.EBUSY, "VF %s already holds vGPU type %d", addr, vf.VGPUType)
	}
	st, ok := typeByVFIOID(g.model(), id)
	if !ok {
		return fail(syscall.EINVAL, "type %d is not supported on %s", id, g.model().Name)
	}
	if err := g.creatable(st); err != nil {
		return fail(syscall.EINVAL, "type %d (%s) is not creatable: %v", id, st.Name, err)
	}
	vf.VGPUType = id
	if st.MIGBacked() {
		vf.GI = g.freeGI(st.profile).ID
	}
	return nil
}

func writeOverride(s *state, addr, data string) error {
	f, _ := s.function(addr)
	if f == nil {
		return fail(syscall.ENODEV, "no device %s", addr)
	}
	v := strings.TrimSpace(data)
	if v == "(null)" {
		v = ""
	}
	f.DriverOverride = v
	return nil
}

func defaultDriver(f *pciFunc) string {
	switch {
	case f.Class>>8 == 0x0403:
		return "snd_hda_intel"
	default:
		return "nvidia"
	}
}

func writeProbe(s *state, data string) error {
	addr := strings.TrimSpace(data)
	f, _ := s.function(addr)
	if f == nil {
		return fail(syscall.ENODEV, "no device %s", addr)
	}
	if f.Driver != "" {
		return nil
	}
	f.Driver = defaultDriver(f)
	if f.DriverOverride != "" {
		f.Driver = f.DriverOverride
	}
	return nil
}

func writeBind(drv string) writeFunc {
	return func(s *state, data string) error {
		addr := strings.TrimSpace(data)
		f, _ := s.function(addr)
		if f == nil {
			return fail(syscall.ENODEV, "no device %s", addr)
		}
		if f.Driver != "" {
			return fail(syscall.EBUSY, "%s is bound to %s", addr, f.Driver)
		}
		if f.DriverOverride != "" && f.DriverOverride != drv {
			return fail(syscall.ENODEV, "driver_override of %s is %s", addr, f.DriverOverride)
		}
		if drv != "vfio-pci" && drv != defaultDriver(f) {
			return fail(syscall.ENODEV, "%s does not drive %s", drv, addr)
		}
		f.Driver = drv
		return nil
	}
}

func writeUnbind(drv string) writeFunc {
	return func(s *state, data string) error {
		addr := strings.TrimSpace(data)
		f, g := s.function(addr)
		if f == nil || f.Driver != drv {
			return fail(syscall.ENODEV, "%s is not bound to %s", addr, drv)
		}
		if g != nil && f == &g.pciFunc && drv == "nvidia" {
			if why := g.hasWork(); why != "" {
				return fail(syscall.EBUSY, "GPU %s holds %s", addr, why)
			}
		}
		if s.InUse[addr] {
			return fail(syscall.EBUSY, "%s is in use by a VM", addr)
		}
		f.Driver = ""
		return nil
	}
}

// resolve walks p through the tree, following links, and returns the
// canonical path of the entry (links in the last element are followed only
// when follow is true).
func (t *tree) resolve(p string, follow bool) (string, *node, error) {
	k := resolveKey{p, follow}
	if r, ok := t.resolved.Load(k); ok {
		r := r.(resolution)
		return r.canon, r.n, r.err
	}
	canon, n, err := t.walk(p, follow)
	t.resolved.Store(k, resolution{canon, n, err})
	return canon, n, err
}

// walk is resolve without the memo.
func (t *tree) walk(p string, follow bool) (string, *node, error) {
	parts := strings.Split(host.Clean(p), "/")
	if parts[0] == "." {
		return ".", t.nodes["."], nil
	}
	cur := "."
	for hops := 0; len(parts) > 0; {
		name := parts[0]
		parts = parts[1:]
		next := path.Join(cur, name)
		n, ok := t.nodes[next]
		if !ok {
			return "", nil, syscall.ENOENT
		}
		if n.link != "" && (follow || len(parts) > 0) {
			hops++
			if hops > 40 {
				return "", nil, syscall.ELOOP
			}
			target := path.Join(path.Dir(next), n.link)
			rest := strings.Split(target, "/")
			parts = append(rest, parts...)
			cur = "."
			continue
		}
		cur = next
	}
	return cur, t.nodes[cur], nil
}

// Host is a simulated GPU server. It implements host.SysFS.
type Host struct {
	st     *store
	preset string
}

var _ host.SysFS = (*Host)(nil)

// Open opens the simulated server whose state lives in dir, creating it from
// the preset on first use. Every process that opens the same directory sees
// the same host.
func Open(dir, preset string) (*Host, error) {
	st, err := openStore(dir, preset)
	if err != nil {
		return nil, err
	}
	return &Host{st: st, preset: preset}, nil
}

// Preset returns the preset name.
func (h *Host) Preset() string { return h.preset }

// Describe implements host.SysFS.
func (h *Host) Describe() string { return "simulated GPU server (preset " + h.preset + ")" }

// ReadFile implements host.SysFS.
func (h *Host) ReadFile(name string) ([]byte, error) {
	_, t, err := h.st.read()
	if err != nil {
		return nil, err
	}
	_, n, err := t.resolve(name, true)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: "/sys/" + host.Clean(name), Err: err}
	}
	if n.dir {
		return nil, &fs.PathError{Op: "read", Path: "/sys/" + host.Clean(name), Err: syscall.EISDIR}
	}
	if n.write != nil && n.data == "" {
		return nil, &fs.PathError{Op: "open", Path: "/sys/" + host.Clean(name), Err: syscall.EACCES}
	}
	return []byte(n.data), nil
}

// WriteFile implements host.SysFS: the write is applied with the kernel's
// rules, atomically; a refused write changes nothing.
func (h *Host) WriteFile(name string, data []byte) error {
	clean := host.Clean(name)
	return h.st.update(func(s *state, t *tree) error {
		_, n, err := t.resolve(clean, true)
		if err != nil {
			return &fs.PathError{Op: "open", Path: "/sys/" + clean, Err: err}
		}
		if n.dir {
			return &fs.PathError{Op: "open", Path: "/sys/" + clean, Err: syscall.EISDIR}
		}
		if n.write == nil {
			return &fs.PathError{Op: "open", Path: "/sys/" + clean, Err: syscall.EACCES}
		}
		if err := n.write(s, string(data)); err != nil {
			if se, ok := err.(sysErr); ok {
				return errno("write", clean, se.e, se.why)
			}
			return err
		}
		return nil
	})
}

// ReadDir implements host.SysFS.
func (h *Host) ReadDir(name string) ([]string, error) {
	_, t, err := h.st.read()
	if err != nil {
		return nil, err
	}
	_, n, err := t.resolve(name, true)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: "/sys/" + host.Clean(name), Err: err}
	}
	if !n.dir {
		return nil, &fs.PathError{Op: "readdirent", Path: "/sys/" + host.Clean(name), Err: syscall.ENOTDIR}
	}
	names := make([]string, 0, len(n.names))
	for k := range n.names {
		names = append(names, k)
	}
	sort.Strings(names)
	return names, nil
}

// Readlink implements host.SysFS.
func (h *Host) Readlink(name string) (string, error) {
	_, t, err := h.st.read()
	if err != nil {
		return "", err
	}
	_, n, err := t.resolve(name, false)
	if err != nil {
		return "", &fs.PathError{Op: "readlink", Path: "/sys/" + host.Clean(name), Err: err}
	}
	if n.link == "" {
		return "", &fs.PathError{Op: "readlink", Path: "/sys/" + host.Clean(name), Err: syscall.EINVAL}
	}
	return n.link, nil
}

// Exists implements host.SysFS.
func (h *Host) Exists(name string) bool {
	_, t, err := h.st.read()
	if err != nil {
		return false
	}
	_, _, err = t.resolve(name, true)
	return err == nil
}
