package estimate

import (
	"fmt"
	"math/rand"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/gpu"
	"github.com/gpuvm/gpuvm/pkg/policy"
	"github.com/gpuvm/gpuvm/pkg/race"
	"github.com/gpuvm/gpuvm/pkg/scheduler"
)

// randomState is a random server (MIG, vGPU and whole GPUs), partly full,
// and a random queue under a random policy.
func randomState(t *testing.T, rng *rand.Rand) (State, Options, string) {
	t.Helper()
	h := scheduler.HostSpec{Name: "h"}
	ngpu := 2 + rng.Intn(5)
	for i := 0; i < ngpu; i++ {
		g := scheduler.GPUSpec{Address: fmt.Sprintf("0000:%02x:00.0", 0x10+i), Model: "H100 PCIe 80GB", IOMMUGroup: fmt.Sprint(i)}
		switch rng.Intn(3) {
		case 0:
			g.Allow, g.Mode = gpu.ModeMIG, gpu.ModeMIG
		case 1:
			g.Allow, g.Mode = gpu.ModeVGPU, gpu.ModeVGPU
		default:
			g.Allow = gpu.ModePassthrough
		}
		h.GPUs = append(h.GPUs, g)
	}
	inv, err := scheduler.NewInventory([]scheduler.HostSpec{h}, nil)
	if err != nil {
		t.Fatal(err)
	}
	orders := []string{config.OrderFIFO, config.OrderPriority, config.OrderFairshare, config.OrderSJF}
	order := orders[rng.Intn(len(orders))]
	pc := policy.Config{Order: order}
	o := Options{Horizon: time.Duration(12+rng.Intn(7*24)) * time.Hour}
	windows, quotas := rng.Intn(3) == 0, rng.Intn(3) == 0
	if windows || quotas {
		cfg, diags := config.Parse(config.Source{Name: "p.hcl", Data: []byte(randomPolicy(windows, quotas))})
		if diags.HasErrors() {
			t.Fatal(diags)
		}
		pc.Policy = &cfg.Policy
		if quotas {
			pc.GroupTotals = map[string]config.Quota{"lab": {GPUMemory: ptr(uint64(20 << 30))}}
		}
	}
	if windows {
		o.Tick = 15 * time.Minute
	} else if rng.Intn(3) == 0 {
		o.Tick = time.Duration(10+rng.Intn(50)) * time.Minute
	}
	if order == config.OrderFairshare && rng.Intn(2) == 0 {
		pc.Usage = policy.NewUsage(0)
		for u := 0; u < 5; u++ {
			pc.Usage.Add(fmt.Sprintf("u%d", u), float64(rng.Intn(50)), t0.Add(-time.Duration(rng.Intn(48))*time.Hour))
		}
	}
	eng, err := policy.New(pc)
	if err != nil {
		t.Fatal(err)
	}
	needs := []scheduler.Need{
		{Kind: gpu.KindMIG, Profile: "1g.10gb", Count: 1},
		{Kind: gpu.KindMIG, Profile: "2g.20gb", Count: 1},
		{Kind: gpu.KindMIG, Profile: "3g.40gb", Count: 1},
		{Kind: gpu.KindMIG, Profile: "7g.80gb", Count: 1},
		{Kind: gpu.KindVGPU, Type: "H100-20C", Count: 1},
		{Kind: gpu.KindVGPU, Type: "H100-40C", Count: 1},
		{Kind: gpu.KindPassthrough, Count: 1},
		{Kind: gpu.KindPassthrough, Count: 2},
	}
	opts := scheduler.DefaultOptions(policy.DefaultNotice, policy.DefaultMinRuntime)
	opts.Preempt = rng.Intn(2) == 0
	if rng.Intn(5) == 0 {
		opts.Lookahead = 0 // plain EASY
	}
	s := State{Now: t0, Inventory: inv, Policy: eng, Options: opts}
	if rng.Intn(2) == 0 {
		s.Extendable = func(r *scheduler.Running) bool { return r.Lease < 6*time.Hour }
	}
	user := func() string { return fmt.Sprintf("u%d", rng.Intn(8)) }
	// Running VMs: fill at random.
	for k := 0; k < 40; k++ {
		nd := needs[rng.Intn(len(needs))]
		p, why := inv.Place(nd, scheduler.PlaceOptions{Strategy: scheduler.Pack})
		if !why.OK() {
			continue
		}
		id := fmt.Sprintf("run%02d", k)
		var end time.Time
		if rng.Intn(10) > 0 {
			end = t0.Add(time.Duration(10+rng.Intn(3*24*60)) * time.Minute)
		}
		if err := inv.Allocate(id, p, end); err != nil {
			t.Fatal(err)
		}
		r := scheduler.Running{Request: scheduler.Request{ID: id, User: user(), Need: nd, Lease: time.Duration(1+rng.Intn(10)) * time.Hour,
			Preemptible: rng.Intn(3) == 0, Priority: rng.Intn(3)}, Placement: p, Started: t0.Add(-time.Duration(rng.Intn(300)) * time.Minute), End: end}
		s.Running = append(s.Running, r)
	}
	n := 1 + rng.Intn(60)
	for i := 0; i < n; i++ {
		r := scheduler.Request{ID: fmt.Sprintf("q%03d", i), User: user(), Need: needs[rng.Intn(len(needs))],
			Lease: time.Duration(1+rng.Intn(8)) * time.Hour, Priority: rng.Intn(3), Preemptible: rng.Intn(5) == 0,
			Submitted: t0.Add(-time.Duration(rng.Intn(600)) * time.Minute)}
		if rng.Intn(4) == 0 {
			r.Submitted = t0.Add(-time.Hour) // ties: the ID decides
		}
		if windows && rng.Intn(3) == 0 {
			r.Class = config.ClassBatch
			if rng.Intn(4) == 0 {
				r.Lease = 70 * time.Hour // longer than any night: refused, by night
			}
		}
		if quotas {
			switch rng.Intn(3) {
			case 0:
				r.Group, r.Groups = "students", []string{"students"}
			case 1: // the group's limits hide behind the user's
				r.Group, r.Groups = "lab", []string{"students", "lab"}
			}
		}
		if rng.Intn(8) == 0 {
			r.StartBy = t0.Add(time.Duration(rng.Intn(48*60)) * time.Minute)
		}
		if rng.Intn(30) == 0 {
			r.Lease = 0 // refused
		}
		s.Queue = append(s.Queue, r)
	}
	if rng.Intn(3) == 0 {
		s.NotBefore = map[string]time.Time{}
		for _, r := range s.Queue {
			if rng.Intn(5) == 0 {
				s.NotBefore[r.ID] = t0.Add(time.Duration(rng.Intn(48*60)-60) * time.Minute)
			}
		}
	}
	if rng.Intn(3) == 0 {
		s.Rank = map[string]int{}
		perm := rng.Perm(len(s.Queue))
		all := rng.Intn(2) == 0
		for i, r := range s.Queue {
			if all || rng.Intn(2) == 0 {
				s.Rank[r.ID] = perm[i] + 1
			}
		}
	}
	if order != config.OrderFIFO {
		s.Overtake = "requests asked later may go first"
	}
	desc := fmt.Sprintf("%d GPUs, %d running, %d queued, %s, windows %v, quotas %v, tick %v, preempt %v, lookahead %d, rank %d, notBefore %d",
		ngpu, len(s.Running), n, order, windows, quotas, o.Tick, opts.Preempt, opts.Lookahead, len(s.Rank), len(s.NotBefore))
	return s, o, desc
}

// randomPolicy is benchWindows' windows, or none, and, with quotas, small
// quotas for students (whose users' limits come before the lab's group
// total, set apart).
func randomPolicy(windows, quotas bool) string {
	p := "policy {\n  timezone = \"Europe/Paris\"\n"
	if windows {
		w := strings.TrimSpace(benchWindows)
		w = w[strings.Index(w, "window"):strings.LastIndex(w, "}")]
		p += w
	}
	if quotas {
		p += `
  group "students" {
    quota {
      vms        = 3
      gpu_memory = "60GiB"
    }
  }
  group "lab" {}
`
	}
	return p + "}\n"
}

func ptr[T any](v T) *T { return &v }

// TestQueueIsTheReference replays many random states with Queue and
// NextFree and with the reference (the replay as it was, reference_test.go):
// the estimates must be the same, to the word.
func TestQueueIsTheReference(t *testing.T) {
	if race.Enabled {
		t.Skip("one goroutine's computation, ten times slower under -race: make test runs it without")
	}
	states := 150
	if testing.Short() {
		states = 60
	}
	probes := []scheduler.Need{{Kind: gpu.KindMIG, Profile: "1g.10gb", Count: 1}, {Kind: gpu.KindPassthrough, Count: 1}, {Kind: gpu.KindVGPU, Type: "H100-20C", Count: 1}}
	for seed := int64(1); seed <= int64(states); seed++ {
		rng := rand.New(rand.NewSource(seed))
		s, o, desc := randomState(t, rng)
		want := refQueue(s, o)
		prefix := []int{64, 1, 3}[seed%3]
		got := withPrefix(prefix, func() map[string]Estimate { return Queue(s, o) })
		if !reflect.DeepEqual(got, want) {
			for id, w := range want {
				if g := got[id]; !reflect.DeepEqual(g, w) {
					t.Errorf("seed %d (%s): %s:\n got %+v\nwant %+v", seed, desc, id, g, w)
				}
			}
			if len(got) != len(want) {
				t.Errorf("seed %d (%s): %d estimates, want %d", seed, desc, len(got), len(want))
			}
			continue
		}
		r := scheduler.Request{User: fmt.Sprintf("u%d", rng.Intn(8)), Need: probes[rng.Intn(len(probes))], Lease: time.Duration(1+rng.Intn(8)) * time.Hour}
		var ge Estimate
		var gnow bool
		withPrefix(prefix, func() map[string]Estimate { ge, gnow = NextFree(s, r, o); return nil })
		we, wnow := refNextFree(s, r, o)
		if !reflect.DeepEqual(ge, we) || gnow != wnow {
			t.Errorf("seed %d (%s): NextFree %+v %v, want %+v %v", seed, desc, ge, gnow, we, wnow)
		}
	}
	if prefixCycles < 100 || shortPrefixes < 10 || refusedBehind < 5 || pickedHeads < 10 {
		t.Errorf("%d cycles kept from a prefix, %d of them from one shorter than the queue by half, %d refusals behind one, %d with requests picked behind it: the prefixes are not tested",
			prefixCycles, shortPrefixes, refusedBehind, pickedHeads)
	}
	t.Logf("%d cycles kept from a prefix, %d from one under half the queue, %d refusals behind one, %d with requests picked behind it", prefixCycles, shortPrefixes, refusedBehind, pickedHeads)
}

// prefixCycles and shortPrefixes count the cycles withPrefix saw kept from
// a prefix of the queue, and of those, from one under half of it;
// refusedBehind the refusals of requests behind the prefix; pickedHeads
// the cycles kept from a head with requests picked behind its prefix.
var prefixCycles, shortPrefixes, refusedBehind, pickedHeads int

// withPrefix runs f with the replay's first prefix set to p, counting the
// cycles run on prefixes.
func withPrefix[T any](p int, f func() T) T {
	defer func(old int) { firstPrefix, onPrefix = old, nil }(firstPrefix)
	firstPrefix = p
	onPrefix = func(p, n, refused, picked int) {
		prefixCycles++
		refusedBehind += refused
		if picked > 0 {
			pickedHeads++
		}
		if 2*p < n {
			shortPrefixes++
		}
	}
	return f()
}
