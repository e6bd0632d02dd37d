package scheduler

import (
	"fmt"
	"maps"
	"testing"

	"github.com/gpuvm/gpuvm/pkg/gpu"
)

func TestFree(t *testing.T) {
	h100 := func(s GPUSpec) GPUSpec {
		s.Address, s.Model, s.Allow = "0000:17:00.0", "H100 PCIe 80GB", gpu.ModeMIG
		return s
	}
	l40s := func(s GPUSpec) GPUSpec {
		s.Address, s.Model = "0000:41:00.0", "L40S"
		if s.Allow == "" {
			s.Allow = gpu.ModeVGPU
		}
		return s
	}
	mig := func(id, profile string, start int) Allocation {
		return Allocation{ID: id, Host: "n", GPU: "0000:17:00.0", Kind: gpu.KindMIG, Profile: profile, Start: start}
	}
	vgpu := func(id, typ string) Allocation {
		return Allocation{ID: id, Host: "n", GPU: "0000:41:00.0", Kind: gpu.KindVGPU, Type: typ}
	}
	tests := []struct {
		name     string
		gpu      GPUSpec
		draining bool // the host
		allocs   []Allocation
		idle     int
		mig      map[string]int
		vgpu     map[string]int // these types at least (nil: no vGPU at all)
		noVGPU   []string       // and not these
	}{
		{name: "empty MIG GPU", gpu: h100(GPUSpec{Mode: gpu.ModeMIG}),
			mig: map[string]int{"1g.10gb": 7, "1g.10gb+me": 1, "1g.20gb": 4, "2g.20gb": 3, "3g.40gb": 2, "4g.40gb": 1, "7g.80gb": 1}},
		{name: "a 3g.40gb at 0: the upper half is left", gpu: h100(GPUSpec{Mode: gpu.ModeMIG}), allocs: []Allocation{mig("a", "3g.40gb", 0)},
			mig: map[string]int{"1g.10gb": 3, "1g.10gb+me": 1, "1g.20gb": 2, "2g.20gb": 1, "3g.40gb": 1}},
		{name: "a layout allows only its instances", gpu: h100(GPUSpec{Mode: gpu.ModeMIG, MIGLayout: []string{"3g.40gb", "3g.40gb"}}),
			mig: map[string]int{"3g.40gb": 2}},
		{name: "a drained GPU gives nothing", gpu: h100(GPUSpec{Draining: true})},
		{name: "a draining host gives nothing", gpu: h100(GPUSpec{}), draining: true},
		{name: "a GPU no backend can use gives nothing", gpu: h100(GPUSpec{Unavailable: "mig: NVML unavailable"})},
		{name: "equal-size vGPUs: only more of the type it holds", gpu: l40s(GPUSpec{Mode: gpu.ModeVGPU}),
			allocs: []Allocation{vgpu("a", "L40S-12Q"), vgpu("b", "L40S-12Q")},
			vgpu:   map[string]int{"L40S-12Q": 2}, noVGPU: []string{"L40S-24Q", "L40S-1Q"}},
		{name: "mixed sizes: what the free framebuffer holds", gpu: l40s(GPUSpec{Mode: gpu.ModeVGPU, MixedSize: true}),
			allocs: []Allocation{vgpu("a", "L40S-24Q")},
			vgpu:   map[string]int{"L40S-24Q": 1, "L40S-12Q": 2, "L40S-8Q": 3}, noVGPU: []string{"L40S-48Q", "L40S-24C"}},
		{name: "an idle GPU on auto", gpu: l40s(GPUSpec{Allow: gpu.ModeAuto}), idle: 1,
			vgpu: map[string]int{"L40S-48Q": 1, "L40S-12Q": 4, "L40S-1Q": 32}},
		{name: "a whole GPU given away", gpu: l40s(GPUSpec{Allow: gpu.ModeAuto}),
			allocs: []Allocation{{ID: "a", Host: "n", GPU: "0000:41:00.0", Kind: gpu.KindPassthrough}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			inv, err := NewInventory([]HostSpec{{Name: "n", Draining: tc.draining, GPUs: []GPUSpec{tc.gpu}}}, tc.allocs)
			if err != nil {
				t.Fatal(err)
			}
			f, ok := inv.Free("n")
			if !ok {
				t.Fatal("host n unknown")
			}
			if f.IdleGPUs != tc.idle || !maps.Equal(f.MIG, tc.mig) {
				t.Errorf("idle %d, MIG %v; want %d, %v", f.IdleGPUs, f.MIG, tc.idle, tc.mig)
			}
			if (tc.vgpu == nil) != (f.VGPU == nil) {
				t.Errorf("vGPU %v, want %v", f.VGPU, tc.vgpu)
			}
			for typ, n := range tc.vgpu {
				if f.VGPU[typ] != n {
					t.Errorf("%s: %d more, want %d", typ, f.VGPU[typ], n)
				}
			}
			for _, typ := range tc.noVGPU {
				if n, ok := f.VGPU[typ]; ok {
					t.Errorf("%s: %d more, want none listed", typ, n)
				}
			}
		})
	}
	if _, ok := (&Inventory{}).Free("nowhere"); ok {
		t.Error("an unknown host has free capacity")
	}
}

// A host of 8 H100s, 4 in MIG mode, 3 in vGPU mode and 1 idle, holding
// nothing: one GPU is idle, the other seven are split but nearly empty —
// not busy.
func TestFreeCountsSplitGPUs(t *testing.T) {
	var gpus []GPUSpec
	for i := range 8 {
		s := GPUSpec{Address: fmt.Sprintf("0000:%02x:00.0", 0x10+i), Model: "H100 PCIe 80GB", Allow: gpu.ModeAuto}
		switch {
		case i < 4:
			s.Mode = gpu.ModeMIG
		case i < 7:
			s.Mode = gpu.ModeVGPU
		}
		gpus = append(gpus, s)
	}
	inv, err := NewInventory([]HostSpec{{Name: "n", GPUs: gpus}}, []Allocation{
		{ID: "a", Host: "n", GPU: "0000:10:00.0", Kind: gpu.KindMIG, Profile: "1g.10gb", Start: 0},
	})
	if err != nil {
		t.Fatal(err)
	}
	f, _ := inv.Free("n")
	if want := map[gpu.Mode]int{gpu.ModeMIG: 4, gpu.ModeVGPU: 3}; f.IdleGPUs != 1 || !maps.Equal(f.Split, want) {
		t.Errorf("idle %d, split %v; want 1, %v", f.IdleGPUs, f.Split, want)
	}
}

// CountFits counts what the placers give a need one request after the
// other: a MIG profile as many instances as fit, a need of several kinds
// on each kind it may be met with.
func TestCountFits(t *testing.T) {
	specs := []HostSpec{{Name: "n", GPUs: []GPUSpec{
		{Address: "0000:17:00.0", Model: "H100 PCIe 80GB", Mode: gpu.ModeMIG, Allow: gpu.ModeMIG},
		{Address: "0000:18:00.0", Model: "H100 PCIe 80GB", Mode: gpu.ModeMIG, Allow: gpu.ModeMIG},
		{Address: "0000:41:00.0", Model: "L40S", Mode: gpu.ModeVGPU, Allow: gpu.ModeVGPU},
	}}}
	inv, err := NewInventory(specs, []Allocation{{ID: "a", Host: "n", GPU: "0000:17:00.0", Kind: gpu.KindMIG, Profile: "3g.40gb", Start: 0}})
	if err != nil {
		t.Fatal(err)
	}
	if f := inv.CountFits(Need{Kind: gpu.KindMIG, Profile: "3g.40gb", Count: 1}, PlaceOptions{}, 100); f.N != 3 || f.ByKind[gpu.KindMIG] != 3 {
		t.Errorf("3g.40gb: %+v, want 3 MIG", f)
	}
	any20 := Need{Kind: gpu.KindAny, Memory: 20 << 30, Kinds: []gpu.Kind{gpu.KindMIG, gpu.KindVGPU}, Count: 1}
	f := inv.CountFits(any20, PlaceOptions{}, 1000)
	if f.ByKind[gpu.KindMIG] == 0 || f.ByKind[gpu.KindVGPU] == 0 || f.N != f.ByKind[gpu.KindMIG]+f.ByKind[gpu.KindVGPU] || f.N < 4 {
		t.Errorf("20 GiB as MIG or vGPU: %+v, want MIG instances and vGPUs", f)
	}
	if f := inv.CountFits(any20, PlaceOptions{}, 2); f.N != 2 {
		t.Errorf("limit 2: %+v", f)
	}
	if f := inv.CountFits(Need{Kind: gpu.KindVGPU, Type: "H100-4C", Count: 1}, PlaceOptions{}, 100); f.N != 0 || f.ByKind != nil {
		t.Errorf("a type no GPU gives: %+v", f)
	}
	if again := inv.CountFits(Need{Kind: gpu.KindMIG, Profile: "3g.40gb", Count: 1}, PlaceOptions{}, 100); again.N != 3 {
		t.Errorf("counting changed the inventory: %+v", again)
	}
}
