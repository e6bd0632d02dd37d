package scheduler

import (
	"fmt"
	"math/rand"
	"runtime"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/gpu"
)

// bigCluster builds hosts × 8 GPUs in mixed states: a third H100 hosts in
// MIG mode, a third L40S in vGPU mode (some mixed-size), a third A100 in
// auto mode; each GPU filled at random (MIG instances at random free
// starts, vGPUs of one type, whole GPUs given away).
func bigCluster(tb testing.TB, hosts int) (*Inventory, int) {
	tb.Helper()
	rng := rand.New(rand.NewSource(42))
	var specs []HostSpec
	for h := 0; h < hosts; h++ {
		hs := HostSpec{Name: fmt.Sprintf("host%04d", h)}
		for g := 0; g < 8; g++ {
			s := GPUSpec{Address: fmt.Sprintf("0000:%02x:00.0", 0x10+g)}
			switch h % 3 {
			case 0:
				s.Model, s.Allow = "H100 PCIe 80GB", gpu.ModeMIG
			case 1:
				s.Model, s.Allow, s.MixedSize = "L40S", gpu.ModeVGPU, g == 7
			default:
				s.Model = "A100 PCIe 40GB"
			}
			hs.GPUs = append(hs.GPUs, s)
		}
		specs = append(specs, hs)
	}
	inv, err := NewInventory(specs, nil)
	if err != nil {
		tb.Fatal(err)
	}
	allocs := 0
	vtypes := []string{"L40S-4Q", "L40S-8Q", "L40S-12Q", "L40S-24Q"}
	for gi := range inv.gpus {
		g := &inv.gpus[gi]
		host := inv.hosts[g.host].name
		info := inv.models[g.model]
		end := t0.Add(time.Duration(1+rng.Intn(12)) * time.Hour)
		switch {
		case info.mt != nil && (g.allow == gpu.ModeMIG || rng.Intn(2) == 0):
			for k := rng.Intn(6); k > 0; k-- {
				pi := rng.Intn(len(info.mt.t.Profiles))
				opts := info.mt.nodes[g.node].opts[pi]
				if len(opts) == 0 {
					continue
				}
				o := opts[rng.Intn(len(opts))]
				id := fmt.Sprint("vm", allocs)
				if inv.Allocate(id, Placement{Host: host, Devices: []Device{{GPU: g.addr, Kind: gpu.KindMIG, Profile: info.mt.t.Profiles[pi].Name, Start: o.start}}}, end) == nil {
					allocs++
				}
			}
		case info.m.VGPU && g.allow != gpu.ModePassthrough && rng.Intn(3) > 0:
			typ := vtypes[rng.Intn(len(vtypes))]
			for k := rng.Intn(6); k > 0; k-- {
				if g.mixed {
					typ = vtypes[rng.Intn(len(vtypes))]
				}
				id := fmt.Sprint("vm", allocs)
				if inv.Allocate(id, Placement{Host: host, Devices: []Device{{GPU: g.addr, Kind: gpu.KindVGPU, Type: typ}}}, end) == nil {
					allocs++
				}
			}
		case rng.Intn(3) == 0:
			id := fmt.Sprint("vm", allocs)
			if inv.Allocate(id, Placement{Host: host, Devices: []Device{{GPU: g.addr, Kind: gpu.KindPassthrough}}}, end) == nil {
				allocs++
			}
		}
	}
	return inv, allocs
}

var benchNeeds = []Need{
	{Kind: gpu.KindMIG, Profile: "1g.10gb"}, {Kind: gpu.KindMIG, Profile: "3g.40gb"}, {Kind: gpu.KindMIG, Profile: "7g.80gb"},
	{Kind: gpu.KindMIG, Profile: "2g.10gb"}, {Kind: gpu.KindVGPU, Type: "L40S-12Q"}, {Kind: gpu.KindVGPU, Type: "L40S-48Q"},
	{Kind: gpu.KindPassthrough}, {Kind: gpu.KindPassthrough, Count: 4}, {Kind: gpu.KindAny, Memory: 20 << 30},
	// Several devices on one host: MIG instances, vGPUs, either.
	{Kind: gpu.KindMIG, Profile: "1g.10gb", Count: 2}, {Kind: gpu.KindMIG, Profile: "3g.40gb", Count: 2},
	{Kind: gpu.KindVGPU, Type: "L40S-12Q", Count: 2}, {Kind: gpu.KindVGPU, Type: "L40S-4Q", Count: 4},
	{Kind: gpu.KindAny, Memory: 10 << 30, Count: 2},
}

// BenchmarkInventoryMemory reports the heap the 1,000 × 8 inventory takes,
// with its devices (target, with a 10,000-request queue: under 100 MB).
func BenchmarkInventoryMemory(b *testing.B) {
	for i := 0; i < b.N; i++ {
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		inv, _ := bigCluster(b, 1000)
		q := make([]Request, 10000)
		for k := range q {
			q[k] = Request{ID: fmt.Sprintf("req%05d", k), User: fmt.Sprintf("u%03d", k%300), Group: "g", Need: benchNeeds[k%len(benchNeeds)], Lease: 2 * time.Hour, Submitted: t0.Add(time.Duration(k) * time.Second)}
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/(1<<20), "MB")
		runtime.KeepAlive(inv)
		runtime.KeepAlive(q)
	}
}

// BenchmarkCycle1000x8 times a whole cycle (EASY with lookahead) for a
// queue of 200 on the big cluster.
func BenchmarkCycle1000x8(b *testing.B) {
	inv, _ := bigCluster(b, 1000)
	var q []Request
	for k := 0; k < 200; k++ {
		q = append(q, Request{ID: fmt.Sprintf("q%d", k), User: "u", Need: benchNeeds[k%len(benchNeeds)], Lease: 2 * time.Hour, Submitted: t0})
	}
	var run []Running
	for _, a := range inv.Allocations() {
		run = append(run, Running{Request: Request{ID: a.ID}, Placement: Placement{Host: a.Host}, End: a.End})
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		Cycle(t0, inv.Clone(), q, run, fifo{}, Options{Reserve: DefaultReserve, Lookahead: DefaultLookahead})
	}
}

// BenchmarkCountFits times what GET /v1/profiles does per GPU profile to
// say what is free (CountFits up to the API's bound of 999), on 3, 1,000
// and 10,000 hosts × 8 GPUs in mixed states, each need of benchNeeds on its
// own (fits/op: what it answered).
func BenchmarkCountFits(b *testing.B) {
	for _, hosts := range []int{3, 1000, 10000} {
		b.Run(fmt.Sprintf("hosts=%d", hosts), func(b *testing.B) {
			inv, _ := bigCluster(b, hosts)
			o := PlaceOptions{Now: t0, End: t0.Add(2 * time.Hour)}
			for _, need := range benchNeeds {
				b.Run(need.String(), func(b *testing.B) {
					fits := 0
					for i := 0; i < b.N; i++ {
						fits += inv.CountFits(need, o, 999).N
					}
					b.ReportMetric(float64(fits)/float64(b.N), "fits/op")
				})
			}
		})
	}
}
