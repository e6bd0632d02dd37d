package policy

import (
	"fmt"
	"math/rand"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/gpu"
	"github.com/gpuvm/gpuvm/pkg/scheduler"
)

// BenchmarkFairshareOrder10k re-orders a queue of 10,000 waiting requests
// from 300 users by fairshare, with 2,000 VMs running and a month of decayed
// usage (target: under 50 ms).
func BenchmarkFairshareOrder10k(b *testing.B) {
	rng := rand.New(rand.NewSource(1))
	usage := NewUsage(7 * 24 * time.Hour)
	for u := 0; u < 300; u++ {
		for k := 0; k < 30; k++ {
			usage.Charge(fmt.Sprintf("u%03d", u), rng.Float64(), monday.Add(-time.Duration(rng.Intn(30*24))*time.Hour), monday.Add(-time.Duration(rng.Intn(24))*time.Hour))
		}
	}
	e, err := New(Config{Order: config.OrderFairshare, Usage: usage})
	if err != nil {
		b.Fatal(err)
	}
	q := make([]scheduler.Request, 10000)
	for i := range q {
		q[i] = scheduler.Request{ID: fmt.Sprintf("r%05d", i), User: fmt.Sprintf("u%03d", rng.Intn(300)), Priority: rng.Intn(3),
			Need: scheduler.Need{Kind: gpu.KindMIG, Profile: "1g.10gb"}, Lease: time.Hour, Submitted: monday.Add(-time.Duration(rng.Intn(3600)) * time.Second)}
	}
	run := make([]scheduler.Running, 2000)
	for i := range run {
		run[i] = scheduler.Running{Request: scheduler.Request{ID: fmt.Sprintf("vm%04d", i), User: fmt.Sprintf("u%03d", rng.Intn(300))},
			Placement: scheduler.Placement{Devices: []scheduler.Device{{Kind: gpu.KindMIG, Share: 1.0 / 7}}}, Started: monday.Add(-time.Hour), End: monday.Add(time.Hour)}
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		s := e.Begin(monday, run)
		if out := s.Order(q); len(out) != len(q) {
			b.Fatal("lost requests")
		}
	}
}

// BenchmarkAdmit10k admits 10,000 requests of 300 users against quotas and
// windows.
func BenchmarkAdmit10k(b *testing.B) {
	cfg := parse(b, quotaPolicy)
	e, _ := New(Config{Policy: &cfg.Policy, Ledger: &Ledger{}})
	q := make([]scheduler.Request, 10000)
	for i := range q {
		q[i] = scheduler.Request{ID: fmt.Sprint(i), User: fmt.Sprintf("u%03d", i%300), Group: "students", Need: scheduler.Need{Kind: gpu.KindMIG, Profile: "1g.10gb"}, Lease: time.Hour, Submitted: monday}
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		s := e.Begin(monday, nil)
		for k := range q {
			s.Admit(&q[k])
		}
	}
}
