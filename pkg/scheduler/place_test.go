package scheduler

import (
	"fmt"
	"math/rand"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/gpu"
)

var t0 = time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC) // a Monday

func mustInv(t testing.TB, hosts []HostSpec, allocs ...Allocation) *Inventory {
	t.Helper()
	inv, err := NewInventory(hosts, allocs)
	if err != nil {
		t.Fatal(err)
	}
	return inv
}

func h100Host(name string, n int, allow gpu.Mode) HostSpec {
	h := HostSpec{Name: name}
	for i := 0; i < n; i++ {
		h.GPUs = append(h.GPUs, GPUSpec{Address: fmt.Sprintf("0000:%02x:00.0", 0x10+i), Model: "H100 PCIe 80GB", Allow: allow})
	}
	return h
}

func mig(p string) Need { return Need{Kind: gpu.KindMIG, Profile: p, Count: 1} }

// TestMIGTableMatchesRules walks random placements and removals and checks
// that the enumerated state graph gives exactly the free starts of
// gpu.MIGTable.FreeStarts for the instances actually there.
func TestMIGTableMatchesRules(t *testing.T) {
	for _, tab := range []*gpu.MIGTable{&gpu.MIG80GB, &gpu.MIGA100_40GB, &gpu.MIGH200, &gpu.MIGA30} {
		mt := tableFor(tab)
		rng := rand.New(rand.NewSource(1))
		for trial := 0; trial < 300; trial++ {
			var inst []gpu.Instance
			for step := 0; step < 12; step++ {
				node, ok := mt.stateOf(inst)
				if !ok {
					t.Fatalf("state of %v not enumerated", inst)
				}
				n := &mt.nodes[node]
				for pi, p := range tab.Profiles {
					var got []int
					for _, o := range n.opts[pi] {
						got = append(got, o.start)
					}
					want := tab.FreeStarts(inst, p)
					if !reflect.DeepEqual(got, want) {
						t.Fatalf("%v: %s free starts %v, rules say %v", inst, p.Name, got, want)
					}
				}
				if len(inst) > 0 && rng.Intn(3) == 0 {
					k := rng.Intn(len(inst))
					inst = append(inst[:k:k], inst[k+1:]...)
					continue
				}
				p := tab.Profiles[rng.Intn(len(tab.Profiles))]
				if fs := tab.FreeStarts(inst, p); len(fs) > 0 {
					inst = append(inst, gpu.Instance{Profile: p, Start: fs[rng.Intn(len(fs))]})
				}
			}
		}
		t.Logf("%d MIG states for a %d-slice table", len(mt.nodes), tab.Slices)
	}
}

func TestMIGPlacementKeepsLargeProfiles(t *testing.T) {
	inv := mustInv(t, []HostSpec{h100Host("a", 1, gpu.ModeMIG)})
	// Three 1g.10gb on an empty GPU go to the top, leaving 4g.40gb@0.
	var starts []int
	for i := 0; i < 3; i++ {
		p, r := inv.Place(mig("1g.10gb"), PlaceOptions{Now: t0})
		if !r.OK() {
			t.Fatal(r)
		}
		starts = append(starts, p.Devices[0].Start)
		if err := inv.Allocate(fmt.Sprint("vm", i), p, t0.Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
	}
	if want := []int{6, 4, 5}; !reflect.DeepEqual(starts, want) {
		t.Errorf("1g.10gb starts %v, want %v", starts, want)
	}
	p, r := inv.Place(mig("4g.40gb"), PlaceOptions{Now: t0})
	if !r.OK() || p.Devices[0].Start != 0 {
		t.Errorf("4g.40gb after three 1g: %v %v", p, r)
	}
	// First fit would have put them at 0, 1, 2 and lost the 4g.
	ff := mustInv(t, []HostSpec{h100Host("a", 1, gpu.ModeMIG)})
	for i := 0; i < 3; i++ {
		p, _ := ff.Place(mig("1g.10gb"), PlaceOptions{Now: t0, Strategy: FirstFit})
		if p.Devices[0].Start != i {
			t.Errorf("first fit put 1g #%d at %d", i, p.Devices[0].Start)
		}
		if err := ff.Allocate(fmt.Sprint("vm", i), p, time.Time{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, r := ff.Place(mig("4g.40gb"), PlaceOptions{Now: t0, Strategy: FirstFit}); r.Code != CodeNoCapacity {
		t.Errorf("first fit: 4g after 1g at 0,1,2: %v", r)
	}
}

func TestMIGThreeGGoesHigh(t *testing.T) {
	inv := mustInv(t, []HostSpec{h100Host("a", 2, gpu.ModeMIG)})
	p, r := inv.Place(mig("3g.40gb"), PlaceOptions{Now: t0})
	if !r.OK() || p.Devices[0].Start != 4 || p.Devices[0].GPU != "0000:10:00.0" {
		t.Fatalf("3g.40gb on empty GPUs: %v %v", p, r)
	}
	if err := inv.Allocate("a", p, time.Time{}); err != nil {
		t.Fatal(err)
	}
	// The second small slice goes on the same GPU, keeping GPU 2 whole.
	p, _ = inv.Place(mig("2g.20gb"), PlaceOptions{Now: t0})
	if p.Devices[0].GPU != "0000:10:00.0" {
		t.Errorf("2g.20gb went to %v, want the partly used GPU", p)
	}
}

func TestPackPrefersGPUsEndingLater(t *testing.T) {
	// Two GPUs each with a 3g at 4; one ends in 1h, the other in 10h. A new
	// 8h 3g goes with the one ending late, so the other empties for a 7g.
	inv := mustInv(t, []HostSpec{h100Host("a", 2, gpu.ModeMIG)},
		Allocation{ID: "early", Host: "a", GPU: "0000:10:00.0", Kind: gpu.KindMIG, Profile: "3g.40gb", Start: 4, End: t0.Add(time.Hour)},
		Allocation{ID: "late", Host: "a", GPU: "0000:11:00.0", Kind: gpu.KindMIG, Profile: "3g.40gb", Start: 4, End: t0.Add(10 * time.Hour)},
	)
	p, r := inv.Place(mig("3g.40gb"), PlaceOptions{Now: t0, End: t0.Add(8 * time.Hour)})
	if !r.OK() || p.Devices[0].GPU != "0000:11:00.0" {
		t.Errorf("got %v %v, want GPU 11", p, r)
	}
}

func TestVGPUPlacement(t *testing.T) {
	hosts := []HostSpec{{Name: "a", GPUs: []GPUSpec{
		{Address: "g0", Model: "L40S"},
		{Address: "g1", Model: "L40S", Allow: gpu.ModeVGPU, Mode: gpu.ModeVGPU},
		{Address: "g2", Model: "L40S", Allow: gpu.ModeVGPU, Mode: gpu.ModeVGPU},
		{Address: "g3", Model: "L40S", Allow: gpu.ModeVGPU, Mode: gpu.ModeVGPU, MixedSize: true},
	}}}
	inv := mustInv(t, hosts, Allocation{ID: "x", Host: "a", GPU: "g2", Kind: gpu.KindVGPU, Type: "L40S-12Q"})
	need := Need{Kind: gpu.KindVGPU, Type: "L40S-12Q", Count: 1}
	p, r := inv.Place(need, PlaceOptions{Now: t0})
	if !r.OK() || p.Devices[0].GPU != "g2" {
		t.Fatalf("12Q: %v %v, want g2 (already holds 12Q)", p, r)
	}
	// Fill g2 (max 4 of 12Q on 48 GB).
	for i := 0; i < 3; i++ {
		p, _ := inv.Place(need, PlaceOptions{Now: t0})
		if err := inv.Allocate(fmt.Sprint("y", i), p, time.Time{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, r := inv.Place(need, PlaceOptions{Now: t0}); !r.OK() {
		t.Fatal(r)
	}
	p, _ = inv.Place(need, PlaceOptions{Now: t0})
	if p.Devices[0].GPU != "g1" {
		t.Errorf("after g2 is full: %v, want g1 (empty, in vgpu mode)", p)
	}
	// A different type cannot share g2 (equal-size) but can share g3.
	if err := inv.Allocate("z", Placement{Host: "a", Devices: []Device{{GPU: "g2", Kind: gpu.KindVGPU, Type: "L40S-4Q"}}}, time.Time{}); err == nil {
		t.Error("equal-size GPU took a second type")
	}
	for _, typ := range []string{"L40S-24Q", "L40S-12Q", "L40S-8Q"} {
		if err := inv.Allocate("m"+typ, Placement{Host: "a", Devices: []Device{{GPU: "g3", Kind: gpu.KindVGPU, Type: typ}}}, time.Time{}); err != nil {
			t.Errorf("mixed-size GPU refused %s: %v", typ, err)
		}
	}
	if err := inv.Allocate("over", Placement{Host: "a", Devices: []Device{{GPU: "g3", Kind: gpu.KindVGPU, Type: "L40S-8Q"}}}, time.Time{}); err == nil {
		t.Error("mixed-size GPU took more than its framebuffer")
	}
	if err := inv.Allocate("c", Placement{Host: "a", Devices: []Device{{GPU: "g3", Kind: gpu.KindVGPU, Type: "L40S-4C"}}}, time.Time{}); err == nil {
		t.Error("mixed-size GPU took a C type")
	}
}

func TestPassthroughIOMMUGroup(t *testing.T) {
	hosts := []HostSpec{{Name: "a", GPUs: []GPUSpec{
		{Address: "g0", Model: "GeForce RTX 4090", IOMMUGroup: "7"},
		{Address: "g1", Model: "GeForce RTX 4090", IOMMUGroup: "7"},
		{Address: "g2", Model: "GeForce RTX 4090", IOMMUGroup: "8"},
	}}}
	inv := mustInv(t, hosts)
	pt := Need{Kind: gpu.KindPassthrough, Count: 1}
	p, r := inv.Place(pt, PlaceOptions{Now: t0})
	if !r.OK() || p.Devices[0].GPU != "g2" {
		t.Fatalf("got %v %v, want g2 (alone in its group)", p, r)
	}
	if err := inv.Allocate("a", p, time.Time{}); err != nil {
		t.Fatal(err)
	}
	p, r = inv.Place(pt, PlaceOptions{Now: t0})
	if !r.OK() || len(p.Devices[0].Group) != 1 {
		t.Fatalf("second: %v %v, want one GPU with its group companion", p, r)
	}
	if err := inv.Allocate("b", p, time.Time{}); err != nil {
		t.Fatal(err)
	}
	if _, r := inv.Place(pt, PlaceOptions{Now: t0}); r.Code != CodeNoCapacity {
		t.Errorf("third: %v, want no capacity", r)
	}
	if got := len(inv.Allocations()); got != 2 {
		t.Errorf("%d allocation rows, want 2 (companions are not rows)", got)
	}
	inv.Release("b")
	if _, r := inv.Place(pt, PlaceOptions{Now: t0}); !r.OK() {
		t.Errorf("after release: %v", r)
	}
}

func TestAbstractNeedTakesCheapest(t *testing.T) {
	hosts := []HostSpec{{Name: "a", GPUs: []GPUSpec{
		{Address: "m", Model: "H100 PCIe 80GB", Allow: gpu.ModeMIG},
		{Address: "v", Model: "L40S", Allow: gpu.ModeVGPU},
		{Address: "p", Model: "GeForce RTX 4090"},
	}}}
	inv := mustInv(t, hosts)
	cases := []struct {
		mem   uint64
		kinds []gpu.Kind
		want  string
	}{
		{20 * gpu.GiB, nil, "m mig 1g.20gb@"}, // 1/4 of an H100 beats 24/48 of an L40S
		{12 * gpu.GiB, []gpu.Kind{gpu.KindVGPU}, "v vgpu L40S-12Q"},
		{16 * gpu.GiB, []gpu.Kind{gpu.KindVGPU}, "v vgpu L40S-16Q"},
		{24 * gpu.GiB, []gpu.Kind{gpu.KindPassthrough}, "p passthrough"},
		{90 * gpu.GiB, nil, ""},
	}
	for _, c := range cases {
		p, r := inv.Place(Need{Kind: gpu.KindAny, Memory: c.mem, Kinds: c.kinds, Count: 1}, PlaceOptions{Now: t0})
		if c.want == "" {
			if r.Code != CodeNever {
				t.Errorf("%s: %v %v, want never", formatBytes(c.mem), p, r)
			}
			continue
		}
		if !r.OK() || !strings.HasPrefix(p.Devices[0].String(), c.want) {
			t.Errorf("%s %v: got %v %v, want %s", formatBytes(c.mem), c.kinds, p, r, c.want)
		}
	}
}

func TestReasons(t *testing.T) {
	hosts := []HostSpec{
		{Name: "a", GPUs: []GPUSpec{{Address: "g0", Model: "H100 PCIe 80GB", Allow: gpu.ModeMIG}}},
		{Name: "b", Draining: true, GPUs: []GPUSpec{{Address: "g0", Model: "H100 PCIe 80GB", Allow: gpu.ModeMIG}}},
	}
	inv := mustInv(t, hosts, Allocation{ID: "x", Host: "a", GPU: "g0", Kind: gpu.KindMIG, Profile: "7g.80gb"})
	if _, r := inv.Place(mig("7g.80gb"), PlaceOptions{Now: t0}); r.Code != CodeDraining {
		t.Errorf("only a draining host has room: %v", r)
	}
	if _, r := inv.Place(mig("1g.5gb"), PlaceOptions{Now: t0}); r.Code != CodeNever {
		t.Errorf("A100 40GB profile on H100s: %v", r)
	}
	if _, r := inv.Place(Need{Kind: gpu.KindVGPU, Type: "L40S-12Q"}, PlaceOptions{Now: t0}); r.Code != CodeNever {
		t.Errorf("vGPU on MIG-only GPUs: %v", r)
	}
	if _, r := inv.Place(Need{Kind: gpu.KindMIG, Profile: "1g.10gb", Count: 8}, PlaceOptions{Now: t0}); r.Code != CodeNever {
		t.Errorf("eight 1g.10gb on one GPU per host: %v", r)
	}
	if _, r := inv.Place(Need{Kind: gpu.KindMIG, Profile: "1g.10gb", Count: 100}, PlaceOptions{Now: t0}); r.Code != CodeInvalid {
		t.Errorf("absurd count: %v", r)
	}
	// A booking on host a's GPU keeps a 3g off it if the lease overlaps.
	inv2 := mustInv(t, hosts[:1])
	hold := Hold{ID: "lab", Code: CodeReservation, Host: "a", From: t0.Add(2 * time.Hour), To: t0.Add(4 * time.Hour),
		Devices: []Device{{GPU: "g0", Kind: gpu.KindMIG, Profile: "4g.40gb", Start: 0}}}
	o := PlaceOptions{Now: t0, End: t0.Add(3 * time.Hour), Holds: []Hold{hold}}
	p, r := inv2.Place(mig("3g.40gb"), o)
	if !r.OK() || p.Devices[0].Start != 4 {
		t.Errorf("3g beside a booked 4g: %v %v", p, r)
	}
	if err := inv2.Allocate("y", p, o.End); err != nil {
		t.Fatal(err)
	}
	if _, r := inv2.Place(mig("3g.40gb"), o); r.Code != CodeReservation {
		t.Errorf("3g over a booked 4g: %v", r)
	}
	o.End = t0.Add(time.Hour) // ends before the booking starts
	if _, r := inv2.Place(mig("3g.40gb"), o); !r.OK() {
		t.Errorf("3g ending before the booking: %v", r)
	}
}

func TestNewInventoryErrors(t *testing.T) {
	hosts := []HostSpec{h100Host("a", 1, gpu.ModeMIG)}
	cases := map[string]struct {
		hosts  []HostSpec
		allocs []Allocation
		want   string
	}{
		"overlap": {hosts, []Allocation{
			{ID: "1", Host: "a", GPU: "0000:10:00.0", Kind: gpu.KindMIG, Profile: "3g.40gb", Start: 0},
			{ID: "2", Host: "a", GPU: "0000:10:00.0", Kind: gpu.KindMIG, Profile: "4g.40gb", Start: 0},
		}, "cannot be created at slot 0"},
		"bad start":   {hosts, []Allocation{{ID: "1", Host: "a", GPU: "0000:10:00.0", Kind: gpu.KindMIG, Profile: "3g.40gb", Start: 2}}, "cannot be created at slot 2"},
		"unknown gpu": {hosts, []Allocation{{ID: "1", Host: "a", GPU: "nope", Kind: gpu.KindMIG, Profile: "3g.40gb"}}, "no GPU nope"},
		"vgpu on mig": {hosts, []Allocation{{ID: "1", Host: "a", GPU: "0000:10:00.0", Kind: gpu.KindVGPU, Type: "H100-4C"}}, "cannot give vgpu"},
		"model":       {[]HostSpec{{Name: "x", GPUs: []GPUSpec{{Address: "g", Model: "Voodoo 5"}}}}, nil, "not a GPU gpuvm knows"},
		"ambiguous":   {[]HostSpec{{Name: "x", GPUs: []GPUSpec{{Address: "g", Model: "GeForce RTX"}}}}, nil, "could be"},
		"mig on l40s": {[]HostSpec{{Name: "x", GPUs: []GPUSpec{{Address: "g", Model: "L40S", Allow: gpu.ModeMIG}}}}, nil, "has no MIG"},
		"dup host":    {[]HostSpec{{Name: "x"}, {Name: "x"}}, nil, "listed twice"},
		"layout":      {[]HostSpec{{Name: "x", GPUs: []GPUSpec{{Address: "g", Model: "A100 PCIe 40GB", MIGLayout: []string{"4g.20gb", "4g.20gb"}}}}}, nil, "does not fit"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := NewInventory(c.hosts, c.allocs)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("got %v, want an error with %q", err, c.want)
			}
		})
	}
}

func TestMIGLayout(t *testing.T) {
	hosts := []HostSpec{{Name: "x", GPUs: []GPUSpec{{Address: "g", Model: "A100 PCIe 40GB", Allow: gpu.ModeMIG, MIGLayout: []string{"3g.20gb", "3g.20gb"}}}}}
	inv := mustInv(t, hosts)
	if _, r := inv.Place(mig("1g.5gb"), PlaceOptions{Now: t0}); r.Code != CodeNever {
		t.Errorf("1g.5gb outside the layout: %v", r)
	}
	var starts []int
	for i := 0; i < 2; i++ {
		p, r := inv.Place(mig("3g.20gb"), PlaceOptions{Now: t0})
		if !r.OK() {
			t.Fatal(r)
		}
		starts = append(starts, p.Devices[0].Start)
		inv.Allocate(fmt.Sprint(i), p, time.Time{})
	}
	if starts[0] == starts[1] {
		t.Errorf("starts %v", starts)
	}
}

func TestMultiDeviceOneHost(t *testing.T) {
	inv := mustInv(t, []HostSpec{h100Host("a", 2, gpu.ModeAuto), h100Host("b", 4, gpu.ModeAuto)},
		Allocation{ID: "x", Host: "b", GPU: "0000:10:00.0", Kind: gpu.KindPassthrough})
	p, r := inv.Place(Need{Kind: gpu.KindPassthrough, Count: 3}, PlaceOptions{Now: t0})
	if !r.OK() || p.Host != "b" || len(p.Devices) != 3 {
		t.Fatalf("3 whole GPUs: %v %v", p, r)
	}
	if err := inv.Allocate("y", p, time.Time{}); err != nil {
		t.Fatal(err)
	}
	if _, r := inv.Place(Need{Kind: gpu.KindPassthrough, Count: 3}, PlaceOptions{Now: t0}); r.Code != CodeNoCapacity {
		t.Errorf("a second 3×: %v", r)
	}
	p, r = inv.Place(Need{Kind: gpu.KindPassthrough, Count: 2}, PlaceOptions{Now: t0})
	if !r.OK() || p.Host != "a" {
		t.Errorf("2×: %v %v", p, r)
	}
}

func TestDeterministic(t *testing.T) {
	build := func() *Inventory {
		var hosts []HostSpec
		for i := 0; i < 5; i++ {
			hosts = append(hosts, h100Host(fmt.Sprint("h", i), 4, gpu.ModeAuto))
		}
		return mustInv(t, hosts)
	}
	a, b := build(), build()
	needs := []Need{mig("1g.10gb"), mig("3g.40gb"), {Kind: gpu.KindVGPU, Type: "H100-20C"}, {Kind: gpu.KindPassthrough}, mig("2g.20gb")}
	for i := 0; i < 60; i++ {
		n := needs[i%len(needs)]
		pa, ra := a.Place(n, PlaceOptions{Now: t0})
		pb, rb := b.Place(n, PlaceOptions{Now: t0})
		if !reflect.DeepEqual(pa, pb) || ra != rb {
			t.Fatalf("step %d: %v %v vs %v %v", i, pa, ra, pb, rb)
		}
		if ra.OK() {
			a.Allocate(fmt.Sprint(i), pa, time.Time{})
			b.Allocate(fmt.Sprint(i), pb, time.Time{})
		}
	}
}

func TestFromHost(t *testing.T) {
	five := 4
	hi := gpu.HostInventory{
		GPUs: []gpu.HostGPU{
			{Address: "0000:17:00.0", Model: "A100 PCIe 40GB", DeviceID: "10de:20f1", Mode: "mig", Backends: map[string]string{"mig": "", "vgpu": "GPU is in MIG mode"}},
			{Address: "0000:41:00.0", Model: "A40", DeviceID: "10de:2235", Mode: "vgpu", Backends: map[string]string{"vgpu": ""}},
			{Address: "0000:c1:00.0", Model: "GeForce RTX 4090", DeviceID: "10de:2684", Mode: "idle", IOMMUGroup: "14", Backends: map[string]string{"passthrough": "bound to snd_hda_intel"}},
		},
		Devices: []gpu.HostDevice{
			{ID: "gi-1", Kind: "mig", GPU: "0000:17:00.0", Profile: "3g.20gb", Placement: &five, VMUUID: "vm-a"},
			{ID: "mdev-1", Kind: "vgpu", GPU: "0000:41:00.0", Type: "A40-8Q"},
		},
	}
	h, allocs := FromHost("node1", hi, func(addr, model string) gpu.Mode {
		if strings.HasPrefix(model, "A100") {
			return gpu.ModeMIG
		}
		return gpu.ModeAuto
	})
	inv, err := NewInventory([]HostSpec{h}, allocs)
	if err != nil {
		t.Fatal(err)
	}
	got := inv.Allocations()
	if len(got) != 2 || got[0].ID != "device:mdev-1" || got[1].Start != 4 {
		t.Errorf("allocations %+v", got)
	}
	if h.GPUs[2].Unavailable == "" || h.GPUs[0].Unavailable != "" || h.GPUs[0].Allow != gpu.ModeMIG {
		t.Errorf("GPUs %+v", h.GPUs)
	}
	// The A40 holds an 8Q: a 12Q must go elsewhere, and the 4090 is out.
	if _, r := inv.Place(Need{Kind: gpu.KindVGPU, Type: "A40-12Q"}, PlaceOptions{Now: t0}); r.Code != CodeNoCapacity {
		t.Errorf("A40-12Q next to an 8Q: %v", r)
	}
	if _, r := inv.Place(Need{Kind: gpu.KindPassthrough, Model: "GeForce RTX 4090"}, PlaceOptions{Now: t0}); r.Code != CodeUnavailable || !strings.Contains(r.Detail, "snd_hda_intel") {
		t.Errorf("unavailable 4090: %v", r)
	}
}
