package scheduler

import (
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/gpu"
)

// A GPU serves the kinds whose backend can create on it now (the backends
// do not switch modes): FromHost narrows auto to the one such kind, and
// makes a GPU pinned to a kind its backend cannot use now unavailable.
func TestFromHostNarrowsModes(t *testing.T) {
	tests := []struct {
		name     string
		model    string
		backends map[string]string
		config   gpu.Mode
		allow    gpu.Mode
		unavail  string // part of the reason; "" none
	}{
		{"MIG on", "H100 PCIe 80GB", map[string]string{"mig": "", "vgpu": "MIG mode is enabled", "passthrough": "VFs are enabled"}, gpu.ModeAuto, gpu.ModeMIG, ""},
		{"VFs on", "H100 PCIe 80GB", map[string]string{"mig": "MIG mode is disabled", "vgpu": "", "passthrough": "VFs are enabled"}, gpu.ModeAuto, gpu.ModeVGPU, ""},
		{"bare", "H100 PCIe 80GB", map[string]string{"mig": "MIG mode is disabled", "vgpu": "VFs are not enabled", "passthrough": ""}, gpu.ModeAuto, gpu.ModePassthrough, ""},
		{"two kinds: the configuration decides", "L40S", map[string]string{"vgpu": "", "passthrough": ""}, gpu.ModeAuto, gpu.ModeAuto, ""},
		{"pinned and usable", "H100 PCIe 80GB", map[string]string{"mig": "", "vgpu": "MIG mode is enabled"}, gpu.ModeMIG, gpu.ModeMIG, ""},
		{"pinned, its backend cannot", "H100 PCIe 80GB", map[string]string{"mig": "MIG mode is disabled", "vgpu": ""}, gpu.ModeMIG, gpu.ModeMIG, "configured for mig: mig: MIG mode is disabled"},
		{"pinned, no such backend", "L40S", map[string]string{"vgpu": ""}, gpu.ModePassthrough, gpu.ModePassthrough, "no passthrough backend reports it"},
		{"nobody can", "L40S", map[string]string{"vgpu": "no driver", "passthrough": "in use by the host"}, gpu.ModeAuto, gpu.ModeAuto, "passthrough: in use by the host; vgpu: no driver"},
		{"the board has no MIG", "L40S", map[string]string{"mig": "", "vgpu": "x"}, gpu.ModeAuto, gpu.ModeAuto, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			hi := gpu.HostInventory{GPUs: []gpu.HostGPU{{Address: "0000:18:00.0", Model: tc.model, Backends: tc.backends}}}
			h, _ := FromHost("n", hi, func(string, string) gpu.Mode { return tc.config })
			g := h.GPUs[0]
			if g.Allow != tc.allow || (tc.unavail == "") != (g.Unavailable == "") || !strings.Contains(g.Unavailable, tc.unavail) {
				t.Errorf("allow %q unavailable %q; want %q %q", g.Allow, g.Unavailable, tc.allow, tc.unavail)
			}
			if _, err := NewInventory([]HostSpec{h}, nil); err != nil {
				t.Errorf("inventory: %v", err)
			}
		})
	}
}

// PlacementOf describes a VM known only by its allocations as Place
// described it when it was placed.
func TestPlacementOf(t *testing.T) {
	inv, err := NewInventory([]HostSpec{
		{Name: "n", GPUs: []GPUSpec{
			{Address: "0000:18:00.0", Model: "H100 PCIe 80GB", Mode: gpu.ModeMIG, Allow: gpu.ModeMIG},
			{Address: "0000:41:00.0", Model: "L40S", Mode: gpu.ModeVGPU, Allow: gpu.ModeVGPU},
			{Address: "0000:81:00.0", Model: "L40S", Allow: gpu.ModePassthrough, IOMMUGroup: "7"},
			{Address: "0000:82:00.0", Model: "L40S", Allow: gpu.ModePassthrough, IOMMUGroup: "7"},
		}},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []Need{
		{Kind: gpu.KindMIG, Profile: "3g.40gb", Count: 2},
		{Kind: gpu.KindVGPU, Type: "L40S-12Q"},
		{Kind: gpu.KindPassthrough},
	} {
		p, why := inv.Place(n, PlaceOptions{Now: t0, End: t0.Add(time.Hour)})
		if !why.OK() {
			t.Fatalf("%s: %v", n, why)
		}
		id := n.Key()
		if err := inv.Allocate(id, p, t0.Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
		// Rebuild from the allocation rows alone, as the orchestrator does.
		again, err := NewInventory([]HostSpec{{Name: "n", GPUs: []GPUSpec{
			{Address: "0000:18:00.0", Model: "H100 PCIe 80GB", Mode: gpu.ModeMIG, Allow: gpu.ModeMIG},
			{Address: "0000:41:00.0", Model: "L40S", Mode: gpu.ModeVGPU, Allow: gpu.ModeVGPU},
			{Address: "0000:81:00.0", Model: "L40S", Allow: gpu.ModePassthrough, IOMMUGroup: "7"},
			{Address: "0000:82:00.0", Model: "L40S", Allow: gpu.ModePassthrough, IOMMUGroup: "7"},
		}}}, inv.Allocations())
		if err != nil {
			t.Fatal(err)
		}
		got, ok := again.PlacementOf(id)
		for i := range p.Devices {
			p.Devices[i].SwitchMode = false // a choice's detail, not what is held
		}
		sort.SliceStable(p.Devices, func(i, j int) bool { return p.Devices[i].Start < p.Devices[j].Start }) // one GPU each
		if !ok || got.String() != p.String() || got.Share() != p.Share() || len(got.Devices) != len(p.Devices) {
			t.Errorf("%s: %+v, want %+v", n, got, p)
			continue
		}
		for i := range got.Devices {
			if got.Devices[i].Memory != p.Devices[i].Memory || got.Devices[i].Size != p.Devices[i].Size {
				t.Errorf("%s device %d: %+v, want %+v", n, i, got.Devices[i], p.Devices[i])
			}
		}
	}
	if _, ok := inv.PlacementOf("nobody"); ok {
		t.Error("a VM with no devices has a placement")
	}
}

// A pinned MIG layout that a plain first-fit carve cannot fit, but another
// arrangement does (as the configuration's check accepts it).
func TestMIGLayoutCarveBacktracks(t *testing.T) {
	spec := HostSpec{Name: "n", GPUs: []GPUSpec{{Address: "0000:5d:00.0", Model: "H100 PCIe 80GB", Allow: gpu.ModeMIG,
		MIGLayout: []string{"3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"}}}}
	inv, err := NewInventory([]HostSpec{spec}, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Every instance of the layout can be placed, and only those.
	for _, prof := range []string{"3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"} {
		p, why := inv.Place(Need{Kind: gpu.KindMIG, Profile: prof}, PlaceOptions{Now: t0})
		if !why.OK() {
			t.Fatalf("%s: %v", prof, why)
		}
		if err := inv.Allocate(prof+p.Devices[0].String(), p, time.Time{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, why := inv.Place(Need{Kind: gpu.KindMIG, Profile: "1g.10gb"}, PlaceOptions{Now: t0}); why.OK() {
		t.Error("a fifth instance fits a four-instance layout")
	}
	// A layout that does not fit at all is still refused.
	spec.GPUs[0].MIGLayout = []string{"4g.40gb", "4g.40gb"}
	if _, err := NewInventory([]HostSpec{spec}, nil); err == nil || !strings.Contains(err.Error(), "does not fit") {
		t.Errorf("two 4g.40gb: %v", err)
	}
}
