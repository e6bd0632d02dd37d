package estimate

import (
	"fmt"
	"math/rand"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/gpu"
	"github.com/gpuvm/gpuvm/pkg/policy"
	"github.com/gpuvm/gpuvm/pkg/scheduler"
)

// benchWindows is a working-day policy: interactive VMs only by day (they
// are stopped at its end), batch and interactive at night.
const benchWindows = `
policy {
  timezone = "Europe/Paris"
  window "day" {
    days        = "mon-fri"
    hours       = "09:00-18:00"
    classes     = ["interactive"]
    at_end      = "stop"
    warn_before = "15m"
  }
  window "night" {
    days    = "mon-fri"
    hours   = "18:00-09:00"
    classes = ["batch", "interactive"]
  }
}
`

// queueCase is one shape of the queue benchmarks.
type queueCase struct {
	name    string
	mixed   bool   // bigState's mixed server; else 8 MIG GPUs full of 1g slices
	order   string // the policy's queue order
	windows bool   // benchWindows, and a cycle every 15 minutes (as the server)
	// ranked: the dispatcher's ranks (State.Rank) for all but the last
	// twentieth of the queue, as gpuvmd's replay has them while creates
	// come (those since the last round unranked).
	ranked bool
	// hourly: every request a 1g.10gb for an hour and the running VMs'
	// leases ending within the hour, as the scale harness asks
	// (test/bench): all of a long queue starts within the horizon, a
	// cycle for each VM that ends.
	hourly bool
}

var queueCases = []queueCase{
	{name: "mig-fifo", order: config.OrderFIFO},
	{name: "mig-fairshare", order: config.OrderFairshare},
	{name: "mig-fairshare-ranked", order: config.OrderFairshare, ranked: true},
	{name: "mig-fifo-windows", order: config.OrderFIFO, windows: true},
	{name: "mixed-sjf-windows", mixed: true, order: config.OrderSJF, windows: true},
	{name: "mig1g-fifo-hourly", order: config.OrderFIFO, ranked: true, hourly: true},
}

// fullServer is an h100x8-like server that is full: with mixed, bigState's
// four MIG GPUs, three vGPU and one whole; else eight MIG GPUs full of
// 1g.10gb slices. The running VMs' leases end over the next three days.
func fullServer(tb testing.TB, mixed bool, rng *rand.Rand) (*scheduler.Inventory, []scheduler.Running) {
	tb.Helper()
	if mixed {
		s := bigState(tb, 0)
		for i := range s.Running {
			r := &s.Running[i]
			r.End = t0.Add(time.Duration(30+rng.Intn(72*60)) * time.Minute)
			s.Inventory.Release(r.ID)
			if err := s.Inventory.Allocate(r.ID, r.Placement, r.End); err != nil {
				tb.Fatal(err)
			}
		}
		return s.Inventory, s.Running
	}
	h := scheduler.HostSpec{Name: "h"}
	for i := 0; i < 8; i++ {
		h.GPUs = append(h.GPUs, scheduler.GPUSpec{Address: fmt.Sprintf("0000:%02x:00.0", 0x10+i), Model: "H100 PCIe 80GB", IOMMUGroup: fmt.Sprint(i), Allow: gpu.ModeMIG, Mode: gpu.ModeMIG})
	}
	inv, err := scheduler.NewInventory([]scheduler.HostSpec{h}, nil)
	if err != nil {
		tb.Fatal(err)
	}
	var run []scheduler.Running
	nd := scheduler.Need{Kind: gpu.KindMIG, Profile: "1g.10gb", Count: 1}
	for k := 0; ; k++ {
		p, why := inv.Place(nd, scheduler.PlaceOptions{Strategy: scheduler.Pack})
		if !why.OK() {
			break
		}
		id := fmt.Sprintf("run%03d", k)
		end := t0.Add(time.Duration(30+rng.Intn(72*60)) * time.Minute)
		if err := inv.Allocate(id, p, end); err != nil {
			tb.Fatal(err)
		}
		run = append(run, scheduler.Running{Request: scheduler.Request{ID: id, User: fmt.Sprintf("u%03d", k%200), Need: nd, Lease: 80 * time.Hour},
			Placement: p, Started: t0.Add(-time.Duration(1+rng.Intn(8)) * time.Hour), End: end})
	}
	return inv, run
}

// queueState is a full server and n queued requests of 200 users, with
// leases of 1 to 8 hours, under c's policy.
func queueState(tb testing.TB, c queueCase, n int) (State, Options) {
	tb.Helper()
	rng := rand.New(rand.NewSource(int64(n)))
	inv, run := fullServer(tb, c.mixed, rng)
	if c.hourly {
		for i := range run {
			r := &run[i]
			r.End = t0.Add(time.Duration(1+rng.Intn(60)) * time.Minute)
			inv.Release(r.ID)
			if err := inv.Allocate(r.ID, r.Placement, r.End); err != nil {
				tb.Fatal(err)
			}
		}
	}
	pc := policy.Config{Order: c.order}
	o := Options{Horizon: 7 * 24 * time.Hour}
	if c.windows {
		cfg, diags := config.Parse(config.Source{Name: "bench.hcl", Data: []byte(benchWindows)})
		if diags.HasErrors() {
			tb.Fatal(diags)
		}
		pc.Policy = &cfg.Policy
		o.Tick = 15 * time.Minute
	}
	eng, err := policy.New(pc)
	if err != nil {
		tb.Fatal(err)
	}
	needs := []scheduler.Need{
		{Kind: gpu.KindMIG, Profile: "1g.10gb", Count: 1},
		{Kind: gpu.KindMIG, Profile: "1g.10gb", Count: 1},
		{Kind: gpu.KindMIG, Profile: "1g.10gb", Count: 1},
		{Kind: gpu.KindMIG, Profile: "2g.20gb", Count: 1},
		{Kind: gpu.KindMIG, Profile: "3g.40gb", Count: 1},
	}
	if c.mixed {
		needs = append(needs, scheduler.Need{Kind: gpu.KindVGPU, Type: "H100-20C", Count: 1}, scheduler.Need{Kind: gpu.KindPassthrough, Count: 1})
	}
	s := State{Now: t0, Inventory: inv, Running: run, Policy: eng, Options: scheduler.DefaultOptions(policy.DefaultNotice, policy.DefaultMinRuntime),
		Extendable: func(*scheduler.Running) bool { return false }}
	for i := 0; i < n; i++ {
		r := scheduler.Request{ID: fmt.Sprintf("q%05d", i), User: fmt.Sprintf("u%03d", rng.Intn(200)), Need: needs[rng.Intn(len(needs))],
			Lease: time.Duration(1+rng.Intn(8)) * time.Hour, Submitted: t0.Add(-time.Duration(n-i) * 7 * time.Second)}
		if c.hourly {
			r.Need, r.Lease = needs[0], time.Hour
		}
		if c.windows && rng.Intn(4) == 0 {
			r.Class = config.ClassBatch
		}
		s.Queue = append(s.Queue, r)
	}
	if c.ranked {
		s.Rank = map[string]int{}
		for i, r := range s.Policy.Begin(s.Now, s.Running).Order(s.Queue[:n-n/20]) {
			s.Rank[r.ID] = i + 1
		}
	}
	return s, o
}

var queueSizes = []int{1000, 3000, 10000}

// BenchmarkQueue times the replay of a queue of 1,000, 3,000 and 10,000
// requests on a full server. Compare the sizes' ns/op for the growth:
// log(t2/t1)/log(n2/n1).
func BenchmarkQueue(b *testing.B) {
	for _, c := range queueCases {
		for _, n := range queueSizes {
			b.Run(fmt.Sprintf("%s/n=%d", c.name, n), func(b *testing.B) {
				s, o := queueState(b, c, n)
				b.ResetTimer()
				started := 0
				for i := 0; i < b.N; i++ {
					es := Queue(s, o)
					if len(es) != n {
						b.Fatalf("%d estimates of %d", len(es), n)
					}
					started = 0
					for _, e := range es {
						if e.Known() {
							started++
						}
					}
				}
				b.ReportMetric(float64(started), "started")
			})
		}
	}
}

// BenchmarkNextFree times one probe behind the queue, as GET /v1/profiles
// asks per user and profile.
func BenchmarkNextFree(b *testing.B) {
	for _, c := range queueCases[:3] {
		for _, n := range queueSizes {
			b.Run(fmt.Sprintf("%s/n=%d", c.name, n), func(b *testing.B) {
				s, o := queueState(b, c, n)
				r := scheduler.Request{User: "u007", Need: scheduler.Need{Kind: gpu.KindMIG, Profile: "1g.10gb", Count: 1}, Lease: 4 * time.Hour}
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					NextFree(s, r, o)
				}
			})
		}
	}
}
