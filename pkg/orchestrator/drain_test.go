package orchestrator

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/gpu"
	"github.com/gpuvm/gpuvm/pkg/scheduler"
	"github.com/gpuvm/gpuvm/pkg/store"
)

func TestDrainedGPUGetsNothing(t *testing.T) {
	e := newEnv(t, "l40sx4")
	ctx := context.Background()
	o := e.orch(nil)
	// The GPUs a whole-GPU VM could get: drain them all.
	b, _ := e.l.Backend(string(gpu.KindPassthrough))
	inv, err := b.Inventory(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var free []string
	for _, g := range inv.GPUs {
		if g.Unavailable == "" {
			free = append(free, g.Address)
		}
	}
	if len(free) != 1 {
		t.Fatalf("l40sx4 has %d GPUs for passthrough, the test wants 1", len(free))
	}
	gpu := free[0]
	if err := e.st.DrainGPU(ctx, &store.GPUDrain{Host: "test-host", GPUAddress: gpu, Reason: "fan replacement", DrainedBy: "admin"}); err != nil {
		t.Fatal(err)
	}
	// A drain of the same address on another host changes nothing here.
	if err := e.st.DrainGPU(ctx, &store.GPUDrain{Host: "other-host", GPUAddress: "0000:99:00.0"}); err != nil {
		t.Fatal(err)
	}
	vm, op := e.submit("ann", "l40s-whole", "w1")
	o.Drain(ctx)
	got := e.vm(vm.ID)
	if want := "GPU " + gpu + " is drained (fan replacement)"; got.State != store.VMQueued || got.StateReason != want {
		t.Fatalf("VM on a drained GPU: %s %q, want queued %q", got.State, got.StateReason, want)
	}
	if live, _ := e.st.ListLiveAllocations(ctx, ""); len(live) != 0 {
		t.Fatalf("a drained GPU was allocated: %+v", live)
	}
	// A vGPU VM is not held back: the other L40S GPUs are not drained.
	seat, seatOp := e.submit("bob", "l40s-seat", "s1")
	o.Drain(ctx)
	if got := e.vm(seat.ID); got.State != store.VMRunning {
		t.Fatalf("vGPU VM: %s %q", got.State, got.StateReason)
	}
	e.checkRunning(seat, seatOp, o, "type='pci'")
	if got := e.vm(vm.ID); got.State != store.VMQueued {
		t.Fatalf("whole-GPU VM after another was placed: %s %q", got.State, got.StateReason)
	}

	// Undrained, it is placed at the next round.
	if was, err := e.st.UndrainGPU(ctx, "test-host", gpu); err != nil || !was {
		t.Fatalf("undrain: %v %v", was, err)
	}
	o.Drain(ctx)
	e.checkRunning(vm, op, o, "managed='yes'")
	allocs, _ := liveAllocations(ctx, o.life.st, vm.ID)
	if allocs[0].GPUAddress != gpu {
		t.Errorf("placed on %s, want %s", allocs[0].GPUAddress, gpu)
	}
}

// The scheduler keeps drained GPUs out and the reason names them, on a
// made-up host of two L40S for passthrough.
func TestDrainedGPUsAndReason(t *testing.T) {
	now := time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)
	spec := scheduler.HostSpec{Name: "h", GPUs: []scheduler.GPUSpec{
		{Address: "0000:01:00.0", Model: "L40S", Allow: gpu.ModePassthrough},
		{Address: "0000:02:00.0", Model: "L40S", Allow: gpu.ModePassthrough},
	}}
	one := map[string]store.GPUDrain{"0000:01:00.0": {GPUAddress: "0000:01:00.0"}}
	both := map[string]store.GPUDrain{"0000:01:00.0": {GPUAddress: "0000:01:00.0", Reason: "x"}, "0000:02:00.0": {GPUAddress: "0000:02:00.0"}}
	whole := scheduler.Need{Kind: gpu.KindPassthrough, Count: 1}
	two := scheduler.Need{Kind: gpu.KindPassthrough, Count: 2}
	busy := []scheduler.Allocation{{ID: "other", Host: "h", GPU: "0000:02:00.0", Kind: gpu.KindPassthrough}}
	tests := []struct {
		name    string
		need    scheduler.Need
		live    []scheduler.Allocation
		drained map[string]store.GPUDrain
		want    string
	}{
		{"nothing drained", whole, nil, nil, ""},
		{"fits elsewhere", whole, nil, one, ""},
		{"the free one drained", whole, busy, one, "GPU 0000:01:00.0 is drained"},
		{"with its reason", whole, busy, both, "GPU 0000:01:00.0 is drained (x)"},
		{"two drained", two, nil, both, "GPUs 0000:01:00.0, 0000:02:00.0 are drained"},
		{"no capacity anyway", two, busy, one, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := spec
			s.GPUs = slices.Clone(spec.GPUs)
			for i := range s.GPUs {
				_, s.GPUs[i].Draining = tc.drained[s.GPUs[i].Address]
			}
			st := &state{now: now, specs: []scheduler.HostSpec{s}, allocs: tc.live, drained: map[string]map[string]store.GPUDrain{s.Name: tc.drained}}
			inv, problems := buildInventory(st.specs, tc.live)
			if inv == nil || len(problems) > 0 {
				t.Fatal(problems)
			}
			r := scheduler.Request{ID: "vm", Need: tc.need, Lease: time.Hour}
			p, why := inv.Place(tc.need, scheduler.PlaceOptions{Now: now, End: now.Add(time.Hour)})
			if why.OK() {
				for _, d := range p.Devices {
					if _, ok := tc.drained[d.GPU]; ok {
						t.Errorf("placed on drained GPU %s", d.GPU)
					}
				}
				if tc.want != "" {
					t.Errorf("placed (%s), want the reason %q", p, tc.want)
				}
				return
			}
			got := ""
			if why.Code == scheduler.CodeDraining {
				got = drainedWhy(undrained(st, nil), &r, st)
			}
			if got != tc.want {
				t.Errorf("reason %q (scheduler: %v), want %q", got, why, tc.want)
			}
		})
	}
}
