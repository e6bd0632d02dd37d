package scheduler

import (
	"fmt"
	"math/rand"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/gpu"
)

// randomSpecs is a cluster of 1 to maxHosts hosts, each with a few GPU
// kinds in every state the configuration allows: MIG pinned or auto (some
// with a layout), equal- and mixed-size vGPU, passthrough with shared IOMMU
// groups, draining GPUs and hosts, GPUs no backend can use.
func randomSpecs(rng *rand.Rand, maxHosts int) []HostSpec {
	type kind struct {
		model string
		allow []gpu.Mode
	}
	kinds := []kind{
		{"H100 PCIe 80GB", []gpu.Mode{gpu.ModeMIG, gpu.ModeAuto, gpu.ModeVGPU, gpu.ModePassthrough}},
		{"A100 PCIe 40GB", []gpu.Mode{gpu.ModeMIG, gpu.ModeAuto, gpu.ModePassthrough}},
		{"A30", []gpu.Mode{gpu.ModeMIG, gpu.ModeAuto}},
		{"L40S", []gpu.Mode{gpu.ModeVGPU, gpu.ModeAuto, gpu.ModePassthrough}},
		{"A40", []gpu.Mode{gpu.ModeAuto, gpu.ModeVGPU}},
		{"GeForce RTX 4090", []gpu.Mode{gpu.ModeAuto, gpu.ModePassthrough}},
	}
	modes := []gpu.Mode{"", gpu.ModeIdle, gpu.ModeMIG, gpu.ModeVGPU, gpu.ModePassthrough}
	var hosts []HostSpec
	for h := 0; h < 1+rng.Intn(maxHosts); h++ {
		hs := HostSpec{Name: fmt.Sprintf("h%03d", h), Draining: rng.Intn(12) == 0}
		n := 1 + rng.Intn(8)
		// Most hosts have one board, as real ones do: buckets get large.
		home := kinds[rng.Intn(len(kinds))]
		for g := 0; g < n; g++ {
			k := home
			if rng.Intn(5) == 0 {
				k = kinds[rng.Intn(len(kinds))]
			}
			s := GPUSpec{Address: fmt.Sprintf("0000:%02x:00.0", g), Model: k.model, Allow: k.allow[rng.Intn(len(k.allow))]}
			if rng.Intn(3) == 0 {
				s.Mode = modes[rng.Intn(len(modes))]
			}
			s.MixedSize = s.Model == "L40S" && rng.Intn(3) == 0
			if s.Model == "A100 PCIe 40GB" && s.Allow == gpu.ModeMIG && rng.Intn(4) == 0 {
				s.MIGLayout = []string{"3g.20gb", "2g.10gb", "1g.5gb"}
			}
			if rng.Intn(10) == 0 {
				s.IOMMUGroup = fmt.Sprint("g", rng.Intn(2))
			}
			s.Draining = rng.Intn(15) == 0
			if rng.Intn(20) == 0 {
				s.Unavailable = []string{"the vGPU manager is down", "no MIG backend"}[rng.Intn(2)]
			}
			hs.GPUs = append(hs.GPUs, s)
		}
		hosts = append(hosts, hs)
	}
	return hosts
}

// randomDevice is a device that could be on GPU gi (a MIG instance at a
// start its table has, a vGPU type of its board, the whole GPU).
func randomDevice(rng *rand.Rand, inv *Inventory, gi int) Device {
	g := &inv.gpus[gi]
	info := inv.models[g.model]
	var ks []gpu.Kind
	if info.mt != nil {
		ks = append(ks, gpu.KindMIG)
	}
	if len(info.list) > 0 {
		ks = append(ks, gpu.KindVGPU)
	}
	ks = append(ks, gpu.KindPassthrough)
	d := Device{GPU: g.addr, Kind: ks[rng.Intn(len(ks))]}
	switch d.Kind {
	case gpu.KindMIG:
		p := info.mt.t.Profiles[rng.Intn(len(info.mt.t.Profiles))]
		d.Profile, d.Start = p.Name, p.Starts[rng.Intn(len(p.Starts))]
	case gpu.KindVGPU:
		d.Type = info.list[rng.Intn(len(info.list))].Name
		if g.vtype != "" && rng.Intn(2) == 0 {
			d.Type = g.vtype
		}
	}
	return d
}

// fillRandom allocates devices at random: each GPU gets up to five tries.
func fillRandom(rng *rand.Rand, inv *Inventory, vm *int) {
	for gi := range inv.gpus {
		host := inv.hosts[inv.gpus[gi].host].name
		for k := rng.Intn(6); k > 0; k-- {
			end := time.Time{}
			if rng.Intn(5) > 0 {
				end = t0.Add(time.Duration(30+rng.Intn(12*60)) * time.Minute)
			}
			if inv.Allocate(fmt.Sprint("vm", *vm), Placement{Host: host, Devices: []Device{randomDevice(rng, inv, gi)}}, end) == nil {
				*vm++
			}
		}
	}
}

// randomHolds are 0 to 3 holds of random devices, some not overlapping
// [now, end), some reservations, some for requests ahead in the queue.
func randomHolds(rng *rand.Rand, inv *Inventory, now time.Time) []Hold {
	var out []Hold
	for k := rng.Intn(4); k > 0; k-- {
		hi := rng.Intn(len(inv.hosts))
		h := &inv.hosts[hi]
		if h.n == 0 {
			continue
		}
		hold := Hold{ID: fmt.Sprint("b", k), Code: []Code{CodeReservation, CodeHeld}[rng.Intn(2)], Host: h.name,
			From: now.Add(time.Duration(rng.Intn(6*60)-60) * time.Minute)}
		hold.To = hold.From.Add(time.Duration(30+rng.Intn(6*60)) * time.Minute)
		for d := 1 + rng.Intn(2); d > 0; d-- {
			hold.Devices = append(hold.Devices, randomDevice(rng, inv, h.first+rng.Intn(h.n)))
		}
		out = append(out, hold)
	}
	return out
}

var equivNeeds = append(append(append([]Need(nil), propNeeds...), benchNeeds...),
	Need{Kind: gpu.KindVGPU, Type: "L40S-12Q", Count: 2}, Need{Kind: gpu.KindPassthrough, Count: 3},
	Need{Kind: gpu.KindPassthrough, Model: "L40S"}, Need{Kind: gpu.KindMIG, Profile: "1g.6gb"},
	Need{Kind: gpu.KindMIG, Profile: "2g.20gb", Count: 2}, Need{Kind: gpu.KindAny, Memory: 40 * gpu.GiB},
	Need{Kind: gpu.KindAny, Memory: 10 * gpu.GiB, Count: 2}, Need{Kind: gpu.KindVGPU, Type: "A40-48Q"},
	Need{Kind: gpu.KindMIG, Profile: "4g.20gb", Model: "A100 PCIe 40GB"},
	Need{Kind: gpu.KindMIG, Profile: "1g.10gb", Count: 3}, Need{Kind: gpu.KindMIG, Profile: "1g.5gb", Count: 4},
	Need{Kind: gpu.KindVGPU, Type: "L40S-4Q", Count: 5}, Need{Kind: gpu.KindVGPU, Type: "A40-8Q", Count: 3},
	Need{Kind: gpu.KindAny, Memory: 20 * gpu.GiB, Count: 3, Kinds: []gpu.Kind{gpu.KindMIG, gpu.KindVGPU}})

// TestPlaceMatchesReference compares Place through the GPU index with the
// look at every GPU (ref_place_test.go) on random clusters that change as
// they go (placements allocated, VMs released, clones), over random needs,
// strategies, times, holds and booked capacity: same host, same devices,
// same booking, same Reason.
func TestPlaceMatchesReference(t *testing.T) {
	defer func(n int) { indexFrom = n }(indexFrom)
	scanBelow := indexFrom
	strategies := []Strategy{Pack, Spread, FirstFit, ""}
	compared, placed, held := 0, 0, 0
	codes := map[Code]int{}
	for seed := int64(1); seed <= 150; seed++ {
		rng := rand.New(rand.NewSource(seed))
		indexFrom = 0 // odd seeds: an index even on small clusters
		if seed%2 == 0 {
			indexFrom = scanBelow
		}
		maxHosts := 6
		if seed%3 == 0 {
			maxHosts = 60
		}
		inv, err := NewInventory(randomSpecs(rng, maxHosts), nil)
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		vm := 0
		fillRandom(rng, inv, &vm)
		var live []string
		for _, a := range inv.Allocations() {
			live = append(live, a.ID)
		}
		for step := 0; step < 60; step++ {
			need := equivNeeds[rng.Intn(len(equivNeeds))]
			if rng.Intn(2) == 0 {
				need = severalNeeds[rng.Intn(len(severalNeeds))]
			}
			now := t0.Add(time.Duration(rng.Intn(4*60)) * time.Minute)
			o := PlaceOptions{Strategy: strategies[rng.Intn(len(strategies))], Now: now}
			if rng.Intn(4) > 0 {
				o.End = now.Add(time.Duration(15+rng.Intn(10*60)) * time.Minute)
			}
			if rng.Intn(2) == 0 {
				o.Holds = randomHolds(rng, inv, now)
				held += len(o.Holds)
			}
			if rng.Intn(6) == 0 {
				o.Own = randomHolds(rng, inv, now)
			}
			only := -1
			if rng.Intn(8) == 0 {
				only = rng.Intn(len(inv.hosts))
			}
			p, hold, why := inv.placeOn(need, o, only)
			rp, rhold, rwhy := inv.refPlaceOn(need, o, only)
			compared++
			codes[why.Code]++
			if !reflect.DeepEqual(p, rp) || hold != rhold || why != rwhy {
				t.Fatalf("seed %d step %d: %v %+v only %d:\n index:     %+v %v %v\n reference: %+v %v %v", seed, step, need, o, only, p, hold, why, rp, rhold, rwhy)
			}
			switch {
			case why.OK() && rng.Intn(3) > 0:
				id := fmt.Sprint("p", step)
				if err := inv.Allocate(id, p, o.End); err != nil {
					t.Fatalf("seed %d step %d: %v", seed, step, err)
				}
				live = append(live, id)
				placed++
			case len(live) > 0 && rng.Intn(3) == 0:
				k := rng.Intn(len(live))
				inv.Release(live[k])
				live = append(live[:k], live[k+1:]...)
			}
			if rng.Intn(20) == 0 {
				inv = inv.Clone()
			}
			if step%10 == 0 {
				checkIndex(t, inv)
			}
		}
		checkIndex(t, inv)
	}
	t.Logf("%d placements compared (%v), %d allocated, %d holds", compared, codes, placed, held)
	for _, c := range []Code{"", CodeNoCapacity, CodeReservation, CodeHeld, CodeDraining, CodeUnavailable, CodeNever} {
		if codes[c] == 0 {
			t.Errorf("no placement ended with code %q: the test does not cover it", c)
		}
	}
}

// checkIndex compares the GPU index with the GPUs: every plain GPU once in
// the bucket of its signature, every other one in its board's odd list.
func checkIndex(t *testing.T, inv *Inventory) {
	t.Helper()
	x := inv.idx
	if x == nil {
		if len(inv.gpus) >= indexFrom {
			t.Fatalf("%d GPUs and no index", len(inv.gpus))
		}
		return
	}
	odd := map[int]bool{}
	for mi, gs := range x.odd {
		for _, gi := range gs {
			if inv.gpus[gi].model != mi {
				t.Fatalf("GPU %d is odd under board %d, not its own", gi, mi)
			}
			odd[gi] = true
		}
	}
	members := 0
	sigs, _ := x.tab.view()
	for b := range x.head {
		prev := int32(-1)
		size := int32(0)
		for gi := x.head[b]; gi >= 0; gi = x.next[gi] {
			if x.of[gi] != int32(b) || x.prev[gi] != prev {
				t.Fatalf("bucket %d's list is broken at GPU %d", b, gi)
			}
			prev = gi
			members++
			size++
		}
		if x.size[b] != size {
			t.Fatalf("bucket %d holds %d GPUs, its size says %d", b, size, x.size[b])
		}
	}
	plain := 0
	for gi := range inv.gpus {
		g := &inv.gpus[gi]
		if !inv.plain(g) {
			if !odd[gi] || x.of[gi] != -1 {
				t.Fatalf("GPU %d is not plain but indexed as one", gi)
			}
			continue
		}
		plain++
		if b := x.of[gi]; b < 0 || sigs[b] != sigOf(g) {
			t.Fatalf("GPU %d is not in the bucket of its signature %+v", gi, sigOf(g))
		}
	}
	if members != plain {
		t.Fatalf("%d GPUs in buckets, %d plain GPUs", members, plain)
	}
}

// manySpecs is a cluster of hosts × 8 GPUs, one board per host (as
// bigCluster: H100 for MIG, L40S for vGPU with a mixed-size GPU, A100 on
// auto), where most GPUs are plain: the buckets are large and the host
// search of several devices has many hosts to leave out. A few GPUs and
// hosts drain, have a MIG layout, an IOMMU-group companion, or no backend.
func manySpecs(rng *rand.Rand, hosts int) []HostSpec {
	var out []HostSpec
	for h := 0; h < hosts; h++ {
		hs := HostSpec{Name: fmt.Sprintf("m%04d", h), Draining: rng.Intn(100) == 0}
		for g := 0; g < 8; g++ {
			s := GPUSpec{Address: fmt.Sprintf("0000:%02x:00.0", 0x10+g)}
			switch h % 3 {
			case 0:
				s.Model, s.Allow = "H100 PCIe 80GB", gpu.ModeMIG
			case 1:
				s.Model, s.Allow, s.MixedSize = "L40S", gpu.ModeVGPU, g == 7
			default:
				s.Model, s.Allow = "A100 PCIe 40GB", gpu.ModeAuto
				if rng.Intn(80) == 0 {
					s.Allow, s.MIGLayout = gpu.ModeMIG, []string{"3g.20gb", "2g.10gb", "1g.5gb"}
				}
			}
			if rng.Intn(100) == 0 {
				s.IOMMUGroup = "g0"
			}
			s.Draining = rng.Intn(150) == 0
			if rng.Intn(200) == 0 {
				s.Unavailable = "no backend"
			}
			hs.GPUs = append(hs.GPUs, s)
		}
		out = append(out, hs)
	}
	return out
}

// severalNeeds ask for several MIG instances or vGPUs on one host.
var severalNeeds = []Need{
	{Kind: gpu.KindMIG, Profile: "1g.10gb", Count: 2}, {Kind: gpu.KindMIG, Profile: "1g.10gb", Count: 5},
	{Kind: gpu.KindMIG, Profile: "3g.40gb", Count: 2}, {Kind: gpu.KindMIG, Profile: "2g.10gb", Count: 3},
	{Kind: gpu.KindMIG, Profile: "1g.5gb", Count: 4}, {Kind: gpu.KindVGPU, Type: "L40S-12Q", Count: 2},
	{Kind: gpu.KindVGPU, Type: "L40S-4Q", Count: 4}, {Kind: gpu.KindVGPU, Type: "L40S-8Q", Count: 7},
	{Kind: gpu.KindAny, Memory: 10 * gpu.GiB, Count: 2}, {Kind: gpu.KindAny, Memory: 20 * gpu.GiB, Count: 3},
}

// TestPlaceSeveralMatchesReference is TestPlaceMatchesReference for needs
// of several MIG instances or vGPUs on one host, on clusters of hundreds of
// hosts of mostly plain GPUs, filled at random as they go: the chains, the
// bounds and the pruning of index_hosts.go must choose what placeOnHost on
// every host chooses, under every strategy, with holds and without.
func TestPlaceSeveralMatchesReference(t *testing.T) {
	strategies := []Strategy{Pack, Spread, FirstFit}
	compared, placed := 0, 0
	codes := map[Code]int{}
	for seed := int64(1); seed <= 12; seed++ {
		rng := rand.New(rand.NewSource(seed))
		inv, err := NewInventory(manySpecs(rng, 60+rng.Intn(240)), nil)
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		if inv.idx == nil {
			t.Fatalf("seed %d: %d GPUs and no index", seed, len(inv.gpus))
		}
		vm := 0
		fillRandom(rng, inv, &vm)
		for step := 0; step < 40; step++ {
			need := severalNeeds[rng.Intn(len(severalNeeds))]
			now := t0.Add(time.Duration(rng.Intn(4*60)) * time.Minute)
			o := PlaceOptions{Strategy: strategies[rng.Intn(len(strategies))], Now: now}
			if rng.Intn(4) > 0 {
				o.End = now.Add(time.Duration(15+rng.Intn(10*60)) * time.Minute)
			}
			if rng.Intn(3) == 0 {
				o.Holds = randomHolds(rng, inv, now)
			}
			p, _, why := inv.placeOn(need, o, -1)
			rp, _, rwhy := inv.refPlaceOn(need, o, -1)
			compared++
			codes[why.Code]++
			if !reflect.DeepEqual(p, rp) || why != rwhy {
				t.Fatalf("seed %d step %d: %v %+v:\n index:     %+v %v\n reference: %+v %v", seed, step, need, o, p, why, rp, rwhy)
			}
			if why.OK() && rng.Intn(2) == 0 {
				if err := inv.Allocate(fmt.Sprint("p", step), p, o.End); err != nil {
					t.Fatalf("seed %d step %d: %v", seed, step, err)
				}
				placed++
			}
		}
		checkIndex(t, inv)
	}
	t.Logf("%d placements compared (%v), %d allocated", compared, codes, placed)
	if codes[""] < compared/2 {
		t.Errorf("only %d of %d placements placed: the test hardly covers the search", codes[""], compared)
	}
}

// TestClonesPlaceAtOnce: clones of one inventory share what the index's
// buckets give each need (index_evals.go) and the signature table; placed
// on from several goroutines at once (as a cycle and an estimate's replay
// are), each clone places exactly as a clone placed on alone. Run with
// -race, it also checks that the sharing is safe.
func TestClonesPlaceAtOnce(t *testing.T) {
	defer func(n int) { indexFrom = n }(indexFrom)
	indexFrom = 0
	made := func() *Inventory {
		rng := rand.New(rand.NewSource(7))
		inv, err := NewInventory(manySpecs(rng, 40), nil)
		if err != nil {
			t.Fatal(err)
		}
		vm := 0
		fillRandom(rng, inv, &vm)
		return inv
	}
	const workers, steps = 4, 200
	strategies := []Strategy{Pack, Spread, FirstFit}
	// run places steps needs on c, allocating every other one that fits
	// (new signatures: buckets the shared entries have not met), and
	// returns what it placed.
	run := func(c *Inventory, seed int64) []string {
		rng := rand.New(rand.NewSource(seed))
		var out []string
		for step := 0; step < steps; step++ {
			need := equivNeeds[rng.Intn(len(equivNeeds))]
			if rng.Intn(2) == 0 {
				need = severalNeeds[rng.Intn(len(severalNeeds))]
			}
			now := t0.Add(time.Duration(rng.Intn(4*60)) * time.Minute)
			o := PlaceOptions{Strategy: strategies[rng.Intn(len(strategies))], Now: now, End: now.Add(time.Duration(15+rng.Intn(600)) * time.Minute)}
			p, why := c.Place(need, o)
			out = append(out, fmt.Sprintf("%v %+v %v", need, p, why))
			if why.OK() && step%2 == 0 {
				if err := c.Allocate(fmt.Sprint("w", seed, "-", step), p, o.End); err != nil {
					out = append(out, err.Error())
				}
			}
		}
		return out
	}
	want := make([][]string, workers)
	for w := range workers {
		want[w] = run(made(), int64(w))
	}
	inv := made()
	got := make([][]string, workers)
	var wg sync.WaitGroup
	for w := range workers {
		c := inv.Clone()
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[w] = run(c, int64(w))
		}()
	}
	wg.Wait()
	for w := range workers {
		if !reflect.DeepEqual(got[w], want[w]) {
			for i := range got[w] {
				if i >= len(want[w]) || got[w][i] != want[w][i] {
					t.Fatalf("clone %d, step %d: placed at once with the others\n %s\nalone\n %s", w, i, got[w][i], want[w][min(i, len(want[w])-1)])
				}
			}
			t.Fatalf("clone %d placed %d, alone %d", w, len(got[w]), len(want[w]))
		}
	}
}
