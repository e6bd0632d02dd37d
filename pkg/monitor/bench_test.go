package monitor

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/gpus"

	"github.com/gpuvm/gpuvm/pkg/gpu"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// BenchmarkSamplingRound measures one whole sampling round as gpuvmd runs
// it every interval: read NVML (go-nvml's mock server, H100s), map every
// device to the VM holding it (live allocations, VM owners), and write the
// round's samples to SQLite in one transaction. core%@10s is the share of
// one core that costs at the default 10 s interval.
//
//	go test ./pkg/monitor -run '^$' -bench SamplingRound -benchtime 200x
func BenchmarkSamplingRound(b *testing.B) {
	for _, tc := range []struct {
		name  string
		setup func(b *testing.B, h *mockHost, st *store.Store)
	}{
		{"8gpu-56mig", func(b *testing.B, h *mockHost, st *store.Store) {
			for i, g := range h.gpus {
				g.gpm = true
				for slot := range 7 {
					gi := h.addGI(i, nvml.GPU_INSTANCE_PROFILE_1_SLICE, slot)
					g.migMem[gi] = 1 << 30
					vf := fmt.Sprintf("%s:%02x:01.%d", g.addr[:4], 0x10+i, slot)
					h.addVGPU(i, vf, "H100-1-10C", 0, gi, 0).noSamples = true
					runningVM(b, st, fmt.Sprintf("u%02d", i*7+slot), fmt.Sprintf("vm%02d", i*7+slot),
						store.SlotClaim{Kind: gpu.KindMIG, GPUAddress: g.addr, PlacementStart: slot, PlacementSize: 1}, vf)
				}
			}
		}},
		{"8gpu-64vgpu", func(b *testing.B, h *mockHost, st *store.Store) {
			for i, g := range h.gpus {
				for k := range 8 {
					vf := fmt.Sprintf("%s:%02x:01.%d", g.addr[:4], 0x10+i, k)
					h.addVGPU(i, vf, "H100-8C", 1<<30, -1, uint32(10*k))
					runningVM(b, st, fmt.Sprintf("u%02d", i*8+k), fmt.Sprintf("vm%02d", i*8+k),
						store.SlotClaim{Kind: gpu.KindVGPU, GPUAddress: g.addr, VF: vf}, vf)
				}
			}
		}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			clock := newFakeClock()
			st := newStore(b, clock)
			h := newMockHost(8, gpus.H100_SXM5_80GB)
			tc.setup(b, h, st)
			log, _ := testLog(b)
			s := NewSampler(testHost, NewNVMLSource(h), st, clock, log)
			ctx := context.Background()
			r, err := s.Sample(ctx)
			if err != nil {
				b.Fatal(err)
			}
			mapped := 0
			for _, in := range r.Instances {
				if in.VMID != "" {
					mapped++
				}
			}
			b.ResetTimer()
			start := time.Now()
			for range b.N {
				clock.Advance(10 * time.Second)
				if _, err := s.Sample(ctx); err != nil {
					b.Fatal(err)
				}
			}
			per := time.Since(start) / time.Duration(b.N)
			b.ReportMetric(float64(per)/float64(10*time.Second)*100, "core%@10s")
			b.ReportMetric(float64(mapped), "devices")
		})
	}
}
