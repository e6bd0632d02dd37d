package e2e

import (
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"time"

	"libvirt.org/go/libvirtxml"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/hypervisor"
)

// checkHost checks the simulated host and libvirt against the VMs that
// should be live (by ID), as the API shows them:
//
//   - the backends report managed devices for these VMs only, one per GPU
//     the API lists, with the same device ID;
//   - libvirt holds one domain per VM, running, with gpuvm's metadata, and
//     no other domain of this world;
//   - each domain's hostdevs are its devices' hostdevs as the backends
//     describe them (none when attached is false: a real QEMU gets a
//     simulated GPU's domain without it);
//   - the pool holds exactly the volumes the domains own.
func (w *world) checkHost(hv *hypervisor.Conn, live map[string]api.VM, attached bool) {
	w.t.Helper()
	devs := devicesOf(w.inventory())
	for vmID, ds := range devs {
		if _, ok := live[vmID]; !ok {
			for _, d := range ds {
				w.t.Errorf("leaked device: %s %s on GPU %s for VM %q, which is not live", d.Kind, d.ID, d.GPU, vmID)
			}
		}
	}
	ls := w.libvirtState(hv)
	byVM := map[string]hypervisor.Info{}
	var wantVolumes []string
	for name, d := range ls.domains {
		if _, ok := live[d.Metadata.VMID]; !ok {
			w.t.Errorf("leaked domain %s (vm %q, %s)", name, d.Metadata.VMID, d.State)
			continue
		}
		if other, dup := byVM[d.Metadata.VMID]; dup {
			w.t.Errorf("VM %s has two domains: %s and %s", d.Metadata.VMID, other.Name, name)
		}
		byVM[d.Metadata.VMID] = d
		for _, v := range d.Metadata.Volumes {
			if v.Pool == w.pool {
				wantVolumes = append(wantVolumes, v.Name)
			}
		}
	}
	slices.Sort(wantVolumes)
	if !slices.Equal(wantVolumes, ls.volumes) {
		w.t.Errorf("pool %s holds volumes %v; the domains own %v", w.pool, ls.volumes, wantVolumes)
	}
	for id, vm := range live {
		ds := devs[id]
		if len(ds) != len(vm.GPUs) {
			w.t.Errorf("VM %s (%s) holds %d GPUs, the backends report %d devices for it: %+v", vm.Name, id, len(vm.GPUs), len(ds), ds)
		}
		var want []string
		for _, d := range ds {
			if !slices.ContainsFunc(vm.GPUs, func(g api.VMGPU) bool { return g.Device == d.ID && g.Address == d.GPU }) {
				w.t.Errorf("VM %s: the device %s on %s is not among its GPUs %+v", vm.Name, d.ID, d.GPU, vm.GPUs)
			}
			if attached {
				want = append(want, hostdevStrings(d.Hostdev)...)
			}
		}
		dom, ok := byVM[id]
		if !ok {
			w.t.Errorf("VM %s (%s) has no domain; libvirt holds %s", vm.Name, id, ls)
			continue
		}
		if dom.State != hypervisor.StateRunning {
			w.t.Errorf("the domain %s of VM %s is %s, not running", dom.Name, vm.Name, dom.State)
		}
		if dom.Metadata.Owner != vm.Owner || dom.Metadata.Profile != vm.Profile {
			w.t.Errorf("domain %s metadata %+v; VM owner %s, profile %s", dom.Name, dom.Metadata, vm.Owner, vm.Profile)
		}
		got := w.domainHostdevs(hv, dom.UUID)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			w.t.Errorf("domain %s of VM %s has hostdevs %q, want %q", dom.Name, vm.Name, got, want)
		}
	}
}

// domainHostdevs reads a domain's hostdevs as hostdevStrings writes them.
func (w *world) domainHostdevs(hv *hypervisor.Conn, uuid string) []string {
	w.t.Helper()
	doc, err := hv.XML(w.ctx(30*time.Second), uuid, false)
	if err != nil {
		w.t.Fatalf("domain %s XML: %v", uuid, err)
	}
	var d libvirtxml.Domain
	if err := d.Unmarshal(doc); err != nil {
		w.t.Fatalf("domain %s XML: %v", uuid, err)
	}
	var out []string
	if d.Devices == nil {
		return out
	}
	for _, h := range d.Devices.Hostdevs {
		switch {
		case h.SubsysMDev != nil && h.SubsysMDev.Source != nil && h.SubsysMDev.Source.Address != nil:
			out = append(out, "mdev "+strings.ToLower(h.SubsysMDev.Source.Address.UUID))
		case h.SubsysPCI != nil && h.SubsysPCI.Source != nil && h.SubsysPCI.Source.Address != nil:
			a := h.SubsysPCI.Source.Address
			out = append(out, fmt.Sprintf("pci %04x:%02x:%02x.%x managed=%s", deref(a.Domain), deref(a.Bus), deref(a.Slot), deref(a.Function), h.Managed))
		default:
			out = append(out, fmt.Sprintf("other hostdev %+v", h))
		}
	}
	slices.Sort(out)
	return out
}

// hostdevStrings is what a backend's hostdev must look like in a domain
// (pkg/hypervisor/domain: an mdev by UUID; each PCI function, managed as
// the backend says). Whether an mdev drives the display is the profile's
// choice as much as the backend's, and is not compared.
func hostdevStrings(h api.Hostdev) []string {
	switch h.Type {
	case "mdev":
		return []string{"mdev " + strings.ToLower(h.UUID)}
	case "pci":
		managed := "no"
		if h.Managed {
			managed = "yes"
		}
		var out []string
		for _, a := range h.Addresses {
			out = append(out, "pci "+strings.ToLower(a)+" managed="+managed)
		}
		return out
	}
	return []string{"unknown hostdev type " + h.Type}
}

func deref(p *uint) uint {
	if p == nil {
		return 0
	}
	return *p
}

// jsonDiff lists the paths where two JSON documents differ (at most max).
func jsonDiff(a, b string, max int) []string {
	var x, y any
	if err := json.Unmarshal([]byte(a), &x); err != nil {
		return []string{"before: " + err.Error()}
	}
	if err := json.Unmarshal([]byte(b), &y); err != nil {
		return []string{"after: " + err.Error()}
	}
	var out []string
	var walk func(path string, x, y any)
	walk = func(path string, x, y any) {
		if len(out) >= max {
			return
		}
		switch xv := x.(type) {
		case map[string]any:
			yv, ok := y.(map[string]any)
			if !ok {
				break
			}
			keys := map[string]bool{}
			for k := range xv {
				keys[k] = true
			}
			for k := range yv {
				keys[k] = true
			}
			sorted := slices.Sorted(maps.Keys(keys))
			for _, k := range sorted {
				walk(path+"."+k, xv[k], yv[k])
			}
			return
		case []any:
			yv, ok := y.([]any)
			if !ok || len(xv) != len(yv) {
				break
			}
			for i := range xv {
				walk(fmt.Sprintf("%s[%d]", path, i), xv[i], yv[i])
			}
			return
		}
		if !reflect.DeepEqual(x, y) {
			xs, _ := json.Marshal(x)
			ys, _ := json.Marshal(y)
			out = append(out, fmt.Sprintf("%s: %.300s -> %.300s", path, xs, ys))
		}
	}
	walk("", x, y)
	return out
}
