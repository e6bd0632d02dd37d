package scheduler

import (
	"fmt"
	"math/rand"
	"sort"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/gpu"
)

// mixedHosts is a small cluster with every kind of GPU state: MIG pinned,
// auto, equal-size and mixed-size vGPU, passthrough with a shared IOMMU
// group, a MIG layout.
func mixedHosts() []HostSpec {
	return []HostSpec{
		{Name: "h1", GPUs: []GPUSpec{
			{Address: "m0", Model: "H100 PCIe 80GB", Allow: gpu.ModeMIG},
			{Address: "m1", Model: "A100 PCIe 40GB", Allow: gpu.ModeMIG},
			{Address: "a0", Model: "H100 PCIe 80GB"},
			{Address: "l0", Model: "A100 PCIe 40GB", Allow: gpu.ModeMIG, MIGLayout: []string{"3g.20gb", "2g.10gb", "1g.5gb"}},
		}},
		{Name: "h2", GPUs: []GPUSpec{
			{Address: "v0", Model: "L40S", Allow: gpu.ModeVGPU},
			{Address: "v1", Model: "L40S", Allow: gpu.ModeVGPU, MixedSize: true},
			{Address: "v2", Model: "A40"},
			{Address: "p0", Model: "GeForce RTX 4090", IOMMUGroup: "5"},
			{Address: "p1", Model: "GeForce RTX 4090", IOMMUGroup: "5"},
			{Address: "p2", Model: "GeForce RTX 4090", Allow: gpu.ModePassthrough},
		}},
	}
}

var propNeeds = []Need{
	{Kind: gpu.KindMIG, Profile: "1g.10gb"}, {Kind: gpu.KindMIG, Profile: "1g.5gb"}, {Kind: gpu.KindMIG, Profile: "3g.40gb"},
	{Kind: gpu.KindMIG, Profile: "3g.20gb"}, {Kind: gpu.KindMIG, Profile: "7g.80gb"}, {Kind: gpu.KindMIG, Profile: "2g.20gb"},
	{Kind: gpu.KindMIG, Profile: "4g.20gb"}, {Kind: gpu.KindMIG, Profile: "1g.20gb"}, {Kind: gpu.KindMIG, Profile: "1g.10gb", Count: 3},
	{Kind: gpu.KindVGPU, Type: "L40S-12Q"}, {Kind: gpu.KindVGPU, Type: "L40S-4Q"}, {Kind: gpu.KindVGPU, Type: "L40S-24Q"},
	{Kind: gpu.KindVGPU, Type: "A40-8Q"}, {Kind: gpu.KindVGPU, Type: "L40S-8C"},
	{Kind: gpu.KindPassthrough}, {Kind: gpu.KindPassthrough, Count: 2},
	{Kind: gpu.KindAny, Memory: 20 * gpu.GiB}, {Kind: gpu.KindAny, Memory: 8 * gpu.GiB, Kinds: []gpu.Kind{gpu.KindVGPU}},
}

// checkInvariants rebuilds every GPU from the inventory's allocation rows
// and checks the rules directly, without the scheduler's own bookkeeping.
func checkInvariants(t *testing.T, inv *Inventory) {
	t.Helper()
	type gpuRows struct {
		rows []Allocation
	}
	by := map[string]*gpuRows{}
	for _, a := range inv.Allocations() {
		k := a.Host + "/" + a.GPU
		if by[k] == nil {
			by[k] = &gpuRows{}
		}
		by[k].rows = append(by[k].rows, a)
	}
	keys := make([]string, 0, len(by))
	for k := range by {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		rows := by[k].rows
		gi := inv.byAddr[k]
		g := &inv.gpus[gi]
		info := inv.models[g.model]
		kind := rows[0].Kind
		for _, r := range rows {
			if r.Kind != kind {
				t.Fatalf("%s holds %s and %s", k, kind, r.Kind)
			}
		}
		switch kind {
		case gpu.KindMIG:
			var inst []gpu.Instance
			for _, r := range rows {
				p, _ := info.mt.t.Profile(r.Profile)
				if err := info.mt.t.CanPlace(inst, p, r.Start); err != nil {
					t.Fatalf("%s: %s@%d next to %v: %v", k, r.Profile, r.Start, inst, err)
				}
				inst = append(inst, gpu.Instance{Profile: p, Start: r.Start})
			}
		case gpu.KindVGPU:
			mem := uint64(0)
			for _, r := range rows {
				ty := info.types[r.Type]
				mem += ty.Memory
				if !g.mixed && r.Type != rows[0].Type {
					t.Fatalf("%s: equal-size GPU holds %s and %s", k, rows[0].Type, r.Type)
				}
				if !g.mixed && len(rows) > ty.MaxInstances {
					t.Fatalf("%s: %d %s, at most %d", k, len(rows), r.Type, ty.MaxInstances)
				}
			}
			if mem > info.m.Memory || len(rows) > info.m.MaxVGPUs {
				t.Fatalf("%s: %d vGPUs with %s on %s", k, len(rows), formatBytes(mem), formatBytes(info.m.Memory))
			}
		case gpu.KindPassthrough:
			if len(rows) != 1 {
				t.Fatalf("%s given whole %d times", k, len(rows))
			}
			for _, o := range g.group {
				og := &inv.gpus[o]
				if og.owner != rows[0].ID {
					t.Fatalf("%s: group companion %s held by %q, not %s", k, og.addr, og.owner, rows[0].ID)
				}
			}
		}
	}
	st := inv.Stats()
	if st.Used < 0 || st.Used > float64(st.GPUs)+1e-9 || st.MIGFree < 0 || st.MIGFree > st.MIGSlices || st.MIGStranded > st.MIGFree || st.EmptyGPUs < 0 {
		t.Fatalf("stats out of range: %+v", st)
	}
	for hi := range inv.hosts {
		h := &inv.hosts[hi]
		empty := 0
		for gi := h.first; gi < h.first+h.n; gi++ {
			g := &inv.gpus[gi]
			if g.n < 0 || g.nv < 0 || g.vmem > inv.models[g.model].m.Memory {
				t.Fatalf("GPU %s capacity out of range: n=%d nv=%d vmem=%d", g.addr, g.n, g.nv, g.vmem)
			}
			if g.n == 0 {
				empty++
			}
		}
		if empty != h.empty || h.load < 0 {
			t.Fatalf("host %s: %d empty GPUs counted, %d there; load %d", h.name, h.empty, empty, h.load)
		}
	}
}

// TestPropertyNoOverlap places, allocates and releases at random and checks
// after every step that no two allocations share a GPU's slots and that no
// capacity goes negative; at the end, releasing everything gives back an
// empty inventory.
func TestPropertyNoOverlap(t *testing.T) {
	for seed := int64(1); seed <= 20; seed++ {
		rng := rand.New(rand.NewSource(seed))
		inv := mustInv(t, mixedHosts())
		fresh := inv.Stats()
		var live []string
		strategies := []Strategy{Pack, Spread, FirstFit}
		for step := 0; step < 300; step++ {
			if len(live) > 0 && rng.Intn(3) == 0 {
				k := rng.Intn(len(live))
				if !inv.Release(live[k]) {
					t.Fatalf("seed %d: release of %s failed", seed, live[k])
				}
				live = append(live[:k], live[k+1:]...)
			} else {
				n := propNeeds[rng.Intn(len(propNeeds))]
				p, why := inv.Place(n, PlaceOptions{Strategy: strategies[rng.Intn(3)], Now: t0, End: t0.Add(time.Duration(1+rng.Intn(8)) * time.Hour)})
				if why.OK() {
					id := fmt.Sprintf("s%d-%d", seed, step)
					if err := inv.Allocate(id, p, t0.Add(time.Hour)); err != nil {
						t.Fatalf("seed %d step %d: Place chose %v for %v but Allocate says %v", seed, step, p, n, err)
					}
					live = append(live, id)
				}
			}
			// Allocating something random by hand must either fit or be
			// refused as a whole.
			if rng.Intn(4) == 0 {
				h := inv.hosts[rng.Intn(len(inv.hosts))]
				g := inv.gpus[h.first+rng.Intn(h.n)]
				d := Device{GPU: g.addr, Kind: []gpu.Kind{gpu.KindMIG, gpu.KindVGPU, gpu.KindPassthrough}[rng.Intn(3)], Profile: []string{"1g.10gb", "3g.40gb", "1g.5gb", "2g.10gb"}[rng.Intn(4)], Start: rng.Intn(8), Type: []string{"L40S-12Q", "L40S-4Q", "A40-8Q"}[rng.Intn(3)]}
				before := len(inv.Allocations())
				id := fmt.Sprintf("x%d-%d", seed, step)
				if err := inv.Allocate(id, Placement{Host: h.name, Devices: []Device{d, d}}, time.Time{}); err == nil {
					live = append(live, id)
				} else if len(inv.Allocations()) != before {
					t.Fatalf("seed %d: a refused allocation left rows behind", seed)
				}
			}
			checkInvariants(t, inv)
		}
		for _, id := range live {
			inv.Release(id)
		}
		if got := inv.Stats(); got != fresh || len(inv.Allocations()) != 0 {
			t.Fatalf("seed %d: after releasing everything %+v, fresh %+v", seed, got, fresh)
		}
	}
}

// TestPropertyHoldsKept: whatever is placed while a hold exists, the held
// devices are still free when the hold starts (once what ends before it
// has ended): a reservation's capacity is never given to someone else.
func TestPropertyHoldsKept(t *testing.T) {
	placed, onHeld, refused, holdsMade := 0, 0, 0, 0
	defer func() {
		t.Logf("%d holds; %d placements, %d on a held GPU before the hold; %d kept off", holdsMade, placed, onHeld, refused)
		if onHeld == 0 || refused == 0 || placed == 0 {
			t.Error("the property was not exercised")
		}
	}()
	for seed := int64(1); seed <= 30; seed++ {
		rng := rand.New(rand.NewSource(seed))
		inv := mustInv(t, mixedHosts())
		// The hold: a few devices placed on an empty copy.
		scratch := inv.Clone()
		var holds []Hold
		from, to := t0.Add(2*time.Hour), t0.Add(4*time.Hour)
		for k := 0; k < 1+rng.Intn(3); k++ {
			n := propNeeds[rng.Intn(len(propNeeds))]
			if p, why := scratch.Place(n, PlaceOptions{Now: from, End: to}); why.OK() {
				scratch.Allocate(fmt.Sprint("h", k), p, to)
				holds = append(holds, Hold{ID: fmt.Sprint("h", k), Code: CodeReservation, Host: p.Host, Devices: p.Devices, From: from, To: to})
				holdsMade++
			}
		}
		heldGPU := map[string]bool{}
		for _, h := range holds {
			for _, d := range h.Devices {
				heldGPU[h.Host+"/"+d.GPU] = true
			}
		}
		ends := map[string]time.Time{}
		for step := 0; step < 120; step++ {
			n := propNeeds[rng.Intn(len(propNeeds))]
			end := t0.Add(time.Duration(15+rng.Intn(8*60)) * time.Minute)
			p, why := inv.Place(n, PlaceOptions{Now: t0, End: end, Holds: holds})
			if why.Code == CodeReservation {
				refused++
			}
			if !why.OK() {
				continue
			}
			placed++
			for _, d := range p.Devices {
				if heldGPU[p.Host+"/"+d.GPU] && !end.After(from) {
					onHeld++
				}
			}
			id := fmt.Sprint("v", step)
			if err := inv.Allocate(id, p, end); err != nil {
				t.Fatal(err)
			}
			ends[id] = end
			// At the hold's start: what ended has gone, the holds still fit.
			future := inv.Clone()
			for vid, e := range ends {
				if !e.After(from) {
					future.Release(vid)
				}
			}
			for _, h := range holds {
				if err := future.Allocate("hold:"+h.ID, Placement{Host: h.Host, Devices: h.Devices}, to); err != nil {
					t.Fatalf("seed %d step %d: placing %v (until %s) took held capacity: %v", seed, step, p, end.Format("15:04"), err)
				}
			}
		}
	}
}

// TestPropertyCycleAccounts: every request of a cycle is started, refused
// or waiting, exactly once; what starts fits together.
func TestPropertyCycleAccounts(t *testing.T) {
	for seed := int64(1); seed <= 10; seed++ {
		rng := rand.New(rand.NewSource(seed))
		inv := mustInv(t, mixedHosts())
		var q []Request
		for i := 0; i < 40; i++ {
			q = append(q, Request{ID: fmt.Sprint("r", i), User: fmt.Sprint("u", rng.Intn(5)), Need: propNeeds[rng.Intn(len(propNeeds))],
				Lease: time.Duration(1+rng.Intn(6)) * time.Hour, Submitted: t0.Add(time.Duration(i) * time.Minute), Priority: rng.Intn(3)})
		}
		q = append(q, Request{ID: "bad", Need: Need{Kind: gpu.KindMIG, Profile: "1g.10gb", Count: 500}, Lease: time.Hour})
		for _, o := range []Options{{Reserve: 0}, {Reserve: 1}, {Reserve: 1, Lookahead: 8}, {Reserve: 3, Lookahead: 8, Preempt: true}} {
			c := inv.Clone()
			d := Cycle(t0.Add(time.Hour), c, q, nil, fifo{}, o)
			seen := map[string]int{}
			for _, s := range d.Start {
				seen[s.ID]++
			}
			for _, r := range d.Refused {
				seen[r.ID]++
			}
			for id := range d.Waiting {
				seen[id]++
			}
			for _, r := range q {
				if seen[r.ID] != 1 {
					t.Fatalf("seed %d %+v: %s accounted %d times", seed, o, r.ID, seen[r.ID])
				}
			}
			if len(d.Order) != len(d.Waiting) {
				t.Fatalf("order %d, waiting %d", len(d.Order), len(d.Waiting))
			}
			checkInvariants(t, c)
		}
	}
}
