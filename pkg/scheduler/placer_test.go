package scheduler

import (
	"reflect"
	"testing"

	"github.com/gpuvm/gpuvm/pkg/gpu"
)

// Each device kind resolves to its own placer, once, and that placer names
// the device and counts what an empty GPU gives.
func TestPlacerPerKind(t *testing.T) {
	hosts := []HostSpec{
		h100Host("a", 1, gpu.ModeAuto),
		{Name: "b", GPUs: []GPUSpec{{Address: "g1", Model: "L40S", Allow: gpu.ModeAuto}}},
	}
	inv := mustInv(t, hosts)
	for _, c := range []struct {
		need     Need
		want     placer
		whole    bool
		noun     string
		capacity int // on the first GPU that has it, empty
	}{
		{Need{Kind: gpu.KindMIG, Profile: " 1G.10GB"}, migPlacer{}, false, "MIG 1g.10gb", 7},
		{Need{Kind: gpu.KindVGPU, Type: "L40S-12Q"}, vgpuPlacer{}, false, "vGPU L40S-12Q", 4},
		{Need{Kind: gpu.KindPassthrough, Model: "L40S"}, passthroughPlacer{}, true, "a whole L40S", 1},
	} {
		t.Run(string(c.need.Kind), func(t *testing.T) {
			cs := inv.resolve(c.need)
			if len(cs) != 1 {
				t.Fatalf("resolve(%v) = %d concrete needs, want 1", c.need, len(cs))
			}
			cn := &cs[0]
			if cn.pl != c.want || placerOf(c.need.Kind) != c.want {
				t.Fatalf("placer %T, placerOf %T, want %T", cn.pl, placerOf(c.need.Kind), c.want)
			}
			if cn.pl.whole() != c.whole || cn.pl.noun(cn) != c.noun {
				t.Errorf("whole %v noun %q, want %v %q", cn.pl.whole(), cn.pl.noun(cn), c.whole, c.noun)
			}
			got := -1
			for gi := range inv.gpus {
				if g := &inv.gpus[gi]; cn.match[g.model] {
					got = cn.pl.capacity(g, inv.models[g.model], cn)
					break
				}
			}
			if got != c.capacity {
				t.Errorf("capacity %d, want %d", got, c.capacity)
			}
		})
	}
	for _, k := range []gpu.Kind{gpu.KindAny, "", "tpu"} {
		if p := placerOf(k); p != nil {
			t.Errorf("placerOf(%q) = %T, want none", k, p)
		}
	}
	if cs := inv.resolve(Need{Kind: gpu.KindVGPU, Type: "not a type"}); cs != nil {
		t.Errorf("a vGPU type that does not parse resolves to %v", cs)
	}
}

func TestMergeByHost(t *testing.T) {
	d := func(addr string) Device { return Device{GPU: addr, Kind: gpu.KindPassthrough} }
	for name, c := range map[string]struct {
		in   []Placement
		want []Placement
	}{
		"none": {nil, nil},
		"one":  {[]Placement{{Host: "a", Devices: []Device{d("1")}}}, []Placement{{Host: "a", Devices: []Device{d("1")}}}},
		"hosts sorted, devices in order": {
			[]Placement{{Host: "b", Devices: []Device{d("3")}}, {Host: "a", Devices: []Device{d("1")}}, {Host: "b", Devices: []Device{d("2"), d("4")}}},
			[]Placement{{Host: "a", Devices: []Device{d("1")}}, {Host: "b", Devices: []Device{d("3"), d("2"), d("4")}}},
		},
		"a host with no device stays": {
			[]Placement{{Host: "z"}, {Host: "a", Devices: []Device{d("1")}}},
			[]Placement{{Host: "a", Devices: []Device{d("1")}}, {Host: "z"}},
		},
	} {
		t.Run(name, func(t *testing.T) {
			if got := MergeByHost(c.in); !reflect.DeepEqual(got, c.want) {
				t.Errorf("MergeByHost = %+v, want %+v", got, c.want)
			}
		})
	}
}
