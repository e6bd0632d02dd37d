package kit

import (
	"fmt"
	"sort"

	"github.com/gpuvm/gpuvm/pkg/backend"
	"github.com/gpuvm/gpuvm/pkg/gpu"
	"github.com/gpuvm/gpuvm/pkg/host"
)

// VGPU is a vGPU that exists on a GPU, made through either kernel interface.
type VGPU struct {
	ID     string // mdev UUID, or VF address (vendor VFIO)
	Parent string // mdev parent (GPU or VF), or the VF
	Type   string // canonical type name
	// MIGBacked is true for types that run on a MIG GPU instance.
	MIGBacked bool
	// GPUInstance is the GI the vGPU runs on when the host says (vendor VFIO
	// gpu_instance_id), else -1.
	GPUInstance int
}

// Offer is a vGPU type with the places it can be created now.
type Offer struct {
	Type      string
	HostID    string // "nvidia-N" or the numeric vendor-VFIO ID
	Memory    uint64
	Max       int
	MIGBacked bool
	Profile   string // MIG profile of a MIG-backed type
	// Parents are the mdev parents or VFs that can take one more now.
	Parents []string
	// FreeCount is how many more can be created: the sum of
	// available_instances (mdev), or the free VFs listing it (vendor VFIO).
	FreeCount int
}

// VGPUView is the vGPU side of one GPU: its interface, what exists and what
// can still be made.
type VGPUView struct {
	Interface gpu.VGPUInterface
	VGPUs     []VGPU
	Offers    []Offer
	FreeVFs   int // VFs (or mdev parents) holding nothing
}

// Offer is the driver's offer of the vGPU type named typeName; nil when it
// offers none now. The last one listed wins, as the driver lists each once.
func (v *VGPUView) Offer(typeName string) *Offer {
	var o *Offer
	for i := range v.Offers {
		if v.Offers[i].Type == typeName {
			o = &v.Offers[i]
		}
	}
	return o
}

func typeInfo(m gpu.Model, name string) (gpu.VGPUTypeInfo, bool) {
	t, err := m.VGPUType(name)
	return t, err == nil
}

// ReadVGPUs reads the vGPU side of a GPU from sysfs.
func ReadVGPUs(fsys host.SysFS, g host.GPU, names *TypeNames) (VGPUView, error) {
	v := VGPUView{Interface: host.DetectInterface(fsys, g.PCIDevice)}
	offers := map[string]*Offer{}
	offer := func(name, hostID string, mem uint64, max int, parent string, n int) {
		o := offers[name]
		if o == nil {
			o = &Offer{Type: name, HostID: hostID, Memory: mem, Max: max}
			if t, ok := typeInfo(g.Model, name); ok {
				o.MIGBacked, o.Profile = t.MIGBacked(), t.MIGProfile
				if o.Max == 0 {
					o.Max = t.MaxInstances
				}
				if o.Memory == 0 {
					o.Memory = t.Memory
				}
			} else if pt, err := gpu.ParseVGPUType(name); err == nil {
				o.MIGBacked = pt.MIGBacked()
				if o.Memory == 0 {
					o.Memory = pt.Memory
				}
			}
			offers[name] = o
		}
		if n > 0 {
			o.Parents = append(o.Parents, parent)
			o.FreeCount += n
		}
	}
	switch v.Interface {
	case gpu.InterfaceMdev:
		parents := []string{g.Address}
		if !host.IsMdevParent(fsys, g.Address) {
			parents = g.VFs
		}
		mdevs, err := host.ListMdevs(fsys)
		if err != nil {
			return v, fmt.Errorf("GPU %s: %w", g.Address, err)
		}
		held := map[string]bool{}
		for _, p := range parents {
			types, err := host.MdevTypes(fsys, p)
			if err != nil {
				return v, fmt.Errorf("GPU %s: %w", g.Address, err)
			}
			names := map[string]string{}
			for _, t := range types {
				names[t.ID] = t.Name
				offer(t.Name, t.ID, t.Memory, t.MaxInstances, p, t.Available)
			}
			for _, md := range mdevs {
				if md.Parent == p {
					held[p] = true
					name := names[md.TypeID]
					t, _ := gpu.ParseVGPUType(name)
					v.VGPUs = append(v.VGPUs, VGPU{ID: md.UUID, Parent: p, Type: name, MIGBacked: t.MIGBacked(), GPUInstance: -1})
				}
			}
		}
		if len(parents) != 1 || parents[0] != g.Address { // VFs (none, when sysfs changed under us)
			v.FreeVFs = len(parents) - len(held)
		}
	case gpu.InterfaceVendorVFIO:
		type vfRead struct {
			addr      string
			cur       int
			creatable []host.VFType
		}
		var vfs []vfRead
		learned := map[int]string{}
		for _, vf := range g.VFs {
			if !host.IsVendorVFIOVF(fsys, vf) {
				continue
			}
			cur, creatable, err := host.VFState(fsys, vf)
			if err != nil {
				return v, fmt.Errorf("GPU %s: %w", g.Address, err)
			}
			for _, t := range creatable {
				learned[t.ID] = t.Name
			}
			vfs = append(vfs, vfRead{vf, cur, creatable})
		}
		names.Learn(learned)
		for _, r := range vfs {
			if r.cur != 0 {
				name, ok := names.Name(r.cur)
				if !ok {
					// Never a bare number where people read it.
					name = fmt.Sprintf("unnamed vGPU type (ID %d)", r.cur)
				}
				pt, _ := gpu.ParseVGPUType(name)
				gi, err := host.VFGPUInstanceID(fsys, r.addr)
				if err != nil || !pt.MIGBacked() {
					gi = -1
				}
				v.VGPUs = append(v.VGPUs, VGPU{ID: r.addr, Parent: r.addr, Type: name, MIGBacked: pt.MIGBacked(), GPUInstance: gi})
				continue
			}
			v.FreeVFs++
			for _, t := range r.creatable {
				offer(t.Name, fmt.Sprint(t.ID), 0, 0, r.addr, 1)
			}
		}
		// Every type of the board whose ID is known is worth listing,
		// creatable now or not.
		for _, t := range g.Model.VGPUTypes() {
			if id, ok := names.ID(t.Name); ok {
				offer(t.Name, fmt.Sprint(id), t.Memory, t.MaxInstances, "", 0)
			}
		}
	}
	for _, o := range offers {
		if o.Max > 0 {
			used := 0
			for _, x := range v.VGPUs {
				if x.Type == o.Type {
					used++
				}
			}
			if o.FreeCount > o.Max-used {
				o.FreeCount = max(o.Max-used, 0)
			}
		}
		v.Offers = append(v.Offers, *o)
	}
	sort.Slice(v.Offers, func(i, j int) bool {
		if v.Offers[i].Memory != v.Offers[j].Memory {
			return v.Offers[i].Memory < v.Offers[j].Memory
		}
		return v.Offers[i].Type < v.Offers[j].Type
	})
	return v, nil
}

// HostdevFor says how libvirt attaches a vGPU (REFERENCE.md §1).
func HostdevFor(v VGPU, iface gpu.VGPUInterface) backend.Hostdev {
	t, _ := gpu.ParseVGPUType(v.Type)
	display := t.Series != gpu.SeriesC
	if iface == gpu.InterfaceVendorVFIO {
		return backend.Hostdev{Type: backend.HostdevPCI, Addresses: []string{v.ID}, Managed: false, Display: display}
	}
	return backend.Hostdev{Type: backend.HostdevMdev, UUID: v.ID, Display: display}
}

// CreateVGPU makes one vGPU of the offer's type on its first free parent
// and returns it. uuid is used for mdevs.
func CreateVGPU(fsys host.SysFS, g host.GPU, iface gpu.VGPUInterface, o Offer, uuid string) (VGPU, error) {
	if len(o.Parents) == 0 || o.FreeCount == 0 {
		return VGPU{}, backend.Errorf(backend.CodeExhausted, g.Address, "no capacity left for vGPU type %s", o.Type)
	}
	parent := o.Parents[0]
	v := VGPU{Parent: parent, Type: o.Type, MIGBacked: o.MIGBacked, GPUInstance: -1}
	switch iface {
	case gpu.InterfaceMdev:
		if err := host.CreateMdev(fsys, parent, o.HostID, uuid); err != nil {
			return VGPU{}, HostError(g.Address, fmt.Sprintf("create %s mdev %s on %s", o.Type, uuid, parent), err)
		}
		v.ID = uuid
	case gpu.InterfaceVendorVFIO:
		var id int
		fmt.Sscan(o.HostID, &id)
		if err := host.SetVFType(fsys, parent, id); err != nil {
			return VGPU{}, HostError(g.Address, fmt.Sprintf("create %s vGPU on VF %s", o.Type, parent), err)
		}
		cur, _, err := host.VFState(fsys, parent)
		if err != nil || cur != id {
			_ = host.SetVFType(fsys, parent, 0)
			return VGPU{}, backend.Errorf(backend.CodeHost, g.Address, "VF %s reads type %d after writing %d", parent, cur, id)
		}
		v.ID = parent
		if o.MIGBacked {
			if gi, err := host.VFGPUInstanceID(fsys, parent); err == nil {
				v.GPUInstance = gi
			}
		}
	default:
		return VGPU{}, backend.Errorf(backend.CodeUnsupported, g.Address, "GPU offers no vGPU interface")
	}
	return v, nil
}

// RemoveVGPU deletes a vGPU; one that does not exist is not an error.
func RemoveVGPU(fsys host.SysFS, gpuAddr, id string) error {
	if _, err := host.ValidateAddress(id); err == nil {
		if !host.IsVendorVFIOVF(fsys, id) {
			return nil
		}
		cur, _, err := host.VFState(fsys, id)
		if err != nil {
			return HostError(gpuAddr, "read VF "+id, err)
		}
		if cur == 0 {
			return nil
		}
		if err := host.SetVFType(fsys, id, 0); err != nil {
			return HostError(gpuAddr, "remove vGPU on VF "+id, err)
		}
		return nil
	}
	if err := host.RemoveMdev(fsys, id); err != nil {
		return HostError(gpuAddr, "remove mdev "+id, err)
	}
	return nil
}

// FindGPU reads the GPU at a validated address.
func FindGPU(fsys host.SysFS, addr string) (host.GPU, error) {
	a, err := host.ValidateAddress(addr)
	if err != nil {
		return host.GPU{}, backend.Errorf(backend.CodeInvalid, addr, "%v", err)
	}
	gpus, _ := host.ListGPUs(fsys)
	for _, g := range gpus {
		if g.Address == a {
			return g, nil
		}
	}
	return host.GPU{}, backend.Errorf(backend.CodeNotFound, a, "no NVIDIA GPU at this address on %s", fsys.Describe())
}
