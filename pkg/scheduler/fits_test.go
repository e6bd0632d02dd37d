package scheduler

import (
	"fmt"
	"math/rand"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/gpu"
)

// TestCountFitsMatchesPlacing compares CountFits (counting from chains and
// scratch hosts) with placing requests one after the other
// (countByPlacing, what CountFits did before) on random clusters, with and
// without the GPU index: small mixed ones (every GPU state, IOMMU groups,
// layouts, draining, unusable) and hundreds of hosts of mostly plain GPUs,
// partly filled, over every need of the placement tests and needs of
// several devices, every strategy, holds and booked capacity, small and
// large limits.
func TestCountFitsMatchesPlacing(t *testing.T) {
	defer func(n int) { indexFrom = n }(indexFrom)
	scanBelow := indexFrom
	needs := append(append([]Need(nil), equivNeeds...), severalNeeds...)
	strategies := []Strategy{Pack, Spread, FirstFit, ""}
	var compared, limited, exhausted, mixed, several, severalMixed int
	for seed := int64(1); seed <= 130; seed++ {
		rng := rand.New(rand.NewSource(seed))
		indexFrom = 0 // odd seeds: an index even on small clusters
		if seed%2 == 0 {
			indexFrom = scanBelow
		}
		specs, maxLimit := randomSpecs(rng, 6), 999
		switch {
		case seed%10 == 0:
			specs, maxLimit = manySpecs(rng, 100+rng.Intn(100)), 120
		case seed%3 == 0:
			specs, maxLimit = randomSpecs(rng, 40), 200
		}
		inv, err := NewInventory(specs, nil)
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		vm := 0
		fillRandom(rng, inv, &vm)
		for step := 0; step < 8; step++ {
			need := needs[rng.Intn(len(needs))]
			now := t0.Add(time.Duration(rng.Intn(4*60)) * time.Minute)
			o := PlaceOptions{Strategy: strategies[rng.Intn(len(strategies))], Now: now}
			if rng.Intn(4) > 0 {
				o.End = now.Add(time.Duration(15+rng.Intn(10*60)) * time.Minute)
			}
			if rng.Intn(2) == 0 {
				o.Holds = randomHolds(rng, inv, now)
			}
			if rng.Intn(10) == 0 {
				o.Own = randomHolds(rng, inv, now)
			}
			limit := []int{1, 2, 5, 17, maxLimit}[rng.Intn(5)]
			got, want := inv.CountFits(need, o, limit), inv.countByPlacing(need, o, limit)
			compared++
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("seed %d step %d: %v %+v limit %d: counted %+v, placed %+v", seed, step, need, o, limit, got, want)
			}
			switch {
			case want.N == limit:
				limited++
			case want.N > 0:
				exhausted++
			}
			if len(want.ByKind) > 1 {
				mixed++
			}
			if need.count() > 1 && want.N > 1 {
				several++
				if len(want.ByKind) > 1 {
					severalMixed++
				}
			}
		}
		checkIndex(t, inv)
	}
	t.Logf("%d compared: %d up to the limit, %d until none fits, %d of several kinds, %d of several devices (%d of several kinds)",
		compared, limited, exhausted, mixed, several, severalMixed)
	if limited == 0 || exhausted < 50 || mixed == 0 || several < 20 || severalMixed == 0 {
		t.Errorf("the comparisons do not cover the cases")
	}
}

// TestCountFitsCases counts on a small cluster whose answers are known, by
// counting and by placing: several devices on one host (what is left on a
// host does not add up with another's), whole GPUs sharing an IOMMU group,
// draining and held GPUs, a need several kinds meet on GPUs of one group.
func TestCountFitsCases(t *testing.T) {
	h100 := func(addr string) GPUSpec {
		return GPUSpec{Address: addr, Model: "H100 PCIe 80GB", Mode: gpu.ModeMIG, Allow: gpu.ModeMIG}
	}
	specs := []HostSpec{
		{Name: "a", GPUs: []GPUSpec{h100("0000:17:00.0"), h100("0000:18:00.0")}},
		{Name: "b", GPUs: []GPUSpec{h100("0000:17:00.0")}},
		{Name: "c", GPUs: []GPUSpec{
			{Address: "0000:41:00.0", Model: "H100 PCIe 80GB", Allow: gpu.ModePassthrough, IOMMUGroup: "g"},
			{Address: "0000:42:00.0", Model: "H100 PCIe 80GB", Allow: gpu.ModeAuto, IOMMUGroup: "g"},
			{Address: "0000:43:00.0", Model: "L40S", Allow: gpu.ModeAuto, Draining: true},
		}},
	}
	inv, err := NewInventory(specs, []Allocation{{ID: "x", Host: "b", GPU: "0000:17:00.0", Kind: gpu.KindMIG, Profile: "4g.40gb", Start: 0}})
	if err != nil {
		t.Fatal(err)
	}
	hold := Hold{ID: "h", Code: CodeHeld, Host: "a", From: t0, To: t0.Add(time.Hour),
		Devices: []Device{{GPU: "0000:18:00.0", Kind: gpu.KindMIG, Profile: "7g.80gb", Start: 0}}}
	mig := func(p string, n int) Need { return Need{Kind: gpu.KindMIG, Profile: p, Count: n} }
	for _, tc := range []struct {
		name  string
		need  Need
		holds []Hold
		limit int
		want  Fits
	}{
		// a: 7 + 7, b: 3 (beside the 4g.40gb), c's H100 (auto): 7.
		{"1g.10gb one by one", mig("1g.10gb", 1), nil, 999, Fits{24, map[gpu.Kind]int{gpu.KindMIG: 24}}},
		{"up to the limit", mig("1g.10gb", 1), nil, 10, Fits{10, map[gpu.Kind]int{gpu.KindMIG: 10}}},
		// a: 14 / 4 = 3, b: 3 / 4 = 0, c: 7 / 4 = 1: not 24 / 4.
		{"4× 1g.10gb on one host", mig("1g.10gb", 4), nil, 999, Fits{4, map[gpu.Kind]int{gpu.KindMIG: 4}}},
		{"the hold keeps a's second GPU", mig("1g.10gb", 4), []Hold{hold}, 999, Fits{2, map[gpu.Kind]int{gpu.KindMIG: 2}}},
		{"7g.80gb", mig("7g.80gb", 1), nil, 999, Fits{3, map[gpu.Kind]int{gpu.KindMIG: 3}}},
		{"2× 7g.80gb", mig("7g.80gb", 2), nil, 999, Fits{1, map[gpu.Kind]int{gpu.KindMIG: 1}}},
		// c's group gives one whole GPU; its L40S drains.
		{"a whole GPU", Need{Kind: gpu.KindPassthrough}, nil, 999, Fits{1, map[gpu.Kind]int{gpu.KindPassthrough: 1}}},
		{"2 whole GPUs", Need{Kind: gpu.KindPassthrough, Count: 2}, nil, 999, Fits{}},
		// A 7g.80gb first wherever one fits, c's auto H100 too; then whole
		// GPUs: c's other H100 shares its IOMMU group with a MIG GPU now.
		{"80 GiB as MIG or whole", Need{Kind: gpu.KindAny, Memory: 80 * gpu.GiB}, nil, 999,
			Fits{3, map[gpu.Kind]int{gpu.KindMIG: 3}}},
		// 3g.40gb: a 2 + 2, b 1, c 2; nothing left for the rest.
		{"40 GiB as any", Need{Kind: gpu.KindAny, Memory: 40 * gpu.GiB}, nil, 999,
			Fits{7, map[gpu.Kind]int{gpu.KindMIG: 7}}},
		// Two 40 GiB vGPUs on c's auto H100, before any whole GPU: its
		// group companion can then not be given whole.
		{"40 GiB as vGPU or whole", Need{Kind: gpu.KindAny, Memory: 40 * gpu.GiB, Kinds: []gpu.Kind{gpu.KindVGPU, gpu.KindPassthrough}}, nil, 999,
			Fits{2, map[gpu.Kind]int{gpu.KindVGPU: 2}}},
		{"a vGPU type no board has", Need{Kind: gpu.KindVGPU, Type: "A40-8Q"}, nil, 999, Fits{}},
		{"an invalid need", Need{Kind: gpu.KindMIG}, nil, 999, Fits{}},
		{"no limit", mig("1g.10gb", 1), nil, 0, Fits{}},
	} {
		o := PlaceOptions{Now: t0, End: t0.Add(2 * time.Hour), Holds: tc.holds}
		got, placed := inv.CountFits(tc.need, o, tc.limit), inv.countByPlacing(tc.need, o, tc.limit)
		if !reflect.DeepEqual(got, tc.want) || !reflect.DeepEqual(placed, tc.want) {
			t.Errorf("%s: counted %+v, placed %+v; want %+v", tc.name, got, placed, tc.want)
		}
	}
}

// TestPlaceManyAsAllocating checks that placeMany leaves a host's GPUs as
// placing request after request on it and allocating each would: what
// CountFits counts a later concrete device of a need on (what each GPU
// holds, its busy horizon, its IOMMU-group companions).
func TestPlaceManyAsAllocating(t *testing.T) {
	strategies := []Strategy{Pack, Spread, FirstFit}
	compared, groups := 0, 0
	for seed := int64(1); seed <= 200; seed++ {
		rng := rand.New(rand.NewSource(seed))
		specs := randomSpecs(rng, 4)
		if gs := specs[0].GPUs; len(gs) > 2 { // two whole GPUs that go together
			for k := range gs[:2] {
				gs[k].IOMMUGroup, gs[k].Allow, gs[k].Draining, gs[k].Unavailable = "pair", gpu.ModeAuto, false, ""
			}
		}
		inv, err := NewInventory(specs, nil)
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		vm := 0
		fillRandom(rng, inv, &vm)
		for step := 0; step < 10; step++ {
			need := severalNeeds[rng.Intn(len(severalNeeds))]
			if rng.Intn(3) == 0 { // whole GPUs: their IOMMU groups
				need = Need{Kind: gpu.KindPassthrough, Count: 1 + rng.Intn(2)}
			}
			cs := inv.resolve(need)
			if len(cs) == 0 {
				continue
			}
			c := &cs[rng.Intn(len(cs))]
			now := t0.Add(time.Duration(rng.Intn(4*60)) * time.Minute)
			o := PlaceOptions{Strategy: strategies[rng.Intn(len(strategies))], Now: now}
			if rng.Intn(4) > 0 {
				o.End = now.Add(time.Duration(15+rng.Intn(10*60)) * time.Minute)
			}
			if rng.Intn(3) == 0 {
				o.Holds = randomHolds(rng, inv, now)
			}
			hi := rng.Intn(len(inv.hosts))
			h := &inv.hosts[hi]
			// Placing and allocating, on a copy.
			placed := inv.Clone()
			n := 0
			for ; ; n++ {
				pc := placed.newCtx(o)
				pc.only = hi
				p, why := placed.placeConcrete(c, pc)
				if !why.OK() {
					break
				}
				if err := placed.Allocate(fmt.Sprint("m", n), p, o.End); err != nil {
					t.Fatalf("seed %d step %d: %v", seed, step, err)
				}
			}
			if n == 0 {
				continue
			}
			got := inv.placeMany(hi, nil, c, inv.newCtx(o), o.End, n)
			compared++
			for j := range got {
				if got[j].companion || (c.pl.whole() && got[j].owner != "" && len(got[j].group) > 0 && inv.gpus[h.first+j].owner == "") {
					groups++
					break
				}
			}
			for j := range got {
				g, w := &got[j], &placed.gpus[h.first+j]
				if g.kind != w.kind || g.n != w.n || g.node != w.node || g.nv != w.nv || g.vmem != w.vmem || g.vtype != w.vtype ||
					(g.owner == "") != (w.owner == "") || !g.busy.Equal(w.busy) {
					t.Fatalf("seed %d step %d: %d× %s on %s: GPU %d is %+v after placeMany, %+v after placing", seed, step, n, c.describe(), h.name, j, g, w)
				}
			}
		}
	}
	t.Logf("%d hosts compared, %d with whole GPUs given with their IOMMU group", compared, groups)
	if compared < 200 || groups == 0 {
		t.Errorf("only %d hosts compared, %d with IOMMU groups", compared, groups)
	}
}

// TestNeedMapKey: needs that differ in any field, or in their Kinds (their
// number, their order, a kind not known, more than sixteen), have
// different keys; equal needs, one key.
func TestNeedMapKey(t *testing.T) {
	base := Need{Kind: gpu.KindAny, Memory: 10 << 30, Kinds: []gpu.Kind{gpu.KindMIG, gpu.KindVGPU}}
	many := []gpu.Kind{gpu.KindMIG, gpu.KindVGPU, gpu.KindPassthrough, gpu.KindMIG, gpu.KindVGPU}
	needs := []Need{
		base,
		{Kind: gpu.KindAny, Memory: 20 << 30, Kinds: base.Kinds},
		{Kind: gpu.KindAny, Memory: 10 << 30, Kinds: []gpu.Kind{gpu.KindVGPU, gpu.KindMIG}},
		{Kind: gpu.KindAny, Memory: 10 << 30, Kinds: []gpu.Kind{gpu.KindMIG}},
		{Kind: gpu.KindAny, Memory: 10 << 30},
		{Kind: gpu.KindAny, Memory: 10 << 30, Kinds: many},
		{Kind: gpu.KindAny, Memory: 10 << 30, Kinds: many[:4]},
		{Kind: gpu.KindAny, Memory: 10 << 30, Kinds: base.Kinds, Count: 2},
		{Kind: gpu.KindMIG, Profile: "1g.10gb"},
		{Kind: gpu.KindMIG, Profile: "1g.10gb", Model: "H100"},
		{Kind: gpu.KindVGPU, Type: "L40S-4Q"},
		{Kind: gpu.KindVGPU, Type: "L40S-4Q", Series: "Q"},
		{Kind: gpu.KindAny, Memory: 10 << 30, Kinds: []gpu.Kind{"tpu"}},
		{Kind: gpu.KindAny, Memory: 10 << 30, Kinds: []gpu.Kind{"tpu", gpu.KindMIG}},
		{Kind: gpu.KindAny, Memory: 10 << 30, Kinds: slices.Repeat(many[:1], 17)},
		{Kind: gpu.KindAny, Memory: 10 << 30, Kinds: slices.Repeat(many[:1], 16)},
	}
	seen := map[NeedKey]int{}
	for i, n := range needs {
		if j, ok := seen[n.MapKey()]; ok {
			t.Errorf("%+v and %+v have one key", needs[j], n)
		}
		seen[n.MapKey()] = i
	}
	for _, i := range []int{5, 12, 14} {
		same := needs[i]
		same.Kinds = slices.Clone(same.Kinds)
		if same.MapKey() != needs[i].MapKey() {
			t.Errorf("two equal needs %+v have two keys", same)
		}
	}
}
