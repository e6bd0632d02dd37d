package orchestrator

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/scheduler"
)

// BenchmarkFleetDecision is a fleet leader's decision with many nodes
// registered (each a simulated l40sx4 server, as its heartbeat publishes
// it) and 100 VMs queued: reading the fleet from the database (nodes,
// live allocations, the rules) and one scheduling cycle over it. The
// claims are left out (their rate is test/fleet's TestFleetPlacementRate).
// Reported: ms per decision, and the cycle's share.
func BenchmarkFleetDecision(b *testing.B) {
	for _, hosts := range []int{3, 100, 1000} {
		b.Run(fmt.Sprintf("nodes=%d", hosts), func(b *testing.B) {
			ctx := context.Background()
			n := newFleetNode(b, "n0000", "l40sx4", nil)
			n.fleet.leader.Store(true)
			n.o.cfg.HostTimeout = time.Hour
			n.beat(b)
			for i := 1; i < hosts; i++ {
				n.beatAs(b, fmt.Sprintf("n%04d", i))
			}
			var qs []queued
			for i := range 100 {
				vm, op := n.submit("ann", "l40s-seat", fmt.Sprintf("q%03d", i))
				qs = append(qs, queued{vm, op})
			}
			cfg := n.cfg
			kinds := kindsOf(cfg, qs)
			var cycle time.Duration
			var started int
			b.ResetTimer()
			for b.Loop() {
				st, err := n.o.disp.placementState(ctx, cfg, n.st.Now(), kinds)
				if err != nil {
					b.Fatal(err)
				}
				if got := len(st.specs); got != hosts {
					b.Fatalf("the round sees %d nodes, %d are registered", got, hosts)
				}
				reqs := make([]scheduler.Request, 0, len(qs))
				for _, q := range qs {
					reqs = append(reqs, requestOf(cfg, q.vm, st.groups[q.vm.Owner]))
				}
				t0 := time.Now()
				d := scheduler.Cycle(st.now, st.inv, reqs, st.running, st.engine, n.o.cfg.Scheduler)
				cycle += time.Since(t0)
				started = len(d.Start)
			}
			// An l40sx4 holds 12 L40S-12Q: four on each of its three GPUs
			// with VFs.
			if want := min(len(qs), 12*hosts); started != want {
				b.Fatalf("the cycle starts %d of %d VMs, want %d", started, len(qs), want)
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/decision")
			b.ReportMetric(float64(cycle.Microseconds())/1000/float64(b.N), "ms/cycle")
		})
	}
}
